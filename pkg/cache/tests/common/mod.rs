//! Helpers shared by the informer and factory tests (each test file is its
//! own crate: not every one uses every helper).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use cache::{Event, HandlerFn, object_key};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::mpsc;

pub const WAIT: Duration = Duration::from_secs(WAIT_SECS);
pub const WAIT_SECS: u64 = 60;

pub async fn namespace(client: &Client, name: &str) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

pub fn cm(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(
                "test".to_string(),
                "informer".to_string(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("v".to_string(), value.to_string())])),
        ..Default::default()
    }
}

pub fn value(c: &ConfigMap) -> String {
    c.data
        .as_ref()
        .and_then(|d| d.get("v").cloned())
        .unwrap_or_default()
}

/// `Add ns/name=v`, `Update ns/name v1->v2`, `Delete ns/name=v`.
pub fn describe(e: &Event<ConfigMap>) -> String {
    match e {
        Event::Add(o) => format!("Add {}={}", object_key(o.as_ref()), value(o)),
        Event::Update { old, new } => {
            format!(
                "Update {} {}->{}",
                object_key(new.as_ref()),
                value(old),
                value(new)
            )
        }
        Event::Delete(o) => format!("Delete {}={}", object_key(o.as_ref()), value(o)),
    }
}

/// A handler sending descriptions of events in `ns` to a channel.
pub fn recorder(
    ns: &'static str,
) -> (
    HandlerFn<impl FnMut(&Event<ConfigMap>) + Send>,
    mpsc::UnboundedReceiver<String>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handler = HandlerFn(move |e: &Event<ConfigMap>| {
        let obj = match e {
            Event::Add(o) | Event::Delete(o) | Event::Update { new: o, .. } => o,
        };
        if obj.metadata.namespace.as_deref() == Some(ns) {
            let _ = tx.send(describe(e));
        }
    });
    (handler, rx)
}

pub async fn next_events(rx: &mut mpsc::UnboundedReceiver<String>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < n {
        match tokio::time::timeout(WAIT, rx.recv()).await {
            Ok(Some(e)) => out.push(e),
            _ => panic!("expected {n} events, got {out:?}"),
        }
    }
    out
}

pub fn keys_in(store: &cache::Store<ConfigMap>, ns: &str) -> Vec<String> {
    let mut keys: Vec<String> = store
        .by_index(cache::NAMESPACE_INDEX, ns)
        .iter()
        .map(|o| object_key(o.as_ref()))
        .collect();
    keys.sort();
    keys
}

pub async fn server_keys(client: &Client, ns: &str) -> Vec<String> {
    let mut keys: Vec<String> = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(object_key)
        .collect();
    keys.sort();
    keys
}

pub fn pp() -> PostParams {
    PostParams::default()
}
