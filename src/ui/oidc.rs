//! OpenID Connect sign-in for the served UI (docs/ui.md "Served in the
//! cluster"): the authorization code flow with PKCE (S256), a `state`
//! bound to the browser and a `nonce` bound to the ID token, any issuer
//! that publishes a discovery document (Dex, Keycloak, Entra ID, Google,
//! Hydra).
//!
//! What comes from outside, and its bounds:
//! - the provider's discovery document, JWKS and token answers: admin-
//!   chosen issuer, each body ≤ [`MAX_BODY`], each call ≤ [`CALL_TIMEOUT`];
//!   the discovery's `issuer` must be the configured one, byte for byte;
//! - the ID token, through the browser-carried code: verified here — a
//!   signature by a key of the issuer's JWKS (RS256 or ES256 only; `none`,
//!   HMAC and any other algorithm refused), `iss`, `aud` (and `azp` when
//!   several audiences), `exp`, `iat`, `nonce`;
//! - the username and groups claims, which become `Impersonate-User` and
//!   `Impersonate-Group`: a name or group starting with `system:` is
//!   refused (a provider whose users may edit their own groups must not
//!   make anyone `system:masters`), each ≤ 256 bytes, at most
//!   [`MAX_GROUPS`] groups.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::Value;
use sha2::Digest;

/// The largest answer read from the provider.
pub const MAX_BODY: u64 = 256 * 1024;
/// How long one call to the provider may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The most groups a user is impersonated with.
pub const MAX_GROUPS: usize = 100;
/// The longest username or group taken.
pub const MAX_NAME: usize = 256;
/// Clock skew allowed on `exp` and `iat`.
const SKEW: u64 = 60;
/// The JWKS is fetched again for an unknown `kid` at most this often.
const JWKS_REFRESH: Duration = Duration::from_secs(60);

/// What the operator is told about its provider (`ui.oidc.*`).
#[derive(Clone)]
pub struct OidcConfig {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    /// `<public URL>/callback`.
    pub redirect_uri: String,
    pub scopes: Vec<String>,
    pub username_claim: String,
    pub groups_claim: String,
    /// Put before every username (the apiserver's `--oidc-username-prefix`).
    pub username_prefix: String,
    /// Put before every group.
    pub groups_prefix: String,
    /// Usernames no one signs in as (the UI's reader).
    pub reserved_users: Vec<String>,
}

impl std::fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Deserialize)]
struct Discovery {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
    #[serde(default)]
    end_session_endpoint: Option<String>,
}

/// One key of the provider's JWKS that this client can use.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Rsa {
        kid: Option<String>,
        n: Vec<u8>,
        e: Vec<u8>,
    },
    /// P-256, as the uncompressed point `04 || x || y`.
    P256 { kid: Option<String>, point: Vec<u8> },
}

impl Key {
    fn kid(&self) -> Option<&str> {
        match self {
            Key::Rsa { kid, .. } | Key::P256 { kid, .. } => kid.as_deref(),
        }
    }

    fn fits(&self, alg: Alg) -> bool {
        matches!(
            (self, alg),
            (Key::Rsa { .. }, Alg::Rs256) | (Key::P256 { .. }, Alg::Es256)
        )
    }

    fn verify(&self, alg: Alg, message: &[u8], signature: &[u8]) -> bool {
        use ring::signature;
        match (self, alg) {
            (Key::Rsa { n, e, .. }, Alg::Rs256) => signature::RsaPublicKeyComponents { n, e }
                .verify(&signature::RSA_PKCS1_2048_8192_SHA256, message, signature)
                .is_ok(),
            (Key::P256 { point, .. }, Alg::Es256) => {
                signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, signature)
                    .is_ok()
            }
            _ => false,
        }
    }
}

/// The signature algorithms taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alg {
    Rs256,
    Es256,
}

/// The keys of a JWKS document this client can use (others skipped).
fn keys_of(jwks: &Value) -> Vec<Key> {
    let b64 = |v: &Value| v.as_str().and_then(|s| URL_SAFE_NO_PAD.decode(s).ok());
    let mut keys = Vec::new();
    for k in jwks["keys"].as_array().into_iter().flatten().take(100) {
        if k["use"].as_str().is_some_and(|u| u != "sig") {
            continue;
        }
        let kid = k["kid"].as_str().map(str::to_string);
        match k["kty"].as_str() {
            Some("RSA") => {
                if let (Some(n), Some(e)) = (b64(&k["n"]), b64(&k["e"])) {
                    keys.push(Key::Rsa { kid, n, e });
                }
            }
            Some("EC") if k["crv"].as_str() == Some("P-256") => {
                if let (Some(x), Some(y)) = (b64(&k["x"]), b64(&k["y"]))
                    && x.len() == 32
                    && y.len() == 32
                {
                    let mut point = vec![4u8];
                    point.extend_from_slice(&x);
                    point.extend_from_slice(&y);
                    keys.push(Key::P256 { kid, point });
                }
            }
            _ => {}
        }
    }
    keys
}

