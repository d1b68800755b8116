//! Drift of edited fields: put back (`spec.drift.mode: enabled`) by a
//! direct apply of the drifted objects' manifest — no helm run, no new
//! revision — and reported in `status.drift`, the `Drifted` condition and
//! one Event per new drift (every mode but `disabled`).

use super::outcome::Outcome;
use apis::helmapp::HelmApp;
use record::EventType;

use super::super::context::Context;
use crate::delivery::helmapp::decide::conditions::{self, DRIFTED, Reason};
use crate::delivery::helmapp::decide::observed::Observed;
use crate::delivery::helmapp::decide::state::describe;
use crate::delivery::helmapp::observe::drift::check::Object;

/// `status.drift` keeps at most this many objects.
const LISTED: usize = 20;

/// The `Drifted=False` message after a put-back.
const REPAIRED: &str = "edited fields of the release's objects are put back (spec.drift.mode: enabled); Events DriftRepaired name each";

/// Puts back every object found drifted, as the HelmApp's identity; one
/// `DriftRepaired` Event naming each object and its fields. An object
/// that cannot be put back stays drifted (listed, with a Warning).
pub async fn put_back(ctx: &Context, app: &HelmApp, o: &mut Observed) {
    let user = o.identity.user();
    let drifted = std::mem::take(&mut o.drift.drifted);
    let cluster = ctx.on(o);
    for d in drifted {
        let ignored: Vec<&str> = d.ignored.iter().map(String::as_str).collect();
        let object = Object {
            api_version: &d.api_version,
            kind: &d.object.kind,
            namespace: &d.object.namespace,
            name: &d.object.name,
            desired: &d.desired,
            as_user: user.as_deref(),
        };
        match cluster
            .drift
            .put_back(&cluster.client, &object, &ignored, d.live.as_ref())
            .await
        {
            Ok((changed, digest)) => {
                if let Some(entry) = o
                    .status
                    .inventory
                    .iter_mut()
                    .find(|e| crate::delivery::helmapp::observe::drift::same(&d.object, e))
                {
                    entry.checked = digest;
                }
                o.drift.cleared.push(d.object.clone());
                if d.live.is_some() && changed.is_empty() {
                    // Written otherwise than stored, not drifted.
                    continue;
                }
                let mut repaired = d.object.clone();
                if !changed.is_empty() {
                    repaired.fields = changed;
                }
                let message = format!("put back {}", describe(&repaired));
                log::info!("{}: {message}", o.target.key());
                ctx.recorder.event(
                    app,
                    EventType::Normal,
                    Reason::DriftRepaired.as_str(),
                    &message,
                );
                // One message whatever was put back (the Events name it):
                // a put-back writes no status unless something else moved.
                conditions::set(
                    &mut o.status,
                    DRIFTED,
                    false,
                    Reason::DriftRepaired,
                    REPAIRED,
                );
            }
            Err(e) => {
                let message = format!("cannot put back {}: {e}", describe(&d.object));
                ctx.recorder.event(
                    app,
                    EventType::Warning,
                    Reason::DriftDetected.as_str(),
                    &message,
                );
                o.drift.unrepaired.push(d.object.clone());
            }
        }
    }
}

/// `status.drift` and the `Drifted` condition from what observe (and a
/// put-back) found; a Warning Event for each object newly drifted, or
/// drifted in other fields than listed.
pub fn report(ctx: &Context, app: &HelmApp, o: &mut Observed) {
    let listed = &mut o.status.drift;
    for c in &o.drift.cleared {
        listed.retain(|d| !(d.kind == c.kind && d.namespace == c.namespace && d.name == c.name));
    }
    let found = o
        .drift
        .drifted
        .iter()
        .map(|d| &d.object)
        .chain(o.drift.unrepaired.iter());
    let mut new = Vec::new();
    for d in found {
        let at = listed
            .iter()
            .position(|l| l.kind == d.kind && l.namespace == d.namespace && l.name == d.name);
        if at.is_none_or(|i| listed[i].fields != d.fields) {
            new.push(d.clone());
        }
        if let Some(i) = at {
            listed.remove(i);
        }
        listed.insert(0, d.clone());
    }
    listed.truncate(LISTED);
    let mode = app.spec.drift_mode();
    if mode != apis::helmapp::DriftMode::Enabled {
        // Reported: the drift found is now what was acted on (a put-back
        // records its own digest).
        for d in &o.drift.drifted {
            if let Some(entry) = o
                .status
                .inventory
                .iter_mut()
                .find(|e| crate::delivery::helmapp::observe::drift::same(&d.object, e))
            {
                entry.checked = d.digest.clone();
            }
        }
    }
    for d in &new {
        let message = format!(
            "{} differs from the release's manifest (spec.drift.mode: {mode}: {})",
            describe(d),
            if o.drift.unrepaired.contains(d) {
                "could not be put back"
            } else {
                "reported, not changed"
            }
        );
        if !o.drift.unrepaired.contains(d) {
            ctx.recorder.event(
                app,
                EventType::Warning,
                Reason::DriftDetected.as_str(),
                &message,
            );
        }
    }
    let status = &mut o.status;
    if status.drift.is_empty() {
        if conditions::is_true(status, DRIFTED) {
            let message = "every object of the release is as its manifest sets it";
            conditions::set(status, DRIFTED, false, Reason::NoDrift, message);
        }
        return;
    }
    let names: Vec<String> = status.drift.iter().map(describe).collect();
    let message = format!(
        "{} object(s) differ from the release's manifest: {}",
        names.len(),
        names.join("; ")
    );
    conditions::set(status, DRIFTED, true, Reason::DriftDetected, &message);
}

/// Puts edited fields back; the plan reports what is left (what could not
/// be put back stays in `o.drift.unrepaired`, no longer drifted to put
/// back: the release is reported in sync with it listed).
pub async fn run(ctx: &Context, app: &HelmApp, o: &mut Observed, objects: &[String]) -> Outcome {
    log::info!(
        "{}: fields of its objects were edited: {}",
        o.target.key(),
        objects.join("; ")
    );
    put_back(ctx, app, o).await;
    Outcome::Replan
}
