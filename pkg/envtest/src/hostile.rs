//! A chart repository that lies: an HTTP server on loopback whose answer
//! for each path is scripted — bytes with any status, a redirect, a body
//! dripped slowly or sent without end, a `Content-Length` that is not the
//! truth — and that records every request's path and `Authorization`
//! header. For the hostile-input tests of chart sources (docs/security.md "Hostile input"); it listens on 127.0.0.1 only.
//!
//! ```no_run
//! # async fn demo() {
//! use envtest::{Answer, HostileServer};
//! let server = HostileServer::start().await.unwrap();
//! server.answer("/index.yaml", Answer::Redirect("/elsewhere".into()));
//! // GET {server.url()}/index.yaml → 302 Location: /elsewhere
//! # }
//! ```

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the server answers for a path.
#[derive(Debug, Clone)]
pub enum Answer {
    /// `status` with `body` and its true length.
    Bytes(u16, Vec<u8>),
    /// 302 to `location` (absolute, or a path on this server).
    Redirect(String),
    /// 200, `body` sent `chunk` bytes at a time, `every` apart.
    Drip {
        body: Vec<u8>,
        chunk: usize,
        every: Duration,
    },
    /// 200 without a length, `#` (one endless YAML comment) until the
    /// client goes away.
    Endless,
    /// 200 declaring `declared` bytes, then sending `body` whatever its
    /// length.
    Lie { declared: usize, body: Vec<u8> },
    /// `then` for a request whose `Authorization` is `expect`; otherwise
    /// 401 with `WWW-Authenticate: <challenge>`.
    Guarded {
        expect: String,
        challenge: String,
        then: Box<Answer>,
    },
}

/// One request the server saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
}

struct Shared {
    answers: Mutex<HashMap<String, Answer>>,
    seen: Mutex<Vec<Seen>>,
    /// Set by [`HostileServer::hang_up`]: slow answers stop.
    hung_up: AtomicBool,
}

