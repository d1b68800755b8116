//! `kubectl hossted approve -n NS NAME [--hash H] [--wait]`: sets
//! `hossted.com/approve` to the configuration hash of the change waiting
//! in `status.pendingChange`, after printing what it changes. `--hash`
//! approves only that configuration: a change that was replaced since it
//! was looked at is not approved unseen.

use std::time::{Duration, Instant};

use apis::helmapp::{HelmApp, PendingChange};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::args::namespace_of;
use super::ask::ready_of;
use crate::delivery::names::APPROVE;

/// `kubectl hossted approve`.
#[derive(Debug, clap::Args)]
pub struct ApproveArgs {
    /// The HelmApp's namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// The HelmApp.
    pub name: String,
    /// Approve only if the pending change has this configuration hash.
    #[arg(long)]
    pub hash: Option<String>,
    /// Wait until the operator has run the approved change.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "5m", value_parser = crate::duration::parse)]
    pub timeout: Duration,
}

pub async fn run(client: kube::Client, a: &ApproveArgs) -> Result<(), String> {
    let ns = namespace_of(&client, a.namespace.as_ref());
    let api: Api<HelmApp> = Api::namespaced(client, &ns);
    let what = format!("HelmApp {ns}/{}", a.name);
    let p = match approve(&api, &a.name, a.hash.as_deref()).await {
        Ok(p) => p,
        Err(Refused::NothingPending) => {
            return Err(format!(
                "{what}: nothing waits for approval (spec.approval must be manual, and a change computed: kubectl describe happ -n {ns} {})",
                a.name
            ));
        }
        Err(Refused::Replaced { pending, asked }) => {
            return Err(format!(
                "{what}: the pending change is configuration {pending}, not {asked}: look at it again (kubectl hossted diff -n {ns} {})",
                a.name
            ));
        }
        Err(Refused::Api(e)) => return Err(format!("{what}: {e}")),
    };
    let o = &p.objects;
    println!(
        "{what}: chart version {}, configuration {}: {} added, {} changed, {} removed, {} lines of diff",
        p.chart_version,
        p.config_hash,
        o.added.len(),
        o.changed.len(),
        o.removed.len(),
        p.diff_lines
    );
    println!("{what} annotated {APPROVE}={}", p.config_hash);
    if a.wait {
        wait_for_run(&api, &a.name, &what, &p.config_hash, a.timeout).await?;
    }
    Ok(())
}

/// Why a change was not approved.
#[derive(Debug)]
pub enum Refused {
    /// No `status.pendingChange`.
    NothingPending,
    /// The change waiting is not the one looked at.
    Replaced { pending: String, asked: String },
    /// The apiserver refused the read or the write (RBAC: 403).
    Api(kube::Error),
}

/// Sets `hossted.com/approve` to the pending change's hash — only if it
/// is `asked` when given, so a change replaced since it was looked at is
/// not approved unseen — with the rights of `api`'s client. The change
/// approved.
pub async fn approve(
    api: &Api<HelmApp>,
    name: &str,
    asked: Option<&str>,
) -> Result<PendingChange, Refused> {
    let app = api.get(name).await.map_err(Refused::Api)?;
    let Some(p) = app.status.and_then(|s| s.pending_change) else {
        return Err(Refused::NothingPending);
    };
    if let Some(asked) = asked.filter(|h| *h != p.config_hash) {
        return Err(Refused::Replaced {
            pending: p.config_hash,
            asked: asked.to_string(),
        });
    }
    let patch = json!({ "metadata": { "annotations": { APPROVE: p.config_hash } } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(Refused::Api)?;
    Ok(p)
}

/// Until the status says the approved configuration ran.
async fn wait_for_run(
    api: &Api<HelmApp>,
    name: &str,
    what: &str,
    hash: &str,
    timeout: Duration,
) -> Result<(), String> {
    let started = Instant::now();
    loop {
        let app = api.get(name).await.map_err(|e| format!("{what}: {e}"))?;
        let ran = app.status.as_ref().is_some_and(|s| s.config_hash == hash);
        let (ready, reason, message) = ready_of(&app);
        if ran {
            println!(
                "ran in {:.1}s: Ready={ready} {reason}: {message}",
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if started.elapsed() > timeout {
            return Err(format!(
                "{what}: configuration {hash} did not run within {}s (Ready={ready} {reason}: {message})",
                timeout.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
