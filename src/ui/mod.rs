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
mod named;
pub mod oidc;
mod pages;
mod remedies;
mod served;
mod server;
mod session;
mod state;
mod tree;

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
    #[command(flatten)]
    pub served: ServeArgs,
}

/// `hossted-operator ui --serve`: the view served in the cluster to every
/// signed-in user (docs/ui.md "Served in the cluster").
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Serve the UI in the cluster: sign-in with OIDC, every request made
    /// as the signed-in user (impersonated).
    #[arg(long)]
    pub serve: bool,
    /// Where to listen (with --serve), behind TLS termination.
    #[arg(long, default_value = "0.0.0.0:8080", env = "HOSSTED_UI_LISTEN")]
    pub listen: std::net::SocketAddr,
    /// The address users open (with --serve): the OIDC redirect URI is
    /// `<public-url>/callback`, and forms must come from its origin.
    #[arg(long, env = "HOSSTED_UI_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// The OIDC issuer (`ui.oidc.issuer`).
    #[arg(long, env = "HOSSTED_UI_OIDC_ISSUER")]
    pub oidc_issuer: Option<String>,
    /// The OIDC client ID (`ui.oidc.clientID`).
    #[arg(long, env = "HOSSTED_UI_OIDC_CLIENT_ID")]
    pub oidc_client_id: Option<String>,
    /// A file holding the OIDC client secret (`ui.oidc.clientSecretRef`,
    /// mounted): never on the command line.
    #[arg(long, env = "HOSSTED_UI_OIDC_CLIENT_SECRET_FILE")]
    pub oidc_client_secret_file: Option<PathBuf>,
    /// The ID token claim that names the user.
    #[arg(long, default_value = "email")]
    pub oidc_username_claim: String,
    /// The ID token claim that lists the user's groups.
    #[arg(long, default_value = "groups")]
    pub oidc_groups_claim: String,
    /// The scopes asked for (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "openid,email,profile")]
    pub oidc_scopes: Vec<String>,
    /// Put before every username (as the apiserver's
    /// --oidc-username-prefix, so RBAC names the same users).
    #[arg(long, default_value = "")]
    pub oidc_username_prefix: String,
    /// Put before every group.
    #[arg(long, default_value = "")]
    pub oidc_groups_prefix: String,
    /// Without OIDC: serve read-only to anyone (`read-only` is the one
    /// value); shows no values and nothing read from releases.
    #[arg(long, value_parser = ["read-only"])]
    pub anonymous: Option<String>,
    /// The user the shared watches and the Events naming who acted are
    /// made as (impersonated; the chart grants it read of HelmApps and
    /// HelmAppSets and creation of Events).
    #[arg(long, default_value = "hossted-ui:reader")]
    pub reader_user: String,
    /// Live streams one user may hold at once.
    #[arg(long, default_value_t = 8)]
    pub max_streams_per_user: usize,
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
    if args.served.serve {
        return run_served(args).await;
    }
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
        access: server::Access::Local {
            client: client.clone(),
            gate,
        },
        live,
        kinds: details::Kinds::default(),
        helm_binary: args.helm_binary.clone(),
        diffs: Default::default(),
        renders: tokio::sync::Semaphore::new(1),
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

/// `ui --serve`: the provider discovered, the shared watches started as
/// the reader, then served until interrupted.
async fn run_served(args: &UiArgs) -> Result<(), String> {
    let a = &args.served;
    let base = kube::Config::infer()
        .await
        .map_err(|e| format!("no cluster configuration (in-cluster or kubeconfig): {e}"))?;
    let reader = served::impersonating(&base, &a.reader_user, &[])?;
    let provider = match (&a.oidc_issuer, &a.anonymous) {
        (Some(issuer), _) => Some(provider(a, issuer).await?),
        (None, Some(_)) => None,
        (None, None) => {
            return Err(
                "--serve needs single sign-on (--oidc-issuer, --oidc-client-id, --oidc-client-secret-file, --public-url) or --anonymous read-only"
                    .into(),
            );
        }
    };
    let public_origin = match &a.public_url {
        Some(url) => origin_of(url)?,
        None if provider.is_none() => String::new(),
        None => return Err("--serve with OIDC needs --public-url".into()),
    };
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", a.listen))?;
    let live = live::Live::start(reader.clone(), &args.namespace)
        .await
        .map_err(|e| format!("the shared watches (as {}): {e}", a.reader_user))?;
    runtime::memory::release_free_memory();
    let mode = if provider.is_some() {
        "single sign-on"
    } else {
        "anonymous, read-only"
    };
    log::info!(
        "ui: serving on {} ({mode}); watches as {}",
        a.listen,
        a.reader_user
    );
    let ui = Arc::new(server::Ui {
        access: server::Access::Served(served::Served::new(
            base,
            provider,
            public_origin,
            reader,
            a.max_streams_per_user,
        )),
        live,
        kinds: details::Kinds::default(),
        helm_binary: args.helm_binary.clone(),
        diffs: Default::default(),
        renders: tokio::sync::Semaphore::new(1),
    });
    tokio::select! {
        () = server::serve(ui, listener) => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// The OIDC provider the flags name, discovered.
async fn provider(a: &ServeArgs, issuer: &str) -> Result<oidc::Provider, String> {
    let client_id = a
        .oidc_client_id
        .clone()
        .ok_or("--oidc-issuer needs --oidc-client-id")?;
    let secret_file = a
        .oidc_client_secret_file
        .as_ref()
        .ok_or("--oidc-issuer needs --oidc-client-secret-file")?;
    let client_secret = std::fs::read_to_string(secret_file)
        .map_err(|e| format!("--oidc-client-secret-file {}: {e}", secret_file.display()))?
        .trim()
        .to_string();
    let public_url = a
        .public_url
        .as_deref()
        .ok_or("--oidc-issuer needs --public-url")?;
    oidc::Provider::discover(oidc::OidcConfig {
        issuer: issuer.to_string(),
        client_id,
        client_secret,
        redirect_uri: format!("{}/callback", public_url.trim_end_matches('/')),
        scopes: a.oidc_scopes.clone(),
        username_claim: a.oidc_username_claim.clone(),
        groups_claim: a.oidc_groups_claim.clone(),
        username_prefix: a.oidc_username_prefix.clone(),
        groups_prefix: a.oidc_groups_prefix.clone(),
        reserved_users: vec![a.reader_user.clone()],
    })
    .await
}

/// `scheme://host[:port]` of `url`.
fn origin_of(url: &str) -> Result<String, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("--public-url {url}: {e}"))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some(scheme @ ("http" | "https")), Some(authority)) => {
            Ok(format!("{scheme}://{authority}"))
        }
        _ => Err(format!("--public-url {url}: an http(s) URL")),
    }
}
