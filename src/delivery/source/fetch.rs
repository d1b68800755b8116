//! [`Sources`]: the one way delivery fetches a chart from a repository or
//! a registry — in a slot of the fetch pool, within the fetch deadline,
//! through the address policy, into the bounded cache.

use std::sync::Arc;
use std::time::Duration;

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
}

impl Sources {
    /// Sources caching under `work_dir`.
    pub fn new(work_dir: &std::path::Path, limits: SourceLimits) -> Self {
        Sources {
            resolved: RepoCache::default(),
            cache: ChartCache::new(work_dir, limits.cache_size),
            pool: FetchPool::new(limits.max_concurrent_fetches),
            limits,
        }
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
