//! A helm run that failed because the API server does not answer: not a
//! failure of the release (`crate::delivery::helmapp::reachability`).

use apis::helmapp::HelmApp;

use crate::delivery::helm::HelmError;
use crate::delivery::helmapp::context::{Context, run_key};

/// After a helm run failed with `error`: whether it was the API server's
/// outage (`crate::delivery::helmapp::reachability`) — helm not started for it, or
/// the API does not answer now — not the release's failure; then `app`
/// waits for the API, parked (re-queued at once if it is back).
use crate::delivery::helmapp::decide::observed::Observed;

pub async fn outage(ctx: &Context, app: &HelmApp, o: &Observed, error: &HelmError) -> bool {
    // Refused before starting, whatever the API's state: the release's
    // failure to say, and no run of ours left anything behind.
    if matches!(
        error,
        HelmError::InvalidName { .. } | HelmError::AddressRefused { .. }
    ) {
        return false;
    }
    let unstarted = matches!(error, HelmError::Unreachable { .. });
    // The API server of the release's cluster: the operator's own, or the
    // remote one helm ran on.
    let reachability = ctx.on(o).reachability.clone();
    if !unstarted && reachability.answers().await {
        return false;
    }
    if !unstarted {
        // It ran: what it left is ours, recorded once the API answers.
        ctx.interrupted.lock().insert(run_key(app));
    }
    let key = cache::object_key(app);
    reachability.park(&key);
    true
}
