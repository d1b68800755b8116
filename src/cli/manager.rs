//! The manager's flags: which controllers run, where the operator lives,
//! its probes and metrics, leader election, shutdown.

use std::time::Duration;

use clap::{Args, ValueEnum};
use runtime::{LeaderElection, LeaseTiming, ManagerOptions};

use super::flag::{address, parse};
use crate::delivery::{Shard, ShardName};

/// A controller `--controllers` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ControllerName {
    /// The inventory of Helm releases, reported to the Hossted API.
    Inventory,
    /// HelmApps, HelmAppSets and a Hosstedproject's spec.helm (needs the delivery RBAC and CRDs).
    Delivery,
}

#[derive(Debug, Args, Clone)]
pub struct ManagerArgs {
    /// The controllers to run: inventory, delivery, or both (comma-separated).
    #[arg(long, value_enum, default_value = "inventory", value_delimiter = ',')]
    pub controllers: Vec<ControllerName>,
    /// The operator's own namespace: the ConfigMap hossted-platform-charts
    /// that the platform toggles deliver from, and the default Lease namespace.
    #[arg(long, env = "POD_NAMESPACE", default_value = "hossted-operator")]
    pub operator_namespace: String,
    /// Safety resync period, Go duration syntax (10m, 30s, 1h).
    #[arg(long, env = "RECONCILE_DURATION", default_value = "10m")]
    reconcile_duration: String,
    /// On SIGTERM/SIGINT, how long the whole shutdown may take: in-flight
    /// reconciles drain for all but a quarter of it (at most 5 s), kept for
    /// killing helm, releasing the Lease and flushing Events.
    #[arg(long, default_value = "30s")]
    shutdown_timeout: String,
    /// Where /metrics is served ("0" disables it).
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_bind_address: String,
    /// Where /healthz and /readyz are served ("0" disables them).
    #[arg(long, default_value = "0.0.0.0:8081")]
    health_probe_bind_address: String,
    /// Reconcile only the HelmApps and HelmAppSets labelled
    /// sharding.hossted.com/key=NAME, leader-elected on a Lease of its own
    /// (docs/shards.md). Without it: every one without that label, and the
    /// inventory.
    #[arg(long, value_name = "NAME")]
    pub shard: Option<String>,
    /// Run only while holding a coordination.k8s.io Lease (several replicas: one works).
    #[arg(long)]
    leader_elect: bool,
    /// The Lease's namespace (default: --operator-namespace).
    #[arg(long)]
    leader_election_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(long, default_value = "hossted-operator")]
    leader_election_id: String,
    /// How long a standby waits after the leader's last renewal.
    #[arg(long, default_value = "15s")]
    leader_elect_lease_duration: String,
    /// How long the leader keeps working without renewing (< lease duration).
    #[arg(long, default_value = "10s")]
    leader_elect_renew_deadline: String,
    /// How often candidates try and the leader renews.
    #[arg(long, default_value = "2s")]
    leader_elect_retry_period: String,
}

impl ManagerArgs {
    /// Whether `--controllers` names `c`.
    pub fn runs(&self, c: ControllerName) -> bool {
        self.controllers.contains(&c)
    }

    /// Which HelmApps and HelmAppSets this process takes.
    pub fn shard(&self) -> Result<Shard, String> {
        match &self.shard {
            None => Ok(Shard::Unsharded),
            Some(name) => ShardName::parse(name).map(Shard::Named),
        }
    }

    /// The safety resync period.
    pub fn resync(&self) -> Result<Duration, String> {
        let resync = parse("RECONCILE_DURATION", &self.reconcile_duration)?;
        if resync.is_zero() {
            return Err("RECONCILE_DURATION must be greater than zero".into());
        }
        Ok(resync)
    }

    /// The manager's options.
    pub fn validate(&self) -> Result<ManagerOptions, String> {
        let shard = self.shard()?;
        let timing = LeaseTiming {
            lease_duration: parse(
                "--leader-elect-lease-duration",
                &self.leader_elect_lease_duration,
            )?,
            renew_deadline: parse(
                "--leader-elect-renew-deadline",
                &self.leader_elect_renew_deadline,
            )?,
            retry_period: parse(
                "--leader-elect-retry-period",
                &self.leader_elect_retry_period,
            )?,
        };
        if timing.renew_deadline >= timing.lease_duration || timing.retry_period.is_zero() {
            return Err(
                "--leader-elect-renew-deadline must be shorter than --leader-elect-lease-duration, and the retry period above zero"
                    .into(),
            );
        }
        let instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "hossted-operator".into());
        let mut manager = ManagerOptions::new("hossted", "hossted-operator");
        manager.instance = instance;
        if let Shard::Named(name) = &shard {
            manager.metric_labels = vec![("shard".into(), name.to_string())];
        }
        // A reconcile's transient buffers (release payloads decoded, helm's
        // output) go back to the kernel rather than stay in glibc's arenas.
        manager.after_each_item = Some(runtime::memory::release_free_memory);
        manager.metrics_address = address("--metrics-bind-address", &self.metrics_bind_address)?;
        manager.health_address = address(
            "--health-probe-bind-address",
            &self.health_probe_bind_address,
        )?;
        manager.drain_timeout = parse("--shutdown-timeout", &self.shutdown_timeout)?;
        manager.leader_election = self.leader_elect.then(|| LeaderElection {
            namespace: self
                .leader_election_namespace
                .clone()
                .unwrap_or_else(|| self.operator_namespace.clone()),
            name: shard.lease_name(&self.leader_election_id),
            timing,
        });
        Ok(manager)
    }
}
