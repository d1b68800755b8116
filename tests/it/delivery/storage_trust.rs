//! Helm's storage is evidence, never authority (docs/tenancy.md): a privileged HelmApp (in the operator's namespace) targets a
//! tenant's namespace, where the tenant may write Secrets — and so Helm's
//! storage. Each test plants or edits storage there as such a tenant
//! could, and checks that helm never runs as the operator on it. The real
//! apiserver with RBAC, the real helm through a wrapper that logs every
//! command line.

use std::collections::BTreeSet;

use super::*;
use hossted_operator::delivery::{Privileged, Tenancy};
use hossted_operator::lean::helm::{encode_release, release_json};

const TENANT: &str = "team-a";
const OPERATOR_NS: &str = "hossted-operator";

/// The shipped default: only the operator's namespace is privileged.
fn secure_by_default(s: &mut hossted_operator::delivery::Settings) {
    s.tenancy = Tenancy {
        privileged: Privileged::Namespaces(BTreeSet::from([OPERATOR_NS.to_string()])),
        ..Tenancy::single_tenant(OPERATOR_NS)
    };
}

/// The ConfigMap a planted manifest entry names: what a helm run on the
/// forged storage would delete.
async fn precious(f: &Fixture) -> Api<ConfigMap> {
    let kube_system: Api<ConfigMap> = Api::namespaced(f.cp.client(), "kube-system");
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "precious", "namespace": "kube-system" }, "data": { "keep": "me" }
    }))
    .unwrap();
    kube_system
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    kube_system
}

const PLANTED: &str = "\n---\n# Source: tiny/templates/planted.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: precious\n  namespace: kube-system\n";

/// The storage Secret of `release` at `revision` in `ns`.
async fn stored(f: &Fixture, ns: &str, release: &str, revision: i64) -> Secret {
    Api::<Secret>::namespaced(f.cp.client(), ns)
        .get(&format!("sh.helm.release.v1.{release}.v{revision}"))
        .await
        .unwrap()
}

/// The release JSON a storage Secret holds.
pub(super) fn payload(secret: &Secret) -> serde_json::Value {
    let data = secret.data.as_ref().unwrap();
    serde_json::from_slice(&release_json(&data["release"].0).unwrap()).unwrap()
}

/// `secret` with its payload replaced by `release`.
pub(super) fn with_payload(mut secret: Secret, release: &serde_json::Value) -> Secret {
    let encoded = encode_release(&serde_json::to_vec(release).unwrap());
    secret
        .data
        .as_mut()
        .unwrap()
        .insert("release".into(), k8s_openapi::ByteString(encoded));
    secret
}

/// The helm command lines logged for `release` since line `from`.
fn runs_since(log: &std::path::Path, from: usize, release: &str) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .skip(from)
        .filter(|l| l.split_whitespace().any(|w| w == release))
        .map(str::to_string)
        .collect()
}

fn lines(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// A privileged HelmApp `name` in the operator's namespace installing the
/// `tiny` chart into the tenant's namespace, Ready at revision 1.
async fn privileged_app(f: &Fixture, name: &str, extra: serde_json::Value) -> HelmApp {
    let mut spec = json!({ "chart": { "path": "tiny" }, "targetNamespace": TENANT });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    apply_helmapp(f, OPERATOR_NS, name, spec).await;
    helmapp_ready(f, OPERATOR_NS, name, "InstallSucceeded", 1).await
}

/// HelmApp `name` (privileged, into the tenant's namespace) held back by a
/// dependency that does not exist, and its revision 1 as a tenant forges
/// it: a release of the tiny chart as helm stores it, made by another app,
/// renamed, with the waiting app's UID label copied and the kube-system
/// ConfigMap added. Not created: the payload and the Secret.
async fn waiting_app_and_its_forged_revision(
    f: &Fixture,
    name: &str,
) -> (serde_json::Value, Secret) {
    let spec = json!({ "chart": { "path": "tiny" }, "targetNamespace": TENANT,
                       "dependsOn": [{ "name": "absent" }] });
    apply_helmapp(f, OPERATOR_NS, name, spec).await;
    let app = helmapp_with_reason(f, OPERATOR_NS, name, "DependencyNotFound").await;
    let uid = app.metadata.uid.unwrap();
    privileged_app(f, "donor", json!({})).await;
    let donor = stored(f, TENANT, "donor", 1).await;
    let mut release = payload(&donor);
    release["name"] = json!(name);
    let manifest = release["manifest"].as_str().unwrap().to_string();
    release["manifest"] = json!(format!("{manifest}{PLANTED}"));
    let mut planted = with_payload(donor.clone(), &release);
    let mut labels = donor.metadata.labels.clone().unwrap();
    labels.insert("name".into(), name.into());
    labels.insert("hossted.com/helmapp-uid".into(), uid);
    planted.metadata = kube::api::ObjectMeta {
        name: Some(format!("sh.helm.release.v1.{name}.v1")),
        namespace: Some(TENANT.into()),
        labels: Some(labels),
        ..Default::default()
    };
    (release, planted)
}

async fn setup() -> (Fixture, std::path::PathBuf, Operator) {
    let f = Fixture::new().await;
    f.namespace(TENANT).await;
    f.namespace(OPERATOR_NS).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| {
            secure_by_default(s);
            s.helm.binary = wrapper.clone();
        })
        .await;
    (f, log, operator)
}

