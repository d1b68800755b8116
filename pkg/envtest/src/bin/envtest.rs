//! `envtest up`: starts a control plane, prints its kubeconfig path and keeps
//! it running until SIGINT/SIGTERM, then tears it down. Used by
//! `hack/run-local.sh` and handy for poking at the test cluster by hand.
//!
//! ```text
//! envtest up [--kubeconfig-out PATH] [--apiserver-arg FLAG]... [--once]
//!            [--chart DIR]... [--chart-repo-out PATH]
//! envtest receive [--port N]
//! ```
//! `--chart DIR` (repeatable) packages those chart directories into a chart
//! repository served on loopback for as long as the control plane runs;
//! `--chart-repo-out` writes its URL to PATH (atomically).
//! `receive` runs a stand-in for the Hossted API on 127.0.0.1 that answers
//! 200 and pretty-prints every request it gets.
//! `--kubeconfig-out` copies the admin kubeconfig to PATH once the control
//! plane is ready (written atomically, so a script may wait for the file).
//! `--once` stops right after it is ready (to time start-up).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "usage: envtest up [--kubeconfig-out PATH] [--apiserver-arg FLAG]... [--once] [--chart DIR]... [--chart-repo-out PATH]\n       envtest receive [--port N]";

#[tokio::main]
async fn main() -> ExitCode {
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("info,kube_client::client::builder=off"),
    )
    .init();
    let mut args = std::env::args().skip(1);
    let result = match args.next().as_deref() {
        Some("up") => match Up::parse(args) {
            Ok(Some(up)) => up.run().await,
            Ok(None) => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            Err(message) => return usage_error(&message),
        },
        Some("receive") => return receive(args).await,
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("envtest: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `envtest up`'s arguments.
struct Up {
    builder: envtest::Builder,
    kubeconfig_out: Option<PathBuf>,
    once: bool,
    charts: Vec<PathBuf>,
    repo_out: Option<PathBuf>,
}

impl Up {
    /// The arguments after `up`; `None`: `--help`.
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Up>, String> {
        let mut up = Up {
            builder: envtest::ControlPlane::builder(),
            kubeconfig_out: None,
            once: false,
            charts: Vec::new(),
            repo_out: None,
        };
        while let Some(arg) = args.next() {
            let mut value = |what: &str| args.next().ok_or(format!("{arg} needs {what}"));
            match arg.as_str() {
                "--kubeconfig-out" => up.kubeconfig_out = Some(value("a path")?.into()),
                "--apiserver-arg" => up.builder = up.builder.apiserver_arg(value("a flag")?),
                "--once" => up.once = true,
                "--chart" => up.charts.push(value("a chart directory")?.into()),
                "--chart-repo-out" => up.repo_out = Some(value("a path")?.into()),
                "-h" | "--help" => return Ok(None),
                other => return Err(format!("unknown argument {other}")),
            }
        }
        Ok(Some(up))
    }

    /// Starts the control plane (and the chart repository), says where
    /// they are, and keeps them until a signal (or `--once`).
    async fn run(self) -> Result<(), String> {
        let Up {
            builder,
            kubeconfig_out,
            once,
            charts,
            repo_out,
        } = self;
        let started = Instant::now();
        eprintln!(
            "envtest: starting etcd + kube-apiserver v{} ...",
            envtest::kubernetes_version()
        );
        let cp = builder.start().await.map_err(|e| e.to_string())?;
        let (etcd_pid, apiserver_pid) = cp.pids();
        println!(
            "envtest: ready in {:.2}s at {} (etcd pid {etcd_pid}, kube-apiserver pid {})",
            started.elapsed().as_secs_f64(),
            cp.server_url(),
            apiserver_pid.map(|p| p.to_string()).unwrap_or_default()
        );
        let kubeconfig = match &kubeconfig_out {
            Some(out) => {
                let written = std::fs::read(cp.kubeconfig_path())
                    .and_then(|bytes| write_atomically(out, &bytes));
                written.map_err(|e| format!("cannot write {}: {e}", out.display()))?;
                out.clone()
            }
            None => cp.kubeconfig_path().to_path_buf(),
        };
        println!("KUBECONFIG={}", kubeconfig.display());
        // Kept alive (serving) until the control plane stops.
        let _repo = serve_charts(&cp, &charts, repo_out.as_deref()).await?;
        if !once {
            until_signalled().await?;
            eprintln!("envtest: stopping");
        }
        drop(cp);
        Ok(())
    }
}

/// The `--chart` directories served as a repository, its URL written to
/// `--chart-repo-out`.
async fn serve_charts(
    cp: &envtest::ControlPlane,
    charts: &[PathBuf],
    repo_out: Option<&std::path::Path>,
) -> Result<Option<envtest::ChartRepo>, String> {
    if charts.is_empty() {
        return Ok(None);
    }
    let dirs: Vec<&std::path::Path> = charts.iter().map(|c| c.as_path()).collect();
    let repo = envtest::ChartRepo::start(cp, &dirs, None)
        .await
        .map_err(|e| format!("cannot serve the charts: {e}"))?;
    println!("envtest: chart repository at {}", repo.url());
    if let Some(out) = repo_out {
        write_atomically(out, repo.url().as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    }
    Ok(Some(repo))
}

/// `bytes` in `path`, written beside it first and renamed: a script waiting
/// for the file never reads half of it.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Until SIGINT or SIGTERM.
async fn until_signalled() -> Result<(), String> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot listen for SIGTERM: {e}"))?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    Ok(())
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("envtest: {msg}\n{USAGE}");
    ExitCode::from(2)
}

/// `envtest receive`: prints each request the stand-in API receives.
async fn receive(mut args: impl Iterator<Item = String>) -> ExitCode {
    let mut port = 0u16;
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next().and_then(|p| p.parse().ok())) {
            ("--port", Some(p)) => port = p,
            _ => return usage_error("receive takes --port N"),
        }
    }
    let receiver = match envtest::Receiver::start_on(port).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("envtest: cannot listen on 127.0.0.1:{port}: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("receiver: listening on {}", receiver.url());
    let mut printed = 0;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
            _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
        }
        let requests = receiver.requests();
        for r in &requests[printed..] {
            let body = serde_json::to_string_pretty(&r.json()).unwrap_or_default();
            println!(
                "receiver: {} {} -> {}\n{body}",
                r.method, r.path, r.answered
            );
        }
        printed = requests.len();
    }
}
