//! Helm 4 (issue 41): a release helm 3 made keeps working when the operator
//! moves to helm 4 — upgraded in place, applied as it was until
//! `spec.upgrade.serverSideApply` says otherwise — and a helm older than
//! the operator runs refuses delivery at start.

use super::*;
use hossted_operator::lean::helm::release_json;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v1::ScaleSpec;

async fn live_configmap(f: &Fixture, name: &str) -> ConfigMap {
    Api::<ConfigMap>::namespaced(f.cp.client(), NS)
        .get(name)
        .await
        .unwrap()
}

/// `(manager, operation)` of each managedFields entry.
fn managers(cm: &ConfigMap) -> Vec<(String, String)> {
    cm.metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// The `apply_method` helm 4 stored on `revision` ("" for helm 3's).
async fn apply_method(f: &Fixture, release: &str, revision: i64) -> String {
    let secret = Api::<Secret>::namespaced(f.cp.client(), NS)
        .get(&format!("sh.helm.release.v1.{release}.v{revision}"))
        .await
        .unwrap();
    let data = &secret.data.unwrap()["release"].0;
    let release: serde_json::Value = serde_json::from_slice(&release_json(data).unwrap()).unwrap();
    release["apply_method"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_release_helm_3_made_is_upgraded_in_place_by_helm_4_and_applied_server_side_when_asked() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let helm3 = f.cp.helm3_binary();
    let operator = f.start_delivery_with(|s| s.helm.binary = helm3).await;
    apply(&f, "moved", json!({ "chart": { "path": "tiny" } })).await;
    ready(&f, "moved", "InstallSucceeded", 1).await;
    let made = live_configmap(&f, "moved-tiny").await;
    assert_eq!(apply_method(&f, "moved", 1).await, "", "helm 3 made it");
    operator.stop().await;

    // The operator restarted with helm 4: the next change upgrades in place.
    let operator = f.start_delivery().await;
    patch(
        &f,
        "moved",
        json!({ "spec": { "values": { "greeting": "four" } } }),
    )
    .await;
    ready(&f, "moved", "UpgradeSucceeded", 2).await;
    let upgraded = live_configmap(&f, "moved-tiny").await;
    assert_eq!(upgraded.metadata.uid, made.metadata.uid, "not recreated");
    assert_eq!(upgraded.data.as_ref().unwrap()["greeting"], "four");
    assert_eq!(
        revisions(&f, "moved").await.into_keys().collect::<Vec<_>>(),
        [1, 2],
        "the same release, one revision more"
    );
    // `auto`: applied as helm 3 applied it, client-side.
    assert_eq!(apply_method(&f, "moved", 2).await, "csa");
    assert!(
        !managers(&upgraded).iter().any(|(_, op)| op == "Apply"),
        "{:?}",
        managers(&upgraded)
    );

    // `enabled`: server-side from now on, helm the field manager.
    patch(
        &f,
        "moved",
        json!({ "spec": { "upgrade": { "serverSideApply": "enabled" }, "values": { "greeting": "ssa" } } }),
    )
    .await;
    ready(&f, "moved", "UpgradeSucceeded", 3).await;
    let applied = live_configmap(&f, "moved-tiny").await;
    assert_eq!(applied.metadata.uid, made.metadata.uid, "not recreated");
    assert_eq!(applied.data.as_ref().unwrap()["greeting"], "ssa");
    assert_eq!(apply_method(&f, "moved", 3).await, "ssa");
    assert!(
        managers(&applied).contains(&("helm".to_string(), "Apply".to_string())),
        "{:?}",
        managers(&applied)
    );
    operator.stop().await;
}

#[tokio::test]
async fn a_new_install_under_helm_4_is_server_side_unless_the_spec_says_otherwise() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(&f, "fresh", json!({ "chart": { "path": "tiny" } })).await;
    apply(
        &f,
        "classic",
        json!({ "chart": { "path": "tiny" }, "install": { "serverSideApply": false } }),
    )
    .await;
    ready(&f, "fresh", "InstallSucceeded", 1).await;
    ready(&f, "classic", "InstallSucceeded", 1).await;
    assert_eq!(apply_method(&f, "fresh", 1).await, "ssa");
    assert_eq!(apply_method(&f, "classic", 1).await, "csa");
    let fresh = live_configmap(&f, "fresh-tiny").await;
    assert!(managers(&fresh).contains(&("helm".to_string(), "Apply".to_string())));
    let classic = live_configmap(&f, "classic-tiny").await;
    assert!(!managers(&classic).iter().any(|(_, op)| op == "Apply"));
    operator.stop().await;
}

/// A helm older than 3.22 (here a program answering `helm version` as
/// helm 3.21.4 does: only the answer is read before delivery refuses)
/// stops the operator at start, naming the minimum.
#[tokio::test]
async fn a_helm_older_than_3_22_stops_delivery_from_starting() {
    let f = Fixture::new().await;
    let old = f.cp.dir().join("helm-3.21.sh");
    std::fs::write(
        &old,
        "#!/bin/sh\nif [ \"$1\" = version ]; then echo v3.21.4; exit 0; fi\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o755)).unwrap();
    f.helmapp_crd().await;
    let mut settings = f.delivery_settings();
    settings.helm.binary = old.clone();
    let mut manager = runtime::Manager::new(
        f.cp.client(),
        runtime::ManagerOptions::new("hossted", "hossted-operator"),
    );
    let refused = match hossted_operator::delivery::add_to(&mut manager, settings) {
        Err(e) => e,
        Ok(_) => panic!("delivery started with helm 3.21"),
    };
    assert!(
        refused.contains("helm 3.21.4") && refused.contains("3.22"),
        "{refused}"
    );

    // The binary says so and exits non-zero.
    let out = f
        .operator_command(f.cp.kubeconfig_path())
        .args(["run", "--controllers", "delivery", "--helm-binary"])
        .arg(&old)
        .arg("--work-dir")
        .arg(f.cp.dir().join("work"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("helm 3.21.4") && stderr.contains("3.22"),
        "{stderr}"
    );
}

/// Takes `data.greeting` of `name` as another field manager would (an
/// Update, as `kubectl edit` makes one).
async fn edit_by_hand(f: &Fixture, name: &str, greeting: &str) {
    Api::<ConfigMap>::namespaced(f.cp.client(), NS)
        .patch(
            name,
            &PatchParams {
                field_manager: Some("hand-editor".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({ "data": { "greeting": greeting } })),
        )
        .await
        .unwrap();
}

/// Who manages `data.greeting` of `cm`.
fn greeting_managers(cm: &ConfigMap) -> Vec<String> {
    cm.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|v| v.0.pointer("/f:data/f:greeting").is_some())
        })
        .map(|m| m.manager.clone().unwrap_or_default())
        .collect()
}

/// Issue 52: a field another manager took over (a hand edit; an HPA's
/// `replicas` alike) conflicts with helm 4's server-side apply. Like
/// Flux, conflicts are forced by default — the upgrade succeeds, the
/// chart's value wins, helm alone manages the field — and
/// `forceConflicts: false` makes the upgrade fail on the conflict instead.
#[tokio::test]
async fn a_field_another_manager_took_is_taken_back_by_the_upgrade_unless_told_not_to() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f.start_delivery_with(|s| s.helm.binary = wrapper).await;
    let spec = |greeting: &str, force: bool| {
        json!({ "spec": {
            "chart": { "path": "tiny" },
            "drift": { "mode": "disabled" },
            "values": { "greeting": greeting },
            "upgrade": { "forceConflicts": force }
        } })
    };
    apply(&f, "taken", spec("one", true)["spec"].clone()).await;
    ready(&f, "taken", "InstallSucceeded", 1).await;
    edit_by_hand(&f, "taken-tiny", "by hand").await;
    assert!(
        greeting_managers(&live_configmap(&f, "taken-tiny").await).contains(&"hand-editor".into())
    );

    patch(&f, "taken", spec("two", true)).await;
    ready(&f, "taken", "UpgradeSucceeded", 2).await;
    let cm = live_configmap(&f, "taken-tiny").await;
    assert_eq!(cm.data.as_ref().unwrap()["greeting"], "two");
    assert_eq!(greeting_managers(&cm), ["helm"], "{:?}", managers(&cm));
    let runs = helm_calls(&log);
    let upgrade = runs
        .iter()
        .rev()
        .find(|c| c.subcommand == "upgrade")
        .unwrap();
    for flag in ["--server-side=true", "--force-conflicts"] {
        assert!(
            upgrade.words.iter().any(|w| w == flag),
            "{flag}: {upgrade:?}"
        );
    }

    // Told not to force: the same edit fails the upgrade, naming the field.
    edit_by_hand(&f, "taken-tiny", "by hand again").await;
    patch(&f, "taken", spec("three", false)).await;
    let failed = ready(&f, "taken", "UpgradeFailed", 2).await;
    let ready_message = failed
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .message;
    assert!(ready_message.contains(".data.greeting"), "{ready_message}");
    let cm = live_configmap(&f, "taken-tiny").await;
    assert_eq!(cm.data.as_ref().unwrap()["greeting"], "by hand again");
    operator.stop().await;
}

