//! A stand-in for the Hossted API: an HTTP/1.1 server on 127.0.0.1 that
//! records every request and answers with scripted status codes (rules
//! first, then the script, 200 when neither says). A 3xx carries a
//! `Location`. Enough HTTP for a JSON POST with a Content-Length.
//!
//! ```no_run
//! # async fn demo() {
//! let api = envtest::Receiver::start().await.unwrap();
//! api.respond_with(&[503, 503]); // then 200s
//! // ... point the operator at api.url() ...
//! let posts = api.wait_for(|r| r.path == "/apps", 1, std::time::Duration::from_secs(10)).await;
//! assert_eq!(posts[0].json()["app_api_info"]["type"], "k8s");
//! # }
//! ```

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// One request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The status it was answered with.
    pub answered: u16,
    /// When its body had arrived (for latencies that must not include the
    /// time a caller takes to look through what was recorded).
    pub at: std::time::Instant,
}

impl Recorded {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }
}

type Rule = Box<dyn Fn(&Recorded) -> Option<u16> + Send + Sync>;

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Recorded>>,
    /// Consulted first, in order: the first `Some` answers.
    rules: Mutex<Vec<Rule>>,
    script: Mutex<VecDeque<u16>>,
    /// How long to wait before answering (a slow API).
    delay: Mutex<std::time::Duration>,
    arrived: Notify,
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    url: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Receiver {
    /// Listens on a free port of 127.0.0.1.
    pub async fn start() -> io::Result<Self> {
        Self::start_on(0).await
    }

    /// Listens on `port` of 127.0.0.1 (0: any free port).
    pub async fn start_on(port: u16) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn({
            let shared = shared.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, shared.clone()));
                }
            }
        });
        Ok(Receiver { url, shared, task })
    }

    /// Listens with TLS on a free port of 127.0.0.1, with a serving
    /// certificate for `127.0.0.1` and `localhost` signed by a CA made for
    /// it; returns the receiver (its URL is `https://localhost:<port>`) and
    /// that CA in PEM — what a client must add to trust it.
    pub async fn start_tls() -> Result<(Self, String), crate::Error> {
        let ca = crate::pki::Ca::generate()?;
        let serving = ca.serving_cert()?;
        let acceptor = tls_acceptor(&serving)?;
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let url = format!("https://localhost:{}", listener.local_addr()?.port());
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn({
            let shared = shared.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (acceptor, shared) = (acceptor.clone(), shared.clone());
                    tokio::spawn(async move {
                        // A client that does not trust the CA fails the
                        // handshake: nothing is recorded.
                        if let Ok(tls) = acceptor.accept(stream).await {
                            serve(tls, shared).await;
                        }
                    });
                }
            }
        });
        Ok((Receiver { url, shared, task }, ca.cert_pem()))
    }

    /// `http://127.0.0.1:<port>` (`https://localhost:<port>` with TLS).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Answers the next requests with these statuses, in order; then 200.
    pub fn respond_with(&self, statuses: &[u16]) {
        self.shared.script.lock().extend(statuses);
    }

    /// Answers every request `rule` returns a status for with that status,
    /// before the script and for as long as the receiver lives (e.g. 400 for
    /// one app's payloads).
    pub fn respond_when(&self, rule: impl Fn(&Recorded) -> Option<u16> + Send + Sync + 'static) {
        self.shared.rules.lock().push(Box::new(rule));
    }

    /// Drops every rule given to [`respond_when`](Self::respond_when).
    pub fn clear_rules(&self) {
        self.shared.rules.lock().clear();
    }

    /// Answers every request only after `delay` (it is recorded at once).
    pub fn set_delay(&self, delay: Duration) {
        *self.shared.delay.lock() = delay;
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().clone()
    }

    /// Waits until at least `n` requests match `filter`, and returns them all;
    /// returns what there is after `timeout`.
    pub async fn wait_for(
        &self,
        filter: impl Fn(&Recorded) -> bool,
        n: usize,
        timeout: Duration,
    ) -> Vec<Recorded> {
        self.wait_for_since(0, filter, n, timeout).await
    }

    /// [`wait_for`](Self::wait_for) among the requests after the first
    /// `from` only. Each arrival looks only at what arrived since the last
    /// look: with thousands recorded, cloning and filtering all of them on
    /// each arrival would cost more than what a benchmark measures (and
    /// take CPU from what it measures).
    pub async fn wait_for_since(
        &self,
        from: usize,
        filter: impl Fn(&Recorded) -> bool,
        n: usize,
        timeout: Duration,
    ) -> Vec<Recorded> {
        let deadline = tokio::time::Instant::now() + timeout;
        let (mut matching, mut next) = (Vec::new(), from);
        loop {
            let mut arrived = std::pin::pin!(self.shared.arrived.notified());
            arrived.as_mut().enable();
            {
                let all = self.shared.requests.lock();
                let new = all.get(next..).unwrap_or_default();
                matching.extend(new.iter().filter(|r| filter(r)).cloned());
                next = next.max(all.len());
            }
            if matching.len() >= n {
                return matching;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return matching;
            }
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A connection the receiver speaks HTTP/1.1 on: plain TCP or TLS.
trait Conn: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Conn for T {}

async fn serve(mut stream: impl Conn, shared: Arc<Shared>) {
    // Several requests may come on one keep-alive connection.
    let mut buf = Vec::new();
    loop {
        let Some(head_end) = read_until_head_end(&mut stream, &mut buf).await else {
            return;
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let mut request_line = lines.next().unwrap_or_default().split(' ');
        let method = request_line.next().unwrap_or_default().to_string();
        let path = request_line.next().unwrap_or_default().to_string();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let length: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let body_start = head_end + 4;
        while buf.len() < body_start + length {
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = buf[body_start..body_start + length].to_vec();
        buf.drain(..body_start + length);
        let mut recorded = Recorded {
            method,
            path,
            headers,
            body,
            answered: 200,
            at: std::time::Instant::now(),
        };
        let ruled = shared.rules.lock().iter().find_map(|r| r(&recorded));
        let status = ruled
            .or_else(|| shared.script.lock().pop_front())
            .unwrap_or(200);
        recorded.answered = status;
        shared.requests.lock().push(recorded);
        shared.arrived.notify_waiters();
        let delay = *shared.delay.lock();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        // A redirect points somewhere that answers 200 to anything: a
        // client that follows it would see success there.
        let location = if (300..400).contains(&status) {
            "Location: /moved-here\r\n"
        } else {
            ""
        };
        let reply = format!(
            "HTTP/1.1 {status} {}\r\n{location}Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}",
            if status < 400 { "OK" } else { "Error" }
        );
        if stream.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads until `buf` holds a whole request head; returns where it ends.
async fn read_until_head_end(stream: &mut impl Conn, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(i);
        }
        if buf.len() > 64 * 1024 {
            return None;
        }
        let mut chunk = [0u8; 8192];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn tls_acceptor(serving: &crate::pki::PemPair) -> Result<tokio_rustls::TlsAcceptor, crate::Error> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |e: &dyn std::fmt::Display| io::Error::other(format!("receiver TLS: {e}"));
    let certs = CertificateDer::pem_slice_iter(serving.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    let key = PrivateKeyDer::from_pem_slice(serving.key.as_bytes()).map_err(|e| bad(&e))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| bad(&e))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| bad(&e))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
