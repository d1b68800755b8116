//! Ready, drift and dependencies: workloads' rollout, deleted objects put back, dependsOn.

use super::*;

#[tokio::test]
async fn deleted_objects_of_a_release_come_back_with_drift_repaired() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(&f, "drifty", json!({ "chart": { "path": "full" } })).await;
    ready(&f, "drifty", "InstallSucceeded", 1).await;
    let deployments: Api<Deployment> = Api::namespaced(f.cp.client(), NS);
    let services: Api<Service> = Api::namespaced(f.cp.client(), NS);
    deployments
        .delete("drifty-app", &DeleteParams::default())
        .await
        .unwrap();
    services
        .delete("drifty-app", &DeleteParams::default())
        .await
        .unwrap();
    ready(&f, "drifty", "DriftRepaired", 2).await;
    eventually("both back", 30, || async {
        let d = deployments.get_opt("drifty-app").await.ok()??;
        let s = services.get_opt("drifty-app").await.ok()??;
        Some((d, s))
    })
    .await;
    an_event(&f, NS, "drifty", "DriftRepaired").await;
    // Repaired once: settled again, no further revision.
    operator.settle().await;
    let storage = revisions(&f, "drifty").await;
    assert!(storage.len() <= 3, "repair looped: {:?}", storage.keys());

    // driftRepair: false leaves a deleted object deleted.
    patch(&f, "drifty", json!({ "spec": { "driftRepair": false } })).await;
    operator.settle().await;
    let before = revisions(&f, "drifty").await.len();
    services
        .delete("drifty-app", &DeleteParams::default())
        .await
        .unwrap();
    operator.settle().await;
    assert_eq!(revisions(&f, "drifty").await.len(), before);
    assert!(services.get_opt("drifty-app").await.unwrap().is_none());
    operator.stop().await;
}

#[tokio::test]
async fn a_helmapp_waits_for_what_it_depends_on_to_exist_and_be_ready() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "second",
        json!({ "chart": { "path": "tiny" }, "dependsOn": [{ "name": "first" }] }),
    )
    .await;
    let app = ready(&f, "second", "DependencyNotFound", 0).await;
    assert!(app.status.unwrap().conditions[0].message.contains("first"));
    assert!(
        revisions(&f, "second").await.is_empty(),
        "installed before its dependency"
    );
    // The dependency appears; it fails first, so "second" still waits.
    apply(
        &f,
        "first",
        json!({ "chart": { "path": "tiny" }, "values": { "broken": true } }),
    )
    .await;
    ready(&f, "first", "InstallFailed", 0).await;
    ready(&f, "second", "DependencyNotReady", 0).await;
    assert!(revisions(&f, "second").await.is_empty());
    // Once it is Ready, the dependent follows without being touched.
    patch(
        &f,
        "first",
        json!({ "spec": { "values": { "broken": false } } }),
    )
    .await;
    ready(&f, "first", "InstallSucceeded", 1).await;
    ready(&f, "second", "InstallSucceeded", 1).await;
    operator.stop().await;
}

/// With `wait`, a first install is `Progressing` from its run's intent
/// on, and its record is held (`decide::ready::hold`) until its workloads
/// have all rolled out (at most two minutes, `ready::HOLD_CAP`): then
/// written with `Ready`. Red with a fixed 20 s hold (revision 1 written `Progressing`
/// while the StatefulSet waits), and without the intent's condition.
#[tokio::test]
async fn with_wait_ready_follows_the_workloads_rollout() {
    use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "waits",
        json!({ "chart": { "path": "full" }, "wait": true }),
    )
    .await;
    // Installed, but the test control plane has no controllers: not ready,
    // and the record held for the verdict (`decide::ready::hold`). The
    // status says the install runs.
    record_held(&operator).await;
    let st = get(&f, "waits").await.unwrap().status.unwrap();
    assert_eq!(st.revision, 0, "held, not written");
    let ready_condition = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(
        (
            ready_condition.status.as_str(),
            ready_condition.reason.as_str()
        ),
        ("False", "Progressing")
    );
    assert!(
        ready_condition
            .message
            .starts_with("installing revision 1; Ready once its objects are ready"),
        "{}",
        ready_condition.message
    );
    // The Deployment rolls out; the StatefulSet not yet: still held.
    replicas_ready(
        Api::<Deployment>::namespaced(f.cp.client(), NS),
        "waits-app",
    )
    .await;
    // Still held past the 20 s a fixed hold gave (late in a wave of
    // installs the benchmark's rollouts come 70 to 90 s after their run).
    tokio::time::sleep(std::time::Duration::from_secs(25)).await;
    operator.settle().await;
    let st = get(&f, "waits").await.unwrap().status.unwrap();
    assert_eq!(st.revision, 0, "written before the StatefulSet rolled out");
    assert_eq!(
        sample(&operator.scrape(), "hossted_helmapp_records_held"),
        Some(1.0)
    );
    replicas_ready(
        Api::<StatefulSet>::namespaced(f.cp.client(), NS),
        "waits-db",
    )
    .await;
    let app = eventually("Ready at revision 1", 60, || async {
        let app = get(&f, "waits").await?;
        (ready_of(&app)?.0 == "True").then_some(app)
    })
    .await;
    let st = app.status.unwrap();
    assert_eq!(
        (st.revision, st.inventory_revision),
        (1, 1),
        "recorded with its verdict; readiness ran no helm"
    );
    operator.stop().await;
}

