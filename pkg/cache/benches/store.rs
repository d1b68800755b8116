//! Store benchmark: apply 100,000 pod watch events (decode + transform +
//! upsert) and measure the memory each cached pod costs.
//!
//! `cargo bench -p cache --bench store` prints one JSON line per transform.
//! Memory is counted by a global allocator that tracks live bytes, so the
//! figure is what the cache really holds (structs, strings, maps), not an
//! estimate.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::time::Instant;

use cache::Store;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use kube::api::{ObjectMeta, WatchEvent};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// A pod as the apiserver serves it for a Deployment with one container.
fn pod_json(i: usize, rv: usize) -> serde_json::Value {
    let name = format!("web-7d9f8c6b5-{i:05}");
    serde_json::json!({
      "apiVersion": "v1", "kind": "Pod",
      "metadata": {
        "name": name, "generateName": "web-7d9f8c6b5-", "namespace": format!("team-{}", i % 200),
        "uid": format!("6f1c2a4e-8a51-4d0b-9a54-{i:012}"), "resourceVersion": rv.to_string(),
        "creationTimestamp": "2026-11-21T10:00:00Z",
        "labels": { "app.kubernetes.io/instance": format!("release-{}", i % 1000), "app.kubernetes.io/managed-by": "Helm",
                    "app.kubernetes.io/name": "web", "pod-template-hash": "7d9f8c6b5" },
        "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f8c6b5",
                              "uid": "0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30", "controller": true, "blockOwnerDeletion": true }],
        "managedFields": [
          { "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": "2026-11-21T10:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": { "f:metadata": { "f:generateName": {}, "f:labels": { ".": {}, "f:app.kubernetes.io/instance": {},
              "f:app.kubernetes.io/managed-by": {}, "f:app.kubernetes.io/name": {}, "f:pod-template-hash": {} },
              "f:ownerReferences": { ".": {}, "k:{\"uid\":\"0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30\"}": {} } },
              "f:spec": { "f:containers": { "k:{\"name\":\"web\"}": { ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                "f:ports": { ".": {}, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": { ".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {} } },
                "f:resources": { ".": {}, "f:limits": { ".": {}, "f:memory": {} }, "f:requests": { ".": {}, "f:cpu": {}, "f:memory": {} } },
                "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {} } },
                "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {},
                "f:terminationGracePeriodSeconds": {} } } },
          { "manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-21T10:00:05Z", "subresource": "status",
            "fieldsType": "FieldsV1", "fieldsV1": { "f:status": { "f:conditions": { "k:{\"type\":\"ContainersReady\"}": { ".": {}, "f:lastProbeTime": {},
              "f:lastTransitionTime": {}, "f:status": {}, "f:type": {} }, "k:{\"type\":\"Initialized\"}": { ".": {}, "f:lastProbeTime": {},
              "f:lastTransitionTime": {}, "f:status": {}, "f:type": {} }, "k:{\"type\":\"Ready\"}": { ".": {}, "f:lastProbeTime": {},
              "f:lastTransitionTime": {}, "f:status": {}, "f:type": {} } }, "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {},
              "f:podIP": {}, "f:podIPs": { ".": {}, "k:{\"ip\":\"10.244.1.23\"}": { ".": {}, "f:ip": {} } }, "f:startTime": {} } } }
        ]
      },
      "spec": {
        "containers": [{
          "name": "web", "image": "docker.io/bitnami/nginx:1.27.3-debian-12-r0", "imagePullPolicy": "IfNotPresent",
          "ports": [{ "name": "http", "containerPort": 8080, "protocol": "TCP" }],
          "env": [{ "name": "NGINX_PORT", "value": "8080" }, { "name": "POD_NAME", "valueFrom": { "fieldRef": { "apiVersion": "v1", "fieldPath": "metadata.name" } } }],
          "resources": { "limits": { "memory": "256Mi" }, "requests": { "cpu": "100m", "memory": "128Mi" } },
          "volumeMounts": [{ "name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount" }],
          "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"
        }],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default", "serviceAccount": "default", "nodeName": "worker-3", "securityContext": {},
        "schedulerName": "default-scheduler", "enableServiceLinks": true, "priority": 0, "preemptionPolicy": "PreemptLowerPriority",
        "tolerations": [
          { "key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 },
          { "key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 }
        ],
        "volumes": [{ "name": "kube-api-access-x7k2p", "projected": { "defaultMode": 420, "sources": [
          { "serviceAccountToken": { "expirationSeconds": 3607, "path": "token" } },
          { "configMap": { "name": "kube-root-ca.crt", "items": [{ "key": "ca.crt", "path": "ca.crt" }] } },
          { "downwardAPI": { "items": [{ "path": "namespace", "fieldRef": { "apiVersion": "v1", "fieldPath": "metadata.namespace" } }] } }
        ] } }]
      },
      "status": {
        "phase": "Running",
        "conditions": [
          { "type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-21T10:00:00Z" },
          { "type": "Ready", "status": "True", "lastTransitionTime": "2026-11-21T10:00:05Z" },
          { "type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-11-21T10:00:05Z" },
          { "type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-21T10:00:00Z" }
        ],
        "hostIP": "172.18.0.4", "hostIPs": [{ "ip": "172.18.0.4" }], "podIP": "10.244.1.23", "podIPs": [{ "ip": "10.244.1.23" }],
        "startTime": "2026-11-21T10:00:00Z", "qosClass": "Burstable",
        "containerStatuses": [{ "name": "web", "ready": true, "restartCount": 0, "started": true,
          "image": "docker.io/bitnami/nginx:1.27.3-debian-12-r0",
          "imageID": "docker.io/bitnami/nginx@sha256:6f1c2a4e8a514d0b9a542b7f0e3c9d116f1c2a4e8a514d0b9a542b7f0e3c9d11",
          "containerID": "containerd://0b7e9c523d8f4e61a2c45f9d1e7a8b300b7e9c523d8f4e61a2c45f9d1e7a8b30",
          "state": { "running": { "startedAt": "2026-11-21T10:00:04Z" } } }]
      }
    })
}

fn drop_managed_fields(mut pod: Pod) -> Pod {
    pod.metadata.managed_fields = None;
    pod
}

/// What the operator's collector reads of a pod, and nothing else.
fn slim(pod: Pod) -> Pod {
    let m = pod.metadata;
    let image = pod
        .spec
        .and_then(|s| s.containers.into_iter().next())
        .map(|c| Container {
            name: c.name,
            image: c.image,
            ..Default::default()
        });
    Pod {
        metadata: ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            labels: m.labels,
            resource_version: m.resource_version,
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: image.into_iter().collect(),
            ..Default::default()
        }),
        status: pod.status.map(|s| PodStatus {
            phase: s.phase,
            ..Default::default()
        }),
    }
}

