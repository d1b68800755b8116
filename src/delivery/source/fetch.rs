//! [`Sources`]: the one way delivery fetches a chart from a repository or
//! a registry — in a slot of the fetch pool, within the fetch deadline,
//! through the address policy, into the bounded cache.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use apis::helmapp::ChartSource;

use super::address::AddressPolicy;
use super::cache::ChartCache;
use super::pool::FetchPool;
use super::{Credentials, LocalChart, RepoCache, SourceError, oci, repo};

/// The bounds of fetching (flags, README "Security").
#[derive(Debug, Clone)]
pub struct SourceLimits {
    /// Deadline of one whole fetch (`--chart-fetch-timeout`).
    pub fetch_timeout: Duration,
    /// Fetches at once (`--max-concurrent-fetches`).
    pub max_concurrent_fetches: usize,
    /// Bytes the chart cache may hold (`--chart-cache-size`).
    pub cache_size: u64,
    /// Bytes of an `index.yaml` received, at most (`--max-index-size`).
    pub max_index_size: u64,
    /// Networks no chart is fetched from (`--deny-chart-source-cidrs`).
    pub policy: AddressPolicy,
}

impl Default for SourceLimits {
    fn default() -> Self {
        SourceLimits {
            fetch_timeout: Duration::from_secs(120),
            max_concurrent_fetches: 4,
            cache_size: 128 * 1024 * 1024,
            max_index_size: 64 * 1024 * 1024,
            policy: AddressPolicy::default(),
        }
    }
}

/// Chart fetching for every delivery controller (see the module docs).
#[derive(Debug)]
pub struct Sources {
    /// Resolutions remembered for their `interval`.
    pub resolved: RepoCache,
    pub cache: ChartCache,
    pub limits: SourceLimits,
    pool: FetchPool,
    /// Fetches [`Sources::start`]ed and not yet [`Sources::take`]n, by
    /// [`RepoCache::key`]: `None` while running, then the outcome. A
    /// reconcile never waits for a fetch: it starts one and returns, and
    /// the fetch's end wakes it.
    background: Mutex<HashMap<String, (Instant, Option<Fetched>)>>,
}

/// A fetch's outcome.
pub type Fetched = Result<LocalChart, SourceError>;

/// An outcome not taken within this is dropped (its app went away).
const UNCLAIMED: Duration = Duration::from_secs(600);

impl Sources {
    /// Sources caching under `work_dir`.
    pub fn new(work_dir: &std::path::Path, limits: SourceLimits) -> Self {
        Sources {
            resolved: RepoCache::default(),
            cache: ChartCache::new(work_dir, limits.cache_size),
            pool: FetchPool::new(limits.max_concurrent_fetches),
            limits,
            background: Mutex::default(),
        }
    }

    /// The outcome of the background fetch of `key`, once it ended (taken:
    /// the next call starts afresh); `Some(None)` while it runs; `None`
    /// when none was started.
    pub fn take(&self, key: &str) -> Option<Option<Fetched>> {
        let mut background = self.background.lock();
        match background.get(key) {
            Some((_, None)) => Some(None),
            Some((_, Some(_))) => background.remove(key).map(|(_, done)| done),
            None => None,
        }
    }

    /// Starts [`Sources::fetch`] of `chart` in the background under `key`
    /// (nothing if one runs already); `wake` is called when it ends.
    pub fn start(
        self: &Arc<Self>,
        key: String,
        namespace: &str,
        chart: &ChartSource,
        credentials: Credentials,
        wake: impl FnOnce() + Send + 'static,
    ) {
        {
            let mut background = self.background.lock();
            background.retain(|_, (at, done)| done.is_none() || at.elapsed() < UNCLAIMED);
            if background.contains_key(&key) {
                return;
            }
            background.insert(key.clone(), (Instant::now(), None));
        }
        let (me, namespace, chart) = (self.clone(), namespace.to_string(), chart.clone());
        tokio::spawn(async move {
            let done = me.fetch(&namespace, &chart, credentials).await;
            me.background
                .lock()
                .insert(key, (Instant::now(), Some(done)));
            wake();
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
            if wanted.oci.is_empty() {
                repo::fetch_from_repo(&wanted, &credentials, &me)
            } else {
                oci::fetch(&wanted, &credentials, &me)
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
