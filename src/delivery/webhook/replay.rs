//! Signed requests seen within the signature's window: a request replayed
//! — the same `(timestamp, signature)` again, captured on the way or from a
//! log — is refused (401) as an unsigned one is. Only requests whose
//! signature verified are remembered, each until its timestamp leaves the
//! window; the per-address rate limit bounds how fast they come, and
//! [`REMEMBERED`] how many are kept: a full table refuses new requests
//! (429) rather than forget one that could then be replayed.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Signed requests remembered at most (about 2 minutes of the rate limit's
/// steady pace from 50 senders).
pub const REMEMBERED: usize = 65_536;

/// What happened to a signed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// First time: remembered now.
    New,
    /// The same timestamp and signature came before, within the window.
    Replayed,
    /// Too many remembered to take another.
    Full,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Replays {
    /// `<timestamp>.<signature>` → the timestamp (Unix seconds).
    seen: Mutex<HashMap<String, i64>>,
}

impl Replays {
    /// Records the request signed `signature` at `timestamp`, at `now`
    /// (Unix seconds), forgetting what left the `window`.
    pub fn see(&self, timestamp: i64, signature: &str, now: i64, window: i64) -> Seen {
        let mut seen = self.seen.lock();
        if seen.len() >= REMEMBERED {
            seen.retain(|_, at| (now - *at).abs() <= window);
        }
        let key = format!("{timestamp}.{}", signature.trim());
        if seen.contains_key(&key) {
            return Seen::Replayed;
        }
        if seen.len() >= REMEMBERED {
            return Seen::Full;
        }
        seen.insert(key, timestamp);
        Seen::New
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_taken_once_within_the_window_and_forgotten_after() {
        let r = Replays::default();
        assert_eq!(r.see(1000, "sha256=ab", 1000, 300), Seen::New);
        assert_eq!(r.see(1000, "sha256=ab", 1100, 300), Seen::Replayed);
        assert_eq!(r.see(1001, "sha256=ab", 1100, 300), Seen::New);
        assert_eq!(r.see(1000, "sha256=cd", 1100, 300), Seen::New);
    }

    #[test]
    fn a_full_table_refuses_rather_than_forget_what_could_be_replayed() {
        let r = Replays::default();
        for i in 0..REMEMBERED as i64 {
            assert_eq!(r.see(1000, &format!("s{i}"), 1000, 300), Seen::New);
        }
        assert_eq!(r.see(1000, "another", 1000, 300), Seen::Full);
        assert_eq!(r.see(1000, "s0", 1000, 300), Seen::Replayed);
        // Once the window has passed, room again.
        assert_eq!(r.see(1400, "another", 1400, 300), Seen::New);
    }
}
