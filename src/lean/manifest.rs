//! The objects a release's rendered manifest declares, as far as delivery
//! needs them to notice a deleted object (level-based drift): kind,
//! namespace and name of each Deployment, StatefulSet, Service, Ingress and
//! Secret labelled `app.kubernetes.io/managed-by: Helm` — exactly the
//! objects the shared caches hold ([`super::objects::managed_by_helm_options`]).
//!
//! Read by a line scanner, not a YAML parser: the work is linear in the
//! manifest whatever it holds (no alias to expand, no nesting to recurse),
//! and it reads only block-style top-level `kind:` and `metadata:` with its
//! `name:`, `namespace:` and `labels:`. An object written another way is
//! not listed, which costs only its drift check; a listed object that is
//! not there is confirmed against the API before anything is repaired.

use crate::lean::marker::documents;
use crate::lean::objects::MANAGED_BY_LABEL;

/// The kinds whose deletion delivery notices (the caches watch them).
pub const WATCHED_KINDS: [&str; 5] = ["Deployment", "StatefulSet", "Service", "Ingress", "Secret"];

/// One object of a release's manifest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ManifestObject {
    pub kind: String,
    /// Empty: the release's namespace.
    pub namespace: String,
    pub name: String,
}

/// The objects of [`WATCHED_KINDS`] in `manifest` that carry
/// `app.kubernetes.io/managed-by: Helm`.
pub fn watched_objects(manifest: &str) -> Vec<ManifestObject> {
    documents(manifest).filter_map(scan).collect()
}

/// Which block of the document a line is in.
#[derive(PartialEq)]
enum Block {
    Top,
    Metadata {
        indent: Option<usize>,
    },
    Labels {
        parent: usize,
        indent: Option<usize>,
    },
}

fn scan(doc: &str) -> Option<ManifestObject> {
    let (mut kind, mut name, mut namespace, mut managed) = ("", "", "", false);
    let mut block = Block::Top;
    for line in doc.lines() {
        let text = line.trim_end();
        let body = text.trim_start();
        if body.is_empty() || body.starts_with('#') || body == "---" {
            continue;
        }
        let indent = text.len() - body.len();
        if indent == 0 {
            block = Block::Top;
            match key_value(body) {
                Some(("kind", v)) => kind = v,
                Some(("metadata", "")) => block = Block::Metadata { indent: None },
                _ => {}
            }
            continue;
        }
        if let Block::Labels { parent, indent: li } = &mut block {
            if indent > *parent {
                let own = *li.get_or_insert(indent);
                if indent == own && key_value(body) == Some((MANAGED_BY_LABEL, "Helm")) {
                    managed = true;
                }
                continue;
            }
            block = Block::Metadata {
                indent: Some(*parent),
            };
        }
        if let Block::Metadata { indent: mi } = &mut block {
            let own = *mi.get_or_insert(indent);
            if indent != own {
                continue;
            }
            match key_value(body) {
                Some(("name", v)) => name = v,
                Some(("namespace", v)) => namespace = v,
                Some(("labels", "")) => {
                    block = Block::Labels {
                        parent: own,
                        indent: None,
                    }
                }
                _ => {}
            }
        }
    }
    (managed && !name.is_empty() && WATCHED_KINDS.contains(&kind)).then(|| ManifestObject {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
    })
}

/// `key: value` of a block mapping line, quotes and a trailing comment
/// taken off (`value` is empty for a key that opens a block).
fn key_value(body: &str) -> Option<(&str, &str)> {
    let (key, rest) = body.split_once(':')?;
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let value = match rest.find(" #") {
        Some(i) => &rest[..i],
        None => rest,
    };
    Some((unquote(key.trim()), unquote(value.trim())))
}

fn unquote(s: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return inner;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(kind: &str, namespace: &str, name: &str) -> ManifestObject {
        ManifestObject {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    #[test]
    fn watched_and_labelled_objects_are_listed_with_their_namespace() {
        let manifest = r#"---
# Source: web/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: "web"   # the release name
  labels:
    app.kubernetes.io/name: web
    "app.kubernetes.io/managed-by": Helm
  annotations:
    name: not-this
spec:
  template:
    metadata:
      name: nor-this
      labels:
        app.kubernetes.io/managed-by: Other
---
# Source: web/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
    namespace: other
    labels:
        app.kubernetes.io/managed-by: 'Helm'
    name: web-svc
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cm
  labels:
    app.kubernetes.io/managed-by: Helm
---
kind: Secret
metadata:
  name: unlabelled
"#;
        assert_eq!(
            watched_objects(manifest),
            vec![
                obj("Deployment", "", "web"),
                obj("Service", "other", "web-svc")
            ]
        );
    }

    #[test]
    fn a_label_of_a_nested_block_or_another_value_does_not_count() {
        let nested = "kind: Deployment\nmetadata:\n  name: a\nspec:\n  labels:\n    app.kubernetes.io/managed-by: Helm\n";
        assert!(watched_objects(nested).is_empty());
        let other = "kind: Deployment\nmetadata:\n  name: a\n  labels:\n    app.kubernetes.io/managed-by: Helmet\n";
        assert!(watched_objects(other).is_empty());
        assert!(watched_objects("").is_empty());
        assert!(watched_objects("{kind: Deployment}").is_empty());
    }
}
