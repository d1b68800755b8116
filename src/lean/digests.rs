//! Secrets and ConfigMaps a HelmApp may take values from (`valuesFrom`),
//! as delivery caches them: metadata and a SHA-256 of each data key — never
//! the content, which is read only when a helm run needs it. Watched
//! without Helm's own storage (`owner!=helm`).

use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};
use sha2::{Digest, Sha256};

use crate::lean::objects::{LeanMeta, lean_meta, resource};

/// `key → hex SHA-256 of its value`.
pub type KeyDigests = BTreeMap<String, String>;

fn digests(data: BTreeMap<String, String>) -> KeyDigests {
    data.into_iter()
        .map(|(k, v)| {
            let d = Sha256::digest(v.as_bytes());
            (k, crate::lean::hex::hex(&d))
        })
        .collect()
}

/// A Secret, as digests of its keys.
#[derive(Clone, Debug)]
pub struct SecretDigests {
    pub metadata: LeanMeta,
    /// For drift (see [`super::fingerprint`]).
    pub fingerprint: crate::lean::fingerprint::Fingerprint,
    pub keys: KeyDigests,
}
resource!(SecretDigests, "Secret", "secrets", NamespaceResourceScope);

/// A ConfigMap, as digests of its keys (`data` and `binaryData`).
#[derive(Clone, Debug)]
pub struct ConfigMapDigests {
    pub metadata: LeanMeta,
    /// For drift (see [`super::fingerprint`]).
    pub fingerprint: crate::lean::fingerprint::Fingerprint,
    pub keys: KeyDigests,
}
resource!(
    ConfigMapDigests,
    "ConfigMap",
    "configmaps",
    NamespaceResourceScope
);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(deserialize_with = "lean_meta")]
    metadata: LeanMeta,
    #[serde(default)]
    data: BTreeMap<String, String>,
    #[serde(default)]
    binary_data: BTreeMap<String, String>,
}

impl<'de> Deserialize<'de> for SecretDigests {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (raw, fingerprint): (Raw, _) = crate::lean::objects::with_fingerprint(d)?;
        Ok(SecretDigests {
            fingerprint,
            metadata: raw.metadata,
            keys: digests(raw.data),
        })
    }
}

impl<'de> Deserialize<'de> for ConfigMapDigests {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (raw, fingerprint): (Raw, _) = crate::lean::objects::with_fingerprint(d)?;
        let mut all = raw.data;
        all.extend(raw.binary_data);
        Ok(ConfigMapDigests {
            fingerprint,
            metadata: raw.metadata,
            keys: digests(all),
        })
    }
}

crate::lean::fingerprint::fingerprinted!(SecretDigests, ConfigMapDigests);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_digests_of_the_values_are_kept() {
        let s: SecretDigests = serde_json::from_value(json!({
            "metadata": { "name": "vals", "namespace": "apps" },
            "data": { "values.yaml": "cGFzc3dvcmQ6IGh1bnRlcjI=", "other": "eA==" }
        }))
        .unwrap();
        assert_eq!(s.keys.len(), 2);
        assert_eq!(s.keys["values.yaml"].len(), 64);
        assert!(!format!("{s:?}").contains("cGFzc3dvcmQ6IGh1bnRlcjI="));
        let changed: SecretDigests = serde_json::from_value(json!({
            "metadata": { "name": "vals", "namespace": "apps" },
            "data": { "values.yaml": "cGFzc3dvcmQ6IGh1bnRlcjM=", "other": "eA==" }
        }))
        .unwrap();
        assert_ne!(s.keys["values.yaml"], changed.keys["values.yaml"]);
        assert_eq!(s.keys["other"], changed.keys["other"]);
        let cm: ConfigMapDigests = serde_json::from_value(json!({
            "metadata": { "name": "c", "namespace": "apps" },
            "data": { "a": "1" }, "binaryData": { "b": "AA==" }
        }))
        .unwrap();
        assert_eq!(cm.keys.keys().collect::<Vec<_>>(), ["a", "b"]);
    }
}
