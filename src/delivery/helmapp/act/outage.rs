//! A helm run that failed because the API server does not answer: not a
//! failure of the release (`crate::delivery::reachability`).

use apis::helmapp::HelmApp;

use crate::delivery::helmapp::context::Context;

/// What a run the API's outage interrupted says.
pub const OUTAGE: &str = "helm failed and the API server does not answer: waits for it";

/// After a helm run failed: whether the API server does not answer
/// (`crate::delivery::reachability`) — then the failure is the outage's,
/// not the release's, and `app` waits for the API, parked.
pub async fn outage(ctx: &Context, app: &HelmApp) -> bool {
    if ctx.reachability.answers().await {
        return false;
    }
    let key = format!(
        "{}/{}",
        kube::ResourceExt::namespace(app).unwrap_or_default(),
        kube::ResourceExt::name_any(app)
    );
    ctx.reachability.park(&key);
    true
}