/// With `wait`, a first install whose objects do not roll out within its
/// `timeout` is written once, `ReadinessTimeout`, naming what it waits
/// for; each rollout after that shortens the list, and the last makes it
/// Ready. Red without the hold, and with a fixed hold of 20 s (recorded
/// `Progressing` first).
#[tokio::test]
async fn with_wait_a_first_install_past_its_timeout_names_what_it_waits_for() {
    use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "waits",
        json!({ "chart": { "path": "full" }, "wait": true, "timeout": "40s" }),
    )
    .await;
    let watching = versions_until(f.cp.client(), "waits", |a| {
        ready_of(a).is_some_and(|(_, r)| r == "ReadinessTimeout")
    })
    .await;
    let app = with_reason(&f, "waits", "ReadinessTimeout").await;
    let recorded: Vec<_> = watching
        .await
        .unwrap()
        .iter()
        .filter(|a| a.status.as_ref().is_some_and(|s| s.revision == 1))
        .filter_map(ready_of)
        .collect();
    assert_eq!(
        recorded.first().map(|(_, r)| r.as_str()),
        Some("ReadinessTimeout"),
        "recorded once, with its verdict: {recorded:?}"
    );
    let st = app.status.unwrap();
    assert_eq!(st.revision, 1);
    let message = &st
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .message;
    assert!(
        message.contains("Deployment waits-app") && message.contains("StatefulSet waits-db"),
        "{message}"
    );
    assert_eq!(
        st.conditions
            .iter()
            .find(|c| c.type_ == "Released")
            .map(|c| c.status.as_str()),
        Some("True"),
        "released, not yet ready"
    );
    // The Deployment rolls out; the StatefulSet not yet.
    replicas_ready(
        Api::<Deployment>::namespaced(f.cp.client(), NS),
        "waits-app",
    )
    .await;
    eventually("only the StatefulSet left", 30, || async {
        let app = get(&f, "waits").await?;
        let c = app
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (!c.message.contains("Deployment") && c.message.contains("StatefulSet")).then_some(())
    })
    .await;
    replicas_ready(
        Api::<StatefulSet>::namespaced(f.cp.client(), NS),
        "waits-db",
    )
    .await;
    let app = with_reason(&f, "waits", "UpToDate").await;
    assert_eq!(app.status.unwrap().revision, 1, "readiness ran no helm");
    operator.stop().await;
}

#[tokio::test]
async fn with_wait_a_daemonset_and_a_job_count_too() {
    use k8s_openapi::api::batch::v1::Job;
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "agents",
        json!({ "chart": { "path": "agent" }, "wait": true, "timeout": "20s" }),
    )
    .await;
    // Past its timeout the held record is written, naming what it waits for.
    let app = with_reason(&f, "agents", "ReadinessTimeout").await;
    let message = app
        .status
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap()
        .message
        .clone();
    assert!(
        message.contains("DaemonSet agents-agent") && message.contains("Job agents-setup"),
        "{message}"
    );
    agent_daemonset_ready(&f).await;
    eventually("only the Job left", 30, || async {
        let app = get(&f, "agents").await?;
        let c = app
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (!c.message.contains("DaemonSet") && c.message.contains("Job")).then_some(())
    })
    .await;
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    Api::<Job>::namespaced(f.cp.client(), NS)
        .patch_status("agents-setup", &PatchParams::default(), &Patch::Merge(&json!({ "status": {
            "succeeded": 1, "startTime": now, "completionTime": now,
            "conditions": [
                { "type": "SuccessCriteriaMet", "status": "True", "lastProbeTime": now, "lastTransitionTime": now },
                { "type": "Complete", "status": "True", "lastProbeTime": now, "lastTransitionTime": now }
            ] } })))
        .await
        .unwrap();
    with_reason(&f, "agents", "UpToDate").await;
    operator.stop().await;
}

