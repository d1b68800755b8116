//! Where a HelmApp's release goes: its name and namespace, defaults applied.

use apis::helmapp::HelmApp;
use kube::ResourceExt;

/// The release a HelmApp keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub release: String,
    pub namespace: String,
    /// The cluster, as the spec names it: empty for the operator's own,
    /// else `kubeconfig:<namespace>/<secret>/<key>|` — the prefix of the
    /// target index's key, so that a release of the same name in another
    /// cluster is another release.
    pub via: String,
}

impl Target {
    /// `spec.releaseName` (default: the HelmApp's name) in
    /// `spec.targetNamespace` (default: the HelmApp's namespace).
    pub fn of(app: &HelmApp) -> Self {
        let spec = &app.spec;
        Target {
            release: if spec.release_name.is_empty() {
                app.name_any()
            } else {
                spec.release_name.clone()
            },
            namespace: if spec.target_namespace.is_empty() {
                app.namespace().unwrap_or_default()
            } else {
                spec.target_namespace.clone()
            },
            via: spec.kube_config.as_ref().map_or_else(String::new, |k| {
                format!(
                    "kubeconfig:{}/{}/{}|",
                    app.namespace().unwrap_or_default(),
                    k.secret_ref.name,
                    k.secret_ref.key
                )
            }),
        }
    }

    /// The target index's key: [`Self::via`] then [`Self::key`].
    pub fn index_key(&self) -> String {
        format!("{}{}", self.via, self.key())
    }

    /// `namespace/release`: the release in its cluster (helm's storage
    /// index, the release lock, messages).
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.release)
    }
}
