//! Whether a release revision can only make helm act on what is already
//! ours: every object its manifest names is one of known manifests (by
//! `apiVersion`'s group, kind, namespace and name — what helm deletes by),
//! and every hook it holds is, field for field, one of known hooks (helm
//! creates hooks and runs them).
//!
//! Read as hostile: a document is cut wherever a line starts with `---` —
//! everywhere helm's two splitters cut (its `---` regex, and the API
//! machinery's line reader), and more — so a separator hidden in a block
//! scalar yields a document of its own that must pass too. A piece that
//! does not parse, strictly, as one YAML mapping, or names no object, fails
//! the check: nothing helm could read is left unexamined.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_json::Value;

/// The pieces of `manifest` cut at every line starting with `---`, each
/// parsed as one YAML document; `None` if one does not parse. Empty and
/// comment-only pieces are left out.
fn pieces(manifest: &str) -> Option<Vec<Value>> {
    let mut out = Vec::new();
    let mut piece = String::new();
    let mut flush = |piece: &mut String| -> Option<()> {
        let text = std::mem::take(piece);
        let meaningful = text
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        if meaningful {
            let mut docs = serde_yaml_ng::Deserializer::from_str(&text);
            let doc = docs.next()?;
            let value = Value::deserialize(doc).ok()?;
            // One document per piece: a second is a separator we did not
            // cut at (`...`, a directive) — not read the way helm reads it.
            if docs.next().is_some() {
                return None;
            }
            if !value.is_null() {
                out.push(value);
            }
        }
        Some(())
    };
    for line in manifest.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("---") {
            flush(&mut piece)?;
            // What follows on the line starts the next piece (helm's
            // regex reads it so).
            piece.push_str(rest);
        } else {
            piece.push_str(line);
        }
    }
    flush(&mut piece)?;
    Some(out)
}

/// `group/Kind namespace/name` of an object (`None`: not one — no kind or
/// no name — or one helm reads as more: a list (an `items` key, or a kind
/// ending in `List`: the API machinery flattens it into its items), or one
/// holding a YAML merge key `<<`, which Go's YAML applies and ours does
/// not).
fn identity(o: &Value) -> Option<String> {
    let text = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (kind, name) = (text("/kind"), text("/metadata/name"));
    if kind.is_empty() || name.is_empty() || kind.ends_with("List") || o.get("items").is_some() {
        return None;
    }
    if holds_merge_key(o) {
        return None;
    }
    let group = text("/apiVersion").rsplit_once('/').map_or("", |(g, _)| g);
    Some(format!(
        "{group}/{kind} {}/{name}",
        text("/metadata/namespace")
    ))
}

fn holds_merge_key(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, v)| k == "<<" || holds_merge_key(v)),
        Value::Array(items) => items.iter().any(holds_merge_key),
        _ => false,
    }
}

/// Every object identity of `manifests`; `None` if one cannot be read.
fn identities<'a>(manifests: impl IntoIterator<Item = &'a str>) -> Option<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for m in manifests {
        for o in pieces(m)? {
            out.insert(identity(&o)?);
        }
    }
    Some(out)
}

/// Whether `stored` and `rendered` name the same objects — by group,
/// kind, namespace and name, each once — every piece of `stored` read
/// strictly (see the module docs): what a lenient reader would skip or
/// fold (a document that does not parse, a name twice, another API
/// group) is a difference.
pub fn same_names(stored: &str, rendered: &str) -> bool {
    let names = |m: &str| -> Option<Vec<String>> {
        let mut out: Vec<String> = pieces(m)?.iter().map(identity).collect::<Option<_>>()?;
        out.sort();
        Some(out)
    };
    match (names(stored), names(rendered)) {
        (Some(s), Some(r)) => s == r && s.windows(2).all(|w| w[0] != w[1]),
        _ => false,
    }
}

