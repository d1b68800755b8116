//! The HTTP server for `/metrics`, `/healthz` and `/readyz` (hyper,
//! HTTP/1.1, one request per connection).
//!
//! It must outlive whatever happens to it: an `accept` error (too many open
//! files, a connection reset before it was accepted) is logged and retried
//! after a short pause instead of ending the server; a client that connects
//! and sends nothing is dropped after the idle timeout; at most
//! `max_connections` are served at once — further clients wait in the
//! kernel's backlog instead of costing a task and a buffer each.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Limits of the server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// A client must send its request head within this long.
    pub idle_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for ServerOptions {
    /// 5 s for a request head, 512 connections at once: 200 idle
    /// connections held open (anyone the NetworkPolicy lets reach the
    /// port) leave `/healthz` answering well within the kubelet's 1 s probe
    /// timeout, for a few MiB of buffers at most.
    fn default() -> Self {
        ServerOptions {
            idle_timeout: Duration::from_secs(5),
            max_connections: 512,
        }
    }
}

/// What a path answers: status, content type, body.
pub type Reply = (StatusCode, &'static str, String);

/// Where connections come from (a `TcpListener`; tests inject failures).
pub(crate) trait Accept: Send + 'static {
    fn accept(&self) -> impl Future<Output = io::Result<TcpStream>> + Send;
}

impl Accept for TcpListener {
    async fn accept(&self) -> io::Result<TcpStream> {
        TcpListener::accept(self).await.map(|(s, _)| s)
    }
}

/// Serves `routes` (path → reply; GET only) on `listener` until the future
/// is dropped.
pub(crate) async fn serve<A, F>(listener: A, routes: F, options: ServerOptions)
where
    A: Accept,
    F: Fn(&str) -> Reply + Send + Sync + 'static,
{
    let routes = Arc::new(routes);
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let mut pause = Duration::from_millis(10);
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return; // the semaphore is never closed
        };
        let stream = match listener.accept().await {
            Ok(stream) => {
                pause = Duration::from_millis(10);
                stream
            }
            Err(e) => {
                log::warn!("health/metrics server: accept failed, retrying in {pause:?}: {e}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let routes = routes.clone();
        let idle = options.idle_timeout;
        tokio::spawn(async move {
            let _slot = slot;
            let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                let routes = routes.clone();
                async move { Ok::<_, Infallible>(answer(&req, routes.as_ref())) }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(idle)
                .keep_alive(false);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            // The head must come within `idle`; the whole exchange (a slow
            // reader of a large scrape) within a bound too.
            let _ = tokio::time::timeout(idle + Duration::from_secs(30), connection).await;
        });
    }
}

fn answer<B>(req: &Request<B>, routes: &dyn Fn(&str) -> Reply) -> Response<Full<Bytes>> {
    let (status, content_type, body) = if req.method() == hyper::Method::GET {
        routes(req.uri().path())
    } else {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".to_string(),
        )
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, v);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn routes(path: &str) -> Reply {
        match path {
            "/healthz" => (StatusCode::OK, "text/plain", "ok\n".into()),
            _ => (StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
        }
    }

    /// A listener whose first `failures` accepts fail as `accept(2)` does
    /// when the process is out of file descriptors.
    struct Flaky {
        inner: TcpListener,
        failures: AtomicUsize,
    }

    impl Accept for Flaky {
        async fn accept(&self) -> io::Result<TcpStream> {
            if self
                .failures
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(io::Error::from_raw_os_error(libc::EMFILE));
            }
            self.inner.accept().await.map(|(s, _)| s)
        }
    }

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    async fn start(failures: usize, options: ServerOptions) -> std::net::SocketAddr {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let listener = Flaky {
            inner,
            failures: AtomicUsize::new(failures),
        };
        tokio::spawn(serve(listener, routes, options));
        addr
    }

    #[tokio::test]
    async fn accept_errors_do_not_stop_the_server() {
        let addr = start(5, ServerOptions::default()).await;
        let reply = tokio::time::timeout(Duration::from_secs(10), get(addr, "/healthz"))
            .await
            .expect("served after the accept errors");
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        assert!(reply.ends_with("ok\n"), "{reply}");
        assert!(get(addr, "/nope").await.starts_with("HTTP/1.1 404"));
    }

    #[tokio::test]
    async fn two_hundred_idle_connections_do_not_stop_the_probe() {
        let addr = start(0, ServerOptions::default()).await;
        let mut idle = Vec::new();
        for _ in 0..200 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // Answered while every idle connection is still open: the probe did
        // not wait for the server to drop them (at its idle timeout). An
        // ordering fact, not a clock: a slow machine only waits longer.
        let reply = tokio::time::timeout(Duration::from_secs(30), get(addr, "/healthz"))
            .await
            .expect("/healthz answered");
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        let mut buf = [0u8; 1];
        for (i, stream) in idle.iter().enumerate() {
            assert!(
                matches!(stream.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
                "idle connection {i} was closed before the probe was answered"
            );
        }
        drop(idle);
    }

    #[tokio::test]
    async fn a_silent_client_is_disconnected_after_the_idle_timeout() {
        let options = ServerOptions {
            idle_timeout: Duration::from_millis(300),
            max_connections: 4,
        };
        let addr = start(0, options).await;
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut seen = Vec::new();
        // hyper may write a 408 before closing; either way the stream ends.
        let ended =
            tokio::time::timeout(Duration::from_secs(10), silent.read_to_end(&mut seen)).await;
        assert!(ended.is_ok(), "the idle connection was kept open");
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_wait_for_a_free_slot() {
        let options = ServerOptions {
            idle_timeout: Duration::from_secs(60),
            max_connections: 2,
        };
        let addr = start(0, options).await;
        let mut held = vec![
            TcpStream::connect(addr).await.unwrap(),
            TcpStream::connect(addr).await.unwrap(),
        ];
        let mut third = tokio::spawn(get(addr, "/healthz"));
        // Both slots are held: the third client cannot be served, however
        // long it waits.
        assert!(
            tokio::time::timeout(Duration::from_millis(500), &mut third)
                .await
                .is_err(),
            "a third connection was served while two held both slots"
        );
        held.pop(); // one client leaves: its slot frees
        let reply = tokio::time::timeout(Duration::from_secs(10), third)
            .await
            .expect("served once a slot freed")
            .unwrap();
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
    }
}
