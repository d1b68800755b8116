//! A Helm chart repository on loopback: `helm package` + `helm repo index`
//! of chart directories, served over HTTP by a small static server that
//! can require basic auth, be taken down and brought back, and counts the
//! requests it served.
//!
//! ```no_run
//! # async fn demo(cp: &envtest::ControlPlane) {
//! let repo = envtest::ChartRepo::start(cp, &["examples/charts/tiny".as_ref()], None).await.unwrap();
//! // chart: { repo: repo.url(), name: tiny, version: "0.1.0" }
//! # }
//! ```

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::ControlPlane;

/// A running chart repository; stops when dropped.
pub struct ChartRepo {
    url: String,
    dir: tempfile::TempDir,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

struct Shared {
    root: PathBuf,
    /// `Basic <base64(user:password)>` required when set.
    auth: Option<String>,
    down: AtomicBool,
    served: AtomicUsize,
}

impl ChartRepo {
    /// Packages `charts` (directories) with the control plane's helm,
    /// indexes them and serves them on a free port of 127.0.0.1; with
    /// `basic_auth` (user, password) every request must carry it.
    pub async fn start(
        cp: &ControlPlane,
        charts: &[&Path],
        basic_auth: Option<(&str, &str)>,
    ) -> io::Result<Self> {
        Self::start_packaged_with(cp, charts, basic_auth, &[]).await
    }

    /// [`ChartRepo::start`], each chart packaged with `package_args` too
    /// (`--sign --key … --keyring …`: a `.prov` beside each archive).
    pub async fn start_packaged_with(
        cp: &ControlPlane,
        charts: &[&Path],
        basic_auth: Option<(&str, &str)>,
        package_args: &[&str],
    ) -> io::Result<Self> {
        let dir = tempfile::tempdir()?;
        for chart in charts {
            run(cp
                .helm()
                .arg("package")
                .arg(chart)
                .args(package_args)
                .arg("--destination")
                .arg(dir.path())
                .stdin(std::process::Stdio::null()))?;
        }
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let url = format!("http://{}", listener.local_addr()?);
        run(cp
            .helm()
            .args(["repo", "index"])
            .arg(dir.path())
            .args(["--url", &url]))?;
        use base64::Engine;
        let shared = Arc::new(Shared {
            root: dir.path().to_path_buf(),
            auth: basic_auth.map(|(u, p)| {
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
                )
            }),
            down: AtomicBool::new(false),
            served: AtomicUsize::new(0),
        });
        let task = tokio::spawn({
            let shared = shared.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, shared.clone()));
                }
            }
        });
        Ok(ChartRepo {
            url,
            dir,
            shared,
            task,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The directory served (the `.tgz` files and `index.yaml`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Indexes the served directory again (after a test changed a file).
    pub fn reindex(&self, cp: &ControlPlane) -> io::Result<()> {
        run(cp
            .helm()
            .args(["repo", "index"])
            .arg(self.dir.path())
            .args(["--url", &self.url]))
    }

    /// While down, every request gets 503.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Relaxed);
    }

    /// Requests answered 200 so far.
    pub fn served(&self) -> usize {
        self.shared.served.load(Relaxed)
    }
}

impl Drop for ChartRepo {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn run(cmd: &mut std::process::Command) -> io::Result<()> {
    let out = cmd.output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// A request's head (`None`: the client went away, or sent 64 KiB without
/// one) and its path.
pub(crate) async fn request_head(stream: &mut TcpStream) -> Option<(String, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let path = head
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("/")
        .to_string();
    Some((head, path))
}

async fn serve(mut stream: TcpStream, shared: Arc<Shared>) {
    let Some((head, path)) = request_head(&mut stream).await else {
        return;
    };
    let authorized = shared.auth.as_ref().is_none_or(|want| {
        head.lines().any(|l| {
            l.split_once(':')
                .is_some_and(|(k, v)| k.eq_ignore_ascii_case("authorization") && v.trim() == want)
        })
    });
    // Only plain file names under the root: no traversal.
    let name = path.trim_start_matches('/');
    let file = (!name.contains('/') && !name.contains("..") && !name.is_empty())
        .then(|| shared.root.join(name));
    let (status, body) = if shared.down.load(Relaxed) {
        ("503 Service Unavailable", Vec::new())
    } else if !authorized {
        ("401 Unauthorized", Vec::new())
    } else {
        match file.map(std::fs::read) {
            Some(Ok(bytes)) => {
                shared.served.fetch_add(1, Relaxed);
                ("200 OK", bytes)
            }
            _ => ("404 Not Found", Vec::new()),
        }
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.write_all(&body).await;
}
