//! helm's one way out to a remote cluster (docs/remote-clusters.md
//! "Addresses"): a CONNECT proxy on a loopback port of the operator's,
//! named as `proxy-url` in every remote run's kubeconfig, that checks the
//! target of each tunnel against the address policy before it connects.
//!
//! Why a proxy: a run's kubeconfig names the address its host resolved to
//! at the run's start (`super::connect`), but the remote API server — the
//! tenant's — answers helm, and client-go follows HTTP redirects. A `307`
//! to `https://169.254.169.254/` would send helm, and the remote
//! credentials in its headers, to the cloud metadata service: past every
//! check made before the run. With `proxy-url` set, client-go opens every
//! connection, a redirect's included, as `CONNECT host:port` here, and
//! this proxy connects only where [`super::connect::checked`] allows — the
//! whole answer of a name, looked up once, connected to by address (no
//! second lookup to rebind). A refused target gets `403` and its reason;
//! TLS stays end to end (helm still verifies the server's certificate).
//!
//! Who may use it: the port is on 127.0.0.1, and each tunnel must carry
//! `Proxy-Authorization` naming a remote cluster with that cluster's
//! secret (an HMAC of its id under a key of this process; client-go sends
//! it from the URL's user part, before any tunnel) — another process of
//! the pod's network gets `407`, and one cluster's run cannot pass for
//! another's.
//!
//! Loopback: a remote API server on a loopback address is its own (a run
//! tunnels to the address and port it was handed); any other loopback
//! target — the operator's own ports, this proxy — is refused, whatever
//! the policy, so a redirect cannot reach what listens inside the pod.
//!
//! Bounds: a request head of [`MAX_HEAD`] bytes read within
//! [`HEAD_TIMEOUT`]; at most [`MAX_TUNNELS`] tunnels at once (`503`
//! beyond), [`MAX_TUNNELS_PER_CLUSTER`] of one cluster's; a tunnel ends
//! when either side closes (helm is killed at its run's limit, which
//! closes its side).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OnceCell, Semaphore};

use super::connect::{self, CONNECT_TIMEOUT, Lookup};
use crate::delivery::source::address::AddressPolicy;

/// The largest request head read (a CONNECT line and a few headers).
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Tunnels open at once, at most: far above the helm processes that run
/// at once (each opens a few), far below what would exhaust descriptors.
pub const MAX_TUNNELS: usize = 512;
/// Tunnels of one remote cluster's runs at once, at most: one tenant's
/// server holding tunnels open (slow answers, redirects) leaves room for
/// the others.
pub const MAX_TUNNELS_PER_CLUSTER: usize = 64;

/// The proxy, started when the first remote run needs it (a process that
/// delivers to no remote cluster listens on nothing).
pub struct Egress {
    policy: AddressPolicy,
    lookup: Lookup,
    /// The port, once listening. Invariant: set at most once; the accept
    /// loop lives as long as the process.
    listening: OnceCell<SocketAddr>,
    /// The key each cluster's secret is an HMAC under.
    key: String,
    /// Per cluster id: the server endpoints its runs were handed (a
    /// loopback target is allowed only if it is one of them).
    own: parking_lot::Mutex<
        std::collections::HashMap<String, std::collections::HashSet<SocketAddr>>,
    >,
    /// Per cluster id: tunnels open now.
    open: parking_lot::Mutex<std::collections::HashMap<String, usize>>,
}

impl Egress {
    pub fn new(policy: AddressPolicy, lookup: Lookup) -> Arc<Self> {
        Arc::new(Egress {
            policy,
            lookup,
            listening: OnceCell::new(),
            key: random_secret(),
            own: Default::default(),
            open: Default::default(),
        })
    }

    /// Cluster `cluster`'s secret: hex of HMAC-SHA256(key, id).
    fn secret_of(&self, cluster: &str) -> String {
        use hmac::Mac;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(self.key.as_bytes())
            .expect("HMAC takes a key of any length");
        mac.update(cluster.as_bytes());
        crate::lean::hex::hex(&mac.finalize().into_bytes())
    }

