//! The egress proxy against clients that follow any redirect: a hostile
//! sequence of targets never reaches a denied address.

use super::*;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;

const ALLOWED: &str = "127.0.0.1";
const DENIED: &str = "127.0.0.2";

fn policy() -> AddressPolicy {
    AddressPolicy::parse(&format!("{DENIED}/32,169.254.0.0/16")).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A lookup answering from `script`, one answer per call, in order.
fn scripted(script: Vec<Vec<IpAddr>>) -> Lookup {
    let script = Arc::new(Mutex::new(script.into_iter()));
    Arc::new(move |_host: String| {
        let next = script.lock().unwrap().next().unwrap_or_default();
        Box::pin(async move { Ok(next) })
    })
}

/// An echo server on `ip`:`port` counting the connections it accepted.
async fn echo(ip: &str, port: u16) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind((ip, port)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (port, accepted)
}

/// The proxy's address and the `Proxy-Authorization` its URL stands for,
/// for a cluster whose server is `own` (a loopback target is allowed only
/// if it is that).
async fn started(egress: &Arc<Egress>, own: SocketAddr) -> (SocketAddr, String) {
    let url: http::Uri = egress
        .proxy_url("c0ffee", own)
        .await
        .unwrap()
        .parse()
        .unwrap();
    let authority = url.authority().unwrap().as_str().to_string();
    let (user, at) = authority.split_once('@').unwrap();
    let address = at.parse().unwrap();
    (address, format!("Basic {}", STANDARD.encode(user)))
}

/// Sends `head`, then `hello`; the status of the answer and, when 200,
/// what came back through the tunnel.
async fn ask(proxy: SocketAddr, head: &str, hello: &[u8]) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 512];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
        }
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if status != 200 {
        return (status, Vec::new());
    }
    stream.write_all(hello).await.unwrap();
    let mut back = vec![0u8; hello.len()];
    stream.read_exact(&mut back).await.unwrap();
    (status, back)
}

fn connect_head(target: &str, authorization: &str) -> String {
    format!(
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: {authorization}\r\n\r\n"
    )
}

/// A target of a redirect a hostile API server might send helm to.
#[derive(Debug, Clone)]
enum Target {
    /// A name, answering this (any mix of allowed and denied addresses).
    Name(Vec<IpAddr>),
    /// An IP literal (`[v6]` when IPv6).
    Literal(IpAddr),
}

fn target() -> impl Strategy<Value = Target> {
    let address = prop_oneof![
        3 => Just(ip(ALLOWED)),
        2 => Just(ip(DENIED)),
        1 => Just(ip("169.254.169.254")),
        1 => Just(ip("::ffff:127.0.0.2")),
    ];
    prop_oneof![
        prop::collection::vec(address.clone(), 0..4).prop_map(Target::Name),
        address.prop_map(Target::Literal),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any sequence of tunnel targets — names whose answers change from
    /// one tunnel to the next, literals of any address: the denied
    /// listener (on the allowed one's port) never accepts a connection,
    /// every target wholly allowed is tunnelled (bytes echoed back), every
    /// other is refused with 403.
    #[test]
    fn no_tunnel_ever_reaches_a_denied_address(
        targets in prop::collection::vec(target(), 1..10)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let (port, allowed_accepts) = echo(ALLOWED, 0).await;
            let (_, denied_accepts) = echo(DENIED, port).await;
            let answers = targets
                .iter()
                .filter_map(|t| match t {
                    Target::Name(answer) => Some(answer.clone()),
                    Target::Literal(_) => None,
                })
                .collect();
            let egress = Egress::new(policy(), scripted(answers));
            let own = SocketAddr::new(ip(ALLOWED), port);
            let (proxy, authorization) = started(&egress, own).await;
            let mut made = 0;
            for (i, t) in targets.iter().enumerate() {
                let (host, answer) = match t {
                    Target::Name(answer) => ("redirected.test".to_string(), answer.clone()),
                    Target::Literal(IpAddr::V6(v6)) => (format!("[{v6}]"), vec![IpAddr::V6(*v6)]),
                    Target::Literal(v4) => (v4.to_string(), vec![*v4]),
                };
                let allowed = !answer.is_empty()
                    && answer.iter().all(|a| policy().refuses(*a).is_none());
                let hello = format!("hello {i}");
                let (status, back) =
                    ask(proxy, &connect_head(&format!("{host}:{port}"), &authorization), hello.as_bytes()).await;
                if allowed {
                    prop_assert_eq!(status, 200, "{:?}", t);
                    prop_assert_eq!(back, hello.as_bytes().to_vec());
                    made += 1;
                } else {
                    prop_assert_eq!(status, 403, "{:?}", t);
                }
            }
            prop_assert_eq!(denied_accepts.load(Ordering::SeqCst), 0);
            prop_assert_eq!(allowed_accepts.load(Ordering::SeqCst), made);
            Ok(())
        })?;
    }
}

