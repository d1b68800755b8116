//! The Hossted API client (`docs/inventory.md`): blocking `ureq`, so callers
//! on the async runtime run it with `spawn_blocking`.
//!
//! Outcomes map to what the controller does next: [`Delivery::Delivered`]
//! (2xx) is recorded in status; [`PostError::Unavailable`] (3xx, 401, 403,
//! 408, 425, 429, 5xx, transport) is retried through the work queue with
//! backoff; [`PostError::Rejected`] (any other 4xx) is not retried until the
//! payload changes. Redirects are never followed: a POST answered with a
//! redirect was not delivered, and following it as a body-less GET once
//! counted a 200 there as delivery. The token is sent, never logged or put
//! in an error.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

/// Where the bearer token comes from.
#[derive(Clone)]
pub enum Token {
    /// The value itself (`HOSSTED_AUTH_TOKEN`).
    Inline(String),
    /// A file holding it (`HOSSTED_AUTH_TOKEN_FILE`), read for every request:
    /// a rotated Secret takes effect without a restart.
    File(PathBuf),
}

/// How to reach the API.
#[derive(Clone)]
pub struct ApiConfig {
    /// e.g. `https://api.example.com/v1` (no trailing slash needed).
    pub base_url: String,
    /// Sent as `Authorization: Bearer <token>`.
    pub token: Token,
    /// A PEM bundle trusted besides the system's roots (a TLS-intercepting proxy).
    pub ca_file: Option<PathBuf>,
    /// Print each request as a JSON line on stdout instead of sending it.
    pub dry_run: bool,
}

impl ApiConfig {
    /// A config with an inline token and the system's roots.
    pub fn new(base_url: &str, token: &str) -> Self {
        ApiConfig {
            base_url: base_url.to_string(),
            token: Token::Inline(token.to_string()),
            ca_file: None,
            dry_run: false,
        }
    }
}

impl std::fmt::Debug for ApiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let token = match &self.token {
            Token::Inline(_) => "<redacted>".to_string(),
            Token::File(p) => format!("<from {}>", p.display()),
        };
        f.debug_struct("ApiConfig")
            .field("base_url", &self.base_url)
            .field("token", &token)
            .field("ca_file", &self.ca_file)
            .field("dry_run", &self.dry_run)
            .finish()
    }
}

/// A request the API accepted (or, with `--dry-run`, printed).
#[derive(Debug, PartialEq, Eq)]
pub enum Delivery {
    Delivered { status: u16 },
    Printed,
}

/// Why a request was not delivered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PostError {
    /// The API cannot take anything now (see the module docs): retry later.
    #[error("the Hossted API is unavailable ({reason}) for POST {path}")]
    Unavailable {
        path: String,
        reason: String,
        /// The HTTP status, when the API answered.
        status: Option<u16>,
    },
    /// Any other 4xx: the API refuses this payload.
    #[error("the Hossted API rejected POST {path} with HTTP {status}: {body}")]
    Rejected {
        path: String,
        status: u16,
        body: String,
    },
}

