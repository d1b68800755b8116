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
    eventually("the DriftRepaired Event", 30, || async {
        reasons_of_events(&f, "drifty")
            .await
            .contains(&"DriftRepaired".to_string())
            .then_some(())
    })
    .await;
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
    // Installed, but the test control plane has no controllers: not ready.
    let app = with_reason(&f, "waits", "Progressing").await;
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
    let ready_status = json!({ "status": { "observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                                           "readyReplicas": 1, "availableReplicas": 1, "currentReplicas": 1 } });
    Api::<Deployment>::namespaced(f.cp.client(), NS)
        .patch_status(
            "waits-app",
            &PatchParams::default(),
            &Patch::Merge(&ready_status),
        )
        .await
        .unwrap();
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
    Api::<StatefulSet>::namespaced(f.cp.client(), NS)
        .patch_status(
            "waits-db",
            &PatchParams::default(),
            &Patch::Merge(&ready_status),
        )
        .await
        .unwrap();
    let app = with_reason(&f, "waits", "UpToDate").await;
    assert_eq!(app.status.unwrap().revision, 1, "readiness ran no helm");
    operator.stop().await;
}

#[tokio::test]
async fn with_wait_a_daemonset_and_a_job_count_too() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::batch::v1::Job;
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let operator = f.start_delivery().await;
    apply(
        &f,
        "agents",
        json!({ "chart": { "path": "agent" }, "wait": true }),
    )
    .await;
    let app = with_reason(&f, "agents", "Progressing").await;
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