/// The field manager standing in for the HorizontalPodAutoscaler.
const HPA: &str = "hpa-like";

/// Scales Deployment `name` to `replicas` as the HPA controller does: an
/// update through its `scale` subresource, under a field manager of its
/// own.
async fn scale_as_hpa(f: &Fixture, name: &str, replicas: i32) {
    let deployments: Api<Deployment> = Api::namespaced(f.cp.client(), NS);
    let mut scale = deployments.get_scale(name).await.unwrap();
    scale.spec = Some(ScaleSpec {
        replicas: Some(replicas),
    });
    deployments
        .replace_scale(
            name,
            &PostParams {
                field_manager: Some(HPA.into()),
                ..Default::default()
            },
            &scale,
        )
        .await
        .unwrap();
}

async fn live_deployment(f: &Fixture, name: &str) -> Deployment {
    Api::<Deployment>::namespaced(f.cp.client(), NS)
        .get(name)
        .await
        .unwrap()
}

fn replicas(d: &Deployment) -> Option<i32> {
    d.spec.as_ref().and_then(|s| s.replicas)
}

fn image(d: &Deployment) -> Option<String> {
    d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .image
        .clone()
}

/// Who manages `spec.replicas` of `d`.
fn replicas_managers(d: &Deployment) -> Vec<String> {
    d.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|v| v.0.pointer("/f:spec/f:replicas").is_some())
        })
        .map(|m| m.manager.clone().unwrap_or_default())
        .collect()
}

