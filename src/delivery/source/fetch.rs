//! [`Sources`]: the one way delivery fetches a chart from a repository or
//! a registry — in a slot of the fetch pool, within the fetch deadline,
//! through the address policy, into the bounded cache.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use apis::helmapp::ChartSource;

use super::cache::ChartCache;
use super::pool::FetchPool;
use super::{
    Credentials, FetchContext, LocalChart, RepoCache, SourceError, SourceLimits, oci, repo,
};

/// Chart fetching for every delivery controller (see the module docs).
#[derive(Debug)]
pub struct Sources {
    /// Resolutions remembered for their `interval`.
    pub resolved: RepoCache,
    /// Signatures verified, by digest and trust.
    pub verified: super::verify::VerifiedCache,
    pub cache: ChartCache,
    pub limits: SourceLimits,
    pool: FetchPool,
    /// Fetches [`Sources::start`]ed, by [`RepoCache::key`], with what
    /// became of them. A reconcile never waits for a fetch: it starts one
    /// and returns, and the fetch's end wakes it.
    background: Mutex<HashMap<String, Background>>,
}

/// A fetch's outcome.
pub type Fetched = Result<LocalChart, SourceError>;

/// Who to wake when a fetch ends: the app that started it and every app
/// that asked for the same chart while it ran.
type Wake = Box<dyn FnOnce() + Send>;

/// One key's background fetch.
enum Background {
    Running {
        waiters: Vec<Wake>,
    },
    /// Ended, not yet taken.
    Done {
        at: Instant,
        fetched: Fetched,
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

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Background::Running { waiters } => write!(f, "Running({} waiting)", waiters.len()),
            Background::Done {
                at,
                fetched,
                failures,
            } => f
                .debug_struct("Done")
                .field("at", at)
                .field("ok", &fetched.is_ok())
                .field("failures", failures)
                .finish(),
            Background::Failed {
                at,
                error,
                failures,
            } => f
                .debug_struct("Failed")
                .field("at", at)
                .field("error", error)
                .field("failures", failures)
                .finish(),
        }
    }
}

/// How long a source that failed `failures` times in a row is left alone:
/// 10 s, doubling, at most 5 minutes.
fn retry_after(failures: u32) -> Duration {
    Duration::from_secs(10)
        .saturating_mul(1 << failures.saturating_sub(1).min(5))
        .min(Duration::from_secs(300))
}

/// An outcome not taken within this is dropped (its app went away).
const UNCLAIMED: Duration = Duration::from_secs(600);

impl Sources {
    /// Sources caching under `work_dir`.
    pub fn new(work_dir: &std::path::Path, limits: SourceLimits) -> Self {
        Sources {
            resolved: RepoCache::default(),
            verified: Default::default(),
            cache: ChartCache::new(work_dir, limits.cache_size),
            pool: FetchPool::new(limits.max_concurrent_fetches),
            limits,
            background: Mutex::default(),
        }
    }

