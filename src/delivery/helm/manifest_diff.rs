//! What a new render changes in a release: its manifest against the live
//! one, object by object (`Kind namespace/name`), as a unified diff with
//! every Secret value masked on both sides — a changed one says so, never
//! what it was or is. Shared by `kubectl hossted diff` and the pending
//! change of `spec.approval: manual`, so both show the same thing.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::Value;

/// The difference between two manifests of one release.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ManifestDiff {
    /// Objects only the new manifest has.
    pub added: Vec<String>,
    /// Objects both have, that differ.
    pub changed: Vec<String>,
    /// Objects only the live manifest has.
    pub removed: Vec<String>,
    /// The unified diff (empty: no difference).
    pub text: String,
}

impl ManifestDiff {
    /// Lines the diff adds or removes (its `---` / `+++` headers aside).
    pub fn lines(&self) -> usize {
        self.text
            .lines()
            .filter(|l| {
                (l.starts_with('+') && !l.starts_with("+++"))
                    || (l.starts_with('-') && !l.starts_with("---"))
            })
            .count()
    }
}

/// The objects of a manifest by `Kind namespace/name`, up to the first
/// document that does not parse: after a syntax error the YAML reader's
/// documents may never end (a hostile manifest must not spin a thread).
/// Lossy by design — a diff to show; what decides trust reads strictly
/// (`super::manifest_bound`).
fn objects(manifest: &str) -> BTreeMap<String, Value> {
    serde_yaml_ng::Deserializer::from_str(manifest)
        .map(Value::deserialize)
        .take_while(Result::is_ok)
        .filter_map(Result::ok)
        .filter(Value::is_object)
        .map(|o| (key_of(&o), o))
        .collect()
}

/// `Kind namespace/name` (`Kind name` for an object with no namespace).
fn key_of(o: &Value) -> String {
    let text = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default();
    match text("/metadata/namespace") {
        "" => format!("{} {}", text("/kind"), text("/metadata/name")),
        ns => format!("{} {ns}/{}", text("/kind"), text("/metadata/name")),
    }
}

/// Masks the values of a Secret on both sides: `***` where they agree,
/// `*** (old)` and `*** (new)` where they differ.
fn mask_secrets(old: &mut Value, new: &mut Value) {
    for field in ["data", "stringData"] {
        let keys = |v: &Value| v.get(field).and_then(Value::as_object).cloned();
        let (before, after) = (keys(old).unwrap_or_default(), keys(new).unwrap_or_default());
        let mark = |v: &mut Value, other: &serde_json::Map<String, Value>, side: &str| {
            if let Some(m) = v.get_mut(field).and_then(Value::as_object_mut) {
                for (k, val) in m.iter_mut() {
                    let same = other.get(k) == Some(&*val);
                    *val = Value::String(if same {
                        "***".into()
                    } else {
                        format!("*** ({side})")
                    });
                }
            }
        };
        mark(old, &after, "old");
        mark(new, &before, "new");
    }
}

/// Whether `live` and `next` hold the same objects, field for field, once
/// the labels `ignored` are taken off `live`'s (an emptied `labels` map
/// counts as none).
pub fn same_objects(live: &str, next: &str, ignored: &[&str]) -> bool {
    let mut live = objects(live);
    for o in live.values_mut() {
        let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) else {
            continue;
        };
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            for l in ignored {
                labels.remove(*l);
            }
            if labels.is_empty() {
                meta.remove("labels");
            }
        }
    }
    live == objects(next)
}

