//! A real headless Chromium (Debian's `chromium`) driven over WebDriver:
//! `chromedriver` on a free loopback port, a fantoccini session on it.
//! `hack/test.sh` installs both (`chromium`, `chromium-driver`) when
//! missing.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Error;

/// A browser session; the driver (and its browser) stop when dropped.
pub struct Browser {
    pub client: fantoccini::Client,
    driver: Child,
}

fn find(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    names.iter().find_map(|n| {
        std::env::split_paths(&path)
            .map(|d| d.join(n))
            .find(|p| p.is_file())
    })
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a `width`×`height`
    /// window.
    pub async fn start(width: u32, height: u32) -> Result<Browser, Error> {
        Self::start_with(width, height, &[]).await
    }

    /// [`Browser::start`] with more Chromium flags (`--force-dark-mode`: the
    /// system's dark setting, as `prefers-color-scheme` reports it).
    pub async fn start_with(width: u32, height: u32, flags: &[&str]) -> Result<Browser, Error> {
        let missing = |name: &'static str| Error::AssetMissing {
            name,
            dir: PathBuf::from(
                "/usr/bin (apt-get install chromium chromium-driver; hack/test.sh does)",
            ),
        };
        let driver_bin = find(&["chromedriver"]).ok_or_else(|| missing("chromedriver"))?;
        let chromium = find(&["chromium", "chromium-browser", "google-chrome"])
            .ok_or_else(|| missing("chromium"))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut cmd = Command::new(&driver_bin);
        cmd.arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Killed with the test binary, too (on the death of the spawning
        // thread, which lives as long as the test).
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut driver = cmd.spawn()?;
        let url = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(20) || driver.try_wait()?.is_some() {
                let _ = driver.kill();
                return Err(Error::StartFailed {
                    process: "chromedriver",
                    reason: "did not listen within 20 s".into(),
                    output: String::new(),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = std::env::temp_dir().join(format!("envtest-chromium-{port}"));
        let mut args: Vec<String> = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-extensions",
            "--hide-scrollbars",
        ]
        .iter()
        .chain(flags)
        .map(|s| s.to_string())
        .collect();
        args.push(format!("--window-size={width},{height}"));
        args.push(format!("--user-data-dir={}", profile.display()));
        let caps =
            serde_json::json!({ "goog:chromeOptions": { "binary": chromium, "args": args } });
        let serde_json::Value::Object(caps) = caps else {
            unreachable!()
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = fantoccini::ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&url)
            .await
            .map_err(|e| Error::StartFailed {
                process: "chromium",
                reason: e.to_string(),
                output: String::new(),
            })?;
        Ok(Browser { client, driver })
    }

    /// Ends the session (the browser exits), then the driver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}

/// A local web app run as a child process that prints its login URL as
/// the first line of its stdout (`kubectl hossted ui --no-open`); killed
/// when dropped.
pub struct WebApp {
    child: tokio::process::Child,
    /// The URL printed, with its one-time token.
    pub login_url: String,
    /// `http://<its loopback address>:<port>`.
    pub origin: String,
}

impl WebApp {
    /// Runs `cmd` and waits (up to 90 s) for its URL.
    pub async fn start(mut cmd: Command) -> Result<WebApp, Error> {
        use tokio::io::AsyncBufReadExt;
        let log = std::env::temp_dir().join(format!("envtest-webapp-{}.log", std::process::id()));
        let log_file = std::fs::File::create(&log)?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file);
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().expect("piped");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(90), lines.next_line()).await;
        let url = match first {
            Ok(Ok(Some(line))) if line.starts_with("http://") => line,
            other => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                return Err(Error::StartFailed {
                    process: "web app",
                    reason: format!("printed no URL: {other:?}"),
                    output: std::fs::read_to_string(&log).unwrap_or_default(),
                });
            }
        };
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let origin = url.split('/').take(3).collect::<Vec<_>>().join("/");
        Ok(WebApp {
            child,
            login_url: url,
            origin,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Resident memory of the process now (`VmRSS`), in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    }
}
