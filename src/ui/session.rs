//! Who may drive the UI: the one browser that opened the login URL.
//!
//! The server listens on loopback, where any local user and any web page
//! the user visits can reach it. So:
//! - the printed URL carries a **one-time** token; redeeming it sets a
//!   session cookie (`HttpOnly`, `SameSite=Strict`) and the token is gone;
//! - every request needs that cookie, and the `Host` header must name the
//!   loopback address (a DNS-rebinding page sends its own host name);
//! - every state-changing request also needs the CSRF token the pages
//!   carry, and an `Origin` header, when sent, must be ours.
//!
//! Tokens are compared in constant time.

use parking_lot::Mutex;

/// The tokens of one `kubectl hossted ui` process.
pub struct Gate {
    /// Invariant: `Some` until the first successful [`Gate::redeem`], then
    /// `None` for the life of the process.
    login: Mutex<Option<String>>,
    /// The session cookie's value; fixed for the process.
    session: String,
    /// What a state-changing request must carry besides the cookie.
    csrf: String,
    /// `hossted-ui-<port>`: two UIs on two ports keep their own cookies
    /// (a cookie is not scoped by port).
    cookie_name: String,
    /// `<address>:<port>` of the listener (and `localhost:<port>` when the
    /// address is 127.0.0.1).
    hosts: Vec<String>,
}

/// Why a request is refused (HTTP 403), said to the browser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    NoSession,
    WrongHost,
    NoCsrf,
    ForeignOrigin,
    LoginUsed,
    /// The served UI to an anonymous visitor: nothing may be changed.
    ReadOnly,
    /// The served UI: this user holds as many live streams as allowed.
    TooManyStreams,
}

impl Refusal {
    pub fn explain(self) -> &'static str {
        match self {
            Refusal::NoSession => {
                "no session: open the URL `kubectl hossted ui` printed (its one-time token signs this browser in)"
            }
            Refusal::WrongHost => "the Host header is not this loopback server's",
            Refusal::NoCsrf => {
                "the form's CSRF token is missing or wrong: reload the page and try again"
            }
            Refusal::ForeignOrigin => "the request came from another origin",
            Refusal::LoginUsed => {
                "this login link was already used: run `kubectl hossted ui` again for a new one"
            }
            Refusal::ReadOnly => {
                "this UI is served read-only to anonymous visitors: nothing can be changed here"
            }
            Refusal::TooManyStreams => {
                "you have as many live pages open as allowed: close one, or reload without live updates"
            }
        }
    }

    /// A stable name for tests and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NoSession => "NoSession",
            Refusal::WrongHost => "WrongHost",
            Refusal::NoCsrf => "NoCsrf",
            Refusal::ForeignOrigin => "ForeignOrigin",
            Refusal::LoginUsed => "LoginUsed",
            Refusal::ReadOnly => "ReadOnly",
            Refusal::TooManyStreams => "TooManyStreams",
        }
    }
}

