//! Git over SSH (`ssh://` and `git@host:path` URLs; docs/sources.md), by
//! russh: no `ssh` binary, no `~/.ssh`. The host must present a key that
//! the source Secret's `known_hosts` lists for it — checked during the key
//! exchange, before any credential is sent; no `known_hosts`, no
//! connection. Then the Secret's `identity` authenticates, and the
//! channel runs `git-upload-pack` for gitoxide to speak the pack protocol
//! over (as it would over an `ssh` process's pipes).

use std::io::Read;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use russh::keys::{HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKey, PublicKeyOrCertificate};
use tokio::io::{ReadHalf, WriteHalf};
use tokio_util::io::SyncIoBridge;

use super::address::AddressPolicy;

/// The SSH part of a source Secret: `identity` (an OpenSSH private key,
/// unencrypted) and `known_hosts`.
pub struct SshSecrets {
    identity: Arc<PrivateKey>,
    known_hosts: String,
}

impl SshSecrets {
    /// From the Secret's `identity` and `known_hosts`; `Err` says which is
    /// missing or unreadable (never their content).
    pub fn new(identity: Option<&str>, known_hosts: Option<&str>) -> Result<Self, String> {
        let known_hosts = known_hosts
            .filter(|k| !k.trim().is_empty())
            .ok_or("secretRef has no known_hosts: without the host's key no connection is made (ssh-keyscan HOST prints it)")?;
        let identity =
            identity.ok_or("secretRef has no identity (the SSH private key, OpenSSH format)")?;
        let key = russh::keys::decode_secret_key(identity, None)
            .map_err(|_| "secretRef's identity is not an unencrypted OpenSSH private key")?;
        Ok(SshSecrets {
            identity: Arc::new(key),
            known_hosts: known_hosts.to_string(),
        })
    }
}

/// Where an SSH URL leads.
pub struct Target {
    pub host: String,
    pub port: u16,
    pub user: String,
    /// The repository's path as the server names it.
    pub path: String,
}

impl Target {
    pub fn of(url: &gix::Url) -> Result<Target, String> {
        let host = url.host().ok_or("the URL names no host")?.to_string();
        let path = url.path.to_string();
        if path.is_empty() || path.contains(['\'', '\n', '\r', '\0']) {
            return Err(
                "the repository path is empty or has a quote or a control character".into(),
            );
        }
        Ok(Target {
            host,
            port: url.port.unwrap_or(22),
            user: url.user().unwrap_or("git").to_string(),
            path,
        })
    }

    /// How `known_hosts` names this host (`host`, or `[host]:port`).
    fn known_as(&self) -> String {
        if self.port == 22 {
            self.host.clone()
        } else {
            format!("[{}]:{}", self.host, self.port)
        }
    }
}

/// The keys `known_hosts` lists for `host` (a name as [`Target::known_as`]
/// writes it; hashed entries are matched too).
pub fn known_keys(known_hosts: &str, host: &str) -> Vec<PublicKey> {
    known_hosts
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('@'))
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            let hosts = fields.next()?;
            let kind = fields.next()?;
            let key = fields.next()?;
            hosts
                .split(',')
                .any(|h| matches_host(h, host))
                .then(|| PublicKey::from_openssh(&format!("{kind} {key}")).ok())
                .flatten()
        })
        .collect()
}

/// Whether known_hosts pattern `pattern` names `host` (plain, or hashed as
/// `|1|salt|hmac-sha1`).
fn matches_host(pattern: &str, host: &str) -> bool {
    let Some(hashed) = pattern.strip_prefix("|1|") else {
        return pattern == host;
    };
    use base64::Engine;
    use hmac::Mac;
    let b64 = base64::engine::general_purpose::STANDARD;
    let Some((salt, hash)) = hashed.split_once('|') else {
        return false;
    };
    let (Ok(salt), Ok(hash)) = (b64.decode(salt), b64.decode(hash)) else {
        return false;
    };
    hmac::Hmac::<sha1::Sha1>::new_from_slice(&salt)
        .map(|m| m.chain_update(host.as_bytes()).verify_slice(&hash).is_ok())
        .unwrap_or(false)
}

/// The client side of one session: the host key check.
struct HostCheck {
    known: Vec<PublicKey>,
    /// The SHA-256 fingerprint of a key that was refused.
    refused: Arc<Mutex<Option<String>>>,
}

impl russh::client::Handler for HostCheck {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        offered: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let key = match offered {
            PublicKeyOrCertificate::PublicKey { key, .. } => key,
            PublicKeyOrCertificate::Certificate(_) => {
                *self.refused.lock() = Some("a certificate (not supported)".into());
                return Ok(false);
            }
        };
        let known = self.known.iter().any(|k| k.key_data() == key.key_data());
        if !known {
            *self.refused.lock() = Some(key.fingerprint(HashAlg::Sha256).to_string());
        }
        Ok(known)
    }
}

/// An open `git-upload-pack` channel, as blocking pipes for gitoxide. The
/// session lives as long as the reader.
pub struct Pipes {
    pub read: SessionReader,
    pub write: SyncIoBridge<WriteHalf<russh::ChannelStream<russh::client::Msg>>>,
}

