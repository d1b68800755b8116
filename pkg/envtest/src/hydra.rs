//! A real OIDC provider on loopback: Ory Hydra v2 (built by
//! `hack/setup-envtest.sh`), in memory, in dev mode (plain HTTP), with a
//! login-and-consent app of the test's — Hydra has no login form of its
//! own. The app shows a form (username, password) that a test or a
//! browser fills; a known user's sign-in is accepted with their name as
//! the subject, and consent is given at once with the ID token carrying
//! `email` (the name) and `groups` (theirs).
//!
//! ```no_run
//! # async fn demo() -> Result<(), envtest::Error> {
//! let hydra = envtest::Hydra::start(&envtest::Assets::locate(), &[("alice", &["team-a"])], None).await?;
//! hydra.client("hossted-ui", "s3cret", "http://127.0.0.1:8080/callback")?;
//! // --oidc-issuer hydra.issuer(); a browser signs in as alice with
//! // envtest::hydra::password_of("alice").
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::process::{Spawner, Supervised};
use crate::util::{OUTPUT_TAIL_LINES, free_port};
use crate::{Assets, Error};

/// The password of test user `name`.
pub fn password_of(name: &str) -> String {
    format!("pw-{name}")
}

/// A running Hydra and its login app; both stop when dropped.
pub struct Hydra {
    issuer: String,
    admin: String,
    app: JoinHandle<()>,
    _dir: tempfile::TempDir,
    // Dropped before the spawner: killed and reaped first.
    _process: Supervised,
    _spawner: Spawner,
}

impl Drop for Hydra {
    fn drop(&mut self) {
        self.app.abort();
    }
}

impl Hydra {
    /// Starts Hydra with `users` (name → groups); `id_token_ttl` (default
    /// one hour) for tests of expiry. Waits until its discovery answers.
    pub async fn start(
        assets: &Assets,
        users: &[(&str, &[&str])],
        id_token_ttl: Option<Duration>,
    ) -> Result<Hydra, Error> {
        let binary = assets.binary("hydra")?;
        let dir = tempfile::tempdir()?;
        let (public, admin) = (free_port()?, free_port()?);
        let app_listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let app_url = format!("http://127.0.0.1:{}", app_listener.local_addr()?.port());
        let admin_url = format!("http://127.0.0.1:{admin}");
        let users: HashMap<String, Vec<String>> = users
            .iter()
            .map(|(n, g)| (n.to_string(), g.iter().map(|s| s.to_string()).collect()))
            .collect();
        let app = tokio::spawn(login_app(
            app_listener,
            Arc::new(App {
                admin: admin_url.clone(),
                users,
            }),
        ));
        let ttl = format!(
            "{}s",
            id_token_ttl.unwrap_or(Duration::from_secs(3600)).as_secs()
        );
        let env: Vec<(&str, String)> = vec![
            ("DSN", "memory".into()),
            ("URLS_SELF_ISSUER", format!("http://127.0.0.1:{public}/")),
            ("URLS_LOGIN", format!("{app_url}/login")),
            ("URLS_CONSENT", format!("{app_url}/consent")),
            ("URLS_LOGOUT", format!("{app_url}/logout")),
            (
                "SECRETS_SYSTEM",
                "envtest-hydra-system-secret-0123456789".into(),
            ),
            ("SERVE_PUBLIC_PORT", public.to_string()),
            ("SERVE_PUBLIC_HOST", "127.0.0.1".into()),
            ("SERVE_ADMIN_PORT", admin.to_string()),
            ("SERVE_ADMIN_HOST", "127.0.0.1".into()),
            ("TTL_ID_TOKEN", ttl.clone()),
            ("TTL_ACCESS_TOKEN", ttl),
            ("STRATEGIES_ACCESS_TOKEN", "opaque".into()),
            ("SQA_OPT_OUT", "true".into()),
            ("LOG_LEVEL", "warn".into()),
        ];
        let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let spawner = Spawner::new()?;
        let mut process = spawner.spawn_with_env(
            "hydra",
            &binary,
            &["serve".into(), "all".into(), "--dev".into()],
            &env_refs,
            dir.path().join("hydra.log"),
        )?;
        let discovery = format!("http://127.0.0.1:{public}/.well-known/openid-configuration");
        let deadline = Instant::now() + Duration::from_secs(60);
        let issuer = loop {
            if let Some(status) = process.exited() {
                return Err(Error::StartFailed {
                    process: "hydra",
                    reason: format!("exited with {status}"),
                    output: process.output_tail(OUTPUT_TAIL_LINES),
                });
            }
            if let Ok(doc) = get_json(&discovery).await
                && let Some(issuer) = doc["issuer"].as_str()
            {
                break issuer.to_string();
            }
            if Instant::now() > deadline {
                return Err(Error::StartFailed {
                    process: "hydra",
                    reason: "its discovery did not answer within 60s".into(),
                    output: process.output_tail(OUTPUT_TAIL_LINES),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        Ok(Hydra {
            issuer,
            admin: admin_url,
            app,
            _dir: dir,
            _process: process,
            _spawner: spawner,
        })
    }

    /// The issuer, exactly as its discovery and tokens say it.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Registers a confidential client for the authorization code flow.
    pub fn client(&self, id: &str, secret: &str, redirect_uri: &str) -> Result<(), Error> {
        let body = json!({
            "client_id": id, "client_secret": secret,
            "redirect_uris": [redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "scope": "openid email profile groups",
            "token_endpoint_auth_method": "client_secret_basic",
        });
        let (status, answer) = send("POST", &format!("{}/admin/clients", self.admin), &body)
            .map_err(|e| Error::Http(format!("hydra: creating client {id}: {e}")))?;
        if status != 201 {
            return Err(Error::Http(format!(
                "hydra: creating client {id} answered {status}: {answer}"
            )));
        }
        Ok(())
    }
}

struct App {
    admin: String,
    users: HashMap<String, Vec<String>>,
}

/// A blocking JSON request to Hydra's admin API: (status, body).
fn send(method: &str, url: &str, body: &Value) -> Result<(u16, Value), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let json = ("Content-Type", "application/json");
    let mut resp = match method {
        "PUT" => agent.put(url).header(json.0, json.1).send(body.to_string()),
        "POST" => agent
            .post(url)
            .header(json.0, json.1)
            .send(body.to_string()),
        _ => agent.get(url).call(),
    }
    .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let text = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| e.to_string())?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
}

async fn get_json(url: &str) -> Result<Value, String> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || send("GET", &url, &Value::Null))
        .await
        .map_err(|e| e.to_string())?
        .and_then(|(status, v)| {
            if status == 200 {
                Ok(v)
            } else {
                Err(status.to_string())
            }
        })
}

async fn login_app(listener: TcpListener, app: Arc<App>) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(serve(stream, app.clone()));
    }
}