/// `install.disableWaitForJobs` (Flux's name): with `wait`, the install is
/// Ready once its DaemonSet is, its Job still running — the same chart
/// without it waits for the Job (the test above).
#[tokio::test]
async fn with_disable_wait_for_jobs_a_running_job_does_not_hold_ready() {
    use k8s_openapi::api::batch::v1::Job;
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "agents",
        json!({ "chart": { "path": "agent" }, "wait": true, "timeout": "20s",
                "install": { "disableWaitForJobs": true } }),
    )
    .await;
    let app = with_reason(&f, "agents", "ReadinessTimeout").await;
    let message = ready_message(&app);
    assert!(
        message.contains("DaemonSet agents-agent") && !message.contains("Job"),
        "{message}"
    );
    agent_daemonset_ready(&f).await;
    with_reason(&f, "agents", "UpToDate").await;
    // The Job has not completed: nothing here runs it.
    let job = Api::<Job>::namespaced(f.cp.client(), NS)
        .get("agents-setup")
        .await
        .unwrap();
    assert!(
        job.status.and_then(|s| s.completion_time).is_none(),
        "the Job completed"
    );
    operator.stop().await;
}

/// Workload `name` of one replica rolled out at generation 1, as its
/// controller would write it (no controller runs here).
async fn replicas_ready<K>(api: Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let status = json!({ "status": { "observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                                     "readyReplicas": 1, "availableReplicas": 1, "currentReplicas": 1 } });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// The agent chart's DaemonSet `agents-agent` rolled out, as its
/// controller would write it (no controller runs here).
async fn agent_daemonset_ready(f: &Fixture) {
    use k8s_openapi::api::apps::v1::DaemonSet;
    Api::<DaemonSet>::namespaced(f.cp.client(), NS)
        .patch_status(
            "agents-agent",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": {
            "observedGeneration": 1, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2,
            "numberReady": 2, "currentNumberScheduled": 2, "numberMisscheduled": 0 } })),
        )
        .await
        .unwrap();
}

/// Sets the status of Gadget `name` (a custom resource: no controller
/// here writes it).
async fn gadget_status(f: &Fixture, name: &str, status: serde_json::Value) {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let gvk = GroupVersionKind::gvk("example.hossted.com", "v1", "Gadget");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "gadgets");
    let api: Api<DynamicObject> = Api::namespaced_with(f.cp.client(), NS, &resource);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap();
}

fn ready_message(app: &HelmApp) -> String {
    app.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// Gadget `release-gadget`, made before its release with helm's adoption
/// metadata (helm takes it over at install and leaves its status alone),
/// with `status`: a controller's verdict exists before the operator can
/// look — there is no window in which the Gadget has no conditions (which
/// kstatus counts as ready).
async fn gadget_before_install(f: &Fixture, release: &str, status: serde_json::Value) {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let crd = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/charts/gadget/crds/gadgets.yaml");
    output_ok(f.cp.kubectl().args(["apply", "-f"]).arg(&crd));
    let gvk = GroupVersionKind::gvk("example.hossted.com", "v1", "Gadget");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "gadgets");
    let api: Api<DynamicObject> = Api::namespaced_with(f.cp.client(), NS, &resource);
    let gadget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.hossted.com/v1", "kind": "Gadget",
        "metadata": { "name": format!("{release}-gadget"), "namespace": NS,
            "labels": { "app.kubernetes.io/managed-by": "Helm" },
            "annotations": { "meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": NS } },
        "spec": { "size": "small" }
    }))
    .unwrap();
    eventually("the Gadget CRD served", 30, || async {
        api.create(&PostParams::default(), &gadget).await.ok()
    })
    .await;
    gadget_status(f, &format!("{release}-gadget"), status).await;
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> serde_json::Value {
    json!({ "type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z" })
}

