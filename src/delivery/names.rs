//! The names delivery writes and reads on the cluster.

pub use crate::lean::storage::{CONFIG_HASH_LABEL as HASH_LABEL, HELMAPP_UID_LABEL as UID_LABEL};

/// Held by every HelmApp that may have a release: deleting it uninstalls
/// first.
pub const FINALIZER: &str = "hossted.com/helm-uninstall";
/// Asks for a reconcile when changed (it runs helm only if needed).
pub const RECONCILE_AT: &str = "hossted.com/reconcile-at";
/// A new value runs one upgrade with `--force`, even when nothing changed
/// (Flux's `flux reconcile --force`); each value is acted on once.
pub const FORCE_AT: &str = "hossted.com/force-at";
/// `disabled`: a chart re-published under the same version (a re-pushed
/// OCI tag) is no upgrade; its digest stays out of the config hash
/// (Flux's digest-tracking gate, per HelmApp).
pub const DIGEST_TRACKING: &str = "hossted.com/digest-tracking";
/// With `spec.approval: manual`: the `configHash` of the pending change
/// that may run (`status.pendingChange.configHash`).
pub const APPROVE: &str = "hossted.com/approve";
/// Index of release storage by `namespace/release name`.
pub const RELEASE_INDEX: &str = "release-name";
/// Index of HelmApps by what their `valuesFrom` names: `Kind/namespace/name`.
pub const VALUES_FROM_INDEX: &str = "values-from";
/// Index of HelmApps by their release: `targetNamespace/releaseName`.
pub const TARGET_INDEX: &str = "target";
/// The name of the HelmApp the operator makes for release `release` in
/// `target` (a Hosstedproject's `spec.helm` entry or platform app, in the
/// operator's namespace): `<target>-<release>-<hash8>`, cut to fit 63
/// characters. The hash of `target/release` keeps `a-b`+`c` and `a`+`b-c`
/// apart.
///
/// ```
/// use hossted_operator::delivery::names::made_app_name;
/// assert_ne!(made_app_name("a-b", "c"), made_app_name("a", "b-c"));
/// assert!(made_app_name(&"n".repeat(63), &"r".repeat(53)).len() <= 63);
/// ```
pub fn made_app_name(target: &str, release: &str) -> String {
    use sha2::Digest;
    let sum = sha2::Sha256::digest(format!("{target}/{release}").as_bytes());
    let hash = crate::lean::hex::hex(&sum[..4]);
    let stem: String = format!("{target}-{release}").chars().take(63 - 9).collect();
    format!("{}-{hash}", stem.trim_end_matches(['-', '.']))
}

/// Index of HelmApps by what they depend on: `HelmApp/namespace/name` or
/// `HelmAppSet/namespace/name`.
pub const DEPENDS_ON_INDEX: &str = "depends-on";

/// On a HelmApp a Hosstedproject made: the project's name.
pub const PROJECT_LABEL: &str = "hossted.com/project";

/// The child HelmApp name of `app` in the HelmAppSet `set`.
pub fn child_name(set: &str, app: &str) -> String {
    format!("{set}-{app}")
}
