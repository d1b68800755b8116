//! The objects the operator caches, reduced to what the collector reads.
//!
//! Each type implements `kube::Resource` for its real kind, so the generic
//! informers list and watch it like any other type, and deserializes only the
//! fields it keeps: the parser skips the rest (managedFields, specs, statuses)
//! without allocating them. A Helm release Secret is decoded while it is
//! parsed and cached as a [`ReleaseSummary`] — never as its payload.
//! (`pkg/cache/benches/store.rs` measures why: a k8s-openapi `Pod` costs
//! ~15 KB in a cache, a lean one ~1.3 KB.)

use std::borrow::Cow;
use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use serde::{Deserialize, Deserializer};

use super::helm::{ReleaseSummary, decode_release};
use super::quantity;

/// The label Helm charts put on every object of a release.
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// The label Helm charts put on objects Helm manages (value `Helm`).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// Labels kept in the cache; every other label is dropped while parsing.
const KEPT_LABELS: [&str; 5] = [INSTANCE_LABEL, MANAGED_BY_LABEL, "owner", "name", "version"];

/// Parses metadata keeping name, namespace, resourceVersion and [`KEPT_LABELS`].
fn lean_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        name: Option<String>,
        namespace: Option<String>,
        #[serde(default)]
        labels: BTreeMap<String, String>,
        resource_version: Option<String>,
    }
    let mut m = Meta::deserialize(d)?;
    m.labels.retain(|k, _| KEPT_LABELS.contains(&k.as_str()));
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        labels: (!m.labels.is_empty()).then_some(m.labels),
        resource_version: m.resource_version,
        ..Default::default()
    })
}

/// Implements `kube::Resource` for a lean type standing for a real kind.
macro_rules! resource {
    // A core (`v1`) kind.
    ($ty:ty, $kind:literal, $plural:literal, $scope:ty) => {
        resource!($ty, $kind, "", "v1", $plural, $scope);
    };
    ($ty:ty, $kind:literal, $group:literal, $version:literal, $plural:literal, $scope:ty) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;
            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// The value of label `key`, or `""`.
pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> &'a str {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
        .unwrap_or_default()
}

/// A Namespace: only its name matters.
#[derive(Clone, Debug, Deserialize)]
pub struct Namespace {
    #[serde(deserialize_with = "lean_meta")]
    pub metadata: ObjectMeta,
}
resource!(Namespace, "Namespace", "namespaces", ClusterResourceScope);

/// A Pod: its first container's image and its phase.
#[derive(Clone, Debug)]
pub struct Pod {
    pub metadata: ObjectMeta,
    /// The first container's image; empty when the pod has no container.
    pub image: String,
    /// `status.phase`; empty when unset.
    pub phase: String,
}
resource!(Pod, "Pod", "pods", NamespaceResourceScope);

impl<'de> Deserialize<'de> for Pod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta")]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: Spec,
            #[serde(default)]
            status: Status,
        }
        #[derive(Deserialize, Default)]
        struct Spec {
            #[serde(default)]
            containers: Vec<Container>,
        }
        #[derive(Deserialize)]
        struct Container {
            #[serde(default)]
            image: String,
        }
        #[derive(Deserialize, Default)]
        struct Status {
            #[serde(default)]
            phase: String,
        }
        let raw = Raw::deserialize(d)?;
        Ok(Pod {
            metadata: raw.metadata,
            image: raw
                .spec
                .containers
                .into_iter()
                .next()
                .map(|c| c.image)
                .unwrap_or_default(),
            phase: raw.status.phase,
        })
    }
}

/// A Service: its first port.
#[derive(Clone, Debug)]
pub struct Service {
    pub metadata: ObjectMeta,
    /// The first port's number; 0 when the service has no port (headless).
    pub port: i32,
}
resource!(Service, "Service", "services", NamespaceResourceScope);

impl<'de> Deserialize<'de> for Service {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta")]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: Spec,
        }
        #[derive(Deserialize, Default)]
        struct Spec {
            #[serde(default)]
            ports: Vec<Port>,
        }
        #[derive(Deserialize)]
        struct Port {
            #[serde(default)]
            port: i32,
        }
        let raw = Raw::deserialize(d)?;
        Ok(Service {
            metadata: raw.metadata,
            port: raw.spec.ports.first().map(|p| p.port).unwrap_or(0),
        })
    }
}