    /// The `proxy-url` of a run on remote cluster `cluster` (its id:
    /// `[0-9a-f]`) handed `server` (the address and port its kubeconfig
    /// names): `http://<cluster>:<secret>@127.0.0.1:<port>`. Starts the
    /// proxy if it is not running.
    pub async fn proxy_url(
        self: &Arc<Self>,
        cluster: &str,
        server: SocketAddr,
    ) -> io::Result<String> {
        {
            let mut own = self.own.lock();
            let endpoints = own.entry(cluster.to_string()).or_default();
            // A cluster's server moves rarely; a bound all the same.
            if endpoints.len() >= 64 {
                endpoints.clear();
            }
            endpoints.insert(SocketAddr::new(server.ip().to_canonical(), server.port()));
        }
        let address = self
            .listening
            .get_or_try_init(|| async {
                let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
                let address = listener.local_addr()?;
                tokio::spawn(accept_loop(listener, self.clone()));
                Ok::<_, io::Error>(address)
            })
            .await?;
        Ok(format!(
            "http://{cluster}:{}@{address}",
            self.secret_of(cluster)
        ))
    }

    /// Whether a loopback `target` is cluster `cluster`'s own server.
    fn own_server(&self, cluster: &str, target: SocketAddr) -> bool {
        self.own
            .lock()
            .get(cluster)
            .is_some_and(|e| e.contains(&target))
    }

    /// A tunnel of `cluster` opened, unless it holds as many as allowed.
    fn open_tunnel(self: &Arc<Self>, cluster: &str) -> Option<ClusterTunnel> {
        let mut open = self.open.lock();
        let n = open.entry(cluster.to_string()).or_default();
        if *n >= MAX_TUNNELS_PER_CLUSTER {
            return None;
        }
        *n += 1;
        Some(ClusterTunnel {
            egress: self.clone(),
            cluster: cluster.to_string(),
        })
    }

    /// Whether `header` (a `Proxy-Authorization` value) carries the secret;
    /// the user part it names, if so.
    fn authorized(&self, header: &str) -> Option<String> {
        let encoded = header.trim().strip_prefix("Basic ")?;
        let decoded = STANDARD.decode(encoded.trim()).ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let (user, secret) = decoded.split_once(':')?;
        same(secret.as_bytes(), self.secret_of(user).as_bytes()).then(|| user.to_string())
    }
}

/// One open tunnel of a cluster; counted down when dropped.
struct ClusterTunnel {
    egress: Arc<Egress>,
    cluster: String,
}

impl Drop for ClusterTunnel {
    fn drop(&mut self) {
        let mut open = self.egress.open.lock();
        if let Some(n) = open.get_mut(&self.cluster) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.cluster);
            }
        }
    }
}

/// 256 bits from the OS's CSPRNG, in hex (URL-safe as a password).
fn random_secret() -> String {
    let a = uuid::Uuid::new_v4().simple().to_string();
    let b = uuid::Uuid::new_v4().simple().to_string();
    format!("{a}{b}")
}

/// `a == b` in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

async fn accept_loop(listener: TcpListener, egress: Arc<Egress>) {
    let tunnels = Arc::new(Semaphore::new(MAX_TUNNELS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Descriptors exhausted, for one: try again shortly.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let egress = egress.clone();
        let permit = tunnels.clone().try_acquire_owned();
        tokio::spawn(async move {
            let mut stream = stream;
            match permit {
                Ok(_permit) => serve(&mut stream, egress).await,
                Err(_) => {
                    let _ = refuse(&mut stream, 503, "Too many tunnels").await;
                }
            }
        });
    }
}

/// One client: its CONNECT checked, then the tunnel.
async fn serve(client: &mut TcpStream, egress: Arc<Egress>) {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(client)).await {
        Ok(Ok(head)) => head,
        _ => return,
    };
    let request = match Connect::parse(&head) {
        Ok(request) => request,
        Err((status, why)) => {
            let _ = refuse(client, status, why).await;
            return;
        }
    };
    let Some(cluster) = request
        .authorization
        .as_deref()
        .and_then(|h| egress.authorized(h))
    else {
        let _ = refuse(client, 407, "Proxy authentication required").await;
        return;
    };
    let Some(_tunnel) = egress.open_tunnel(&cluster) else {
        let _ = refuse(client, 503, "Too many tunnels of this cluster").await;
        return;
    };
    let addresses = match connect::checked(&egress.lookup, &egress.policy, &request.host).await {
        Ok(addresses) => addresses,
        Err(refusal) => {
            log::warn!(
                "remote cluster {cluster}: helm was sent to {}:{} (a redirect of its API server?), refused: {refusal}",
                request.host,
                request.port
            );
            let _ = refuse(client, 403, &format!("Forbidden: {refusal}")).await;
            return;
        }
    };
    // (An IPv4 address mapped into IPv6 is its IPv4 self here.)
    if let Some(address) = addresses.iter().map(|a| a.to_canonical()).find(|a| {
        a.is_loopback() && !egress.own_server(&cluster, SocketAddr::new(*a, request.port))
    }) {
        log::warn!(
            "remote cluster {cluster}: helm was sent to {}:{} (a redirect of its API server?), refused: a loopback address other than the cluster's own server",
            request.host,
            request.port
        );
        let why = format!("Forbidden: {address} is a loopback address, not the cluster's server");
        let _ = refuse(client, 403, &why).await;
        return;
    }
    let Some(mut server) = first_connecting(&addresses, request.port).await else {
        let _ = refuse(client, 502, "Bad gateway: no address of the host accepts").await;
        return;
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    tunnel(client, &mut server, request.early).await;
}

/// A connection to the first of `addresses` (checked) that accepts one on
/// `port`, each given [`CONNECT_TIMEOUT`].
async fn first_connecting(addresses: &[IpAddr], port: u16) -> Option<TcpStream> {
    for &ip in addresses {
        let connect = TcpStream::connect(SocketAddr::new(ip, port));
        if let Ok(Ok(stream)) = tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            return Some(stream);
        }
    }
    None
}

