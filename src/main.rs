//! `hossted-operator`: keeps an inventory of every Helm release in a
//! Kubernetes cluster and reports it to the Hossted API.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use hossted_operator::controller::{self, Controller, Settings};
use std::sync::atomic::Ordering;

use hossted_operator::duration;
use hossted_operator::leader::{LeaderElector, LeaseTiming};
use hossted_operator::metrics::{self, Metrics};
use hossted_operator::poster::{ApiConfig, Poster};

/// Keeps an inventory of every Helm release in a cluster — its pods,
/// services, volumes and ingresses — and reports it to the Hossted API.
#[derive(Debug, Parser)]
#[command(name = "hossted-operator", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the operator (the default).
    Run(Box<RunArgs>),
    /// Print the apps payloads for the current kubeconfig context as a JSON array, and exit.
    Collect {
        /// Owner e-mail copied into every payload.
        #[arg(long, env = "EMAIL_ID", default_value = "")]
        email_id: String,
        /// Also read Helm releases stored by the configmap driver.
        #[arg(long)]
        configmap_driver: bool,
    },
    /// Print the Hosstedproject CustomResourceDefinition as YAML.
    Crd,
}

#[derive(Debug, Args, Clone)]
struct RunArgs {
    /// Base URL of the Hossted API, e.g. https://api.example.com/v1 (required unless --dry-run).
    #[arg(long, env = "HOSSTED_API_URL")]
    api_url: Option<String>,
    /// Bearer token for the Hossted API (required unless --dry-run). Never logged.
    #[arg(long, env = "HOSSTED_AUTH_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    /// Owner e-mail copied into every payload (required).
    #[arg(long, env = "EMAIL_ID")]
    email_id: Option<String>,
    /// Organisation id for cluster registration.
    #[arg(long, env = "HOSSTED_ORG_ID", default_value = "")]
    org_id: String,
    /// Human name of the cluster for registration.
    #[arg(long, env = "CONTEXT_NAME", default_value = "")]
    context_name: String,
    /// Safety resync period, Go duration syntax (10m, 30s, 1h).
    #[arg(long, env = "RECONCILE_DURATION", default_value = "10m")]
    reconcile_duration: String,
    /// Print each request as a JSON line on stdout instead of sending it.
    #[arg(long)]
    dry_run: bool,
    /// Concurrent reconciles.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Changes within this window after the first become one reconcile.
    #[arg(long, default_value = "500ms")]
    coalesce_window: String,
    /// Also watch Helm releases stored by the configmap driver.
    #[arg(long)]
    configmap_driver: bool,
    /// On SIGTERM/SIGINT, how long in-flight reconciles may take to finish.
    #[arg(long, default_value = "30s")]
    shutdown_timeout: String,
    /// Where /metrics is served ("0" disables it).
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_bind_address: String,
    /// Run only while holding a coordination.k8s.io Lease (several replicas: one reports).
    #[arg(long)]
    leader_elect: bool,
    /// Namespace of the leader Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "hossted-operator")]
    leader_election_namespace: String,
    /// Name of the leader Lease.
    #[arg(long, default_value = "hossted-operator")]
    leader_election_id: String,
    /// Where /healthz and /readyz are served ("0" disables them).
    #[arg(long, default_value = "0.0.0.0:8081")]
    health_probe_bind_address: String,
}

/// A usage problem: one line naming it, exit status 2.
fn usage(msg: &str) -> ExitCode {
    eprintln!("hossted-operator: {msg}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    hossted_operator::memory::limit_arenas();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hossted-operator: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Some(Cmd::Crd) => {
            print!("{}", apis::crd_yaml());
            ExitCode::SUCCESS
        }
        Some(Cmd::Collect {
            email_id,
            configmap_driver,
        }) => runtime.block_on(collect(email_id, configmap_driver)),
        Some(Cmd::Run(args)) => runtime.block_on(run(*args)),
        None => runtime.block_on(run(cli.run)),
    }
}

