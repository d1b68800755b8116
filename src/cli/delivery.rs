//! Delivery's flags: how helm runs and what a HelmApp may reference.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::delivery::source::SourceLimits;
use crate::delivery::source::address::AddressPolicy;
use crate::delivery::{HelmConfig, Settings, Tenancy};

#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Delivery (--controllers delivery)")]
pub struct DeliveryArgs {
    /// The helm binary delivery runs.
    #[arg(long, default_value = "helm")]
    helm_binary: PathBuf,
    /// The program helm runs as post-renderer for HelmApps with
    /// postRenderers or commonMetadata (default: this binary, whose hidden
    /// `post-render` subcommand does it).
    #[arg(long)]
    post_renderer_binary: Option<PathBuf>,
    /// At most this many helm processes at once.
    #[arg(long, default_value_t = 4)]
    max_concurrent_helm: usize,
    /// `chart.path` must be under this directory (unset: chart.path is refused).
    #[arg(long)]
    chart_path_root: Option<PathBuf>,
    /// A writable directory for helm's homes and the chart cache.
    #[arg(long, default_value = "/tmp/hossted-operator")]
    work_dir: PathBuf,
    /// Chart fetches at once, all namespaces together (at most 2 per
    /// namespace).
    #[arg(long, default_value_t = 4)]
    max_concurrent_fetches: usize,
    /// Deadline of one whole chart fetch (index, archive, registry calls).
    #[arg(long, default_value = "2m", value_parser = crate::duration::parse)]
    chart_fetch_timeout: Duration,
    /// Bytes the chart cache (in --work-dir) may hold; the least recently
    /// used charts are evicted past it.
    #[arg(long, default_value_t = 128 * 1024 * 1024)]
    chart_cache_size: u64,
    /// Bytes Git checkouts (in --work-dir) may hold; the least recently
    /// used sources are evicted past it, and any unused for 24 hours.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    git_checkouts_size: u64,
    /// Bytes of a repository's index.yaml received, at most.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    max_index_size: u64,
    /// Networks no chart is fetched from, comma-separated (empty: none).
    #[arg(long, default_value = crate::delivery::source::address::DEFAULT_DENIED)]
    deny_chart_source_cidrs: String,
    /// Longest helm timeout honoured: a HelmApp's longer spec.timeout is
    /// clamped to it, with a Warning.
    #[arg(long, default_value = "30m", value_parser = crate::duration::parse)]
    max_helm_timeout: Duration,
    /// Remote clusters (HelmApps' spec.kubeConfig) served at once, each with
    /// its own client and informers; a HelmApp naming one more waits as
    /// ClusterLimitReached.
    #[arg(long, default_value_t = 100)]
    max_remote_clusters: usize,
    /// Of those, how many one namespace outside --privileged-namespaces may
    /// start: one tenant cannot take every place (ClusterLimitReached).
    #[arg(long, default_value_t = 10)]
    max_remote_clusters_per_namespace: usize,
    /// Where the webhook receiver listens (POST /hooks/chart-pushed,
    /// /hooks/reconcile); "0": off.
    #[arg(long, default_value = "0")]
    webhook_bind_address: String,
    /// A file holding the HMAC-SHA256 key webhook senders sign with (it
    /// may act on any namespace).
    #[arg(long)]
    webhook_secret_file: Option<PathBuf>,
    /// A directory of per-namespace webhook keys, each file named after
    /// its namespace: a request naming the namespace (X-Hossted-Namespace)
    /// and signed with its key may act on that namespace only.
    #[arg(long)]
    webhook_secret_dir: Option<PathBuf>,
    /// A PEM certificate chain: the webhook is served over TLS.
    #[arg(long)]
    webhook_tls_cert: Option<PathBuf>,
    /// The PEM private key of --webhook-tls-cert.
    #[arg(long)]
    webhook_tls_key: Option<PathBuf>,
}

impl DeliveryArgs {
    /// Delivery's settings.
    pub fn validate(
        self,
        resync: Duration,
        tenancy: Tenancy,
        shard: crate::delivery::Shard,
    ) -> Result<Settings, String> {
        let webhook = crate::delivery::WebhookConfig::from_flags(
            super::flag::address("--webhook-bind-address", &self.webhook_bind_address)?,
            self.webhook_secret_file.as_deref(),
            self.webhook_secret_dir.as_deref(),
            self.webhook_tls_cert.as_deref(),
            self.webhook_tls_key.as_deref(),
        )?;
        let policy = AddressPolicy::parse(&self.deny_chart_source_cidrs)
            .map_err(|e| format!("--deny-chart-source-cidrs: {e}"))?;
        Ok(Settings {
            shard,
            helm: HelmConfig {
                binary: self.helm_binary,
                work_dir: self.work_dir,
                kubeconfig: None,
                max_concurrent: self.max_concurrent_helm.max(1),
                // A binary that cannot say where it is leaves post-rendering
                // refused with a message naming the flag.
                post_renderer: self
                    .post_renderer_binary
                    .or_else(|| std::env::current_exe().ok()),
                // Asked of the binary when delivery starts.
                cli: Default::default(),
            },
            chart_path_root: self.chart_path_root,
            tenancy,
            // Twice the helm slots: a worker's steps around helm (finalizer,
            // status write) must not leave a slot idle — with one worker
            // per slot, 100 new HelmApps took 1.36x as long as 100 bare
            // installs 4 at a time (bench/REPORT.md "delivery"). The
            // semaphore in the runner still caps helm processes.
            workers: self.max_concurrent_helm.max(1) * 2,
            resync,
            sources: SourceLimits {
                fetch_timeout: self.chart_fetch_timeout,
                max_concurrent_fetches: self.max_concurrent_fetches.max(1),
                cache_size: self.chart_cache_size,
                git_checkouts_size: self.git_checkouts_size,
                max_index_size: self.max_index_size,
                policy,
            },
            max_helm_timeout: self.max_helm_timeout,
            max_remote_clusters: self.max_remote_clusters,
            max_remote_clusters_per_namespace: self.max_remote_clusters_per_namespace,
            webhook,
        })
    }
}
