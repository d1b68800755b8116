//! The Hossted API client (`../shared/API.md`): blocking `ureq`, so callers
//! on the async runtime run it with `spawn_blocking`.
//!
//! Outcomes map to what the controller does next: [`Delivery::Delivered`]
//! (2xx) is recorded in status; [`PostError::Unavailable`] (429, 5xx,
//! transport) is retried through the work queue with backoff;
//! [`PostError::Rejected`] (any other 4xx) is not retried until the payload
//! changes. The token is sent, never logged or put in an error.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

/// How to reach the API.
#[derive(Clone)]
pub struct ApiConfig {
    /// e.g. `https://api.example.com/v1` (no trailing slash needed).
    pub base_url: String,
    /// Sent as `Authorization: Bearer <token>`.
    pub token: String,
    /// Print each request as a JSON line on stdout instead of sending it.
    pub dry_run: bool,
}

impl std::fmt::Debug for ApiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiConfig")
            .field("base_url", &self.base_url)
            .field("token", &"<redacted>")
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
    /// 429, 5xx or no answer: retry later.
    #[error("the Hossted API is unavailable ({reason}) for POST {path}")]
    Unavailable {
        path: String,
        reason: String,
        /// The HTTP status, when the API answered (429 or 5xx).
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

/// Posts JSON to the Hossted API.
pub struct Poster {
    config: ApiConfig,
    agent: ureq::Agent,
}

/// The most of an error answer kept for messages.
const BODY_EXCERPT: usize = 300;

impl Poster {
    pub fn new(config: ApiConfig) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .user_agent(concat!("hossted-operator/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Poster { config, agent }
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
            .header("Authorization", &format!("Bearer {}", self.config.token))
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
        if status == 429 || status >= 500 {
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
