//! Which fields of an object `spec.drift.ignore` leaves out.

use apis::helmapp::{HelmApp, InventoryEntry};

/// The pointers every rule whose target matches `object` names (a target
/// field left empty matches any).
pub fn ignored<'a>(app: &'a HelmApp, object: &InventoryEntry) -> Vec<&'a str> {
    let matches = |want: &str, have: &str| want.is_empty() || want == have;
    app.spec
        .drift
        .ignore
        .iter()
        .filter(|rule| {
            rule.target.as_ref().is_none_or(|t| {
                matches(&t.kind, &object.kind)
                    && matches(&t.name, &object.name)
                    && matches(&t.namespace, &object.namespace)
            })
        })
        .flat_map(|rule| rule.paths.iter().map(String::as_str))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_applies_to_the_objects_its_target_names() {
        let app: HelmApp = serde_json::from_value(serde_json::json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": "web", "namespace": "apps" },
            "spec": { "chart": { "path": "web" }, "drift": { "ignore": [
                { "paths": ["/spec/replicas"], "target": { "kind": "Deployment" } },
                { "paths": ["/metadata/annotations"] },
                { "paths": ["/data/x"], "target": { "kind": "ConfigMap", "name": "other" } }
            ] } }
        }))
        .expect("a HelmApp");
        let object = |kind: &str, name: &str| InventoryEntry {
            kind: kind.into(),
            api_version: "v1".into(),
            namespace: "apps".into(),
            name: name.into(),
            checked: String::new(),
        };
        assert_eq!(
            ignored(&app, &object("Deployment", "web")),
            ["/spec/replicas", "/metadata/annotations"]
        );
        assert_eq!(
            ignored(&app, &object("ConfigMap", "web")),
            ["/metadata/annotations"]
        );
        assert_eq!(
            ignored(&app, &object("ConfigMap", "other")),
            ["/metadata/annotations", "/data/x"]
        );
    }
}
