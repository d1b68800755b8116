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

#[cfg(test)]
mod tests {
    use super::*;
    use apis::helmapp::{KubeConfigReference, KubeConfigSecretRef};

    fn app(ns: &str, kubeconfig: Option<(&str, &str)>) -> HelmApp {
        let mut a = HelmApp::new("web", Default::default());
        a.metadata.namespace = Some(ns.into());
        a.spec.kube_config = kubeconfig.map(|(name, key)| KubeConfigReference {
            secret_ref: KubeConfigSecretRef {
                name: name.into(),
                key: key.into(),
            },
        });
        a
    }

    #[test]
    fn a_release_in_another_cluster_is_another_release_in_the_index_only() {
        let local = Target::of(&app("team-a", None));
        let remote = Target::of(&app("team-a", Some(("prod", ""))));
        let other_key = Target::of(&app("team-a", Some(("prod", "value.yaml"))));
        let other_ns = Target::of(&app("team-b", Some(("prod", ""))));
        // The same release in its own cluster: helm's name and the storage
        // index are the same...
        assert_eq!(local.key(), remote.key());
        // ...but the target index tells each cluster apart, by the Secret
        // and key that name it and the HelmApp's namespace it is read in.
        let keys = [&local, &remote, &other_key, &other_ns].map(|t| t.index_key());
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(local.index_key(), "team-a/web");
        assert!(local.via.is_empty());
    }
}
