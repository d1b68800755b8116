//! Background fetches by key, with what became of them: a reconcile never
//! waits for a fetch — it starts one and returns, and the fetch's end
//! wakes it and every app that asked for the same key meanwhile. A fetch
//! that failed is served as failed, and not started again, until its
//! retry time.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::SourceError;

/// Who to wake when a fetch ends.
pub type Wake = Box<dyn FnOnce() + Send>;

/// The fetches of one kind of source (charts, Git checkouts).
pub struct Jobs<T> {
    /// Invariant: at most one `Running` per key; a `Done` is taken once.
    map: Mutex<HashMap<String, Background<T>>>,
}

impl<T> Default for Jobs<T> {
    fn default() -> Self {
        Jobs {
            map: Mutex::default(),
        }
    }
}

impl<T> std::fmt::Debug for Jobs<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Jobs({} keys)", self.map.lock().len())
    }
}

/// One key's background fetch.
enum Background<T> {
    Running {
        waiters: Vec<Wake>,
    },
    /// Ended, not yet taken.
    Done {
        at: Instant,
        fetched: Result<T, SourceError>,
        failures: u32,
    },
    /// Failed `failures` times in a row, the last at `at`: its error is
    /// served, and no fetch starts, until [`retry_after`] has passed — a
    /// source that is down is not asked again at every reconcile.
    Failed {
        at: Instant,
        error: SourceError,
        failures: u32,
    },
}

/// How long a source that failed `failures` times in a row is left alone:
/// 10 s, doubling, at most 5 minutes.
pub fn retry_after(failures: u32) -> Duration {
    Duration::from_secs(10)
        .saturating_mul(1 << failures.saturating_sub(1).min(5))
        .min(Duration::from_secs(300))
}

/// An outcome not taken within this is dropped (its app went away).
const UNCLAIMED: Duration = Duration::from_secs(600);

impl<T> Jobs<T> {
    /// What the fetch of `key` gives now: `Some(None)` while it runs;
    /// `Some(Some(outcome))` once it ended (a success is handed over once;
    /// an error is served again until its retry time); `None` when a
    /// fetch should start.
    pub fn take(&self, key: &str) -> Option<Option<Result<T, SourceError>>> {
        let mut map = self.map.lock();
        match map.get(key)? {
            Background::Running { .. } => Some(None),
            Background::Failed {
                at,
                error,
                failures,
            } => (at.elapsed() < retry_after(*failures)).then(|| Some(Err(error.clone()))),
            Background::Done { .. } => {
                let Some(Background::Done {
                    fetched, failures, ..
                }) = map.remove(key)
                else {
                    return None;
                };
                if let Err(error) = &fetched {
                    map.insert(
                        key.to_string(),
                        Background::Failed {
                            at: Instant::now(),
                            error: error.clone(),
                            failures: failures + 1,
                        },
                    );
                }
                Some(Some(fetched))
            }
        }
    }

    /// `wake` too when the fetch of `key` that runs now ends — at once if
    /// none runs (it ended since [`Jobs::take`] said it ran).
    pub fn wake_too(&self, key: &str, wake: impl FnOnce() + Send + 'static) {
        let mut map = self.map.lock();
        match map.get_mut(key) {
            Some(Background::Running { waiters }) => waiters.push(Box::new(wake)),
            _ => {
                drop(map);
                wake();
            }
        }
    }

    /// Marks a fetch of `key` as started, `wake` to be called at its end:
    /// `Some(failures so far)` when the caller is to run it; `None` when
    /// one runs already (`wake` waits for it) or a failure is still
    /// served.
    pub fn begin(&self, key: &str, wake: impl FnOnce() + Send + 'static) -> Option<u32> {
        let mut map = self.map.lock();
        map.retain(|_, b| match b {
            Background::Running { .. } => true,
            Background::Done { at, .. } => at.elapsed() < UNCLAIMED,
            Background::Failed { at, failures, .. } => {
                at.elapsed() < UNCLAIMED + retry_after(*failures)
            }
        });
        let failures = match map.get_mut(key) {
            None => 0,
            Some(Background::Failed { at, failures, .. })
                if at.elapsed() >= retry_after(*failures) =>
            {
                *failures
            }
            Some(Background::Running { waiters }) => {
                waiters.push(Box::new(wake));
                return None;
            }
            Some(_) => return None,
        };
        let waiters: Vec<Wake> = vec![Box::new(wake)];
        map.insert(key.to_string(), Background::Running { waiters });
        Some(failures)
    }

    /// The fetch of `key` [`Jobs::begin`] started ended with `fetched`:
    /// kept for [`Jobs::take`], and everyone waiting is woken.
    pub fn end(&self, key: String, fetched: Result<T, SourceError>, failures: u32) {
        let done = Background::Done {
            at: Instant::now(),
            fetched,
            failures,
        };
        let ran = self.map.lock().insert(key, done);
        if let Some(Background::Running { waiters }) = ran {
            waiters.into_iter().for_each(|wake| wake());
        }
    }

    /// Drops every ended fetch whose key `gone` says (a running one is
    /// left to end).
    pub fn forget(&self, gone: impl Fn(&str) -> bool) {
        self.map
            .lock()
            .retain(|key, b| matches!(b, Background::Running { .. }) || !gone(key));
    }
}
