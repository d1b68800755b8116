//! Locating the test binaries that `hack/setup-envtest.sh` builds.

use std::path::{Path, PathBuf};

use crate::Error;

/// The pinned versions, shared with `hack/setup-envtest.sh` so both agree on
/// the cache path.
const VERSIONS_FILE: &str = include_str!("../../../hack/envtest.env");

/// Reads `KEY=value` from `hack/envtest.env`.
fn pinned(key: &str) -> &'static str {
    VERSIONS_FILE
        .lines()
        .filter_map(|l| l.trim().split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.trim())
        .unwrap_or_else(|| panic!("hack/envtest.env does not pin {key}"))
}

/// The Kubernetes version of the test control plane (e.g. `1.35.4`).
pub fn kubernetes_version() -> &'static str {
    pinned("K8S_VERSION")
}

/// The directory holding `kube-apiserver`, `etcd`, `kubectl` and `helm`.
///
/// Resolved exactly as `hack/setup-envtest.sh` does: `$KUBEBUILDER_ASSETS`
/// when set, else `${XDG_CACHE_HOME:-$HOME/.cache}/hossted-operator/envtest/<k8s-version>/bin`.
#[derive(Debug, Clone)]
pub struct Assets {
    dir: PathBuf,
}

impl Assets {
    /// Finds the asset directory; it is not checked until a binary is asked for.
    pub fn locate() -> Self {
        if let Some(dir) = std::env::var_os("KUBEBUILDER_ASSETS").filter(|d| !d.is_empty()) {
            return Assets { dir: dir.into() };
        }
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(|| PathBuf::from(".cache"));
        Assets {
            dir: cache
                .join("hossted-operator/envtest")
                .join(kubernetes_version())
                .join("bin"),
        }
    }

    /// Uses an explicit directory.
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Assets { dir: dir.into() }
    }

    /// The directory searched.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of `name`, or [`Error::AssetMissing`] telling how to build it.
    pub fn binary(&self, name: &'static str) -> Result<PathBuf, Error> {
        let path = self.dir.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(Error::AssetMissing {
                name,
                dir: self.dir.clone(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_file_pins_kubernetes() {
        let v = kubernetes_version();
        assert!(v.starts_with("1."), "unexpected K8S_VERSION {v}");
    }

    #[test]
    fn missing_asset_says_how_to_build_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = Assets::in_dir(dir.path())
            .binary("kube-apiserver")
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("kube-apiserver"), "{msg}");
        assert!(msg.contains("hack/setup-envtest.sh"), "{msg}");
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    }
}
