//! `hossted-operator ui --serve` against a real OIDC provider (Ory Hydra,
//! with the test's login app) and a real apiserver: signed-in users see
//! and do what their RBAC allows, each request impersonating them; the
//! UI's own identity may only impersonate; no session, a forged or ended
//! one, an expired one, a missing CSRF token or another origin changes
//! nothing.
//!
//! The "browser" here is a cookie jar over HTTP (every server is on
//! 127.0.0.1, where cookies are shared across ports as in a browser).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use apis::helmapp::HelmApp;
use envtest::Hydra;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

use crate::support::*;

const CLIENT_ID: &str = "hossted-ui";

/// The UI's identity may impersonate users and groups, nothing else; the
/// reader lists HelmApps and writes Events; team-a edits HelmApps in
/// team-a, viewers only read them.
const RBAC: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: { name: hossted-ui-impersonator }
rules:
- apiGroups: [""]
  resources: [users, groups]
  verbs: [impersonate]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: { name: hossted-ui-impersonator }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: hossted-ui-impersonator }
subjects: [{ kind: User, name: ui-sa, apiGroup: rbac.authorization.k8s.io }]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: { name: hossted-ui-reader }
rules:
- apiGroups: [hossted.com]
  resources: [helmapps, helmappsets]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: { name: hossted-ui-reader }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: hossted-ui-reader }
subjects: [{ kind: User, name: "hossted-ui:reader", apiGroup: rbac.authorization.k8s.io }]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: { name: editor, namespace: team-a }
rules:
- apiGroups: [hossted.com]
  resources: [helmapps, helmappsets]
  verbs: [get, list, watch, patch]
- apiGroups: [""]
  resources: [events, pods]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [apps]
  resources: [deployments, replicasets]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: { name: team-a-edits, namespace: team-a }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: Role, name: editor }
subjects: [{ kind: Group, name: team-a, apiGroup: rbac.authorization.k8s.io }]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: { name: viewer, namespace: team-a }
rules:
- apiGroups: [hossted.com]
  resources: [helmapps, helmappsets]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: { name: viewers-read, namespace: team-a }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: Role, name: viewer }
subjects: [{ kind: Group, name: viewers, apiGroup: rbac.authorization.k8s.io }]
"#;

/// One answer, with every cookie it set.
#[derive(Debug)]
struct Answer {
    /// The URL asked.
    url: String,
    status: u16,
    location: Option<String>,
    refusal: Option<String>,
    body: String,
}

/// A cookie jar over HTTP, redirects followed by hand.
#[derive(Default)]
struct Jar {
    cookies: BTreeMap<String, String>,
}

impl Jar {
    fn header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// One request; the cookies it sets kept (`Max-Age=0` removes).
    async fn go(
        &mut self,
        method: &'static str,
        url: &str,
        form: Option<String>,
        extra: &[(&str, &str)],
    ) -> Answer {
        let (url, cookie) = (url.to_string(), self.header());
        let extra: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (answer, set) = tokio::task::spawn_blocking(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .max_redirects(0)
                .build()
                .into();
            let mut r = if method == "POST" {
                let mut req = agent
                    .post(&url)
                    .header("Content-Type", "application/x-www-form-urlencoded");
                if !cookie.is_empty() {
                    req = req.header("Cookie", &cookie);
                }
                for (k, v) in &extra {
                    req = req.header(k, v);
                }
                req.send(form.unwrap_or_default()).unwrap()
            } else {
                let mut req = agent.get(&url);
                if !cookie.is_empty() {
                    req = req.header("Cookie", &cookie);
                }
                for (k, v) in &extra {
                    req = req.header(k, v);
                }
                req.call().unwrap()
            };
            let header = |name: &str| {
                r.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            let set: Vec<String> = r
                .headers()
                .get_all("set-cookie")
                .iter()
                .filter_map(|v| v.to_str().ok().map(str::to_string))
                .collect();
            let (location, refusal) = (header("location"), header("x-refusal"));
            let answer = Answer {
                url: url.clone(),
                status: r.status().as_u16(),
                location,
                refusal,
                body: r.body_mut().read_to_string().unwrap_or_default(),
            };
            (answer, set)
        })
        .await
        .unwrap();
        for c in set {
            let pair = c.split(';').next().unwrap_or_default();
            let Some((name, value)) = pair.split_once('=') else {
                continue;
            };
            let removed = c
                .split(';')
                .any(|a| a.trim().eq_ignore_ascii_case("Max-Age=0"))
                || value.is_empty();
            if removed {
                self.cookies.remove(name.trim());
            } else {
                self.cookies
                    .insert(name.trim().to_string(), value.to_string());
            }
        }
        answer
    }