/// One request (the app closes each connection after its answer).
async fn serve(mut stream: tokio::net::TcpStream, app: Arc<App>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if buf.len() > 64 * 1024 {
            return;
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let length: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
        .min(64 * 1024);
    while buf.len() < end + 4 + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + length]).into_owned();
    let mut line = head.lines().next().unwrap_or_default().split(' ');
    let (method, target) = (line.next().unwrap_or(""), line.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let app = app.clone();
    let (method, path, query) = (method.to_string(), path.to_string(), query.to_string());
    let answer = tokio::task::spawn_blocking(move || answer(&app, &method, &path, &query, &body))
        .await
        .unwrap_or_else(|_| page(500, "the login app failed"));
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn form(s: &str) -> HashMap<String, String> {
    s.split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn page(status: u16, body: &str) -> String {
    format!(
        "HTTP/1.1 {status} X\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn found(location: &str) -> String {
    format!(
        "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
}

/// The login form, the sign-in checked and accepted, consent given.
fn answer(app: &App, method: &str, path: &str, query: &str, body: &str) -> String {
    let q = form(query);
    match (method, path) {
        ("GET", "/login") => {
            let challenge = escape(q.get("login_challenge").map_or("", String::as_str));
            page(
                200,
                &format!(
                    "<!DOCTYPE html><html lang=\"en\"><head><title>Sign in</title></head><body><form method=\"post\" action=\"/login\"><input type=\"hidden\" name=\"challenge\" value=\"{challenge}\"><label>User <input id=\"username\" name=\"username\"></label><label>Password <input id=\"password\" type=\"password\" name=\"password\"></label><button id=\"sign-in\" type=\"submit\">Sign in</button></form></body></html>"
                ),
            )
        }
        ("POST", "/login") => {
            let f = form(body);
            let (user, password) = (
                f.get("username").cloned().unwrap_or_default(),
                f.get("password").cloned().unwrap_or_default(),
            );
            let challenge = f.get("challenge").cloned().unwrap_or_default();
            if !app.users.contains_key(&user) || password != password_of(&user) {
                return page(401, "<p id=\"wrong\">Wrong user or password</p>");
            }
            let url = format!(
                "{}/admin/oauth2/auth/requests/login/accept?login_challenge={}",
                app.admin,
                encode(&challenge)
            );
            match send("PUT", &url, &json!({ "subject": user })) {
                Ok((200, v)) => found(v["redirect_to"].as_str().unwrap_or("/")),
                other => page(502, &escape(&format!("login accept: {other:?}"))),
            }
        }
        ("GET", "/consent") => {
            let challenge = q.get("consent_challenge").cloned().unwrap_or_default();
            let url = format!(
                "{}/admin/oauth2/auth/requests/consent?consent_challenge={}",
                app.admin,
                encode(&challenge)
            );
            let request = match send("GET", &url, &Value::Null) {
                Ok((200, v)) => v,
                other => return page(502, &escape(&format!("consent request: {other:?}"))),
            };
            let subject = request["subject"].as_str().unwrap_or_default().to_string();
            let groups = app.users.get(&subject).cloned().unwrap_or_default();
            let accept = json!({
                "grant_scope": request["requested_scope"],
                "grant_access_token_audience": request["requested_access_token_audience"],
                "session": { "id_token": { "email": subject, "email_verified": true, "groups": groups } },
            });
            let url = format!(
                "{}/admin/oauth2/auth/requests/consent/accept?consent_challenge={}",
                app.admin,
                encode(&challenge)
            );
            match send("PUT", &url, &accept) {
                Ok((200, v)) => found(v["redirect_to"].as_str().unwrap_or("/")),
                other => page(502, &escape(&format!("consent accept: {other:?}"))),
            }
        }
        _ => page(404, "not found"),
    }
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
