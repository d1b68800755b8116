//! One object of a LIST page or a watch event, decoded on its own.
//!
//! Decoding a whole page (or event) as `K` fails the page when one object
//! in it does not decode — nested past serde_json's 128 levels, say, which
//! the apiserver stores without complaint — and then every LIST and every
//! watch of the kind fails at that object, for ever: one object would stop
//! the informer for everyone. So each object is first taken as raw text
//! (read without recursion), then decoded as `K`; one that does not decode
//! is a [`Refusal`], which the reflector reports and skips while the LIST
//! and the watch go on.
//!
//! A second try drops `metadata.managedFields` before decoding: the
//! apiserver writes there a field set as deep as the object itself, which
//! no controller reads (the informers drop it anyway) — an object whose
//! own types bound their depth must not fail on it.

use std::fmt;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// An object as read from the API: `K`, or why it could not be.
#[derive(Clone, Debug)]
pub(crate) enum Decoded<K> {
    Object(K),
    Refused(Box<Refusal>),
}

/// An object the decoder refused: who it is, as far as its metadata says,
/// and why — without any of its content.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// `name`, `namespace`, `uid`, `resourceVersion` (whatever could be
    /// read of them).
    pub metadata: ObjectMeta,
    /// What the decoder said, cut before any quoted text (a value it
    /// quotes may be secret).
    pub error: String,
}

impl Refusal {
    /// `namespace/name` (or `name`), or `?` when even that was unreadable.
    pub fn key(&self) -> String {
        let name = self.metadata.name.as_deref().unwrap_or("?");
        match self.metadata.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
            _ => name.to_string(),
        }
    }

    /// A reference to the object, of `kind` in `api_version`, for an Event.
    pub fn reference(&self, api_version: &str, kind: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
            name: self.metadata.name.clone(),
            namespace: self.metadata.namespace.clone(),
            uid: self.metadata.uid.clone(),
            ..Default::default()
        }
    }
}

impl<K> Decoded<K> {
    /// The resourceVersion of the object, refused or not.
    pub(crate) fn resource_version(&self) -> Option<String>
    where
        K: kube::Resource,
    {
        match self {
            Decoded::Object(o) => o.meta().resource_version.clone(),
            Decoded::Refused(r) => r.metadata.resource_version.clone(),
        }
    }
}

impl<K: kube::Resource> Decoded<K> {
    /// Refused when its metadata is past what Kubernetes allows any
    /// object (a name over 253 bytes, a label value over 63…): no API
    /// server sends such an object, and a lying one must not fill the
    /// cache with names of a megabyte each, which the object-count bound
    /// alone would let it do.
    pub(crate) fn within_api_limits(self) -> Self {
        let Decoded::Object(o) = &self else {
            return self;
        };
        let Some(why) = past_api_limits(o.meta()) else {
            return self;
        };
        let meta = o.meta();
        let cut = |s: &Option<String>| {
            s.as_ref()
                .map(|s| s.chars().take(MAX_NAME).collect::<String>())
        };
        Decoded::Refused(Box::new(Refusal {
            metadata: ObjectMeta {
                name: cut(&meta.name),
                namespace: cut(&meta.namespace),
                uid: cut(&meta.uid),
                resource_version: cut(&meta.resource_version),
                ..Default::default()
            },
            error: why.to_string(),
        }))
    }
}

/// Kubernetes' own bounds: a name (most kinds take a DNS subdomain, 253
/// bytes; some — RBAC's — only a path segment, with no bound of its own:
/// 4 KiB is far past any real one), a label name (prefix and name), a
/// label value, all annotations together.
const MAX_NAME: usize = 4096;
const MAX_NAMESPACE: usize = 63;
const MAX_LABEL_KEY: usize = 253 + 1 + 63;
const MAX_LABEL_VALUE: usize = 63;
const MAX_ANNOTATIONS: usize = 256 * 1024;
/// Far more than any API server's (an etcd revision, a UID).
const MAX_VERSION: usize = 128;