/// Whether the objects of `candidate` are all named in `known`, and its
/// hooks all among `known_hooks` field for field (see the module docs).
/// Known manifests that cannot be read count as naming nothing.
pub fn within(
    candidate: &str,
    candidate_hooks: &[String],
    known: &[&str],
    known_hooks: &[&str],
) -> bool {
    let known_names: BTreeSet<String> = known
        .iter()
        .filter_map(|m| identities([*m]))
        .flatten()
        .collect();
    let names_known = identities([candidate]).is_some_and(|c| c.is_subset(&known_names));
    let known_hook_objects: Vec<Value> = known_hooks
        .iter()
        .filter_map(|h| pieces(h))
        .flatten()
        .collect();
    let hooks_known = candidate_hooks.iter().all(|h| {
        pieces(h).is_some_and(|objects| {
            objects
                .iter()
                .all(|o| identity(o).is_some() && known_hook_objects.contains(o))
        })
    });
    names_known && hooks_known
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\ndata:\n  greeting: hello\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n";
    const HOOK: &str = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: web-migrate\n  annotations:\n    helm.sh/hook: pre-upgrade\nspec:\n  template: {}\n";

    fn hooks(h: &[&str]) -> Vec<String> {
        h.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn objects_we_named_before_with_other_values_pass() {
        let older = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\ndata:\n  greeting: older\n";
        assert!(within(older, &hooks(&[HOOK]), &[OURS], &[HOOK]));
        assert!(
            within("", &[], &[OURS], &[]),
            "an empty manifest names nothing"
        );
        assert!(within("# only a comment\n---\n", &[], &[OURS], &[]));
    }

    #[test]
    fn an_object_of_another_namespace_group_or_name_fails() {
        for planted in [
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\n  namespace: kube-system\n",
            "apiVersion: evil.example/v1\nkind: ConfigMap\nmetadata:\n  name: web-env\n",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: coredns\n",
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: web\n",
        ] {
            let candidate = format!("{OURS}---\n{planted}");
            assert!(!within(&candidate, &[], &[OURS], &[]), "{planted}");
        }
    }

    #[test]
    fn a_separator_hidden_in_a_block_scalar_is_cut_and_checked() {
        // One object to a YAML parser; two to helm's splitter, the second
        // in kube-system.
        let hidden = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\ndata:\n  note: |\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: coredns\n  namespace: kube-system\n";
        assert!(!within(hidden, &[], &[OURS], &[]));
        let glued =
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\n---apiVersion: v1\n";
        assert!(!within(glued, &[], &[OURS], &[]), "--- glued to text");
    }

    #[test]
    fn what_does_not_parse_strictly_or_names_nothing_fails() {
        for bad in [
            // Duplicate keys: Go's YAML takes the last.
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\nmetadata:\n  name: coredns\n  namespace: kube-system\n",
            // Two documents where we cut none (`...` ends one).
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\n...\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: kube-system\n",
            "kind: ConfigMap\n",
            "[not, a, mapping]\n",
            "key: [unclosed\n",
        ] {
            assert!(!within(bad, &[], &[OURS], &[]), "{bad}");
        }
    }

    #[test]
    fn a_list_or_a_merge_key_fails_whatever_its_outer_name() {
        for hostile in [
            // helm flattens anything with `items` into its items.
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\nitems:\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: coredns, namespace: kube-system}\n",
            "apiVersion: v1\nkind: ConfigMapList\nmetadata:\n  name: web-env\n",
            // Go's YAML merges `<<`: the name and namespace come from it.
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\n  <<: {name: coredns, namespace: kube-system}\n",
            "<<: {apiVersion: v1, kind: Secret, metadata: {name: x, namespace: kube-system}}\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-env\n",
        ] {
            assert!(!within(hostile, &[], &[OURS], &[]), "{hostile}");
        }
    }

    #[test]
    fn a_hook_must_be_one_we_rendered_field_for_field() {
        let changed = HOOK.replace(
            "template: {}",
            "template: {spec: {containers: [{name: x, image: evil}]}}",
        );
        assert!(!within("", &hooks(&[&changed]), &[OURS], &[HOOK]));
        assert!(!within("", &hooks(&[HOOK]), &[OURS], &[]), "no known hooks");
        let moved = HOOK.replace(
            "name: web-migrate",
            "name: web-migrate\n  namespace: kube-system",
        );
        assert!(!within("", &hooks(&[&moved]), &[OURS], &[HOOK]));
    }
}
