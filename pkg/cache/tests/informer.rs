//! Informers against a real kube-apiserver: order of events, watch resumption,
//! relist after 410 Gone, apiserver restarts, slow handlers, sharing.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use cache::{Event, HandlerFn, InformerOptions, ListWatchConfig, SharedInformerFactory};
use envtest::{ControlPlane, Proxy, eventually};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

mod common;
use common::*;

#[tokio::test]
async fn adds_updates_and_deletes_arrive_in_order() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    namespace(&client, "order").await;
    let factory = SharedInformerFactory::new(client.clone(), None);
    let informer = factory.informer::<ConfigMap>(InformerOptions::default());
    let (handler, mut rx) = recorder("order");
    informer.add_event_handler(handler);
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);

    let api: Api<ConfigMap> = Api::namespaced(client, "order");
    let pp = PostParams::default();
    api.create(&pp, &cm("a", "1")).await.unwrap();
    api.replace("a", &pp, &{
        let mut a = api.get("a").await.unwrap();
        a.data = Some(BTreeMap::from([("v".into(), "2".into())]));
        a
    })
    .await
    .unwrap();
    api.create(&pp, &cm("b", "1")).await.unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();

    assert_eq!(
        next_events(&mut rx, 4).await,
        [
            "Add order/a=1",
            "Update order/a 1->2",
            "Add order/b=1",
            "Delete order/a=2"
        ]
    );
    assert_eq!(keys_in(&informer.store(), "order"), ["order/b"]);
    let lister = informer.lister();
    assert_eq!(value(&lister.namespaced("order").get("b").unwrap()), "1");
    assert!(lister.namespaced("order").get("a").is_none());
}

#[tokio::test]
async fn a_late_handler_gets_adds_for_what_is_cached_and_resync_redelivers() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    namespace(&client, "late").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "late");
    for name in ["x", "y"] {
        api.create(&PostParams::default(), &cm(name, "0"))
            .await
            .unwrap();
    }
    let factory = SharedInformerFactory::new(client, Some(Duration::from_secs(1)));
    let informer = factory.informer::<ConfigMap>(InformerOptions::default());
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);

    let (handler, mut rx) = recorder("late");
    informer.add_event_handler(handler);
    let mut adds = next_events(&mut rx, 2).await;
    adds.sort();
    assert_eq!(adds, ["Add late/x=0", "Add late/y=0"]);
    // Within the next resync period both are re-delivered as unchanged updates.
    let mut resync = next_events(&mut rx, 2).await;
    resync.sort();
    assert_eq!(resync, ["Update late/x 0->0", "Update late/y 0->0"]);
}

#[tokio::test]
async fn a_watch_closed_by_the_server_is_resumed_without_a_relist() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    namespace(&client, "resume").await;
    let factory = SharedInformerFactory::new(client.clone(), None);
    let informer = factory.informer::<ConfigMap>(InformerOptions {
        // The server ends each watch after 1-2 s.
        list_watch: ListWatchConfig {
            watch_timeout: Duration::from_secs(2),
            ..Default::default()
        },
        ..Default::default()
    });
    let (handler, mut rx) = recorder("resume");
    informer.add_event_handler(handler);
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);
    eventually("three watches", WAIT_SECS, || async {
        (informer.stats().watches.load(SeqCst) >= 3).then_some(())
    })
    .await;

    Api::<ConfigMap>::namespaced(client, "resume")
        .create(&PostParams::default(), &cm("after", "1"))
        .await
        .unwrap();
    assert_eq!(next_events(&mut rx, 1).await, ["Add resume/after=1"]);
    assert_eq!(
        informer.stats().lists.load(SeqCst),
        1,
        "a closed watch must not cause a relist"
    );
    assert_eq!(informer.stats().relists_after_gone.load(SeqCst), 0);
}