/// Which of Kubernetes' bounds `meta` is past, if any.
fn past_api_limits(meta: &ObjectMeta) -> Option<&'static str> {
    let len = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    if len(&meta.name) > MAX_NAME || len(&meta.generate_name) > MAX_NAME {
        return Some("metadata.name is longer than Kubernetes allows");
    }
    if len(&meta.namespace) > MAX_NAMESPACE {
        return Some("metadata.namespace is longer than Kubernetes allows");
    }
    if len(&meta.uid) > MAX_VERSION || len(&meta.resource_version) > MAX_VERSION {
        return Some("metadata.uid or resourceVersion is longer than any API server's");
    }
    let labels = meta.labels.iter().flatten();
    if labels
        .into_iter()
        .any(|(k, v)| k.len() > MAX_LABEL_KEY || v.len() > MAX_LABEL_VALUE)
    {
        return Some("a label is longer than Kubernetes allows");
    }
    let annotations: usize = meta
        .annotations
        .iter()
        .flatten()
        .map(|(k, v)| k.len() + v.len())
        .sum();
    (annotations > MAX_ANNOTATIONS).then_some("the annotations are larger than Kubernetes allows")
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Decoded<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Ok(decode(raw.get()))
    }
}

/// `text` (one object of a LIST or GET) as `K`, read as the informers read
/// it ([`managedFields`](without_managed_fields) no bar), or the
/// [`Refusal`] that names it and says why not — for a reader outside the
/// informers (a command-line tool) that must not fail on one object.
pub fn decode_object<K: DeserializeOwned>(text: &str) -> Result<K, Box<Refusal>> {
    match decode(text) {
        Decoded::Object(o) => Ok(o),
        Decoded::Refused(r) => Err(r),
    }
}

/// `text` (one object) as `K`, or the [`Refusal`] that says why not.
pub(crate) fn decode<K: DeserializeOwned>(text: &str) -> Decoded<K> {
    let first = match serde_json::from_str::<K>(text) {
        Ok(o) => return Decoded::Object(o),
        Err(e) => e,
    };
    if let Some(Ok(o)) = without_managed_fields(text).map(|t| serde_json::from_str::<K>(&t)) {
        return Decoded::Object(o);
    }
    Decoded::Refused(Box::new(Refusal {
        metadata: metadata_of(text),
        error: quoted_cut(&first.to_string()),
    }))
}

/// `text` with `metadata.managedFields` taken out, when it has them; each
/// level read as raw text, without recursion.
fn without_managed_fields(text: &str) -> Option<String> {
    let mut top: std::collections::BTreeMap<String, Box<RawValue>> =
        serde_json::from_str(text).ok()?;
    let meta = top.get("metadata")?;
    let mut meta: std::collections::BTreeMap<String, Box<RawValue>> =
        serde_json::from_str(meta.get()).ok()?;
    meta.remove("managedFields")?;
    let meta = serde_json::to_string(&meta).ok()?;
    top.insert("metadata".into(), RawValue::from_string(meta).ok()?);
    serde_json::to_string(&top).ok()
}

/// What can be read of the object's metadata: the fields that name it.
fn metadata_of(text: &str) -> ObjectMeta {
    #[derive(Deserialize, Default)]
    struct Names {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        namespace: Option<String>,
        #[serde(default)]
        uid: Option<String>,
        #[serde(default, rename = "resourceVersion")]
        resource_version: Option<String>,
    }
    #[derive(Deserialize)]
    struct Top {
        metadata: Box<RawValue>,
    }
    let names = serde_json::from_str::<Top>(text)
        .ok()
        .and_then(|t| {
            // Only the four strings: every other field is skipped unread.
            let all: std::collections::BTreeMap<String, Box<RawValue>> =
                serde_json::from_str(t.metadata.get()).ok()?;
            let pick = |k: &str| {
                all.get(k)
                    .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            };
            Some(Names {
                name: pick("name"),
                namespace: pick("namespace"),
                uid: pick("uid"),
                resource_version: pick("resourceVersion"),
            })
        })
        .unwrap_or_default();
    ObjectMeta {
        name: names.name,
        namespace: names.namespace,
        uid: names.uid,
        resource_version: names.resource_version,
        ..Default::default()
    }
}