/// Test 1 of the issue: a second storage Secret with the real one's labels
/// (owner UID included) and `version: 1`, whose payload says revision 999
/// and lists a ConfigMap in kube-system. It is no release (labels and
/// payload disagree): never the newest, an `InvalidRelease` Warning on it,
/// and no helm as the operator while it is there — whatever asks for one.
#[tokio::test]
async fn a_forged_revision_whose_labels_and_payload_disagree_runs_no_helm() {
    let (f, log, operator) = setup().await;
    let kube_system = precious(&f).await;
    privileged_app(&f, "platform", json!({})).await;

    let real = stored(&f, TENANT, "platform", 1).await;
    let mut release = payload(&real);
    release["version"] = json!(999);
    let manifest = release["manifest"].as_str().unwrap().to_string();
    release["manifest"] = json!(format!("{manifest}{PLANTED}"));
    let mut forged = with_payload(real.clone(), &release);
    forged.metadata = kube::api::ObjectMeta {
        name: Some("sh.helm.release.v1.platform.v1x".into()),
        namespace: Some(TENANT.into()),
        labels: real.metadata.labels.clone(),
        ..Default::default()
    };
    let before = lines(&log);
    Api::<Secret>::namespaced(f.cp.client(), TENANT)
        .create(&PostParams::default(), &forged)
        .await
        .unwrap();
    // A change that asks for an upgrade.
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "platform",
        json!({ "spec": { "values": { "greeting": "hi" } } }),
    )
    .await;
    let app = helmapp_with_reason(&f, OPERATOR_NS, "platform", "StorageTampered").await;
    let mark = operator.mark();
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "platform",
        json!({ "spec": { "values": { "greeting": "again" } } }),
    )
    .await;
    operator.reconciled_since(mark).await;
    assert_eq!(
        runs_since(&log, before, "platform"),
        Vec::<String>::new(),
        "no helm ran on the forged storage"
    );
    assert!(kube_system.get_opt("precious").await.unwrap().is_some());
    let ready = app.status.unwrap().conditions;
    let ready = ready.iter().find(|c| c.type_ == "Ready").unwrap();
    assert!(
        ready.message.contains("sh.helm.release.v1.platform.v1x"),
        "names the forged Secret: {}",
        ready.message
    );
    an_event(
        &f,
        TENANT,
        "sh.helm.release.v1.platform.v1x",
        "InvalidRelease",
    )
    .await;
    operator.stop().await;
}

/// Issue 57, test 1: revision N+1 planted as "a run of ours left
/// unfinished" — the owner UID label copied from the real revision, payload
/// `failed`, a kube-system ConfigMap in its manifest — once labelled
/// `status: deployed` (what helm upgrades from) and once `status: failed`.
/// A label is no proof: only the operator's own run intent in the status
/// is. `StorageTampered`, no helm process, and the ConfigMap survives a
/// values change and the HelmApp's deletion.
#[tokio::test]
async fn a_planted_unfinished_revision_with_the_owner_label_copied_runs_no_helm() {
    let (f, log, operator) = setup().await;
    let kube_system = precious(&f).await;
    let secrets = Api::<Secret>::namespaced(f.cp.client(), TENANT);
    for (name, label) in [
        ("planted-deployed", "deployed"),
        ("planted-failed", "failed"),
    ] {
        privileged_app(&f, name, json!({})).await;
        let real = stored(&f, TENANT, name, 1).await;
        let mut release = payload(&real);
        release["version"] = json!(2);
        release["info"]["status"] = json!("failed");
        let manifest = release["manifest"].as_str().unwrap().to_string();
        release["manifest"] = json!(format!("{manifest}{PLANTED}"));
        let mut planted = with_payload(real.clone(), &release);
        let mut labels = real.metadata.labels.clone().unwrap();
        assert!(
            labels.contains_key("hossted.com/helmapp-uid"),
            "the real revision carries the owner label: {labels:?}"
        );
        labels.insert("version".into(), "2".into());
        labels.insert("status".into(), label.into());
        planted.metadata = kube::api::ObjectMeta {
            name: Some(format!("sh.helm.release.v1.{name}.v2")),
            namespace: Some(TENANT.into()),
            labels: Some(labels),
            ..Default::default()
        };
        let before = lines(&log);
        secrets
            .create(&PostParams::default(), &planted)
            .await
            .unwrap();
        patch_helmapp(
            &f,
            OPERATOR_NS,
            name,
            json!({ "spec": { "values": { "greeting": "hi" } } }),
        )
        .await;
        let app = helmapp_with_reason(&f, OPERATOR_NS, name, "StorageTampered").await;
        let ready = app.status.unwrap().conditions;
        let ready = ready.iter().find(|c| c.type_ == "Ready").unwrap();
        assert!(
            ready
                .message
                .contains(&format!("sh.helm.release.v1.{name}.v2")),
            "names the planted Secret: {}",
            ready.message
        );
        // Deleting the HelmApp leaves the release as it is.
        let apps: Api<HelmApp> = Api::namespaced(f.cp.client(), OPERATOR_NS);
        apps.delete(name, &Default::default()).await.unwrap();
        envtest::eventually("the HelmApp is gone", 30, || async {
            apps.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await;
        assert_eq!(
            runs_since(&log, before, name),
            Vec::<String>::new(),
            "no helm ran on the planted storage ({label})"
        );
        assert!(kube_system.get_opt("precious").await.unwrap().is_some());
    }
    operator.stop().await;
}

/// A HelmApp that has not run helm yet (it waits for a dependency) has
/// nothing of its own in storage: a deployed revision planted with its UID
/// label copied (the UID is readable on the HelmApp) is not trusted on
/// first sight — `StorageTampered`, no helm, the kube-system ConfigMap kept.
#[tokio::test]
async fn a_revision_planted_before_the_first_install_with_the_uid_label_runs_no_helm() {
    let (f, log, operator) = setup().await;
    let kube_system = precious(&f).await;
    let (_, planted) = waiting_app_and_its_forged_revision(&f, "early").await;
    Api::<Secret>::namespaced(f.cp.client(), TENANT)
        .create(&PostParams::default(), &planted)
        .await
        .unwrap();
    let before = lines(&log);
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "early",
        json!({ "spec": { "dependsOn": [] } }),
    )
    .await;
    helmapp_with_reason(&f, OPERATOR_NS, "early", "StorageTampered").await;
    let mark = operator.mark();
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "early",
        json!({ "spec": { "values": { "greeting": "again" } } }),
    )
    .await;
    operator.reconciled_since(mark).await;
    let app = get_helmapp(&f, OPERATOR_NS, "early").await.unwrap();
    // Nor is the planted manifest read for drift: nothing it names (the
    // kube-system ConfigMap) reaches the status.
    let inventory = app.status.map(|s| s.inventory).unwrap_or_default();
    assert!(
        inventory.iter().all(|e| e.namespace != "kube-system"),
        "a planted object in status.inventory: {inventory:?}"
    );
    // The render that checks whether it could be a first install of ours
    // (a client dry run, which changes nothing) may run; nothing else.
    let acted: Vec<String> = runs_since(&log, before, "early")
        .into_iter()
        .filter(|l| !l.split_whitespace().any(|w| w == "--dry-run=client"))
        .collect();
    assert_eq!(
        acted,
        Vec::<String>::new(),
        "no helm acted on the planted storage"
    );
    assert!(kube_system.get_opt("precious").await.unwrap().is_some());
    operator.stop().await;
}

