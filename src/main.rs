//! `hossted-operator`: flags and environment → the manager → its
//! controllers → run.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use hossted_operator::cli::{Cli, Cmd, RunArgs};
use hossted_operator::delivery;
use hossted_operator::inventory::{self, poster::Poster};
use runtime::{Manager, ManagerError};

/// A usage problem: one line naming it, exit status 2.
fn usage(msg: &str) -> ExitCode {
    eprintln!("hossted-operator: {msg}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    // Run as `kubectl-hossted` (linked or copied so): the kubectl plugin.
    let as_plugin = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .is_some_and(|n| n == hossted_operator::kubectl::PLUGIN_NAME);
    if as_plugin {
        return hossted_operator::kubectl::main(std::env::args_os());
    }
    runtime::memory::limit_arenas();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let cli = Cli::parse();
    if let Some(Cmd::Ui(args)) = &cli.command {
        return hossted_operator::ui::main(args);
    }
    if let Some(Cmd::PostRender { config }) = &cli.command {
        // Run by helm inside one of its runs: no runtime, no client.
        return delivery::helm::post_render::run_subcommand(config);
    }
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
        Some(Cmd::Crd { name, chart }) => print_crds(name.as_deref(), chart),
        Some(Cmd::Convert { files }) => hossted_operator::convert::main(&files),
        Some(Cmd::Docs { what: _, out }) => write_reference(&out),
        Some(Cmd::Collect {
            email_id,
            org_id,
            configmap_driver,
            report_configmap_data,
        }) => runtime.block_on(collect(inventory::Settings {
            email_id,
            org_id,
            configmap_driver,
            report_configmap_data,
            ..Default::default()
        })),
        Some(Cmd::Run(args)) => runtime.block_on(run(*args)),
        // Done above, before any runtime was made.
        Some(Cmd::PostRender { .. } | Cmd::Ui(_)) => ExitCode::SUCCESS,
        None => runtime.block_on(run(cli.run)),
    }
}

/// `hossted-operator crd [NAME] [--chart]`: the CRDs as YAML (or chart
/// templates).
fn print_crds(name: Option<&str>, chart: bool) -> ExitCode {
    let crds: Vec<_> = apis::crds()
        .into_iter()
        .filter(|c| name.is_none_or(|n| c.metadata.name.as_deref() == Some(n)))
        .collect();
    if crds.is_empty() {
        eprintln!("hossted-operator: no CRD named {name:?}");
        return ExitCode::from(2);
    }
    let render = if chart {
        apis::crd_chart_template_of
    } else {
        apis::crd_yaml_of
    };
    let docs: Vec<String> = crds.iter().map(render).collect();
    print!("{}", docs.join("---\n"));
    ExitCode::SUCCESS
}

/// `hossted-operator docs reference OUT`: the API reference of every CRD
/// and the Flux field map, one file each.
fn write_reference(out: &std::path::Path) -> ExitCode {
    if let Err(e) = std::fs::create_dir_all(out) {
        eprintln!("hossted-operator: cannot create {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    let mut files: Vec<(std::path::PathBuf, String)> = apis::crds()
        .iter()
        .map(|crd| {
            (
                out.join(apis::reference::file_name(crd)),
                apis::reference::markdown(crd),
            )
        })
        .collect();
    files.push((
        out.join("from-flux.md"),
        hossted_operator::convert::fields::markdown(),
    ));
    for (path, text) in files {
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("hossted-operator: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}

async fn collect(settings: inventory::Settings) -> ExitCode {
    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "hossted-operator: cannot reach the cluster of the current kubeconfig context: {e}"
            );
            return ExitCode::FAILURE;
        }
    };
    let timeout = Duration::from_secs(120);
    match inventory::collect_once(client, &settings, timeout).await {
        Ok(apps) => match serde_json::to_string_pretty(&apps) {
            Ok(json) => {
                println!("{json}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("hossted-operator: cannot serialize the payloads: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("hossted-operator: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: RunArgs) -> ExitCode {
    let config = match args.validate() {
        Ok(c) => c,
        Err(e) => return usage(&e),
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
    let mut manager = Manager::new(client, config.manager);
    if let Some((settings, api)) = config.inventory {
        log::info!(
            "hossted-operator {}: inventory ({}, {} workers)",
            env!("CARGO_PKG_VERSION"),
            if api.dry_run {
                "dry run: requests are printed, not sent"
            } else {
                "reporting to the Hossted API"
            },
            settings.workers
        );
        let poster = match Poster::new(api) {
            Ok(p) => p,
            Err(e) => return usage(&e),
        };
        manager.add(inventory::controller(&manager, settings, poster));
    }
    let (helm, _webhook) = match config.delivery {
        Some(settings) => match add_delivery(&mut manager, settings).await {
            Ok((helm, webhook)) => (Some(helm), webhook),
            Err(e) => return usage(&e),
        },
        None => {
            delivery::add_disabled_to(&mut manager);
            (None, None)
        }
    };
    let result = manager.run(runtime::shutdown_signal()).await;
    // Whatever helm still runs (past the drain, or the lease lost) must not
    // outlive us: another replica may take over its release.
    if let Some(helm) = helm {
        helm.kill_all();
    }
    match result {
        Ok(()) => {
            log::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e @ ManagerError::Bind { .. }) => usage(&e.to_string()),
        Err(e) => {
            eprintln!("hossted-operator: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Adds the delivery controllers and starts the webhook receiver when
/// asked for (`Err`: it cannot listen).
async fn add_delivery(
    manager: &mut Manager,
    settings: delivery::Settings,
) -> Result<
    (
        std::sync::Arc<delivery::Helm>,
        Option<delivery::webhook::WebhookServer>,
    ),
    String,
> {
    log::info!(
        "hossted-operator {}: delivery (at most {} helm processes, helm {})",
        env!("CARGO_PKG_VERSION"),
        settings.helm.max_concurrent,
        settings.helm.binary.display()
    );
    if let Err(e) = std::fs::create_dir_all(&settings.helm.work_dir) {
        log::warn!(
            "cannot create --work-dir {}: {e}; helm runs will fail",
            settings.helm.work_dir.display()
        );
    }
    let webhook = settings.webhook.clone();
    let added = delivery::add_to(manager, settings)?;
    let server = match webhook {
        Some(config) => Some(delivery::webhook::start(manager, added.nudge, &config).await?),
        None => None,
    };
    Ok((added.helm, server))
}
