//! `dependsOn`: what a HelmApp waits for, and the cycles that would make it
//! wait forever.
//!
//! The graph: a HelmApp points at what its `dependsOn` names; a HelmAppSet
//! points at its apps (the child HelmApps `<set>-<name>`). A HelmApp that
//! can reach itself is in a cycle: it is told so (`DependencyCycle`, with
//! the path) instead of waiting silently. Everything is read from the
//! informers' caches.

use std::collections::HashSet;

use apis::helmapp::{Dependency, DependencyTarget, HelmApp};
use apis::helmappset::HelmAppSet;
use cache::Store;
use kube::ResourceExt;

use crate::delivery::names::child_name;

/// A node of the graph: `(kind, namespace, name)`.
type Node = (String, String, String);

fn node_of(dependent_ns: &str, d: &Dependency) -> Node {
    (
        kind_of(d),
        namespace_of(dependent_ns, d).to_string(),
        d.name.clone(),
    )
}

/// The namespace `d` names: its own, else the dependent's.
pub fn namespace_of<'a>(dependent_ns: &'a str, d: &'a Dependency) -> &'a str {
    if d.namespace.is_empty() {
        dependent_ns
    } else {
        d.namespace.as_str()
    }
}

/// `HelmApp`, `HelmAppSet`, or `Kind.group` for an object (`Kind` in the
/// core group).
fn kind_of(d: &Dependency) -> String {
    match d.target() {
        DependencyTarget::HelmApp => "HelmApp".into(),
        DependencyTarget::HelmAppSet => "HelmAppSet".into(),
        DependencyTarget::Object { kind, .. } => match d.group() {
            "" => kind.to_string(),
            group => format!("{kind}.{group}"),
        },
    }
}

/// How `d` is filed in the HelmApps' `dependsOn` index: `HelmApp/ns/name`
/// and `HelmAppSet/ns/name`; `Kind.group/name` for an object, whose
/// namespace the handler compares (whether its kind is namespaced is
/// known only from discovery).
pub fn index_key(dependent_ns: &str, d: &Dependency) -> String {
    match d.target() {
        DependencyTarget::Object { .. } => format!("{}/{}", kind_of(d), d.name),
        _ => format!(
            "{}/{}/{}",
            kind_of(d),
            namespace_of(dependent_ns, d),
            d.name
        ),
    }
}

/// The index key of an object of `kind` in `group` named `name`.
pub fn object_index_key(group: &str, kind: &str, name: &str) -> String {
    match group {
        "" => format!("{kind}/{name}"),
        group => format!("{kind}.{group}/{name}"),
    }
}

/// What `node` points at.
fn edges(node: &Node, apps: &Store<HelmApp>, sets: &Store<HelmAppSet>) -> Vec<Node> {
    let (kind, ns, name) = node;
    let key = format!("{ns}/{name}");
    match kind.as_str() {
        "HelmApp" => apps
            .get(&key)
            .map(|a| a.spec.depends_on.iter().map(|d| node_of(ns, d)).collect())
            .unwrap_or_default(),
        "HelmAppSet" => sets
            .get(&key)
            .map(|s| {
                s.spec
                    .apps
                    .iter()
                    .map(|a| ("HelmApp".to_string(), ns.clone(), child_name(name, &a.name)))
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// The path from `app` back to itself through `dependsOn`, if there is one
/// (`[app, …, app]`, as `Kind ns/name` strings).
pub fn cycle_through(
    app: &HelmApp,
    apps: &Store<HelmApp>,
    sets: &Store<HelmAppSet>,
) -> Option<Vec<String>> {
    let ns = app.namespace().unwrap_or_default();
    let start: Node = ("HelmApp".into(), ns.clone(), app.name_any());
    let mut seen: HashSet<Node> = HashSet::new();
    // Depth-first, with the path kept for the message.
    let mut stack: Vec<(Node, Vec<Node>)> = app
        .spec
        .depends_on
        .iter()
        .map(|d| (node_of(&ns, d), vec![start.clone()]))
        .collect();
    while let Some((node, path)) = stack.pop() {
        let mut path = path;
        path.push(node.clone());
        if node == start {
            return Some(
                path.iter()
                    .map(|(k, n, m)| format!("{k} {n}/{m}"))
                    .collect(),
            );
        }
        if !seen.insert(node.clone()) {
            continue;
        }
        for next in edges(&node, apps, sets) {
            stack.push((next, path.clone()));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::helmapp::HelmAppSpec;
    use apis::helmappset::{HelmAppSetSpec, SetApp};
    use std::sync::Arc;

    fn dep(kind: &str, name: &str) -> Dependency {
        Dependency {
            kind: kind.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    fn app(name: &str, deps: Vec<Dependency>) -> HelmApp {
        let mut a = HelmApp::new(
            name,
            HelmAppSpec {
                depends_on: deps,
                ..Default::default()
            },
        );
        a.metadata.namespace = Some("apps".into());
        a
    }

    #[test]
    fn a_cycle_is_found_with_its_path_and_a_chain_is_not_one() {
        let apps: Store<HelmApp> = Store::new();
        let sets: Store<HelmAppSet> = Store::new();
        for a in [
            app("x", vec![dep("HelmApp", "y")]),
            app("y", vec![dep("HelmApp", "x")]),
            app("z", vec![dep("HelmApp", "y")]),
            app("a", vec![]),
            app("b", vec![dep("HelmApp", "a")]),
        ] {
            apps.upsert(Arc::new(a));
        }
        let x = apps.get("apps/x").unwrap();
        assert_eq!(
            cycle_through(&x, &apps, &sets),
            Some(vec![
                "HelmApp apps/x".to_string(),
                "HelmApp apps/y".into(),
                "HelmApp apps/x".into()
            ])
        );
        let z = apps.get("apps/z").unwrap();
        assert_eq!(
            cycle_through(&z, &apps, &sets),
            None,
            "z waits on a cycle but is not in it"
        );
        let b = apps.get("apps/b").unwrap();
        assert_eq!(cycle_through(&b, &apps, &sets), None);
    }

    #[test]
    fn a_set_depending_on_itself_puts_its_apps_in_a_cycle() {
        let apps: Store<HelmApp> = Store::new();
        let sets: Store<HelmAppSet> = Store::new();
        let mut set = HelmAppSet::new(
            "loop",
            HelmAppSetSpec {
                apps: vec![SetApp {
                    name: "one".into(),
                    spec: HelmAppSpec::default(),
                }],
                ..Default::default()
            },
        );
        set.metadata.namespace = Some("apps".into());
        sets.upsert(Arc::new(set));
        apps.upsert(Arc::new(app("loop-one", vec![dep("HelmAppSet", "loop")])));
        let child = apps.get("apps/loop-one").unwrap();
        assert!(cycle_through(&child, &apps, &sets).is_some());
    }
}
