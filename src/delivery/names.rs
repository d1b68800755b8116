//! The names delivery writes and reads on the cluster.

pub use crate::cached::storage::{CONFIG_HASH_LABEL as HASH_LABEL, HELMAPP_UID_LABEL as UID_LABEL};

/// Held by every HelmApp that may have a release: deleting it uninstalls
/// first.
pub const FINALIZER: &str = "hossted.com/helm-uninstall";
/// Asks for a reconcile when changed (it runs helm only if needed).
pub const RECONCILE_AT: &str = "hossted.com/reconcile-at";
/// Index of release storage by `namespace/release name`.
pub const RELEASE_INDEX: &str = "release-name";
/// Index of HelmApps by what their `valuesFrom` names: `Kind/namespace/name`.
pub const VALUES_FROM_INDEX: &str = "values-from";
/// Index of HelmApps by their release: `targetNamespace/releaseName`.
pub const TARGET_INDEX: &str = "target";
/// Index of HelmApps by what they depend on: `HelmApp/namespace/name` or
/// `HelmAppSet/namespace/name`.
pub const DEPENDS_ON_INDEX: &str = "depends-on";
