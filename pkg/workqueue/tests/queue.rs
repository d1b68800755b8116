//! The client-go work-queue rules, one test each (the randomized
//! concurrency test is `model.rs`).

use std::sync::Arc;
use std::time::Duration;

use workqueue::metrics::Registry;
use workqueue::{ItemExponentialFailureRateLimiter, Queue, RateLimitingQueue};

const MS: Duration = Duration::from_millis(1);

/// `get` with a short deadline: `None` when nothing was handed out.
async fn try_get<T: Eq + std::hash::Hash + Clone>(q: &Queue<T>) -> Option<T> {
    tokio::time::timeout(50 * MS, q.get()).await.ok().flatten()
}

#[tokio::test]
async fn an_item_added_twice_while_waiting_is_queued_once() {
    let q = Queue::new();
    q.add("a");
    q.add("b");
    q.add("a");
    assert_eq!(q.len(), 2);
    let mut got = vec![q.get().await.unwrap(), q.get().await.unwrap()];
    got.sort();
    assert_eq!(got, ["a", "b"]);
    assert!(q.is_empty());
    assert_eq!(try_get(&q).await, None);
}

#[tokio::test]
async fn every_item_added_is_handed_out_exactly_once() {
    let q = Queue::new();
    for i in 0..1_000 {
        q.add(i);
    }
    assert_eq!(q.len(), 1_000);
    let mut got = Vec::new();
    while let Some(i) = try_get(&q).await {
        got.push(i);
        q.done(&i);
    }
    got.sort();
    assert_eq!(got, (0..1_000).collect::<Vec<_>>());
}

/// Strict FIFO is the promise that matters to a controller: an item that
/// waits is handed out soon, however hard other items are churned. With
/// 1,000 items re-added as fast as they are processed, a newcomer comes out
/// within 1,001 gets: every item ahead of it once, then itself.
#[tokio::test]
async fn a_waiting_item_is_not_starved_by_items_readded_in_a_hot_loop() {
    const HOT: u64 = 1_000;
    const COLD: u64 = u64::MAX;
    for round in 0..20 {
        let q = Queue::new();
        for i in 0..HOT {
            q.add(i);
        }
        // Churn a while so the line is in its steady, shuffled state.
        for _ in 0..HOT * 3 + round * 17 {
            let i = q.get().await.unwrap();
            q.done(&i);
            q.add(i);
        }
        q.add(COLD);
        let mut gets = 0;
        loop {
            let i = q.get().await.unwrap();
            gets += 1;
            q.done(&i);
            if i == COLD {
                break;
            }
            q.add(i);
            assert!(
                gets <= HOT + 1,
                "round {round}: the cold item waited over {gets} gets"
            );
        }
    }
}

#[tokio::test]
async fn an_item_readded_while_processing_is_handed_out_again_only_after_done() {
    let q = Queue::new();
    q.add("a");
    let a = q.get().await.unwrap();
    q.add("a");
    q.add("a");
    // Not handed to a second worker while the first one has it.
    assert_eq!(q.len(), 0);
    assert_eq!(try_get(&q).await, None);
    q.done(&a);
    // Once, not twice.
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("a"));
    q.done(&"a");
    assert_eq!(try_get(&q).await, None);
}

#[tokio::test]
async fn get_waits_for_an_add() {
    let q = Arc::new(Queue::new());
    let getter = tokio::spawn({
        let q = q.clone();
        async move { q.get().await }
    });
    tokio::time::sleep(20 * MS).await;
    assert!(!getter.is_finished());
    q.add(7);
    assert_eq!(getter.await.unwrap(), Some(7));
}

#[tokio::test]
async fn shutdown_hands_out_what_is_queued_then_none_and_ignores_adds() {
    let q = Queue::new();
    q.add(1);
    q.add(2);
    q.shutdown();
    q.add(3);
    assert!(q.is_shutting_down());
    let mut got = vec![q.get().await.unwrap(), q.get().await.unwrap()];
    got.sort();
    assert_eq!(got, [1, 2]);
    assert_eq!(q.get().await, None);
}

