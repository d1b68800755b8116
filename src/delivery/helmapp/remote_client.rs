//! A remote cluster's client (docs/remote-clusters.md): its kubeconfig as
//! kube reads it, and every answer of its API server bounded — the server
//! is the tenant's, and an answer without end, or one that never comes,
//! must cost neither the operator's memory nor its workers (which every
//! tenant shares).
//!
//! - size: at most [`MAX_ANSWER_BYTES`] per answer, a watch's included (a
//!   watch cut there resumes from its last resourceVersion);
//! - time: at most [`ANSWER_DEADLINE`] from the request to the last byte,
//!   the informers' watches excepted (they last by design; a silent one is
//!   ended by the reflector's progress timeout) — told by the mark the
//!   reflector puts on them ([`cache::WatchRequest`]), never by the query:
//!   a name from the tenant's manifests, put in a path unescaped, could say
//!   `?watch=1`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use kube::Client;

use crate::delivery::remote::connect;
use crate::delivery::remote::kubeconfig::RemoteAccess;
use crate::delivery::source::address::AddressPolicy;

/// The most bytes one answer of a remote API server may carry — a LIST
/// page (500 objects) or a whole watch.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// The longest one answer of a remote API server may take, head to last
/// byte, a watch excepted: a reconcile awaits it while it holds one of the
/// workers every tenant shares.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(30);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The client of a remote cluster: its kubeconfig, as kube reads it, each
/// answer bounded (see the module docs), each connection's address checked
/// against `policy` when it is made (`crate::delivery::remote::connect`).
///
/// kube's own stack but for the connector: base URL, server retries
/// (429, 503, 504), the credential — under the bounds.
pub async fn client_of(
    access: &RemoteAccess,
    policy: &AddressPolicy,
    lookup: &connect::Lookup,
) -> Result<Client, String> {
    use kube::client::ConfigExt as _;
    let config = kube::Config::from_custom_kubeconfig(
        access.kubeconfig(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| format!("kubeConfig: not usable ({e})"))?;
    let unusable = |e: kube::Error| format!("kubeConfig: no client can be made ({e})");
    // A remote cluster that does not answer is told quickly (the
    // connector's timeout), and parks only its own HelmApps.
    let https = config
        .rustls_https_connector_with_connector(connect::connector(policy.clone(), lookup.clone()))
        .map_err(unusable)?;
    let http: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build(https);
    let service = tower::ServiceBuilder::new()
        .layer(BoundedLayer {
            deadline: ANSWER_DEADLINE,
        })
        .layer(config.base_uri_layer())
        .layer(tower::retry::RetryLayer::new(
            kube::client::retry::RetryPolicy::server_retry(),
        ))
        .option_layer(config.auth_layer().map_err(unusable)?)
        .layer(config.extra_headers_layer().map_err(unusable)?)
        .map_err(BoxError::from)
        .service(http);
    Ok(Client::new(service, config.default_namespace))
}

/// Makes every answer of the service it wraps a [`BoundedBody`], done
/// within `deadline` unless the reflector marked it a watch.
struct BoundedLayer {
    deadline: Duration,
}

impl<S> tower::Layer<S> for BoundedLayer {
    type Service = Bounded<S>;

    fn layer(&self, inner: S) -> Bounded<S> {
        Bounded {
            inner,
            deadline: self.deadline,
        }
    }
}

/// See [`BoundedLayer`].
struct Bounded<S> {
    inner: S,
    deadline: Duration,
}

impl<S, B> tower::Service<http::Request<kube::client::Body>> for Bounded<S>
where
    S: tower::Service<http::Request<kube::client::Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<BoundedBody<B>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let watch = request.extensions().get::<cache::WatchRequest>().is_some();
        let deadline = (!watch).then(|| tokio::time::Instant::now() + self.deadline);
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = match deadline {
                Some(at) => tokio::time::timeout_at(at, answer)
                    .await
                    .map_err(|_| late())?
                    .map_err(Into::into)?,
                None => answer.await.map_err(Into::into)?,
            };
            Ok(response.map(|body| BoundedBody {
                inner: Box::pin(http_body_util::Limited::new(body, MAX_ANSWER_BYTES)),
                deadline: deadline.map(|at| Box::pin(tokio::time::sleep_until(at))),
            }))
        })
    }
}

fn late() -> BoxError {
    format!(
        "the remote API server's answer took longer than {}s",
        ANSWER_DEADLINE.as_secs()
    )
    .into()
}

/// An answer's body: at most [`MAX_ANSWER_BYTES`], and done by its
/// deadline (`None`: a watch).
struct BoundedBody<B> {
    inner: Pin<Box<http_body_util::Limited<B>>>,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<B> Body for BoundedBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(deadline) = self.deadline.as_mut()
            && deadline.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Some(Err(late())));
        }
        self.inner.as_mut().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request that says `?watch=1` in its path (a tenant's name put in
    /// it) still has its deadline; only the reflector's mark takes it off.
    #[tokio::test]
    async fn only_the_reflectors_mark_takes_the_deadline_off() {
        let silent = tower::service_fn(|_: http::Request<kube::client::Body>| {
            futures::future::pending::<Result<http::Response<http_body_util::Empty<Bytes>>, BoxError>>(
            )
        });
        let deadline = Duration::from_millis(100);
        let mut bounded = tower::Layer::layer(&BoundedLayer { deadline }, silent);
        let request = |mark: bool| {
            let mut r = http::Request::get("/api/v1/namespaces/x/secrets/y?watch=1")
                .body(kube::client::Body::empty())
                .expect("a request");
            if mark {
                r.extensions_mut().insert(cache::WatchRequest);
            }
            r
        };
        let unmarked = tower::Service::call(&mut bounded, request(false));
        let answered = tokio::time::timeout(deadline * 20, unmarked).await;
        assert!(
            matches!(answered, Ok(Err(_))),
            "an unmarked request outlived its deadline"
        );
        let marked = tower::Service::call(&mut bounded, request(true));
        assert!(
            tokio::time::timeout(deadline * 20, marked).await.is_err(),
            "a marked watch was given a deadline"
        );
    }

    /// A body that never sends a byte ends, with an error, at its deadline
    /// (a short one here: the deadline is the body's to keep, whatever it is).
    #[tokio::test]
    async fn an_answer_that_never_ends_is_cut_at_its_deadline() {
        use http_body_util::BodyExt;
        let silent = http_body_util::StreamBody::new(futures::stream::pending::<
            Result<Frame<Bytes>, std::convert::Infallible>,
        >());
        let body = BoundedBody {
            inner: Box::pin(http_body_util::Limited::new(silent, MAX_ANSWER_BYTES)),
            deadline: Some(Box::pin(tokio::time::sleep(Duration::from_millis(50)))),
        };
        let read = body.collect().await;
        assert_eq!(read.err().map(|e| e.to_string()), Some(late().to_string()));
    }
}
