//! What can go wrong starting or using a control plane.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a control plane could not be started or used.
#[derive(thiserror::Error)]
pub enum Error {
    /// A binary is not in the asset directory.
    #[error(
        "test asset `{name}` not found in {dir}: run hack/setup-envtest.sh to build the test control plane (or point KUBEBUILDER_ASSETS at a directory holding it)"
    )]
    AssetMissing { name: &'static str, dir: PathBuf },
    /// A process exited or never became ready; `output` is the tail of what it printed.
    #[error(
        "{process} did not start: {reason}\n----- last lines of {process}'s output -----\n{output}\n-----"
    )]
    StartFailed {
        process: &'static str,
        reason: String,
        output: String,
    },
    #[error("envtest I/O: {0}")]
    Io(#[from] io::Error),
    #[error("generating certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// A call to a test server (its API) failed.
    #[error("{0}")]
    Http(String),
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

// `expect()` prints Debug: make that the readable message, with the real
// line breaks of a process's output.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<kube::config::KubeconfigError> for Error {
    fn from(e: kube::config::KubeconfigError) -> Self {
        Error::Kubeconfig(e.to_string())
    }
}
