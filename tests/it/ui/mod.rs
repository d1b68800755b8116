//! `kubectl hossted ui`, run as its own process with a user's kubeconfig
//! against a real control plane: what it lists and refuses over HTTP
//! (`access.rs`), and the pages in a real headless Chromium
//! (`browser.rs`).

mod access;
mod browser;
mod served;

use std::path::Path;

use envtest::browser::WebApp;

/// `hossted-operator ui --no-open` as the user of `kubeconfig`.
pub(crate) async fn start_ui(kubeconfig: &Path, helm: &Path, extra: &[&str]) -> WebApp {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_hossted-operator"));
    cmd.args(["ui", "--no-open", "--helm-binary"])
        .arg(helm)
        .args(extra)
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "warn");
    WebApp::start(cmd)
        .await
        .expect("the UI starts and prints its URL")
}

/// One HTTP exchange.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub refusal: Option<String>,
    pub set_cookie: Option<String>,
    pub location: Option<String>,
    pub body: String,
}

/// `method url` with `cookie` and, for a POST, a form body; redirects not
/// followed. Blocking ureq on a blocking thread: the operator under test
/// shares this test's runtime.
pub(crate) async fn exchange(
    method: &'static str,
    url: &str,
    cookie: Option<&str>,
    form: Option<String>,
) -> Answer {
    let (url, cookie) = (url.to_string(), cookie.map(str::to_string));
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into();
        let mut r = match (method, form) {
            ("POST", Some(form)) => {
                let mut req = agent
                    .post(&url)
                    .header("Content-Type", "application/x-www-form-urlencoded");
                if let Some(c) = &cookie {
                    req = req.header("Cookie", c);
                }
                req.send(form).unwrap()
            }
            _ => {
                let mut req = agent.get(&url);
                if let Some(c) = &cookie {
                    req = req.header("Cookie", c);
                }
                req.call().unwrap()
            }
        };
        let header = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let (refusal, set_cookie, location) = (
            header("x-refusal"),
            header("set-cookie"),
            header("location"),
        );
        Answer {
            status: r.status().as_u16(),
            refusal,
            set_cookie,
            location,
            body: r.body_mut().read_to_string().unwrap_or_default(),
        }
    })
    .await
    .unwrap()
}

/// Signs in with the one-time URL: the session cookie (`name=value`).
pub(crate) async fn sign_in(ui: &WebApp) -> String {
    let a = exchange("GET", &ui.login_url, None, None).await;
    assert_eq!(a.status, 303, "{a:?}");
    let set = a.set_cookie.expect("a session cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    set.split(';').next().unwrap().to_string()
}

/// The CSRF token a page carries.
pub(crate) fn csrf_of(html: &str) -> String {
    let at = html
        .find("name=\"csrf-token\" content=\"")
        .expect("the page carries a CSRF token");
    let rest = &html[at + "name=\"csrf-token\" content=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// Whether `html` has an overview row for app `ns/name`.
pub(crate) fn lists_app(html: &str, ns: &str, name: &str) -> bool {
    html.contains(&format!("data-app=\"{ns}/{name}\""))
}
