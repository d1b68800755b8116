//! The webhook receiver's flags, checked and loaded: its address, its
//! HMAC key, its optional TLS certificate.

use std::sync::Arc;

/// Where and how the webhook receiver listens (`crate::delivery::webhook`).
#[derive(Clone)]
pub struct WebhookConfig {
    pub address: std::net::SocketAddr,
    /// The HMAC key, from `--webhook-secret-file`.
    pub key: Vec<u8>,
    /// `--webhook-tls-cert` and `--webhook-tls-key`, loaded.
    pub tls: Option<std::sync::Arc<rustls::ServerConfig>>,
}

impl std::fmt::Debug for WebhookConfig {
    /// Never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("address", &self.address)
            .field("key", &format_args!("<{} bytes>", self.key.len()))
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl WebhookConfig {
    /// The configuration of `--webhook-*` (`None`: `address` is `0`, off).
    pub fn from_flags(
        address: Option<std::net::SocketAddr>,
        secret_file: Option<&std::path::Path>,
        tls_cert: Option<&std::path::Path>,
        tls_key: Option<&std::path::Path>,
    ) -> Result<Option<WebhookConfig>, String> {
        let Some(address) = address else {
            return Ok(None);
        };
        let Some(file) = secret_file else {
            return Err("--webhook-bind-address needs --webhook-secret-file (the HMAC key senders sign with)".into());
        };
        let text = std::fs::read(file)
            .map_err(|e| format!("--webhook-secret-file {}: {e}", file.display()))?;
        // A key written with `echo` ends with a newline the sender's does not.
        let key = text.trim_ascii_end().to_vec();
        if key.len() < 16 {
            return Err(format!(
                "--webhook-secret-file {}: the key has {} bytes; give at least 16 (e.g. head -c 32 /dev/urandom | base64)",
                file.display(),
                key.len()
            ));
        }
        let tls = match (tls_cert, tls_key) {
            (None, None) => None,
            (Some(cert), Some(key)) => Some(load_tls(cert, key)?),
            _ => {
                return Err(
                    "give both --webhook-tls-cert and --webhook-tls-key, or neither".into(),
                );
            }
        };
        Ok(Some(WebhookConfig { address, key, tls }))
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
