//! Where a connection to a remote API server may go (docs/remote-clusters.md
//! "Addresses"): the address policy (`--deny-chart-source-cidrs`) applied
//! to the address each connection is made to, not once when the cluster
//! starts.
//!
//! A kubeconfig's `server` names a host; the tenant who wrote it may also
//! run the DNS that answers for it. Checked only when the cluster starts,
//! the name could answer a public address then and the cloud metadata
//! service (169.254.169.254) a minute later — DNS rebinding — and every
//! request after that, with the remote credentials, would go there.
//!
//! - The operator's own client for the cluster resolves through
//!   [`PolicyDns`]: every new connection's answer is checked before
//!   anything is connected to, every address of it (the client may try
//!   any), with no second lookup between the check and the connect.
//! - helm resolves names itself, so it is never handed one: its kubeconfig
//!   names the address [`checked`] found at the start of its run, with the
//!   host name as `tls-server-name` (the certificate is still verified for
//!   the name) — `RemoteAccess::pinned_to`.
//!
//! An IP literal is checked once (it cannot change); a name is looked up
//! again at each connection and each helm run.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;

use crate::delivery::source::address::{AddressPolicy, Cidr};

/// How long a connection to a remote API server may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A lookup's answers, at most: a name answering more is refused (no
/// client needs them, and each is checked).
pub const MAX_ANSWERS: usize = 64;

/// A host name's addresses (the port is the caller's). The system's
/// resolver ([`system_lookup`]) in the operator; a script in tests.
pub type Lookup = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>> + Send + Sync,
>;

/// The system's resolver (getaddrinfo, as every client of the process).
pub fn system_lookup() -> Lookup {
    Arc::new(|host: String| {
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .map(|a| a.ip())
                .collect())
        })
    })
}

/// Why no connection is made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the server's host name does not resolve")]
    DoesNotResolve,
    #[error("the server's host name answers more than {MAX_ANSWERS} addresses")]
    TooManyAnswers,
    #[error(
        "the server's address {address} is in {network}, a network --deny-chart-source-cidrs refuses: the operator does not connect there"
    )]
    Denied { address: IpAddr, network: Cidr },
}

/// `host`'s addresses now, each allowed by `policy` — or why not. An IP
/// literal is its own answer.
pub async fn checked(
    lookup: &Lookup,
    policy: &AddressPolicy,
    host: &str,
) -> Result<Vec<IpAddr>, Refusal> {
    let addresses = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        // A tenant's name server may never answer: the lookup holds a
        // connection (or a helm slot) no longer than a connect may take.
        Err(_) => tokio::time::timeout(CONNECT_TIMEOUT, lookup(host.to_string()))
            .await
            .map_err(|_| Refusal::DoesNotResolve)?
            .map_err(|_| Refusal::DoesNotResolve)?,
    };
    allowed(addresses, policy)
}

/// Of `addresses` (checked, not empty), the first that accepts a TCP
/// connection on `port` within [`PROBE_TIMEOUT`] — else the first. helm
/// is handed one address, and client-go would have tried the others: a
/// dual-stack name whose IPv6 address the pod cannot reach must not fail
/// every run. One address is handed over unprobed. The probes together
/// end within [`PROBE_BUDGET`]: a run holds a helm slot meanwhile, and a
/// tenant's name may answer 64 addresses that never accept.
pub async fn first_answering(addresses: &[IpAddr], port: u16) -> IpAddr {
    if addresses.len() > 1 {
        let probes = async {
            for &ip in addresses {
                let connect = tokio::net::TcpStream::connect(SocketAddr::new(ip, port));
                if let Ok(Ok(_)) = tokio::time::timeout(PROBE_TIMEOUT, connect).await {
                    return Some(ip);
                }
            }
            None
        };
        if let Ok(Some(ip)) = tokio::time::timeout(PROBE_BUDGET, probes).await {
            return ip;
        }
    }
    addresses[0]
}

/// How long [`first_answering`] waits for each address …
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// … and for all of them.
pub const PROBE_BUDGET: Duration = Duration::from_secs(5);

/// `addresses` if there are some, not too many, and `policy` denies none
/// of them: the client may try any.
fn allowed(addresses: Vec<IpAddr>, policy: &AddressPolicy) -> Result<Vec<IpAddr>, Refusal> {
    if addresses.is_empty() {
        return Err(Refusal::DoesNotResolve);
    }
    if addresses.len() > MAX_ANSWERS {
        return Err(Refusal::TooManyAnswers);
    }
    if let Some((address, network)) = addresses
        .iter()
        .find_map(|&a| policy.refuses(a).map(|n| (a, n)))
    {
        return Err(Refusal::Denied { address, network });
    }
    Ok(addresses)
}

/// hyper's resolver with the policy applied to every answer (see the
/// module docs).
#[derive(Clone)]
pub struct PolicyDns {
    policy: AddressPolicy,
    lookup: Lookup,
}

impl PolicyDns {
    pub fn new(policy: AddressPolicy, lookup: Lookup) -> Self {
        PolicyDns { policy, lookup }
    }
}

impl tower::Service<Name> for PolicyDns {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let (policy, lookup) = (self.policy.clone(), self.lookup.clone());
        Box::pin(async move {
            let addresses = checked(&lookup, &policy, name.as_str())
                .await
                .map_err(|refusal| io::Error::new(io::ErrorKind::PermissionDenied, refusal))?;
            // The port is set by the connector, from the URL.
            Ok(addresses
                .into_iter()
                .map(|ip| SocketAddr::new(ip, 0))
                .collect::<Vec<_>>()
                .into_iter())
        })
    }
}