/// Whether a watch from `resource_version` is answered 410 Gone (etcd
/// compacted past it).
async fn gone_from(api: &Api<ConfigMap>, resource_version: &str) -> bool {
    use futures::TryStreamExt;
    let params = kube::api::WatchParams::default().timeout(1);
    let stream = match api.watch(&params, resource_version).await {
        Ok(stream) => stream,
        Err(kube::Error::Api(s)) => return s.code == 410,
        Err(_) => return false,
    };
    let mut stream = Box::pin(stream);
    loop {
        match stream.try_next().await {
            Ok(Some(kube::api::WatchEvent::Error(e))) => return e.code == 410,
            Ok(Some(_)) => continue,
            Err(kube::Error::Api(s)) => return s.code == 410,
            Ok(None) | Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn a_410_gone_leads_to_a_relist_and_deletes_for_what_vanished() {
    // Watches served straight from etcd, compacted every second: a watch
    // resumed from a resourceVersion a few seconds old gets 410 Gone.
    let cp = ControlPlane::builder()
        .apiserver_arg("--watch-cache=false")
        .apiserver_arg("--etcd-compaction-interval=1s")
        .start()
        .await
        .unwrap();
    let admin = cp.client();
    namespace(&admin, "gone").await;
    namespace(&admin, "churn").await;
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), "gone");
    let pp = PostParams::default();
    api.create(&pp, &cm("keep", "1")).await.unwrap();
    api.create(&pp, &cm("doomed", "last-known")).await.unwrap();

    let partition = Proxy::start(&cp).await.unwrap();
    let factory = SharedInformerFactory::new(partition.client(&cp).await.unwrap(), None);
    let informer = factory.informer::<ConfigMap>(InformerOptions::default());
    let (handler, mut rx) = recorder("gone");
    informer.add_event_handler(handler);
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);
    let mut initial = next_events(&mut rx, 2).await;
    initial.sort();
    assert_eq!(initial, ["Add gone/doomed=last-known", "Add gone/keep=1"]);

    // Where the informer's watch stands: what the apiserver must compact past.
    let seen = api
        .list_metadata(&Default::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    partition.cut();
    api.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    api.create(&pp, &cm("fresh", "1")).await.unwrap();
    let patch = serde_json::json!({ "data": { "v": "2" } });
    api.patch("keep", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    // Unrelated writes, and the apiserver compacted past them: a watch from
    // where the informer stood is answered 410 (awaited, not slept for).
    let churn: Api<ConfigMap> = Api::namespaced(admin.clone(), "churn");
    for i in 0..20 {
        churn.create(&pp, &cm(&format!("c{i}"), "x")).await.unwrap();
    }
    eventually(
        "the apiserver compacted past the informer's watch",
        60,
        || {
            let (api, seen) = (api.clone(), seen.clone());
            async move { gone_from(&api, &seen).await.then_some(()) }
        },
    )
    .await;
    partition.heal();

    let mut after = next_events(&mut rx, 3).await;
    after.sort();
    assert_eq!(
        after,
        [
            "Add gone/fresh=1",
            "Delete gone/doomed=last-known", // its last known state
            "Update gone/keep 1->2",
        ]
    );
    assert!(
        informer.stats().relists_after_gone.load(SeqCst) >= 1,
        "no 410 was seen"
    );
    assert_eq!(informer.stats().lists.load(SeqCst), 2);
    assert_eq!(
        keys_in(&informer.store(), "gone"),
        server_keys(&admin, "gone").await
    );
    assert_eq!(keys_in(&informer.store(), "churn").len(), 20);
}

#[tokio::test]
async fn killing_and_restarting_the_apiserver_ends_in_a_consistent_store() {
    let mut cp = ControlPlane::start().await.unwrap();
    let admin = cp.client();
    namespace(&admin, "restart").await;
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), "restart");
    let pp = PostParams::default();
    api.create(&pp, &cm("before", "1")).await.unwrap();
    let factory = SharedInformerFactory::new(admin.clone(), None);
    let informer = factory.informer::<ConfigMap>(InformerOptions {
        list_watch: ListWatchConfig {
            initial_backoff: Duration::from_millis(100),
            ..Default::default()
        },
        ..Default::default()
    });
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);

    cp.stop_apiserver();
    tokio::time::sleep(Duration::from_secs(1)).await;
    cp.start_apiserver().await.unwrap();
    api.create(&pp, &cm("after", "1")).await.unwrap();
    api.delete("before", &DeleteParams::default())
        .await
        .unwrap();

    let store = informer.store();
    eventually("the store to match the server", WAIT_SECS, || {
        let store = store.clone();
        let admin = admin.clone();
        async move { (keys_in(&store, "restart") == server_keys(&admin, "restart").await).then_some(()) }
    })
    .await;
    assert_eq!(keys_in(&store, "restart"), ["restart/after"]);
    assert!(
        informer.stats().errors.load(SeqCst) >= 1,
        "the outage went unnoticed"
    );
}

