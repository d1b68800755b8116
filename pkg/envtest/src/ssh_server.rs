//! Git over SSH on loopback: an SSH server (russh) that runs Git's own
//! `git upload-pack` for an `exec` of `git-upload-pack '<path>'`, with a
//! host key of its own and one client key it accepts. It counts every
//! authentication attempt, so a test tells "refused before any credential
//! was sent" from "refused after".

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use russh::keys::ssh_key::LineEnding;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{PrivateKey, PublicKey};
use russh::server::{Auth, Msg, PublicKeyOffer, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// An Ed25519 key pair made here (no `ssh-keygen` needed).
pub struct SshKey {
    key: PrivateKey,
}

impl SshKey {
    /// A new key, from the OS's randomness.
    pub fn generate() -> Self {
        let mut seed = [0u8; 32];
        getrandom(&mut seed);
        SshKey {
            key: PrivateKey::from(Ed25519Keypair::from_seed(&seed)),
        }
    }

    /// The private key in OpenSSH's format (what an `identity` holds).
    pub fn openssh(&self) -> String {
        self.key
            .to_openssh(LineEnding::LF)
            .map(|k| k.to_string())
            .expect("an OpenSSH private key")
    }

    /// The public key, `ssh-ed25519 AAAA…`.
    pub fn public_openssh(&self) -> String {
        self.key
            .public_key()
            .to_openssh()
            .expect("an OpenSSH public key")
    }

    fn public(&self) -> &PublicKey {
        self.key.public_key()
    }
}

fn getrandom(buf: &mut [u8]) {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .expect("/dev/urandom");
}

/// The server (see the module docs); stops when dropped.
pub struct SshGitServer {
    port: u16,
    host_key: SshKey,
    attempts: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl SshGitServer {
    /// Serves the repositories under `root` to the holder of `client`.
    pub async fn start(root: &Path, client: &SshKey) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let host_key = SshKey::generate();
        let config = Arc::new(russh::server::Config {
            keys: vec![host_key.key.clone()],
            auth_rejection_time: std::time::Duration::from_millis(10),
            auth_rejection_time_initial: Some(std::time::Duration::ZERO),
            ..Default::default()
        });
        let attempts = Arc::new(AtomicUsize::new(0));
        let accepted = client.public().clone();
        let task = tokio::spawn({
            let (root, attempts) = (root.to_path_buf(), attempts.clone());
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let handler = Connection {
                        root: root.clone(),
                        accepted: accepted.clone(),
                        attempts: attempts.clone(),
                        protocol: None,
                        stdin: None,
                    };
                    let config = config.clone();
                    tokio::spawn(async move {
                        if let Ok(session) =
                            russh::server::run_stream(config, stream, handler).await
                        {
                            let _ = session.await;
                        }
                    });
                }
            }
        });
        Ok(SshGitServer {
            port,
            host_key,
            attempts,
            task,
        })
    }

    /// `ssh://git@127.0.0.1:<port>/<name>`.
    pub fn url(&self, name: &str) -> String {
        format!("ssh://git@127.0.0.1:{}/{name}", self.port)
    }

    /// The `known_hosts` line of this server.
    pub fn known_hosts(&self) -> String {
        format!(
            "[127.0.0.1]:{} {}\n",
            self.port,
            self.host_key.public_openssh()
        )
    }

    /// Authentication attempts of every client so far (any method).
    pub fn auth_attempts(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }
}

impl Drop for SshGitServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One client's session.
struct Connection {
    root: PathBuf,
    accepted: PublicKey,
    attempts: Arc<AtomicUsize>,
    /// `GIT_PROTOCOL` the client set.
    protocol: Option<String>,
    /// Where the client's data goes: the process's standard input.
    stdin: Option<mpsc::UnboundedSender<Option<Vec<u8>>>>,
}

impl russh::server::Handler for Connection {
    type Error = russh::Error;

    async fn auth_none(&mut self, _user: &str) -> Result<Auth, Self::Error> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        Ok(Auth::reject())
    }

    async fn auth_password(&mut self, _user: &str, _password: &str) -> Result<Auth, Self::Error> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        Ok(Auth::reject())
    }

    async fn auth_publickey_offered(
        &mut self,
        _user: &str,
        offer: PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        Ok(if offer.public_key.key_data() == self.accepted.key_data() {
            Auth::Accept
        } else {
            Auth::reject()
        })
    }

    async fn auth_publickey(
        &mut self,
        _user: &str,
        key: VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        Ok(if key.public_key.key_data() == self.accepted.key_data() {
            Auth::Accept
        } else {
            Auth::reject()
        })
    }

    async fn channel_open_session(
        &mut self,
        _channel: Channel<Msg>,
        reply: russh::server::ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        reply.accept().await;
        Ok(())
    }

    async fn env_request(
        &mut self,
        _channel: ChannelId,
        name: &str,
        value: &str,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        if name == "GIT_PROTOCOL" {
            self.protocol = Some(value.to_string());
        }
        Ok(())
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let command = String::from_utf8_lossy(data).into_owned();
        let Some(path) = command
            .strip_prefix("git-upload-pack '")
            .and_then(|p| p.strip_suffix('\''))
        else {
            session.channel_failure(channel)?;
            return Ok(());
        };
        let repo = self.root.join(path.trim_start_matches('/'));
        let mut process = tokio::process::Command::new("git");
        process
            .arg("upload-pack")
            .arg("--strict")
            .arg(&repo)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        if let Some(p) = &self.protocol {
            process.env("GIT_PROTOCOL", p);
        }
        let Ok(mut child) = process.spawn() else {
            session.channel_failure(channel)?;
            return Ok(());
        };
        session.channel_success(channel)?;
        let (tx, mut rx) = mpsc::unbounded_channel::<Option<Vec<u8>>>();
        self.stdin = Some(tx);
        let mut stdin = child.stdin.take().expect("piped");
        tokio::spawn(async move {
            while let Some(Some(data)) = rx.recv().await {
                if stdin.write_all(&data).await.is_err() {
                    break;
                }
            }
        });
        let mut stdout = child.stdout.take().expect("piped");
        let handle = session.handle();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                match stdout.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if handle.data(channel, buf[..n].to_vec()).await.is_err() {
                            break;
                        }
                    }
                }
            }
            let code = child.wait().await.ok().and_then(|s| s.code()).unwrap_or(1);
            let _ = handle.exit_status_request(channel, code as u32).await;
            let _ = handle.eof(channel).await;
            let _ = handle.close(channel).await;
        });
        Ok(())
    }

    async fn data(
        &mut self,
        _channel: ChannelId,
        data: &[u8],
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        if let Some(tx) = &self.stdin {
            let _ = tx.send(Some(data.to_vec()));
        }
        Ok(())
    }

    async fn channel_eof(
        &mut self,
        _channel: ChannelId,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        if let Some(tx) = self.stdin.take() {
            let _ = tx.send(None);
        }
        Ok(())
    }
}
