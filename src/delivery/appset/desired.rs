//! What a HelmAppSet wants (pure): its child HelmApps — names, specs with
//! the set's `dependsOn`, `suspend` and sequence folded in, ownership — and
//! what their `Ready` makes of the set's.

use apis::helmapp::{Dependency, HelmApp, HelmAppSpec};
use apis::helmappset::{HelmAppSet, MAX_CHILD_NAME};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::condition;
use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::shard::SHARD_LABEL;

/// On a child HelmApp: the name of the set that owns it.
pub const SET_LABEL: &str = "hossted.com/helmappset";
pub use crate::delivery::names::child_name;

/// The names of `set`'s children, in `spec.apps` order.
pub fn child_names(set: &HelmAppSet) -> Vec<String> {
    let name = set.name_any();
    set.spec
        .apps
        .iter()
        .map(|a| child_name(&name, &a.name))
        .collect()
}

/// Why a child's name cannot be a release name, if one cannot.
pub fn invalid_name(set: &HelmAppSet) -> Option<String> {
    let bad = child_names(set)
        .into_iter()
        .find(|c| c.len() > MAX_CHILD_NAME)?;
    Some(format!(
        "child HelmApp {bad:?} is longer than {MAX_CHILD_NAME} characters (Helm's release-name limit): shorten the set's or the app's name"
    ))
}

/// The child HelmApps `set` wants, in order.
pub fn children(set: &HelmAppSet) -> Vec<HelmApp> {
    let mut previous: Option<String> = None;
    set.spec
        .apps
        .iter()
        .zip(child_names(set))
        .map(|(app, name)| {
            let spec = desired_spec(set, &app.spec, previous.as_deref());
            previous = Some(name.clone());
            HelmApp {
                metadata: ObjectMeta {
                    name: Some(name),
                    namespace: set.namespace(),
                    labels: Some(child_labels(set)),
                    owner_references: Some(vec![owner_reference(set)]),
                    ..Default::default()
                },
                spec,
                status: None,
            }
        })
        .collect()
}

/// A child's labels: its set's name, and its set's shard (docs/shards.md),
/// so the child is reconciled by the process that reconciles the set.
fn child_labels(set: &HelmAppSet) -> std::collections::BTreeMap<String, String> {
    let mut labels: std::collections::BTreeMap<String, String> =
        [(SET_LABEL.to_string(), set.name_any())].into();
    if let Some(shard) = set.labels().get(SHARD_LABEL) {
        labels.insert(SHARD_LABEL.to_string(), shard.clone());
    }
    labels
}

/// The child spec of `app`: the set's `dependsOn` and `suspend` added, its
/// `changeWindows` where the app has none, and
/// in a sequenced set a dependency on the app before it.
pub fn desired_spec(set: &HelmAppSet, app: &HelmAppSpec, previous: Option<&str>) -> HelmAppSpec {
    let mut spec = app.clone();
    for d in &set.spec.depends_on {
        if !spec.depends_on.contains(d) {
            spec.depends_on.push(d.clone());
        }
    }
    if let Some(previous) = previous.filter(|_| set.spec.sequenced) {
        spec.depends_on.push(Dependency::helmapp(previous));
    }
    spec.suspend |= set.spec.suspend;
    if spec.change_windows.is_none() {
        spec.change_windows = set.spec.change_windows.clone();
    }
    spec
}

fn owner_reference(set: &HelmAppSet) -> OwnerReference {
    OwnerReference {
        api_version: HelmAppSet::api_version(&()).into_owned(),
        kind: HelmAppSet::kind(&()).into_owned(),
        name: set.name_any(),
        uid: set.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The set's readiness from its children (`None`: not created yet):
/// `(ready, Ready value, reason, message)` — every app Ready, else the
/// first that is not says why.
pub fn readiness(names: &[String], children: &[Option<&HelmApp>]) -> (usize, bool, String, String) {
    let ready = children.iter().filter(|c| c.is_some_and(is_ready)).count();
    if ready == names.len() {
        let message = format!("all {} app(s) are Ready", names.len());
        return (ready, true, Reason::AppsReady.as_str().into(), message);
    }
    let (reason, message) = names
        .iter()
        .zip(children)
        .find(|(_, c)| !c.is_some_and(is_ready))
        .map(|(name, c)| why_not_ready(name, *c))
        .unwrap_or_default();
    (ready, false, reason, message)
}

fn is_ready(app: &HelmApp) -> bool {
    app.status
        .as_ref()
        .is_some_and(|s| condition::is_true(&s.conditions, "Ready"))
}

/// The Ready reason and message of a child that is not Ready.
fn why_not_ready(name: &str, child: Option<&HelmApp>) -> (String, String) {
    let progressing = Reason::Progressing.as_str().to_string();
    let Some(child) = child else {
        return (progressing, format!("{name}: being created"));
    };
    child
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| (c.reason.clone(), format!("{name}: {}", c.message)))
        .unwrap_or_else(|| (progressing, format!("{name}: not reconciled yet")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::helmapp::{Dependency, DependencyTarget, HelmAppSpec};
    use apis::helmappset::HelmAppSet;
    use apis::helmappset::{HelmAppSetSpec, SetApp};

    fn set(sequenced: bool) -> HelmAppSet {
        let mut s = HelmAppSet::new(
            "stack",
            HelmAppSetSpec {
                sequenced,
                depends_on: vec![Dependency::helmappset("base")],
                suspend: false,
                change_windows: None,
                apps: vec![SetApp {
                    name: "db".into(),
                    spec: HelmAppSpec::default(),
                }],
            },
        );
        s.metadata.namespace = Some("apps".into());
        s
    }

    #[test]
    fn a_child_depends_on_the_set_dependencies_and_in_sequence_on_the_app_before() {
        let app = HelmAppSpec::default();
        let first = desired_spec(&set(true), &app, None);
        assert_eq!(first.depends_on.len(), 1, "the set's own dependency");
        assert_eq!(first.depends_on[0].target(), DependencyTarget::HelmAppSet);
        let second = desired_spec(&set(true), &app, Some("stack-db"));
        assert_eq!(second.depends_on.len(), 2);
        assert_eq!(second.depends_on[1].name, "stack-db");
        let unordered = desired_spec(&set(false), &app, Some("stack-db"));
        assert_eq!(unordered.depends_on.len(), 1, "not sequenced: no chain");
        let mut suspended = set(false);
        suspended.spec.suspend = true;
        assert!(desired_spec(&suspended, &app, None).suspend);
    }

    #[test]
    fn the_set_change_windows_apply_to_apps_without_their_own() {
        let window = |schedule: &str| apis::helmapp::ChangeWindows {
            allow: vec![apis::helmapp::ChangeWindow {
                schedule: schedule.into(),
                duration: "1h".into(),
            }],
            ..Default::default()
        };
        let mut windowed = set(false);
        windowed.spec.change_windows = Some(window("0 22 * * *"));
        let plain = HelmAppSpec::default();
        assert_eq!(
            desired_spec(&windowed, &plain, None).change_windows,
            Some(window("0 22 * * *"))
        );
        let own = HelmAppSpec {
            change_windows: Some(window("0 3 * * *")),
            ..Default::default()
        };
        assert_eq!(
            desired_spec(&windowed, &own, None).change_windows,
            Some(window("0 3 * * *")),
            "the app's own windows win"
        );
    }
}
