//! What the HelmApp controller asks of helm, as a trait: the runner
//! ([`Helm`], the one place a helm process starts) in the operator, a
//! scripted stand-in in act's unit tests — so each action is tested as a
//! table, every end of a run included, without a control plane or a helm
//! binary.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;

use crate::delivery::helm::{
    GetManifest, Helm, HelmError, Released, Rendered, Rollback, Test, Uninstall, Upgrade,
};

/// A helm run under way.
pub type Run<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// helm's runs, as [`Helm`] has them: `None` is a run that did not start
/// because another holds the release (or the runner is shutting down).
pub trait HelmRuns: Send + Sync {
    fn upgrade<'a>(&'a self, u: &'a Upgrade<'a>) -> Run<'a, Option<Result<Released, HelmError>>>;
    fn uninstall<'a>(&'a self, u: &'a Uninstall<'a>) -> Run<'a, Option<Result<(), HelmError>>>;
    fn rollback<'a>(&'a self, r: &'a Rollback<'a>) -> Run<'a, Option<Result<(), HelmError>>>;
    fn test<'a>(&'a self, t: &'a Test<'a>) -> Run<'a, Option<Result<(), HelmError>>>;
    /// A dry run of `u`: what it would apply.
    fn render<'a>(&'a self, u: &'a Upgrade<'a>) -> Run<'a, Result<Rendered, HelmError>>;
    /// The manifest of the release's newest revision (empty: no release).
    fn manifest<'a>(&'a self, g: &'a GetManifest<'a>) -> Run<'a, Result<String, HelmError>>;
    /// The chart's `crds/`, as YAML.
    fn show_crds<'a>(&'a self, chart: &'a Path) -> Run<'a, Result<String, HelmError>>;
    /// Whether a run of ours holds `namespace/release` now.
    fn is_busy(&self, namespace: &str, release: &str) -> bool;
    /// When the last run of ours on `namespace/release` ended.
    fn last_ended(&self, namespace: &str, release: &str) -> Option<chrono::DateTime<chrono::Utc>>;
}

impl HelmRuns for Helm {
    fn upgrade<'a>(&'a self, u: &'a Upgrade<'a>) -> Run<'a, Option<Result<Released, HelmError>>> {
        Box::pin(Helm::upgrade(self, u))
    }
    fn uninstall<'a>(&'a self, u: &'a Uninstall<'a>) -> Run<'a, Option<Result<(), HelmError>>> {
        Box::pin(Helm::uninstall(self, u))
    }
    fn rollback<'a>(&'a self, r: &'a Rollback<'a>) -> Run<'a, Option<Result<(), HelmError>>> {
        Box::pin(Helm::rollback(self, r))
    }
    fn test<'a>(&'a self, t: &'a Test<'a>) -> Run<'a, Option<Result<(), HelmError>>> {
        Box::pin(Helm::test(self, t))
    }
    fn render<'a>(&'a self, u: &'a Upgrade<'a>) -> Run<'a, Result<Rendered, HelmError>> {
        Box::pin(Helm::render(self, u))
    }
    fn manifest<'a>(&'a self, g: &'a GetManifest<'a>) -> Run<'a, Result<String, HelmError>> {
        Box::pin(Helm::manifest(self, g))
    }
    fn show_crds<'a>(&'a self, chart: &'a Path) -> Run<'a, Result<String, HelmError>> {
        Box::pin(Helm::show_crds(self, chart))
    }
    fn is_busy(&self, namespace: &str, release: &str) -> bool {
        Helm::is_busy(self, namespace, release)
    }
    fn last_ended(&self, namespace: &str, release: &str) -> Option<chrono::DateTime<chrono::Utc>> {
        Helm::last_ended(self, namespace, release)
    }
}
