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
}
