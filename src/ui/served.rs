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
//! - A sign-in under way is bound to the browser by a second cookie
//!   holding its `state` (no login CSRF), used once, gone after
//!   [`SIGN_IN_TIMEOUT`].
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

/// The session cookie.
pub const SESSION_COOKIE: &str = "hossted-ui-session";
/// The cookie binding a sign-in under way to its browser.
pub const SIGN_IN_COOKIE: &str = "hossted-ui-sign-in";
/// How long a sign-in may take at the provider.
pub const SIGN_IN_TIMEOUT: Duration = Duration::from_secs(600);
/// How long an access decision is remembered.
pub const ACCESS_TTL: Duration = Duration::from_secs(30);
/// Sessions held at most (expired ones are dropped first).
pub const MAX_SESSIONS: usize = 10_000;
/// Sign-ins under way at most.
pub const MAX_SIGN_INS: usize = 10_000;

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
    pub streams: AtomicUsize,
}

impl Session {
    fn expired(&self, now: SystemTime) -> bool {
        self.identity.expires <= now
    }
}

/// Why the served UI refuses a sign-in.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    #[error(
        "this sign-in is not this browser's, was used already, or took longer than 10 minutes: sign in again"
    )]
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
    /// `state` → the sign-in, and when it began.
    sign_ins: Mutex<HashMap<String, (Pending, Instant)>>,
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
            sign_ins: Mutex::default(),
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

    /// Ends `session` (logout): its id is no longer admitted.
    pub fn end(&self, session: &Session) {
        self.sessions.lock().remove(&session.id);
    }

    /// A sign-in begun: the provider's URL, and the `state` the browser's
    /// sign-in cookie must carry back.
    pub fn begin(&self, return_to: &str) -> Result<(String, String), SignInError> {
        let provider = self.provider.as_ref().ok_or(SignInError::UnknownState)?;
        let (url, pending) = provider.begin(local_path(return_to));
        let mut sign_ins = self.sign_ins.lock();
        sign_ins.retain(|_, (_, at)| at.elapsed() < SIGN_IN_TIMEOUT);
        // Anyone may begin a sign-in: when full, the oldest goes (a flood
        // of them refuses no one's new sign-in).
        if sign_ins.len() >= MAX_SIGN_INS
            && let Some(oldest) = sign_ins
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
        {
            sign_ins.remove(&oldest);
        }
        let state = pending.state.clone();
        sign_ins.insert(state.clone(), (pending, Instant::now()));
        Ok((url, state))
    }

    /// The provider's answer taken: `state` must be the one in the
    /// browser's sign-in cookie (`cookie_state`) and a sign-in under way
    /// (used once). The new session, and where to go.
    pub async fn finish(
        &self,
        cookie_state: Option<&str>,
        state: &str,
        code: &str,
    ) -> Result<(Arc<Session>, String), SignInError> {
        let provider = self.provider.as_ref().ok_or(SignInError::UnknownState)?;
        if !cookie_state.is_some_and(|c| same(c, state)) {
            return Err(SignInError::UnknownState);
        }
        let pending = match self.sign_ins.lock().remove(state) {
            Some((p, at)) if at.elapsed() < SIGN_IN_TIMEOUT => p,
            _ => return Err(SignInError::UnknownState),
        };
        let identity = provider
            .finish(&pending, code)
            .await
            .map_err(SignInError::Provider)?;
        let client = impersonating(&self.base, &identity.username, &identity.groups)
            .map_err(SignInError::Provider)?;
        let session = Arc::new(Session {
            id: random(),
            csrf: random(),
            identity,
            client,
            access: Mutex::default(),
            streams: AtomicUsize::new(0),
        });
        let mut sessions = self.sessions.lock();
        let now = SystemTime::now();
        sessions.retain(|_, s| !s.expired(now));
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

    /// A live stream opened for `session`, unless it holds
    /// `max_streams` already; closed when the guard drops.
    pub fn open_stream(&self, session: &Arc<Session>) -> Option<StreamGuard> {
        let held = session.streams.fetch_add(1, Ordering::SeqCst);
        if held >= self.max_streams {
            session.streams.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(StreamGuard(session.clone()))
    }
}

/// One open live stream of a session.
pub struct StreamGuard(Arc<Session>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::SeqCst);
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

    #[test]
    fn cookies_are_found_by_name_and_set_secure() {
        let mut h = http::HeaderMap::new();
        h.append(
            http::header::COOKIE,
            "a=1; hossted-ui-session=abc".parse().unwrap(),
        );
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&h, SIGN_IN_COOKIE), None);
        let set = set_cookie(SESSION_COOKIE, "abc", 60);
        for attribute in ["HttpOnly", "Secure", "SameSite=Lax", "Path=/", "Max-Age=60"] {
            assert!(set.split("; ").any(|a| a == attribute), "{attribute}");
        }
    }
}
