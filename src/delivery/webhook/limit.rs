//! The per-source rate limit of the webhook: a token bucket per client
//! address — [`BURST`] requests at once, then [`PER_SECOND`] — checked
//! before the body is read or the signature computed, so a flood costs
//! little. Buckets of addresses not seen for a minute are dropped, and at
//! most [`ADDRESSES`] are kept (a full table refuses new addresses rather
//! than grow).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Requests one address may send at once.
pub const BURST: f64 = 20.0;
/// Requests per second after the burst.
pub const PER_SECOND: f64 = 10.0;
/// Addresses tracked at most.
const ADDRESSES: usize = 4096;
/// A bucket idle this long is dropped.
const IDLE: Duration = Duration::from_secs(60);

/// See the module docs.
#[derive(Debug, Default)]
pub struct RateLimit {
    /// Tokens left and when they were counted, per address.
    buckets: Mutex<HashMap<IpAddr, (f64, Instant)>>,
}

impl RateLimit {
    /// Whether `from` may send a request at `now` (and takes its token).
    pub fn allow(&self, from: IpAddr, now: Instant) -> bool {
        let mut buckets = self.buckets.lock();
        if buckets.len() >= ADDRESSES {
            buckets.retain(|_, (_, at)| now.duration_since(*at) < IDLE);
        }
        if buckets.len() >= ADDRESSES && !buckets.contains_key(&from) {
            return false;
        }
        let (tokens, at) = buckets.entry(from).or_insert((BURST, now));
        let refill = now.duration_since(*at).as_secs_f64() * PER_SECOND;
        *tokens = (*tokens + refill).min(BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_the_rate_and_each_address_has_its_own() {
        let limit = RateLimit::default();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        let passed = (0..50).filter(|_| limit.allow(a, t0)).count();
        assert_eq!(passed, BURST as usize);
        assert!(limit.allow(b, t0), "another address has its own bucket");
        assert!(!limit.allow(a, t0 + Duration::from_millis(50)));
        let later = t0 + Duration::from_millis(1000);
        let passed = (0..50).filter(|_| limit.allow(a, later)).count();
        assert_eq!(passed, PER_SECOND as usize, "one second refills the rate");
    }
}