fn random_token() -> String {
    // Two v4 UUIDs: 244 bits from the OS's CSPRNG (getrandom).
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Gate {
    /// The gate of a UI listening on `at` (a loopback address).
    pub fn new(at: std::net::SocketAddr) -> Gate {
        let port = at.port();
        let mut hosts = vec![at.to_string()];
        if at.ip() == std::net::Ipv4Addr::LOCALHOST {
            hosts.push(format!("localhost:{port}"));
        }
        Gate {
            login: Mutex::new(Some(random_token())),
            session: random_token(),
            csrf: random_token(),
            cookie_name: format!("hossted-ui-{port}"),
            hosts,
        }
    }

    /// The one-time login token (for the printed URL); `None` once used.
    pub fn login_token(&self) -> Option<String> {
        self.login.lock().clone()
    }

    /// The token forms and `fetch` calls send back.
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// The `Set-Cookie` value for a correct, unused login token.
    pub fn redeem(&self, token: &str) -> Result<String, Refusal> {
        let mut login = self.login.lock();
        match login.as_deref() {
            Some(t) if same(t, token) => {
                *login = None;
                Ok(format!(
                    "{}={}; HttpOnly; SameSite=Strict; Path=/",
                    self.cookie_name, self.session
                ))
            }
            Some(_) => Err(Refusal::NoSession),
            None => Err(Refusal::LoginUsed),
        }
    }

    /// Whether the `Host` header names this loopback server.
    pub fn check_host(&self, headers: &http::HeaderMap) -> Result<(), Refusal> {
        let host = headers
            .get(http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        if self.hosts.iter().any(|h| h == host) {
            Ok(())
        } else {
            Err(Refusal::WrongHost)
        }
    }

    /// Whether `headers` may read: our Host, our session cookie.
    pub fn admit(&self, headers: &http::HeaderMap) -> Result<(), Refusal> {
        self.check_host(headers)?;
        let has_session = headers
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| name == self.cookie_name && same(value, &self.session));
        if has_session {
            Ok(())
        } else {
            Err(Refusal::NoSession)
        }
    }

    /// Whether `headers` with the form's `csrf` field may change state:
    /// readable ([`Gate::admit`]), our Origin when one is sent, and the
    /// CSRF token in the form or the `X-CSRF-Token` header.
    pub fn admit_change(
        &self,
        headers: &http::HeaderMap,
        form_csrf: Option<&str>,
    ) -> Result<(), Refusal> {
        self.admit(headers)?;
        if let Some(origin) = headers.get(http::header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default();
            let ours = self
                .hosts
                .iter()
                .any(|h| origin.strip_prefix("http://") == Some(h.as_str()));
            if !ours {
                return Err(Refusal::ForeignOrigin);
            }
        }
        let header = headers.get("x-csrf-token").and_then(|v| v.to_str().ok());
        match form_csrf.or(header) {
            Some(t) if same(t, &self.csrf) => Ok(()),
            _ => Err(Refusal::NoCsrf),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    fn cookie_of(set_cookie: &str) -> String {
        set_cookie.split(';').next().unwrap().to_string()
    }

    #[test]
    fn the_login_token_works_once_and_its_cookie_admits() {
        let gate = Gate::new(([127, 0, 0, 1], 8080).into());
        let token = gate.login_token().unwrap();
        assert_eq!(gate.redeem("wrong"), Err(Refusal::NoSession));
        let set = gate.redeem(&token).unwrap();
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"));
        assert_eq!(gate.redeem(&token), Err(Refusal::LoginUsed));
        assert_eq!(gate.login_token(), None);
        let ok = headers(&[("host", "127.0.0.1:8080"), ("cookie", &cookie_of(&set))]);
        assert_eq!(gate.admit(&ok), Ok(()));
        let rebinding = headers(&[("host", "evil.example:8080"), ("cookie", &cookie_of(&set))]);
        assert_eq!(gate.admit(&rebinding), Err(Refusal::WrongHost));
        let other_port = Gate::new(([127, 0, 0, 1], 9090).into());
        let h = headers(&[("host", "127.0.0.1:9090"), ("cookie", &cookie_of(&set))]);
        assert_eq!(other_port.admit(&h), Err(Refusal::NoSession));
    }

    #[test]
    fn a_ui_on_its_own_loopback_address_admits_no_other_host() {
        // Cookies ignore ports: on an address of its own, no other local
        // server (127.0.0.1:anything) is sent the UI's cookie, and the UI
        // takes no request addressed to one.
        let gate = Gate::new(([127, 9, 8, 7], 8080).into());
        let set = gate.redeem(&gate.login_token().unwrap()).unwrap();
        let ours = headers(&[("host", "127.9.8.7:8080"), ("cookie", &cookie_of(&set))]);
        assert_eq!(gate.admit(&ours), Ok(()));
        for other in ["127.0.0.1:8080", "localhost:8080"] {
            let h = headers(&[("host", other), ("cookie", &cookie_of(&set))]);
            assert_eq!(gate.admit(&h), Err(Refusal::WrongHost), "{other}");
        }
    }

    #[test]
    fn a_change_needs_the_csrf_token_and_our_origin() {
        let gate = Gate::new(([127, 0, 0, 1], 1234).into());
        let set = gate.redeem(&gate.login_token().unwrap()).unwrap();
        let cookie = cookie_of(&set);
        let base = [("host", "127.0.0.1:1234"), ("cookie", cookie.as_str())];
        let h = headers(&base);
        assert_eq!(gate.admit_change(&h, None), Err(Refusal::NoCsrf));
        assert_eq!(gate.admit_change(&h, Some("nope")), Err(Refusal::NoCsrf));
        assert_eq!(gate.admit_change(&h, Some(gate.csrf())), Ok(()));
        let mut with_header = base.to_vec();
        with_header.push(("x-csrf-token", gate.csrf()));
        assert_eq!(gate.admit_change(&headers(&with_header), None), Ok(()));
        let mut foreign = base.to_vec();
        foreign.push(("origin", "https://attacker.example"));
        assert_eq!(
            gate.admit_change(&headers(&foreign), Some(gate.csrf())),
            Err(Refusal::ForeignOrigin)
        );
        let mut ours = base.to_vec();
        ours.push(("origin", "http://localhost:1234"));
        assert_eq!(
            gate.admit_change(&headers(&ours), Some(gate.csrf())),
            Ok(())
        );
    }
}
