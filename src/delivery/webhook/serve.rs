//! The webhook's own listener: HTTP/1.1 (hyper), optionally TLS
//! (tokio-rustls), one request per connection, at most
//! [`MAX_CONNECTIONS`] at once, a request head within [`HEAD_TIMEOUT`] and
//! the whole exchange within [`EXCHANGE_TIMEOUT`]. The rate limit is asked
//! before the body is read; the body is read up to
//! [`super::MAX_BODY`] and no further.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::receiver::{MAX_BODY, Receiver, Request};

const MAX_CONNECTIONS: usize = 64;
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// The running receiver; dropping it stops it.
pub struct WebhookServer {
    pub address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(super) async fn start(
    address: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    receiver: Arc<Receiver>,
) -> Result<WebhookServer, String> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| format!("cannot serve the webhook on {address}: {e}"))?;
    let address = listener.local_addr().unwrap_or(address);
    let scheme = if tls.is_some() { "https" } else { "http" };
    log::info!("webhook receiver on {scheme}://{address}/hooks/");
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let task = tokio::spawn(accept_loop(listener, tls, receiver));
    Ok(WebhookServer { address, task })
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    receiver: Arc<Receiver>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, from) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                log::warn!("webhook: accept failed, retrying: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (tls, receiver) = (tls.clone(), receiver.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let exchange = async {
                match tls {
                    None => connection(stream, from, receiver).await,
                    Some(acceptor) => {
                        if let Ok(Ok(stream)) =
                            tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(stream)).await
                        {
                            connection(stream, from, receiver).await;
                        }
                    }
                }
            };
            let _ = tokio::time::timeout(EXCHANGE_TIMEOUT, exchange).await;
        });
    }
}

async fn connection<S>(stream: S, from: SocketAddr, receiver: Arc<Receiver>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let receiver = receiver.clone();
        async move { Ok::<_, Infallible>(respond(&receiver, from, req).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .keep_alive(false);
    let _ = builder
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

async fn respond(
    receiver: &Receiver,
    from: SocketAddr,
    req: hyper::Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    if !receiver.admit(from) {
        return reply(StatusCode::TOO_MANY_REQUESTS, String::new());
    }
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY) {
        return reply(StatusCode::PAYLOAD_TOO_LARGE, String::new());
    }
    let (head, body) = req.into_parts();
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return reply(StatusCode::PAYLOAD_TOO_LARGE, String::new()),
    };
    let header = |name: &str| head.headers.get(name).and_then(|v| v.to_str().ok());
    let request = Request {
        method: head.method.as_str(),
        path: head.uri.path(),
        timestamp: header(super::signature::TIMESTAMP_HEADER),
        signature: header(super::signature::SIGNATURE_HEADER),
        namespace: header(super::signature::NAMESPACE_HEADER),
        body: &body,
        from,
    };
    let (status, text) = receiver.answer(&request).await;
    reply(status, text)
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}