/// The moment between the storage check and helm's own read of the
/// storage, on a first install: a helm wrapper plants revision 1 (the
/// tiny chart's manifest plus the kube-system ConfigMap, the HelmApp's UID
/// label copied) just before the run starts, after the operator found the
/// storage empty. Over nothing the operator asks for `helm install`, which
/// refuses a name in use: helm never upgrades from the planted revision
/// (which would delete what it lists and ours does not), the next check
/// finds it (`StorageTampered`), and no helm acts on it after.
#[tokio::test]
async fn a_revision_planted_the_moment_before_the_first_install_is_never_upgraded_from() {
    let f = Fixture::new().await;
    f.namespace(TENANT).await;
    f.namespace(OPERATOR_NS).await;
    let (counting, log) = counting_helm(&f);
    let planted_file = f.cp.dir().join("planted-revision-1.json");
    let armed = f.cp.dir().join("plant-on-next-release");
    let plants = f.cp.dir().join("plants.log");
    let racing = f.cp.dir().join("planting-helm.sh");
    // Before the next run that writes a revision (whichever command the
    // operator picks), not before a dry run: the plant.
    std::fs::write(
        &racing,
        format!(
            "#!/bin/sh
case \"$1\" in install|upgrade) case \"$*\" in *--dry-run*) ;; *) if rm '{armed}' 2>/dev/null; then '{kubectl}' --kubeconfig '{kubeconfig}' create -f '{planted}' >> '{plants}' 2>&1; fi ;; esac ;; esac\nexec '{counting}' \"$@\"\n",
            armed = armed.display(),
            kubectl = f.cp.kubectl_binary().display(),
            kubeconfig = f.cp.kubeconfig_path().display(),
            planted = planted_file.display(),
            plants = plants.display(),
            counting = counting.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&racing, std::fs::Permissions::from_mode(0o755)).unwrap();
    let operator = f
        .start_delivery_with(|s| {
            secure_by_default(s);
            s.helm.binary = racing.clone();
        })
        .await;
    let kube_system = precious(&f).await;
    let (release, planted) = waiting_app_and_its_forged_revision(&f, "first").await;
    std::fs::write(&planted_file, serde_json::to_vec(&planted).unwrap()).unwrap();
    std::fs::write(&armed, "").unwrap();
    let before = lines(&log);
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "first",
        json!({ "spec": { "dependsOn": [] } }),
    )
    .await;
    helmapp_with_reason(&f, OPERATOR_NS, "first", "StorageTampered").await;
    assert!(
        !armed.exists(),
        "the wrapper planted before the run: {}",
        std::fs::read_to_string(&plants).unwrap_or_default()
    );
    an_event(&f, OPERATOR_NS, "first", "StorageTampered").await;
    let mark = operator.mark();
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "first",
        json!({ "spec": { "values": { "greeting": "again" } } }),
    )
    .await;
    operator.reconciled_since(mark).await;
    // The one run, refused by helm; then no helm but the client dry run
    // that tries to prove the planted revision ours.
    let acted: Vec<String> = runs_since(&log, before, "first")
        .into_iter()
        .filter(|l| !l.split_whitespace().any(|w| w == "--dry-run=client"))
        .map(|l| HelmCall::parse(&l).subcommand)
        .collect();
    assert_eq!(
        kube_system
            .get_opt("precious")
            .await
            .unwrap()
            .and_then(|cm| cm.data)
            .map(|d| d["keep"].clone())
            .as_deref(),
        Some("me"),
        "the object only the planted revision lists: {acted:?}"
    );
    assert_eq!(acted, ["install"], "one install, refused; nothing after");
    let storage: Vec<String> = Api::<Secret>::namespaced(f.cp.client(), TENANT)
        .list(&kube::api::ListParams::default().labels("name=first"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|s| s.metadata.name)
        .collect();
    assert_eq!(storage, ["sh.helm.release.v1.first.v1"], "no revision 2");
    assert_eq!(
        payload(&stored(&f, TENANT, "first", 1).await)["manifest"],
        release["manifest"],
        "the planted revision as it was planted"
    );
    operator.stop().await;
}

