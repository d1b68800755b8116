//! Events written to a real apiserver, read back by the real kubectl.

use std::collections::BTreeMap;
use std::time::Duration;

use envtest::ControlPlane;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, PersistentVolume};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use record::{EventBroadcaster, EventType, SPAM_BURST};

async fn configmap(client: &Client, ns: &str, name: &str) -> ConfigMap {
    let nsapi: Api<Namespace> = Api::all(client.clone());
    let created = nsapi
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await;
    match created {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating namespace {ns}: {e}"),
    }
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::new()),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap()
}

/// Events about the object `name` in `ns`.
async fn events_for(client: &Client, ns: &str, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
}

fn kubectl_describe(cp: &ControlPlane, args: &[&str]) -> String {
    let out = cp.kubectl().arg("describe").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn an_event_shows_in_kubectl_describe_of_its_object() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    let cm = configmap(&client, "ev", "target").await;
    let broadcaster = EventBroadcaster::new(client.clone());
    let recorder = broadcaster.recorder("hossted-operator", "test-instance");
    recorder.event(
        &cm,
        EventType::Warning,
        "ApiRejected",
        "the API answered 400 Bad Request",
    );
    // A cluster-scoped object: its Events go to `default`, and describe finds them.
    let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": { "name": "pv-ev" },
        "spec": { "capacity": { "storage": "1Gi" }, "accessModes": ["ReadWriteOnce"], "hostPath": { "path": "/tmp/pv-ev" } }
    }))
    .unwrap();
    let pv = Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .unwrap();
    recorder.event(&pv, EventType::Normal, "AppsReported", "3 apps reported");
    drop(recorder);
    broadcaster.shutdown().await;

    let described = kubectl_describe(&cp, &["configmap", "target", "-n", "ev"]);
    let line = described
        .lines()
        .find(|l| l.contains("ApiRejected"))
        .unwrap_or_else(|| panic!("no event in:\n{described}"));
    assert!(line.contains("Warning"), "{line}");
    assert!(line.contains("hossted-operator"), "{line}");
    assert!(line.contains("the API answered 400 Bad Request"), "{line}");

    let described = kubectl_describe(&cp, &["pv", "pv-ev"]);
    assert!(
        described
            .lines()
            .any(|l| l.contains("AppsReported") && l.contains("3 apps reported")),
        "no event in:\n{described}"
    );
    let events = events_for(&client, "ev", "target").await;
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(e.involved_object.kind.as_deref(), Some("ConfigMap"));
    assert_eq!(e.involved_object.uid, cm.metadata.uid);
    assert_eq!(
        e.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("hossted-operator")
    );
    assert_eq!(e.reporting_component.as_deref(), Some("hossted-operator"));
    assert_eq!(e.reporting_instance.as_deref(), Some("test-instance"));
    assert!(e.first_timestamp.is_some() && e.last_timestamp.is_some());
}

#[tokio::test]
async fn the_same_event_recorded_ten_times_is_one_event_with_count_ten() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    let cm = configmap(&client, "agg", "target").await;
    let broadcaster = EventBroadcaster::new(client.clone());
    let recorder = broadcaster.recorder("hossted-operator", "i");
    for i in 0..10 {
        recorder.event(
            &cm,
            EventType::Warning,
            "ApiUnavailable",
            "503 from the API",
        );
        if i == 0 {
            // Event timestamps have one-second resolution.
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
    }
    recorder.event(
        &cm,
        EventType::Warning,
        "ApiUnavailable",
        "a different message",
    );
    drop(recorder);
    broadcaster.shutdown().await;

    let mut events = events_for(&client, "agg", "target").await;
    events.sort_by_key(|e| e.count);
    let counts: Vec<_> = events
        .iter()
        .map(|e| (e.message.clone().unwrap_or_default(), e.count))
        .collect();
    assert_eq!(
        counts,
        [
            ("a different message".to_string(), Some(1)),
            ("503 from the API".to_string(), Some(10)),
        ]
    );
    let repeated = &events[1];
    assert!(
        repeated.last_timestamp > repeated.first_timestamp,
        "lastTimestamp did not move"
    );
}

/// Recording never waits for the API: 1,000 events are taken while the
/// writer's connection is stalled (nothing can be written), none dropped;
/// once it flows, the spam filter bounds what is written.
#[tokio::test]
async fn a_flood_is_taken_while_the_api_stalls_and_the_spam_filter_bounds_what_is_written() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    let cm = configmap(&client, "flood", "target").await;
    let proxy = envtest::Proxy::start(&cp).await.unwrap();
    let broadcaster = EventBroadcaster::new(proxy.client(&cp).await.unwrap());
    let recorder = broadcaster.recorder("hossted-operator", "i");
    proxy.stall();
    for i in 0..1000 {
        recorder.event(
            &cm,
            EventType::Normal,
            "Flood",
            &format!("distinct message {i}"),
        );
    }
    // Let the writer start on the stalled connection: still nothing dropped.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(broadcaster.dropped(), 0, "1000 events fit the buffer");
    assert!(
        events_for(&client, "flood", "target").await.is_empty(),
        "nothing could be written through the stalled connection"
    );
    drop(recorder);
    proxy.resume();
    broadcaster.shutdown_within(Duration::from_secs(60)).await;
    let written = events_for(&client, "flood", "target").await.len();
    assert_eq!(
        written, SPAM_BURST as usize,
        "the spam filter lets a burst of {SPAM_BURST} through"
    );
}

#[tokio::test]
async fn a_full_buffer_drops_and_counts_instead_of_blocking() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    let broadcaster = EventBroadcaster::new(client.clone());
    let recorder = broadcaster.recorder("hossted-operator", "i");
    // Distinct objects escape the per-object spam filter, so each event is a
    // real write: the writer cannot keep up with 1500 enqueued at once.
    for i in 0..1500 {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("ghost-{i}")),
                namespace: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        recorder.event(&cm, EventType::Normal, "Flood", "x");
    }
    assert!(broadcaster.dropped() >= 1, "nothing was dropped");
    assert!(
        broadcaster.dropped() <= 500,
        "dropped {} of 1500 with a buffer of 1000",
        broadcaster.dropped()
    );
}
