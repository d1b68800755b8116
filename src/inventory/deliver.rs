//! The deliver step of a Hosstedproject's reconcile: every app that is new
//! or changed POSTed, every release that is gone reported once as
//! `uninstalled`, and what was delivered recorded in the status.

use std::collections::HashSet;

use apis::DeliveredApp;
use record::EventType;

use super::collector::{self, Collection};
use super::ledger::{ReleaseRef, Target};
use super::payload::AppPayload;
use super::poster::PostError;
use super::reconciler::{Delivered, Inventory, Run};
use super::status::Reason;
use super::sync_error::SyncError;

impl Inventory {
    /// POSTs every app that is new or changed. Only what was delivered
    /// enters `status.apps`; once the API is unavailable, nothing more is
    /// sent.
    pub(super) async fn deliver(
        &self,
        run: &Run<'_>,
        collection: &Collection,
    ) -> Result<Delivered, SyncError> {
        let mut out = Delivered::default();
        for app in &collection.apps {
            let release = ReleaseRef::new(&app.status.namespace, &app.status.name);
            self.ledger.saw(run.key, &release, &app.status);
            let known = run.known.get(&release.namespace, &release.name);
            if !settled(&app.status.status) {
                // Sent once it settles (deployed, failed, ...).
                out.apps.extend(known.cloned());
                continue;
            }
            if !collector::needs_report(app, known) {
                out.apps.push(app.delivered());
                continue;
            }
            // Built only now: the members of the apps that are sent.
            let payload = app.payload(&self.caches, &self.context(run));
            self.send_app(
                run,
                &mut out,
                release,
                &payload,
                Some(app.delivered()),
                known,
            )
            .await?;
        }
        Ok(out)
    }

    /// Sends once, with status `uninstalled`, every delivered release that
    /// is gone (its storage deleted); forgets it once that is delivered.
    pub(super) async fn deliver_removals(
        &self,
        run: &Run<'_>,
        collection: &Collection,
        out: &mut Delivered,
    ) -> Result<(), SyncError> {
        let deny = &run.hp.spec.deny_namespaces;
        // Releases still there: collected, or present but undecodable.
        let present: HashSet<(&str, &str)> = collection
            .apps
            .iter()
            .map(|a| (a.status.namespace.as_str(), a.status.name.as_str()))
            .chain(
                collection
                    .invalid
                    .iter()
                    .map(|i| (i.namespace.as_str(), i.release.as_str())),
            )
            .collect();
        let mut gone: Vec<&DeliveredApp> = run
            .known
            .iter()
            .filter(|k| !present.contains(&(k.namespace.as_str(), k.name.as_str())))
            .collect();
        gone.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        for known in gone {
            let release = ReleaseRef::new(&known.namespace, &known.name);
            if deny.contains(&known.namespace) {
                // No longer reported, not uninstalled: just dropped.
                self.ledger.forget_release(run.key, &release);
                continue;
            }
            let payload = collector::uninstalled(
                known,
                self.ledger.last_seen(run.key, &release).as_ref(),
                &self.context(run),
            );
            // Delivered: the release leaves the status (and memory).
            if self
                .send_app(run, out, release.clone(), &payload, None, Some(known))
                .await?
            {
                self.ledger.forget_release(run.key, &release);
            }
        }
        Ok(())
    }

    /// POSTs one app — unless the API is down (don't hammer it) or shutdown
    /// has begun — and says whether it was delivered. Delivered: `delivered`
    /// enters the status (`None`: the release leaves it); not: what was
    /// `known` stays.
    async fn send_app(
        &self,
        run: &Run<'_>,
        out: &mut Delivered,
        release: ReleaseRef,
        payload: &AppPayload,
        delivered: Option<DeliveredApp>,
        known: Option<&DeliveredApp>,
    ) -> Result<bool, SyncError> {
        let api_down = matches!(out.failure, Some(PostError::Unavailable { .. }));
        if api_down || self.stopping.is_set() {
            out.apps.extend(known.cloned());
            return Ok(false);
        }
        let target = Target::App(release.clone());
        match self
            .api
            .post(&self.ledger, run.key, target, "/apps", payload)
            .await?
        {
            Ok(()) => {
                out.apps.extend(delivered);
                out.reported.push(release);
                Ok(true)
            }
            Err(e) => {
                out.apps.extend(known.cloned());
                if !api_down {
                    out.failure = Some(e);
                }
                Ok(false)
            }
        }
    }

    /// Puts what was delivered into the status and the ledger.
    pub(super) fn record(&self, run: &mut Run<'_>, delivered: &Delivered) {
        let status = &mut run.status;
        status.set_delivered(&delivered.apps);
        status.observed_generation = run.hp.metadata.generation;
        if !delivered.reported.is_empty() {
            let message = reported_message(&delivered.reported);
            self.event(run, EventType::Normal, Reason::AppsReported, &message);
        }
    }
}

/// The Event message for a round of reports: the first names, then a count
/// (an Event naming 10,000 releases would be a 300 KB object).
fn reported_message(reported: &[ReleaseRef]) -> String {
    const NAMED: usize = 10;
    let names: Vec<String> = reported.iter().take(NAMED).map(|r| r.to_string()).collect();
    let more = reported.len().saturating_sub(NAMED);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "reported {} app(s): {}{tail}",
        reported.len(),
        names.join(", ")
    )
}

/// Whether a release's newest revision has settled: `pending-*` and
/// `uninstalling` have not (the state that follows is sent).
fn settled(status: &str) -> bool {
    !status.starts_with("pending-") && status != "uninstalling"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_event_names_ten_releases_then_counts() {
        let few: Vec<ReleaseRef> = (0..2)
            .map(|i| ReleaseRef::new("a", &format!("r{i}")))
            .collect();
        assert_eq!(reported_message(&few), "reported 2 app(s): a/r0, a/r1");
        let many: Vec<ReleaseRef> = (0..10_000)
            .map(|i| ReleaseRef::new("a", &format!("r{i}")))
            .collect();
        let message = reported_message(&many);
        assert!(
            message.starts_with("reported 10000 app(s): a/r0, a/r1,"),
            "{message}"
        );
        assert!(message.ends_with("a/r9 and 9990 more"), "{message}");
    }

    #[test]
    fn pending_and_uninstalling_revisions_are_not_settled() {
        for s in [
            "pending-install",
            "pending-upgrade",
            "pending-rollback",
            "uninstalling",
        ] {
            assert!(!settled(s), "{s}");
        }
        for s in ["deployed", "failed", "superseded", "uninstalled"] {
            assert!(settled(s), "{s}");
        }
    }
}
