//! The HTTP client chart sources are fetched with, and its rules:
//!
//! - addresses: every connection goes through the [`AddressPolicy`]'s
//!   resolver (`ChartSourceRefused`);
//! - redirects: at most [`MAX_REDIRECTS`], each to the same scheme, host
//!   and port;
//! - credentials: sent to the host they were given for, never to another
//!   (an index's `urls` may name any host);
//! - bodies: read up to a bound, counting what arrives whatever a header
//!   declares; never quoted in an error — errors say the URL (without
//!   credentials), the HTTP status and what was expected;
//! - time: one deadline for the whole request, body included.

use std::time::Duration;

use http::Uri;

use super::Credentials;
use super::address::{AddressPolicy, PolicyResolver, Refused};

/// Redirects followed, at most.
pub const MAX_REDIRECTS: usize = 3;

/// Why a GET failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The address policy refused the host's address.
    Refused(String),
    /// The server answered 404 (a signature or `.prov` that is not
    /// there is an answer, not a failure).
    NotFound(String),
    /// Anything else: the message says URL, status and what was expected.
    Failed(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Refused(m) | HttpError::NotFound(m) | HttpError::Failed(m) => f.write_str(m),
        }
    }
}

/// An HTTP client for one source (its credentials, CA and deadline).
pub struct Http {
    agent: ureq::Agent,
    /// The `Authorization` header and the `host:port` it may go to.
    auth: Option<(String, String)>,
}

impl Http {
    /// A client whose credentials go to `source_url`'s host only.
    pub fn new(
        source_url: &str,
        credentials: &Credentials,
        policy: &AddressPolicy,
        deadline: Duration,
    ) -> Result<Self, String> {
        let mut config = ureq::Agent::config_builder()
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(deadline))
            .http_status_as_error(false)
            // Followed by hand, to check each hop.
            .max_redirects(0)
            .user_agent(concat!("hossted-operator/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = &credentials.ca {
            config = config
                .tls_config(crate::tls::with_extra_ca(ca).map_err(|e| format!("ca.crt {e}"))?);
        }
        let auth = match (&credentials.username, &credentials.password) {
            _ if credentials.token.is_some() => {
                let token = credentials.token.as_deref().unwrap_or_default();
                Some((format!("Bearer {token}"), origin(source_url)?.1))
            }
            (Some(u), Some(p)) => {
                use base64::Engine;
                let header = format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
                );
                Some((header, origin(source_url)?.1))
            }
            _ => None,
        };
        let resolver = PolicyResolver {
            policy: policy.clone(),
            inner: Default::default(),
        };
        let agent = ureq::Agent::with_parts(
            config.build(),
            ureq::unversioned::transport::DefaultConnector::new(),
            resolver,
        );
        Ok(Http { agent, auth })
    }

    /// The body of `url`, at most `limit` bytes, after at most
    /// [`MAX_REDIRECTS`] same-origin redirects.
    pub fn get(&self, url: &str, limit: u64) -> Result<Vec<u8>, HttpError> {
        let get = Get {
            limit,
            ..Get::default()
        };
        match self.request(url, &get)? {
            Reply::Body(body) => Ok(body),
            Reply::Challenge(_) => Err(HttpError::Failed(format!(
                "GET {} answered 401: check credentialsSecretRef",
                without_credentials(url)
            ))),
        }
    }

    /// GET `url` as `get` says (see [`Get`]): the body of a 2xx answer, or
    /// the challenge of a 401 for the caller to answer.
    pub fn request(&self, url: &str, get: &Get<'_>) -> Result<Reply, HttpError> {
        Ok(match self.call(url, get)? {
            Called::Ok(mut resp, shown) => Reply::Body(read_body(&mut resp, &shown, get.limit)?),
            Called::Challenge(c) => Reply::Challenge(c),
        })
    }

    /// GET `url` (as [`Http::get`]) and hand its body to `read` as it
    /// arrives, at most `limit` bytes of it: nothing is buffered whole.
    pub fn get_streamed<T>(
        &self,
        url: &str,
        limit: u64,
        read: impl FnOnce(&mut dyn std::io::Read) -> Result<T, String>,
    ) -> Result<T, HttpError> {
        let get = Get {
            limit,
            ..Get::default()
        };
        match self.call(url, &get)? {
            Called::Ok(mut resp, shown) => {
                let mut body = Bounded {
                    inner: resp.body_mut().as_reader(),
                    left: limit,
                };
                read(&mut body).map_err(|e| {
                    HttpError::Failed(if e.contains(LARGER) {
                        format!("GET {shown}: the answer is larger than {limit} bytes")
                    } else if e.contains(LATE) {
                        format!("GET {shown}: {LATE}")
                    } else {
                        e
                    })
                })
            }
            Called::Challenge(_) => Err(HttpError::Failed(format!(
                "GET {} answered 401: check credentialsSecretRef",
                without_credentials(url)
            ))),
        }
    }

    /// The redirects, credentials and status rules of every GET (module
    /// docs): a 2xx response with its body unread, or a 401's challenge.
    fn call(&self, url: &str, get: &Get<'_>) -> Result<Called, HttpError> {
        let first = origin(url).map_err(HttpError::Failed)?;
        let mut at = url.to_string();
        for _ in 0..=MAX_REDIRECTS {
            let shown = without_credentials(&at);
            let here = origin(&at).map_err(HttpError::Failed)?;
            let mut req = self.agent.get(&at);
            if let Some(accept) = get.accept {
                req = req.header("Accept", accept);
            }
            // Credentials only where they were given for.
            match (get.authorization, &self.auth) {
                (Some(header), _) if here == first => req = req.header("Authorization", header),
                (None, Some((header, host))) if here.1 == *host => {
                    req = req.header("Authorization", header)
                }
                _ => {}
            }
            let resp = req.call().map_err(|e| called(&shown, e))?;
            let status = resp.status().as_u16();
            if (300..400).contains(&status) {
                let location = resp.headers().get("location").and_then(|l| l.to_str().ok());
                at = redirect(&at, location, status, &first, get.other_host_redirect)?;
                continue;
            }
            if status == 401 {
                let challenge = resp
                    .headers()
                    .get("www-authenticate")
                    .and_then(|c| c.to_str().ok())
                    .map(str::to_string);
                return Ok(Called::Challenge(challenge));
            }
            if status == 403 {
                return Err(HttpError::Failed(format!(
                    "GET {shown} answered 403: check credentialsSecretRef"
                )));
            }
            if status == 404 {
                return Err(HttpError::NotFound(format!(
                    "GET {shown} answered 404, expected 200"
                )));
            }
            if !(200..300).contains(&status) {
                return Err(HttpError::Failed(format!(
                    "GET {shown} answered {status}, expected 200"
                )));
            }
            return Ok(Called::Ok(resp, shown));
        }
        Err(HttpError::Failed(format!(
            "GET {}: more than {MAX_REDIRECTS} redirects",
            without_credentials(url)
        )))
    }
}