#[tokio::test]
async fn with_wait_a_custom_resource_with_conditions_holds_ready_and_its_dependents() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    gadget_before_install(
        &f,
        "gadget",
        json!({ "observedGeneration": 1, "conditions": [
            condition("Ready", "False", "Provisioning", "provisioning the gadget") ] }),
    )
    .await;
    gadget_before_install(
        &f,
        "stuck",
        json!({ "observedGeneration": 1, "conditions": [
            condition("Ready", "False", "Failing", "x"),
            condition("Stalled", "True", "NoIssuer", "the issuer does not exist") ] }),
    )
    .await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "gadget",
        json!({ "chart": { "path": "gadget" }, "wait": true }),
    )
    .await;
    apply(
        &f,
        "after",
        json!({ "chart": { "path": "tiny" }, "dependsOn": [{ "name": "gadget" }] }),
    )
    .await;
    // Ready=False on the Gadget: not Ready (its record held for the
    // verdict), and the dependent waits.
    record_held(&operator).await;
    operator.settle().await;
    let app = get(&f, "gadget").await.unwrap();
    assert!(!is_ready(&app), "{}", ready_message(&app));
    assert_eq!(app.status.unwrap().revision, 0, "held, not written");
    assert!(
        revisions(&f, "after").await.is_empty(),
        "a dependent started early"
    );
    let after = get(&f, "after").await.unwrap();
    assert_eq!(
        after.status.unwrap().conditions[0].reason,
        "DependencyNotReady"
    );

    // Ready=True: both proceed (the Gadget, of a kind no cache follows, is
    // read again while the release waits).
    gadget_status(
        &f,
        "gadget-gadget",
        json!({ "conditions": [ condition("Ready", "True", "Provisioned", "ready") ] }),
    )
    .await;
    let app = eventually("the gadget Ready", 60, || async {
        let app = get(&f, "gadget").await?;
        is_ready(&app).then_some(app)
    })
    .await;
    assert_eq!(app.status.unwrap().revision, 1, "recorded with its verdict");
    ready(&f, "after", "InstallSucceeded", 1).await;

    // Stalled=True fails at once, with the object's message (timeout: 5m).
    apply(
        &f,
        "stuck",
        json!({ "chart": { "path": "gadget" }, "wait": true }),
    )
    .await;
    let app = with_reason(&f, "stuck", "ReadinessFailed").await;
    assert!(
        ready_message(&app).contains("Gadget stuck-gadget failed: the issuer does not exist"),
        "{}",
        ready_message(&app)
    );
    operator.stop().await;
}

/// Every version of HelmApp `name` the API server stores from the moment
/// this returns, in order, until `done` holds of one: its current state
/// first (if it exists), then each write. The watch is open on the server
/// when this returns — a write made after it is never missed, however
/// late the collecting task runs (a spawned watch a 300 ms sleep was to
/// open missed a whole install on a loaded machine).
async fn versions_until(
    client: kube::Client,
    name: &str,
    done: impl Fn(&HelmApp) -> bool + Send + 'static,
) -> tokio::task::JoinHandle<Vec<HelmApp>> {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::{WatchEvent, WatchParams};
    let api = Api::<HelmApp>::namespaced(client, NS);
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(150);
    let mut stream = api.watch(&params, "0").await.unwrap().boxed();
    let name = name.to_string();
    tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(event) = stream.try_next().await.unwrap() {
            let app = match event {
                WatchEvent::Added(a) | WatchEvent::Modified(a) => a,
                WatchEvent::Error(e) => panic!("watch: {e:?}"),
                _ => continue,
            };
            let finished = done(&app);
            seen.push(app);
            if finished {
                return seen;
            }
        }
        panic!(
            "{name}: not done within 150 s: {} versions seen",
            seen.len()
        );
    })
}

/// How many times the status changed from one version to the next.
fn status_writes(versions: &[HelmApp]) -> usize {
    let statuses: Vec<_> = versions
        .iter()
        .map(|a| serde_json::to_value(&a.status).unwrap())
        .collect();
    statuses.windows(2).filter(|w| w[0] != w[1]).count()
}

/// `(status, reason)` of a version's Ready condition.
fn ready_of(app: &HelmApp) -> Option<(String, String)> {
    let status = app.status.as_ref()?;
    let c = status.conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((c.status.clone(), c.reason.clone()))
}