/// Who signed in: what they are impersonated as, until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub username: String,
    pub groups: Vec<String>,
    /// The ID token's `exp`: the session ends then.
    pub expires: SystemTime,
}

/// A sign-in under way: what the callback must match.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Pending {
    pub state: String,
    pub nonce: String,
    pub verifier: String,
    /// A local path to go back to.
    pub return_to: String,
}

/// A provider, discovered.
pub struct Provider {
    pub config: OidcConfig,
    discovery: Discovery,
    /// The keys and when they were fetched.
    keys: Mutex<(Vec<Key>, std::time::Instant)>,
    agent: ureq::Agent,
}

fn random() -> String {
    // Two v4 UUIDs: 244 bits from the OS's CSPRNG.
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Whether `url` may be a provider endpoint: https, or http on a
/// loopback host (a provider in the same pod, or a test's).
fn acceptable_url(url: &str) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    match uri.scheme_str() {
        Some("https") => uri.host().is_some(),
        Some("http") => matches!(uri.host(), Some("127.0.0.1" | "localhost" | "[::1]")),
        _ => false,
    }
}

impl Provider {
    /// Reads the issuer's discovery document and JWKS.
    pub async fn discover(config: OidcConfig) -> Result<Provider, String> {
        if !acceptable_url(&config.issuer) {
            return Err(format!(
                "--oidc-issuer {}: an https URL (http only on a loopback host)",
                config.issuer
            ));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(CALL_TIMEOUT))
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(concat!("hossted-operator/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let url = format!(
            "{}/.well-known/openid-configuration",
            config.issuer.trim_end_matches('/')
        );
        let document = get_json(&agent, &url).await?;
        let discovery: Discovery = serde_json::from_value(document)
            .map_err(|e| format!("{url}: not a discovery document: {e}"))?;
        if discovery.issuer != config.issuer {
            return Err(format!(
                "{url} names issuer {:?}, not {:?}: set --oidc-issuer to the provider's issuer exactly",
                discovery.issuer, config.issuer
            ));
        }
        for endpoint in [
            &discovery.authorization_endpoint,
            &discovery.token_endpoint,
            &discovery.jwks_uri,
        ] {
            if !acceptable_url(endpoint) {
                return Err(format!("{url}: endpoint {endpoint} is not https"));
            }
        }
        let keys = keys_of(&get_json(&agent, &discovery.jwks_uri).await?);
        if keys.is_empty() {
            return Err(format!(
                "{}: no RS256 or ES256 signing key",
                discovery.jwks_uri
            ));
        }
        Ok(Provider {
            config,
            discovery,
            keys: Mutex::new((keys, std::time::Instant::now())),
            agent,
        })
    }

    /// Where the browser goes to sign in, and what its return must match.
    pub fn begin(&self, return_to: &str) -> (String, Pending) {
        let pending = Pending {
            state: random(),
            nonce: random(),
            verifier: random() + &random(),
            return_to: return_to.to_string(),
        };
        let challenge = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(pending.verifier.as_bytes()));
        let scopes = self.config.scopes.join(" ");
        let params = [
            ("response_type", "code"),
            ("client_id", self.config.client_id.as_str()),
            ("redirect_uri", self.config.redirect_uri.as_str()),
            ("scope", scopes.as_str()),
            ("state", pending.state.as_str()),
            ("nonce", pending.nonce.as_str()),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ];
        let query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", form_encode(v)))
            .collect();
        let separator = if self.discovery.authorization_endpoint.contains('?') {
            '&'
        } else {
            '?'
        };
        let url = format!(
            "{}{separator}{}",
            self.discovery.authorization_endpoint,
            query.join("&")
        );
        (url, pending)
    }

    /// Where the browser goes after logging out here, if the provider
    /// says (RP-initiated logout).
    pub fn end_session(&self) -> Option<&str> {
        self.discovery.end_session_endpoint.as_deref()
    }