/// The proxy relays for helm alone: no `Proxy-Authorization`, another
/// secret, or a scheme other than Basic gets 407 and no connection.
#[tokio::test]
async fn a_tunnel_without_the_secret_is_refused() {
    let (port, accepts) = echo(ALLOWED, 0).await;
    let egress = Egress::new(policy(), scripted(vec![]));
    let (proxy, authorization) = started(&egress, SocketAddr::new(ip(ALLOWED), port)).await;
    let target = format!("{ALLOWED}:{port}");
    let other = format!("Basic {}", STANDARD.encode("c0ffee:not-the-secret"));
    let bearer = authorization.replacen("Basic", "Bearer", 1);
    for head in [
        format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
        connect_head(&target, &other),
        connect_head(&target, &bearer),
    ] {
        assert_eq!(ask(proxy, &head, b"x").await.0, 407, "{head}");
    }
    assert_eq!(accepts.load(Ordering::SeqCst), 0);
    // With it: tunnelled.
    assert_eq!(
        ask(proxy, &connect_head(&target, &authorization), b"x").await,
        (200, b"x".to_vec())
    );
    assert_eq!(accepts.load(Ordering::SeqCst), 1);
}

/// A request other than CONNECT, a bad target or a head without end is
/// refused; the proxy goes on serving.
#[tokio::test]
async fn a_bad_request_is_refused_and_the_proxy_goes_on() {
    let (port, _) = echo(ALLOWED, 0).await;
    let egress = Egress::new(policy(), scripted(vec![]));
    let (proxy, authorization) = started(&egress, SocketAddr::new(ip(ALLOWED), port)).await;
    let get = format!(
        "GET http://{ALLOWED}:{port}/ HTTP/1.1\r\nProxy-Authorization: {authorization}\r\n\r\n"
    );
    assert_eq!(ask(proxy, &get, b"").await.0, 405);
    for target in [
        "no-port",
        "host:0",
        "host:99999",
        "a b:1",
        "[::1:443",
        "::1:443",
    ] {
        assert_eq!(
            ask(proxy, &connect_head(target, &authorization), b"")
                .await
                .0,
            400,
            "{target}"
        );
    }
    // A head longer than MAX_HEAD: the connection is closed unanswered.
    let endless = format!(
        "CONNECT {ALLOWED}:{port} HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(MAX_HEAD)
    );
    assert_eq!(ask(proxy, &endless, b"").await.0, 0);
    let target = format!("{ALLOWED}:{port}");
    assert_eq!(
        ask(proxy, &connect_head(&target, &authorization), b"still").await,
        (200, b"still".to_vec())
    );
}

#[test]
fn a_connect_is_read_with_its_target_and_what_followed_it() {
    let head = b"CONNECT [2001:db8::1]:6443 HTTP/1.1\r\nproxy-authorization: Basic eA==\r\n\r\n\x16\x03\x01";
    assert_eq!(
        Connect::parse(head),
        Ok(Connect {
            host: "2001:db8::1".into(),
            port: 6443,
            authorization: Some("Basic eA==".into()),
            early: b"\x16\x03\x01".to_vec(),
        })
    );
    assert_eq!(
        split_target("api.example.com:443"),
        Some(("api.example.com".into(), 443))
    );
    assert_eq!(split_target("[not-v6]:443"), None);
    assert_eq!(split_target(&format!("{}:443", "a".repeat(254))), None);
}

/// A loopback target other than the cluster's own server — the
/// operator's own ports, the proxy itself — is refused, whatever the
/// policy allows; and one cluster's secret does not pass for another's.
#[tokio::test]
async fn loopback_is_the_clusters_own_server_only_and_secrets_are_per_cluster() {
    let (port, accepts) = echo(ALLOWED, 0).await;
    let (other, other_accepts) = echo(ALLOWED, 0).await;
    // The policy allows loopback: only the cluster's own port passes.
    let egress = Egress::new(
        AddressPolicy::parse("169.254.0.0/16").unwrap(),
        scripted(vec![]),
    );
    let (proxy, authorization) = started(&egress, SocketAddr::new(ip(ALLOWED), port)).await;
    let own = format!("{ALLOWED}:{port}");
    assert_eq!(
        ask(proxy, &connect_head(&own, &authorization), b"x").await,
        (200, b"x".to_vec())
    );
    for target in [
        format!("{ALLOWED}:{other}"),
        format!("[::ffff:127.0.0.1]:{other}"),
        format!("{}", proxy),
    ] {
        assert_eq!(
            ask(proxy, &connect_head(&target, &authorization), b"")
                .await
                .0,
            403,
            "{target}"
        );
    }
    assert_eq!(other_accepts.load(Ordering::SeqCst), 0);
    // Cluster c0ffee's secret under another cluster's name: refused.
    let decoded = String::from_utf8(
        STANDARD
            .decode(authorization.trim_start_matches("Basic "))
            .unwrap(),
    )
    .unwrap();
    let (_, secret) = decoded.split_once(':').unwrap();
    let other_cluster = format!("Basic {}", STANDARD.encode(format!("beef:{secret}")));
    assert_eq!(
        ask(proxy, &connect_head(&own, &other_cluster), b"").await.0,
        407
    );
    assert_eq!(accepts.load(Ordering::SeqCst), 1);
}