/// The channel's reading end, holding its session.
pub struct SessionReader {
    inner: SyncIoBridge<ReadHalf<russh::ChannelStream<russh::client::Msg>>>,
    _session: russh::client::Handle<HostCheck>,
}

impl Read for SessionReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf)
    }
}

/// Opens `git-upload-pack` for `target` within `deadline`, on the tokio
/// runtime of `handle` (called from a blocking thread).
pub fn open(
    handle: &tokio::runtime::Handle,
    target: &Target,
    secrets: &SshSecrets,
    policy: &AddressPolicy,
    deadline: Instant,
) -> Result<Pipes, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    let opened = handle.block_on(async {
        tokio::time::timeout(left, session(target, secrets, policy))
            .await
            .map_err(|_| {
                "no SSH session within the fetch deadline (--chart-fetch-timeout)".to_string()
            })?
    })?;
    let (session, stream) = opened;
    let (read, write) = tokio::io::split(stream);
    Ok(Pipes {
        read: SessionReader {
            inner: SyncIoBridge::new_with_handle(read, handle.clone()),
            _session: session,
        },
        write: SyncIoBridge::new_with_handle(write, handle.clone()),
    })
}

type Opened = (
    russh::client::Handle<HostCheck>,
    russh::ChannelStream<russh::client::Msg>,
);

async fn session(
    target: &Target,
    secrets: &SshSecrets,
    policy: &AddressPolicy,
) -> Result<Opened, String> {
    let host = &target.host;
    let addresses: Vec<std::net::SocketAddr> =
        tokio::net::lookup_host((host.as_str(), target.port))
            .await
            .map_err(|e| format!("{host}: {e}"))?
            .collect();
    let address = addresses
        .iter()
        .find(|a| policy.refuses(a.ip()).is_none())
        .ok_or_else(|| {
            match addresses
                .first()
                .and_then(|a| policy.refuses(a.ip()).map(|c| (a, c)))
            {
                Some((a, cidr)) => format!(
                    "{host} is {} in {cidr} (--deny-chart-source-cidrs): refused",
                    a.ip()
                ),
                None => format!("{host} has no address"),
            }
        })?;
    let tcp = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| format!("{host}:{}: {e}", target.port))?;
    let refused = Arc::new(Mutex::new(None));
    let check = HostCheck {
        known: known_keys(&secrets.known_hosts, &target.known_as()),
        refused: refused.clone(),
    };
    let config = Arc::new(russh::client::Config::default());
    let mut session = russh::client::connect_stream(config, tcp, check)
        .await
        .map_err(|e| match refused.lock().take() {
            Some(key) => format!(
                "the host key of {} ({key}) is not in secretRef's known_hosts: refused before any credential was sent",
                target.known_as()
            ),
            None => format!("SSH to {}: {e}", target.known_as()),
        })?;
    let hash = session
        .best_supported_rsa_hash()
        .await
        .map_err(|e| e.to_string())?
        .flatten();
    let key = PrivateKeyWithHashAlg::new(secrets.identity.clone(), hash);
    let auth = session
        .authenticate_publickey(target.user.clone(), key)
        .await
        .map_err(|e| e.to_string())?;
    if !auth.success() {
        return Err(format!(
            "{} refused secretRef's identity for user {}",
            target.known_as(),
            target.user
        ));
    }
    let channel = session
        .channel_open_session()
        .await
        .map_err(|e| e.to_string())?;
    channel
        .set_env(false, "GIT_PROTOCOL", "version=2")
        .await
        .map_err(|e| e.to_string())?;
    channel
        .exec(true, format!("git-upload-pack '{}'", target.path))
        .await
        .map_err(|e| e.to_string())?;
    Ok((session, channel.into_stream()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `host` hashed as `ssh-keygen -H` writes it, with `salt`.
    fn hashed(host: &str, salt: &[u8]) -> String {
        use base64::Engine;
        use hmac::Mac;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mac = hmac::Hmac::<sha1::Sha1>::new_from_slice(salt)
            .unwrap()
            .chain_update(host.as_bytes())
            .finalize()
            .into_bytes();
        format!("|1|{}|{}", b64.encode(salt), b64.encode(mac))
    }

    #[test]
    fn known_hosts_names_a_host_plainly_or_hashed() {
        let key = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
        let text = format!(
            "# a comment\n[git.example]:2222 ssh-ed25519 {key}\ngithub.com,other ssh-ed25519 {key}\n{} ssh-ed25519 {key}\n@revoked bad ssh-ed25519 {key}\n",
            hashed("10.0.0.7", b"twenty bytes of salt")
        );
        assert_eq!(known_keys(&text, "[git.example]:2222").len(), 1);
        assert_eq!(known_keys(&text, "github.com").len(), 1);
        assert_eq!(known_keys(&text, "git.example").len(), 0, "another port");
        assert_eq!(known_keys(&text, "10.0.0.7").len(), 1, "hashed");
        assert_eq!(known_keys(&text, "10.0.0.8").len(), 0);
        assert_eq!(
            known_keys(&text, "bad").len(),
            0,
            "a marker line is not trust"
        );
    }
}
