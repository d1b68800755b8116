//! Where a HelmApp's release goes: its name and namespace, defaults applied.

use apis::helmapp::HelmApp;
use kube::ResourceExt;

/// The release a HelmApp keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub release: String,
    pub namespace: String,
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
        }
    }

    /// `namespace/release`: the key of the target index and of helm's
    /// release lock.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.release)
    }
}
