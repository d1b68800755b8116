//! A TCP proxy between a client and the apiserver that can fail the way
//! real networks do: [`Proxy::cut`] closes every connection and refuses new
//! ones (a partition the client notices); [`Proxy::stall`] keeps every
//! connection open but stops forwarding bytes in both directions, and lets
//! new connections open and then hang the same way (a half-open connection
//! the client does not notice — the case timeouts exist for).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::{ControlPlane, Error};

/// See the module docs. Dropping it closes everything.
///
/// ```no_run
/// # async fn demo(cp: envtest::ControlPlane) {
/// let proxy = envtest::Proxy::start(&cp).await.unwrap();
/// let client = proxy.client(&cp).await.unwrap(); // talks through the proxy
/// proxy.stall(); // requests now hang without an error
/// proxy.resume();
/// # }
/// ```
pub struct Proxy {
    addr: String,
    /// New connections are closed at once while set.
    cut: Arc<AtomicBool>,
    /// `true` while no byte may pass; forwarders wait on it between reads.
    stalled: watch::Sender<bool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// A proxy on a free loopback port forwarding to `cp`'s apiserver.
    pub async fn start(cp: &ControlPlane) -> Result<Self, Error> {
        let upstream = cp.server_url().trim_start_matches("https://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let cut = Arc::new(AtomicBool::new(false));
        let (stalled, _) = watch::channel(false);
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = tokio::spawn({
            let (cut, conns, stalled) = (cut.clone(), conns.clone(), stalled.clone());
            async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    if cut.load(SeqCst) {
                        continue; // dropped: closed at once
                    }
                    let upstream = upstream.clone();
                    let gate = stalled.subscribe();
                    conns.lock().push(tokio::spawn(async move {
                        if let Ok(outbound) = TcpStream::connect(upstream).await {
                            forward(inbound, outbound, gate).await;
                        }
                    }));
                }
            }
        });
        Ok(Proxy {
            addr,
            cut,
            stalled,
            conns,
            accept,
        })
    }

    /// `host:port` of the proxy.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Stops forwarding bytes on every connection, old and new, without
    /// closing any.
    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    /// Forwards bytes again (what was held back is delivered).
    pub fn resume(&self) {
        self.stalled.send_replace(false);
    }

    /// Closes every connection and refuses new ones until [`heal`](Self::heal).
    pub fn cut(&self) {
        self.cut.store(true, SeqCst);
        for c in self.conns.lock().drain(..) {
            c.abort();
        }
    }

    /// Accepts connections again after [`cut`](Self::cut).
    pub fn heal(&self) {
        self.cut.store(false, SeqCst);
    }

    /// An admin client for `cp` that goes through this proxy.
    pub async fn client(&self, cp: &ControlPlane) -> Result<kube::Client, Error> {
        crate::kubeconfig::client_from(&self.kubeconfig_yaml(cp)?).await
    }

    /// Writes an admin kubeconfig for `cp` pointing at this proxy (for a
    /// subprocess) into the control plane's directory, and returns its path.
    pub fn kubeconfig(&self, cp: &ControlPlane) -> Result<std::path::PathBuf, Error> {
        let path = cp
            .dir()
            .join(format!("kubeconfig-via-{}", self.addr.replace(':', "-")));
        std::fs::write(&path, self.kubeconfig_yaml(cp)?)?;
        Ok(path)
    }

    fn kubeconfig_yaml(&self, cp: &ControlPlane) -> Result<String, Error> {
        let admin = std::fs::read_to_string(cp.kubeconfig_path())?;
        Ok(admin.replace(cp.server_url(), &format!("https://{}", self.addr)))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Copies both ways until either side closes, holding bytes back while the
/// gate says stalled.
async fn forward(inbound: TcpStream, outbound: TcpStream, gate: watch::Receiver<bool>) {
    let (ri, wi) = inbound.into_split();
    let (ro, wo) = outbound.into_split();
    let up = pump(ri, wo, gate.clone());
    let down = pump(ro, wi, gate);
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut gate: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if gate.wait_for(|stalled| !*stalled).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        // Bytes read just before a stall are held until it ends.
        if gate.wait_for(|stalled| !*stalled).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