#[tokio::test]
async fn a_slow_handler_delays_neither_the_reflector_nor_other_handlers() {
    let cp = ControlPlane::start().await.unwrap();
    let client = cp.client();
    namespace(&client, "slow").await;
    let factory = SharedInformerFactory::new(client.clone(), None);
    let informer = factory.informer::<ConfigMap>(InformerOptions::default());
    let (fast, mut fast_rx) = recorder("slow");
    let (slow_inner, mut slow_rx) = recorder("slow");
    let mut slow_inner = slow_inner;
    // The slow handler takes no event until the gate opens: "behind" is
    // made so, not hoped for from a sleep on a busy machine.
    let gate = std::sync::Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let held = gate.clone();
    informer.add_event_handler(HandlerFn(move |e: &Event<ConfigMap>| {
        let (open, opened) = &*held;
        let mut open = open.lock().unwrap();
        while !*open {
            open = opened.wait(open).unwrap();
        }
        drop(open);
        cache::EventHandler::on_add(
            &mut slow_inner,
            match e {
                Event::Add(o) => o,
                _ => return,
            },
        );
    }));
    informer.add_event_handler(fast);
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);

    let api: Api<ConfigMap> = Api::namespaced(client, "slow");
    let creates = (0..40).map(|i| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &cm(&format!("m{i:02}"), "1"))
                .await
                .unwrap()
        }
    });
    futures::future::join_all(creates).await;

    // The fast handler and the store have everything while the slow handler
    // has taken nothing (it waits at its gate).
    let fast_events = next_events(&mut fast_rx, 40).await;
    assert_eq!(keys_in(&informer.store(), "slow").len(), 40);
    let mut slow_so_far = Vec::new();
    while let Ok(e) = slow_rx.try_recv() {
        slow_so_far.push(e);
    }
    assert_eq!(slow_so_far.len(), 0, "the slow handler was not held");
    let (open, opened) = &*gate;
    *open.lock().unwrap() = true;
    opened.notify_all();
    // ... and it still receives every event, in the same order.
    let rest = next_events(&mut slow_rx, 40 - slow_so_far.len()).await;
    slow_so_far.extend(rest);
    assert_eq!(slow_so_far, fast_events);
}

#[tokio::test]
async fn a_watch_on_a_stalled_connection_is_restarted_and_the_cache_catches_up() {
    let cp = ControlPlane::start().await.unwrap();
    let admin = cp.client();
    namespace(&admin, "stall").await;
    let api: Api<ConfigMap> = Api::namespaced(admin.clone(), "stall");
    let pp = PostParams::default();
    api.create(&pp, &cm("before", "1")).await.unwrap();

    let proxy = Proxy::start(&cp).await.unwrap();
    let factory = SharedInformerFactory::new(proxy.client(&cp).await.unwrap(), None);
    let informer = factory.informer::<ConfigMap>(InformerOptions {
        list_watch: ListWatchConfig {
            progress_timeout: Duration::from_secs(2),
            initial_backoff: Duration::from_millis(100),
            ..Default::default()
        },
        ..Default::default()
    });
    factory.start().unwrap();
    assert!(factory.wait_for_cache_sync(WAIT).await);

    // The connection stays up but nothing passes: without a progress
    // timeout the watch would wait for its next event forever.
    proxy.stall();
    api.create(&pp, &cm("during", "1")).await.unwrap();
    eventually("the stalled watch to be given up", WAIT_SECS, || async {
        (informer.stats().stalls.load(SeqCst) >= 1).then_some(())
    })
    .await;
    proxy.resume();
    api.create(&pp, &cm("after", "1")).await.unwrap();
    let store = informer.store();
    eventually("the store to match the server", WAIT_SECS, || {
        let (store, admin) = (store.clone(), admin.clone());
        async move {
            let want = server_keys(&admin, "stall").await;
            (want.len() == 3 && keys_in(&store, "stall") == want).then_some(())
        }
    })
    .await;
    assert_eq!(
        informer.stats().lists.load(SeqCst),
        1,
        "a restarted watch resumes from its resourceVersion, without a relist"
    );
}