/// With `wait`, a release whose objects are ready as soon as helm made
/// them is reported Ready by the run's own status write: what the run
/// left is recorded (its objects listed) before the report, so no
/// `Progressing` write comes between the run's intent and `Ready` (issue
/// 55: a write per release fewer). Red with the report before the record.
#[tokio::test]
async fn a_release_ready_at_once_is_reported_ready_in_its_run_s_own_status_write() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    let watching = versions_until(f.cp.client(), "quick", |a| {
        ready_of(a).is_some_and(|(s, _)| s == "True")
    })
    .await;
    apply(
        &f,
        "quick",
        json!({ "chart": { "path": "tiny" }, "wait": true }),
    )
    .await;
    let versions = watching.await.unwrap();
    let readies: Vec<_> = versions.iter().filter_map(ready_of).collect();
    // The intent says the install runs; no record says Progressing.
    let intent = versions
        .iter()
        .find(|a| a.status.as_ref().is_some_and(|s| s.run_intent.is_some()))
        .expect("the run's intent written");
    assert_eq!(
        ready_of(intent),
        Some(("False".to_string(), "Progressing".to_string()))
    );
    assert_eq!(intent.status.as_ref().unwrap().revision, 0);
    // `kubectl get` shows where it goes meanwhile.
    let shown = intent.status.as_ref().unwrap();
    assert_eq!(
        (shown.release_name.as_str(), shown.target_namespace.as_str()),
        ("quick", NS)
    );
    let recorded: Vec<_> = versions
        .iter()
        .filter(|a| a.status.as_ref().is_some_and(|s| s.revision == 1))
        .filter_map(ready_of)
        .collect();
    assert!(
        !recorded.iter().any(|(_, reason)| reason == "Progressing"),
        "{recorded:?}"
    );
    assert_eq!(
        readies.last(),
        Some(&("True".to_string(), "InstallSucceeded".to_string()))
    );
    // The status written twice: the run's intent, then its record with
    // Ready (the finalizer is a write of the HelmApp itself).
    let status_writes = status_writes(&versions);
    assert_eq!(status_writes, 2, "{readies:?}");
    operator.stop().await;
}

/// With `wait`, a first release whose workload rolls out a moment after
/// its run is reported Ready by the status write that records it: the
/// record is held in the operator (`decide::ready::hold`) instead of
/// written with `Progressing` and again with `Ready` (issue 55: a write
/// per release fewer). Red with the hold off: revision 1 is seen
/// `Progressing`, in three status writes.
#[tokio::test]
async fn a_first_release_rolling_out_a_moment_after_its_run_is_recorded_with_ready_in_one_write() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    let watching = versions_until(f.cp.client(), "settling", |a| {
        ready_of(a).is_some_and(|(s, _)| s == "True")
    })
    .await;
    apply(
        &f,
        "settling",
        json!({ "chart": { "path": "podinfo" }, "wait": true }),
    )
    .await;
    // The run is recorded, its Deployment not rolled out yet: held.
    record_held(&operator).await;
    rolled_out(&f, "settling-podinfo", 1).await;
    let versions = watching.await.unwrap();
    let progressing: Vec<_> = versions
        .iter()
        .filter(|a| a.status.as_ref().is_some_and(|s| s.revision == 1))
        .filter_map(ready_of)
        .filter(|(_, reason)| reason == "Progressing")
        .collect();
    assert!(
        progressing.is_empty(),
        "recorded Progressing: {progressing:?}"
    );
    let status_writes = status_writes(&versions);
    assert_eq!(status_writes, 2, "the intent, then the record with Ready");
    let last = versions.last().and_then(|a| a.status.as_ref()).unwrap();
    assert_eq!((last.revision, last.inventory_revision), (1, 1), "recorded");
    operator.stop().await;
}