/// Checks `HOSSTED_API_URL` at start: it must parse as an absolute URL, and
/// use `https` unless the host is a loopback address or `allow_insecure`
/// (the token would cross the network in clear text).
pub fn check_url(url: &str, allow_insecure: bool) -> Result<(), String> {
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|e| {
            format!(
                "HOSSTED_API_URL {url:?} is not a URL ({e}): it must be an absolute https:// URL, e.g. https://api.hossted.com/v1"
            )
        })?;
    let host = uri.host().unwrap_or_default();
    match uri.scheme_str() {
        Some("https") if !host.is_empty() => Ok(()),
        Some("http") if !host.is_empty() && (allow_insecure || is_loopback(host)) => Ok(()),
        Some("http") if !host.is_empty() => Err(format!(
            "HOSSTED_API_URL {url:?} is plain http: the token would be sent in clear text; use https (or --allow-insecure-http)"
        )),
        _ => Err(format!(
            "HOSSTED_API_URL {url:?} must be an absolute https:// URL, e.g. https://api.hossted.com/v1"
        )),
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Posts JSON to the Hossted API.
pub struct Poster {
    config: ApiConfig,
    agent: ureq::Agent,
}

/// The most of an error answer kept for messages.
const BODY_EXCERPT: usize = 300;

impl Poster {
    /// A client for `config`; fails when the CA file cannot be used.
    pub fn new(config: ApiConfig) -> Result<Self, String> {
        let mut builder = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(concat!("hossted-operator/", env!("CARGO_PKG_VERSION")));
        if let Some(file) = &config.ca_file {
            let pem = std::fs::read(file)
                .map_err(|e| format!("cannot read the CA file {}: {e}", file.display()))?;
            let tls = crate::tls::with_extra_ca(&pem)
                .map_err(|e| format!("the CA file {} {e}", file.display()))?;
            builder = builder.tls_config(tls);
        }
        Ok(Poster {
            config,
            agent: builder.build().into(),
        })
    }

    fn token(&self, path: &str) -> Result<String, PostError> {
        match &self.config.token {
            Token::Inline(t) => Ok(t.clone()),
            Token::File(file) => std::fs::read_to_string(file)
                .map(|t| t.trim().to_string())
                .map_err(|e| PostError::Unavailable {
                    path: path.to_string(),
                    reason: format!("cannot read the token file {}: {e}", file.display()),
                    status: None,
                }),
        }
    }

    /// `POST {base_url}{path}` with `body` as JSON. A body that does not
    /// serialize is rejected here, before anything is sent.
    pub fn post(&self, path: &str, body: &impl Serialize) -> Result<Delivery, PostError> {
        let json = serde_json::to_vec(body).map_err(|e| PostError::Rejected {
            path: path.to_string(),
            status: 0,
            body: format!("the payload does not serialize: {e}"),
        })?;
        self.post_json(path, json)
    }

    /// `POST {base_url}{path}` with `json`, already serialized.
    pub fn post_json(&self, path: &str, json: Vec<u8>) -> Result<Delivery, PostError> {
        if self.config.dry_run {
            let body: serde_json::Value = match serde_json::from_slice(&json) {
                Ok(v) => v,
                Err(e) => {
                    return Err(PostError::Rejected {
                        path: path.to_string(),
                        status: 0,
                        body: format!("the payload is not JSON: {e}"),
                    });
                }
            };
            let line = serde_json::json!({ "method": "POST", "path": path, "body": body });
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
            return Ok(Delivery::Printed);
        }
        let url = format!("{}{path}", self.config.base_url.trim_end_matches('/'));
        let response = self
            .agent
            .post(&url)
            .header("Authorization", &format!("Bearer {}", self.token(path)?))
            .header("Content-Type", "application/json")
            .send(&json[..]);
        let mut response = match response {
            Ok(r) => r,
            Err(e) => {
                return Err(PostError::Unavailable {
                    path: path.to_string(),
                    reason: e.to_string(),
                    status: None,
                });
            }
        };
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(Delivery::Delivered { status });
        }
        let mut body = response
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_to_string()
            .unwrap_or_default();
        if body.len() > BODY_EXCERPT {
            let cut = (0..=BODY_EXCERPT)
                .rev()
                .find(|i| body.is_char_boundary(*i))
                .unwrap_or(0);
            body.truncate(cut);
            body.push('…');
        }
        if (300..400).contains(&status) {
            let to = response
                .headers()
                .get("location")
                .and_then(|l| l.to_str().ok())
                .unwrap_or("nowhere");
            Err(PostError::Unavailable {
                path: path.to_string(),
                reason: format!(
                    "HTTP {status}, a redirect to {to}: not followed; check HOSSTED_API_URL"
                ),
                status: Some(status),
            })
        } else if status < 200 || matches!(status, 401 | 403 | 408 | 425 | 429) || status >= 500 {
            Err(PostError::Unavailable {
                path: path.to_string(),
                reason: format!("HTTP {status}"),
                status: Some(status),
            })
        } else {
            Err(PostError::Rejected {
                path: path.to_string(),
                status,
                body,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_must_be_https_unless_loopback_or_allowed() {
        assert!(check_url("https://api.hossted.com/v1", false).is_ok());
        assert!(check_url("http://127.0.0.1:8080/v1", false).is_ok());
        assert!(check_url("http://[::1]:8080/v1", false).is_ok());
        assert!(check_url("http://localhost/v1", false).is_ok());
        let clear = check_url("http://api.hossted.com/v1", false).unwrap_err();
        assert!(clear.contains("clear text"), "{clear}");
        assert!(check_url("http://api.hossted.com/v1", true).is_ok());
        let bare = check_url("api.hossted.com/v1", false).unwrap_err();
        assert!(bare.contains("absolute https://"), "{bare}");
        assert!(check_url("ftp://api.hossted.com", true).is_err());
        assert!(check_url("https://", false).is_err());
    }

    #[test]
    fn a_bad_ca_file_is_an_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("ca-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ca.pem");
        std::fs::write(&file, "not a certificate").unwrap();
        let mut config = ApiConfig::new("https://x", "t");
        config.ca_file = Some(file.clone());
        let e = Poster::new(config.clone()).err().unwrap();
        assert!(e.contains("ca.pem"), "{e}");
        config.ca_file = Some(dir.join("missing.pem"));
        assert!(Poster::new(config).err().unwrap().contains("missing.pem"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