/// The hole the run intent left open: an operator died while its helm ran
/// (its intent, revision 2, in the status); the revision that run left —
/// pending or failed — is rewritten by the tenant to list a kube-system
/// object. The intent names a number, never a content: deleting the
/// HelmApp (an uninstall reads the newest revision's manifest) runs no
/// helm but the client dry run that tries to prove the revision ours, and
/// the object survives.
#[tokio::test]
async fn a_dead_runs_revision_rewritten_by_the_tenant_is_never_acted_on() {
    let f = Fixture::new().await;
    f.namespace(TENANT).await;
    f.namespace(OPERATOR_NS).await;
    let (wrapper, log) = counting_helm(&f);
    let start = || {
        f.start_delivery_with(|s| {
            secure_by_default(s);
            s.helm.binary = wrapper.clone();
        })
    };
    let kube_system = precious(&f).await;
    let secrets = Api::<Secret>::namespaced(f.cp.client(), TENANT);
    let apps: Api<HelmApp> = Api::namespaced(f.cp.client(), OPERATOR_NS);
    for (name, left) in [
        ("died-pending", "pending-upgrade"),
        ("died-failed", "failed"),
    ] {
        let operator = start().await;
        privileged_app(&f, name, json!({})).await;
        operator.stop().await;
        apps.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "runIntent": {
                "action": "upgrade", "revision": 2, "configHash": "h",
                "startedAt": chrono::Utc::now().to_rfc3339()
            } } })),
        )
        .await
        .unwrap();
        let real = stored(&f, TENANT, name, 1).await;
        let mut release = payload(&real);
        release["version"] = json!(2);
        release["info"]["status"] = json!(left);
        let manifest = release["manifest"].as_str().unwrap().to_string();
        release["manifest"] = json!(format!("{manifest}{PLANTED}"));
        let mut planted = with_payload(real.clone(), &release);
        let mut labels = real.metadata.labels.clone().unwrap();
        labels.insert("version".into(), "2".into());
        labels.insert("status".into(), left.into());
        planted.metadata = kube::api::ObjectMeta {
            name: Some(format!("sh.helm.release.v1.{name}.v2")),
            namespace: Some(TENANT.into()),
            labels: Some(labels),
            ..Default::default()
        };
        secrets
            .create(&PostParams::default(), &planted)
            .await
            .unwrap();
        let before = lines(&log);
        let operator = start().await;
        let app = helmapp_with_reason(&f, OPERATOR_NS, name, "StorageTampered").await;
        let ready = app.status.unwrap().conditions;
        let ready = ready.iter().find(|c| c.type_ == "Ready").unwrap();
        assert!(
            ready
                .message
                .contains(&format!("sh.helm.release.v1.{name}.v2")),
            "names the rewritten Secret: {}",
            ready.message
        );
        apps.delete(name, &Default::default()).await.unwrap();
        envtest::eventually("the HelmApp is gone", 60, || async {
            apps.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await;
        let acted: Vec<String> = runs_since(&log, before, name)
            .into_iter()
            .filter(|l| !l.split_whitespace().any(|w| w == "--dry-run=client"))
            .collect();
        assert_eq!(
            acted,
            Vec::<String>::new(),
            "no helm acted on the rewritten revision ({left})"
        );
        assert!(
            kube_system.get_opt("precious").await.unwrap().is_some(),
            "the kube-system ConfigMap survived ({left})"
        );
        operator.stop().await;
    }
}

/// Test 2: an older revision edited (the newest untouched), then an upgrade
/// that would fail with `remediation: rollback`: nothing runs — neither
/// the upgrade nor the rollback that would read the older revisions.
#[tokio::test]
async fn an_edited_older_revision_stops_every_helm_run_rollback_included() {
    let (f, log, operator) = setup().await;
    let kube_system = precious(&f).await;
    privileged_app(
        &f,
        "rolled",
        json!({ "remediation": { "retries": 0, "onFailure": "rollback" } }),
    )
    .await;
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "rolled",
        json!({ "spec": { "values": { "greeting": "two" } } }),
    )
    .await;
    helmapp_ready(&f, OPERATOR_NS, "rolled", "UpgradeSucceeded", 2).await;

    let older = stored(&f, TENANT, "rolled", 1).await;
    let mut release = payload(&older);
    let manifest = release["manifest"].as_str().unwrap().to_string();
    release["manifest"] = json!(format!("{manifest}{PLANTED}"));
    let before = lines(&log);
    Api::<Secret>::namespaced(f.cp.client(), TENANT)
        .replace(
            &older.metadata.name.clone().unwrap(),
            &PostParams::default(),
            &with_payload(older, &release),
        )
        .await
        .unwrap();
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "rolled",
        json!({ "spec": { "values": { "broken": true } } }),
    )
    .await;
    let app = helmapp_with_reason(&f, OPERATOR_NS, "rolled", "StorageTampered").await;
    let message = &app.status.as_ref().unwrap().conditions;
    let ready = message.iter().find(|c| c.type_ == "Ready").unwrap();
    assert!(
        ready.message.contains("sh.helm.release.v1.rolled.v1)"),
        "names the edited revision's Secret: {}",
        ready.message
    );
    // Another spec change (labels do not wake a HelmApp), after the report.
    let mark = operator.mark();
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "rolled",
        json!({ "spec": { "timeout": "4m" } }),
    )
    .await;
    operator.reconciled_since(mark).await;
    assert_eq!(
        runs_since(&log, before, "rolled"),
        Vec::<String>::new(),
        "no upgrade, no rollback"
    );
    assert!(kube_system.get_opt("precious").await.unwrap().is_some());
    operator.stop().await;
}

