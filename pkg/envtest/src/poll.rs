//! Waiting for a cluster to reach a state: tests poll, since watches
//! would make each check a small program of its own.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`eventually`] asks again.
const POLL_EVERY: Duration = Duration::from_millis(50);

/// Calls `check` until it returns `Some`, and returns that value; panics
/// with "timed out after {secs}s waiting for {what}" once `secs` have passed.
///
/// ```no_run
/// # async fn demo(cp: envtest::ControlPlane) {
/// use k8s_openapi::api::core::v1::Namespace;
/// let namespaces: kube::Api<Namespace> = kube::Api::all(cp.client());
/// let ns = envtest::eventually("the default namespace", 30, || async {
///     namespaces.get_opt("default").await.ok().flatten()
/// })
/// .await;
/// # }
/// ```
pub async fn eventually<T, F, Fut>(what: &str, secs: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {secs}s waiting for {what}"
        );
        tokio::time::sleep(POLL_EVERY).await;
    }
}