impl Http {
    /// One exchange of Git's smart HTTP protocol (docs/sources.md): a GET
    /// (`body` `None`) or a POST of `body`, with `headers`. The rules of
    /// every request hold: the address policy, credentials to the
    /// source's host only, same-origin redirects (a GET's only: a POST is
    /// never replayed elsewhere). A 2xx response with its body unread, and
    /// the URL that answered.
    pub fn git_exchange(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: Option<Vec<u8>>,
    ) -> Result<(http::Response<ureq::Body>, String), HttpError> {
        let first = origin(url).map_err(HttpError::Failed)?;
        let method = if body.is_some() { "POST" } else { "GET" };
        let mut at = url.to_string();
        for _ in 0..=MAX_REDIRECTS {
            let shown = without_credentials(&at);
            let here = origin(&at).map_err(HttpError::Failed)?;
            let authorization = self
                .auth
                .as_ref()
                .filter(|(_, host)| here.1 == *host)
                .map(|(header, _)| header.as_str());
            let sent = match &body {
                Some(bytes) => {
                    let mut req = self.agent.post(&at);
                    for (k, v) in headers {
                        req = req.header(k, v);
                    }
                    if let Some(a) = authorization {
                        req = req.header("Authorization", a);
                    }
                    req.send(&bytes[..])
                }
                None => {
                    let mut req = self.agent.get(&at);
                    for (k, v) in headers {
                        req = req.header(k, v);
                    }
                    if let Some(a) = authorization {
                        req = req.header("Authorization", a);
                    }
                    req.call()
                }
            };
            let resp = sent.map_err(|e| called(&shown, e))?;
            let status = resp.status().as_u16();
            if (300..400).contains(&status) && body.is_none() {
                let location = resp.headers().get("location").and_then(|l| l.to_str().ok());
                at = redirect(&at, location, status, &first, false)?;
                continue;
            }
            return match status {
                200..=299 => Ok((resp, at)),
                401 | 403 => Err(HttpError::Failed(format!(
                    "{method} {shown} answered {status}: check the source's secretRef"
                ))),
                404 => Err(HttpError::NotFound(format!(
                    "{method} {shown} answered 404: no such repository"
                ))),
                _ => Err(HttpError::Failed(format!(
                    "{method} {shown} answered {status}, expected 200"
                ))),
            };
        }
        Err(HttpError::Failed(format!(
            "{method} {}: more than {MAX_REDIRECTS} redirects",
            without_credentials(url)
        )))
    }
}

