//! `kubectl hossted ui` (also `hossted-operator ui`): a web view of
//! HelmApps, HelmAppSets and the inventory, served on 127.0.0.1 to the
//! user's own browser, acting with the user's kubeconfig — every read and
//! write is theirs, so RBAC decides what they see and may do. Nothing is
//! deployed into the cluster. docs/ui.md says what each page shows.
//!
//! - `session.rs`: the one-time login token, the session cookie, CSRF.
//! - `live.rs`: informers with the user's client; a generation number
//!   that moves with every change (the `/events` stream).
//! - `state.rs`: an app's state (the overview's groups) from `Ready`.
//! - `remedies.rs`: what to do about each reason, from docs/delivery.md.
//! - `details.rs`: what a HelmApp page reads besides the HelmApp.
//! - `pages/`: the templates; `server.rs`: routing and actions.

mod details;
mod live;
pub mod oidc;
mod pages;
mod remedies;
mod server;
mod session;
mod state;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

pub use live::Scope;

/// `kubectl hossted ui`.
#[derive(Debug, clap::Args)]
pub struct UiArgs {
    /// The port (0: a free one), on a loopback address of its own
    /// (127.a.b.c).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Print the login URL instead of opening the browser.
    #[arg(long)]
    pub no_open: bool,
    /// Show these namespaces (repeatable); default: every namespace the
    /// user may list HelmApps in across the cluster, else the kubeconfig
    /// context's.
    #[arg(short, long)]
    pub namespace: Vec<String>,
    /// The helm binary that renders a pending change's diff.
    #[arg(long, default_value = "helm")]
    pub helm_binary: PathBuf,
}

/// Runs the UI until interrupted.
pub fn main(args: &UiArgs) -> ExitCode {
    // Also when run as `kubectl-hossted`, which skips the operator's main.
    runtime::memory::limit_arenas();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kubectl hossted ui: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubectl hossted ui: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &UiArgs) -> Result<(), String> {
    let client = kube::Client::try_default()
        .await
        .map_err(|e| format!("cannot reach the cluster of the current kubeconfig context: {e}"))?;
    let listener = listen(args.port).await?;
    let at = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!("kubectl hossted ui: reading HelmApps with your kubeconfig…");
    let live = live::Live::start(client.clone(), &args.namespace).await?;
    // The first LISTs' buffers, given back (as the operator does).
    runtime::memory::release_free_memory();
    match &live.scope {
        Scope::All => eprintln!("kubectl hossted ui: every namespace"),
        Scope::Namespaces(ns) => eprintln!("kubectl hossted ui: namespaces {}", ns.join(", ")),
    }
    let gate = session::Gate::new(at);
    let token = gate.login_token().unwrap_or_default();
    let ui = Arc::new(server::Ui {
        client,
        live,
        gate,
        kinds: details::Kinds::default(),
        helm_binary: args.helm_binary.clone(),
        diffs: Default::default(),
    });
    let url = format!("http://{at}/login?token={token}");
    if args.no_open || !open_browser(&url) {
        // The user's own terminal: the one place the token is shown.
        println!("{url}");
    } else {
        println!("kubectl hossted ui: opened http://{at}/ in your browser");
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    tokio::select! {
        () = server::serve(ui, listener) => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// A listener on a loopback address of its own (127.a.b.c, random): a
/// browser sends a cookie to every port of a host, so on 127.0.0.1 the
/// UI's session cookie would go to any other local server too. Falls back
/// to 127.0.0.1, saying so, where the loopback network is only that one
/// address.
async fn listen(port: u16) -> Result<tokio::net::TcpListener, String> {
    let b = *uuid::Uuid::new_v4().as_bytes();
    let own = std::net::Ipv4Addr::new(127, b[0], b[1], 1 + b[2] % 254);
    if let Ok(listener) = tokio::net::TcpListener::bind((own, port)).await {
        return Ok(listener);
    }
    eprintln!(
        "kubectl hossted ui: cannot listen on a loopback address of its own ({own}); on 127.0.0.1 the session cookie is also sent to other local servers"
    );
    tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1:{port}: {e}"))
}

/// Opens `url` in the user's browser without putting the token on any
/// command line (another local user can read argv): the browser is given
/// a file, readable by this user only, that forwards to `url`.
fn open_browser(url: &str) -> bool {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = std::env::temp_dir().join(format!("hossted-ui-{}", uuid::Uuid::new_v4().simple()));
    if std::fs::DirBuilder::new().mode(0o700).create(&dir).is_err() {
        return false;
    }
    let file = dir.join("open.html");
    let page = format!(
        "<!DOCTYPE html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={url}\"><title>hossted</title><a href=\"{url}\">Open the hossted UI</a>"
    );
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&file)
        .and_then(|mut f| std::io::Write::write_all(&mut f, page.as_bytes()));
    if written.is_err() {
        return false;
    }
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let opened = std::process::Command::new(opener)
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    // The browser has read it (or never will); the token is one-time.
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(30));
        let _ = std::fs::remove_dir_all(dir);
    });
    opened
}
