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
    match args.next().as_deref() {
        Some("up") => {}
        Some("receive") => return receive(args).await,
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    }
    let mut kubeconfig_out: Option<PathBuf> = None;
    let mut once = false;
    let mut charts: Vec<PathBuf> = Vec::new();
    let mut repo_out: Option<PathBuf> = None;
    let mut builder = envtest::ControlPlane::builder();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--kubeconfig-out" => match args.next() {
                Some(p) => kubeconfig_out = Some(p.into()),
                None => return usage_error("--kubeconfig-out needs a path"),
            },
            "--apiserver-arg" => match args.next() {
                Some(a) => builder = builder.apiserver_arg(a),
                None => return usage_error("--apiserver-arg needs a flag"),
            },
            "--once" => once = true,
            "--chart" => match args.next() {
                Some(d) => charts.push(d.into()),
                None => return usage_error("--chart needs a chart directory"),
            },
            "--chart-repo-out" => match args.next() {
                Some(p) => repo_out = Some(p.into()),
                None => return usage_error("--chart-repo-out needs a path"),
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => return usage_error(&format!("unknown argument {other}")),
        }
    }

    let started = Instant::now();
    eprintln!(
        "envtest: starting etcd + kube-apiserver v{} ...",
        envtest::kubernetes_version()
    );
    let cp = match builder.start().await {
        Ok(cp) => cp,
        Err(e) => {
            eprintln!("envtest: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (etcd_pid, apiserver_pid) = cp.pids();
    println!(
        "envtest: ready in {:.2}s at {} (etcd pid {etcd_pid}, kube-apiserver pid {})",
        started.elapsed().as_secs_f64(),
        cp.server_url(),
        apiserver_pid.map(|p| p.to_string()).unwrap_or_default()
    );
    let mut kubeconfig = cp.kubeconfig_path().to_path_buf();
    if let Some(out) = kubeconfig_out {
        let tmp = out.with_extension("tmp");
        if let Err(e) =
            std::fs::copy(cp.kubeconfig_path(), &tmp).and_then(|_| std::fs::rename(&tmp, &out))
        {
            eprintln!("envtest: cannot write {}: {e}", out.display());
            return ExitCode::FAILURE;
        }
        kubeconfig = out;
    }
    println!("KUBECONFIG={}", kubeconfig.display());
    // Kept alive (serving) until the control plane stops.
    let _repo = if charts.is_empty() {
        None
    } else {
        let dirs: Vec<&std::path::Path> = charts.iter().map(|c| c.as_path()).collect();
        let repo = match envtest::ChartRepo::start(&cp, &dirs, None).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("envtest: cannot serve the charts: {e}");
                return ExitCode::FAILURE;
            }
        };
        println!("envtest: chart repository at {}", repo.url());
        if let Some(out) = &repo_out {
            let tmp = out.with_extension("tmp");
            if let Err(e) =
                std::fs::write(&tmp, repo.url()).and_then(|_| std::fs::rename(&tmp, out))
            {
                eprintln!("envtest: cannot write {}: {e}", out.display());
                return ExitCode::FAILURE;
            }
        }
        Some(repo)
    };
    if once {
        return ExitCode::SUCCESS;
    }

    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("envtest: cannot listen for SIGTERM: {e}");
            return ExitCode::FAILURE;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!("envtest: stopping");
    drop(cp);
    ExitCode::SUCCESS
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
