//! A randomized concurrency test of the work queue against a model of its
//! rules: no key held by two workers, no re-add lost.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use parking_lot::Mutex;
use workqueue::Queue;

const MS: Duration = Duration::from_millis(1);

/// A small deterministic PRNG (xorshift64*), so a failure names its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Many producers add (and delay) random keys while several workers process
/// them, sometimes re-adding the key they hold. Asserts: no key is ever held
/// by two workers at once, and every key's last processing started after its
/// last add (an add during processing is never lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn randomized_producers_and_workers_never_overlap_and_never_lose_a_readd() {
    for seed in [0x9E37_79B9_7F4A_7C15u64, 42, 7_777_777, 0xDEAD_BEEF] {
        run_random(seed).await;
    }
}

async fn run_random(seed: u64) {
    const KEYS: u64 = 40;
    const PRODUCERS: u64 = 4;
    const WORKERS: usize = 6;
    const ADDS_PER_PRODUCER: u64 = 3_000;

    let q = Arc::new(Queue::<u64>::new());
    let clock = Arc::new(AtomicU64::new(1));
    let last_add: Arc<Mutex<HashMap<u64, u64>>> = Arc::default();
    let last_start: Arc<Mutex<HashMap<u64, u64>>> = Arc::default();
    let held: Arc<Vec<AtomicBool>> = Arc::new((0..KEYS).map(|_| AtomicBool::new(false)).collect());
    let overlaps = Arc::new(AtomicU64::new(0));

    let add = {
        let (q, clock, last_add) = (q.clone(), clock.clone(), last_add.clone());
        move |key: u64, delay: Option<Duration>| {
            // Stamp before adding: any processing that misses this add starts
            // later than the stamp, so a lost add shows as last_start < last_add.
            let stamp = clock.fetch_add(1, SeqCst);
            last_add.lock().insert(key, stamp);
            match delay {
                Some(d) => q.add_after(key, d),
                None => q.add(key),
            }
        }
    };

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (q, clock, last_start, held, overlaps, add) = (
                q.clone(),
                clock.clone(),
                last_start.clone(),
                held.clone(),
                overlaps.clone(),
                add.clone(),
            );
            tokio::spawn(async move {
                let mut rng = Rng(seed ^ ((w as u64 + 1) * 0x1000_0001));
                while let Some(key) = q.get().await {
                    if held[key as usize].swap(true, SeqCst) {
                        overlaps.fetch_add(1, SeqCst);
                    }
                    last_start.lock().insert(key, clock.fetch_add(1, SeqCst));
                    match rng.below(4) {
                        0 => tokio::task::yield_now().await,
                        1 => add(key, None), // re-add while processing
                        _ => {}
                    }
                    held[key as usize].store(false, SeqCst);
                    q.done(&key);
                }
            })
        })
        .collect();

    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let add = add.clone();
            tokio::spawn(async move {
                let mut rng = Rng(seed.rotate_left(p as u32 * 7) | 1);
                for _ in 0..ADDS_PER_PRODUCER {
                    let key = rng.below(KEYS);
                    let delay =
                        (rng.below(5) == 0).then(|| Duration::from_micros(rng.below(2_000)));
                    add(key, delay);
                    if rng.below(8) == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.await.unwrap();
    }
    // Let every delay expire, then drain.
    tokio::time::sleep(Duration::from_millis(20)).await;
    while !q.is_empty() {
        tokio::time::sleep(MS).await;
    }
    tokio::time::timeout(Duration::from_secs(30), q.shutdown_with_drain())
        .await
        .expect("drain finishes");
    for w in workers {
        w.await.unwrap();
    }

    assert_eq!(
        overlaps.load(SeqCst),
        0,
        "seed {seed:#x}: a key was processed by two workers at once"
    );
    let (adds, starts) = (last_add.lock(), last_start.lock());
    for (key, added) in adds.iter() {
        let started = starts.get(key).copied().unwrap_or(0);
        assert!(
            started > *added,
            "seed {seed:#x}: key {key} was added at {added} but last processed at {started}"
        );
    }
}