/// Issue 52, HPA-owned `replicas`: the chart (`deploy`) sets
/// `spec.replicas: 1`; another manager scales the Deployment to 5 through
/// its `scale` subresource, as an HPA does. As docs/helm.md says: with the
/// default (`forceConflicts: true`) a values upgrade succeeds and resets
/// replicas to the chart's number, `helm` their only manager; with
/// `upgrade.forceConflicts: false` the upgrade fails (`UpgradeFailed`) on
/// the conflict, naming `.spec.replicas` and its manager, and the
/// replicas stay the HPA's.
#[tokio::test]
async fn an_hpa_s_replicas_are_reset_by_the_upgrade_unless_told_not_to_force() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f.start_delivery_with(|s| s.helm.binary = wrapper).await;
    let spec = |tag: &str, force: bool| {
        json!({ "spec": {
            "chart": { "path": "deploy" },
            "drift": { "mode": "disabled" },
            "values": { "image": format!("registry.example.com/app:{tag}") },
            "upgrade": { "forceConflicts": force },
            // No rollback after the failed upgrade (it would force the
            // chart's replicas back and race the reads below).
            "remediation": { "onFailure": "none" }
        } })
    };
    apply(&f, "scaled", spec("1.0.0", true)["spec"].clone()).await;
    ready(&f, "scaled", "InstallSucceeded", 1).await;
    assert_eq!(replicas(&live_deployment(&f, "scaled").await), Some(1));
    scale_as_hpa(&f, "scaled", 5).await;
    let scaled = live_deployment(&f, "scaled").await;
    assert_eq!(replicas(&scaled), Some(5));
    assert_eq!(
        replicas_managers(&scaled),
        [HPA],
        "{:?}",
        scaled.metadata.managed_fields
    );

    // The default: the upgrade takes replicas back to the chart's.
    patch(&f, "scaled", spec("1.0.1", true)).await;
    ready(&f, "scaled", "UpgradeSucceeded", 2).await;
    let upgraded = live_deployment(&f, "scaled").await;
    assert_eq!(replicas(&upgraded), Some(1), "the chart's replicas again");
    assert_eq!(
        image(&upgraded).as_deref(),
        Some("registry.example.com/app:1.0.1")
    );
    assert_eq!(
        replicas_managers(&upgraded),
        ["helm"],
        "{:?}",
        upgraded.metadata.managed_fields
    );
    let upgrade = helm_calls(&log)
        .into_iter()
        .rfind(|c| c.subcommand == "upgrade" && c.on("scaled") && !c.dry_run())
        .unwrap();
    for flag in ["--server-side=true", "--force-conflicts"] {
        assert!(
            upgrade.words.iter().any(|w| w == flag),
            "{flag}: {upgrade:?}"
        );
    }

    // forceConflicts: false — the HPA scales again and the next upgrade
    // fails on the conflict; its replicas stay.
    scale_as_hpa(&f, "scaled", 5).await;
    patch(&f, "scaled", spec("1.0.2", false)).await;
    let failed = ready(&f, "scaled", "UpgradeFailed", 2).await;
    let kept = live_deployment(&f, "scaled").await;
    assert_eq!(replicas(&kept), Some(5), "the HPA's replicas stay");
    assert_eq!(
        image(&kept).as_deref(),
        Some("registry.example.com/app:1.0.1"),
        "nothing of the failed upgrade applied"
    );
    let ready_message = failed
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .message;
    assert!(
        ready_message.contains(".spec.replicas") && ready_message.contains(HPA),
        "the field and its manager named: {ready_message}"
    );
    let upgrade = helm_calls(&log)
        .into_iter()
        .rfind(|c| c.subcommand == "upgrade" && c.on("scaled") && !c.dry_run())
        .unwrap();
    assert!(
        !upgrade.words.iter().any(|w| w == "--force-conflicts"),
        "{upgrade:?}"
    );
    operator.stop().await;
}

