//! The precise comparison of one object (pure): which fields its manifest
//! sets differ on the live object. The manifest's own values are not
//! compared with live ones — the API server normalises (`cpu: 0.5` is
//! stored as `500m`) — but what the object *would be* after applying the
//! manifest (a server-side dry run) is, field by field, at the pointers
//! the manifest sets.

use serde_json::Value;

/// At most this many fields are named per object.
pub const MAX_FIELDS: usize = 10;

/// The pointers of the fields `desired` (the object as the manifest has
/// it) sets where `applied` (the dry run's result) and `live` differ —
/// leaving out identity (`apiVersion`, `kind`, name, namespace), status,
/// metadata other than labels and annotations, and every pointer that one
/// of `ignored` covers. Sorted, at most [`MAX_FIELDS`].
pub fn drifted_fields(
    desired: &Value,
    applied: &Value,
    live: &Value,
    ignored: &[&str],
) -> Vec<String> {
    let mut out = Vec::new();
    let Some(fields) = desired.as_object() else {
        return out;
    };
    for (key, value) in fields {
        let pointer = format!("/{}", crate::lean::fingerprint::escape(key));
        match key.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                for part in ["labels", "annotations"] {
                    if let Some(v) = value.get(part) {
                        walk(
                            &format!("/metadata/{part}"),
                            v,
                            applied,
                            live,
                            ignored,
                            &mut out,
                        );
                    }
                }
            }
            // A Secret's stringData is stored as data: compare that.
            "stringData" => {
                if let Some(map) = value.as_object() {
                    for k in map.keys() {
                        let p = format!("/data/{}", crate::lean::fingerprint::escape(k));
                        leaf(&p, applied, live, ignored, &mut out);
                    }
                }
            }
            _ => walk(&pointer, value, applied, live, ignored, &mut out),
        }
    }
    out.sort();
    out.dedup();
    out.truncate(MAX_FIELDS);
    out
}

/// `object` as the API server would store what is written: a Secret's
/// `stringData` as base64 in `data` — for comparing a manifest with a live
/// object before any dry run.
pub fn as_stored(object: &Value) -> Value {
    use base64::Engine;
    let mut object = object.clone();
    let Some(map) = object.as_object_mut() else {
        return object;
    };
    if let Some(Value::Object(strings)) = map.remove("stringData") {
        let data = map
            .entry("data")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(data) = data.as_object_mut() {
            for (k, v) in strings {
                let text = v.as_str().unwrap_or_default();
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                data.insert(k, Value::String(encoded));
            }
        }
    }
    object
}

/// `object` without the fields at `ignored` (JSON pointers): what is put
/// back or dry-run never includes an ignored field (an HPA's replicas).
pub fn without(object: &Value, ignored: &[&str]) -> Value {
    let mut object = object.clone();
    for pointer in ignored {
        let Some((parent, last)) = pointer.rsplit_once('/') else {
            continue;
        };
        let last = last.replace("~1", "/").replace("~0", "~");
        match object.pointer_mut(parent) {
            Some(Value::Object(map)) => {
                map.remove(&last);
            }
            Some(Value::Array(items)) => {
                if let Ok(i) = last.parse::<usize>()
                    && i < items.len()
                {
                    items.remove(i);
                }
            }
            _ => {}
        }
    }
    object
}

/// Whether one of `ignored` covers `pointer`: equal to it, or a parent of
/// it (token-wise: `/spec/rep` does not cover `/spec/replicas`).
pub fn covered(pointer: &str, ignored: &[&str]) -> bool {
    ignored.iter().any(|i| {
        pointer == *i || (pointer.starts_with(i) && pointer.as_bytes().get(i.len()) == Some(&b'/'))
    })
}

fn walk(
    pointer: &str,
    desired: &Value,
    applied: &Value,
    live: &Value,
    ignored: &[&str],
    out: &mut Vec<String>,
) {
    if covered(pointer, ignored) {
        return;
    }
    match desired {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let p = format!("{pointer}/{}", crate::lean::fingerprint::escape(k));
                walk(&p, v, applied, live, ignored, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            // A list of a different length differs as a whole.
            let len = |v: &Value| v.pointer(pointer).and_then(Value::as_array).map(Vec::len);
            if len(applied) != len(live) {
                out.push(pointer.to_string());
                return;
            }
            for (i, v) in items.iter().enumerate() {
                walk(&format!("{pointer}/{i}"), v, applied, live, ignored, out);
            }
        }
        _ => leaf(pointer, applied, live, ignored, out),
    }
}

