//! Tenancy, secure by default (docs/tenancy.md):
//! a real apiserver with RBAC, the real helm run by the operator through a
//! wrapper that logs every command line. The operator's namespace
//! (`hossted-operator`) is the only privileged one.

use std::collections::BTreeSet;

use super::*;
use hossted_operator::delivery::{Privileged, Tenancy};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};

const TENANT: &str = "team-a";
const OPERATOR_NS: &str = "hossted-operator";

/// The shipped default: only the operator's namespace is privileged.
fn secure_by_default(s: &mut hossted_operator::delivery::Settings) {
    s.tenancy = Tenancy {
        privileged: Privileged::Namespaces(BTreeSet::from([OPERATOR_NS.to_string()])),
        ..Tenancy::single_tenant(OPERATOR_NS)
    };
}

/// `hossted-deployer` in [`TENANT`], with a Role over what helm's storage
/// and the `reach` chart's own ConfigMap need — nothing cluster-wide.
fn deployer(f: &Fixture) {
    let rbac = format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{ name: hossted-deployer, namespace: {TENANT} }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{ name: hossted-deployer, namespace: {TENANT} }}
rules:
  - apiGroups: [""]
    resources: [secrets, configmaps]
    verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{ name: hossted-deployer, namespace: {TENANT} }}
roleRef: {{ apiGroup: rbac.authorization.k8s.io, kind: Role, name: hossted-deployer }}
subjects: [{{ kind: ServiceAccount, name: hossted-deployer, namespace: {TENANT} }}]
"#
    );
    let file = f.cp.dir().join("deployer-rbac.yaml");
    std::fs::write(&file, rbac).unwrap();
    f.kubectl(&["apply", "-f", file.to_str().unwrap()]);
}

/// The subcommands that write a revision: `install` (over nothing) and
/// `upgrade --install`.
const RELEASING: &[&str] = &["install", "upgrade"];

/// The command lines the wrapper logged for `release` (`<subcommand> …`,
/// one of `subcommands`).
fn lines_for(log: &std::path::Path, subcommands: &[&str], release: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            let mut words = l.split_whitespace().filter(|w| !w.starts_with("--"));
            words.next().is_some_and(|w| subcommands.contains(&w))
                && l.split_whitespace().any(|w| w == release)
        })
        .map(str::to_string)
        .collect()
}

/// Whether `line` runs helm as `user` (`--kube-as-user <user>`).
fn runs_as(line: &str, user: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(2)
        .any(|w| w[0] == "--kube-as-user" && w[1] == user)
}

fn impersonates(line: &str) -> bool {
    line.split_whitespace().any(|w| w == "--kube-as-user")
}

const DEPLOYER: &str = "system:serviceaccount:team-a:hossted-deployer";

/// A helm that logs when each run starts (seconds since the epoch, then
/// its command line); returns (wrapper, log).
fn timed_helm(f: &Fixture) -> (std::path::PathBuf, std::path::PathBuf) {
    let helm = f.cp.helm_binary();
    let log = f.cp.dir().join("timed-helm.log");
    let wrapper = f.cp.dir().join("timed-helm.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n{}echo \"$(date +%s.%N) $*\" >> '{}'\nexec '{}' \"$@\"\n",
            version_passes_through(&helm),
            log.display(),
            helm.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    (wrapper, log)
}

/// A control plane with [`TENANT`]'s deployer, and the operator (tenancy
/// as in production) running [`timed_helm`]; returns its log too.
async fn tenant_operator_with_timed_helm() -> (Fixture, Operator, std::path::PathBuf) {
    let f = Fixture::new().await;
    f.namespace(TENANT).await;
    f.namespace(OPERATOR_NS).await;
    deployer(&f);
    let (wrapper, log) = timed_helm(&f);
    let operator = f
        .start_delivery_with(|s| {
            secure_by_default(s);
            s.helm.binary = wrapper.clone();
        })
        .await;
    (f, operator, log)
}

/// Refused runs `gaps` seconds apart: each at least 2 s after the one
/// before (a slow machine only stretches them), and the third wait as long
/// again as the refusal had lasted — never the work queue's milliseconds.
fn assert_waits_grow(gaps: &[f64]) {
    for gap in gaps {
        assert!(
            *gap >= 1.9,
            "helm ran {gap:.3} s after the run before: {gaps:?}"
        );
    }
    assert!(gaps[2] >= 3.5, "the waits do not grow: {gaps:?}");
}

/// When each run of one of `subcommands` on `release` started, by
/// [`timed_helm`]'s log.
fn starts_of(log: &std::path::Path, subcommands: &[&str], release: &str) -> Vec<f64> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            let call = HelmCall::parse(l);
            subcommands.contains(&call.subcommand.as_str()) && call.on(release)
        })
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

