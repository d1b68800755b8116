//! What drift detection keeps of a live object in a cache: one small hash
//! per *section* — each key of `spec` (`/spec/replicas`, `/spec/template`),
//! of `data` (`/data/<key>`), each other top-level field, and the
//! object's labels and annotations — never the content.
//!
//! Two uses:
//! - an informer's update changed a section (not just `status` or
//!   `resourceVersion`): the object is suspect;
//! - [`Fingerprint::digest`], without the sections an ignore rule covers,
//!   is what `status.inventory[].checked` records: an object whose digest
//!   has not moved since drift was last decided on it is not checked again
//!   (an HPA scaling a Deployment whose `/spec/replicas` is ignored costs
//!   nothing).
//!
//! Hashes are FNV-1a (stable across processes and versions: a digest is
//! kept in status over restarts), of the pointer text and of the value's
//! JSON. A section's hash is 32 bits; its value's 64.
//!
//! ```
//! use hossted_operator::lean::fingerprint::Fingerprint;
//! let a = Fingerprint::of(&serde_json::json!({"spec": {"replicas": 1, "template": {}}}));
//! let b = Fingerprint::of(&serde_json::json!({"spec": {"replicas": 3, "template": {}}}));
//! assert_ne!(a, b);
//! assert_ne!(a.digest(&[]), b.digest(&[]));
//! assert_eq!(a.digest(&["/spec/replicas"]), b.digest(&["/spec/replicas"]));
//! ```

use serde_json::Value;

/// The annotation that leaves an object out of drift.
pub const DRIFT_ANNOTATION: &str = "hossted.com/drift";

/// Annotations controllers write on the objects they manage: not drift,
/// and not a reason to look.
const CONTROLLER_ANNOTATIONS: [&str; 2] = [
    "deployment.kubernetes.io/revision",
    "kubectl.kubernetes.io/last-applied-configuration",
];

/// More keys than this under `spec` or `data`: hashed as one section.
const MAX_SECTIONS: usize = 32;

/// A live object's sections, hashed (see the module docs). Two are equal
/// when their sections and drift annotation are: where the object is
/// [`kept`](Fingerprint::kept) is not what it is.
#[derive(Clone, Debug, Default)]
pub struct Fingerprint {
    /// `(hash of the top-level pointer, hash of the section's pointer,
    /// hash of its value)`, sorted.
    sections: Box<[(u32, u32, u64)]>,
    /// The object carries `hossted.com/drift: disabled`.
    pub drift_disabled: bool,
    /// The number the whole object was kept under by
    /// [`super::recent::keep`] when it was decoded (0: not kept).
    pub kept: u64,
}

impl PartialEq for Fingerprint {
    fn eq(&self, other: &Self) -> bool {
        self.sections == other.sections && self.drift_disabled == other.drift_disabled
    }
}

impl Eq for Fingerprint {}

impl Fingerprint {
    /// The fingerprint of `object` (as the API serves it).
    pub fn of(object: &Value) -> Self {
        let mut sections = Vec::new();
        let Some(fields) = object.as_object() else {
            return Fingerprint::default();
        };
        for (key, value) in fields {
            let top = format!("/{}", escape(key));
            match key.as_str() {
                "apiVersion" | "kind" | "status" => {}
                "metadata" => {
                    for part in ["labels", "annotations"] {
                        if let Some(v) = value.get(part) {
                            let pointer = format!("/metadata/{part}");
                            sections.push((hash32(&top), hash32(&pointer), metadata_hash(v)));
                        }
                    }
                }
                _ => match value.as_object() {
                    Some(children) if children.len() <= MAX_SECTIONS => {
                        for (child, v) in children {
                            let pointer = format!("{top}/{}", escape(child));
                            sections.push((hash32(&top), hash32(&pointer), value_hash(v)));
                        }
                    }
                    _ => sections.push((hash32(&top), hash32(&top), value_hash(value))),
                },
            }
        }
        sections.sort_unstable();
        let drift_disabled = object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(DRIFT_ANNOTATION))
            .and_then(Value::as_str)
            == Some("disabled");
        Fingerprint {
            sections: sections.into_boxed_slice(),
            drift_disabled,
            kept: 0,
        }
    }

    /// A digest of every section that no pointer of `ignored` covers, 16
    /// hex digits. A pointer covers a section it names or the top-level
    /// field the section is in (`/spec` covers `/spec/replicas`); a
    /// pointer to something inside a section (`/spec/template/spec/…`)
    /// covers nothing here — a change there is checked, and the check
    /// leaves the field out.
    pub fn digest(&self, ignored: &[&str]) -> String {
        let mut skip: Vec<u32> = ignored.iter().map(|p| hash32(p)).collect();
        skip.sort_unstable();
        let covered = |h: u32| skip.binary_search(&h).is_ok();
        let mut h = Fnv::new();
        for &(top, section, value) in self.sections.iter() {
            if covered(top) || covered(section) {
                continue;
            }
            h.write(&section.to_le_bytes());
            h.write(&value.to_le_bytes());
        }
        format!("{:016x}", h.finish())
    }
}

