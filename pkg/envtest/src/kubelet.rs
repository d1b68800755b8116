//! A stand-in for a node's kubelet, for the apiserver's `pods/log`: HTTPS
//! on 127.0.0.1 (a certificate of its own — the test apiserver is given no
//! kubelet CA, so it does not check it), answering
//! `GET /containerLogs/<ns>/<pod>/<container>` with the lines a test gave
//! that container (the last `tailLines` of them), and with `follow=true`
//! holding the answer open and writing each line added after.
//!
//! [`FakeKubelet::node`] is the Node object that points the apiserver at
//! it; a Pod with that `nodeName` has its logs served here.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

type Key = (String, String, String);

/// The fake kubelet; stops when dropped.
pub struct FakeKubelet {
    port: u16,
    logs: Arc<Mutex<HashMap<Key, Vec<String>>>>,
    added: watch::Sender<u64>,
    task: JoinHandle<()>,
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeKubelet {
    pub async fn start() -> Result<FakeKubelet, crate::Error> {
        let ca = crate::pki::Ca::generate()?;
        let acceptor = crate::hostile_apiserver::tls_acceptor(&ca.serving_cert()?)?;
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let logs: Arc<Mutex<HashMap<Key, Vec<String>>>> = Arc::default();
        let (added, _) = watch::channel(0u64);
        let task = tokio::spawn({
            let (logs, added) = (logs.clone(), added.clone());
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (acceptor, logs, rx) = (acceptor.clone(), logs.clone(), added.subscribe());
                    tokio::spawn(async move {
                        if let Ok(tls) = acceptor.accept(stream).await {
                            serve(tls, logs, rx).await;
                        }
                    });
                }
            }
        });
        Ok(FakeKubelet {
            port,
            logs,
            added,
            task,
        })
    }

    /// Adds `line` to the logs of `container` of Pod `ns/pod`.
    pub fn log(&self, ns: &str, pod: &str, container: &str, line: &str) {
        self.logs
            .lock()
            .entry((ns.into(), pod.into(), container.into()))
            .or_default()
            .push(line.to_string());
        self.added.send_modify(|n| *n += 1);
    }

    /// A Node named `name` whose kubelet is this one (apply its status
    /// with the status subresource).
    pub fn node(&self, name: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Node", "metadata": { "name": name },
            "status": {
                "addresses": [{ "type": "InternalIP", "address": "127.0.0.1" },
                              { "type": "Hostname", "address": "127.0.0.1" }],
                "daemonEndpoints": { "kubeletEndpoint": { "Port": self.port } }
            }
        })
    }
}

async fn serve(
    mut tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    logs: Arc<Mutex<HashMap<Key, Vec<String>>>>,
    mut added: watch::Receiver<u64>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if buf.len() > 64 * 1024 {
            return;
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let target = head.split(' ').nth(1).unwrap_or_default().to_string();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ["containerLogs", ns, pod, container] = parts[..] else {
        let _ = tls
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            .await;
        return;
    };
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    let follow = param("follow").as_deref() == Some("true");
    let tail: Option<usize> = param("tailLines").and_then(|t| t.parse().ok());
    let key: Key = (ns.into(), pod.into(), container.into());
    let lines = logs.lock().get(&key).cloned().unwrap_or_default();
    let from = tail.map_or(0, |t| lines.len().saturating_sub(t));
    let _ = tls
        .write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .await;
    let mut sent = from;
    let write = |lines: &[String]| {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        format!("{:x}\r\n{text}\r\n", text.len())
    };
    if sent < lines.len()
        && tls
            .write_all(write(&lines[sent..]).as_bytes())
            .await
            .is_err()
    {
        return;
    }
    sent = lines.len();
    if !follow {
        let _ = tls.write_all(b"0\r\n\r\n").await;
        return;
    }
    let _ = tls.flush().await;
    while added.changed().await.is_ok() {
        let lines = logs.lock().get(&key).cloned().unwrap_or_default();
        if lines.len() > sent {
            if tls
                .write_all(write(&lines[sent..]).as_bytes())
                .await
                .is_err()
            {
                return;
            }
            let _ = tls.flush().await;
            sent = lines.len();
        }
    }
}
