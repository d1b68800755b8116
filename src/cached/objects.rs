//! The objects the operator caches, reduced to what the collector reads.
//!
//! Each type implements `kube::Resource` for its real kind, so the generic
//! informers list and watch it like any other type, and deserializes only the
//! fields it keeps: the parser skips the rest (managedFields, specs, statuses)
//! without allocating them. A Helm release Secret is decoded while it is
//! parsed and cached as a [`ReleaseSummary`] — never as its payload.
//! (`pkg/cache/benches/store.rs` measures why: a k8s-openapi `Pod` costs
//! ~15 KB in a cache, a lean one ~1.3 KB.)

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use serde::{Deserialize, Deserializer};

use super::quantity;

/// The label Helm charts put on every object of a release.
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// The label Helm charts put on objects Helm manages (value `Helm`).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// Labels kept in the cache; every other label is dropped while parsing.
/// (The last two: what delivery writes on a release's storage.)
const KEPT_LABELS: [&str; 7] = [
    INSTANCE_LABEL,
    MANAGED_BY_LABEL,
    "owner",
    "name",
    "version",
    "hossted.com/config-hash",
    "hossted.com/helmapp-uid",
];

/// Parses metadata keeping name, namespace, resourceVersion, generation and
/// [`KEPT_LABELS`].
pub(super) fn lean_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let mut meta = lean_meta_with_uid(d)?;
    meta.uid = None;
    Ok(meta)
}

/// [`lean_meta`], plus the UID — for an object an Event may have to be
/// about (Events are matched to objects by UID); the caller drops it
/// when no Event can follow, so that the cache does not keep it.
pub(super) fn lean_meta_with_uid<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        name: Option<String>,
        namespace: Option<String>,
        #[serde(default)]
        labels: BTreeMap<String, String>,
        resource_version: Option<String>,
        generation: Option<i64>,
        uid: Option<String>,
    }
    let mut m = Meta::deserialize(d)?;
    m.labels.retain(|k, _| KEPT_LABELS.contains(&k.as_str()));
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        labels: (!m.labels.is_empty()).then_some(m.labels),
        resource_version: m.resource_version,
        generation: m.generation,
        uid: m.uid,
        ..Default::default()
    })
}

/// Reads `T` from `d` through a [`serde_json::Value`], and the
/// [`Fingerprint`](super::fingerprint::Fingerprint) of it: for the kinds
/// whose drift delivery notices (one parse; the value lives only while
/// the object is read).
pub(super) fn with_fingerprint<'de, D, T>(
    d: D,
) -> Result<(T, super::fingerprint::Fingerprint), D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let value = serde_json::Value::deserialize(d)?;
    let fingerprint = super::fingerprint::Fingerprint::of(&value);
    let raw = T::deserialize(value).map_err(serde::de::Error::custom)?;
    Ok((raw, fingerprint))
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
            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
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
pub(super) use resource;

/// How objects of Helm releases are watched: label
/// `app.kubernetes.io/managed-by=Helm` (API.md's membership rule), so the
/// caches and their events stay proportional to releases. One informer per
/// kind, shared by the controllers that ask with these options.
pub fn managed_by_helm_options<K>() -> cache::InformerOptions<K> {
    cache::InformerOptions::default().labels(&format!("{MANAGED_BY_LABEL}=Helm"))
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

/// A Pod: its containers' names and images, its controller, its phase.
#[derive(Clone, Debug)]
pub struct Pod {
    pub metadata: ObjectMeta,
    /// `spec.containers`, in order (names and images only).
    pub containers: Vec<Container>,
    /// The controller `ownerReference` (e.g. its ReplicaSet or
    /// StatefulSet): the workload vulnerability scanners report on.
    pub controller: Option<Owner>,
    /// `status.phase`; empty when unset.
    pub phase: String,
}
resource!(Pod, "Pod", "pods", NamespaceResourceScope);

/// A container of a [`Pod`].
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Container {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub image: String,
}

/// An `ownerReference`: the owner's kind and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub kind: String,
    pub name: String,
}

