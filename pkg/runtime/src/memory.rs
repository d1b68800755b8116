//! Keeping the resident set close to what the caches really hold.
//!
//! The initial LISTs decode large pages (Helm release Secrets carry a gzip'd
//! release, base64-encoded twice); glibc's malloc keeps the freed buffers in
//! per-thread arenas, so the RSS would stay at the start-up peak. Two arenas
//! are plenty for a 2-worker operator, and the heap is trimmed once the caches
//! have synced. (The scale benchmark, `hack/bench.sh`, measures the effect.)
//! Other C libraries (the static musl image) need neither.
//!
//! A trim is not free: glibc walks every free chunk of both arenas and
//! gives back each page again, and the next allocations fault them in
//! again — its cost grows with how fragmented the heap happens to be. So
//! the heap is trimmed at most once per [`TRIM_EVERY`]: a call within it
//! leaves one trim owed, done when the interval has passed (a burst of a
//! thousand reconciles costs a trim a second, and its last buffers are
//! still given back within a second of its end).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// The least time between two trims.
pub const TRIM_EVERY: Duration = Duration::from_secs(1);

/// Limits glibc to two malloc arenas. Call first thing in `main`.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tuning; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// When trims may happen again, in milliseconds since [`epoch`]; and
/// whether a trim is owed (one is scheduled for then).
static NEXT_TRIM_MS: AtomicU64 = AtomicU64::new(0);
static OWED: AtomicBool = AtomicBool::new(false);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    epoch().elapsed().as_millis() as u64
}

/// Returns free heap pages to the kernel: now, or — within [`TRIM_EVERY`]
/// of the last trim — once that has passed (on the Tokio runtime this is
/// called from; outside one, the owed trim waits for the next call).
pub fn release_free_memory() {
    let now = now_ms();
    let next = NEXT_TRIM_MS.load(Relaxed);
    if now >= next
        && NEXT_TRIM_MS
            .compare_exchange(next, now + TRIM_EVERY.as_millis() as u64, Relaxed, Relaxed)
            .is_ok()
    {
        // (An owed trim's task clears its own flag when it wakes.)
        trim();
        return;
    }
    // One owed trim at a time: the first call that finds none schedules it.
    if OWED.swap(true, Relaxed) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        OWED.store(false, Relaxed);
        return;
    };
    let wait = Duration::from_millis(next.saturating_sub(now));
    runtime.spawn(async move {
        tokio::time::sleep(wait).await;
        OWED.store(false, Relaxed);
        release_free_memory();
    });
}

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim is thread-safe and only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls within the interval trim once, and the owed trim happens once
    /// the interval has passed: the schedule moves on by it.
    #[tokio::test]
    async fn a_burst_of_calls_trims_once_now_and_once_when_the_interval_ends() {
        release_free_memory();
        let after_first = NEXT_TRIM_MS.load(Relaxed);
        for _ in 0..100 {
            release_free_memory();
        }
        assert_eq!(
            NEXT_TRIM_MS.load(Relaxed),
            after_first,
            "no trim within the interval"
        );
        assert!(OWED.load(Relaxed), "one trim owed");
        tokio::time::sleep(TRIM_EVERY + Duration::from_millis(200)).await;
        assert!(!OWED.load(Relaxed), "the owed trim was done");
        assert!(
            NEXT_TRIM_MS.load(Relaxed) >= after_first + TRIM_EVERY.as_millis() as u64,
            "the owed trim moved the schedule on"
        );
    }
}
