//! `kubectl hossted`'s command line: the subcommands of [`crate::plugin`],
//! the web view ([`crate::ui`]) and the converter ([`crate::convert`]).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::plugin::args::{Target, Where};
use crate::plugin::{approve, ask, diff, get, verify};

/// The name kubectl runs the plugin by (`kubectl hossted …`).
pub const PLUGIN_NAME: &str = "kubectl-hossted";

/// `kubectl hossted`.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl hossted",
    version,
    about = "HelmApps and HelmAppSets at a glance, and asking the operator to act on one now"
)]
pub struct PluginCli {
    #[command(subcommand)]
    pub command: PluginCmd,
}

#[derive(Debug, Subcommand)]
pub enum PluginCmd {
    /// HelmAppSets with their apps as a tree, then the apps of no set.
    Get(Where),
    /// Reconcile now (hossted.com/reconcile-at): helm runs only if something changed.
    Reconcile(Target),
    /// One upgrade with --force, even when nothing changed (hossted.com/force-at).
    Force(Target),
    /// Restart exhausted retries and accept the stored release (hossted.com/reconcile-at, as Flux's --reset).
    Reset(Target),
    /// What the next reconcile would change, as a unified diff (secrets masked); exit 1 when it would change something.
    Diff(diff::DiffArgs),
    /// Approve the change waiting in status.pendingChange (spec.approval: manual): sets hossted.com/approve to its hash.
    Approve(approve::ApproveArgs),
    /// What of the chart was verified (chart.verify), against what and when; exit 1 when it is not verified.
    Verify(verify::VerifyArgs),
    /// A web view with your own rights: served on 127.0.0.1, opened in your browser (docs/ui.md).
    Ui(Box<crate::ui::UiArgs>),
    /// Flux HelmReleases (and their sources) from files or stdin, as HelmApps on stdout; what does not convert on stderr. No cluster needed.
    Convert {
        /// YAML files (`-` or none: stdin).
        files: Vec<std::path::PathBuf>,
    },
}

/// Runs `kubectl hossted` with `args` (the first is the program's name).
pub fn main(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    let cli = PluginCli::parse_from(args);
    if let PluginCmd::Convert { files } = &cli.command {
        return crate::convert::main(files);
    }
    if let PluginCmd::Ui(args) = &cli.command {
        return crate::ui::main(args);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kubectl hossted: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    // diff: 0 the same, 1 a difference, 2 an error (as `kubectl diff`);
    // verify: 0 verified, 1 not, 2 an error; the others: 0 done, 1 an
    // error.
    let is_diff = matches!(cli.command, PluginCmd::Diff(_));
    let is_verify = matches!(cli.command, PluginCmd::Verify(_));
    let result = runtime.block_on(async {
        let client = kube::Client::try_default().await.map_err(|e| {
            format!("cannot reach the cluster of the current kubeconfig context: {e}")
        })?;
        match cli.command {
            PluginCmd::Get(w) => get::run(client, &w).await.map(|()| false),
            PluginCmd::Reconcile(t) | PluginCmd::Reset(t) => {
                ask::run(client, &t, ask::Ask::Reconcile)
                    .await
                    .map(|()| false)
            }
            PluginCmd::Force(t) => ask::run(client, &t, ask::Ask::Force).await.map(|()| false),
            PluginCmd::Diff(d) => diff::run(client, &d).await,
            PluginCmd::Approve(a) => approve::run(client, &a).await.map(|()| false),
            PluginCmd::Verify(v) => verify::run(client, &v).await.map(|verified| !verified),
            // Handled above: without a cluster, or on a runtime of its own.
            PluginCmd::Convert { .. } | PluginCmd::Ui(_) => Ok(false),
        }
    });
    match result {
        Ok(false) => ExitCode::SUCCESS,
        Ok(true) => ExitCode::from(1),
        Err(e) => {
            eprintln!("kubectl hossted: {e}");
            ExitCode::from(if is_diff || is_verify { 2 } else { 1 })
        }
    }
}