/// A pod as the operator needs it: deserialized straight from the API's JSON
/// into only the fields the collector reads (serde skips the rest), instead
/// of k8s-openapi's `Pod`, whose structs alone weigh 2.4 KB (Pod), 2.1 KB
/// per Container and 3.2 KB per Volume before any data.
#[derive(Clone, Debug, serde::Deserialize)]
struct LeanPod {
    #[serde(deserialize_with = "lean_meta")]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: LeanSpec,
    #[serde(default)]
    status: LeanStatus,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
struct LeanSpec {
    #[serde(default)]
    containers: Vec<LeanContainer>,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct LeanContainer {
    #[serde(default)]
    image: Option<String>,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
struct LeanStatus {
    #[serde(default)]
    phase: Option<String>,
}

impl kube::Resource for LeanPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Reads only name, namespace, labels and resourceVersion of the metadata:
/// managedFields, annotations and owner references are skipped by the
/// parser, never allocated.
fn lean_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        name: Option<String>,
        namespace: Option<String>,
        labels: Option<std::collections::BTreeMap<String, String>>,
        resource_version: Option<String>,
    }
    let m = <Meta as serde::Deserialize>::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        labels: m.labels,
        resource_version: m.resource_version,
        ..Default::default()
    })
}

/// Keeps name, namespace, labels and resourceVersion of the metadata.
fn lean(p: LeanPod) -> LeanPod {
    let m = p.metadata;
    LeanPod {
        metadata: ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            labels: m.labels,
            resource_version: m.resource_version,
            ..Default::default()
        },
        spec: LeanSpec {
            containers: p.spec.containers.into_iter().take(1).collect(),
        },
        status: p.status,
    }
}