/// `next` against `live`; the headers name `release`.
pub fn diff(live: &str, next: &str, release: &str) -> ManifestDiff {
    let (mut before, mut after) = (objects(live), objects(next));
    let keys: BTreeSet<String> = before.keys().chain(after.keys()).cloned().collect();
    let mut out = ManifestDiff::default();
    for key in keys {
        let (mut old, mut new) = (
            before.remove(&key).unwrap_or(Value::Null),
            after.remove(&key).unwrap_or(Value::Null),
        );
        if key.starts_with("Secret ") {
            mask_secrets(&mut old, &mut new);
        }
        match (old.is_null(), new.is_null()) {
            _ if old == new => continue,
            (true, _) => out.added.push(key.clone()),
            (_, true) => out.removed.push(key.clone()),
            _ => out.changed.push(key.clone()),
        }
        let text = |v: &Value| match v {
            Value::Null => String::new(),
            v => serde_yaml_ng::to_string(v).unwrap_or_default(),
        };
        let (a, b) = (text(&old), text(&new));
        let d = similar::TextDiff::from_lines(&a, &b);
        let header = |side: &str| format!("{release} {side}: {key}");
        out.text.push_str(
            &d.unified_diff()
                .context_radius(3)
                .header(&header("live"), &header("next"))
                .to_string(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_objects_are_the_same_but_for_the_ignored_labels() {
        let flux = "helm.toolkit.fluxcd.io/name";
        let live = "---\nkind: ConfigMap\nmetadata: {name: web, namespace: apps, labels: {helm.toolkit.fluxcd.io/name: web}}\ndata: {a: b}\n---\nkind: Service\nmetadata: {name: web, namespace: apps, labels: {app: web, helm.toolkit.fluxcd.io/name: web}}\n";
        let next = "kind: Service\nmetadata: {name: web, namespace: apps, labels: {app: web}}\n---\nkind: ConfigMap\nmetadata: {name: web, namespace: apps}\ndata: {a: b}\n";
        assert!(
            same_objects(live, next, &[flux]),
            "order and ignored labels"
        );
        assert!(!same_objects(live, next, &[]), "a label not ignored");
        let edited = next.replace("{a: b}", "{a: c}");
        assert!(!same_objects(live, &edited, &[flux]), "a field");
        let fewer = "kind: Service\nmetadata: {name: web, namespace: apps, labels: {app: web}}\n";
        assert!(!same_objects(live, fewer, &[flux]), "an object");
    }

    const LIVE: &str = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: apps}\ndata: {greeting: hello}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: apps}\ndata: {password: b2xk, user: YWRtaW4=}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: gone, namespace: apps}\nspec: {ports: [{port: 80}]}\n";

    #[test]
    fn a_changed_field_an_added_and_a_removed_object_and_no_secret_value() {
        let next = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: apps}\ndata: {greeting: hi}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: apps}\ndata: {password: bmV3, user: YWRtaW4=}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: added, namespace: apps}\n";
        let d = diff(LIVE, next, "apps/web");
        let t = &d.text;
        assert!(t.contains("-  greeting: hello\n+  greeting: hi\n"), "{t}");
        assert!(t.contains("+++ apps/web next: ConfigMap apps/added"), "{t}");
        assert!(t.contains("--- apps/web live: Service apps/gone"), "{t}");
        assert!(
            t.contains("-  password: '*** (old)'\n+  password: '*** (new)'\n"),
            "{t}"
        );
        assert!(
            t.contains(" user: '***'\n"),
            "an unchanged key is masked alike: {t}"
        );
        assert!(
            !t.contains("b2xk") && !t.contains("bmV3") && !t.contains("YWRtaW4="),
            "{t}"
        );
        assert_eq!(d.added, ["ConfigMap apps/added"]);
        assert_eq!(d.changed, ["ConfigMap apps/web", "Secret apps/db"]);
        assert_eq!(d.removed, ["Service apps/gone"]);
    }

    #[test]
    fn the_lines_counted_are_the_added_and_removed_ones() {
        let next = LIVE.replace("greeting: hello", "greeting: hi");
        let d = diff(LIVE, &next, "apps/web");
        assert_eq!(d.changed, ["ConfigMap apps/web"]);
        assert_eq!(d.lines(), 2, "{}", d.text);
        let first = diff("", LIVE, "apps/web");
        assert_eq!(first.added.len(), 3);
        assert!(first.lines() >= 3 * 4, "{}", first.text);
    }

    #[test]
    fn the_same_release_is_no_difference() {
        assert_eq!(diff(LIVE, LIVE, "apps/web"), ManifestDiff::default());
    }

    #[test]
    fn a_manifest_that_does_not_parse_is_read_to_its_first_error_and_no_further() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let read = objects(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\na: [b\n---\nkind: ConfigMap\nmetadata:\n  name: c\n",
            );
            let _ = done.send(read.keys().cloned().collect::<Vec<_>>());
        });
        let read = finished
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the read ends");
        assert_eq!(read, ["ConfigMap a"]);
    }
}
