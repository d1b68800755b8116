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
use serde::{Deserialize, Deserializer};

/// The label Helm charts put on every object of a release.
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// The label Helm charts put on objects Helm manages (value `Helm`).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// Labels kept in the cache; every other label is dropped while parsing.
/// (The last two: what delivery writes on a release's storage.)
const KEPT_LABELS: [&str; 8] = [
    INSTANCE_LABEL,
    MANAGED_BY_LABEL,
    "owner",
    "name",
    "version",
    "status",
    "hossted.com/config-hash",
    "hossted.com/helmapp-uid",
];

/// The labels of [`KEPT_LABELS`] an object has, compactly: a label map
/// costs ~600 bytes even for one label (a B-tree node has room for eleven),
/// ~75 MB across the 125,000 labelled objects of 10,000 releases; this
/// costs ~24 bytes a label plus its value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeptLabels(Box<[(u8, Box<str>)]>);

impl KeptLabels {
    /// Keeps the labels of `labels` that are [`KEPT_LABELS`].
    pub fn keep(labels: BTreeMap<String, String>) -> Self {
        let kept: Vec<(u8, Box<str>)> = labels
            .into_iter()
            .filter_map(|(k, v)| {
                let at = KEPT_LABELS.iter().position(|kept| *kept == k)?;
                Some((at as u8, v.into_boxed_str()))
            })
            .collect();
        KeptLabels(kept.into_boxed_slice())
    }

    /// The value of label `key`, if it is kept and set.
    pub fn get(&self, key: &str) -> Option<&str> {
        let at = KEPT_LABELS.iter().position(|kept| *kept == key)?;
        self.0
            .iter()
            .find(|(k, _)| usize::from(*k) == at)
            .map(|(_, v)| &**v)
    }

    /// The labels kept, as (key, value).
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.0
            .iter()
            .map(|(k, v)| (KEPT_LABELS[usize::from(*k)], &**v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Keeps only the labels `keep` says yes to.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        let kept: Vec<(u8, Box<str>)> = std::mem::take(&mut self.0)
            .into_vec()
            .into_iter()
            .filter(|(k, _)| keep(KEPT_LABELS[usize::from(*k)]))
            .collect();
        self.0 = kept.into_boxed_slice();
    }
}

/// An object's metadata as cached: k8s-openapi's `ObjectMeta` (what
/// `kube::Resource` hands out) without its label map, and the labels kept
/// beside it as [`KeptLabels`]. Dereferences to the `ObjectMeta`, so
/// `obj.metadata.name` reads as usual; read labels with [`LeanMeta::label`]
/// (`obj.meta().labels` is always `None`).
#[derive(Clone, Debug, Default)]
pub struct LeanMeta {
    meta: ObjectMeta,
    labels: KeptLabels,
    /// `namespace/name` of the Helm release that applied the object, from
    /// the annotations helm puts on every object it applies (charts need
    /// not set the instance label); `None` without them.
    helm_release: Option<Box<str>>,
}

impl LeanMeta {
    /// The metadata of an object that belongs to no release itself (a
    /// pod: its controller does), with the labels worth keeping.
    pub(super) fn unreleased(meta: ObjectMeta, labels: BTreeMap<String, String>) -> LeanMeta {
        LeanMeta {
            meta,
            labels: KeptLabels::keep(labels),
            helm_release: None,
        }
    }

    /// The value of label `key` (one of [`KEPT_LABELS`]), or `""`.
    pub fn label(&self, key: &str) -> &str {
        self.labels.get(key).unwrap_or_default()
    }

    /// The labels kept.
    pub fn labels(&self) -> &KeptLabels {
        &self.labels
    }

    /// The labels kept, to drop some.
    pub fn labels_mut(&mut self) -> &mut KeptLabels {
        &mut self.labels
    }

    /// `namespace/name` of the Helm release that applied the object, by
    /// helm's `meta.helm.sh/release-{name,namespace}` annotations.
    pub fn helm_release(&self) -> Option<&str> {
        self.helm_release.as_deref()
    }
}

/// From a whole `ObjectMeta` (tests build objects so): its labels move to
/// [`KeptLabels`].
impl From<ObjectMeta> for LeanMeta {
    fn from(mut meta: ObjectMeta) -> Self {
        let labels = KeptLabels::keep(meta.labels.take().unwrap_or_default());
        let helm_release = meta.annotations.as_ref().and_then(|a| {
            HelmAnnotations::release(a.get(RELEASE_NAME)?, a.get(RELEASE_NAMESPACE)?)
        });
        LeanMeta {
            meta,
            labels,
            helm_release,
        }
    }
}

impl std::ops::Deref for LeanMeta {
    type Target = ObjectMeta;
    fn deref(&self) -> &ObjectMeta {
        &self.meta
    }
}

impl std::ops::DerefMut for LeanMeta {
    fn deref_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// A cached object whose labels can be read (each lean type: its
/// `ObjectMeta` has none, see [`LeanMeta`]).
pub trait Labelled {
    fn lean_meta(&self) -> &LeanMeta;