/// Test 2, in the window of the run: revision 2 — the rollback's target —
/// edited while the upgrade that fails runs (a helm wrapper replaces its
/// Secret just before the upgrade starts, after the operator checked the
/// storage). The rollback does not run: `Ready` says `StorageTampered`.
#[tokio::test]
async fn a_rollback_target_edited_while_the_failing_upgrade_runs_is_not_rolled_back_to() {
    let f = Fixture::new().await;
    f.namespace(TENANT).await;
    f.namespace(OPERATOR_NS).await;
    let (counting, log) = counting_helm(&f);
    let forged = f.cp.dir().join("forged-revision-2.json");
    let armed = f.cp.dir().join("edit-on-next-upgrade");
    let edits = f.cp.dir().join("edits.log");
    let racing = f.cp.dir().join("racing-helm.sh");
    std::fs::write(
        &racing,
        format!(
            "#!/bin/sh\nif [ \"$1\" = upgrade ] && rm '{armed}' 2>/dev/null; then\n  '{kubectl}' --kubeconfig '{kubeconfig}' replace -f '{forged}' >> '{edits}' 2>&1\nfi\nexec '{counting}' \"$@\"\n",
            armed = armed.display(),
            kubectl = f.cp.kubectl_binary().display(),
            kubeconfig = f.cp.kubeconfig_path().display(),
            forged = forged.display(),
            edits = edits.display(),
            counting = counting.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&racing, std::fs::Permissions::from_mode(0o755)).unwrap();
    let operator = f
        .start_delivery_with(|s| {
            secure_by_default(s);
            s.helm.binary = racing.clone();
        })
        .await;
    let kube_system = precious(&f).await;
    privileged_app(
        &f,
        "raced",
        json!({ "remediation": { "retries": 0, "onFailure": "rollback" } }),
    )
    .await;
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "raced",
        json!({ "spec": { "values": { "greeting": "two" } } }),
    )
    .await;
    helmapp_ready(&f, OPERATOR_NS, "raced", "UpgradeSucceeded", 2).await;

    let target = stored(&f, TENANT, "raced", 2).await;
    let mut release = payload(&target);
    let manifest = release["manifest"].as_str().unwrap().to_string();
    release["manifest"] = json!(format!("{manifest}{PLANTED}"));
    let mut edited = with_payload(target, &release);
    edited.metadata.resource_version = None;
    edited.metadata.managed_fields = None;
    std::fs::write(&forged, serde_json::to_vec(&edited).unwrap()).unwrap();
    std::fs::write(&armed, "").unwrap();
    let before = lines(&log);
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "raced",
        json!({ "spec": { "values": { "broken": true } } }),
    )
    .await;
    let app = helmapp_with_reason(&f, OPERATOR_NS, "raced", "StorageTampered").await;
    assert!(!armed.exists(), "the wrapper edited revision 2");
    assert_eq!(
        payload(&stored(&f, TENANT, "raced", 2).await)["manifest"],
        release["manifest"],
        "the edit is in place: {}",
        std::fs::read_to_string(&edits).unwrap_or_default()
    );
    let status = app.status.unwrap();
    an_event(&f, OPERATOR_NS, "raced", "StorageTampered").await;
    let remedy = &status.history[0];
    assert_eq!(
        (remedy.action.as_str(), remedy.result.as_str()),
        ("rollback", "refused")
    );
    // (A render that proves the failed upgrade's revision ours writes
    // nothing.)
    let subcommands: Vec<String> = runs_since(&log, before, "raced")
        .iter()
        .map(|l| HelmCall::parse(l))
        .filter(|c| !c.dry_run())
        .map(|c| c.subcommand)
        .collect();
    assert_eq!(subcommands, ["upgrade"], "the failed upgrade, no rollback");
    assert_eq!(
        kube_system.get("precious").await.unwrap().data.unwrap()["keep"],
        "me"
    );
    // It stays refused: the next check finds the edit too.
    let mark = operator.mark();
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "raced",
        json!({ "spec": { "timeout": "4m" } }),
    )
    .await;
    operator.reconciled_since(mark).await;
    helmapp_with_reason(&f, OPERATOR_NS, "raced", "StorageTampered").await;
    // The failed upgrade, and the one render that proved its revision
    // ours (recorded since: the edit of revision 2 is all that is found).
    let (renders, runs): (Vec<HelmCall>, Vec<HelmCall>) = runs_since(&log, before, "raced")
        .iter()
        .map(|l| HelmCall::parse(l))
        .partition(HelmCall::dry_run);
    assert_eq!((runs.len(), renders.len()), (1, 1), "{runs:?} {renders:?}");
    operator.stop().await;
}