/// What [`Http::call`] got.
enum Called {
    /// A 2xx response, its body unread, and its URL as shown.
    Ok(http::Response<ureq::Body>, String),
    Challenge(Option<String>),
}

/// The io error [`Bounded`] fails with past its limit.
const LARGER: &str = "the answer is larger than its bound";
/// What the client's deadline passed is said as.
const LATE: &str = "no complete answer within the fetch deadline (--chart-fetch-timeout)";

/// A reader failing past `left` bytes.
struct Bounded<R> {
    inner: R,
    left: u64,
}

impl<R: std::io::Read> std::io::Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf).map_err(|e| {
            let late = e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<ureq::Error>())
                .is_some_and(|u| matches!(u, ureq::Error::Timeout(_)));
            if late { std::io::Error::other(LATE) } else { e }
        })?;
        self.left = self
            .left
            .checked_sub(n as u64)
            .ok_or_else(|| std::io::Error::other(LARGER))?;
        Ok(n)
    }
}

/// A GET's options besides its URL.
#[derive(Debug, Default)]
pub struct Get<'a> {
    pub accept: Option<&'a str>,
    /// Sent instead of the client's credentials, to the URL's own origin
    /// only (a registry's bearer token).
    pub authorization: Option<&'a str>,
    /// Bytes of the body read, at most.
    pub limit: u64,
    /// Follow a redirect to another host of the same scheme (a registry
    /// sends blobs to its storage host): nothing of `authorization` or the
    /// credentials goes there, and the address policy still applies.
    pub other_host_redirect: bool,
}

/// What a [`Http::request`] got.
#[derive(Debug)]
pub enum Reply {
    Body(Vec<u8>),
    /// 401, with its `WWW-Authenticate` header.
    Challenge(Option<String>),
}

/// Where a redirect from `at` leads, if it may be followed (see the module
/// docs).
fn redirect(
    at: &str,
    location: Option<&str>,
    status: u16,
    first: &(String, String),
    other_host: bool,
) -> Result<String, HttpError> {
    let shown = without_credentials(at);
    let location = location.ok_or_else(|| {
        HttpError::Failed(format!("GET {shown} answered {status} without a Location"))
    })?;
    let next = join(at, location);
    let to = origin(&next).map_err(HttpError::Failed)?;
    if to == *first || (other_host && to.0 == first.0) {
        return Ok(next);
    }
    Err(HttpError::Failed(format!(
        "GET {shown} answered {status}, a redirect to another scheme, host or port ({}): not followed",
        without_credentials(&next)
    )))
}

/// At most `limit` bytes of the body, or an error saying it is larger.
fn read_body(
    resp: &mut http::Response<ureq::Body>,
    shown: &str,
    limit: u64,
) -> Result<Vec<u8>, HttpError> {
    let larger = || {
        HttpError::Failed(format!(
            "GET {shown}: the answer is larger than {limit} bytes"
        ))
    };
    // ureq refuses a body that reaches its limit: one byte more tells
    // "exactly `limit`" from "larger".
    let body = resp
        .body_mut()
        .with_config()
        .limit(limit.saturating_add(1))
        .read_to_vec()
        .map_err(|e| match e {
            ureq::Error::BodyExceedsLimit(_) => larger(),
            e => called(shown, e),
        })?;
    if body.len() as u64 > limit {
        return Err(larger());
    }
    Ok(body)
}

