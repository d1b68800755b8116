//! The lean kinds the inventory caches — Namespace, Pod, Service,
//! PersistentVolumeClaim, Ingress — each deserializing only the fields the
//! collector reads (the metadata types are `objects.rs`'s).

use std::collections::BTreeMap;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use serde::{Deserialize, Deserializer};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::lean::objects::{LeanMeta, lean_meta, resource};
use crate::lean::quantity;

/// A Namespace: only its name matters.
#[derive(Clone, Debug, Deserialize)]
pub struct Namespace {
    #[serde(deserialize_with = "lean_meta")]
    pub metadata: LeanMeta,
}
resource!(Namespace, "Namespace", "namespaces", ClusterResourceScope);

/// A Pod: its containers' names and images, its controller, its phase.
#[derive(Clone, Debug)]
pub struct Pod {
    pub metadata: LeanMeta,
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
            metadata: (LeanMeta, Option<Owner>),
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

/// A Service: its first port.
#[derive(Clone, Debug)]
pub struct Service {
    pub metadata: LeanMeta,
    /// For drift (see [`super::fingerprint`]).
    pub fingerprint: crate::lean::fingerprint::Fingerprint,
    /// The first port's number; 0 when the service has no port (headless).
    pub port: i32,
}
resource!(Service, "Service", "services", NamespaceResourceScope);

impl<'de> Deserialize<'de> for Service {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta")]
            metadata: LeanMeta,
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
        let (raw, fingerprint): (Raw, _) = crate::lean::objects::with_fingerprint(d)?;
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
    pub metadata: LeanMeta,
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
            metadata: LeanMeta,
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
    pub metadata: LeanMeta,
    /// For drift (see [`super::fingerprint`]).
    pub fingerprint: crate::lean::fingerprint::Fingerprint,
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
            metadata: LeanMeta,
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
        let (raw, fingerprint): (Raw, _) = crate::lean::objects::with_fingerprint(d)?;
        Ok(Ingress {
            fingerprint,
            metadata: raw.metadata,
            hosts: raw.spec.rules.into_iter().map(|r| r.host).collect(),
            tls_hosts: raw.spec.tls.into_iter().flat_map(|t| t.hosts).collect(),
        })
    }
}

crate::lean::fingerprint::fingerprinted!(Service, Ingress);

/// [`lean_meta`], plus the controller `ownerReference`.
fn lean_meta_and_controller<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<(LeanMeta, Option<Owner>), D::Error> {
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
    let m = Meta::deserialize(d)?;
    let controller = m
        .owner_references
        .into_iter()
        .find(|o| o.controller == Some(true))
        .map(|o| Owner {
            kind: o.kind,
            name: o.name,
        });
    // A pod is no release's object (its controller is).
    let meta = LeanMeta::unreleased(
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            resource_version: m.resource_version,
            ..Default::default()
        },
        m.labels,
    );
    Ok((meta, controller))
}
