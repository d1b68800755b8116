//! Objects of kinds no informer watches are read one at a time, spread
//! over the HelmApp's `interval`: per HelmApp, which one is next and when.

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
    ) -> (Option<usize>, Option<Duration>) {
        if unwatched.is_empty() {
            self.forget(uid);
            return (None, None);
        }
        let step = interval / unwatched.len() as u32;
        let now = Instant::now();
        let mut polls = self.0.lock();
        let (cursor, next) = polls.entry(uid.to_string()).or_insert((0, now));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_object_per_step_in_turn() {
        let polls = Polls::default();
        let interval = Duration::from_secs(60);
        let (first, after) = polls.due("u", &[3, 5], interval);
        assert_eq!((first, after), (Some(3), Some(Duration::from_secs(30))));
        let (none, wait) = polls.due("u", &[3, 5], interval);
        assert_eq!(none, None);
        assert!(wait.is_some_and(|w| w <= Duration::from_secs(30)));
        polls.0.lock().get_mut("u").expect("kept").1 = Instant::now();
        assert_eq!(polls.due("u", &[3, 5], interval).0, Some(5));
        assert_eq!(polls.due("u", &[], interval), (None, None));
    }
}