#[tokio::test]
async fn shutdown_wakes_a_waiting_get_with_none() {
    let q = Arc::new(Queue::<u32>::new());
    let getters: Vec<_> = (0..3)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.get().await })
        })
        .collect();
    tokio::time::sleep(20 * MS).await;
    q.shutdown();
    for g in getters {
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(5), g)
                .await
                .unwrap()
                .unwrap(),
            None
        );
    }
}

#[tokio::test]
async fn shutdown_with_drain_waits_for_items_in_processing() {
    let q = Arc::new(Queue::new());
    q.add("a");
    let a = q.get().await.unwrap();
    let drain = tokio::spawn({
        let q = q.clone();
        async move { q.shutdown_with_drain().await }
    });
    tokio::time::sleep(50 * MS).await;
    assert!(
        !drain.is_finished(),
        "drain returned while an item was in processing"
    );
    q.add("b"); // ignored: shutting down
    q.done(&a);
    tokio::time::timeout(Duration::from_secs(5), drain)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn add_after_makes_the_item_ready_at_its_deadline() {
    let q = Queue::new();
    q.add_after("a", Duration::from_secs(1));
    assert_eq!(q.len(), 0);
    tokio::time::advance(999 * MS).await;
    assert_eq!(q.len(), 0);
    tokio::time::advance(MS).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("a"));
}