/// Bytes each way until either side closes or fails; `early` (what the
/// client sent after its head) goes first.
async fn tunnel(client: &mut TcpStream, server: &mut TcpStream, early: Vec<u8>) {
    if !early.is_empty() && server.write_all(&early).await.is_err() {
        return;
    }
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    tokio::select! {
        _ = tokio::io::copy(&mut client_read, &mut server_write) => {}
        _ = tokio::io::copy(&mut server_read, &mut client_write) => {}
    }
}

/// The head (through its blank line) and whatever followed it.
async fn read_head(client: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n");
        if end.map_or(buf.len(), |at| at + 4) > MAX_HEAD {
            return Err(io::Error::other("request head too large"));
        }
        if end.is_some() {
            return Ok(buf);
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// `status` and `reason` (one line: control characters dropped), then
/// the connection is closed.
async fn refuse(client: &mut TcpStream, status: u16, reason: &str) -> io::Result<()> {
    let reason: String = reason
        .chars()
        .filter(|c| !c.is_control())
        .take(300)
        .collect();
    let answer =
        format!("HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    client.write_all(answer.as_bytes()).await?;
    client.shutdown().await
}

/// A CONNECT request, as read.
#[derive(Debug, PartialEq, Eq)]
struct Connect {
    /// A name or an IP literal (without brackets).
    host: String,
    port: u16,
    authorization: Option<String>,
    /// Bytes after the head (a client may send its TLS hello at once).
    early: Vec<u8>,
}

impl Connect {
    /// `head`: bytes through the head's blank line, and any after.
    fn parse(head: &[u8]) -> Result<Connect, (u16, &'static str)> {
        let end = head
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or((400, "Bad request"))?;
        let text = std::str::from_utf8(&head[..end]).map_err(|_| (400, "Bad request"))?;
        let mut lines = text.split("\r\n");
        let mut line = lines.next().unwrap_or_default().split(' ');
        let (method, target, version) = (line.next(), line.next(), line.next());
        if method != Some("CONNECT") {
            return Err((405, "Method not allowed: CONNECT only"));
        }
        if line.next().is_some() || !version.is_some_and(|v| v.starts_with("HTTP/1.")) {
            return Err((400, "Bad request"));
        }
        let (host, port) = split_target(target.unwrap_or_default()).ok_or((400, "Bad target"))?;
        let authorization = lines
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("proxy-authorization"))
            .map(|(_, v)| v.trim().to_string());
        Ok(Connect {
            host,
            port,
            authorization,
            early: head[end + 4..].to_vec(),
        })
    }
}

/// `host:port` or `[v6]:port` → (host, port): a host of DNS characters or
/// an IP literal, a port of 1–65535.
fn split_target(target: &str) -> Option<(String, u16)> {
    let (host, port) = target.rsplit_once(':')?;
    let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
    let host = match host.strip_prefix('[') {
        Some(v6) => {
            let v6 = v6.strip_suffix(']')?;
            v6.parse::<std::net::Ipv6Addr>().ok()?;
            v6.to_string()
        }
        None => host.to_string(),
    };
    let bracketed = target.starts_with('[');
    let name_like = !host.is_empty()
        && host.len() <= 253
        && (bracketed
            || host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.')));
    name_like.then_some((host, port))
}

#[cfg(test)]
mod tests;