/// A PersistentVolumeClaim: its requested storage.
#[derive(Clone, Debug)]
pub struct PersistentVolumeClaim {
    pub metadata: ObjectMeta,
    /// `spec.resources.requests.storage` in bytes; 0 when unset or invalid.
    pub size: i64,
}
resource!(
    PersistentVolumeClaim,
    "PersistentVolumeClaim",
    "persistentvolumeclaims",
    NamespaceResourceScope
);

impl<'de> Deserialize<'de> for PersistentVolumeClaim {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta")]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: Spec,
        }
        #[derive(Deserialize, Default)]
        struct Spec {
            #[serde(default)]
            resources: Resources,
        }
        #[derive(Deserialize, Default)]
        struct Resources {
            #[serde(default)]
            requests: BTreeMap<String, String>,
        }
        let raw = Raw::deserialize(d)?;
        let size = raw
            .spec
            .resources
            .requests
            .get("storage")
            .and_then(|q| quantity::bytes(q))
            .unwrap_or(0);
        Ok(PersistentVolumeClaim {
            metadata: raw.metadata,
            size,
        })
    }
}

/// An Ingress (networking.k8s.io/v1): its first rule's host.
#[derive(Clone, Debug)]
pub struct Ingress {
    pub metadata: ObjectMeta,
    /// The first rule's host; empty when there is no rule or no host.
    pub domain: String,
}
resource!(
    Ingress,
    "Ingress",
    "networking.k8s.io",
    "v1",
    "ingresses",
    NamespaceResourceScope
);

impl<'de> Deserialize<'de> for Ingress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta")]
            metadata: ObjectMeta,
            #[serde(default)]
            spec: Spec,
        }
        #[derive(Deserialize, Default)]
        struct Spec {
            #[serde(default)]
            rules: Vec<Rule>,
        }
        #[derive(Deserialize)]
        struct Rule {
            #[serde(default)]
            host: String,
        }
        let raw = Raw::deserialize(d)?;
        Ok(Ingress {
            metadata: raw.metadata,
            domain: raw
                .spec
                .rules
                .into_iter()
                .next()
                .map(|r| r.host)
                .unwrap_or_default(),
        })
    }
}

/// The `data` of a Secret as the API serves it: base64 values. Only the
/// entry `key` is decoded and kept.
fn secret_entry(data: &BTreeMap<String, String>, key: &str) -> Option<Result<Vec<u8>, String>> {
    data.get(key).map(|v| {
        base64::engine::general_purpose::STANDARD
            .decode(v.trim())
            .map_err(|e| format!("data.{key} is not base64: {e}"))
    })
}

/// One revision of a Helm release, from its storage Secret
/// (`sh.helm.release.v1.<name>.v<N>`, label `owner=helm`) or ConfigMap.
#[derive(Clone, Debug)]
pub struct HelmRelease {
    pub metadata: ObjectMeta,
    /// The decoded release, or why it could not be decoded.
    pub release: Result<ReleaseSummary, String>,
}
resource!(HelmRelease, "Secret", "secrets", NamespaceResourceScope);

impl<'de> Deserialize<'de> for HelmRelease {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta")]
            metadata: ObjectMeta,
            #[serde(default)]
            data: BTreeMap<String, String>,
        }
        let raw = Raw::deserialize(d)?;
        let release = match secret_entry(&raw.data, "release") {
            None => Err("the Secret has no data.release".to_string()),
            Some(Err(e)) => Err(e),
            Some(Ok(payload)) => decode_release(&payload).map_err(|e| e.to_string()),
        };
        Ok(HelmRelease {
            metadata: raw.metadata,
            release,
        })
    }
}

impl HelmRelease {
    /// The release name: from the payload, else Helm's `name` label.
    pub fn release_name(&self) -> &str {
        match &self.release {
            Ok(r) => &r.name,
            Err(_) => label(&self.metadata, "name"),
        }
    }

