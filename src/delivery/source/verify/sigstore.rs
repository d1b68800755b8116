//! Sigstore's trust: a `trusted_root.json` (the format of Sigstore's
//! protobuf specs) naming the certificate authorities keyless signing
//! certificates chain to (Fulcio) and the transparency logs whose signed
//! timestamps prove when a signature was made (Rekor). The public root is
//! built in; `trustedRootSecretRef` gives a private one.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use super::keys::PublicKey;

/// The largest `trusted_root.json` read.
pub const MAX_TRUSTED_ROOT: usize = 1024 * 1024;
/// Certificates of one authority's chain, at most.
pub const MAX_CHAIN: usize = 10;

/// The public Sigstore trust root (Fulcio and Rekor of sigstore.dev), as
/// its TUF repository published it.
pub const PUBLIC_GOOD: &str = include_str!("sigstore-public-good.json");

/// What a trusted root gives: authorities and logs.
#[derive(Debug, Clone, Default)]
pub struct TrustedRoot {
    /// Each authority's chain, DER, the issuing certificate first and the
    /// root last.
    pub authorities: Vec<Vec<Vec<u8>>>,
    /// The transparency logs' keys, each with its log ID (the SHA-256 of
    /// its DER, hex).
    pub logs: Vec<(String, PublicKey)>,
    /// Where it came from, for messages.
    pub name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    #[serde(default)]
    tlogs: Vec<Log>,
    #[serde(default)]
    certificate_authorities: Vec<Authority>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Log {
    public_key: RawBytes,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Authority {
    cert_chain: Chain,
}

#[derive(Deserialize)]
struct Chain {
    #[serde(default)]
    certificates: Vec<RawBytes>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawBytes {
    raw_bytes: String,
}

impl TrustedRoot {
    /// Reads a `trusted_root.json`; `name` says where it came from.
    pub fn parse(name: &str, json: &[u8]) -> Result<Self, String> {
        if json.len() > MAX_TRUSTED_ROOT {
            return Err(format!(
                "{name} is {} bytes, over the {MAX_TRUSTED_ROOT}-byte bound",
                json.len()
            ));
        }
        let doc: Document = serde_json::from_slice(json)
            .map_err(|e| format!("{name} is not a Sigstore trusted_root.json: {e}"))?;
        let decode = |what: &str, b: &RawBytes| {
            STANDARD
                .decode(&b.raw_bytes)
                .map_err(|e| format!("{name}: {what} is not base64: {e}"))
        };
        let mut authorities = Vec::new();
        for a in &doc.certificate_authorities {
            if a.cert_chain.certificates.len() > MAX_CHAIN {
                return Err(format!(
                    "{name}: a certificate chain of {} certificates, over the bound of {MAX_CHAIN}",
                    a.cert_chain.certificates.len()
                ));
            }
            let chain = a
                .cert_chain
                .certificates
                .iter()
                .map(|c| decode("a certificate", c))
                .collect::<Result<Vec<_>, _>>()?;
            if !chain.is_empty() {
                authorities.push(chain);
            }
        }
        let mut logs = Vec::new();
        for l in &doc.tlogs {
            let key = PublicKey::from_der(
                &format!("{name} tlog"),
                &decode("a log key", &l.public_key)?,
            )?;
            let id = key.fingerprint.trim_start_matches("sha256:").to_string();
            logs.push((id, key));
        }
        if authorities.is_empty() {
            return Err(format!("{name} names no certificate authority"));
        }
        Ok(TrustedRoot {
            authorities,
            logs,
            name: name.to_string(),
        })
    }

    /// The log whose ID is `id` (hex).
    pub fn log(&self, id: &str) -> Option<&PublicKey> {
        self.logs.iter().find(|(i, _)| i == id).map(|(_, k)| k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_root_names_fulcio_and_rekor() {
        let root = TrustedRoot::parse("built-in", PUBLIC_GOOD.as_bytes()).unwrap();
        assert!(!root.authorities.is_empty());
        assert!(!root.logs.is_empty());
    }

    #[test]
    fn a_root_that_is_not_one_is_refused_with_its_name() {
        let e = TrustedRoot::parse("ns/private-root", b"{\"tlogs\": 3}").unwrap_err();
        assert!(
            e.starts_with("ns/private-root is not a Sigstore trusted_root.json"),
            "{e}"
        );
        let e = TrustedRoot::parse("ns/r", b"{}").unwrap_err();
        assert_eq!(e, "ns/r names no certificate authority");
    }
}