/// A failed call, said by kind: ureq's own messages quote no body.
fn called(shown: &str, e: ureq::Error) -> HttpError {
    if let ureq::Error::Other(inner) = &e
        && let Some(refused) = inner.downcast_ref::<Refused>()
    {
        return HttpError::Refused(format!("GET {shown}: {refused}"));
    }
    let tls = match &e {
        // ureq gives no `source()`: the io error is opened here.
        ureq::Error::Io(io) => untrusted_certificate(io),
        e => untrusted_certificate(e),
    };
    if tls {
        return HttpError::Failed(format!(
            "GET {shown}: {e}: the server's certificate is not trusted; put its CA in credentialsSecretRef's ca.crt"
        ));
    }
    if let ureq::Error::Timeout(_) = e {
        return HttpError::Failed(format!("GET {shown}: {LATE}"));
    }
    HttpError::Failed(format!("GET {shown}: {e}"))
}

/// Whether a rustls certificate error is somewhere in `e`'s causes. The
/// TLS error may travel inside `io::Error`s, whose `source()` skips what
/// they wrap, so each one is opened as well.
fn untrusted_certificate(e: &(dyn std::error::Error + 'static)) -> bool {
    let is_certificate = |e: &(dyn std::error::Error + 'static)| {
        matches!(
            e.downcast_ref::<rustls::Error>(),
            Some(rustls::Error::InvalidCertificate(_))
        ) || matches!(
            e.downcast_ref::<ureq::Error>(),
            Some(ureq::Error::Rustls(rustls::Error::InvalidCertificate(_)))
        )
    };
    let mut next = Some(e);
    while let Some(e) = next {
        let mut wrapped = Some(e);
        while let Some(w) = wrapped {
            if is_certificate(w) {
                return true;
            }
            wrapped = w
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|inner| inner as &(dyn std::error::Error + 'static));
        }
        next = e.source();
    }
    false
}

/// (scheme, `host:port`) of `url`.
pub fn origin(url: &str) -> Result<(String, String), String> {
    let uri: Uri = url
        .parse()
        .map_err(|_| format!("{} is not a URL", without_credentials(url)))?;
    let scheme = uri.scheme_str().unwrap_or_default().to_ascii_lowercase();
    let host = uri
        .host()
        .ok_or_else(|| format!("{} names no host", without_credentials(url)))?
        .to_ascii_lowercase();
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "http" { 80 } else { 443 });
    Ok((scheme, format!("{host}:{port}")))
}

/// `location` resolved against `base` (absolute, or a path).
fn join(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let Ok(uri) = base.parse::<Uri>() else {
        return location.to_string();
    };
    let root = format!(
        "{}://{}",
        uri.scheme_str().unwrap_or("https"),
        uri.authority().map(|a| a.as_str()).unwrap_or_default()
    );
    if location.starts_with('/') {
        format!("{root}{location}")
    } else {
        let dir = uri.path().rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        format!("{root}{dir}/{location}")
    }
}

/// `url` without a `user:password@` part.
pub fn without_credentials(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find('/').unwrap_or(rest.len());
            match rest[..end].rfind('@') {
                Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
                None => url.to_string(),
            }
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_credentials() {
        assert_eq!(
            without_credentials("https://bob:s3cret@charts.example/x/index.yaml"),
            "https://charts.example/x/index.yaml"
        );
        assert_eq!(
            without_credentials("https://a.example/b@c"),
            "https://a.example/b@c"
        );
    }

    #[test]
    fn a_certificate_error_is_found_inside_the_io_error_that_carries_it() {
        let tls = std::io::Error::other(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        ));
        assert!(untrusted_certificate(&tls));
        let e = called("https://r.example/x", ureq::Error::Io(tls));
        assert!(e.to_string().contains("ca.crt"), "{e}");
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!untrusted_certificate(&refused));
    }

    #[test]
    fn redirects_resolve_against_the_url_they_answer() {
        assert_eq!(join("http://h:1/a/index.yaml", "/b/c"), "http://h:1/b/c");
        assert_eq!(
            join("http://h:1/a/index.yaml", "c.tgz"),
            "http://h:1/a/c.tgz"
        );
        assert_eq!(join("http://h:1/a", "https://o/x"), "https://o/x");
        assert_eq!(
            origin("HTTP://Example.com/x").unwrap(),
            ("http".into(), "example.com:80".into())
        );
        assert_ne!(
            origin("http://h:1/").unwrap(),
            origin("https://h:1/").unwrap()
        );
    }
}