    /// GET `url`, following redirects (relative ones against `base`).
    async fn follow(&mut self, base: &str, url: &str) -> Answer {
        let mut url = url.to_string();
        for _ in 0..20 {
            let a = self.go("GET", &url, None, &[]).await;
            match (a.status, &a.location) {
                (301..=303 | 307 | 308, Some(next)) => {
                    url = if next.starts_with('/') {
                        format!("{base}{next}")
                    } else {
                        next.clone()
                    };
                }
                _ => return a,
            }
        }
        panic!("more than 20 redirects from {url}");
    }
}

/// The value of `name="<field>" value="…"` in a form.
fn field(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let at = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in {html}"));
    let rest = &html[at + marker.len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// A served UI, killed when dropped.
struct Served {
    child: tokio::process::Child,
    url: String,
    log: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Served {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The cluster, its RBAC, HelmApps in team-a and team-b, Hydra with alice
/// (team-a) and bob (viewers), and the UI served as `ui-sa`.
async fn setup(f: &Fixture, id_token_ttl: Option<Duration>) -> (Hydra, Served) {
    f.helmapp_crd().await;
    for ns in ["team-a", "team-b"] {
        f.namespace(ns).await;
    }
    let file = f.cp.dir().join("served-rbac.yaml");
    std::fs::write(&file, RBAC).unwrap();
    f.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    apply_helmapp(f, "team-a", "web", json!({ "chart": { "path": "tiny" } })).await;
    apply_helmapp(f, "team-b", "db", json!({ "chart": { "path": "tiny" } })).await;

    let hydra = Hydra::start(
        f.cp.assets(),
        &[("alice", &["team-a"]), ("bob", &["viewers"])],
        id_token_ttl,
    )
    .await
    .expect("hydra starts");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    hydra
        .client(CLIENT_ID, "ui-client-secret", &format!("{url}/callback"))
        .expect("the UI's client registered");
    let secret = f.cp.dir().join("oidc-client-secret");
    std::fs::write(&secret, "ui-client-secret\n").unwrap();
    let kubeconfig = f.cp.kubeconfig_for_user("ui-sa", None).unwrap();
    let log = f.cp.dir().join(format!("served-ui-{port}.log"));
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_hossted-operator"));
    cmd.args(["ui", "--serve", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--public-url", &url, "--oidc-issuer", hydra.issuer()])
        .args(["--oidc-client-id", CLIENT_ID, "--oidc-client-secret-file"])
        .arg(&secret)
        .args(["--oidc-scopes", "openid,email,profile,groups"])
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "info")
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::options().append(true).open(&log).unwrap())
        .kill_on_drop(true);
    let child = cmd.spawn().expect("the UI runs");
    let served = Served { child, url, log };
    let health = format!("{}/healthz", served.url);
    let mut jar = Jar::default();
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
            && jar.go("GET", &health, None, &[]).await.status == 200
        {
            return (hydra, served);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "the served UI did not answer /healthz in 60 s:\n{}",
        served.log()
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Signs `user` in through the provider's login form: the jar then holds
/// the session; the overview's HTML.
async fn sign_in(ui: &Served, user: &str) -> (Jar, String) {
    let mut jar = Jar::default();
    let form_page = jar.follow(&ui.url, &format!("{}/", ui.url)).await;
    assert_eq!(form_page.status, 200, "{form_page:?}");
    assert!(
        form_page.body.contains("id=\"username\""),
        "{}",
        form_page.body
    );
    let challenge = field(&form_page.body, "challenge");
    // The form posts to `/login` of the app that served it.
    let origin: String = form_page
        .url
        .split('/')
        .take(3)
        .collect::<Vec<_>>()
        .join("/");
    let login = jar
        .go(
            "POST",
            &format!("{origin}/login"),
            Some(format!(
                "challenge={challenge}&username={user}&password={}",
                envtest::hydra::password_of(user)
            )),
            &[],
        )
        .await;
    assert_eq!(login.status, 302, "{login:?}");
    let overview = jar
        .follow(&ui.url, login.location.as_deref().unwrap())
        .await;
    assert_eq!(overview.status, 200, "{overview:?}\n{}", ui.log());
    assert!(
        overview.body.contains(&format!("data-user=\"{user}\"")),
        "not signed in as {user}: {}",
        overview.body
    );
    (jar, overview.body)
}

fn csrf_of(html: &str) -> String {
    super::csrf_of(html)
}

fn lists_app(html: &str, ns: &str, name: &str) -> bool {
    super::lists_app(html, ns, name)
}

/// A live stream (`/events`) read as raw bytes: each `data:` line is one
/// event.
struct LiveStream {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
    seen: usize,
}

impl LiveStream {
    async fn open(ui: &Served, jar: &Jar) -> LiveStream {
        use tokio::io::AsyncWriteExt;
        let host = ui.url.trim_start_matches("http://").to_string();
        let mut stream = tokio::net::TcpStream::connect(&host).await.unwrap();
        let request = format!(
            "GET /events HTTP/1.1\r\nHost: {host}\r\nCookie: {}\r\nAccept: text/event-stream\r\n\r\n",
            jar.header()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        LiveStream {
            stream,
            buf: Vec::new(),
            seen: 0,
        }
    }

    /// The next event's generation, if one comes within `wait`.
    async fn next_event(&mut self, wait: Duration) -> Option<u64> {
        use tokio::io::AsyncReadExt;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let text = String::from_utf8_lossy(&self.buf).into_owned();
            let events: Vec<u64> = text
                .split("data: ")
                .skip(1)
                .filter_map(|rest| rest.split('\n').next()?.trim().parse().ok())
                .collect();
            if events.len() > self.seen {
                self.seen += 1;
                return Some(events[self.seen - 1]);
            }
            let mut chunk = [0u8; 4096];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => return None,
            }
        }
    }
}

async fn events_by(f: &Fixture, ns: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(f.cp.client(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

fn user_of(e: &Event) -> Option<String> {
    e.metadata
        .annotations
        .as_ref()?
        .get("hossted.com/user")
        .cloned()
}

async fn annotation(f: &Fixture, ns: &str, name: &str, key: &str) -> Option<String> {
    let app = Api::<HelmApp>::namespaced(f.cp.client(), ns)
        .get(name)
        .await
        .unwrap();
    app.metadata.annotations?.get(key).cloned()
}

/// The apiserver's audit policy: every write of a HelmApp by the UI's
/// identity, at Metadata, once it is answered (the impersonated user is
/// known then, not when the request is received).
const AUDIT_POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [ui-sa]
  resources: [{ group: hossted.com, resources: [helmapps] }]
  verbs: [patch, update]
- level: None
"#;

/// The audit log's events: (verb, resource, name, user, impersonated user).
fn audited(log: &std::path::Path) -> Vec<(String, String, String, String, String)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|e| {
            let s = |p: &str| {
                e.pointer(p)
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_string()
            };
            (
                s("/verb"),
                s("/objectRef/resource"),
                s("/objectRef/name"),
                s("/user/username"),
                s("/impersonatedUser/username"),
            )
        })
        .collect()
}

#[tokio::test]
async fn signed_in_users_see_and_do_what_their_rbac_allows_as_themselves() {
    let audit = std::env::temp_dir().join(format!("served-ui-audit-{}", std::process::id()));
    std::fs::create_dir_all(&audit).unwrap();
    let (policy, log) = (audit.join("policy.yaml"), audit.join("audit.log"));
    std::fs::write(&policy, AUDIT_POLICY).unwrap();
    let cp = envtest::ControlPlane::builder()
        .apiserver_arg(format!("--audit-policy-file={}", policy.display()))
        .apiserver_arg(format!("--audit-log-path={}", log.display()))
        .start()
        .await
        .expect("a control plane with an audit log");
    let f = Fixture::on(cp).await;
    let (_hydra, ui) = setup(&f, None).await;

    // The UI's own identity, without impersonation, reads nothing.
    let own = f.cp.kubeconfig_for_user("ui-sa", None).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&own).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    let alone = kube::Client::try_from(config).unwrap();
    for api in [
        Api::<HelmApp>::all(alone.clone()),
        Api::<HelmApp>::namespaced(alone.clone(), "team-a"),
    ] {
        match api.list(&ListParams::default()).await {
            Err(kube::Error::Api(s)) => assert_eq!(s.code, 403),
            other => panic!("the UI's identity alone listed HelmApps: {other:?}"),
        }
    }

    let (mut alice, overview) = sign_in(&ui, "alice").await;
    assert!(lists_app(&overview, "team-a", "web"), "{overview}");
    assert!(
        !lists_app(&overview, "team-b", "db"),
        "team-b shown to alice"
    );

    // Her live stream hears of team-a's changes, not of team-b's.
    let mut stream = LiveStream::open(&ui, &alice).await;
    stream
        .next_event(Duration::from_secs(10))
        .await
        .expect("the first event");
    let touch = |ns: &'static str, name: &'static str| {
        let f = &f;
        async move {
            let labels = json!({ "metadata": { "labels": { "touched": "yes" } } });
            patch_helmapp(f, ns, name, labels).await
        }
    };
    touch("team-b", "db").await;
    assert_eq!(
        stream.next_event(Duration::from_secs(4)).await,
        None,
        "alice's stream told of a change in team-b"
    );
    touch("team-a", "web").await;
    assert!(
        stream.next_event(Duration::from_secs(15)).await.is_some(),
        "alice's stream did not tell of a change in team-a"
    );
    let other = alice
        .go("GET", &format!("{}/app/team-b/db", ui.url), None, &[])
        .await;
    assert_eq!(other.status, 404, "team-b's app shown to alice");

    // Reconcile and suspend, as alice: written, and an Event names her.
    let page = alice
        .go("GET", &format!("{}/app/team-a/web", ui.url), None, &[])
        .await;
    assert_eq!(page.status, 200);
    let csrf = csrf_of(&page.body);
    for action in ["reconcile", "suspend"] {
        let done = alice
            .go(
                "POST",
                &format!("{}/app/team-a/web/{action}", ui.url),
                Some(format!("csrf={csrf}")),
                &[],
            )
            .await;
        assert_eq!(done.status, 303, "{action}: {done:?}");
    }
    assert!(
        annotation(&f, "team-a", "web", "hossted.com/reconcile-at")
            .await
            .is_some()
    );
    assert_eq!(
        annotation(&f, "team-a", "web", "hossted.com/suspended-by")
            .await
            .as_deref(),
        Some("alice")
    );
    // The apiserver's own record: the UI's identity, impersonating alice.
    let records = eventually("the audit log's record of alice's patch", 30, || {
        let records: Vec<_> = audited(&log)
            .into_iter()
            .filter(|(verb, resource, name, _, _)| {
                verb == "patch" && resource == "helmapps" && name == "web"
            })
            .collect();
        async move { (!records.is_empty()).then_some(records) }
    })
    .await;
    for (_, _, _, user, impersonated) in &records {
        assert_eq!(
            (user.as_str(), impersonated.as_str()),
            ("ui-sa", "alice"),
            "a write not made as alice: {records:?}"
        );
    }
    for reason in ["ReconcileRequestedBy", "SuspendedBy"] {
        let named: Vec<_> = events_by(&f, "team-a", reason)
            .await
            .iter()
            .filter_map(user_of)
            .collect();
        assert_eq!(named, vec!["alice".to_string()], "{reason}");
    }

    // A change waiting for approval (as the operator writes it), and the
    // revision it became: approved by alice, the timeline says so.
    let pending = json!({ "status": {
        "pendingChange": { "chartVersion": "0.1.0", "configHash": "cafe0123", "diffLines": 3 },
        "history": [{ "action": "upgrade", "revision": 2, "chartVersion": "0.1.0",
                      "configHash": "cafe0123", "result": "succeeded",
                      "time": "2026-11-29T00:00:00Z", "duration": "3.1s" }] } });
    Api::<HelmApp>::namespaced(f.cp.client(), "team-a")
        .patch_status(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&pending),
        )
        .await
        .unwrap();
    let approved = alice
        .go(
            "POST",
            &format!("{}/app/team-a/web/approve", ui.url),
            Some(format!("csrf={csrf}&hash=cafe0123")),
            &[],
        )
        .await;
    assert_eq!(approved.status, 303, "{approved:?}");
    assert_eq!(
        annotation(&f, "team-a", "web", "hossted.com/approve")
            .await
            .as_deref(),
        Some("cafe0123")
    );
    let page = alice
        .go("GET", &format!("{}/app/team-a/web", ui.url), None, &[])
        .await;
    assert!(
        page.body
            .contains(r#"<tr data-history="2" data-result="succeeded" data-duration="3.1s">"#),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(r#"data-approved-by="alice""#),
        "the timeline does not say who approved: {}",
        page.body
    );

    // bob may read team-a, not patch: the apiserver's 403, nothing written.
    let before = annotation(&f, "team-a", "web", "hossted.com/reconcile-at").await;
    let (mut bob, overview) = sign_in(&ui, "bob").await;
    assert!(lists_app(&overview, "team-a", "web"));
    let page = bob
        .go("GET", &format!("{}/app/team-a/web", ui.url), None, &[])
        .await;
    let csrf = csrf_of(&page.body);
    let refused = bob
        .go(
            "POST",
            &format!("{}/app/team-a/web/reconcile", ui.url),
            Some(format!("csrf={csrf}")),
            &[],
        )
        .await;
    assert_eq!(refused.status, 403, "{refused:?}");
    assert!(
        refused.body.contains("data-error-status=\"403\""),
        "{}",
        refused.body
    );
    assert_eq!(
        annotation(&f, "team-a", "web", "hossted.com/reconcile-at").await,
        before
    );
    let named: Vec<_> = events_by(&f, "team-a", "ReconcileRequestedBy")
        .await
        .iter()
        .filter_map(user_of)
        .collect();
    assert_eq!(named, vec!["alice".to_string()], "an Event named bob");
}

#[tokio::test]
async fn no_forged_ended_expired_or_unchecked_session_changes_anything() {
    let f = Fixture::new().await;
    let (_hydra, ui) = setup(&f, Some(Duration::from_secs(8))).await;
    let reconcile = format!("{}/app/team-a/web/reconcile", ui.url);
    let written = || async { annotation(&f, "team-a", "web", "hossted.com/reconcile-at").await };

    // No session: a page goes to sign in; a stream or a form is refused.
    let mut none = Jar::default();
    let page = none.go("GET", &format!("{}/", ui.url), None, &[]).await;
    assert_eq!(page.status, 303);
    assert!(
        page.location
            .as_deref()
            .is_some_and(|l| l.starts_with("/login?")),
        "{page:?}"
    );
    let stream = none
        .go("GET", &format!("{}/events", ui.url), None, &[])
        .await;
    assert_eq!(
        (stream.status, stream.refusal.as_deref()),
        (403, Some("NoSession"))
    );
    let post = none
        .go("POST", &reconcile, Some("csrf=x".into()), &[])
        .await;
    assert_eq!(
        (post.status, post.refusal.as_deref()),
        (403, Some("NoSession"))
    );

    // A forged session cookie: not admitted.
    let mut forged = Jar::default();
    forged
        .cookies
        .insert("__Host-hossted-ui-session".into(), "0".repeat(64));
    let post = forged
        .go("POST", &reconcile, Some("csrf=x".into()), &[])
        .await;
    assert_eq!(
        (post.status, post.refusal.as_deref()),
        (403, Some("NoSession"))
    );

    // Signed in, but no CSRF token, a wrong one, or another origin.
    let (mut alice, overview) = sign_in(&ui, "alice").await;
    let csrf = csrf_of(&overview);
    for (form, origin, refusal) in [
        (String::new(), None, "NoCsrf"),
        ("csrf=wrong".to_string(), None, "NoCsrf"),
        (
            format!("csrf={csrf}"),
            Some("http://evil.example"),
            "ForeignOrigin",
        ),
    ] {
        let extra: Vec<(&str, &str)> = origin.iter().map(|o| ("Origin", *o)).collect();
        let post = alice.go("POST", &reconcile, Some(form), &extra).await;
        assert_eq!((post.status, post.refusal.as_deref()), (403, Some(refusal)));
    }
    assert_eq!(written().await, None, "a refused request wrote");

    // Logout ends the session on the server: the old cookie admits no one.
    let session = alice.cookies["__Host-hossted-ui-session"].clone();
    let out = alice
        .go(
            "POST",
            &format!("{}/logout", ui.url),
            Some(format!("csrf={csrf}")),
            &[],
        )
        .await;
    assert_eq!(out.status, 303, "{out:?}");
    let mut replay = Jar::default();
    replay
        .cookies
        .insert("__Host-hossted-ui-session".into(), session);
    let post = replay
        .go("POST", &reconcile, Some(format!("csrf={csrf}")), &[])
        .await;
    assert_eq!(
        (post.status, post.refusal.as_deref()),
        (403, Some("NoSession"))
    );

    // One user's sessions are bounded: the eleventh sign-in ends the first
    // (no one account can fill the server, or others' room to sign in).
    let (first, _) = sign_in(&ui, "bob").await;
    let first_cookie = first.cookies["__Host-hossted-ui-session"].clone();
    for _ in 0..10 {
        sign_in(&ui, "bob").await;
    }
    let mut oldest = Jar::default();
    oldest
        .cookies
        .insert("__Host-hossted-ui-session".into(), first_cookie);
    let page = oldest
        .go("GET", &format!("{}/events", ui.url), None, &[])
        .await;
    assert_eq!(
        (page.status, page.refusal.as_deref()),
        (403, Some("NoSession")),
        "bob's first of 11 sessions still admitted"
    );

    // A session whose ID token expired (8 s) admits no one.
    let (mut late, overview) = sign_in(&ui, "alice").await;
    let csrf = csrf_of(&overview);
    tokio::time::sleep(Duration::from_secs(9)).await;
    let post = late
        .go("POST", &reconcile, Some(format!("csrf={csrf}")), &[])
        .await;
    assert_eq!(
        (post.status, post.refusal.as_deref()),
        (403, Some("NoSession"))
    );
    assert_eq!(written().await, None, "a refused request wrote");
}

/// In a real Chromium: alice signs in through the provider's login form,
/// sees team-a only, reconciles her app (the HelmApp gets the request and
/// an Event naming her), and signs out (the page says so; the UI then
/// sends her to sign in again).
#[tokio::test]
async fn in_chromium_alice_signs_in_at_the_provider_reconciles_and_signs_out() {
    use super::browser::{shoot, shown};
    use envtest::browser::Browser;
    use envtest::fantoccini::Locator;

    let f = Fixture::new().await;
    let (_hydra, ui) = setup(&f, None).await;
    let b = Browser::start(1280, 900).await.unwrap();
    b.client.goto(&format!("{}/", ui.url)).await.unwrap();
    // The provider's login form (the test's login app, behind Hydra).
    shown(&b, "#username")
        .await
        .send_keys("alice")
        .await
        .unwrap();
    shown(&b, "#password")
        .await
        .send_keys(&envtest::hydra::password_of("alice"))
        .await
        .unwrap();
    shown(&b, "#sign-in").await.click().await.unwrap();
    // Back in the UI, signed in: team-a's app, not team-b's.
    shown(&b, r#"[data-user="alice"]"#).await;
    shown(&b, r#"tr[data-app="team-a/web"]"#).await;
    let other = b
        .client
        .find_all(Locator::Css(r#"tr[data-app="team-b/db"]"#))
        .await
        .unwrap();
    assert!(other.is_empty(), "team-b's app shown to alice");
    shoot(&b, "served-overview").await;

    b.client
        .goto(&format!("{}/app/team-a/web", ui.url))
        .await
        .unwrap();
    shown(&b, r#"button[data-action="reconcile"]"#)
        .await
        .click()
        .await
        .unwrap();
    eventually("the reconcile request written", 30, || async {
        annotation(&f, "team-a", "web", "hossted.com/reconcile-at").await
    })
    .await;
    // The Event follows the write (the click does not wait for either).
    let named = eventually("an Event naming who reconciled", 30, || async {
        let named: Vec<String> = events_by(&f, "team-a", "ReconcileRequestedBy")
            .await
            .iter()
            .filter_map(user_of)
            .collect();
        (!named.is_empty()).then_some(named)
    })
    .await;
    assert_eq!(named, vec!["alice".to_string()]);

    shown(&b, r#"button[data-action="logout"]"#)
        .await
        .click()
        .await
        .unwrap();
    shown(&b, r#"[data-signed-out="200"]"#).await;
    b.client.goto(&format!("{}/", ui.url)).await.unwrap();
    // Signed out: the provider's form again (Hydra remembers no one here:
    // its session is not asked to remember).
    shown(&b, "#username").await;
    b.close().await;
}

/// A release's workload, its ReplicaSet and Pod (made here: no controller
/// runs), the Pod on a node whose kubelet is the test's, and the HelmApp's
/// inventory naming the Deployment.
async fn running_release(f: &Fixture, kubelet: &envtest::FakeKubelet) {
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::{Patch, PatchParams, PostParams};
    let pp = PostParams::default();
    let node: Node = serde_json::from_value(json!({ "metadata": { "name": "node-1" } })).unwrap();
    let nodes = Api::<Node>::all(f.cp.client());
    nodes.create(&pp, &node).await.unwrap();
    nodes
        .patch_status(
            "node-1",
            &PatchParams::default(),
            &Patch::Merge(&kubelet.node("node-1")),
        )
        .await
        .unwrap();
    let labels = json!({ "app": "web" });
    let template = json!({ "metadata": { "labels": labels },
        "spec": { "containers": [{ "name": "app", "image": "web:1" }] } });
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": "team-a" },
        "spec": { "selector": { "matchLabels": labels }, "template": template } }))
    .unwrap();
    let d = Api::<Deployment>::namespaced(f.cp.client(), "team-a")
        .create(&pp, &deployment)
        .await
        .unwrap();
    let owner = |kind: &str, name: &str, uid: Option<String>| json!([{ "apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": true }]);
    let rs: ReplicaSet = serde_json::from_value(json!({
        "metadata": { "name": "web-abc", "namespace": "team-a",
                      "ownerReferences": owner("Deployment", "web", d.metadata.uid.clone()) },
        "spec": { "selector": { "matchLabels": labels }, "template": template } }))
    .unwrap();
    let rs = Api::<ReplicaSet>::namespaced(f.cp.client(), "team-a")
        .create(&pp, &rs)
        .await
        .unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "web-abc-1", "namespace": "team-a", "labels": labels,
                      "ownerReferences": owner("ReplicaSet", "web-abc", rs.metadata.uid.clone()) },
        "spec": { "nodeName": "node-1", "containers": [{ "name": "app", "image": "web:1" }] } }))
    .unwrap();
    let pods = Api::<Pod>::namespaced(f.cp.client(), "team-a");
    pods.create(&pp, &pod).await.unwrap();
    let running = json!({ "status": { "phase": "Running", "containerStatuses": [
        { "name": "app", "ready": true, "restartCount": 0, "image": "web:1", "imageID": "",
          "state": { "running": {} } }] } });
    pods.patch_status(
        "web-abc-1",
        &PatchParams::default(),
        &Patch::Merge(&running),
    )
    .await
    .unwrap();
    let inventory = json!({ "status": { "inventory": [
        { "apiVersion": "apps/v1", "kind": "Deployment", "namespace": "team-a", "name": "web" }] } });
    Api::<HelmApp>::namespaced(f.cp.client(), "team-a")
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&inventory))
        .await
        .unwrap();
}

/// In Chromium, as alice: the release's tree (Deployment → ReplicaSet →
/// Pod, each with its kstatus) and the Pod's logs through the apiserver
/// (`pods/log`, as alice) — a line holding markup shown as text, a line
/// written later streamed in.
#[tokio::test]
async fn in_chromium_the_resource_tree_and_pod_logs_are_shown_as_text() {
    use super::browser::{shoot, shown};
    use envtest::browser::Browser;
    use envtest::fantoccini::Locator;

    let f = Fixture::new().await;
    let (_hydra, ui) = setup(&f, None).await;
    let kubelet = envtest::FakeKubelet::start().await.unwrap();
    running_release(&f, &kubelet).await;
    let markup = "<b>bold</b> & <script>window.pwned=1</script>";
    kubelet.log("team-a", "web-abc-1", "app", "listening on :8080");
    kubelet.log("team-a", "web-abc-1", "app", markup);

    let b = Browser::start(1280, 900).await.unwrap();
    b.client.goto(&format!("{}/", ui.url)).await.unwrap();
    shown(&b, "#username")
        .await
        .send_keys("alice")
        .await
        .unwrap();
    shown(&b, "#password")
        .await
        .send_keys(&envtest::hydra::password_of("alice"))
        .await
        .unwrap();
    shown(&b, "#sign-in").await.click().await.unwrap();
    shown(&b, r#"[data-user="alice"]"#).await;
    b.client
        .goto(&format!("{}/app/team-a/web", ui.url))
        .await
        .unwrap();
    shown(
        &b,
        r#"li[data-node="Deployment/team-a/web"] li[data-node="ReplicaSet/team-a/web-abc"] li[data-node="Pod/team-a/web-abc-1"][data-kstatus="Current"]"#,
    )
    .await;
    shoot(&b, "served-tree").await;
    shown(
        &b,
        r#"li[data-node="Pod/team-a/web-abc-1"] a[data-logs="app"]"#,
    )
    .await
    .click()
    .await
    .unwrap();
    let log = shown(&b, r#"#log[data-log="app"]"#).await;
    let text = log.text().await.unwrap();
    assert!(
        text.contains(markup),
        "the markup line not shown as text: {text:?}"
    );
    assert!(
        b.client
            .find_all(Locator::Css("#log b, #log script"))
            .await
            .unwrap()
            .is_empty(),
        "a log line became markup"
    );
    let pwned = b
        .client
        .execute("return window.pwned === undefined;", vec![])
        .await
        .unwrap();
    assert_eq!(pwned, json!(true), "a log line ran as script");
    // A line written now is streamed in.
    tokio::time::sleep(Duration::from_secs(1)).await;
    kubelet.log("team-a", "web-abc-1", "app", "<i>later</i>");
    eventually("the later line streamed in", 30, || async {
        let text = log.text().await.ok()?;
        text.contains("<i>later</i>").then_some(())
    })
    .await;
    shoot(&b, "served-logs").await;

    // The timeline: a change that became revision 2, approved by alice in
    // this browser (a form post with the page's CSRF token).
    let pending = json!({ "status": {
        "pendingChange": { "chartVersion": "0.1.1", "configHash": "cafe0123", "diffLines": 3 },
        "history": [
            { "action": "upgrade", "revision": 2, "chartVersion": "0.1.1", "configHash": "cafe0123",
              "result": "succeeded", "time": "2026-11-29T10:05:00Z", "duration": "4.2s" },
            { "action": "install", "revision": 1, "chartVersion": "0.1.0", "configHash": "beef4567",
              "result": "succeeded", "time": "2026-11-29T09:00:00Z", "duration": "6.8s" }] } });
    Api::<HelmApp>::namespaced(f.cp.client(), "team-a")
        .patch_status(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&pending),
        )
        .await
        .unwrap();
    b.client
        .goto(&format!("{}/app/team-a/web", ui.url))
        .await
        .unwrap();
    shown(&b, r#"tr[data-history="2"]"#).await;
    let status = b
        .client
        .execute_async(
            r#"const done = arguments[arguments.length - 1];
               const csrf = document.querySelector('meta[name="csrf-token"]').content;
               fetch('/app/team-a/web/approve', { method: 'POST', redirect: 'manual',
                     body: new URLSearchParams({ csrf, hash: 'cafe0123' }) })
                 .then(r => done(r.type === 'opaqueredirect' ? 303 : r.status));"#,
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(status, json!(303), "the approval was refused");
    b.client.refresh().await.unwrap();
    shown(&b, r#"tr[data-history="2"] [data-approved-by="alice"]"#).await;
    shoot(&b, "served-timeline").await;
    b.close().await;
}
