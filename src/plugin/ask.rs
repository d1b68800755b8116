//! `kubectl hossted reconcile | force | reset`: one annotation with a fresh
//! value; with `--wait`, the status followed until the operator recorded
//! that value as acted on (`status.lastHandledReconcileAt` /
//! `lastHandledForceAt`).

use std::io::Write;
use std::time::Instant;

use apis::helmapp::HelmApp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::args::{Target, namespace_of};
use crate::delivery::names::{FORCE_AT, RECONCILE_AT};

/// What is asked of the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    Reconcile,
    Force,
}

impl Ask {
    fn annotation(self) -> &'static str {
        match self {
            Ask::Reconcile => RECONCILE_AT,
            Ask::Force => FORCE_AT,
        }
    }

    /// The value the operator last acted on.
    fn handled(self, app: &HelmApp) -> Option<&str> {
        let s = app.status.as_ref()?;
        Some(match self {
            Ask::Reconcile => &s.last_handled_reconcile_at,
            Ask::Force => &s.last_handled_force_at,
        })
    }
}

pub async fn run(client: kube::Client, t: &Target, ask: Ask) -> Result<(), String> {
    let ns = namespace_of(&client, t.namespace.as_ref());
    let api: Api<HelmApp> = Api::namespaced(client, &ns);
    let value = ask_now(&api, &t.name, ask)
        .await
        .map_err(|e| format!("HelmApp {ns}/{}: {e}", t.name))?;
    println!(
        "helmapp {ns}/{} annotated {}={value}",
        t.name,
        ask.annotation()
    );
    if !t.wait {
        return Ok(());
    }
    let started = Instant::now();
    let mut shown = 0;
    loop {
        let app = api
            .get(&t.name)
            .await
            .map_err(|e| format!("HelmApp {ns}/{}: {e}", t.name))?;
        if ask.handled(&app) == Some(value.as_str()) {
            if shown > 0 {
                println!();
            }
            let (ready, reason, message) = ready_of(&app);
            println!(
                "acted on in {:.1}s: Ready={ready} {reason}: {message}",
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if started.elapsed() > t.timeout {
            return Err(format!(
                "the operator recorded no action on {}={value} within {}s: a settled release that needs nothing writes nothing; otherwise is the operator running, and is {ns}/{} suspended or waiting (kubectl describe happ -n {ns} {})?",
                ask.annotation(),
                t.timeout.as_secs(),
                t.name,
                t.name
            ));
        }
        let secs = started.elapsed().as_secs();
        if secs > shown {
            shown = secs;
            let (_, reason, _) = ready_of(&app);
            print!("\rwaiting for the operator: {secs}s ({reason})   ");
            let _ = std::io::stdout().flush();
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// Sets `ask`'s annotation to a fresh value (now, to the nanosecond) with
/// the rights of `api`'s client; the value set.
pub async fn ask_now(api: &Api<HelmApp>, name: &str, ask: Ask) -> Result<String, kube::Error> {
    let value = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    let patch = json!({ "metadata": { "annotations": { ask.annotation(): value } } });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(value)
}

/// `Ready`'s status, reason and message (`Unknown`, `-`, `` when absent).
pub fn ready_of(app: &HelmApp) -> (String, String, String) {
    app.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        .unwrap_or_else(|| ("Unknown".into(), "-".into(), String::new()))
}