/// Waits until the authorizer answers `allowed` for the deployer deleting
/// Secrets in [`TENANT`].
async fn may_delete_secrets(f: &Fixture, allowed: bool) {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let reviews: Api<SubjectAccessReview> = Api::all(f.cp.client());
    eventually("the authorizer to follow the Role", 30, || async {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(DEPLOYER.into()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(TENANT.into()),
                    verb: Some("delete".into()),
                    resource: Some("secrets".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = reviews.create(&PostParams::default(), &review).await.ok()?;
        (answer.status?.allowed == allowed).then_some(())
    })
    .await;
}

/// A HelmApp deleted while its identity may not delete what the chart
/// made: the refused uninstall backs off as any refusal does — though a
/// HelmApp being deleted gets no status write, the operator keeps when the
/// refusals began — and warns once, not at every attempt; RBAC granted,
/// the uninstall goes through and the HelmApp goes.
#[tokio::test]
async fn a_refused_uninstall_backs_off_warns_once_and_goes_through_once_allowed() {
    let (f, _operator, log) = tenant_operator_with_timed_helm().await;
    apply_helmapp(&f, TENANT, "keep", json!({ "chart": { "path": "reach" } })).await;
    helmapp_ready(&f, TENANT, "keep", "InstallSucceeded", 1).await;
    // The deployer may no longer write Secrets: helm cannot mark the
    // release uninstalling in its storage, nor delete it.
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(f.cp.client(), TENANT);
    let rules = |secret_verbs: serde_json::Value| {
        json!({ "rules": [
            { "apiGroups": [""], "resources": ["secrets"], "verbs": secret_verbs },
            { "apiGroups": [""], "resources": ["configmaps"],
              "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"] },
        ] })
    };
    let without_delete = json!(["get", "list", "watch"]);
    roles
        .patch(
            "hossted-deployer",
            &PatchParams::default(),
            &Patch::Merge(rules(without_delete)),
        )
        .await
        .unwrap();
    // RBAC changes reach the authorizer through its cache: wait until it
    // says so.
    may_delete_secrets(&f, false).await;
    Api::<HelmApp>::namespaced(f.cp.client(), TENANT)
        .delete("keep", &DeleteParams::default())
        .await
        .unwrap();
    let uninstalls = || starts_of(&log, &["uninstall"], "keep");
    eventually("five refused uninstalls", 90, || async {
        (uninstalls().len() >= 5).then_some(())
    })
    .await;
    let runs = uninstalls();
    // (The first look may have been scheduled before the deletion — by
    // the install's own settling — so the first gap is the queue's.)
    let gaps: Vec<f64> = runs.windows(2).skip(1).map(|w| w[1] - w[0]).collect();
    assert_waits_grow(&gaps);
    // One Warning for the one message, however many attempts.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(f.cp.client(), TENANT);
    let warnings: i32 = events
        .list(&kube::api::ListParams::default().fields("involvedObject.name=keep"))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Forbidden"))
        .map(|e| e.count.unwrap_or(1))
        .sum();
    assert_eq!(warnings, 1, "a Forbidden Event per attempt");
    // Allowed again: the next look uninstalls, and the HelmApp goes.
    let with_delete = json!([
        "get", "list", "watch", "create", "update", "patch", "delete"
    ]);
    roles
        .patch(
            "hossted-deployer",
            &PatchParams::default(),
            &Patch::Merge(rules(with_delete)),
        )
        .await
        .unwrap();
    eventually("the HelmApp gone", 120, || async {
        get_helmapp(&f, TENANT, "keep")
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

/// A refusal no retry fixes soon (RBAC) runs helm seconds apart, the
/// waits growing — never at the work queue's millisecond pace (it ran ten
/// times in three seconds) — and a change of the HelmApp still installs.
#[tokio::test]
async fn a_refused_release_runs_helm_seconds_apart_and_a_change_still_installs() {
    let (f, _operator, log) = tenant_operator_with_timed_helm().await;
    apply_helmapp(
        &f,
        TENANT,
        "admin",
        json!({ "chart": { "path": "reach" }, "values": { "clusterAdmin": true } }),
    )
    .await;
    helmapp_with_reason(&f, TENANT, "admin", "Forbidden").await;
    let starts = || starts_of(&log, RELEASING, "admin");
    // It is tried again (the positive control) …
    eventually("four refused runs", 90, || async {
        (starts().len() >= 4).then_some(())
    })
    .await;
    // … each at least 2 s after the one before (a slow machine only
    // stretches the gaps), the gaps not shrinking.
    let runs = starts();
    let gaps: Vec<f64> = runs.windows(2).map(|w| w[1] - w[0]).collect();
    assert_waits_grow(&gaps);
    let app = get_helmapp(&f, TENANT, "admin").await.unwrap();
    assert_eq!(app.status.unwrap().failures, 0, "a refusal is no failure");
    // A change of the HelmApp is acted on: the chart without the binding
    // installs.
    let before = starts().len();
    patch_helmapp(
        &f,
        TENANT,
        "admin",
        json!({ "spec": { "values": { "clusterAdmin": false } } }),
    )
    .await;
    helmapp_ready(&f, TENANT, "admin", "InstallSucceeded", 1).await;
    assert!(starts().len() > before);
}

/// A refused run waits out its refusal whatever else wakes its HelmApp:
/// a seeded random sequence of events that change none of its inputs —
/// its own ConfigMap edited, labelled or deleted, the HelmApp labelled or
/// annotated, its values Secret labelled, another ConfigMap made — keeps
/// the refused upgrades seconds apart, as without them. Red without
/// `decide::refusal::gate`: each event ran helm again (fractions of a
/// second apart). A change of the values Secret still runs at once and
/// upgrades. `HUNT_SEED=<n>` replays a sequence.
#[tokio::test]
async fn events_that_change_no_input_do_not_run_a_refused_upgrade_again() {
    let seed = std::env::var("HUNT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let (f, _operator, log) = tenant_operator_with_timed_helm().await;
    f.secret(
        TENANT,
        "churn-values",
        &[("values.yaml", "greeting: one\n")],
    )
    .await;
    apply_helmapp(
        &f,
        TENANT,
        "churn",
        json!({
            "chart": { "path": "reach" },
            "valuesFrom": [{ "kind": "Secret", "name": "churn-values" }]
        }),
    )
    .await;
    helmapp_ready(&f, TENANT, "churn", "InstallSucceeded", 1).await;
    let secrets = Api::<Secret>::namespaced(f.cp.client(), TENANT);
    let values = |yaml: &str| json!({ "stringData": { "values.yaml": yaml } });
    secrets
        .patch(
            "churn-values",
            &PatchParams::default(),
            &Patch::Merge(&values("clusterAdmin: true\n")),
        )
        .await
        .unwrap();
    helmapp_with_reason(&f, TENANT, "churn", "Forbidden").await;
    let configmaps = Api::<ConfigMap>::namespaced(f.cp.client(), TENANT);
    let apps = Api::<HelmApp>::namespaced(f.cp.client(), TENANT);
    let merge = |body: serde_json::Value| Patch::Merge(body);
    let mut rng = super::model::Rng::new(seed);
    let mut done = Vec::new();
    let churn = std::time::Instant::now();
    let mut n = 0u64;
    while churn.elapsed() < std::time::Duration::from_secs(20) {
        n += 1;
        let what = match rng.below(7) {
            0 => {
                let body = merge(json!({ "data": { "greeting": format!("edited {n}") } }));
                let _ = configmaps
                    .patch("churn-reach", &PatchParams::default(), &body)
                    .await;
                "the release's ConfigMap edited"
            }
            1 => {
                let body = merge(json!({ "metadata": { "labels": { "churn": n.to_string() } } }));
                let _ = configmaps
                    .patch("churn-reach", &PatchParams::default(), &body)
                    .await;
                "the release's ConfigMap labelled"
            }
            2 => {
                let _ = configmaps
                    .delete("churn-reach", &DeleteParams::default())
                    .await;
                "the release's ConfigMap deleted"
            }
            3 => {
                let body = merge(json!({ "metadata": { "labels": { "churn": n.to_string() } } }));
                apps.patch("churn", &PatchParams::default(), &body)
                    .await
                    .unwrap();
                "the HelmApp labelled"
            }
            4 => {
                let body =
                    merge(json!({ "metadata": { "annotations": { "churn": n.to_string() } } }));
                apps.patch("churn", &PatchParams::default(), &body)
                    .await
                    .unwrap();
                "the HelmApp annotated"
            }
            5 => {
                let body = merge(json!({ "metadata": { "labels": { "churn": n.to_string() } } }));
                secrets
                    .patch("churn-values", &PatchParams::default(), &body)
                    .await
                    .unwrap();
                "the values Secret labelled"
            }
            _ => {
                let other = ConfigMap {
                    metadata: kube::api::ObjectMeta {
                        name: Some(format!("unrelated-{n}")),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                configmaps
                    .create(&PostParams::default(), &other)
                    .await
                    .unwrap();
                "another ConfigMap made"
            }
        };
        done.push(what);
        tokio::time::sleep(std::time::Duration::from_millis(50 + rng.below(450))).await;
    }
    // The refused upgrades (the install aside), each at least 2 s after
    // the one before: only the waits ran them.
    let runs = starts_of(&log, RELEASING, "churn");
    let refused: Vec<f64> = runs[1..].to_vec();
    let gaps: Vec<f64> = refused.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|gap| *gap >= 1.9),
        "seed {seed} (HUNT_SEED={seed} to replay): helm ran again sooner than the refusal's wait: gaps {gaps:?} over {} events: {done:?}",
        done.len()
    );
    // The positive control: the refusals were tried again meanwhile.
    assert!(refused.len() >= 3, "refused runs {refused:?}");
    // A change of an input runs at once, and upgrades: made as a refused
    // run starts, whose wait would be as long as the refusals have lasted
    // (over 20 s by now).
    let seen = starts_of(&log, RELEASING, "churn").len();
    eventually("the next refused run", 120, || async {
        (starts_of(&log, RELEASING, "churn").len() > seen).then_some(())
    })
    .await;
    secrets
        .patch(
            "churn-values",
            &PatchParams::default(),
            &Patch::Merge(&values("greeting: two\n")),
        )
        .await
        .unwrap();
    helmapp_with_reason(&f, TENANT, "churn", "UpgradeSucceeded").await;
    let runs = starts_of(&log, RELEASING, "churn");
    let (first, last, next) = (runs[1], runs[seen], runs[seen + 1]);
    assert!(
        next - last < last - first,
        "the changed values waited for the refusal's wait: a run at {:.1} s, the next {:.1} s later, the refusals had lasted {:.1} s",
        last,
        next - last,
        last - first
    );
}

#[tokio::test]
async fn a_tenant_helmapp_can_do_only_what_its_namespace_rbac_allows() {
    let f = Fixture::new().await;
    f.namespace(TENANT).await;
    f.namespace(OPERATOR_NS).await;
    deployer(&f);
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| {
            secure_by_default(s);
            s.helm.binary = wrapper.clone();
        })
        .await;

    // Within the namespace's RBAC: installs and upgrades, as the deployer.
    apply_helmapp(&f, TENANT, "plain", json!({ "chart": { "path": "reach" } })).await;
    helmapp_ready(&f, TENANT, "plain", "InstallSucceeded", 1).await;
    patch_helmapp(
        &f,
        TENANT,
        "plain",
        json!({ "spec": { "values": { "greeting": "hi" } } }),
    )
    .await;
    helmapp_ready(&f, TENANT, "plain", "UpgradeSucceeded", 2).await;

    // A ClusterRoleBinding to cluster-admin: refused by the API, as the
    // deployer may not; nothing bound.
    apply_helmapp(
        &f,
        TENANT,
        "admin",
        json!({ "chart": { "path": "reach" }, "values": { "clusterAdmin": true } }),
    )
    .await;
    let app = helmapp_with_reason(&f, TENANT, "admin", "Forbidden").await;
    let status = app.status.unwrap();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert!(
        ready.message.contains("clusterrolebindings")
            && ready.message.contains("serviceAccountName"),
        "names what was refused and what to do: {}",
        ready.message
    );
    assert_eq!(status.failures, 0, "a refusal is not a failed attempt");
    let bindings: Api<ClusterRoleBinding> = Api::all(f.cp.client());
    assert!(bindings.get_opt("admin-admin").await.unwrap().is_none());
    an_event(&f, TENANT, "admin", "Forbidden").await;

    // A template with metadata.namespace: kube-system: refused, nothing there.
    apply_helmapp(
        &f,
        TENANT,
        "elsewhere",
        json!({ "chart": { "path": "reach" }, "values": { "otherNamespace": "kube-system" } }),
    )
    .await;
    helmapp_with_reason(&f, TENANT, "elsewhere", "Forbidden").await;
    let kube_system: Api<ConfigMap> = Api::namespaced(f.cp.client(), "kube-system");
    assert!(
        kube_system
            .get_opt("elsewhere-elsewhere")
            .await
            .unwrap()
            .is_none()
    );

    // targetNamespace and dependsOn into another namespace: refused before
    // any helm process.
    apply_helmapp(
        &f,
        TENANT,
        "target",
        json!({ "chart": { "path": "reach" }, "targetNamespace": "kube-system" }),
    )
    .await;
    helmapp_with_reason(&f, TENANT, "target", "CrossNamespaceRef").await;
    apply_helmapp(
        &f,
        TENANT,
        "depends",
        json!({ "chart": { "path": "reach" },
                "dependsOn": [{ "name": "x", "namespace": OPERATOR_NS }] }),
    )
    .await;
    helmapp_with_reason(&f, TENANT, "depends", "CrossNamespaceRef").await;
    assert!(lines_for(&log, RELEASING, "target").is_empty());
    assert!(lines_for(&log, RELEASING, "depends").is_empty());

    // The platform's own namespace keeps the operator's rights.
    apply_helmapp(
        &f,
        OPERATOR_NS,
        "platform",
        json!({ "chart": { "path": "reach" }, "values": { "clusterRole": true } }),
    )
    .await;
    helmapp_ready(&f, OPERATOR_NS, "platform", "InstallSucceeded", 1).await;
    let roles: Api<ClusterRole> = Api::all(f.cp.client());
    assert!(roles.get_opt("platform-reader").await.unwrap().is_some());
    let platform_runs = lines_for(&log, RELEASING, "platform");
    assert!(!platform_runs.is_empty() && !platform_runs.iter().any(|l| impersonates(l)));

    // A tenant HelmApp that carries the project label gains nothing by it.
    let labelled: HelmApp = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": "labelled", "namespace": TENANT,
                      "labels": { "hossted.com/project": "cluster" } },
        "spec": { "chart": { "path": "reach" }, "values": { "clusterRole": true } }
    }))
    .unwrap();
    Api::<HelmApp>::namespaced(f.cp.client(), TENANT)
        .create(&PostParams::default(), &labelled)
        .await
        .unwrap();
    helmapp_with_reason(&f, TENANT, "labelled", "Forbidden").await;
    assert!(roles.get_opt("labelled-reader").await.unwrap().is_none());

    // A failed upgrade is rolled back — as the deployer too.
    apply_helmapp(
        &f,
        TENANT,
        "rolled",
        json!({ "chart": { "path": "tiny" },
                "remediation": { "retries": 0, "onFailure": "rollback" } }),
    )
    .await;
    helmapp_ready(&f, TENANT, "rolled", "InstallSucceeded", 1).await;
    patch_helmapp(
        &f,
        TENANT,
        "rolled",
        json!({ "spec": { "values": { "broken": true } } }),
    )
    .await;
    helmapp_with_reason(&f, TENANT, "rolled", "RetriesExhausted").await;
    assert_eq!(lines_for(&log, &["rollback"], "rolled").len(), 1);

    // Deleting a tenant app: its uninstall runs as the deployer too.
    Api::<HelmApp>::namespaced(f.cp.client(), TENANT)
        .delete("plain", &DeleteParams::default())
        .await
        .unwrap();
    eventually("plain gone", 60, || async {
        get_helmapp(&f, TENANT, "plain")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    // Every helm command line of a tenant release carried the deployer.
    for release in ["plain", "admin", "elsewhere", "labelled", "rolled"] {
        let lines = lines_for(
            &log,
            &["install", "upgrade", "uninstall", "rollback"],
            release,
        );
        assert!(!lines.is_empty(), "{release} ran helm");
        for line in &lines {
            assert!(runs_as(line, DEPLOYER), "{release}: {line}");
        }
    }
    assert_eq!(lines_for(&log, &["uninstall"], "plain").len(), 1);
    operator.stop().await;
}

/// Rewrites the newest storage Secret of `release` in `ns` with a
/// ConfigMap in kube-system added to its manifest — what a tenant who may
/// write Secrets in its namespace could do to make the operator's next
/// uninstall delete it.
async fn tamper(f: &Fixture, ns: &str, release: &str) {
    let secrets: Api<Secret> = Api::namespaced(f.cp.client(), ns);
    let newest = *storage_revisions(f, ns, release)
        .await
        .keys()
        .last()
        .unwrap();
    let name = format!("sh.helm.release.v1.{release}.v{newest}");
    let mut secret = secrets.get(&name).await.unwrap();
    let data = secret.data.as_mut().unwrap();
    let json = hossted_operator::lean::helm::release_json(&data["release"].0).unwrap();
    let mut stored: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let manifest = stored["manifest"].as_str().unwrap().to_string();
    stored["manifest"] = json!(format!(
        "{manifest}\n---\n# Source: reach/templates/planted.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: precious\n  namespace: kube-system\n"
    ));
    let encoded =
        hossted_operator::lean::helm::encode_release(&serde_json::to_vec(&stored).unwrap());
    data.insert("release".into(), k8s_openapi::ByteString(encoded));
    secrets
        .replace(&name, &PostParams::default(), &secret)
        .await
        .unwrap();
}

#[tokio::test]
async fn tampered_storage_runs_no_helm_and_a_deletion_leaves_it_alone() {
    let f = Fixture::new().await;
    f.namespace(TENANT).await;
    f.namespace(OPERATOR_NS).await;
    deployer(&f);
    // What the planted manifest entry would delete.
    let kube_system: Api<ConfigMap> = Api::namespaced(f.cp.client(), "kube-system");
    let precious: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "precious", "namespace": "kube-system" }, "data": { "keep": "me" }
    }))
    .unwrap();
    kube_system
        .create(&PostParams::default(), &precious)
        .await
        .unwrap();
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| {
            secure_by_default(s);
            s.helm.binary = wrapper.clone();
        })
        .await;
    // A privileged app (helm as the operator, who could delete anything)
    // and a tenant's.
    apply_helmapp(
        &f,
        OPERATOR_NS,
        "platform",
        json!({ "chart": { "path": "reach" } }),
    )
    .await;
    apply_helmapp(
        &f,
        TENANT,
        "tenant",
        json!({ "chart": { "path": "reach" } }),
    )
    .await;
    let platform = helmapp_ready(&f, OPERATOR_NS, "platform", "InstallSucceeded", 1).await;
    helmapp_ready(&f, TENANT, "tenant", "InstallSucceeded", 1).await;
    let recorded = &platform.status.unwrap().history[0].release_digest;
    assert!(
        recorded.starts_with("sha256:"),
        "digest recorded: {recorded:?}"
    );

    let runs_before = std::fs::read_to_string(&log).unwrap().lines().count();
    tamper(&f, OPERATOR_NS, "platform").await;
    tamper(&f, TENANT, "tenant").await;
    helmapp_with_reason(&f, OPERATOR_NS, "platform", "StorageTampered").await;
    helmapp_with_reason(&f, TENANT, "tenant", "StorageTampered").await;
    an_event(&f, OPERATOR_NS, "platform", "StorageTampered").await;
    // Deleted: the finalizer goes without an uninstall.
    for (ns, name) in [(OPERATOR_NS, "platform"), (TENANT, "tenant")] {
        Api::<HelmApp>::namespaced(f.cp.client(), ns)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    for (ns, name) in [(OPERATOR_NS, "platform"), (TENANT, "tenant")] {
        eventually("the HelmApp gone", 60, || async {
            get_helmapp(&f, ns, name).await.is_none().then_some(())
        })
        .await;
    }
    let runs_after = std::fs::read_to_string(&log).unwrap().lines().count();
    assert_eq!(runs_after, runs_before, "no helm ran on tampered storage");
    assert!(
        kube_system.get_opt("precious").await.unwrap().is_some(),
        "the object the edit planted was not deleted"
    );
    // The releases were left as they are.
    assert!(
        !storage_revisions(&f, OPERATOR_NS, "platform")
            .await
            .is_empty()
    );
    assert!(!storage_revisions(&f, TENANT, "tenant").await.is_empty());

    // An uninstall into a namespace that is terminating counts as done (no
    // namespace controller runs here: a deleted namespace stays so).
    f.namespace("doomed").await;
    apply_helmapp(
        &f,
        OPERATOR_NS,
        "doomed",
        json!({ "chart": { "path": "tiny" }, "targetNamespace": "doomed" }),
    )
    .await;
    helmapp_ready(&f, OPERATOR_NS, "doomed", "InstallSucceeded", 1).await;
    f.kubectl(&["delete", "namespace", "doomed", "--wait=false"]);
    Api::<HelmApp>::namespaced(f.cp.client(), OPERATOR_NS)
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    eventually("doomed gone", 60, || async {
        get_helmapp(&f, OPERATOR_NS, "doomed")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        lines_for(&log, &["uninstall"], "doomed").is_empty(),
        "no helm uninstall ran"
    );
    operator.stop().await;
}

/// A HelmApp in [`TENANT`] named `name` that reads values from the Secret
/// `secret`.
fn app_reading(name: &str, secret: &str) -> HelmApp {
    serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": name, "namespace": TENANT },
        "spec": { "chart": { "path": "tiny" },
                  "valuesFrom": [{ "kind": "Secret", "name": secret }] }
    }))
    .unwrap()
}