    /// What the background fetch of `key` gives now: `Some(None)` while it
    /// runs; `Some(Some(outcome))` once it ended (a chart is handed over
    /// once; an error is served again until its retry time); `None` when
    /// a fetch should start.
    pub fn take(&self, key: &str) -> Option<Option<Fetched>> {
        let mut background = self.background.lock();
        let entry = background.get_mut(key)?;
        match entry {
            Background::Running { .. } => Some(None),
            Background::Failed {
                at,
                error,
                failures,
            } => (at.elapsed() < retry_after(*failures)).then(|| Some(Err(error.clone()))),
            Background::Done { .. } => {
                let Some(Background::Done {
                    fetched, failures, ..
                }) = background.remove(key)
                else {
                    return None;
                };
                if let Err(error) = &fetched {
                    background.insert(
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

    /// A chart was published at `source`: its remembered resolutions and
    /// ended fetches (a failure's back-off included) are dropped, so the
    /// next reconcile of an app on it resolves afresh. A fetch that runs
    /// is left to end. Returns how many resolutions were dropped.
    pub fn forget_source(&self, source: &str) -> usize {
        self.background.lock().retain(|key, b| {
            matches!(b, Background::Running { .. }) || !super::from_source(key, source)
        });
        self.resolved.forget(source)
    }

    /// `wake` too when the fetch of `key` that runs now ends — at once if
    /// none runs (it ended since [`Sources::take`] said it ran). An app that
    /// finds another's fetch of its chart running waits for its end, not
    /// for a resync.
    pub fn wake_too(&self, key: &str, wake: impl FnOnce() + Send + 'static) {
        let mut background = self.background.lock();
        match background.get_mut(key) {
            Some(Background::Running { waiters }) => waiters.push(Box::new(wake)),
            _ => {
                drop(background);
                wake();
            }
        }
    }

    /// Starts [`Sources::fetch`] of `chart` in the background under `key`
    /// (if one runs already, `wake` waits for its end instead); `wake` is
    /// called when it ends.
    pub fn start(
        self: &Arc<Self>,
        key: String,
        namespace: &str,
        chart: &ChartSource,
        credentials: Credentials,
        trust: Option<super::verify::Trust>,
        wake: impl FnOnce() + Send + 'static,
    ) {
        let failures = {
            let mut background = self.background.lock();
            background.retain(|_, b| match b {
                Background::Running { .. } => true,
                Background::Done { at, .. } => at.elapsed() < UNCLAIMED,
                Background::Failed { at, failures, .. } => {
                    at.elapsed() < UNCLAIMED + retry_after(*failures)
                }
            });
            let failures = match background.get_mut(&key) {
                None => 0,
                Some(Background::Failed { at, failures, .. })
                    if at.elapsed() >= retry_after(*failures) =>
                {
                    *failures
                }
                Some(Background::Running { waiters }) => {
                    waiters.push(Box::new(wake));
                    return;
                }
                Some(_) => return,
            };
            let waiters: Vec<Wake> = vec![Box::new(wake)];
            background.insert(key.clone(), Background::Running { waiters });
            failures
        };
        let (me, namespace, chart) = (self.clone(), namespace.to_string(), chart.clone());
        tokio::spawn(async move {
            let fetched = me.fetch(&namespace, &chart, credentials, trust).await;
            let done = Background::Done {
                at: Instant::now(),
                fetched,
                failures,
            };
            let ran = me.background.lock().insert(key, done);
            if let Some(Background::Running { waiters }) = ran {
                waiters.into_iter().for_each(|wake| wake());
            }
        });
    }

    /// Fetches `chart` (`repo` or `oci`) for an app of `namespace`: waits for
    /// a slot of that namespace and of the pool, and gives up at the
    /// deadline.
    pub async fn fetch(
        self: &Arc<Self>,
        namespace: &str,
        chart: &ChartSource,
        credentials: Credentials,
        trust: Option<super::verify::Trust>,
    ) -> Result<LocalChart, SourceError> {
        let slot = self.pool.slot(namespace).await;
        let deadline = self.limits.fetch_timeout;
        let late = || SourceError::Repo {
            repo: format!("{}{}", chart.repo, chart.oci),
            message: format!(
                "no chart within {}s (--chart-fetch-timeout)",
                deadline.as_secs()
            ),
        };
        let (me, wanted) = (self.clone(), chart.clone());
        // The client's own deadline ends the blocking read; the slot is
        // held until it does.
        let run = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let context = FetchContext {
                resolved: &me.resolved,
                verified: &me.verified,
                cache: &me.cache,
                limits: &me.limits,
            };
            if wanted.oci.is_empty() {
                repo::fetch_from_repo(&wanted, &credentials, trust.as_ref(), &context)
            } else {
                oci::fetch(&wanted, &credentials, trust.as_ref(), &context)
            }
        });
        match tokio::time::timeout(deadline + Duration::from_secs(5), run).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => Err(SourceError::Repo {
                repo: format!("{}{}", chart.repo, chart.oci),
                message: format!("the fetch stopped: {e}"),
            }),
            Err(_) => Err(late()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envtest::{Answer, HostileServer};

    #[tokio::test]
    async fn a_failed_fetch_is_served_until_its_retry_time_without_asking_again() {
        let server = HostileServer::start().await.unwrap();
        server.answer("/index.yaml", Answer::Bytes(503, Vec::new()));
        let dir = std::env::temp_dir().join(format!("sources-{}", std::process::id()));
        let sources = Arc::new(Sources::new(&dir, SourceLimits::default()));
        let chart = ChartSource {
            repo: server.url().to_string(),
            name: "tiny".into(),
            ..Default::default()
        };
        let key = RepoCache::key(&chart, "");
        let (tx, rx) = tokio::sync::oneshot::channel();
        assert!(sources.take(&key).is_none(), "nothing started yet");
        sources.start(
            key.clone(),
            "ns",
            &chart,
            Credentials::default(),
            None,
            move || {
                let _ = tx.send(());
            },
        );
        assert!(matches!(sources.take(&key), Some(None)), "running");
        rx.await.unwrap();
        for _ in 0..3 {
            let got = sources.take(&key);
            assert!(matches!(got, Some(Some(Err(_)))), "{got:?}");
            // A caller would not start again; even if it did, nothing runs.
            sources.start(
                key.clone(),
                "ns",
                &chart,
                Credentials::default(),
                None,
                || {},
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(server.seen().len(), 1, "the source was asked once");
        assert_eq!(retry_after(1), Duration::from_secs(10));
        assert_eq!(retry_after(3), Duration::from_secs(40));
        assert_eq!(retry_after(30), Duration::from_secs(300));
    }

    #[tokio::test]
    async fn every_app_waiting_on_a_running_fetch_is_woken_when_it_ends() {
        let server = HostileServer::start().await.unwrap();
        // Slow enough that the other apps ask while it runs.
        let body = b"apiVersion: v1\nentries: {}\n".to_vec();
        let every = Duration::from_millis(50);
        server.answer(
            "/index.yaml",
            Answer::Drip {
                body,
                chunk: 4,
                every,
            },
        );
        let dir = std::env::temp_dir().join(format!("sources-w-{}", std::process::id()));
        let sources = Arc::new(Sources::new(&dir, SourceLimits::default()));
        let chart = ChartSource {
            repo: server.url().to_string(),
            name: "tiny".into(),
            ..Default::default()
        };
        let key = RepoCache::key(&chart, "");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let waker = |app: &'static str| {
            let tx = tx.clone();
            move || {
                let _ = tx.send(app);
            }
        };
        sources.start(
            key.clone(),
            "ns",
            &chart,
            Credentials::default(),
            None,
            waker("a"),
        );
        assert!(matches!(sources.take(&key), Some(None)), "running");
        sources.wake_too(&key, waker("b"));
        sources.start(
            key.clone(),
            "ns",
            &chart,
            Credentials::default(),
            None,
            waker("c"),
        );
        let mut woken = Vec::new();
        for _ in 0..3 {
            woken.push(rx.recv().await.unwrap());
        }
        woken.sort();
        assert_eq!(woken, ["a", "b", "c"]);
        assert_eq!(server.seen().len(), 1, "one fetch for the three");
        // Once it has ended, asking to be woken wakes at once.
        let _ = sources.take(&key);
        sources.wake_too(&key, waker("d"));
        assert_eq!(rx.recv().await, Some("d"));
    }
}
