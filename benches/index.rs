//! Reading one chart's versions out of a repository `index.yaml` the size
//! of Bitnami's (26 MB, 30,000 entries; the wanted chart last): the quick
//! reading by lines (`carve_entries`, what the operator does first)
//! against the full YAML event parser (`read_entries`, what it did before
//! and still does for an index of another shape), in the same run. One
//! JSON line per case, and the ratio.
//!
//! `cargo bench --bench index`

use std::hint::black_box;
use std::time::Instant;

use hossted_operator::delivery::source::index::{carve_entries, read_entries};

#[path = "../examples/common/big_index.rs"]
mod big_index;

const RUNS: usize = 7;

/// Median milliseconds of `RUNS` runs of `f`, with min and max.
fn measure(case: &str, bytes: usize, mut f: impl FnMut() -> usize) -> f64 {
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        assert_eq!(f(), 1, "{case}: the wanted chart has one version");
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let median = times[RUNS / 2];
    println!(
        "{{\"case\":\"{case}\",\"bytes\":{bytes},\"runs\":{RUNS},\"min_ms\":{:.1},\"median_ms\":{median:.1},\"max_ms\":{:.1},\"mb_per_s\":{:.0}}}",
        times[0],
        times[RUNS - 1],
        bytes as f64 / 1e6 / (median / 1e3)
    );
    median
}

fn main() {
    let index = big_index::generate(
        "apiVersion: v1\nentries:\n  podinfo:\n  - name: podinfo\n    urls:\n    - podinfo-6.7.0.tgz\n    version: 6.7.0\ngenerated: \"2026-11-25T00:00:00Z\"\n",
        30_000,
    );
    let bytes = index.len();
    let full = measure("full parser (read_entries)", bytes, || {
        read_entries(black_box(index.as_bytes()), "podinfo")
            .expect("an index")
            .len()
    });
    let carved = measure("by lines (carve_entries)", bytes, || {
        carve_entries(black_box(index.as_bytes()), "podinfo")
            .expect("an index")
            .expect("block style")
            .len()
    });
    println!(
        "{{\"case\":\"ratio\",\"full_over_carved\":{:.1}}}",
        full / carved
    );
}
