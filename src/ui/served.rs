//! The UI served in the cluster (`hossted-operator ui --serve`, docs/ui.md
//! "Served in the cluster"): who is asking, and the client that asks the
//! apiserver for them.
//!
//! - The UI's own ServiceAccount may only impersonate: every request it
//!   makes carries `Impersonate-User` (and `-Group`) — the signed-in
//!   user's for their pages and actions, or the reader's
//!   (`--reader-user`, a user the chart grants read of HelmApps and
//!   HelmAppSets and creation of Events) for the watches all sessions
//!   share and the Events naming who acted.
//! - A session is a server-side record (signed-in identity, CSRF token,
//!   the user's client, their namespace access) behind an opaque cookie
//!   (`HttpOnly; Secure; SameSite=Lax`), ending with the ID token or at
//!   logout. The cookie is 244 random bits; nothing is trusted from it but
//!   its lookup here.
//! - A sign-in under way is held by the browser, not the server: a second
//!   cookie carries its `state`, `nonce`, PKCE verifier and return path,
//!   signed with a key of the process (HMAC-SHA256) and good for
//!   [`SIGN_IN_TIMEOUT`] — the callback must carry that `state` (no login
//!   CSRF), and no one can fill the server's memory, or push out others'
//!   sign-ins, by beginning sign-ins.
//! - What a user may see of the shared watches is decided by the
//!   apiserver: a `SelfSubjectAccessReview` made as the user (list
//!   HelmApps, cluster-wide first, then per namespace), remembered
//!   [`ACCESS_TTL`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;
use parking_lot::Mutex;

use super::oidc::{Identity, Pending, Provider};

/// The session cookie. `__Host-`: a browser takes it only as set by this
/// host over TLS, with `Path=/` and no `Domain` — a server on a sibling
/// subdomain (a tenant's) cannot plant one.
pub const SESSION_COOKIE: &str = "__Host-hossted-ui-session";
/// The cookie binding a sign-in under way to its browser.
pub const SIGN_IN_COOKIE: &str = "__Host-hossted-ui-sign-in";
/// How long a sign-in may take at the provider.
pub const SIGN_IN_TIMEOUT: Duration = Duration::from_secs(600);
/// How long an access decision is remembered.
pub const ACCESS_TTL: Duration = Duration::from_secs(30);
/// Sessions held at most (expired ones are dropped first).
pub const MAX_SESSIONS: usize = 10_000;
/// Sessions one user holds at most (a new one ends their oldest).
pub const MAX_SESSIONS_PER_USER: usize = 10;
/// The longest path a sign-in goes back to (longer: the overview).
pub const MAX_RETURN: usize = 1024;

/// One signed-in browser.
pub struct Session {
    pub id: String,
    pub csrf: String,
    pub identity: Identity,
    /// Impersonates `identity`: every read and write of their pages.
    pub client: kube::Client,
    /// Namespace (`""`: the whole cluster) → may list HelmApps, and when
    /// the apiserver said so.
    access: Mutex<HashMap<String, (bool, Instant)>>,
    /// Live streams open now.
    pub streams: Arc<AtomicUsize>,
    /// Becomes `true` when the session ends (logout, or pushed out): its
    /// streams stop.
    ended: tokio::sync::watch::Sender<bool>,
    started: Instant,
}

impl Session {
    fn expired(&self, now: SystemTime) -> bool {
        self.identity.expires <= now
    }

    fn end(&self) {
        self.ended.send_replace(true);
    }

    /// Resolves when the session ends: at logout, when pushed out, or when
    /// its ID token expires — what every stream of it waits on beside its
    /// work.
    pub async fn ended(&self) {
        let mut rx = self.ended.subscribe();
        let expires = self
            .identity
            .expires
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        tokio::select! {
            _ = rx.wait_for(|ended| *ended) => {}
            () = tokio::time::sleep(expires) => {}
        }
    }
}