    /// The value of label `key` (one of [`KEPT_LABELS`]), or `""`.
    fn label(&self, key: &str) -> &str {
        self.lean_meta().label(key)
    }
}

/// Parses metadata keeping name, namespace, resourceVersion, generation and
/// [`KEPT_LABELS`].
pub(super) fn lean_meta<'de, D: Deserializer<'de>>(d: D) -> Result<LeanMeta, D::Error> {
    let mut meta = lean_meta_with_uid(d)?;
    meta.uid = None;
    Ok(meta)
}

/// [`lean_meta`], plus the UID — for an object an Event may have to be
/// about (Events are matched to objects by UID); the caller drops it
/// when no Event can follow, so that the cache does not keep it.
pub(super) fn lean_meta_with_uid<'de, D: Deserializer<'de>>(d: D) -> Result<LeanMeta, D::Error> {
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
        #[serde(default)]
        annotations: HelmAnnotations,
    }
    let m = Meta::deserialize(d)?;
    let helm_release = match (&m.annotations.name, &m.annotations.namespace) {
        (Some(name), Some(namespace)) => HelmAnnotations::release(name, namespace),
        _ => None,
    };
    Ok(LeanMeta {
        meta: ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            resource_version: m.resource_version,
            generation: m.generation,
            uid: m.uid,
            ..Default::default()
        },
        labels: KeptLabels::keep(m.labels),
        helm_release,
    })
}

/// Helm's annotation naming the release that applied an object.
const RELEASE_NAME: &str = "meta.helm.sh/release-name";
/// Helm's annotation naming that release's namespace.
const RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";

/// The two annotations of an object's that name its Helm release; every
/// other annotation is skipped while parsing, never allocated.
#[derive(Default, Deserialize)]
struct HelmAnnotations {
    #[serde(rename = "meta.helm.sh/release-name")]
    name: Option<String>,
    #[serde(rename = "meta.helm.sh/release-namespace")]
    namespace: Option<String>,
}

impl HelmAnnotations {
    /// `namespace/name`, when both are set and could name a release: a
    /// release name (at most 53 characters) in a namespace (at most 63).
    /// Anything longer names none, and is not kept — whoever may label an
    /// object may write annotations of any size.
    fn release(name: &str, namespace: &str) -> Option<Box<str>> {
        (!name.is_empty() && name.len() <= 53 && !namespace.is_empty() && namespace.len() <= 63)
            .then(|| format!("{namespace}/{name}").into_boxed_str())
    }
}

/// Reads `T` from `d` through a [`serde_json::Value`], and the
/// [`Fingerprint`](super::fingerprint::Fingerprint) of it: for the kinds
/// whose drift delivery notices (one parse; the value lives only while
/// the object is read, unless a run of ours is in flight:
/// [`super::recent`]).
pub(super) fn with_fingerprint<'de, D, T>(
    d: D,
) -> Result<(T, crate::lean::fingerprint::Fingerprint), D::Error>
where
    D: Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let value = serde_json::Value::deserialize(d)?;
    let mut fingerprint = crate::lean::fingerprint::Fingerprint::of(&value);
    if !crate::lean::recent::wanted(&value) || is_helm_storage(&value) {
        let raw = T::deserialize(value).map_err(serde::de::Error::custom)?;
        return Ok((raw, fingerprint));
    }
    // A run of ours is in flight for its release: the object is kept
    // whole a while, for the record after it (`super::recent`).
    let raw = T::deserialize(&value).map_err(serde::de::Error::custom)?;
    fingerprint.kept = crate::lean::recent::keep(value);
    Ok((raw, fingerprint))
}

/// A Secret of Helm's storage: never one of a release's objects, and its
/// payload the heaviest Secret there is — not kept by `super::recent`.
fn is_helm_storage(value: &serde_json::Value) -> bool {
    value.get("type").and_then(serde_json::Value::as_str) == Some("helm.sh/release.v1")
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
        impl $crate::lean::objects::Labelled for $ty {
            fn lean_meta(&self) -> &$crate::lean::objects::LeanMeta {
                &self.metadata
            }
        }
    };
}
pub(super) use resource;

/// How objects of Helm releases are watched: label
/// `app.kubernetes.io/managed-by=Helm` (docs/inventory.md's membership rule), so the
/// caches and their events stay proportional to releases. One informer per
/// kind, shared by the controllers that ask with these options.
pub fn managed_by_helm_options<K>() -> cache::InformerOptions<K> {
    cache::InformerOptions::default().labels(&format!("{MANAGED_BY_LABEL}=Helm"))
}

/// The value of label `key` (one of [`KEPT_LABELS`]), or `""`.
pub fn label<'a>(meta: &'a LeanMeta, key: &str) -> &'a str {
    meta.label(key)
}

#[cfg(test)]
mod tests;