/// A cached object that keeps its [`Fingerprint`].
pub trait Fingerprinted {
    fn fingerprint(&self) -> &Fingerprint;
}

/// `impl Fingerprinted` for types with a `fingerprint` field, written
/// beside each type (this file knows none of them).
macro_rules! fingerprinted {
    ($($ty:ty),+) => {
        $(impl $crate::lean::fingerprint::Fingerprinted for $ty {
            fn fingerprint(&self) -> &$crate::lean::fingerprint::Fingerprint {
                &self.fingerprint
            }
        })+
    };
}
pub(crate) use fingerprinted;

/// `~` and `/` escaped as a JSON pointer token (RFC 6901).
pub fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn metadata_hash(map: &Value) -> u64 {
    let mut h = Fnv::new();
    if let Some(map) = map.as_object() {
        for (k, v) in map {
            if CONTROLLER_ANNOTATIONS.contains(&k.as_str()) {
                continue;
            }
            h.write(k.as_bytes());
            h.write(&[0]);
            h.write(v.as_str().unwrap_or_default().as_bytes());
            h.write(&[0]);
        }
    }
    h.finish()
}

fn value_hash(v: &Value) -> u64 {
    let mut h = Fnv::new();
    // Writing a Value to a hasher cannot fail; an error would only drop
    // the rest of the value from the hash.
    let _ = serde_json::to_writer(&mut h, v);
    h.finish()
}

fn hash32(text: &str) -> u32 {
    let mut h = Fnv::new();
    h.write(text.as_bytes());
    let n = h.finish();
    (n ^ (n >> 32)) as u32
}

/// FNV-1a, 64 bits.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl std::io::Write for Fnv {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Fnv::write(self, buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: i64, image: &str, annotations: Value) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "resourceVersion": "7",
                          "labels": { "app": "web" }, "annotations": annotations },
            "spec": { "replicas": replicas,
                      "template": { "spec": { "containers": [{ "name": "web", "image": image }] } } },
            "status": { "readyReplicas": 1 }
        })
    }

    #[test]
    fn status_resource_version_and_controller_annotations_are_not_sections() {
        let a = Fingerprint::of(&deployment(1, "nginx:1", json!({})));
        let mut b = deployment(
            1,
            "nginx:1",
            json!({ "deployment.kubernetes.io/revision": "2" }),
        );
        b["status"]["readyReplicas"] = json!(3);
        b["metadata"]["resourceVersion"] = json!("8");
        assert_eq!(a, Fingerprint::of(&b));
    }

    #[test]
    fn an_ignored_section_or_its_parent_leaves_the_digest_alone_a_deeper_pointer_does_not() {
        let a = Fingerprint::of(&deployment(1, "nginx:1", json!({})));
        let scaled = Fingerprint::of(&deployment(5, "nginx:1", json!({})));
        let edited = Fingerprint::of(&deployment(1, "nginx:2", json!({})));
        assert_ne!(a.digest(&[]), scaled.digest(&[]));
        assert_eq!(
            a.digest(&["/spec/replicas"]),
            scaled.digest(&["/spec/replicas"])
        );
        assert_eq!(a.digest(&["/spec"]), edited.digest(&["/spec"]));
        let deep = "/spec/template/spec/containers/0/image";
        assert_ne!(a.digest(&[deep]), edited.digest(&[deep]));
        assert_ne!(
            a.digest(&["/spec/replicas"]),
            edited.digest(&["/spec/replicas"])
        );
    }

    #[test]
    fn data_keys_are_sections_and_the_drift_annotation_is_read() {
        let cm = |v: &str, drift: &str| {
            Fingerprint::of(&json!({
                "metadata": { "annotations": { DRIFT_ANNOTATION: drift } },
                "data": { "a": v, "b": "same" }
            }))
        };
        assert!(cm("1", "disabled").drift_disabled);
        assert!(!cm("1", "enabled").drift_disabled);
        assert_ne!(cm("1", "x").digest(&[]), cm("2", "x").digest(&[]));
        assert_eq!(
            cm("1", "x").digest(&["/data/a"]),
            cm("2", "x").digest(&["/data/a"])
        );
        // Stable across processes: a digest is kept in status.
        assert_eq!(Fingerprint::default().digest(&[]), "cbf29ce484222325");
    }
}
