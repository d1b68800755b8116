//! Queue throughput, the same workload as `hack/bench/workqueue` runs against
//! client-go: 10,000 distinct keys are queued; each of W workers loops
//! get -> done -> add(same key) until 1,000,000 cycles are done in total.
//! Two runtime threads, as client-go gets GOMAXPROCS=2 on this machine.
//! Keys are `Arc<str>`, the Rust counterpart of Go's shared immutable strings.
//!
//! `cargo bench -p workqueue --bench throughput [-- --workers 1,4,16 --cycles N --metrics]`
//! prints one JSON line per worker count.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use workqueue::Queue;
use workqueue::metrics::Registry;

fn run(workers: usize, keys: usize, cycles: u64, metrics: bool) -> f64 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("a runtime");
    let registry = Registry::new();
    let q: Arc<Queue<Arc<str>>> = Arc::new(if metrics {
        Queue::with_metrics("bench", &registry)
    } else {
        Queue::new()
    });
    let names: Vec<Arc<str>> = (0..keys)
        .map(|i| Arc::from(format!("namespace/object-{i}")))
        .collect();
    rt.block_on(async {
        let start = Instant::now();
        for k in &names {
            q.add(k.clone());
        }
        let done = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..workers)
            .map(|_| {
                let (q, done) = (q.clone(), done.clone());
                tokio::spawn(async move {
                    while let Some(item) = q.get().await {
                        q.done(&item);
                        if done.fetch_add(1, Relaxed) + 1 >= cycles {
                            q.shutdown();
                            return;
                        }
                        q.add(item);
                    }
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
        done.load(Relaxed) as f64 / start.elapsed().as_secs_f64()
    })
}

fn main() {
    let mut workers = vec![1, 4, 16];
    let mut cycles: u64 = 1_000_000;
    let mut metrics = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--workers" => {
                workers = args
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .filter_map(|w| w.parse().ok())
                    .collect()
            }
            "--cycles" => cycles = args.next().and_then(|c| c.parse().ok()).unwrap_or(cycles),
            "--metrics" => metrics = true,
            _ => {} // cargo bench passes --bench
        }
    }
    let keys = 10_000;
    for w in workers {
        run(w, keys, cycles / 10, metrics); // warm-up
        let ops = run(w, keys, cycles, metrics);
        println!(
            "{{\"impl\":\"hossted-workqueue\",\"workers\":{w},\"keys\":{keys},\"cycles\":{cycles},\"metrics\":{metrics},\"ops_per_sec\":{ops:.0}}}"
        );
    }
}