    /// The code exchanged for tokens, the ID token verified, the identity
    /// read from it.
    pub async fn finish(&self, pending: &Pending, code: &str) -> Result<Identity, String> {
        let form = vec![
            ("grant_type".to_string(), "authorization_code".to_string()),
            ("code".to_string(), code.to_string()),
            ("redirect_uri".to_string(), self.config.redirect_uri.clone()),
            ("code_verifier".to_string(), pending.verifier.clone()),
        ];
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!(
                "{}:{}",
                form_encode(&self.config.client_id),
                form_encode(&self.config.client_secret)
            ))
        );
        let (agent, url) = (self.agent.clone(), self.discovery.token_endpoint.clone());
        let answer = tokio::task::spawn_blocking(move || {
            let mut resp = agent
                .post(&url)
                .header("Authorization", &basic)
                .header("Accept", "application/json")
                .send_form(form)
                .map_err(|e| format!("the token endpoint {url}: {e}"))?;
            let status = resp.status();
            let body = read_bounded(&mut resp, &url)?;
            if !status.is_success() {
                // The provider's error code only (no body echoed).
                let code = serde_json::from_slice::<Value>(&body)
                    .ok()
                    .and_then(|v| v["error"].as_str().map(|s| s.chars().take(64).collect()))
                    .unwrap_or_else(|| "no error code".to_string());
                return Err(format!(
                    "the token endpoint answered {}: {code}",
                    status.as_u16()
                ));
            }
            serde_json::from_slice::<Value>(&body)
                .map_err(|_| "the token endpoint's answer is not JSON".to_string())
        })
        .await
        .map_err(|e| e.to_string())??;
        let token = answer["id_token"]
            .as_str()
            .ok_or("the token endpoint's answer has no id_token (is `openid` in the scopes?)")?;
        let claims = self.verify(token).await?;
        self.identity(&claims, &pending.nonce, now())
    }

    /// The claims of `token` once its signature is a key's of the issuer.
    async fn verify(&self, token: &str) -> Result<Value, String> {
        let (alg, kid, message, signature, payload) = split_jws(token)?;
        match self.check_signature(alg, kid.as_deref(), &message, &signature) {
            Some(true) => return Ok(claims_value(&payload)),
            Some(false) => return Err(bad()),
            None => {}
        }
        // An unknown key: the provider may have rotated. Fetched again,
        // at most once a minute.
        let stale = self.keys.lock().1.elapsed() >= JWKS_REFRESH;
        if stale {
            let fresh = keys_of(&get_json(&self.agent, &self.discovery.jwks_uri).await?);
            *self.keys.lock() = (fresh, std::time::Instant::now());
            if self.check_signature(alg, kid.as_deref(), &message, &signature) == Some(true) {
                return Ok(claims_value(&payload));
            }
        }
        Err(bad())
    }

    /// `Some(verified)` when a key of the JWKS fits `alg` and `kid`;
    /// `None` when none does.
    fn check_signature(
        &self,
        alg: Alg,
        kid: Option<&str>,
        message: &[u8],
        signature: &[u8],
    ) -> Option<bool> {
        let keys = self.keys.lock();
        let mut candidates = keys
            .0
            .iter()
            .filter(|k| k.fits(alg) && (kid.is_none() || k.kid() == kid))
            .peekable();
        candidates.peek()?;
        Some(candidates.any(|k| k.verify(alg, message, signature)))
    }

    /// The identity in verified `claims`, checked against this client and
    /// `nonce` at time `now` (seconds since the epoch).
    fn identity(&self, claims: &Value, nonce: &str, now: u64) -> Result<Identity, String> {
        let c = &self.config;
        if claims["iss"].as_str() != Some(c.issuer.as_str()) {
            return Err("the ID token is from another issuer".into());
        }
        let audiences: Vec<&str> = match &claims["aud"] {
            Value::String(a) => vec![a.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !audiences.contains(&c.client_id.as_str()) {
            return Err("the ID token is for another client".into());
        }
        if audiences.len() > 1 && claims["azp"].as_str() != Some(c.client_id.as_str()) {
            return Err("the ID token's authorized party is another client".into());
        }
        let exp = claims["exp"].as_u64().ok_or("the ID token has no exp")?;
        if exp + SKEW <= now {
            return Err("the ID token has expired".into());
        }
        if claims["iat"].as_u64().is_some_and(|iat| iat > now + SKEW) {
            return Err("the ID token was issued in the future".into());
        }
        if claims["nonce"].as_str() != Some(nonce) {
            return Err("the ID token's nonce is not this sign-in's".into());
        }
        let raw = claims[c.username_claim.as_str()]
            .as_str()
            .filter(|u| !u.is_empty())
            .ok_or_else(|| format!("the ID token has no {} claim", c.username_claim))?;
        // As the apiserver: an email names a user only once the provider
        // verified it (else anyone may claim an administrator's address).
        if c.username_claim == "email" && claims["email_verified"] != Value::Bool(true) {
            return Err("the ID token's email is not verified (email_verified)".into());
        }
        let username = format!("{}{raw}", c.username_prefix);
        check_name(&username).map_err(|why| format!("username {username:?}: {why}"))?;
        if c.reserved_users.contains(&username) {
            return Err(format!(
                "username {username:?} is the UI's own reader: never a signed-in user"
            ));
        }
        let groups: Vec<String> = match &claims[c.groups_claim.as_str()] {
            Value::Array(a) => a
                .iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            Value::String(g) => vec![g.clone()],
            _ => vec![],
        };
        if groups.len() > MAX_GROUPS {
            return Err(format!("more than {MAX_GROUPS} groups"));
        }
        let groups = groups
            .into_iter()
            .map(|g| format!("{}{g}", c.groups_prefix))
            .map(|g| {
                check_name(&g)
                    .map(|()| g.clone())
                    .map_err(|why| format!("group {g:?}: {why}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Identity {
            username,
            groups,
            expires: UNIX_EPOCH + Duration::from_secs(exp),
        })
    }
}

fn bad() -> String {
    "the ID token's signature is not the issuer's".into()
}

fn claims_value(claims: &[u8]) -> Value {
    serde_json::from_slice(claims).unwrap_or(Value::Null)
}

/// A username or group the UI impersonates: not empty, ≤ [`MAX_NAME`]
/// bytes, printable, never `system:`.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err("empty or longer than 256 bytes");
    }
    if name.chars().any(char::is_control) {
        return Err("holds a control character");
    }
    // The apiserver's HTTP reader trims what a header value starts and ends
    // with: " system:masters" would arrive as "system:masters".
    if name.trim() != name {
        return Err("starts or ends with white space");
    }
    if name.starts_with("system:") {
        return Err("names a system: identity, which the UI never impersonates");
    }
    Ok(())
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A compact JWS: (alg, kid, signed part, signature, claims bytes).
#[allow(clippy::type_complexity)]
fn split_jws(token: &str) -> Result<(Alg, Option<String>, Vec<u8>, Vec<u8>, Vec<u8>), String> {
    if token.len() > 64 * 1024 {
        return Err("the ID token is larger than 64 KiB".into());
    }
    let parts: Vec<&str> = token.split('.').collect();
    let [header, payload, signature] = parts[..] else {
        return Err("the ID token is not a signed JWT".into());
    };
    let decode = |s: &str| {
        URL_SAFE_NO_PAD
            .decode(s)
            .map_err(|_| "the ID token is not base64url".to_string())
    };
    let header: Value = serde_json::from_slice(&decode(header)?)
        .map_err(|_| "the ID token's header is not JSON".to_string())?;
    let alg = match header["alg"].as_str() {
        Some("RS256") => Alg::Rs256,
        Some("ES256") => Alg::Es256,
        other => {
            return Err(format!(
                "the ID token is signed with {:?}: RS256 or ES256 only",
                other.unwrap_or("nothing")
            ));
        }
    };
    if header.get("crit").is_some() {
        return Err("the ID token's header has critical extensions".into());
    }
    let kid = header["kid"].as_str().map(str::to_string);
    let message = format!("{}.{payload}", parts[0]).into_bytes();
    Ok((alg, kid, message, decode(signature)?, decode(payload)?))
}

/// `application/x-www-form-urlencoded` of one value.
fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

async fn get_json(agent: &ureq::Agent, url: &str) -> Result<Value, String> {
    let (agent, url) = (agent.clone(), url.to_string());
    tokio::task::spawn_blocking(move || {
        let mut resp = agent
            .get(&url)
            .header("Accept", "application/json")
            .call()
            .map_err(|e| format!("GET {url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("GET {url} answered {}", resp.status().as_u16()));
        }
        let body = read_bounded(&mut resp, &url)?;
        serde_json::from_slice(&body).map_err(|_| format!("GET {url}: not JSON"))
    })
    .await
    .map_err(|e| e.to_string())?
}

fn read_bounded(resp: &mut http::Response<ureq::Body>, url: &str) -> Result<Vec<u8>, String> {
    resp.body_mut()
        .with_config()
        .limit(MAX_BODY)
        .read_to_vec()
        .map_err(|e| format!("{url}: {e}"))
}

#[cfg(test)]
mod tests;
