//! A real Kubernetes control plane for tests: `etcd` and `kube-apiserver`
//! started on 127.0.0.1 with free ports and a private temporary directory.
//!
//! The binaries come from `hack/setup-envtest.sh`, which builds them from the
//! Go module proxy into a versioned cache (see [`Assets`]). There is no
//! kubelet and no controller-manager: pods never start by themselves and
//! garbage collection does not run, so tests set pod status through the
//! status subresource themselves.
//!
//! What a started [`ControlPlane`] gives a test:
//! - an admin [`kube::Client`] (static token, group `system:masters`) and a
//!   kubeconfig file for it, for `kubectl` and `helm`;
//! - clients that authenticate as a ServiceAccount (a real bound token from
//!   the TokenRequest API) or as a user (a client certificate signed by the
//!   cluster CA), with RBAC enforced (`--authorization-mode=RBAC`);
//! - `kubectl` and `helm` commands pre-pointed at it.
//!
//! Dropping it kills both processes and removes the directory, also when the
//! test panics; if the whole test binary dies abruptly the kernel kills the
//! children (`PR_SET_PDEATHSIG`), so no process outlives a test run.
//!
//! ```no_run
//! # async fn demo() -> Result<(), envtest::Error> {
//! use k8s_openapi::api::core::v1::Namespace;
//! let cp = envtest::ControlPlane::start().await?;
//! let namespaces: kube::Api<Namespace> = kube::Api::all(cp.client());
//! assert!(namespaces.get_opt("default").await?.is_some());
//! let status = cp.kubectl().args(["get", "ns"]).status()?;
//! assert!(status.success());
//! # Ok(()) }
//! ```

mod assets;
mod control_plane;
mod error;
mod util;

pub use error::Error;
pub mod browser;
pub use fantoccini;
mod chart_repo;
mod controller_manager;
mod git_server;
mod hostile;
pub mod hostile_apiserver;
pub mod hydra;
mod identity;
mod kubeconfig;
pub mod kubelet;
mod pki;
mod poll;
mod process;
mod proxy;
mod receiver;
mod registry;
pub mod signing;
pub mod sops;
mod ssh_server;

pub use assets::{Assets, kubernetes_version};
pub use chart_repo::ChartRepo;
pub use control_plane::{Builder, ControlPlane, open_watches};
pub use controller_manager::ControllerManager;
pub use git_server::{GitRepo, GitRequest, GitServer, PackAnswer};
pub use hostile::{Answer, HostileServer, Seen};
pub use hostile_apiserver::HostileApiServer;
pub use hydra::Hydra;
pub use kubelet::FakeKubelet;
pub use poll::eventually;
pub use proxy::Proxy;
pub use receiver::{Receiver, Recorded};
pub use registry::OciRegistry;
pub use ssh_server::{SshGitServer, SshKey};