/// Applied server-side, helm is not asked to download the OpenAPI schema
/// (`--disable-openapi-validation`, docs/delivery.md "What helm is
/// asked"): the server still refuses an object with a field its kind
/// lacks — nothing is validated less. Red if the server took the object
/// (its unknown field dropped with a warning): the install would succeed.
#[tokio::test]
async fn a_field_its_kind_lacks_is_refused_by_the_server_without_helm_s_schema_download() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (wrapper, log) = counting(&f, &f.cp.helm_binary());
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply(
        &f,
        "strict",
        json!({ "chart": { "path": "tiny" }, "values": { "unknownField": true } }),
    )
    .await;
    let failed = with_reason(&f, "strict", "InstallFailed").await;
    let condition = failed
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .expect("a Ready condition");
    assert!(
        // The server's words for a field no ConfigMap has.
        condition
            .message
            .contains(".notAField: field not declared in schema"),
        "the server's strict validation refused it: {}",
        condition.message
    );
    let install = helm_calls(&log)
        .into_iter()
        .find(|c| c.on("strict") && c.subcommand == "install")
        .expect("an install ran");
    for flag in ["--server-side=true", "--disable-openapi-validation"] {
        assert!(
            install.words.iter().any(|w| w == flag),
            "{flag}: {:?}",
            install.words
        );
    }
    // The same chart without that field installs: the refusal is the field's.
    apply(&f, "lenient", json!({ "chart": { "path": "tiny" } })).await;
    ready(&f, "lenient", "InstallSucceeded", 1).await;
    operator.stop().await;
}