    /// The revision: from the payload, else Helm's `version` label, else 0.
    pub fn version(&self) -> i64 {
        match &self.release {
            Ok(r) => r.version,
            Err(_) => label(&self.metadata, "version").parse().unwrap_or(0),
        }
    }
}

/// The same, stored by Helm's configmap driver: `data.release` is the
/// payload itself (ConfigMap data is not base64-encoded by the API).
#[derive(Clone, Debug)]
pub struct HelmReleaseConfigMap(pub HelmRelease);

impl<'de> Deserialize<'de> for HelmReleaseConfigMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta")]
            metadata: ObjectMeta,
            #[serde(default)]
            data: BTreeMap<String, String>,
        }
        let raw = Raw::deserialize(d)?;
        let release = match raw.data.get("release") {
            None => Err("the ConfigMap has no data.release".to_string()),
            Some(payload) => decode_release(payload.as_bytes()).map_err(|e| e.to_string()),
        };
        Ok(HelmReleaseConfigMap(HelmRelease {
            metadata: raw.metadata,
            release,
        }))
    }
}

impl kube::Resource for HelmReleaseConfigMap {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        "ConfigMap".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "configmaps".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// A Secret named `uuid` (field selector `metadata.name=uuid`): its `uuid` key.
#[derive(Clone, Debug)]
pub struct UuidSecret {
    pub metadata: ObjectMeta,
    /// `data.uuid`, when present and valid UTF-8.
    pub uuid: Option<String>,
}
resource!(UuidSecret, "Secret", "secrets", NamespaceResourceScope);

impl<'de> Deserialize<'de> for UuidSecret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta")]
            metadata: ObjectMeta,
            #[serde(default)]
            data: BTreeMap<String, String>,
        }
        let raw = Raw::deserialize(d)?;
        let uuid = secret_entry(&raw.data, "uuid")
            .and_then(Result::ok)
            .and_then(|b| String::from_utf8(b).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        Ok(UuidSecret {
            metadata: raw.metadata,
            uuid,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use serde_json::json;
    use std::io::Write;

    fn meta(name: &str) -> serde_json::Value {
        json!({
            "name": name, "namespace": "apps", "resourceVersion": "42", "uid": "u-1",
            "labels": { INSTANCE_LABEL: "web", MANAGED_BY_LABEL: "Helm", "pod-template-hash": "abc", "team": "x" },
            "annotations": { "big": "x".repeat(1000) },
            "managedFields": [{ "manager": "kubectl", "fieldsV1": { "f:metadata": {} } }]
        })
    }

    #[test]
    fn metadata_keeps_only_what_the_collector_reads() {
        let ns: Namespace = serde_json::from_value(json!({ "metadata": meta("apps") })).unwrap();
        let m = &ns.metadata;
        assert_eq!(m.name.as_deref(), Some("apps"));
        assert_eq!(m.resource_version.as_deref(), Some("42"));
        let labels: Vec<&String> = m.labels.as_ref().unwrap().keys().collect();
        assert_eq!(labels, [INSTANCE_LABEL, MANAGED_BY_LABEL]);
        assert!(m.annotations.is_none() && m.managed_fields.is_none() && m.uid.is_none());
    }

    #[test]
    fn pod_image_and_phase_and_a_pod_without_containers() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": meta("web-0"),
            "spec": { "containers": [{ "name": "a", "image": "nginx:1" }, { "name": "b", "image": "sidecar:2" }] },
            "status": { "phase": "Running", "podIP": "10.0.0.1" }
        }))
        .unwrap();
        assert_eq!((p.image.as_str(), p.phase.as_str()), ("nginx:1", "Running"));
        let empty: Pod =
            serde_json::from_value(json!({ "metadata": meta("x"), "spec": { "containers": [] } }))
                .unwrap();
        assert_eq!((empty.image.as_str(), empty.phase.as_str()), ("", ""));
    }

    #[test]
    fn service_first_port_and_headless_service_without_ports() {
        let s: Service = serde_json::from_value(json!({
            "metadata": meta("web"), "spec": { "ports": [{ "port": 80 }, { "port": 443 }] }
        }))
        .unwrap();
        assert_eq!(s.port, 80);
        let headless: Service = serde_json::from_value(
            json!({ "metadata": meta("h"), "spec": { "clusterIP": "None" } }),
        )
        .unwrap();
        assert_eq!(headless.port, 0);
    }

    #[test]
    fn pvc_size_in_bytes_and_unset() {
        let p: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": meta("data"), "spec": { "resources": { "requests": { "storage": "8Gi" } } }
        }))
        .unwrap();
        assert_eq!(p.size, 8_589_934_592);
        let unset: PersistentVolumeClaim =
            serde_json::from_value(json!({ "metadata": meta("d"), "spec": {} })).unwrap();
        assert_eq!(unset.size, 0);
    }

    #[test]
    fn ingress_first_host_and_default_backend_only() {
        let i: Ingress = serde_json::from_value(json!({
            "metadata": meta("web"), "spec": { "rules": [{ "host": "a.example.com" }, { "host": "b.example.com" }] }
        }))
        .unwrap();
        assert_eq!(i.domain, "a.example.com");
        let no_rules: Ingress = serde_json::from_value(json!({
            "metadata": meta("d"), "spec": { "defaultBackend": { "service": { "name": "web", "port": { "number": 80 } } } }
        }))
        .unwrap();
        assert_eq!(no_rules.domain, "");
    }

    fn b64(b: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    /// A release Secret as the API serves it: data values are base64 of
    /// Helm's own base64(gzip(JSON)).
    fn release_secret(payload_json: &str) -> serde_json::Value {
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(payload_json.as_bytes()).unwrap();
        let helm = b64(&gz.finish().unwrap());
        json!({
            "metadata": { "name": "sh.helm.release.v1.web.v2", "namespace": "apps",
                          "labels": { "owner": "helm", "name": "web", "version": "2", "status": "deployed" } },
            "type": "helm.sh/release.v1",
            "data": { "release": b64(helm.as_bytes()) }
        })
    }

    #[test]
    fn a_helm_release_secret_is_cached_decoded() {
        let payload = json!({
            "name": "web", "namespace": "apps", "version": 2,
            "info": { "status": "deployed", "last_deployed": "2024-02-28T01:32:37.338988+05:30" },
            "chart": { "metadata": { "name": "nginx", "appVersion": "1.27" } },
            "manifest": "labels:\n  hossted_helm: \"true\"\n"
        });
        let r: HelmRelease = serde_json::from_value(release_secret(&payload.to_string())).unwrap();
        let s = r.release.as_ref().unwrap();
        assert_eq!(
            (s.name.as_str(), s.version, s.chart.as_str()),
            ("web", 2, "nginx")
        );
        assert!(s.hossted_helm);
        assert_eq!(
            r.metadata.labels.as_ref().unwrap().get("status"),
            None,
            "labels are trimmed"
        );
    }

    #[test]
    fn a_corrupt_helm_release_secret_is_cached_with_its_error() {
        let mut secret = release_secret("{}");
        secret["data"]["release"] = json!(b64(b"H4sIAAAAAAAA/garbage"));
        let r: HelmRelease = serde_json::from_value(secret).unwrap();
        assert!(r.release.is_err());
        // Name and revision still come from Helm's labels.
        assert_eq!((r.release_name(), r.version()), ("web", 2));
        let mut missing = release_secret("{}");
        missing["data"] = json!({});
        let r: HelmRelease = serde_json::from_value(missing).unwrap();
        assert_eq!(r.release.unwrap_err(), "the Secret has no data.release");
    }

    #[test]
    fn the_uuid_secret_yields_its_uuid() {
        let s: UuidSecret = serde_json::from_value(json!({
            "metadata": { "name": "uuid", "namespace": "apps" },
            "data": { "uuid": b64(b"0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30\n") }
        }))
        .unwrap();
        assert_eq!(
            s.uuid.as_deref(),
            Some("0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30")
        );
        let none: UuidSecret =
            serde_json::from_value(json!({ "metadata": { "name": "uuid" }, "data": {} })).unwrap();
        assert_eq!(none.uuid, None);
    }
}