fn bench<K>(name: &str, transform: fn(K) -> K, events: &[Vec<u8>], pods: usize)
where
    K: kube::Resource + serde::de::DeserializeOwned + 'static,
{
    // Apply: decode the watch event, transform, store.
    let store: Store<K> = Store::new();
    let start = Instant::now();
    for raw in events {
        let event: WatchEvent<K> = serde_json::from_slice(raw).expect("valid event");
        if let WatchEvent::Added(p) | WatchEvent::Modified(p) = event {
            store.upsert(Arc::new(transform(p)));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(store.len(), pods);
    drop(store);

    // Store alone: upserts of ready-made objects (what the reflector does
    // after decoding), cycling over the same pods.
    let ready: Vec<Arc<K>> = events[..pods]
        .iter()
        .filter_map(|raw| match serde_json::from_slice::<WatchEvent<K>>(raw) {
            Ok(WatchEvent::Added(p)) => Some(Arc::new(transform(p))),
            _ => None,
        })
        .collect();
    let store: Store<K> = Store::new();
    let start = Instant::now();
    for n in 0..events.len() {
        store.upsert(ready[n % pods].clone());
    }
    let store_secs = start.elapsed().as_secs_f64();
    drop((store, ready));

    // Memory: live bytes a store holding each pod once adds, everything the
    // decode left behind included.
    let before = LIVE.load(Relaxed);
    let store: Store<K> = Store::new();
    for raw in &events[..pods] {
        if let Ok(WatchEvent::Added(p)) = serde_json::from_slice::<WatchEvent<K>>(raw) {
            store.upsert(Arc::new(transform(p)));
        }
    }
    let bytes = (LIVE.load(Relaxed) - before) as f64 / pods as f64;
    println!(
        "{{\"bench\":\"store\",\"transform\":\"{name}\",\"events\":{},\"pods\":{pods},\"decode_apply_events_per_sec\":{:.0},\"store_upserts_per_sec\":{:.0},\"bytes_per_pod\":{bytes:.0}}}",
        events.len(),
        events.len() as f64 / secs,
        events.len() as f64 / store_secs
    );
}

fn main() {
    const PODS: usize = 10_000;
    const EVENTS: usize = 100_000;
    // 10 events per pod: one ADDED, then MODIFIED with new resourceVersions.
    let events: Vec<Vec<u8>> = (0..EVENTS)
        .map(|n| {
            let (i, round) = (n % PODS, n / PODS);
            let kind = if round == 0 { "ADDED" } else { "MODIFIED" };
            serde_json::to_vec(&serde_json::json!({ "type": kind, "object": pod_json(i, n + 1) }))
                .expect("json")
        })
        .collect();
    // The lean parse must keep what the collector reads.
    match serde_json::from_slice::<WatchEvent<LeanPod>>(&events[0]) {
        Ok(WatchEvent::Added(p)) => {
            assert_eq!(
                p.spec.containers[0].image.as_deref(),
                Some("docker.io/bitnami/nginx:1.27.3-debian-12-r0")
            );
            assert_eq!(p.status.phase.as_deref(), Some("Running"));
            assert!(p.metadata.managed_fields.is_none());
        }
        other => panic!("unexpected {other:?}"),
    }
    let avg = events.iter().map(Vec::len).sum::<usize>() / events.len();
    eprintln!("store bench: {EVENTS} events over {PODS} pods, {avg} bytes of JSON per event");
    bench::<Pod>("k8s-openapi Pod: no transform", |p| p, &events, PODS);
    bench::<Pod>(
        "k8s-openapi Pod: managedFields dropped",
        drop_managed_fields,
        &events,
        PODS,
    );
    bench::<Pod>(
        "k8s-openapi Pod: slimmed to the collector fields",
        slim,
        &events,
        PODS,
    );
    bench::<LeanPod>(
        "LeanPod (own type): parses only the collector fields",
        lean,
        &events,
        PODS,
    );
}
