//! Whether helm would read a release document's fields as the operator
//! does. helm decodes storage with Go's `encoding/json`, which matches an
//! object key to a struct field *without regard to case* (Unicode simple
//! folding: `Manifest`, `MANIFEST`, `manifeſt` are all `manifest`) and lets
//! the last of several take the field. serde matches exactly and ignores the
//! rest. A payload holding `"manifest": <ours>, "Manifest": <planted>` would
//! be ours to the operator's checks and the planted one to helm — so a
//! release whose struct-typed objects (the release, its `info`, each hook
//! and its `last_run`) hold a key that folds onto a field without being its
//! exact name, or a field twice, is no release at all.
//!
//! Streaming: keys are read, every value skipped unread but these objects,
//! so the check costs a pass over the bytes and no allocation of values.

use std::collections::BTreeSet;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

const RELEASE: &[&str] = &[
    "name",
    "info",
    "chart",
    "config",
    "manifest",
    "hooks",
    "version",
    "namespace",
    "apply_method",
];
const INFO: &[&str] = &[
    "first_deployed",
    "last_deployed",
    "deleted",
    "description",
    "status",
    "notes",
    "resources",
    "rollback_revision",
];
const HOOK: &[&str] = &[
    "name",
    "kind",
    "path",
    "manifest",
    "events",
    "last_run",
    "weight",
    "delete_policies",
    "output_log_policies",
];
const HOOK_EXECUTION: &[&str] = &["started_at", "completed_at", "phase"];

/// `Err` naming the first key helm would read otherwise than the operator.
pub fn check(json: &[u8]) -> Result<(), String> {
    let mut de = serde_json::Deserializer::from_slice(json);
    match Struct(Shape::Release).deserialize(&mut de) {
        // Not JSON: the decoding that follows says so.
        Err(e) if e.is_syntax() || e.is_eof() => Ok(()),
        Err(e) => Err(e.to_string()),
        Ok(()) => Ok(()),
    }
}

/// Go's case folding, or more: upper then lower case (`ſ` → `S` → `s`,
/// the Kelvin sign → `k`). Folding more than Go refuses more, never less.
fn fold(s: &str) -> String {
    s.chars()
        .flat_map(char::to_uppercase)
        .flat_map(char::to_lowercase)
        .collect()
}

#[derive(Clone, Copy)]
enum Shape {
    Release,
    Info,
    Hook,
    HookExecution,
}

impl Shape {
    fn fields(self) -> &'static [&'static str] {
        match self {
            Shape::Release => RELEASE,
            Shape::Info => INFO,
            Shape::Hook => HOOK,
            Shape::HookExecution => HOOK_EXECUTION,
        }
    }

    /// The shape of `field`'s value, when it is checked too.
    fn inner(self, field: &str) -> Option<Inner> {
        match (self, field) {
            (Shape::Release, "info") => Some(Inner::One(Shape::Info)),
            (Shape::Release, "hooks") => Some(Inner::List(Shape::Hook)),
            (Shape::Hook, "last_run") => Some(Inner::One(Shape::HookExecution)),
            _ => None,
        }
    }
}

enum Inner {
    One(Shape),
    List(Shape),
}

/// A Go struct's JSON object (or null).
struct Struct(Shape);

impl<'de> DeserializeSeed<'de> for Struct {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Struct {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        use serde::de::Error;
        let mut seen = BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let folded = fold(&key);
            let field = self.0.fields().iter().find(|f| fold(f) == folded);
            let Some(field) = field else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            if key != *field {
                return Err(A::Error::custom(format!(
                    "the key {key:?} is read by helm as {field:?}"
                )));
            }
            if !seen.insert(*field) {
                return Err(A::Error::custom(format!("{field:?} is given twice")));
            }
            match self.0.inner(field) {
                Some(Inner::One(shape)) => map.next_value_seed(Struct(shape))?,
                Some(Inner::List(shape)) => map.next_value_seed(List(shape))?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            };
        }
        Ok(())
    }

    // Anything else where an object belongs: Go fails to decode it, and
    // so does this.
}

/// A JSON array of Go structs (or null).
struct List(Shape);

impl<'de> DeserializeSeed<'de> for List {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for List {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Struct(self.0))?.is_some() {}
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_as_helm_writes_it_passes() {
        let json = br#"{"name":"web","info":{"status":"deployed","first_deployed":"x"},
            "chart":{"metadata":{"name":"web"}},
            "config":{"Manifest":"values are a map: any key","manifest":"too"},
            "manifest":"a","hooks":[{"name":"h","manifest":"b","last_run":{"phase":"Succeeded"}}],
            "version":2,"namespace":"apps","apply_method":"ssa","unknown":1}"#;
        assert_eq!(check(json), Ok(()));
        assert_eq!(check(br#"{"hooks":null,"info":null}"#), Ok(()));
    }

    #[test]
    fn a_key_helm_folds_onto_a_field_or_a_field_twice_is_refused() {
        for hostile in [
            r#"{"manifest":"ours","Manifest":"planted"}"#,
            r#"{"MANIFEST":"planted"}"#,
            "{\"manife\u{17f}t\":\"planted\"}",
            r#"{"hooks":[{"manifest":"ours","Manifest":"planted"}]}"#,
            r#"{"Hooks":[{"manifest":"planted"}]}"#,
            r#"{"hooks":[{"name":"h","Events":["pre-delete"]}]}"#,
            r#"{"info":{"status":"superseded","Status":"deployed"}}"#,
            r#"{"hooks":[{"last_run":{"Phase":"x"}}]}"#,
            r#"{"manifest":"a","manifest":"b"}"#,
            "{\"\u{212a}ind\":1,\"hooks\":[{\"\u{212a}ind\":\"Pod\"}]}",
        ] {
            assert!(check(hostile.as_bytes()).is_err(), "{hostile}");
        }
    }
}