/// A sign-in under way, as its cookie carries it.
#[derive(serde::Serialize, serde::Deserialize)]
struct SignIn {
    pending: Pending,
    /// Seconds since the epoch.
    expires: u64,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Why the served UI refuses a sign-in.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    #[error("this sign-in is not this browser's, or took longer than 10 minutes: sign in again")]
    UnknownState,
    #[error("{0}")]
    Provider(String),
    #[error("too many sessions: try again later")]
    Full,
}

/// The served UI's sessions and identities.
pub struct Served {
    /// The pod's own config: never used without impersonation.
    base: kube::Config,
    /// `None`: anonymous read-only.
    pub provider: Option<Provider>,
    /// `https://ui.example.com`: the origin forms must come from.
    pub public_origin: String,
    /// The shared watches' and the Events' identity.
    pub reader: kube::Client,
    /// Live streams a user may hold at once.
    pub max_streams: usize,
    /// Invariant: no two sessions share an id; each expired one is dropped
    /// when it is next looked up or a session is added.
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Signs the sign-in cookies: 244 random bits, for the process's life.
    key: String,
    /// Live streams of anonymous visitors open now.
    anonymous_streams: Arc<AtomicUsize>,
}

/// `base` impersonating `user` in `groups`.
pub fn impersonating(
    base: &kube::Config,
    user: &str,
    groups: &[String],
) -> Result<kube::Client, String> {
    let mut config = base.clone();
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_groups = (!groups.is_empty()).then(|| groups.to_vec());
    kube::Client::try_from(config).map_err(|e| format!("a client for {user}: {e}"))
}

fn random() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Compared in a time that does not depend on where they differ.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The value of cookie `name` in `headers`.
pub fn cookie<'h>(headers: &'h http::HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value: `HttpOnly; Secure; SameSite=Lax; Path=/`, for
/// `max_age` seconds (0: removed).
pub fn set_cookie(name: &str, value: &str, max_age: u64) -> String {
    format!("{name}={value}; HttpOnly; Secure; SameSite=Lax; Path=/; Max-Age={max_age}")
}

impl Served {
    pub fn new(
        base: kube::Config,
        provider: Option<Provider>,
        public_origin: String,
        reader: kube::Client,
        max_streams: usize,
    ) -> Served {
        Served {
            base,
            provider,
            public_origin,
            reader,
            max_streams,
            sessions: Mutex::default(),
            key: random(),
            anonymous_streams: Arc::default(),
        }
    }

    /// The live session `headers` carry, if any.
    pub fn session(&self, headers: &http::HeaderMap) -> Option<Arc<Session>> {
        let id = cookie(headers, SESSION_COOKIE)?;
        let mut sessions = self.sessions.lock();
        // Looked up by a key compared as a hash map does; the ids are
        // random, so timing tells nothing of another's.
        let session = sessions.get(id)?.clone();
        if session.expired(SystemTime::now()) {
            sessions.remove(id);
            return None;
        }
        Some(session)
    }

    /// Ends `session` (logout): its id is no longer admitted, its streams
    /// stop.
    pub fn end(&self, session: &Session) {
        self.sessions.lock().remove(&session.id);
        session.end();
    }

    /// A sign-in begun: the provider's URL, and the sign-in cookie's value
    /// (the sign-in, signed).
    pub fn begin(&self, return_to: &str) -> Result<(String, String), SignInError> {
        let provider = self.provider.as_ref().ok_or(SignInError::UnknownState)?;
        let back = Some(local_path(return_to))
            .filter(|p| p.len() <= MAX_RETURN)
            .unwrap_or("/");
        let (url, pending) = provider.begin(back);
        let signed = SignIn {
            pending,
            expires: unix_now() + SIGN_IN_TIMEOUT.as_secs(),
        };
        Ok((url, self.seal(&signed)))
    }

