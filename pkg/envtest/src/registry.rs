//! An OCI registry on loopback: the CNCF `distribution` registry that
//! `hack/setup-envtest.sh` builds, with filesystem storage in a private
//! directory, served over plain HTTP or over TLS with a CA made for it.
//! Charts get in with the real `helm push`.
//!
//! ```no_run
//! # async fn demo(cp: &envtest::ControlPlane) -> Result<(), envtest::Error> {
//! let registry = envtest::OciRegistry::start(cp, true).await?;
//! let url = registry.push(cp, "examples/charts/tiny".as_ref())?;
//! // chart: { oci: url, version: "0.1.0" }, credentialsSecretRef → ca.crt = registry.ca_pem()
//! # Ok(()) }
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use crate::process::{Spawner, Supervised};
use crate::util::{OUTPUT_TAIL_LINES, free_port};
use crate::{Assets, ControlPlane, Error};

/// A running registry; killed and its storage removed when dropped.
pub struct OciRegistry {
    /// `127.0.0.1:<port>`.
    host: String,
    /// The CA of its serving certificate (TLS only), PEM.
    ca_pem: Option<String>,
    dir: tempfile::TempDir,
    // Dropped before `spawner`: the process is killed and reaped first.
    process: Supervised,
    _spawner: Spawner,
}

impl OciRegistry {
    /// Starts a registry on a free port of 127.0.0.1; with `tls`, it serves
    /// a certificate for `127.0.0.1` and `localhost` signed by a new CA
    /// ([`Self::ca_pem`]). Waits until `/v2/` answers.
    pub async fn start(cp: &ControlPlane, tls: bool) -> Result<Self, Error> {
        let binary = cp.assets().binary("registry")?;
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let host = format!("127.0.0.1:{port}");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n",
            dir.path().join("storage").display()
        );
        let ca_pem = if tls {
            let ca = crate::pki::Ca::generate()?;
            let serving = ca.serving_cert()?;
            let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
            std::fs::write(&cert, &serving.cert)?;
            std::fs::write(&key, &serving.key)?;
            std::fs::write(dir.path().join("ca.crt"), ca.cert_pem())?;
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                cert.display(),
                key.display()
            ));
            Some(ca.cert_pem())
        } else {
            None
        };
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config)?;
        let spawner = Spawner::new()?;
        // No tracing exporter: it would dial a collector that is not there.
        let mut process = spawner.spawn_with_env(
            "registry",
            &binary,
            &["serve".into(), config_path.display().to_string()],
            &[("OTEL_TRACES_EXPORTER", "none")],
            dir.path().join("registry.log"),
        )?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = process.exited() {
                return Err(Error::StartFailed {
                    process: "registry",
                    reason: format!("exited with {status}"),
                    output: process.output_tail(OUTPUT_TAIL_LINES),
                });
            }
            if std::net::TcpStream::connect(&host).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::StartFailed {
                    process: "registry",
                    reason: "did not listen within 30s".into(),
                    output: process.output_tail(OUTPUT_TAIL_LINES),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(OciRegistry {
            host,
            ca_pem,
            dir,
            process,
            _spawner: spawner,
        })
    }

    /// `127.0.0.1:<port>`.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The CA that signed the serving certificate (`None`: plain HTTP).
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Packages the chart directory `chart` and `helm push`es it to
    /// `oci://<host>/charts`; returns `oci://<host>/charts/<chart name>`.
    pub fn push(&self, cp: &ControlPlane, chart: &Path) -> Result<String, Error> {
        self.push_with_digest(cp, chart).map(|(url, _)| url)
    }

    /// [`OciRegistry::push`], and the `sha256:` digest of the manifest
    /// pushed (what a signature signs).
    pub fn push_with_digest(
        &self,
        cp: &ControlPlane,
        chart: &Path,
    ) -> Result<(String, String), Error> {
        let out = self.dir.path().join("packaged");
        std::fs::create_dir_all(&out)?;
        let packaged = run(cp
            .helm()
            .arg("package")
            .arg(chart)
            .arg("--destination")
            .arg(&out))?;
        // "Successfully packaged chart and saved it to: /path/name-1.0.0.tgz"
        let tgz = packaged
            .rsplit(": ")
            .next()
            .map(|s| s.trim().to_string())
            .filter(|s| s.ends_with(".tgz"))
            .ok_or_else(|| {
                Error::Io(std::io::Error::other(format!(
                    "helm package said {packaged:?}"
                )))
            })?;
        let mut push = cp.helm();
        push.arg("push")
            .arg(&tgz)
            .arg(format!("oci://{}/charts", self.host));
        if self.ca_pem.is_some() {
            push.arg("--ca-file").arg(self.dir.path().join("ca.crt"));
        } else {
            push.arg("--plain-http");
        }
        let out = push.output()?;
        if !out.status.success() {
            return Err(Error::Io(std::io::Error::other(format!(
                "{push:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))));
        }
        // "Digest: sha256:…", on stdout or stderr as helm versions differ.
        let said = [out.stdout, out.stderr].concat();
        let digest = String::from_utf8_lossy(&said)
            .lines()
            .find_map(|l| l.strip_prefix("Digest: ").map(|d| d.trim().to_string()))
            .ok_or_else(|| Error::Io(std::io::Error::other("helm push printed no Digest")))?;
        let name = Path::new(&tgz)
            .file_name()
            .and_then(|f| f.to_str())
            .and_then(|f| f.strip_suffix(".tgz"))
            .and_then(|f| f.rsplit_once('-'))
            .map(|(name, _)| name.to_string())
            .unwrap_or_default();
        Ok((format!("oci://{}/charts/{name}", self.host), digest))
    }

    /// The registry's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

impl ControlPlane {
    /// The test assets this control plane was started from.
    pub fn assets(&self) -> &Assets {
        &self.assets
    }
}

/// Runs `cmd`; its stdout, or an error carrying its stderr.
fn run(cmd: &mut std::process::Command) -> Result<String, Error> {
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(Error::Io(std::io::Error::other(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