/// An operator that stops cleanly while it holds a first release's record
/// writes it as it drains; a HelmApp deleted while its record is held has
/// it written before anything of the uninstall. Both are on the server
/// whatever comes next (a crash during the hold: `faults::a_record_held_
/// when_the_operator_dies_is_proven_by_a_render_and_recorded`). Red
/// without the drain's writes (revision 0 after the stop), and without
/// the write before the uninstall (no version of the deleting app shows
/// revision 1).
#[tokio::test]
async fn a_held_record_is_written_when_the_operator_stops_and_before_an_uninstall() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "unsettled",
        json!({ "chart": { "path": "podinfo" }, "wait": true }),
    )
    .await;
    record_held(&operator).await;
    let published = get(&f, "unsettled").await.unwrap().status.unwrap();
    assert_eq!(published.revision, 0, "held, not written");
    assert_eq!(published.run_intent.as_ref().map(|i| i.revision), Some(1));
    operator.stop().await;
    let published = get(&f, "unsettled").await.unwrap().status.unwrap();
    assert_eq!(
        (published.revision, published.inventory_revision),
        (1, 1),
        "written by the drain"
    );

    let operator = f.start_delivery().await;
    apply(
        &f,
        "leaving",
        json!({ "chart": { "path": "podinfo" }, "wait": true }),
    )
    .await;
    let watching = versions_until(f.cp.client(), "leaving", |a| {
        a.metadata.deletion_timestamp.is_some()
            && a.status.as_ref().is_some_and(|s| s.revision == 1)
    })
    .await;
    record_held(&operator).await;
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .delete("leaving", &DeleteParams::default())
        .await
        .unwrap();
    let versions = watching.await.unwrap();
    let deleting: Vec<i64> = versions
        .iter()
        .filter(|a| a.metadata.deletion_timestamp.is_some())
        .map(|a| a.status.as_ref().map_or(0, |s| s.revision))
        .collect();
    assert_eq!(
        deleting.first(),
        Some(&0),
        "held when deleted (else this proves nothing): {deleting:?}"
    );
    eventually("uninstalled and gone", 60, || async {
        (get(&f, "leaving").await.is_none() && revisions(&f, "leaving").await.is_empty())
            .then_some(())
    })
    .await;
    operator.stop().await;
}

/// The status of a Deployment of 0 replicas that has rolled out
/// `generation` (the test control plane has no controllers).
async fn rolled_out(f: &Fixture, name: &str, generation: i64) {
    use k8s_openapi::api::apps::v1::Deployment;
    let status = json!({ "status": { "observedGeneration": generation, "replicas": 0,
                                     "updatedReplicas": 0, "readyReplicas": 0, "availableReplicas": 0 } });
    Api::<Deployment>::namespaced(f.cp.client(), NS)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// With `wait`, an upgrade's workloads are judged in the run's own
/// reconcile (its report follows the record): the new generation not
/// rolled out keeps the new revision from Ready — every version the watch
/// delivers says so, until it rolls out. (That a workload the cache holds
/// only at the generation before, rolled out, is pending too is
/// `readiness::tests`: the watch here is rarely behind the record.)
#[tokio::test]
async fn an_upgrade_is_not_ready_on_the_last_generation_s_rollout() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "rolling",
        json!({ "chart": { "path": "podinfo" }, "wait": true }),
    )
    .await;
    record_held(&operator).await;
    rolled_out(&f, "rolling-podinfo", 1).await;
    ready(&f, "rolling", "UpToDate", 1).await;
    let watching = versions_until(f.cp.client(), "rolling", |a| {
        let revision = a.status.as_ref().map_or(0, |s| s.revision);
        revision == 2 && ready_of(a).is_some_and(|(_, r)| r == "Progressing")
    })
    .await;
    patch(
        &f,
        "rolling",
        json!({ "spec": { "values": { "image": { "tag": "6.7.1" } } } }),
    )
    .await;
    let versions = watching.await.unwrap();
    let early: Vec<_> = versions
        .iter()
        .filter(|a| a.status.as_ref().is_some_and(|s| s.revision == 2))
        .filter_map(ready_of)
        .filter(|(status, _)| status == "True")
        .collect();
    assert!(
        early.is_empty(),
        "Ready before the new generation rolled out: {early:?}"
    );
    // Still waiting while it does not roll out; Ready once it does.
    operator.settle().await;
    assert_eq!(
        get(&f, "rolling").await.as_ref().and_then(ready_of),
        Some(("False".to_string(), "Progressing".to_string()))
    );
    rolled_out(&f, "rolling-podinfo", 2).await;
    eventually("Ready at revision 2", 30, || async {
        let app = get(&f, "rolling").await?;
        let revision = app.status.as_ref()?.revision;
        (revision == 2 && ready_of(&app)?.0 == "True").then_some(())
    })
    .await;
    operator.stop().await;
}
