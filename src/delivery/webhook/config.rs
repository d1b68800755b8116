//! The webhook receiver's flags, checked and loaded: its address, its
//! HMAC key, its optional TLS certificate.

use std::sync::Arc;

/// Where and how the webhook receiver listens (`crate::delivery::webhook`).
#[derive(Clone)]
pub struct WebhookConfig {
    pub address: std::net::SocketAddr,
    /// Who may sign requests, with which key.
    pub keys: Keys,
    /// `--webhook-tls-cert` and `--webhook-tls-key`, loaded.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
}

/// The HMAC keys requests are signed with: the shared one
/// (`--webhook-secret-file`), which may act on any namespace, and one per
/// namespace (`--webhook-secret-dir`: a file named after the namespace),
/// which may act only on its own.
#[derive(Clone, Default)]
pub struct Keys {
    pub shared: Option<Vec<u8>>,
    pub namespaces: std::collections::BTreeMap<String, Vec<u8>>,
}

/// Whose key signed a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signer {
    /// The shared key: any namespace.
    Shared,
    /// This namespace's key: only this namespace.
    Namespace(String),
}

impl Signer {
    /// Whether this signer may act on `namespace`.
    pub fn may_act_on(&self, namespace: &str) -> bool {
        match self {
            Signer::Shared => true,
            Signer::Namespace(ns) => ns == namespace,
        }
    }
}

impl Keys {
    /// The keys to try for a request, with who each one is: the
    /// namespace's own when the request names one
    /// (`X-Hossted-Namespace`), else the shared key.
    pub fn candidates(&self, namespace: Option<&str>) -> Option<(Signer, &[u8])> {
        match namespace {
            Some(ns) => self
                .namespaces
                .get(ns)
                .map(|k| (Signer::Namespace(ns.to_string()), k.as_slice())),
            None => self.shared.as_deref().map(|k| (Signer::Shared, k)),
        }
    }
}

impl std::fmt::Debug for WebhookConfig {
    /// Never a key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("address", &self.address)
            .field("shared_key", &self.keys.shared.is_some())
            .field("namespace_keys", &self.keys.namespaces.keys())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// A key read from `file` (`flag` names it in errors): trailing
/// whitespace dropped (a key written with `echo` ends with a newline the
/// sender's does not), at least 16 bytes.
fn read_key(flag: &str, file: &std::path::Path) -> Result<Vec<u8>, String> {
    let text = std::fs::read(file).map_err(|e| format!("{flag} {}: {e}", file.display()))?;
    let key = text.trim_ascii_end().to_vec();
    if key.len() < 16 {
        return Err(format!(
            "{flag} {}: the key has {} bytes; give at least 16 (e.g. head -c 32 /dev/urandom | base64)",
            file.display(),
            key.len()
        ));
    }
    Ok(key)
}

/// The per-namespace keys of `dir`: each file named after a namespace
/// (dot files skipped: a mounted Secret's `..data` links).
fn read_namespace_keys(
    dir: &std::path::Path,
) -> Result<std::collections::BTreeMap<String, Vec<u8>>, String> {
    const FLAG: &str = "--webhook-secret-dir";
    let mut keys = std::collections::BTreeMap::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{FLAG} {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{FLAG} {}: {e}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !entry.path().is_file() {
            continue;
        }
        keys.insert(name, read_key(FLAG, &entry.path())?);
    }
    Ok(keys)
}

impl WebhookConfig {
    /// The configuration of `--webhook-*` (`None`: `address` is `0`, off).
    pub fn from_flags(
        address: Option<std::net::SocketAddr>,
        secret_file: Option<&std::path::Path>,
        secret_dir: Option<&std::path::Path>,
        tls_cert: Option<&std::path::Path>,
        tls_key: Option<&std::path::Path>,
    ) -> Result<Option<WebhookConfig>, String> {
        let Some(address) = address else {
            return Ok(None);
        };
        if secret_file.is_none() && secret_dir.is_none() {
            return Err("--webhook-bind-address needs --webhook-secret-file (the HMAC key senders sign with) or --webhook-secret-dir (one key file per namespace)".into());
        }
        let keys = Keys {
            shared: secret_file
                .map(|f| read_key("--webhook-secret-file", f))
                .transpose()?,
            namespaces: match secret_dir {
                Some(dir) => read_namespace_keys(dir)?,
                None => Default::default(),
            },
        };
        let tls = match (tls_cert, tls_key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(load_tls(cert, key)?),
            _ => {
                return Err(
                    "give both --webhook-tls-cert and --webhook-tls-key, or neither".into(),
                );
            }
        };
        Ok(Some(WebhookConfig { address, keys, tls }))
    }
}

/// The TLS configuration of a PEM certificate chain and key.
pub fn load_tls(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect::<Result<_, _>>())
        .map_err(|e| format!("--webhook-tls-cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "--webhook-tls-cert {}: no certificate in it",
            cert.display()
        ));
    }
    let private = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("--webhook-tls-key {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, private))
        .map(Arc::new)
        .map_err(|e| format!("the webhook's TLS certificate and key: {e}"))
}