/// A revision rewritten by a tenant while our own `helm test` of it runs
/// is not recorded as the run's: helm test writes back what it loaded
/// (the planted kube-system ConfigMap with it), and the record compares
/// the revision read after the test with what helm printed, its hooks'
/// last runs aside — never its number alone, and a status whose run left
/// its revision unproven is never taken on first sight. Red when the test
/// cleared the printed content (recorded by number), and red with the
/// first-sight rule as it was: either way revision 1 was recorded as ours,
/// `Ready`, with kube-system/precious in its inventory — the object the
/// next upgrade as the operator would delete.
#[tokio::test]
async fn a_revision_rewritten_while_our_helm_test_runs_is_never_recorded_as_ours() {
    let f = Fixture::new().await;
    f.namespace(TENANT).await;
    f.namespace(OPERATOR_NS).await;
    let (counting, log) = counting_helm(&f);
    let armed = f.cp.dir().join("hold-next-test");
    let testing = f.cp.dir().join("test-held");
    let go = f.cp.dir().join("test-go");
    let holding = f.cp.dir().join("holding-helm.sh");
    std::fs::write(
        &holding,
        format!(
            "#!/bin/sh\nif [ \"$1\" = test ] && rm '{armed}' 2>/dev/null; then\n  touch '{testing}'\n  while [ ! -e '{go}' ]; do sleep 0.1; done\nfi\nexec '{counting}' \"$@\"\n",
            armed = armed.display(),
            testing = testing.display(),
            go = go.display(),
            counting = counting.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&holding, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(&armed, "").unwrap();
    let operator = f
        .start_delivery_with(|s| {
            secure_by_default(s);
            s.helm.binary = holding.clone();
        })
        .await;
    // The test hook Pods succeed, as a kubelet would say.
    let pods = {
        let client = f.cp.client();
        tokio::spawn(async move {
            let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, TENANT);
            loop {
                for p in pods
                    .list(&Default::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    let done = p
                        .status
                        .and_then(|s| s.phase)
                        .is_some_and(|ph| ph == "Succeeded");
                    if !done && (name.ends_with("-test") || name.ends_with("-smoke")) {
                        let body = json!({ "status": { "phase": "Succeeded" } });
                        let _ = pods
                            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
                            .await;
                    }
                }
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        })
    };
    let kube_system = precious(&f).await;
    apply_helmapp(
        &f,
        OPERATOR_NS,
        "probed",
        json!({ "chart": { "path": "tiny" }, "targetNamespace": TENANT,
                "test": { "enable": true } }),
    )
    .await;
    // The install ran; its test is about to: the tenant rewrites revision 1.
    eventually("the test held", 120, || async {
        testing.exists().then_some(())
    })
    .await;
    let target = stored(&f, TENANT, "probed", 1).await;
    let mut release = payload(&target);
    let manifest = release["manifest"].as_str().unwrap().to_string();
    release["manifest"] = json!(format!("{manifest}{PLANTED}"));
    let edited = with_payload(target, &release);
    Api::<Secret>::namespaced(f.cp.client(), TENANT)
        .replace(
            "sh.helm.release.v1.probed.v1",
            &PostParams::default(),
            &edited,
        )
        .await
        .unwrap();
    std::fs::write(&go, "").unwrap();
    helmapp_with_reason(&f, OPERATOR_NS, "probed", "StorageTampered").await;
    // helm test wrote back what it loaded: the planted object is stored.
    assert_eq!(
        payload(&stored(&f, TENANT, "probed", 1).await)["manifest"],
        release["manifest"]
    );
    // A change asks for an upgrade: none runs on that storage.
    let before = lines(&log);
    let mark = operator.mark();
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "probed",
        json!({ "spec": { "values": { "greeting": "two" } } }),
    )
    .await;
    operator.reconciled_since(mark).await;
    helmapp_with_reason(&f, OPERATOR_NS, "probed", "StorageTampered").await;
    let upgrades: Vec<String> = runs_since(&log, before, "probed")
        .iter()
        .map(|l| HelmCall::parse(l))
        .filter(|c| !c.dry_run())
        .map(|c| c.subcommand)
        .collect();
    assert!(upgrades.is_empty(), "{upgrades:?}");
    assert_eq!(
        kube_system.get("precious").await.unwrap().data.unwrap()["keep"],
        "me"
    );
    pods.abort();
    operator.stop().await;
}

/// Test 3: a release planted by a tenant (no owner label) whose manifest
/// names a ConfigMap in kube-system is not adopted by a privileged
/// HelmApp; the same release planted without foreign objects is.
#[tokio::test]
async fn the_operator_adopts_only_a_release_whose_objects_stay_in_its_namespace() {
    let (f, log, operator) = setup().await;
    let kube_system = precious(&f).await;
    // The tenant's helm: two releases, one then edited to list precious.
    f.helm_install("planted", "tiny", TENANT);
    f.helm_install("plain", "tiny", TENANT);
    let secret = stored(&f, TENANT, "planted", 1).await;
    let mut release = payload(&secret);
    let manifest = release["manifest"].as_str().unwrap().to_string();
    release["manifest"] = json!(format!("{manifest}{PLANTED}"));
    Api::<Secret>::namespaced(f.cp.client(), TENANT)
        .replace(
            &secret.metadata.name.clone().unwrap(),
            &PostParams::default(),
            &with_payload(secret, &release),
        )
        .await
        .unwrap();

    let before = lines(&log);
    for name in ["planted", "plain"] {
        apply_helmapp(
            &f,
            OPERATOR_NS,
            name,
            json!({ "chart": { "path": "tiny" }, "targetNamespace": TENANT, "adopt": true }),
        )
        .await;
    }
    let refused = helmapp_with_reason(&f, OPERATOR_NS, "planted", "AdoptionRefused").await;
    let conditions = refused.status.unwrap().conditions;
    let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert!(
        ready.message.contains("ConfigMap kube-system/precious"),
        "names the first foreign object: {}",
        ready.message
    );
    // Its chart and values render what it has: taken as it is.
    helmapp_ready(&f, OPERATOR_NS, "plain", "UpToDate", 1).await;
    assert_eq!(runs_since(&log, before, "planted"), Vec::<String>::new());
    assert!(kube_system.get_opt("precious").await.unwrap().is_some());
    an_event(&f, OPERATOR_NS, "planted", "AdoptionRefused").await;
    // The adopted one is then trusted as it was taken: a change upgrades it.
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "plain",
        json!({ "spec": { "values": { "greeting": "mine" } } }),
    )
    .await;
    helmapp_ready(&f, OPERATOR_NS, "plain", "UpgradeSucceeded", 2).await;
    operator.stop().await;
}