/// `message` cut before its first quote: serde quotes the offending value.
fn quoted_cut(message: &str) -> String {
    match message.find(['"', '`']) {
        Some(i) => format!("{}…", message[..i].trim_end()),
        None => message.to_string(),
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} does not decode: {}", self.key(), self.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn nested(levels: usize) -> String {
        format!("{}1{}", r#"{"a":"#.repeat(levels), "}".repeat(levels))
    }

    #[test]
    fn an_object_that_does_not_decode_is_refused_alone_and_named() {
        #[derive(Deserialize, Debug)]
        struct List {
            items: Vec<Decoded<ConfigMap>>,
        }
        let bad = format!(
            r#"{{"metadata":{{"name":"deep","namespace":"ns","resourceVersion":"7"}},"data":{}}}"#,
            nested(200)
        );
        let text = format!(
            r#"{{"items":[{{"metadata":{{"name":"a"}}}},{bad},{{"metadata":{{"name":"b"}},"data":{{"k":"v"}}}}]}}"#
        );
        let list: List = serde_json::from_str(&text).expect("the page decodes");
        let names: Vec<String> = list
            .items
            .iter()
            .map(|d| match d {
                Decoded::Object(c) => c.metadata.name.clone().unwrap(),
                Decoded::Refused(r) => format!("refused {}", r.key()),
            })
            .collect();
        assert_eq!(names, ["a", "refused ns/deep", "b"]);
        assert_eq!(list.items[1].resource_version().as_deref(), Some("7"));
    }

    #[test]
    fn a_refusal_never_carries_the_value_the_decoder_quotes() {
        let text = r#"{"metadata":{"name":"x"},"data":{"k":["s3cr3t-value"]}}"#;
        let Decoded::<ConfigMap>::Refused(r) = decode(text) else {
            panic!("a list is not a string: refused")
        };
        assert!(!r.error.contains("s3cr3t"), "{}", r.error);
        assert!(!r.to_string().contains("s3cr3t"));
    }

    #[test]
    fn deep_managed_fields_alone_do_not_refuse_an_object() {
        let text = format!(
            r#"{{"metadata":{{"name":"x","managedFields":[{{"manager":"m","fieldsV1":{}}}]}},"data":{{"k":"v"}}}}"#,
            nested(300)
        );
        match decode::<ConfigMap>(&text) {
            Decoded::Object(c) => assert_eq!(c.data.unwrap()["k"], "v"),
            Decoded::Refused(r) => panic!("refused: {r}"),
        }
    }

    /// What no API server sends — a name of a megabyte, a label value past
    /// 63 bytes — is refused, named by a cut name; what one sends passes.
    #[test]
    fn an_object_past_kubernetes_bounds_is_refused_with_its_name_cut() {
        let object = |name: &str, label: &str| {
            json_of(&format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns","labels":{{"owner":"{label}"}}}}}}"#
            ))
        };
        let long = "n".repeat(1 << 20);
        for (name, label, refused) in [
            ("web", "helm", false),
            (&"n".repeat(300)[..], "helm", false),
            (&long[..], "helm", true),
            ("web", &"v".repeat(64)[..], true),
        ] {
            match object(name, label).within_api_limits() {
                Decoded::Object(_) => assert!(!refused, "{} passed", name.len()),
                Decoded::Refused(r) => {
                    assert!(refused, "{} refused: {}", name.len(), r.error);
                    assert!(r.metadata.name.unwrap().len() <= MAX_NAME);
                }
            }
        }
    }

    fn json_of(text: &str) -> Decoded<ConfigMap> {
        decode(text)
    }
}
