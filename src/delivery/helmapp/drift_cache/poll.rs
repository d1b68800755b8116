//! Objects of kinds no informer watches are read one at a time, spread
//! over the HelmApp's `interval`: per HelmApp, which one is next and when.
//!
//! The schedule lives in memory. A new revision (a helm run) starts it
//! again at once: its objects' digests are recorded on first sight, and
//! the sooner the better. Otherwise a HelmApp without a schedule (after a
//! restart, on a new leader) gets its first read at a point within one
//! step chosen by its key, not at once: a restart with 1,000 settled
//! HelmApps would otherwise read 1,000 manifests and 1,000 objects before
//! the last app is verified, and the cadence "each object once per
//! `interval`" holds either way.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Per HelmApp UID: the next position among its unwatched objects, and
/// when it is due.
#[derive(Default)]
pub struct Polls(Mutex<HashMap<String, (usize, Instant)>>);

impl Polls {
    /// Which of `unwatched` (inventory positions) to read now, if one is
    /// due, and how long until the next one is.
    pub fn due(
        &self,
        uid: &str,
        unwatched: &[usize],
        interval: Duration,
        start: Start,
    ) -> (Option<usize>, Option<Duration>) {
        if unwatched.is_empty() {
            self.forget(uid);
            return (None, None);
        }
        // (An `interval` of centuries still looks once a day.)
        let step = (interval / unwatched.len() as u32).min(MAX_STEP);
        let now = Instant::now();
        let mut polls = self.0.lock();
        let schedule = polls.entry(uid.to_string());
        let (cursor, next) = match start {
            Start::Now => schedule.insert_entry((0, now)).into_mut(),
            Start::Resume => schedule.or_insert_with(|| (0, now + spread(uid, step))),
        };
        if now < *next {
            return (None, Some(*next - now));
        }
        let position = unwatched[*cursor % unwatched.len()];
        *cursor = (*cursor + 1) % unwatched.len();
        *next = now + step;
        (Some(position), Some(step))
    }

    pub fn forget(&self, uid: &str) {
        self.0.lock().remove(uid);
    }
}

/// How a schedule starts (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The release has a new revision: from its first object, now.
    Now,
    /// As it was; a HelmApp without a schedule starts spread.
    Resume,
}

/// A point within `step` chosen by `key` (FNV-1a): the same key lands on
/// the same point, different keys spread evenly.
/// The longest wait between two reads of one HelmApp's unwatched objects.
const MAX_STEP: Duration = Duration::from_secs(24 * 3600);

fn spread(key: &str, step: Duration) -> Duration {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    step.mul_f64((hash % 1024) as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_object_per_step_in_turn() {
        let polls = Polls::default();
        let interval = Duration::from_secs(60);
        let (first, after) = polls.due("u", &[3, 5], interval, Start::Now);
        assert_eq!((first, after), (Some(3), Some(Duration::from_secs(30))));
        let (none, wait) = polls.due("u", &[3, 5], interval, Start::Resume);
        assert_eq!(none, None);
        assert!(wait.is_some_and(|w| w <= Duration::from_secs(30)));
        polls.0.lock().get_mut("u").expect("kept").1 = Instant::now();
        assert_eq!(polls.due("u", &[3, 5], interval, Start::Resume).0, Some(5));
        // A new revision: from the first again, at once.
        assert_eq!(polls.due("u", &[3, 5], interval, Start::Now).0, Some(3));
        assert_eq!(polls.due("u", &[], interval, Start::Resume), (None, None));
    }

    #[test]
    fn after_a_restart_first_reads_are_spread_over_a_step_not_all_at_once() {
        let polls = Polls::default();
        let step = Duration::from_secs(30);
        let mut read_now = 0;
        let mut waits = Vec::new();
        for i in 0..1000 {
            let key = format!("apps-{}/app-{i}", i % 50);
            match polls.due(&key, &[3, 5], step * 2, Start::Resume) {
                (Some(_), _) => read_now += 1,
                (None, Some(wait)) => waits.push(wait),
                (None, None) => panic!("two unwatched objects have a schedule"),
            }
        }
        // Only keys whose point falls at the very start read at once.
        assert!(read_now < 10, "{read_now} of 1,000 read at once");
        assert!(waits.iter().all(|w| *w <= step));
        let late_half = waits.iter().filter(|w| **w > step / 2).count();
        assert!(
            (350..=650).contains(&late_half),
            "{late_half} of {} wait past half a step: not spread",
            waits.len()
        );
        // After a helm run: at once.
        assert_eq!(polls.due("new/app", &[0], step, Start::Now).0, Some(0));
    }
}
