//! Which fields of an object `spec.drift.ignore` leaves out (Flux's drift
//! ignore rules): a rule's target names objects by anchored regular
//! expressions on group, version, kind, name and namespace, and by label
//! and annotation selectors on what the chart renders for the object.

use apis::helmapp::{DriftTarget, HelmApp, InventoryEntry};
use serde_json::Value;

use crate::delivery::selector::{Candidate, Fields, ObjectSelector};

/// The most rules `drift.ignore` may hold (the CRD's `maxItems`).
const MAX_RULES: usize = 64;

/// `spec.drift.ignore`, compiled once per reconcile.
pub struct Rules<'a> {
    rules: Vec<(Option<ObjectSelector>, &'a [String])>,
}

impl<'a> Rules<'a> {
    /// `app`'s rules; an error names the first field that does not
    /// compile (`drift.ignore[1].target.name: …`).
    pub fn of(app: &'a HelmApp) -> Result<Rules<'a>, String> {
        // The CRD's bound, held in code too: an object stored before it
        // keeps its list under ratcheting.
        let count = app.spec.drift.ignore.len();
        if count > MAX_RULES {
            return Err(format!("drift.ignore: {count} rules, at most {MAX_RULES}"));
        }
        let rules = app
            .spec
            .drift
            .ignore
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                let target = rule
                    .target
                    .as_ref()
                    .map(|t| {
                        ObjectSelector::compile(&fields(t))
                            .map_err(|e| format!("drift.ignore[{i}].target.{e}"))
                    })
                    .transpose()?;
                Ok((target, rule.paths.as_slice()))
            })
            .collect::<Result<_, String>>()?;
        Ok(Rules { rules })
    }

    /// Whether a target selects by what the chart renders (labels,
    /// annotations): [`Rules::ignored`] needs the object's manifest then.
    pub fn need_manifest(&self) -> bool {
        self.rules
            .iter()
            .any(|(t, _)| t.as_ref().is_some_and(ObjectSelector::reads_metadata))
    }

    /// The pointers of every rule whose target selects `object`; `desired`:
    /// its manifest document (a selector selects nothing without it).
    pub fn ignored(&self, object: &InventoryEntry, desired: Option<&Value>) -> Vec<&'a str> {
        let candidate = Candidate {
            api_version: &object.api_version,
            kind: &object.kind,
            name: &object.name,
            namespace: &object.namespace,
            document: desired,
        };
        self.rules
            .iter()
            .filter(|(target, _)| target.as_ref().is_none_or(|t| t.selects(&candidate)))
            .flat_map(|(_, paths)| paths.iter().map(String::as_str))
            .collect()
    }
}

fn fields(t: &DriftTarget) -> Fields<'_> {
    Fields {
        group: &t.group,
        version: &t.version,
        kind: &t.kind,
        name: &t.name,
        namespace: &t.namespace,
        label_selector: &t.label_selector,
        annotation_selector: &t.annotation_selector,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app(ignore: Value) -> HelmApp {
        serde_json::from_value(json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": "web", "namespace": "apps" },
            "spec": { "chart": { "path": "web" }, "drift": { "ignore": ignore } }
        }))
        .expect("a HelmApp")
    }

    fn object(api_version: &str, kind: &str, name: &str) -> InventoryEntry {
        InventoryEntry {
            kind: kind.into(),
            api_version: api_version.into(),
            namespace: "apps".into(),
            name: name.into(),
            checked: String::new(),
        }
    }

    #[test]
    fn a_rule_applies_to_the_objects_its_target_names() {
        let app = app(json!([
            { "paths": ["/spec/replicas"], "target": { "kind": "Deployment" } },
            { "paths": ["/metadata/annotations"] },
            { "paths": ["/data/x"], "target": { "kind": "ConfigMap", "name": "other" } }
        ]));
        let rules = Rules::of(&app).unwrap();
        assert!(!rules.need_manifest());
        let ignored = |kind, name| rules.ignored(&object("v1", kind, name), None);
        assert_eq!(
            ignored("Deployment", "web"),
            ["/spec/replicas", "/metadata/annotations"]
        );
        assert_eq!(ignored("ConfigMap", "web"), ["/metadata/annotations"]);
        assert_eq!(
            ignored("ConfigMap", "other"),
            ["/metadata/annotations", "/data/x"]
        );
        assert_eq!(
            ignored("ConfigMap", "other-2"),
            ["/metadata/annotations"],
            "a name matches whole, not as a prefix"
        );
    }

    #[test]
    fn group_version_and_patterns_match_the_whole_value() {
        let app = app(json!([
            { "paths": ["/a"], "target": { "group": "apps", "version": "v1" } },
            { "paths": ["/b"], "target": { "group": "^$" } },
            { "paths": ["/c"], "target": { "name": "web-.*", "namespace": "app.*" } }
        ]));
        let rules = Rules::of(&app).unwrap();
        assert_eq!(
            rules.ignored(&object("apps/v1", "Deployment", "web-1"), None),
            ["/a", "/c"]
        );
        assert_eq!(
            rules.ignored(&object("v1", "ConfigMap", "web"), None),
            ["/b"],
            "the core group is the empty one"
        );
        assert!(
            rules
                .ignored(&object("apps/v1beta1", "Deployment", "db"), None)
                .is_empty()
        );
    }

    #[test]
    fn selectors_read_the_labels_and_annotations_the_chart_renders() {
        let app = app(json!([
            { "paths": ["/spec/replicas"], "target": { "labelSelector": "scaling=hpa" } },
            { "paths": ["/data"], "target": { "kind": "ConfigMap", "annotationSelector": "owner in (ops, sre)" } }
        ]));
        let rules = Rules::of(&app).unwrap();
        assert!(rules.need_manifest());
        let desired = json!({ "metadata": {
            "labels": { "scaling": "hpa" }, "annotations": { "owner": "ops" } } });
        let plain = json!({ "metadata": { "labels": { "scaling": "manual" } } });
        let cm = object("v1", "ConfigMap", "web");
        assert_eq!(
            rules.ignored(&cm, Some(&desired)),
            ["/spec/replicas", "/data"]
        );
        assert!(rules.ignored(&cm, Some(&plain)).is_empty());
        assert!(
            rules.ignored(&cm, None).is_empty(),
            "without the manifest a selector selects nothing"
        );
    }

    #[test]
    fn a_target_that_does_not_compile_is_named() {
        for (target, field) in [
            (json!({ "name": "web-(" }), "drift.ignore[0].target.name: "),
            (
                json!({ "labelSelector": "a in (b" }),
                "drift.ignore[0].target.labelSelector: ",
            ),
            (
                json!({ "kind": "x{99999}{99999}" }),
                "drift.ignore[0].target.kind: ",
            ),
        ] {
            let app = app(json!([{ "paths": ["/a"], "target": target }]));
            let e = Rules::of(&app).err().expect("refused");
            assert!(e.starts_with(field), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
