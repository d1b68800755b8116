//! [`Sources`]: the one way delivery fetches a chart from a repository, a
//! registry or Git — in a slot of the fetch pool, within the fetch
//! deadline, through the address policy, into the bounded cache.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use apis::helmapp::{ChartSource, GitSource};

use super::cache::ChartCache;
use super::git::{self, Checkout, GitCache};
use super::jobs::Jobs;
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
    /// Git checkouts remembered for their `interval`, and the charts read
    /// out of them.
    pub git: GitCache,
    pool: FetchPool,
    /// Chart fetches [`Sources::start`]ed, by [`RepoCache::key`].
    charts: Jobs<LocalChart>,
    /// Git fetches [`Sources::start_git`]ed, by [`git::key`].
    checkouts: Jobs<Checkout>,
    /// Where the Git repositories are kept.
    work_dir: PathBuf,
}

/// A fetch's outcome.
pub type Fetched = Result<LocalChart, SourceError>;

impl Sources {
    /// Sources caching under `work_dir`.
    pub fn new(work_dir: &std::path::Path, limits: SourceLimits) -> Self {
        Sources {
            resolved: RepoCache::default(),
            verified: Default::default(),
            cache: ChartCache::new(work_dir, limits.cache_size),
            git: GitCache::default(),
            pool: FetchPool::new(limits.max_concurrent_fetches),
            limits,
            charts: Jobs::default(),
            checkouts: Jobs::default(),
            work_dir: work_dir.to_path_buf(),
        }
    }

    /// What the background fetch of `key` gives now (see [`Jobs::take`]).
    pub fn take(&self, key: &str) -> Option<Option<Fetched>> {
        self.charts.take(key)
    }

    /// What the background Git fetch of `key` gives now (see
    /// [`Jobs::take`]).
    pub fn take_git(&self, key: &str) -> Option<Option<Result<Checkout, SourceError>>> {
        self.checkouts.take(key)
    }

    /// A chart was published at `source` (a repository, a registry, or a
    /// Git URL): its remembered resolutions and ended fetches (a failure's
    /// back-off included) are dropped, so the next reconcile of an app on
    /// it resolves afresh. A fetch that runs is left to end. Returns how
    /// many resolutions were dropped.
    pub fn forget_source(&self, source: &str) -> usize {
        self.charts.forget(|key| super::from_source(key, source));
        self.checkouts.forget(|key| git::from_source(key, source));
        self.resolved.forget(source) + self.git.forget(source)
    }

    /// `wake` too when the fetch of `key` that runs now ends (see
    /// [`Jobs::wake_too`]).
    pub fn wake_too(&self, key: &str, wake: impl FnOnce() + Send + 'static) {
        self.charts.wake_too(key, wake)
    }

    /// `wake` too when the Git fetch of `key` that runs now ends.
    pub fn wake_too_git(&self, key: &str, wake: impl FnOnce() + Send + 'static) {
        self.checkouts.wake_too(key, wake)
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
        let Some(failures) = self.charts.begin(&key, wake) else {
            return;
        };
        let (me, namespace, chart) = (self.clone(), namespace.to_string(), chart.clone());
        tokio::spawn(async move {
            let fetched = me.fetch(&namespace, &chart, credentials, trust).await;
            me.charts.end(key, fetched, failures);
        });
    }

    /// Starts a fetch of Git `source` in the background under `key` (one
    /// per URL, ref and credentials, whatever number of apps ask); a
    /// checkout it makes is remembered before anyone is woken.
    pub fn start_git(
        self: &Arc<Self>,
        key: String,
        namespace: &str,
        source: &GitSource,
        credentials: Credentials,
        wake: impl FnOnce() + Send + 'static,
    ) {
        let Some(failures) = self.checkouts.begin(&key, wake) else {
            return;
        };
        let (me, namespace, source) = (self.clone(), namespace.to_string(), source.clone());
        tokio::spawn(async move {
            let fetched = me.fetch_git(&namespace, &source, credentials).await;
            if let Ok(checkout) = &fetched {
                me.git.remember(&key, checkout.clone());
            }
            me.checkouts.end(key, fetched, failures);
        });
    }

    /// Fetches Git `source` for an app of `namespace` in a slot of the
    /// pool, within the deadline.
    async fn fetch_git(
        self: &Arc<Self>,
        namespace: &str,
        source: &GitSource,
        credentials: Credentials,
    ) -> Result<Checkout, SourceError> {
        let slot = self.pool.slot(namespace).await;
        let deadline = self.limits.fetch_timeout;
        let (me, wanted) = (self.clone(), source.clone());
        let run = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            git::fetch(&wanted, &credentials, &me.limits, &me.work_dir)
        });
        let failed = |message: String| SourceError::Git {
            url: super::http::without_credentials(&source.url),
            message,
        };
        match tokio::time::timeout(deadline + Duration::from_secs(5), run).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => Err(failed(format!("the fetch stopped: {e}"))),
            Err(_) => Err(failed(format!(
                "no complete fetch within {}s (--chart-fetch-timeout)",
                deadline.as_secs()
            ))),
        }
    }

    /// The directory charts read out of Git checkouts are put in.
    pub fn git_charts_dir(&self) -> PathBuf {
        self.work_dir.join("git-charts")
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
        assert_eq!(super::super::jobs::retry_after(1), Duration::from_secs(10));
        assert_eq!(super::super::jobs::retry_after(3), Duration::from_secs(40));
        assert_eq!(
            super::super::jobs::retry_after(30),
            Duration::from_secs(300)
        );
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