/// Test 4: a chart version range meets a new upstream version while the
/// storage is tampered: the configuration changes, and that accepts
/// nothing; only a new `hossted.com/reconcile-at` set after the report
/// does.
#[tokio::test]
async fn only_reconcile_at_set_after_the_report_accepts_changed_storage() {
    let (f, log, operator) = setup().await;
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts.join("tiny")], None)
        .await
        .unwrap();
    apply_helmapp(
        &f,
        OPERATOR_NS,
        "ranged",
        json!({ "chart": { "repo": repo.url(), "name": "tiny", "version": ">=0.1.0" },
                "targetNamespace": TENANT, "interval": "1s" }),
    )
    .await;
    helmapp_ready(&f, OPERATOR_NS, "ranged", "InstallSucceeded", 1).await;
    // A harmless edit of its content (an `info` edit alone is what helm
    // itself makes): still not what the operator left there.
    let secret = stored(&f, TENANT, "ranged", 1).await;
    let mut release = payload(&secret);
    let manifest = release["manifest"].as_str().unwrap().to_string();
    release["manifest"] = json!(format!("{manifest}\n# edited by hand\n"));
    Api::<Secret>::namespaced(f.cp.client(), TENANT)
        .replace(
            &secret.metadata.name.clone().unwrap(),
            &PostParams::default(),
            &with_payload(secret, &release),
        )
        .await
        .unwrap();
    helmapp_with_reason(&f, OPERATOR_NS, "ranged", "StorageTampered").await;

    let before = lines(&log);
    super::sources::publish_tiny(&f, &repo, "0.2.0");
    // The new version is seen (the configuration hash would change)... Each
    // look is asked for by a change outside the hash (`timeout`): labels
    // do not wake a HelmApp, and reconcile-at would accept.
    let mut seconds = 300;
    eventually("0.2.0 seen", 60, || {
        seconds += 1;
        let timeout = format!("{seconds}s");
        let f = &f;
        async move {
            patch_helmapp(
                f,
                OPERATOR_NS,
                "ranged",
                json!({ "spec": { "timeout": timeout } }),
            )
            .await;
            let app = get_helmapp(f, OPERATOR_NS, "ranged").await?;
            (app.status?.latest_available == "0.2.0").then_some(())
        }
    })
    .await;
    let mark = operator.mark();
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "ranged",
        json!({ "spec": { "timeout": "4m" } }),
    )
    .await;
    operator.reconciled_since(mark).await;
    // ...and accepts nothing.
    assert_eq!(runs_since(&log, before, "ranged"), Vec::<String>::new());
    helmapp_with_reason(&f, OPERATOR_NS, "ranged", "StorageTampered").await;

    // reconcile-at, set after the report: accepted, then upgraded.
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "ranged",
        json!({ "metadata": { "annotations": { "hossted.com/reconcile-at": "accept" } } }),
    )
    .await;
    let app = helmapp_ready(&f, OPERATOR_NS, "ranged", "UpgradeSucceeded", 2).await;
    assert_eq!(app.status.unwrap().chart_version, "0.2.0");
    // The accepted revision stays accepted after helm superseded it (and
    // wrote it back in its own encoding, not the test's): the next check
    // finds nothing to report.
    let mark = operator.mark();
    operator.reconciled_since(mark).await;
    let status = get_helmapp(&f, OPERATOR_NS, "ranged")
        .await
        .unwrap()
        .status
        .unwrap();
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason, "UpgradeSucceeded", "{}", ready.message);
    let recorded: Vec<i64> = status.storage_digests.iter().map(|d| d.revision).collect();
    assert_eq!(recorded, [2, 1]);
    operator.stop().await;
}

