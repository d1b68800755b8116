//! How long an item waits before its next retry (client-go's
//! `default_rate_limiters.go`).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Decides the delay before an item's retry.
pub trait RateLimiter<T>: Send + Sync {
    /// The delay before `item` is retried; records one more failure of it.
    fn when(&self, item: &T) -> Duration;
    /// Forgets `item`'s failures (call after it succeeded).
    fn forget(&self, item: &T);
    /// How many times `item` has been retried since it was last forgotten.
    fn num_requeues(&self, item: &T) -> u32;
}

/// Per item, `base * 2^failures`, capped at `max`.
pub struct ItemExponentialFailureRateLimiter<T> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T> ItemExponentialFailureRateLimiter<T> {
    pub fn new(base: Duration, max: Duration) -> Self {
        ItemExponentialFailureRateLimiter {
            base,
            max,
            failures: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Eq + Hash + Clone + Send> RateLimiter<T> for ItemExponentialFailureRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let exp = {
            let mut f = self.failures.lock();
            let n = f.entry(item.clone()).or_insert(0);
            let exp = *n;
            *n = n.saturating_add(1);
            exp
        };
        // 2^exp overflows long before the cap matters: compare in f64.
        let secs = self.base.as_secs_f64() * 2f64.powi(exp.min(1024) as i32);
        if !secs.is_finite() || secs >= self.max.as_secs_f64() {
            self.max
        } else {
            Duration::from_secs_f64(secs)
        }
    }

    fn forget(&self, item: &T) {
        self.failures.lock().remove(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.failures.lock().get(item).copied().unwrap_or(0)
    }
}

/// An overall token bucket shared by all items: `qps` tokens a second, at
/// most `burst` saved up. A retry without a token waits for one (tokens are
/// reserved, so waiting retries queue up behind each other).
pub struct BucketRateLimiter {
    qps: f64,
    burst: f64,
    bucket: Mutex<Bucket>,
}

struct Bucket {
    /// Tokens available at `at`; negative when reservations are waiting.
    tokens: f64,
    at: Instant,
}

impl BucketRateLimiter {
    /// # Panics
    /// When `qps` is not positive or `burst` is zero.
    pub fn new(qps: f64, burst: u32) -> Self {
        assert!(
            qps > 0.0 && burst > 0,
            "a token bucket needs qps > 0 and burst > 0"
        );
        BucketRateLimiter {
            qps,
            burst: f64::from(burst),
            bucket: Mutex::new(Bucket {
                tokens: f64::from(burst),
                at: Instant::now(),
            }),
        }
    }
}

impl<T> RateLimiter<T> for BucketRateLimiter {
    fn when(&self, _item: &T) -> Duration {
        let now = Instant::now();
        let mut b = self.bucket.lock();
        let refill = now.saturating_duration_since(b.at).as_secs_f64() * self.qps;
        b.tokens = (b.tokens + refill).min(self.burst) - 1.0;
        b.at = now;
        if b.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-b.tokens / self.qps)
        }
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> u32 {
        0
    }
}

/// Per item: `fast` for the first `max_fast_attempts` retries, `slow` after.
pub struct ItemFastSlowRateLimiter<T> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
    attempts: Mutex<HashMap<T, u32>>,
}

impl<T> ItemFastSlowRateLimiter<T> {
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        ItemFastSlowRateLimiter {
            fast,
            slow,
            max_fast_attempts,
            attempts: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Eq + Hash + Clone + Send> RateLimiter<T> for ItemFastSlowRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        let mut a = self.attempts.lock();
        let n = a.entry(item.clone()).or_insert(0);
        *n = n.saturating_add(1);
        if *n <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, item: &T) {
        self.attempts.lock().remove(item);
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.attempts.lock().get(item).copied().unwrap_or(0)
    }
}

/// The longest delay of several limiters (each one records the failure).
pub struct MaxOfRateLimiter<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
}

impl<T> MaxOfRateLimiter<T> {
    pub fn new(limiters: Vec<Box<dyn RateLimiter<T>>>) -> Self {
        MaxOfRateLimiter { limiters }
    }
}