    /// `payload.mac`, both base64url: the sign-in and its HMAC.
    fn seal(&self, sign_in: &SignIn) -> String {
        use base64::Engine;
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use hmac::Mac;
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(sign_in).unwrap_or_default());
        let mac = URL_SAFE_NO_PAD.encode(
            self.mac()
                .chain_update(payload.as_bytes())
                .finalize()
                .into_bytes(),
        );
        format!("{payload}.{mac}")
    }

    /// The sign-in a cookie carries, if this process signed it and it is
    /// not too old.
    fn open(&self, cookie: &str) -> Option<SignIn> {
        use base64::Engine;
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use hmac::Mac;
        let (payload, mac) = cookie.split_once('.')?;
        let mac = URL_SAFE_NO_PAD.decode(mac).ok()?;
        self.mac()
            .chain_update(payload.as_bytes())
            .verify_slice(&mac)
            .ok()?;
        let sign_in: SignIn =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
        (sign_in.expires > unix_now()).then_some(sign_in)
    }

    fn mac(&self) -> hmac::Hmac<sha2::Sha256> {
        use hmac::Mac;
        hmac::Hmac::<sha2::Sha256>::new_from_slice(self.key.as_bytes())
            .expect("HMAC takes a key of any length")
    }

    /// The provider's answer taken: the browser's sign-in cookie
    /// (`cookie`) must be one this process signed, not older than
    /// [`SIGN_IN_TIMEOUT`], for this `state`. The new session, and where to
    /// go.
    pub async fn finish(
        &self,
        cookie: Option<&str>,
        state: &str,
        code: &str,
    ) -> Result<(Arc<Session>, String), SignInError> {
        let provider = self.provider.as_ref().ok_or(SignInError::UnknownState)?;
        let pending = cookie
            .and_then(|c| self.open(c))
            .map(|s| s.pending)
            .filter(|p| same(&p.state, state))
            .ok_or(SignInError::UnknownState)?;
        let identity = provider
            .finish(&pending, code)
            .await
            .map_err(SignInError::Provider)?;
        let client = impersonating(&self.base, &identity.username, &identity.groups)
            .map_err(SignInError::Provider)?;
        let (ended, _) = tokio::sync::watch::channel(false);
        let session = Arc::new(Session {
            id: random(),
            csrf: random(),
            identity,
            client,
            access: Mutex::default(),
            streams: Arc::default(),
            ended,
            started: Instant::now(),
        });
        let mut sessions = self.sessions.lock();
        let now = SystemTime::now();
        sessions.retain(|_, s| !s.expired(now));
        // One user's sign-ins end their own oldest, never someone else's
        // chance to sign in.
        let mut own: Vec<(Instant, String)> = sessions
            .values()
            .filter(|s| s.identity.username == session.identity.username)
            .map(|s| (s.started, s.id.clone()))
            .collect();
        own.sort();
        while own.len() >= MAX_SESSIONS_PER_USER {
            let (_, id) = own.remove(0);
            if let Some(old) = sessions.remove(&id) {
                old.end();
            }
        }
        if sessions.len() >= MAX_SESSIONS {
            return Err(SignInError::Full);
        }
        sessions.insert(session.id.clone(), session.clone());
        Ok((session, pending.return_to))
    }

    /// Whether `session`'s user may list HelmApps in `namespace`: the
    /// apiserver's answer to the user's own access review — cluster-wide
    /// first — remembered [`ACCESS_TTL`]. A failed review is a no.
    pub async fn may_list(&self, session: &Session, namespace: &str) -> bool {
        if self.asked(session, "").await {
            return true;
        }
        self.asked(session, namespace).await
    }

    async fn asked(&self, session: &Session, namespace: &str) -> bool {
        if let Some((allowed, at)) = session.access.lock().get(namespace)
            && at.elapsed() < ACCESS_TTL
        {
            return *allowed;
        }
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some("hossted.com".into()),
                    resource: Some("helmapps".into()),
                    verb: Some("list".into()),
                    namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let allowed = Api::<SelfSubjectAccessReview>::all(session.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .ok()
            .and_then(|r| r.status)
            .is_some_and(|s| s.allowed);
        let mut access = session.access.lock();
        if access.len() > 10_000 {
            access.clear();
        }
        access.insert(namespace.to_string(), (allowed, Instant::now()));
        allowed
    }

    /// A live stream opened for `session` — or, without one, for the
    /// anonymous visitors together — unless as many are open as allowed
    /// (`max_streams` a session, [`MAX_ANONYMOUS_STREAMS`] in all); closed
    /// when the guard drops.
    pub fn open_stream(&self, session: Option<&Arc<Session>>) -> Option<StreamGuard> {
        let (count, max) = match session {
            Some(s) => (s.streams.clone(), self.max_streams),
            None => (self.anonymous_streams.clone(), MAX_ANONYMOUS_STREAMS),
        };
        let held = count.fetch_add(1, Ordering::SeqCst);
        if held >= max {
            count.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(StreamGuard(count))
    }
}

/// Live streams anonymous visitors hold at once, in all.
pub const MAX_ANONYMOUS_STREAMS: usize = 256;

/// One open live stream (of a session, or of the anonymous visitors).
pub struct StreamGuard(Arc<AtomicUsize>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// `path` if it is a path of this site (`/…`, not `//host`), else `/`.
pub fn local_path(path: &str) -> &str {
    let ok = path.starts_with('/')
        && !path.starts_with("//")
        && !path.starts_with("/\\")
        && !path.chars().any(|c| c.is_control());
    if ok { path } else { "/" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_local_path_is_gone_back_to() {
        assert_eq!(local_path("/app/team-a/web"), "/app/team-a/web");
        for hostile in [
            "//evil.example.com/",
            "/\\evil.example.com",
            "https://evil.example.com",
            "javascript:alert(1)",
            "/\r\nSet-Cookie: x=y",
            "",
        ] {
            assert_eq!(local_path(hostile), "/", "{hostile:?}");
        }
    }

    fn served() -> Served {
        let base = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let reader = kube::Client::try_from(base.clone()).unwrap();
        Served::new(base, None, "https://ui.example.com".into(), reader, 8)
    }

    fn sign_in(state: &str, expires: u64) -> SignIn {
        SignIn {
            pending: Pending {
                state: state.into(),
                nonce: "n".into(),
                verifier: "v".into(),
                return_to: "/app/a/b".into(),
            },
            expires,
        }
    }

    /// The sign-in cookie opens only as this process sealed it, before it
    /// expires: a changed payload or MAC, another process's key, or an old
    /// one is no sign-in.
    #[tokio::test]
    async fn a_sign_in_cookie_opens_only_sealed_here_and_in_time() {
        use base64::Engine;
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let ui = served();
        let sealed = ui.seal(&sign_in("s-1", unix_now() + 60));
        let opened = ui.open(&sealed).expect("sealed here");
        assert_eq!(opened.pending.state, "s-1");
        assert_eq!(opened.pending.return_to, "/app/a/b");
        // Another process (another key) did not seal it.
        assert!(served().open(&sealed).is_none());
        // A payload changed, with the MAC kept.
        let (payload, mac) = sealed.split_once('.').unwrap();
        let mut forged = sign_in("s-1", unix_now() + 60);
        forged.pending.return_to = "//evil.example.com".into();
        let forged_payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        assert!(ui.open(&format!("{forged_payload}.{mac}")).is_none());
        // Every byte of it changed in turn.
        for i in 0..sealed.len() {
            let mut bytes = sealed.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let changed = String::from_utf8(bytes).unwrap();
            if changed != sealed {
                assert!(ui.open(&changed).is_none(), "byte {i} of {payload}.{mac}");
            }
        }
        // Expired.
        assert!(ui.open(&ui.seal(&sign_in("s-1", unix_now() - 1))).is_none());
        assert!(ui.open("").is_none() && ui.open("x.y").is_none());
    }

    #[test]
    fn cookies_are_found_by_name_and_set_secure() {
        let mut h = http::HeaderMap::new();
        h.append(
            http::header::COOKIE,
            "a=1; __Host-hossted-ui-session=abc".parse().unwrap(),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&h, SIGN_IN_COOKIE), None);
        let set = set_cookie(SESSION_COOKIE, "abc", 60);
        for attribute in ["HttpOnly", "Secure", "SameSite=Lax", "Path=/", "Max-Age=60"] {
            assert!(set.split("; ").any(|a| a == attribute), "{attribute}");
        }
    }
}