impl Pod {
    /// The first container's image; empty when the pod has no container.
    pub fn image(&self) -> &str {
        self.containers
            .first()
            .map(|c| c.image.as_str())
            .unwrap_or_default()
    }
}

impl<'de> Deserialize<'de> for Pod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta_and_controller")]
            metadata: (ObjectMeta, Option<Owner>),
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
        #[derive(Deserialize, Default)]
        struct Status {
            #[serde(default)]
            phase: String,
        }
        let raw = Raw::deserialize(d)?;
        let (metadata, controller) = raw.metadata;
        Ok(Pod {
            metadata,
            containers: raw.spec.containers,
            controller,
            phase: raw.status.phase,
        })
    }
}

/// [`lean_meta`], plus the controller `ownerReference`.
fn lean_meta_and_controller<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<(ObjectMeta, Option<Owner>), D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        name: Option<String>,
        namespace: Option<String>,
        #[serde(default)]
        labels: BTreeMap<String, String>,
        resource_version: Option<String>,
        #[serde(default)]
        owner_references: Vec<OwnerRef>,
    }
    #[derive(Deserialize)]
    struct OwnerRef {
        #[serde(default)]
        kind: String,
        #[serde(default)]
        name: String,
        #[serde(default)]
        controller: Option<bool>,
    }
    let mut m = Meta::deserialize(d)?;
    m.labels.retain(|k, _| KEPT_LABELS.contains(&k.as_str()));
    let controller = m
        .owner_references
        .into_iter()
        .find(|o| o.controller == Some(true))
        .map(|o| Owner {
            kind: o.kind,
            name: o.name,
        });
    let meta = ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        labels: (!m.labels.is_empty()).then_some(m.labels),
        resource_version: m.resource_version,
        ..Default::default()
    };
    Ok((meta, controller))
}

/// A Service: its first port.
#[derive(Clone, Debug)]
pub struct Service {
    pub metadata: ObjectMeta,
    /// For drift (see [`super::fingerprint`]).
    pub fingerprint: super::fingerprint::Fingerprint,
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
        let (raw, fingerprint): (Raw, _) = super::objects::with_fingerprint(d)?;
        Ok(Service {
            fingerprint,
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

/// An Ingress (networking.k8s.io/v1): its rules' hosts and its TLS hosts.
#[derive(Clone, Debug)]
pub struct Ingress {
    pub metadata: ObjectMeta,
    /// For drift (see [`super::fingerprint`]).
    pub fingerprint: super::fingerprint::Fingerprint,
    /// The rules' hosts, in order (a rule without a host gives `""`).
    pub hosts: Vec<String>,
    /// The hosts `spec.tls` covers.
    pub tls_hosts: Vec<String>,
}
resource!(
    Ingress,
    "Ingress",
    "networking.k8s.io",
    "v1",
    "ingresses",
    NamespaceResourceScope
);

impl Ingress {
    /// The first rule's host; empty when there is no rule or no host.
    pub fn domain(&self) -> &str {
        self.hosts.first().map(String::as_str).unwrap_or_default()
    }
}

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
            #[serde(default)]
            tls: Vec<Tls>,
        }
        #[derive(Deserialize)]
        struct Rule {
            #[serde(default)]
            host: String,
        }
        #[derive(Deserialize)]
        struct Tls {
            #[serde(default)]
            hosts: Vec<String>,
        }
        let (raw, fingerprint): (Raw, _) = super::objects::with_fingerprint(d)?;
        Ok(Ingress {
            fingerprint,
            metadata: raw.metadata,
            hosts: raw.spec.rules.into_iter().map(|r| r.host).collect(),
            tls_hosts: raw.spec.tls.into_iter().flat_map(|t| t.hosts).collect(),
        })
    }
}

pub use super::storage::{HelmRelease, HelmReleaseConfigMap, UuidSecret};

#[cfg(test)]
mod tests;