/// The TCP connector of a remote cluster's client: each connection's
/// address checked by [`PolicyDns`], opened within [`CONNECT_TIMEOUT`].
pub fn connector(policy: AddressPolicy, lookup: Lookup) -> HttpConnector<PolicyDns> {
    let mut http = HttpConnector::new_with_resolver(PolicyDns::new(policy, lookup));
    // TLS is layered over it (https only: the kubeconfig's parser).
    http.enforce_http(false);
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_nodelay(true);
    http
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use http_body_util::Empty;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    use proptest::prelude::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const ALLOWED: &str = "127.0.0.1";
    const DENIED: &str = "127.0.0.2";

    fn policy() -> AddressPolicy {
        AddressPolicy::parse(&format!("{DENIED}/32,169.254.0.0/16")).unwrap()
    }

    /// A lookup answering from `script`, one answer per call, in order.
    fn scripted(script: Vec<Vec<IpAddr>>) -> (Lookup, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let script = Arc::new(Mutex::new(script.into_iter()));
        let counted = calls.clone();
        let lookup: Lookup = Arc::new(move |_host: String| {
            counted.fetch_add(1, Ordering::SeqCst);
            let next = script.lock().unwrap().next().unwrap_or_default();
            Box::pin(async move { Ok(next) })
        });
        (lookup, calls)
    }

    /// A server on `ip`:`port` answering 200 to each connection, counting
    /// the connections it accepted.
    async fn server(ip: &str, port: u16) -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind((ip, port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                // The request read first: a socket closed with unread bytes
                // is reset, and the answer lost.
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            }
        });
        (port, accepted)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// One answer of the hostile DNS: allowed only when every address is.
    fn answer() -> impl Strategy<Value = Vec<IpAddr>> {
        prop::collection::vec(
            prop_oneof![
                3 => Just(ip(ALLOWED)),
                2 => Just(ip(DENIED)),
                1 => Just(ip("169.254.169.254")),
                1 => Just(ip("::ffff:127.0.0.2")),
            ],
            0..4,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// A name whose answers change from one connection to the next
        /// (rebinding, in any order, mixed answers included): no
        /// connection ever reaches a denied address, every connection
        /// whose answer was wholly allowed is made, and each connection
        /// looked the name up again.
        #[test]
        fn a_rebinding_name_never_reaches_a_denied_address(
            script in prop::collection::vec(answer(), 1..12)
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let (port, allowed_accepts) = server(ALLOWED, 0).await;
                let (_, denied_accepts) = server(DENIED, port).await;
                let (lookup, calls) = scripted(script.clone());
                let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
                    // Every request a new connection: each is looked up.
                    .pool_max_idle_per_host(0)
                    .build(connector(policy(), lookup));
                let mut made = 0;
                for answer in &script {
                    let uri: http::Uri = format!("http://rebinding.test:{port}/").parse().unwrap();
                    let wholly_allowed = !answer.is_empty()
                        && answer.iter().all(|a| policy().refuses(*a).is_none());
                    let result = client.get(uri).await;
                    prop_assert_eq!(
                        result.is_ok(),
                        wholly_allowed,
                        "answer {:?}: {:?}",
                        answer,
                        result.as_ref().err()
                    );
                    made += usize::from(wholly_allowed);
                }
                prop_assert_eq!(denied_accepts.load(Ordering::SeqCst), 0);
                prop_assert_eq!(allowed_accepts.load(Ordering::SeqCst), made);
                prop_assert_eq!(calls.load(Ordering::SeqCst), script.len());
                Ok(())
            })?;
        }
    }

    #[tokio::test]
    async fn a_refusal_says_which_address_and_network() {
        let (lookup, _) = scripted(vec![vec![ip(ALLOWED), ip("169.254.169.254")]]);
        let refusal = checked(&lookup, &policy(), "metadata.test")
            .await
            .unwrap_err();
        assert_eq!(
            refusal,
            Refusal::Denied {
                address: ip("169.254.169.254"),
                network: "169.254.0.0/16".parse().unwrap(),
            }
        );
        let (nothing, _) = scripted(vec![vec![]]);
        assert_eq!(
            checked(&nothing, &policy(), "empty.test").await,
            Err(Refusal::DoesNotResolve)
        );
        let (many, _) = scripted(vec![vec![ip(ALLOWED); MAX_ANSWERS + 1]]);
        assert_eq!(
            checked(&many, &policy(), "many.test").await,
            Err(Refusal::TooManyAnswers)
        );
    }

    #[tokio::test]
    async fn helm_is_handed_the_first_address_that_answers() {
        let listener = tokio::net::TcpListener::bind((ALLOWED, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // Nothing listens on 127.0.0.3 at that port: refused at once.
        let answer = [ip("127.0.0.3"), ip(ALLOWED)];
        assert_eq!(first_answering(&answer, port).await, ip(ALLOWED));
        // None answers: the first, as helm would have tried it.
        drop(listener);
        assert_eq!(first_answering(&answer, port).await, ip("127.0.0.3"));
        // One address: handed over as it is.
        assert_eq!(
            first_answering(&[ip("127.0.0.3")], port).await,
            ip("127.0.0.3")
        );
    }

    #[tokio::test]
    async fn an_ip_literal_is_its_own_answer_and_is_checked() {
        let (lookup, calls) = scripted(vec![]);
        assert_eq!(
            checked(&lookup, &policy(), ALLOWED).await,
            Ok(vec![ip(ALLOWED)])
        );
        assert!(matches!(
            checked(&lookup, &policy(), DENIED).await,
            Err(Refusal::Denied { .. })
        ));
        assert_eq!(calls.load(Ordering::SeqCst), 0, "no lookup of a literal");
    }
}