async fn collect(email_id: String, configmap_driver: bool) -> ExitCode {
    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "hossted-operator: cannot reach the cluster of the current kubeconfig context: {e}"
            );
            return ExitCode::FAILURE;
        }
    };
    match controller::collect_once(
        client,
        &email_id,
        configmap_driver,
        Duration::from_secs(120),
    )
    .await
    {
        Ok(apps) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&apps).unwrap_or_else(|_| "[]".into())
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hossted-operator: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: RunArgs) -> ExitCode {
    let Some(email_id) = args.email_id.filter(|e| !e.is_empty()) else {
        return usage(
            "missing EMAIL_ID (or --email-id): the owner e-mail copied into every payload",
        );
    };
    let (base_url, token) = match (
        args.api_url.filter(|u| !u.is_empty()),
        args.auth_token.filter(|t| !t.is_empty()),
    ) {
        (Some(u), Some(t)) => (u, t),
        _ if args.dry_run => (String::new(), String::new()),
        (None, _) => {
            return usage(
                "missing HOSSTED_API_URL (or --api-url); use --dry-run to print requests instead",
            );
        }
        (_, None) => {
            return usage(
                "missing HOSSTED_AUTH_TOKEN (or --auth-token); use --dry-run to print requests instead",
            );
        }
    };
    let parse =
        |name: &str, value: &str| duration::parse(value).map_err(|e| format!("{name}: {e}"));
    let (resync, coalesce, shutdown_timeout) = match (
        parse("RECONCILE_DURATION", &args.reconcile_duration),
        parse("--coalesce-window", &args.coalesce_window),
        parse("--shutdown-timeout", &args.shutdown_timeout),
    ) {
        (Ok(a), Ok(b), Ok(c)) if !a.is_zero() => (a, b, c),
        (Ok(_), Ok(_), Ok(_)) => return usage("RECONCILE_DURATION must be greater than zero"),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return usage(&e),
    };

    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "hossted-operator: cannot build a Kubernetes client (in-cluster or kubeconfig): {e}"
            );
            return ExitCode::FAILURE;
        }
    };
    let instance = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "hossted-operator".into());
    let broadcaster = record::EventBroadcaster::new(client.clone());
    let recorder = broadcaster.recorder("hossted-operator", &instance);
    let poster = Poster::new(ApiConfig {
        base_url,
        token,
        dry_run: args.dry_run,
    });
    let settings = Settings {
        email_id,
        org_id: args.org_id.clone(),
        context_name: args.context_name.clone(),
        resync,
        coalesce,
        configmap_driver: args.configmap_driver,
        sync_timeout: Duration::from_secs(120),
    };
    log::info!(
        "hossted-operator {} starting ({}, {} workers)",
        env!("CARGO_PKG_VERSION"),
        if args.dry_run {
            "dry run: requests are printed, not sent"
        } else {
            "reporting to the Hossted API"
        },
        args.workers
    );
    let metrics = Metrics::new();
    metrics
        .leader
        .store(true, std::sync::atomic::Ordering::Relaxed);
    for (what, address) in [
        ("metrics", &args.metrics_bind_address),
        ("health probes", &args.health_probe_bind_address),
    ] {
        if address == "0" {
            continue;
        }
        match tokio::net::TcpListener::bind(address.as_str()).await {
            Ok(listener) => {
                log::info!("serving {what} on {address}");
                tokio::spawn(metrics::serve(listener, metrics.clone()));
            }
            Err(e) => return usage(&format!("cannot serve {what} on {address}: {e}")),
        }
    }
    let controller = Controller::new(client.clone(), recorder, poster, settings, metrics.clone());
    let outcome = if args.leader_elect {
        let lease = (
            args.leader_election_namespace.as_str(),
            args.leader_election_id.as_str(),
        );
        run_as_leader(
            controller,
            client,
            lease,
            args.workers,
            &instance,
            &metrics,
            shutdown_timeout,
        )
        .await
    } else {
        metrics.leader.store(true, Ordering::Relaxed);
        controller
            .run(args.workers, shutdown_signal(), shutdown_timeout)
            .await
    };
    broadcaster.shutdown_within(Duration::from_secs(5)).await;
    match outcome {
        Ok(()) => {
            log::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hossted-operator: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Warms the caches on standby, reports only while holding the Lease.
/// Losing the Lease stops the work at once: the process exits with status 1
/// (client-go's convention; the kubelet restarts it as a candidate).
async fn run_as_leader(
    controller: std::sync::Arc<Controller>,
    client: kube::Client,
    (lease_namespace, lease_name): (&str, &str),
    workers: usize,
    instance: &str,
    metrics: &Metrics,
    drain_timeout: Duration,
) -> Result<(), String> {
    let identity = format!("{instance}_{}", uuid::Uuid::new_v4().simple());
    let mut elector = LeaderElector::new(
        client,
        lease_namespace,
        lease_name,
        &identity,
        LeaseTiming::default(),
    );
    controller.start().await?;
    metrics.standby_ready.store(true, Ordering::Relaxed);
    log::info!("standing by for lease {lease_namespace}/{lease_name} as {identity}");
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    tokio::select! {
        _ = elector.acquire() => {}
        _ = &mut shutdown => return Ok(()),
    }
    metrics.leader.store(true, Ordering::Relaxed);
    let workers = controller.run_workers(workers, &mut shutdown, drain_timeout);
    tokio::select! {
        _ = workers => {
            elector.release().await;
            Ok(())
        }
        lost = elector.hold() => {
            metrics.leader.store(false, Ordering::Relaxed);
            log::error!("{lost}; stopping all work now");
            std::process::exit(1);
        }
    }
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                log::warn!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