/// A Role in [`TENANT`] letting `subject` (a `kind: User` or
/// `ServiceAccount` subject, YAML) write HelmApps and HelmAppSets, plus
/// `extra` rules.
fn author_role(f: &Fixture, name: &str, subject: &str, extra: &str) {
    let rbac = format!(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{ name: {name}, namespace: {TENANT} }}
rules:
  - apiGroups: [hossted.com]
    resources: [helmapps, helmappsets]
    verbs: [get, list, create, update, patch]{extra}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{ name: {name}, namespace: {TENANT} }}
roleRef: {{ apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name} }}
subjects: [{subject}]
"#
    );
    let file = f.cp.dir().join(format!("{name}-rbac.yaml"));
    std::fs::write(&file, rbac).unwrap();
    f.kubectl(&["apply", "-f", file.to_str().unwrap()]);
}

#[tokio::test]
async fn an_author_may_reference_only_the_secrets_they_may_read_themselves() {
    let f = Fixture::new().await;
    f.helmapp_crd().await;
    f.namespace(TENANT).await;
    let policy = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/manifests/delivery/admission/helmapp-references.yaml"
    );
    f.kubectl(&["apply", "-f", policy]);
    f.secret(TENANT, "db", &[("values.yaml", "password: s3cret")])
        .await;
    author_role(
        &f,
        "alice",
        "{ kind: User, name: alice, apiGroup: rbac.authorization.k8s.io }",
        "",
    );
    let alice = f.cp.client_for_user("alice", None).await.unwrap();
    let as_alice: Api<HelmApp> = Api::namespaced(alice.clone(), TENANT);
    let as_admin: Api<HelmApp> = Api::namespaced(f.cp.client(), TENANT);

    // Alice may create HelmApps but not read the Secret db: refused, named.
    let refused = eventually("the policy refuses alice", 60, || async {
        match as_alice
            .create(&PostParams::default(), &app_reading("web", "db"))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 403 => Some(s),
            Ok(_) => {
                // Created before the policy was in force: try again. Alice
                // may not delete (her role has no delete): an app she
                // leaves would make every later create of it a conflict.
                as_admin
                    .delete("web", &DeleteParams::default())
                    .await
                    .expect("the admin deletes what alice created too early");
                None
            }
            Err(_) => None,
        }
    })
    .await;
    assert!(
        refused.message.contains("secrets/db"),
        "{}",
        refused.message
    );

    // The same for a set's app's chart credentials.
    let set: apis::helmappset::HelmAppSet = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmAppSet",
        "metadata": { "name": "shop", "namespace": TENANT },
        "spec": { "apps": [{ "name": "a", "spec": { "chart": {
            "repo": "https://charts.example.com", "name": "web",
            "credentialsSecretRef": { "name": "repo-creds" } } } }] }
    }))
    .unwrap();
    let sets: Api<apis::helmappset::HelmAppSet> = Api::namespaced(alice.clone(), TENANT);
    match sets.create(&PostParams::default(), &set).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert!(s.message.contains("secrets/repo-creds"), "{}", s.message);
        }
        other => panic!("a set referencing an unreadable Secret: {other:?}"),
    }

    // And for the keys and trust root a chart is verified against.
    for (field, secret) in [
        ("secretRef", "cosign-pub"),
        ("trustedRootSecretRef", "private-root"),
    ] {
        let mut verify = json!({ "provider": "cosign",
            "matchOIDCIdentity": [{ "issuer": "^x$", "subject": "^y$" }] });
        verify[field] = json!({ "name": secret });
        let app: HelmApp = serde_json::from_value(json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": "verified", "namespace": TENANT },
            "spec": { "chart": { "oci": "oci://registry.example/charts/web", "version": "1.0.0",
                "verify": verify } }
        }))
        .unwrap();
        match as_alice.create(&PostParams::default(), &app).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 403);
                assert!(
                    s.message.contains(&format!("secrets/{secret}")),
                    "{}",
                    s.message
                );
            }
            other => panic!("chart.verify.{field} naming an unreadable Secret: {other:?}"),
        }
    }

    // And for Git credentials, the age keys values are decrypted with, and
    // a remote cluster's kubeconfig (its credentials would be lent).
    for (spec, secret) in [
        (
            json!({ "chart": { "git": { "url": "https://git.example/c.git",
                "secretRef": { "name": "git-auth" } } } }),
            "git-auth",
        ),
        (
            json!({ "chart": { "path": "tiny" }, "valuesFiles": ["v.yaml"],
                "valuesSource": { "git": { "url": "https://git.example/v.git",
                "secretRef": { "name": "values-auth" } } } }),
            "values-auth",
        ),
        (
            json!({ "chart": { "path": "tiny" },
                "decryption": { "provider": "sops", "secretRef": { "name": "sops-age" } } }),
            "sops-age",
        ),
        (
            json!({ "chart": { "path": "tiny" },
                "kubeConfig": { "secretRef": { "name": "remote-kubeconfig" } } }),
            "remote-kubeconfig",
        ),
    ] {
        let app: HelmApp = serde_json::from_value(json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": "sourced", "namespace": TENANT }, "spec": spec
        }))
        .unwrap();
        match as_alice.create(&PostParams::default(), &app).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 403);
                assert!(
                    s.message.contains(&format!("secrets/{secret}")),
                    "{}",
                    s.message
                );
            }
            other => panic!("a reference to unreadable Secret {secret}: {other:?}"),
        }
    }

    // Given get on db, alice may.
    author_role(
        &f,
        "alice",
        "{ kind: User, name: alice, apiGroup: rbac.authorization.k8s.io }",
        "\n  - apiGroups: [\"\"]\n    resources: [secrets]\n    resourceNames: [db]\n    verbs: [get]",
    );
    eventually("alice may, with get on db", 60, || async {
        as_alice
            .create(&PostParams::default(), &app_reading("web", "db"))
            .await
            .ok()
    })
    .await;

    // Naming a serviceAccountName needs `impersonate` on it (issue 57):
    // creating a HelmApp would otherwise lend that account's rights.
    let runs_as = |account: &str| -> HelmApp {
        serde_json::from_value(json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": "as-deployer", "namespace": TENANT },
            "spec": { "chart": { "path": "tiny" }, "serviceAccountName": account }
        }))
        .unwrap()
    };
    match as_alice
        .create(&PostParams::default(), &runs_as("deployer"))
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert!(
                s.message.contains("impersonate") && s.message.contains("deployer"),
                "{}",
                s.message
            );
        }
        other => panic!("a serviceAccountName alice may not impersonate: {other:?}"),
    }
    author_role(
        &f,
        "alice",
        "{ kind: User, name: alice, apiGroup: rbac.authorization.k8s.io }",
        "\n  - apiGroups: [\"\"]\n    resources: [secrets]\n    resourceNames: [db]\n    verbs: [get]\n  - apiGroups: [\"\"]\n    resources: [serviceaccounts]\n    resourceNames: [deployer]\n    verbs: [impersonate]",
    );
    eventually("alice may, with impersonate on deployer", 60, || async {
        as_alice
            .create(&PostParams::default(), &runs_as("deployer"))
            .await
            .ok()
    })
    .await;

    // The operator's own ServiceAccount is exempt (a set's children).
    author_role(
        &f,
        "operator",
        "{ kind: ServiceAccount, name: hossted-operator, namespace: hossted-operator }",
        "",
    );
    let operator =
        f.cp.client_for_service_account("hossted-operator", "hossted-operator")
            .await
            .unwrap();
    Api::<HelmApp>::namespaced(operator, TENANT)
        .create(&PostParams::default(), &app_reading("child", "db"))
        .await
        .expect("the operator's own writes pass");
}