#[tokio::test(start_paused = true)]
async fn a_waiting_get_receives_a_delayed_item() {
    let q = Queue::new();
    let start = tokio::time::Instant::now();
    q.add_after("a", Duration::from_secs(3));
    // With the clock paused, tokio jumps to the next timer: get's own deadline.
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(start.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn of_two_delays_for_one_item_the_earlier_wins() {
    let q = Queue::new();
    q.add_after("later-first", Duration::from_secs(10));
    q.add_after("later-first", Duration::from_secs(1));
    q.add_after("earlier-first", Duration::from_secs(1));
    q.add_after("earlier-first", Duration::from_secs(10));
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(q.len(), 2);
    let mut got = vec![q.get().await.unwrap(), q.get().await.unwrap()];
    got.sort();
    assert_eq!(got, ["earlier-first", "later-first"]);
    q.done(&"later-first");
    q.done(&"earlier-first");
    // The superseded 10 s deadlines do not bring them back.
    tokio::time::advance(Duration::from_secs(20)).await;
    assert_eq!(q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_delayed_item_already_queued_is_not_duplicated() {
    let q = Queue::new();
    q.add("a");
    q.add_after("a", Duration::from_secs(1));
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some("a"));
    assert_eq!(try_get(&q).await, None);
}

#[tokio::test(start_paused = true)]
async fn shutdown_drops_items_still_delayed() {
    let q = Queue::new();
    q.add_after("a", Duration::from_secs(1));
    q.shutdown();
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(q.get().await, None);
}

#[tokio::test(start_paused = true)]
async fn add_rate_limited_backs_off_exponentially_and_forget_resets() {
    let q = RateLimitingQueue::new(Box::new(ItemExponentialFailureRateLimiter::new(
        Duration::from_secs(1),
        Duration::from_secs(60),
    )));
    for (attempt, expected) in [1u64, 2, 4, 8].into_iter().enumerate() {
        let start = tokio::time::Instant::now();
        q.add_rate_limited("k");
        assert_eq!(q.num_requeues(&"k"), attempt as u32 + 1);
        assert_eq!(q.get().await, Some("k"));
        assert_eq!(start.elapsed(), Duration::from_secs(expected));
        q.done(&"k");
    }
    q.forget(&"k");
    assert_eq!(q.num_requeues(&"k"), 0);
    let start = tokio::time::Instant::now();
    q.add_rate_limited("k");
    q.get().await;
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{series} not in:\n{text}"))
}

#[tokio::test(start_paused = true)]
async fn metrics_follow_client_go_names_and_meanings() {
    let registry = Registry::new();
    let q = RateLimitingQueue::with_metrics(
        Box::new(ItemExponentialFailureRateLimiter::new(
            MS,
            Duration::from_secs(1),
        )),
        "test",
        &registry,
    );
    q.add("a");
    q.add("a"); // deduplicated: not an add
    q.add("b");
    let text = registry.render();
    assert_eq!(metric(&text, "workqueue_adds_total{name=\"test\"}"), 2.0);
    assert_eq!(metric(&text, "workqueue_depth{name=\"test\"}"), 2.0);

    tokio::time::advance(Duration::from_secs(2)).await;
    let a = q.get().await.unwrap();
    tokio::time::advance(Duration::from_secs(3)).await;
    let text = registry.render();
    assert_eq!(metric(&text, "workqueue_depth{name=\"test\"}"), 1.0);
    assert_eq!(
        metric(
            &text,
            "workqueue_queue_duration_seconds_count{name=\"test\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(&text, "workqueue_queue_duration_seconds_sum{name=\"test\"}"),
        2.0
    );
    assert_eq!(
        metric(
            &text,
            "workqueue_queue_duration_seconds_bucket{le=\"1.0\",name=\"test\"}"
        ),
        0.0
    );
    assert_eq!(
        metric(
            &text,
            "workqueue_queue_duration_seconds_bucket{le=\"10.0\",name=\"test\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(&text, "workqueue_unfinished_work_seconds{name=\"test\"}"),
        3.0
    );
    assert_eq!(
        metric(
            &text,
            "workqueue_longest_running_processor_seconds{name=\"test\"}"
        ),
        3.0
    );

    q.done(&a);
    q.add_rate_limited("a");
    let text = registry.render();
    assert_eq!(
        metric(
            &text,
            "workqueue_work_duration_seconds_count{name=\"test\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(&text, "workqueue_work_duration_seconds_sum{name=\"test\"}"),
        3.0
    );
    assert_eq!(
        metric(&text, "workqueue_unfinished_work_seconds{name=\"test\"}"),
        0.0
    );
    assert_eq!(metric(&text, "workqueue_retries_total{name=\"test\"}"), 1.0);
    assert!(text.contains("# TYPE workqueue_queue_duration_seconds histogram"));
}

#[tokio::test]
async fn items_come_out_in_the_order_they_were_first_added() {
    let q = Queue::new();
    for i in [5, 3, 9, 3, 1, 5] {
        q.add(i);
    }
    let mut out = Vec::new();
    while !q.is_empty() {
        out.push(q.get().await.unwrap());
    }
    assert_eq!(out, vec![5, 3, 9, 1]);
    // All four are in processing: adding them again lines none up.
    for i in [5, 3, 9, 1] {
        q.add(i);
    }
    assert!(q.is_empty());
    q.done(&3);
    assert_eq!(q.get().await, Some(3));
}

#[tokio::test]
async fn a_superseded_delay_is_skipped_and_the_item_comes_out_once() {
    tokio::time::pause();
    let q = Queue::new();
    q.add_after(1, Duration::from_secs(10));
    q.add_after(1, Duration::from_secs(1));
    q.add_after(1, Duration::from_secs(5));
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(q.len(), 1);
    assert_eq!(q.get().await, Some(1));
    assert!(q.is_empty());
}

/// A delay past what the clock holds (a HelmApp's `interval` of
/// centuries) waits as long as it can: no panic, and an `add` still hands
/// the item out at once.
#[tokio::test]
async fn a_delay_past_the_clocks_reach_waits_and_an_add_still_goes_first() {
    let q = Queue::new();
    q.add_after("far", Duration::MAX);
    assert_eq!(try_get(&q).await, None);
    q.add("far");
    assert_eq!(try_get(&q).await, Some("far"));
}
