//! `kube-controller-manager` beside a [`ControlPlane`] — for benchmarks
//! only (DESIGN.md: the tests run without one). With it, Deployments
//! become Available the real way (the deployment and replicaset
//! controllers), and garbage collection and namespace deletion run.
//! `WITH_CONTROLLER_MANAGER=1 hack/setup-envtest.sh` builds it.
//!
//! ```no_run
//! # async fn demo(cp: &envtest::ControlPlane) -> Result<(), envtest::Error> {
//! let _kcm = envtest::ControllerManager::start(cp, envtest::ControllerManager::WORKLOADS)?;
//! # Ok(()) }
//! ```

use crate::process::{Spawner, Supervised};
use crate::{ControlPlane, Error};

/// A running kube-controller-manager; killed when dropped.
pub struct ControllerManager {
    // Dropped before `spawner`: the process is killed and reaped first.
    process: Supervised,
    _spawner: Spawner,
}

impl ControllerManager {
    /// Deployments (with their ReplicaSets), garbage collection, namespace
    /// deletion: what a release's workloads need to become ready.
    pub const WORKLOADS: &'static str = "deployment-controller,replicaset-controller,garbage-collector-controller,namespace-controller";

    /// Starts kube-controller-manager as the control plane's admin with
    /// `controllers` (its `--controllers` list), without leader election
    /// or a serving port; its log is `kube-controller-manager.log` in the
    /// control plane's directory.
    pub fn start(cp: &ControlPlane, controllers: &str) -> Result<Self, Error> {
        let binary = cp.assets().binary("kube-controller-manager")?;
        let dir = cp.dir();
        let args = vec![
            format!("--kubeconfig={}", cp.kubeconfig_path().display()),
            format!("--controllers={controllers}"),
            "--leader-elect=false".to_string(),
            "--secure-port=0".to_string(),
            format!("--root-ca-file={}", dir.join("ca.crt").display()),
            format!(
                "--service-account-private-key-file={}",
                dir.join("sa.key").display()
            ),
            "--v=1".to_string(),
        ];
        let spawner = Spawner::new()?;
        let process = spawner.spawn(
            "kube-controller-manager",
            &binary,
            &args,
            dir.join("kube-controller-manager.log"),
        )?;
        Ok(ControllerManager {
            process,
            _spawner: spawner,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}