/// Test 5: `set` 200,000 steps deep is refused at admission (the CRD's
/// `maxLength`); one past the bound that admission lets through, and
/// values 200 levels deep (more than serde_json's 128 — the HelmApp LIST
/// and watch used to fail at it, for every HelmApp), are `InvalidValues`
/// with no helm run; meanwhile another HelmApp installs.
#[tokio::test]
async fn deep_values_and_set_paths_are_refused_and_stop_no_one_else() {
    let (f, log, operator) = setup().await;
    let api: Api<HelmApp> = Api::namespaced(f.cp.client(), OPERATOR_NS);
    let deep_set = format!("{}=1", vec!["a"; 200_000].join("."));
    let app: HelmApp = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": "deepset", "namespace": OPERATOR_NS },
        "spec": { "chart": { "path": "tiny" }, "set": [deep_set] }
    }))
    .unwrap();
    match api.create(&PostParams::default(), &app).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 422, "{s:?}"),
        other => panic!("a 400 KB set string is refused at admission: {other:?}"),
    }

    let mut values = json!(1);
    for _ in 0..200 {
        values = json!({ "a": values });
    }
    let before = lines(&log);
    apply_helmapp(
        &f,
        OPERATOR_NS,
        "deepvalues",
        json!({ "chart": { "path": "tiny" }, "values": values }),
    )
    .await;
    apply_helmapp(
        &f,
        OPERATOR_NS,
        "steps",
        json!({ "chart": { "path": "tiny" }, "set": [format!("{}=1", vec!["b"; 100].join("."))] }),
    )
    .await;
    apply_helmapp(
        &f,
        OPERATOR_NS,
        "other",
        json!({ "chart": { "path": "tiny" } }),
    )
    .await;
    // Read with kubectl: this test's own client decodes a HelmApp as the
    // operator once did, and fails on the 200-deep managedFields of it.
    let ready = |name: &str, field: &str| {
        f.kubectl(&[
            "get",
            "helmapp",
            "-n",
            OPERATOR_NS,
            name,
            "-o",
            &format!("jsonpath={{.status.conditions[?(@.type==\"Ready\")].{field}}}"),
        ])
    };
    for (name, field) in [("deepvalues", "spec.values"), ("steps", "spec.set[0]")] {
        eventually(&format!("{name}: InvalidValues"), 120, || async {
            (ready(name, "reason") == "InvalidValues").then_some(())
        })
        .await;
        let message = ready(name, "message");
        assert!(message.contains(field), "{name} names {field}: {message}");
        assert_eq!(runs_since(&log, before, name), Vec::<String>::new());
    }
    helmapp_ready(&f, OPERATOR_NS, "other", "InstallSucceeded", 1).await;
    operator.stop().await;
}

/// The storage reads the rule costs: LISTs of one release's storage
/// (`owner=helm,name=<release>`) by the operator — not by helm — from the
/// apiserver's audit log. Each helm action records the digests of every
/// revision; a run that released takes them from the cache, which holds
/// the run's last write decoded while it ran
/// (`observe::storage::after_run_from_cache`), so the reads are fewer than
/// the actions (each action was followed by one before); a settled app
/// reads none. How many there were (a cache slower than the record reads
/// once) is printed, a figure: it depends on timing.
#[tokio::test]
async fn each_helm_action_records_its_digests_from_the_cache_and_a_settled_app_reads_none() {
    let (cp, audit) = audited_control_plane().await;
    let f = Fixture::on(cp).await;
    f.namespace(TENANT).await;
    f.namespace(OPERATOR_NS).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| {
            secure_by_default(s);
            s.helm.binary = wrapper.clone();
        })
        .await;
    privileged_app(&f, "counted", json!({})).await;
    for (i, greeting) in ["two", "three", "four", "five"].into_iter().enumerate() {
        patch_helmapp(
            &f,
            OPERATOR_NS,
            "counted",
            json!({ "spec": { "values": { "greeting": greeting } } }),
        )
        .await;
        helmapp_ready(&f, OPERATOR_NS, "counted", "UpgradeSucceeded", i as i64 + 2).await;
    }
    operator.settle().await;
    let actions = runs_since(&log, 0, "counted").len();
    let reads = storage_reads(&audit, "counted");
    println!("helm actions {actions}, operator's reads of the release's storage {reads}");
    assert_eq!(actions, 5);
    assert!(
        reads < actions,
        "{reads} storage reads for {actions} helm actions: each record read the storage"
    );
    let recorded = get_helmapp(&f, OPERATOR_NS, "counted")
        .await
        .unwrap()
        .status
        .unwrap()
        .storage_digests;
    let revisions: Vec<i64> = recorded.iter().map(|d| d.revision).collect();
    assert_eq!(revisions, [5, 4, 3, 2, 1], "every revision recorded");

    // Nothing changes: a look (a spec change outside the hash) reads none.
    let before = storage_reads(&audit, "counted");
    let mark = operator.mark();
    patch_helmapp(
        &f,
        OPERATOR_NS,
        "counted",
        json!({ "spec": { "timeout": "4m" } }),
    )
    .await;
    operator.reconciled_since(mark).await;
    operator.settle().await;
    assert_eq!(
        storage_reads(&audit, "counted"),
        before,
        "a settled app reads no storage"
    );
    operator.stop().await;
}

/// LISTs of `release`'s storage the operator made (helm's own excluded by
/// its user agent), from the audit log.
fn storage_reads(audit: &std::path::Path, release: &str) -> usize {
    let selector = format!("labelSelector=owner%3Dhelm%2Cname%3D{release}");
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["verb"] == "list" && e["objectRef"]["resource"] == "secrets")
        .filter(|e| {
            e["requestURI"]
                .as_str()
                .is_some_and(|u| u.contains(&selector))
        })
        .filter(|e| {
            !e["userAgent"]
                .as_str()
                .unwrap_or_default()
                .starts_with("Helm")
        })
        .count()
}