/// Issue 57, test 5: with cross-namespace references allowed, a tenant
/// app's HelmApp dependency in another namespace is read as the app's
/// identity — its `readyExpr` is no oracle on the other tenant's values —
/// and one its identity may not read gets the answer of a missing one.
#[tokio::test]
async fn another_namespaces_helmapp_dependency_is_read_as_the_apps_identity() {
    const OTHER: &str = "team-b";
    let f = Fixture::new().await;
    f.namespace(TENANT).await;
    f.namespace(OTHER).await;
    f.namespace(OPERATOR_NS).await;
    let operator = f
        .start_delivery_with(|s| {
            secure_by_default(s);
            s.tenancy.allow_cross_namespace_refs = true;
        })
        .await;
    // The other tenant's app, holding a value (suspended: never installed).
    apply_helmapp(
        &f,
        OTHER,
        "db",
        json!({ "chart": { "path": "tiny" }, "suspend": true, "values": { "password": "hunter22" } }),
    )
    .await;
    envtest::eventually("team-b/db is there", 30, || async {
        get_helmapp(&f, OTHER, "db").await.map(|_| ())
    })
    .await;
    let depending = |target: &str| {
        json!({ "chart": { "path": "tiny" }, "dependsOn": [{
            "name": target, "namespace": OTHER,
            "readyExpr": "dep.spec.values.password == 'hunter22'"
        }] })
    };
    apply_helmapp(&f, TENANT, "probe", depending("db")).await;
    apply_helmapp(&f, TENANT, "ghost", depending("nothing")).await;
    let message = |app: HelmApp| {
        let c = app.status.unwrap().conditions;
        c.iter()
            .find(|c| c.type_ == "Ready")
            .unwrap()
            .message
            .clone()
    };
    let forbidden = message(helmapp_with_reason(&f, TENANT, "probe", "DependencyNotFound").await);
    let missing = message(helmapp_with_reason(&f, TENANT, "ghost", "DependencyNotFound").await);
    assert_eq!(
        forbidden.replace("team-b/db", "X"),
        missing.replace("team-b/nothing", "X"),
        "a dependency its identity may not read reads as a missing one"
    );
    // The same for an object of any kind in the other namespace: one that
    // is there but may not be read, and one that is not there.
    let cms: Api<ConfigMap> = Api::namespaced(f.cp.client(), OTHER);
    let settings: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "settings" }, "data": { "password": "hunter22" }
    }))
    .unwrap();
    cms.create(&PostParams::default(), &settings).await.unwrap();
    let on_object = |target: &str| {
        json!({ "chart": { "path": "tiny" }, "dependsOn": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": target, "namespace": OTHER,
            "readyExpr": "dep.data.password == 'hunter22'"
        }] })
    };
    apply_helmapp(&f, TENANT, "cm-probe", on_object("settings")).await;
    apply_helmapp(&f, TENANT, "cm-ghost", on_object("nothing")).await;
    let forbidden =
        message(helmapp_with_reason(&f, TENANT, "cm-probe", "DependencyNotFound").await);
    let missing = message(helmapp_with_reason(&f, TENANT, "cm-ghost", "DependencyNotFound").await);
    assert_eq!(
        forbidden.replace("team-b/settings", "X"),
        missing.replace("team-b/nothing", "X"),
        "an object its identity may not read reads as a missing one"
    );
    operator.stop().await;
}
