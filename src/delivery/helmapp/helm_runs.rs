//! What the HelmApp controller asks of helm, as a trait: the runner
//! ([`Helm`], the one place a helm process starts) in the operator, a
//! scripted stand-in in act's unit tests — so each action is tested as a
//! table, every end of a run included, without a control plane or a helm
//! binary.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;

use crate::delivery::helm::runner::{On, RemoteRun};
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
        Helm::is_busy(self, On::Own, namespace, release)
    }
    fn last_ended(&self, namespace: &str, release: &str) -> Option<chrono::DateTime<chrono::Utc>> {
        Helm::last_ended(self, On::Own, namespace, release)
    }
}

/// helm's runs on a remote cluster (docs/remote-clusters.md): the one
/// runner — its slots shared with every cluster — given that cluster's
/// kubeconfig and asking that cluster's reachability before each start.
pub struct RemoteHelm {
    pub helm: std::sync::Arc<Helm>,
    pub run: RemoteRun,
}

impl HelmRuns for RemoteHelm {
    fn upgrade<'a>(&'a self, u: &'a Upgrade<'a>) -> Run<'a, Option<Result<Released, HelmError>>> {
        Box::pin(self.helm.upgrade_on(u, On::Remote(&self.run)))
    }
    fn uninstall<'a>(&'a self, u: &'a Uninstall<'a>) -> Run<'a, Option<Result<(), HelmError>>> {
        Box::pin(self.helm.uninstall_on(u, On::Remote(&self.run)))
    }
    fn rollback<'a>(&'a self, r: &'a Rollback<'a>) -> Run<'a, Option<Result<(), HelmError>>> {
        Box::pin(self.helm.rollback_on(r, On::Remote(&self.run)))
    }
    fn test<'a>(&'a self, t: &'a Test<'a>) -> Run<'a, Option<Result<(), HelmError>>> {
        Box::pin(self.helm.test_on(t, On::Remote(&self.run)))
    }
    fn render<'a>(&'a self, u: &'a Upgrade<'a>) -> Run<'a, Result<Rendered, HelmError>> {
        Box::pin(self.helm.render_on(u, On::Remote(&self.run)))
    }
    fn manifest<'a>(&'a self, g: &'a GetManifest<'a>) -> Run<'a, Result<String, HelmError>> {
        Box::pin(self.helm.manifest_on(g, On::Remote(&self.run)))
    }
    fn show_crds<'a>(&'a self, chart: &'a Path) -> Run<'a, Result<String, HelmError>> {
        Box::pin(self.helm.show_crds(chart))
    }
    fn is_busy(&self, namespace: &str, release: &str) -> bool {
        self.helm.is_busy(On::Remote(&self.run), namespace, release)
    }
    fn last_ended(&self, namespace: &str, release: &str) -> Option<chrono::DateTime<chrono::Utc>> {
        self.helm
            .last_ended(On::Remote(&self.run), namespace, release)
    }
}
