//! One manager, many controllers: the runtime every controller of the
//! operator runs on. It knows nothing about Hossted or Helm.
//!
//! - [`Manager`]: the kube client, ONE [`SharedInformerFactory`](cache::SharedInformerFactory)
//!   shared by all controllers, the event broadcaster, the metrics registry
//!   and the `/metrics`, `/healthz`, `/readyz` server, leader election, and
//!   the order of start-up and shutdown.
//! - [`Controller`]: a named rate-limiting queue, workers, safety resync,
//!   retries through the rate limiter, drain on shutdown — around a
//!   [`Reconciler`], the business logic of one key.
//! - [`StatusWriter`]: writes a status only when it changed, and reads back
//!   what it wrote while the lister lags.
//!
//! Wiring a controller is one module and one line:
//!
//! ```no_run
//! # async fn demo(client: kube::Client, mirror: runtime::Controller<impl runtime::Reconciler>) {
//! use runtime::{Manager, ManagerOptions};
//! let mut manager = Manager::new(client, ManagerOptions::new("hossted", "hossted-operator"));
//! manager.add(mirror); // built with Controller::new(&manager, "mirror", ...)
//! manager.run(runtime::shutdown_signal()).await.expect("ran");
//! # }
//! ```
//!
//! Readiness (`/readyz`): every required informer cache synced and — under
//! leader election — either leading or a warm standby. Optional informers
//! (a kind whose CRD may be absent) never gate it.

mod controller;
pub mod leader;
mod manager;
pub mod memory;
mod metrics;
mod server;
mod status;

pub use controller::{
    Action, Controller, ControllerHost, ControllerStats, DEFAULT_RESYNC, Reconciler,
};
pub use leader::LeaseTiming;
pub use manager::{
    DECODE_FAILED, LeaderElection, Leading, Manager, ManagerError, ManagerOptions, Stopping,
};
pub use metrics::Metrics;
pub use server::ServerOptions;
pub use status::{
    HeldCount, StatusWriter, Written, ignore_not_found, is_conflict, is_not_found,
    status_merge_patch,
};
/// The queue type a [`Controller`] hands to its handlers.
pub use workqueue::RateLimitingQueue;

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                log::warn!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