impl<T> RateLimiter<T> for MaxOfRateLimiter<T> {
    fn when(&self, item: &T) -> Duration {
        self.limiters
            .iter()
            .map(|l| l.when(item))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    fn forget(&self, item: &T) {
        self.limiters.iter().for_each(|l| l.forget(item));
    }

    fn num_requeues(&self, item: &T) -> u32 {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// client-go's `DefaultControllerRateLimiter`: per-item exponential backoff
/// from 5 ms to 1000 s, and an overall 10 qps bucket with burst 100 — the
/// longer of the two.
pub fn default_controller_rate_limiter<T: Eq + Hash + Clone + Send + 'static>()
-> Box<dyn RateLimiter<T>> {
    controller_rate_limiter(Duration::from_secs(1000))
}

/// [`default_controller_rate_limiter`] with the per-item backoff capped at
/// `max` instead of 1000 s.
pub fn controller_rate_limiter<T: Eq + Hash + Clone + Send + 'static>(
    max: Duration,
) -> Box<dyn RateLimiter<T>> {
    Box::new(MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(5),
            max,
        )),
        Box::new(BucketRateLimiter::new(10.0, 100)),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn exponential_doubles_per_failure_and_caps() {
        let l = ItemExponentialFailureRateLimiter::new(5 * MS, Duration::from_secs(1000));
        let delays: Vec<_> = (0..5).map(|_| l.when(&"a")).collect();
        assert_eq!(delays, [5 * MS, 10 * MS, 20 * MS, 40 * MS, 80 * MS]);
        assert_eq!(l.num_requeues(&"a"), 5);
        // Other items are independent.
        assert_eq!(l.when(&"b"), 5 * MS);
        // 5 ms * 2^18 = 1310.72 s > 1000 s: capped from the 19th failure on.
        let l2 = ItemExponentialFailureRateLimiter::new(5 * MS, Duration::from_secs(1000));
        let d: Vec<_> = (0..200).map(|_| l2.when(&"x")).collect();
        assert_eq!(d[17], Duration::from_secs_f64(0.005 * 131072.0));
        assert_eq!(d[18], Duration::from_secs(1000));
        assert_eq!(d[199], Duration::from_secs(1000));
        l.forget(&"a");
        assert_eq!(l.num_requeues(&"a"), 0);
        assert_eq!(l.when(&"a"), 5 * MS);
    }

    #[test]
    fn exponential_never_overflows() {
        let l = ItemExponentialFailureRateLimiter::new(Duration::from_secs(1), Duration::MAX);
        for _ in 0..2000 {
            l.when(&1);
        }
        assert_eq!(l.when(&1), Duration::MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_allows_burst_then_qps() {
        let l = BucketRateLimiter::new(10.0, 100);
        for i in 0..100 {
            assert_eq!(
                RateLimiter::<u32>::when(&l, &i),
                Duration::ZERO,
                "token {i} of the burst"
            );
        }
        // Out of tokens: each further retry reserves the next one, 100 ms apart.
        let next: Vec<_> = (0..3).map(|i| RateLimiter::<u32>::when(&l, &i)).collect();
        assert_eq!(next, [100 * MS, 200 * MS, 300 * MS]);
        // After a second the 10 new tokens cover the 3 reservations and 7 more.
        tokio::time::advance(Duration::from_secs(1)).await;
        for i in 0..7 {
            assert_eq!(RateLimiter::<u32>::when(&l, &i), Duration::ZERO);
        }
        assert_eq!(RateLimiter::<u32>::when(&l, &0), 100 * MS);
        assert_eq!(RateLimiter::<u32>::num_requeues(&l, &0), 0);
    }

    #[test]
    fn fast_slow_switches_after_max_fast_attempts() {
        let l = ItemFastSlowRateLimiter::new(5 * MS, 10 * MS, 3);
        let d: Vec<_> = (0..5).map(|_| l.when(&"a")).collect();
        assert_eq!(d, [5 * MS, 5 * MS, 5 * MS, 10 * MS, 10 * MS]);
        assert_eq!(l.num_requeues(&"a"), 5);
        l.forget(&"a");
        assert_eq!(l.when(&"a"), 5 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn max_of_takes_the_longest_and_forgets_everywhere() {
        let l: MaxOfRateLimiter<&str> = MaxOfRateLimiter::new(vec![
            Box::new(ItemFastSlowRateLimiter::new(
                5 * MS,
                Duration::from_secs(3),
                2,
            )),
            Box::new(ItemExponentialFailureRateLimiter::new(
                MS,
                Duration::from_secs(1),
            )),
        ]);
        let d: Vec<_> = (0..4).map(|_| l.when(&"a")).collect();
        assert_eq!(
            d,
            [
                5 * MS,
                5 * MS,
                Duration::from_secs(3),
                Duration::from_secs(3)
            ]
        );
        assert_eq!(l.num_requeues(&"a"), 4);
        l.forget(&"a");
        assert_eq!(l.num_requeues(&"a"), 0);
        assert_eq!(l.when(&"a"), 5 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn default_controller_limiter_is_exponential_until_the_bucket_runs_dry() {
        let l = default_controller_rate_limiter::<String>();
        assert_eq!(l.when(&"a".into()), 5 * MS);
        assert_eq!(l.when(&"a".into()), 10 * MS);
        // Drain the bucket with other items: then the bucket's wait dominates.
        for i in 0..98 {
            l.when(&format!("k{i}"));
        }
        assert_eq!(l.when(&"fresh".into()), 100 * MS);
    }
}