/// The server (see the module docs); stops when dropped.
pub struct HostileServer {
    url: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl HostileServer {
    /// Listens on a free port of 127.0.0.1; every path answers 404 until
    /// scripted.
    pub async fn start() -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared {
            answers: Mutex::default(),
            seen: Mutex::default(),
            hung_up: AtomicBool::new(false),
        });
        let task = tokio::spawn({
            let shared = shared.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, shared.clone()));
                }
            }
        });
        Ok(HostileServer { url, shared, task })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Scripts the answer for `path` (`/index.yaml`).
    pub fn answer(&self, path: &str, answer: Answer) {
        lock(&self.shared.answers).insert(path.to_string(), answer);
    }

    /// Ends every dripping or endless answer now (the connection closes)
    /// and from now on: a test's attack stops before its operator does.
    pub fn hang_up(&self) {
        self.shared.hung_up.store(true, Relaxed);
    }

    /// A registry's chart `repository:tag` whose cosign signature manifest
    /// (the `sha256-<digest>.sig` tag) has one layer: `payload` declared
    /// as `declared` bytes, with `annotations`. The payload is a simple
    /// signing JSON naming the chart's manifest when `payload` is `None`.
    /// The chart layer itself is never served. Returns (`oci://…`, the
    /// chart manifest's digest).
    pub fn signed_oci_chart(
        &self,
        repository: &str,
        tag: &str,
        payload: Option<Vec<u8>>,
        declared: Option<usize>,
        annotations: serde_json::Value,
    ) -> (String, String) {
        use sha2::{Digest, Sha256};
        let digest_of = |b: &[u8]| {
            format!(
                "sha256:{}",
                Sha256::digest(b)
                    .iter()
                    .map(|x| format!("{x:02x}"))
                    .collect::<String>()
            )
        };
        let layer = format!("sha256:{}", "ab".repeat(32));
        let chart = serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": { "mediaType": "application/vnd.cncf.helm.config.v1+json", "digest": layer, "size": 2 },
            "layers": [{ "mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "digest": layer, "size": 1024 }]
        })
        .to_string()
        .into_bytes();
        let digest = digest_of(&chart);
        let payload = payload.unwrap_or_else(|| {
            serde_json::json!({ "critical": { "identity": { "docker-reference": repository },
                "image": { "docker-manifest-digest": digest },
                "type": "cosign container image signature" }, "optional": null })
            .to_string()
            .into_bytes()
        });
        let payload_digest = digest_of(&payload);
        let signature = serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": { "mediaType": "application/vnd.oci.image.config.v1+json", "digest": layer, "size": 2 },
            "layers": [{ "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                "digest": payload_digest, "size": declared.unwrap_or(payload.len()),
                "annotations": annotations }]
        });
        self.answer("/v2/", Answer::Bytes(200, b"{}".to_vec()));
        self.answer(
            &format!("/v2/{repository}/manifests/{tag}"),
            Answer::Bytes(200, chart),
        );
        self.answer(
            &format!(
                "/v2/{repository}/manifests/{}.sig",
                digest.replace(':', "-")
            ),
            Answer::Bytes(200, signature.to_string().into_bytes()),
        );
        self.answer(
            &format!("/v2/{repository}/blobs/{payload_digest}"),
            Answer::Bytes(200, payload),
        );
        let host = self.url.trim_start_matches("http://");
        (format!("oci://{host}/{repository}"), digest)
    }

    /// Every request so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.shared.seen).clone()
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn serve(mut stream: TcpStream, shared: Arc<Shared>) {
    let Some((head, path)) = crate::chart_repo::request_head(&mut stream).await else {
        return;
    };
    let authorization = head.lines().find_map(|l| {
        l.split_once(':')
            .filter(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            .map(|(_, v)| v.trim().to_string())
    });
    let seen_auth = authorization.clone();
    lock(&shared.seen).push(Seen {
        path: path.clone(),
        authorization,
    });
    let mut answer = lock(&shared.answers).get(&path).cloned();
    let mut challenge = None;
    while let Some(Answer::Guarded {
        expect,
        challenge: c,
        then,
    }) = answer.clone()
    {
        if seen_auth.as_deref() == Some(expect.as_str()) {
            answer = Some(*then);
        } else {
            challenge = Some(c);
            break;
        }
    }
    if let Some(c) = challenge {
        let extra = format!("WWW-Authenticate: {c}\r\nContent-Length: 0\r\n");
        let _ = stream.write_all(&response_head(401, &extra)).await;
        return;
    }
    let _ = write_answer(&mut stream, answer, &shared).await;
}

/// A response head with `extra` header lines.
fn response_head(status: u16, extra: &str) -> Vec<u8> {
    format!("HTTP/1.1 {status} X\r\n{extra}Connection: close\r\n\r\n").into_bytes()
}

/// Writes the scripted `answer` (`None`: 404).
async fn write_answer(
    stream: &mut TcpStream,
    answer: Option<Answer>,
    shared: &Shared,
) -> io::Result<()> {
    match answer {
        None => {
            stream
                .write_all(&response_head(404, "Content-Length: 0\r\n"))
                .await
        }
        Some(Answer::Guarded { .. }) => Ok(()),
        Some(Answer::Bytes(status, body)) => {
            let mut out = response_head(status, &format!("Content-Length: {}\r\n", body.len()));
            out.extend_from_slice(&body);
            stream.write_all(&out).await
        }
        Some(Answer::Redirect(location)) => {
            stream
                .write_all(&response_head(
                    302,
                    &format!("Location: {location}\r\nContent-Length: 0\r\n"),
                ))
                .await
        }
        Some(Answer::Lie { declared, body }) => {
            let mut out = response_head(200, &format!("Content-Length: {declared}\r\n"));
            out.extend_from_slice(&body);
            stream.write_all(&out).await
        }
        Some(Answer::Drip { body, chunk, every }) => {
            let mut result = stream
                .write_all(&response_head(
                    200,
                    &format!("Content-Length: {}\r\n", body.len()),
                ))
                .await;
            for part in body.chunks(chunk.max(1)) {
                if result.is_err() || shared.hung_up.load(Relaxed) {
                    break;
                }
                tokio::time::sleep(every).await;
                result = stream.write_all(part).await;
            }
            result
        }
        Some(Answer::Endless) => {
            let mut result = stream.write_all(&response_head(200, "")).await;
            let filler = vec![b'#'; 64 * 1024];
            while result.is_ok() && !shared.hung_up.load(Relaxed) {
                result = stream.write_all(&filler).await;
            }
            result
        }
    }
}
