//! What `kubectl hossted` does (its command line: `crate::kubectl`): the binary as a kubectl plugin (installed, linked or
//! copied, as `kubectl-hossted` on the `PATH`). It acts with the user's
//! kubeconfig and their own rights — never the operator's.
//!
//! - `get [-A | -n NS]`: HelmAppSets with their apps as a tree, and the
//!   apps of no set (`get.rs`).
//! - `reconcile | force | reset -n NS NAME [--wait]`: sets
//!   `hossted.com/reconcile-at` (`reconcile`, `reset`) or
//!   `hossted.com/force-at` (`force`) to a fresh value and, with `--wait`,
//!   follows the status until the operator has acted on it (`ask.rs`).
//! - `diff -n NS NAME`: what the next reconcile would change, secrets
//!   masked; exit status 1 when something would (`diff.rs`).
//! - `approve -n NS NAME [--hash H] [--wait]`: approves the change waiting
//!   in `status.pendingChange` (`approve.rs`).
//! - `verify -n NS NAME`: what of the chart was verified, against what,
//!   and when; exit status 1 when it is not (`verify.rs`).
//! - `convert [FILE…]`: Flux HelmReleases as HelmApps (`crate::convert`).
//! - `ui [--port P] [--no-open]`: the web view (`crate::ui`).

pub(crate) mod approve;
pub mod args;
pub(crate) mod ask;
pub(crate) mod diff;
pub(crate) mod get;
pub(crate) mod verify;
