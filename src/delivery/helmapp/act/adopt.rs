//! Adoption of a `deployed` release no live HelmApp owns (`spec.adopt`):
//! first a dry run of the adopting upgrade against the manifest the
//! release has now ([`render`]); when it changes no object, the release is
//! taken over as it is ([`take_over`]): its storage Secrets get the
//! HelmApp's owner label, the newest also its configuration hash — no helm
//! run, no new revision, nothing rolled out again. Otherwise an upgrade
//! adopts it (plan's choice, from what `render` found).

use apis::helmapp::{HelmApp, HistoryAction, HistoryResult};
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::{ListParams, ObjectList, Patch, PatchParams};
use kube::core::Request;
use record::EventType;
use serde_json::json;

use super::dry_run;
use super::outcome::{DeliveryError, Outcome};
use crate::delivery::helm::{manifest_bound, manifest_diff};
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::{Reason, push_history};
use crate::delivery::helmapp::decide::observed::{Inputs, Observed, Rendering};
use crate::delivery::names::{HASH_LABEL, UID_LABEL};
use crate::delivery::tenancy::impersonate;

/// The labels Flux's helm-controller puts on every object it deploys
/// (its origin post-renderer): a release it made differs from ours by
/// them alone, and they do no harm left in place until our next upgrade.
pub const FLUX_ORIGIN_LABELS: [&str; 2] = [
    "helm.toolkit.fluxcd.io/name",
    "helm.toolkit.fluxcd.io/namespace",
];

/// Dry-runs the adopting upgrade and records whether it changes anything
/// (a failed render: it may; the upgrade will say why), then asks for a
/// new plan.
pub async fn render(ctx: &Context, app: &HelmApp, o: &mut Observed) -> Outcome {
    let found = match dry_run::live_and_next(ctx, app, o).await {
        Ok((live, next)) if adopts_as_is(&live, &next) => Rendering::Same,
        Ok(_) => Rendering::Differs,
        Err(message) => {
            log::info!(
                "{}: the adoption's dry run failed ({message}): an upgrade adopts it",
                o.target.key()
            );
            Rendering::Differs
        }
    };
    o.done.adoption_render = Some(found);
    Outcome::Replan
}

/// Whether the release found (`live`, its stored manifest) is what this
/// configuration renders (`next`), so it is taken over without an
/// upgrade: the same objects, named the same — read strictly
/// (`manifest_bound::same_names`, as a proof of our own run is: a document
/// a lenient reader would skip, a name twice or another API group is a
/// difference, never an object hidden from the comparison that helm's
/// next upgrade would delete) — and field for field the same, Flux's
/// origin labels aside.
fn adopts_as_is(live: &str, next: &str) -> bool {
    manifest_bound::same_names(live, next)
        && manifest_diff::same_objects(live, next, &FLUX_ORIGIN_LABELS)
}

/// Labels the release's storage ours (as the HelmApp's identity, as helm
/// would write it), records the adoption, and asks for a new plan: the
/// release is then this configuration's, deployed.
pub async fn take_over(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    revision: i64,
) -> Result<Outcome, DeliveryError> {
    let Some(Inputs::Ready { chart, hash }) = &o.inputs else {
        return Ok(Outcome::Replan);
    };
    let (version, hash, digest) = (chart.version.clone(), hash.clone(), chart.chart_digest());
    let verification = chart.verified.as_deref().map(Into::into);
    let user = o.identity.user();
    let (ns, release) = (o.target.namespace.clone(), o.target.release.clone());
    let url = Request::new(Secret::url_path(&(), Some(&ns)));
    let selector = format!("owner=helm,name={release}");
    let mut list = url
        .list(&ListParams::default().labels(&selector))
        .map_err(DeliveryError::Request)?;
    impersonate(&mut list, user.as_deref()).map_err(DeliveryError::Impersonation)?;
    let cluster = ctx.on(o);
    let secrets: ObjectList<Secret> = cluster.client.request(list).await?;
    for secret in &secrets.items {
        let labels = secret.metadata.labels.clone().unwrap_or_default();
        let mut wanted = json!({ UID_LABEL: o.uid });
        if labels.get("version").map(String::as_str) == Some(revision.to_string().as_str()) {
            wanted[HASH_LABEL] = json!(hash);
        }
        let name = secret.metadata.name.clone().unwrap_or_default();
        let body = Patch::Merge(json!({ "metadata": { "labels": wanted } }));
        let mut patch = url
            .patch(&name, &PatchParams::default(), &body)
            .map_err(DeliveryError::Request)?;
        impersonate(&mut patch, user.as_deref()).map_err(DeliveryError::Impersonation)?;
        let _: Secret = cluster.client.request(patch).await?;
    }
    if let Some(newest) = o.newest.as_mut() {
        newest.owner = o.uid.clone();
        newest.hash = hash.clone();
    }
    let message = format!(
        "release {} adopted as it is at revision {revision}: the chart and values render the objects it has (no helm run, no new revision)",
        o.target.key()
    );
    ctx.recorder
        .event(app, EventType::Normal, Reason::UpToDate.as_str(), &message);
    let status = &mut o.status;
    status.chart_version = version.clone();
    status.chart_digest = digest;
    status.verification = verification;
    status.last_action = "adopt".into();
    push_history(
        status,
        HistoryAction::Adopt,
        revision,
        &version,
        &hash,
        HistoryResult::Succeeded,
    );
    Ok(Outcome::Replan)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEXT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: apps\nspec:\n  replicas: 1\n";

    /// A release whose stored manifest hides an object from a lenient
    /// comparison — the same kind and name in another API group, the
    /// same object twice, a document that does not parse — is upgraded,
    /// not taken over as it is; Flux's origin labels alone are no
    /// difference. Red with `same_objects` alone: it keys objects by kind
    /// and name and reads up to the first bad document.
    #[test]
    fn a_release_hiding_an_object_from_the_comparison_is_not_taken_over_as_it_is() {
        let flux_labelled = NEXT.replace(
            "  name: web\n",
            "  name: web\n  labels:\n    helm.toolkit.fluxcd.io/name: web\n",
        );
        assert!(adopts_as_is(&flux_labelled, NEXT));
        let other_group = NEXT.replace("apps/v1", "example.com/v1");
        for live in [
            format!("{other_group}---\n{NEXT}"),
            format!("{NEXT}---\n{NEXT}"),
            format!("{NEXT}---\nkind: [unclosed\n---\n{other_group}"),
        ] {
            assert!(!adopts_as_is(&live, NEXT), "{live}");
        }
    }
}
