//! Kinds delivery watches for drift alone: of each object, its metadata
//! and its [`Fingerprint`] — nothing else is kept. These are the kinds
//! charts ship most beside workloads, Services and configuration; a
//! release's objects of them are watched (an edit or a deletion enqueues
//! the release at once) instead of read one by one over `spec.interval`,
//! which at a thousand releases was most of the operator's requests at
//! idle. Kinds beyond these (cluster-scoped ones among them) are still
//! polled, spread over the interval.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};

use crate::lean::fingerprint::Fingerprint;
use crate::lean::objects::{LeanMeta, lean_meta, resource, with_fingerprint};

/// A lean type of kind `$kind`: metadata and fingerprint.
macro_rules! fingerprint_only {
    ($ty:ident, $kind:literal, $group:literal, $version:literal, $plural:literal, $scope:ty) => {
        #[doc = concat!("A ", $kind, ", for drift: its metadata and fingerprint.")]
        #[derive(Clone, Debug)]
        pub struct $ty {
            pub metadata: LeanMeta,
            pub fingerprint: Fingerprint,
        }
        resource!($ty, $kind, $group, $version, $plural, $scope);

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                #[derive(Deserialize)]
                struct Raw {
                    #[serde(deserialize_with = "lean_meta")]
                    metadata: LeanMeta,
                }
                let (raw, fingerprint): (Raw, _) = with_fingerprint(d)?;
                Ok($ty {
                    metadata: raw.metadata,
                    fingerprint,
                })
            }
        }

        crate::lean::fingerprint::fingerprinted!($ty);
    };
}

fingerprint_only!(
    ServiceAccount,
    "ServiceAccount",
    "",
    "v1",
    "serviceaccounts",
    NamespaceResourceScope
);
fingerprint_only!(
    HorizontalPodAutoscaler,
    "HorizontalPodAutoscaler",
    "autoscaling",
    "v2",
    "horizontalpodautoscalers",
    NamespaceResourceScope
);
fingerprint_only!(
    PodDisruptionBudget,
    "PodDisruptionBudget",
    "policy",
    "v1",
    "poddisruptionbudgets",
    NamespaceResourceScope
);
fingerprint_only!(
    Role,
    "Role",
    "rbac.authorization.k8s.io",
    "v1",
    "roles",
    NamespaceResourceScope
);
fingerprint_only!(
    RoleBinding,
    "RoleBinding",
    "rbac.authorization.k8s.io",
    "v1",
    "rolebindings",
    NamespaceResourceScope
);
fingerprint_only!(
    NetworkPolicy,
    "NetworkPolicy",
    "networking.k8s.io",
    "v1",
    "networkpolicies",
    NamespaceResourceScope
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_metadata_and_the_fingerprint_are_kept() {
        let object = serde_json::json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": { "name": "web", "namespace": "apps",
                          "labels": { "app.kubernetes.io/instance": "web" } },
            "spec": { "minReplicas": 1, "maxReplicas": 3 },
        });
        let hpa: HorizontalPodAutoscaler = serde_json::from_value(object.clone()).unwrap();
        assert_eq!(hpa.fingerprint, Fingerprint::of(&object));
        assert_eq!(hpa.metadata.name.as_deref(), Some("web"));
        let mut edited = object;
        edited["spec"]["maxReplicas"] = 9.into();
        let edited: HorizontalPodAutoscaler = serde_json::from_value(edited).unwrap();
        assert_ne!(edited.fingerprint.digest(&[]), hpa.fingerprint.digest(&[]));
    }
}