fn leaf(pointer: &str, applied: &Value, live: &Value, ignored: &[&str], out: &mut Vec<String>) {
    if !covered(pointer, ignored) && applied.pointer(pointer) != live.pointer(pointer) {
        out.push(pointer.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(image: &str, replicas: i64, cpu: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "namespace": "apps", "resourceVersion": "9",
                          "labels": { "app": "web", "app.kubernetes.io/managed-by": "Helm" } },
            "spec": { "replicas": replicas, "template": { "spec": { "containers": [
                { "name": "web", "image": image, "resources": { "requests": { "cpu": cpu } },
                  "imagePullPolicy": "IfNotPresent" } ] } } },
            "status": { "replicas": 1 }
        })
    }

    #[test]
    fn an_edited_field_the_manifest_sets_is_named_a_defaulted_one_is_not() {
        // The manifest writes cpu as 0.5; the server keeps 500m.
        let desired = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "web" },
            "spec": { "replicas": 1, "template": { "spec": { "containers": [
                { "name": "web", "image": "nginx:1", "resources": { "requests": { "cpu": 0.5 } } } ] } } }
        });
        let applied = deployment("nginx:1", 1, "500m");
        let live = deployment("nginx:2", 1, "500m");
        assert_eq!(
            drifted_fields(&desired, &applied, &live, &[]),
            ["/spec/template/spec/containers/0/image"]
        );
        assert!(drifted_fields(&desired, &applied, &applied.clone(), &[]).is_empty());
    }

    #[test]
    fn ignored_pointers_and_their_children_are_left_out() {
        let desired = json!({ "spec": { "replicas": 1, "template": { "spec": { "containers": [{ "image": "nginx:1" }] } } } });
        let applied = deployment("nginx:1", 1, "1");
        let live = deployment("nginx:2", 4, "1");
        assert_eq!(drifted_fields(&desired, &applied, &live, &[]).len(), 2);
        assert_eq!(
            drifted_fields(&desired, &applied, &live, &["/spec/replicas"]),
            ["/spec/template/spec/containers/0/image"]
        );
        assert!(drifted_fields(&desired, &applied, &live, &["/spec"]).is_empty());
        assert!(covered("/spec/replicas", &["/spec"]));
        assert!(!covered("/spec/replicas", &["/spec/rep"]));
    }

    #[test]
    fn configmap_keys_labels_and_a_secrets_string_data_are_compared() {
        let desired = json!({ "metadata": { "labels": { "a": "1" } }, "data": { "k": "v" } });
        let applied =
            json!({ "metadata": { "labels": { "a": "1" } }, "data": { "k": "v", "extra": "x" } });
        let live = json!({ "metadata": { "labels": { "a": "2" } }, "data": { "k": "w" } });
        assert_eq!(
            drifted_fields(&desired, &applied, &live, &[]),
            ["/data/k", "/metadata/labels/a"]
        );
        let secret = json!({ "stringData": { "password": "hunter2" } });
        let applied = json!({ "data": { "password": "aHVudGVyMg==" } });
        let live = json!({ "data": { "password": "b3RoZXI=" } });
        assert_eq!(
            drifted_fields(&secret, &applied, &live, &[]),
            ["/data/password"]
        );
    }

    #[test]
    fn string_data_is_compared_as_the_data_it_is_stored_as() {
        let secret = json!({ "kind": "Secret", "stringData": { "password": "hunter2" } });
        let stored = as_stored(&secret);
        assert_eq!(stored["data"]["password"], "aHVudGVyMg==");
        let live = json!({ "kind": "Secret", "data": { "password": "aHVudGVyMg==" } });
        assert!(drifted_fields(&stored, &stored, &live, &[]).is_empty());
        let edited = json!({ "kind": "Secret", "data": { "password": "b3RoZXI=" } });
        assert_eq!(
            drifted_fields(&stored, &stored, &edited, &[]),
            ["/data/password"]
        );
    }

    #[test]
    fn ignored_fields_are_taken_out_of_what_is_applied() {
        let o = json!({ "spec": { "replicas": 1, "template": { "metadata": { "annotations": { "a/b": "x", "c": "y" } } } } });
        let w = without(
            &o,
            &[
                "/spec/replicas",
                "/spec/template/metadata/annotations/a~1b",
                "/nothing/here",
            ],
        );
        assert_eq!(
            w,
            json!({ "spec": { "template": { "metadata": { "annotations": { "c": "y" } } } } })
        );
    }

    #[test]
    fn a_list_that_grew_differs_as_a_whole() {
        let desired = json!({ "spec": { "ports": [{ "port": 80 }] } });
        let applied = json!({ "spec": { "ports": [{ "port": 80 }] } });
        let live = json!({ "spec": { "ports": [{ "port": 80 }, { "port": 81 }] } });
        assert_eq!(
            drifted_fields(&desired, &applied, &live, &[]),
            ["/spec/ports"]
        );
    }
}
