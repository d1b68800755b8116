//! Keyless signers: a short-lived certificate (Fulcio's, or a private
//! authority's) naming an OIDC identity — who signed, not which key.
//! The chain is checked by rustls-webpki to an authority of the trusted
//! root, at the time the signature was made; the identity is read from
//! the certificate's SAN and Fulcio's issuer extension.

use regex::Regex;
use rustls::pki_types::{CertificateDer, UnixTime};
use x509_parser::extensions::{GeneralName, ParsedExtension};

use super::keys::PublicKey;
use super::sigstore::{MAX_CHAIN, TrustedRoot};

/// Fulcio's issuer extension, a DER UTF8String (1.3.6.1.4.1.57264.1.8).
const ISSUER_V2: &str = "1.3.6.1.4.1.57264.1.8";
/// Its first form, the raw string (1.3.6.1.4.1.57264.1.1).
const ISSUER_V1: &str = "1.3.6.1.4.1.57264.1.1";
/// id-kp-codeSigning (1.3.6.1.5.5.7.3.3), DER.
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];

/// Who a certificate says signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub issuer: String,
    pub subject: String,
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "issuer {:?} subject {:?}", self.issuer, self.subject)
    }
}

/// One `matchOIDCIdentity` entry, compiled (anchored).
#[derive(Debug, Clone)]
pub struct IdentityMatch {
    issuer: Regex,
    subject: Regex,
    /// As written, for messages.
    written: (String, String),
}

impl IdentityMatch {
    pub fn new(issuer: &str, subject: &str) -> Result<Self, String> {
        let anchored = |what: &str, re: &str| {
            Regex::new(&format!("^(?:{re})$")).map_err(|e| {
                format!("matchOIDCIdentity {what} {re:?} is not a regular expression: {e}")
            })
        };
        Ok(IdentityMatch {
            issuer: anchored("issuer", issuer)?,
            subject: anchored("subject", subject)?,
            written: (issuer.to_string(), subject.to_string()),
        })
    }

    pub fn matches(&self, id: &Identity) -> bool {
        self.issuer.is_match(&id.issuer) && self.subject.is_match(&id.subject)
    }
}

impl std::fmt::Display for IdentityMatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "issuer {:?} subject {:?}",
            self.written.0, self.written.1
        )
    }
}

/// A certificate that chains to the trusted root: its identity and key.
#[derive(Debug)]
pub struct Signer {
    pub identity: Identity,
    pub key: PublicKey,
}

impl Signer {
    /// Checks `leaf` (DER) against `root`'s authorities at `at`, for code
    /// signing, and reads who it names.
    pub fn check(
        leaf: &[u8],
        root: &TrustedRoot,
        at: std::time::SystemTime,
    ) -> Result<Self, String> {
        let der = CertificateDer::from(leaf);
        let cert = webpki::EndEntityCert::try_from(&der)
            .map_err(|e| format!("a certificate that is not one ({e:?})"))?;
        let time = UnixTime::since_unix_epoch(
            at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default(),
        );
        let mut last = String::from("no authority");
        let chained = root.authorities.iter().any(|chain| {
            let Some((anchor, intermediates)) = chain.split_last() else {
                return false;
            };
            let anchor_der = CertificateDer::from(anchor.as_slice());
            let Ok(anchor) = webpki::anchor_from_trusted_cert(&anchor_der) else {
                return false;
            };
            let intermediates: Vec<CertificateDer<'_>> = intermediates
                .iter()
                .map(|c| CertificateDer::from(c.as_slice()))
                .collect();
            match cert.verify_for_usage(
                super::keys::ALGORITHMS,
                &[anchor],
                &intermediates,
                time,
                webpki::KeyUsage::required(CODE_SIGNING),
                None,
                None,
            ) {
                Ok(_) => true,
                Err(e) => {
                    last = format!("{e:?}");
                    false
                }
            }
        });
        if !chained {
            return Err(format!(
                "a certificate that does not chain to {} at the signing time ({last})",
                root.name
            ));
        }
        let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|e| format!("a certificate that is not one ({e})"))?;
        let key = PublicKey::from_der("the signing certificate", parsed.public_key().raw)?;
        Ok(Signer {
            identity: identity(&parsed)?,
            key,
        })
    }
}

/// The OIDC issuer and subject a Fulcio certificate names.
fn identity(cert: &x509_parser::certificate::X509Certificate<'_>) -> Result<Identity, String> {
    let mut issuer = None;
    let mut subject = None;
    for ext in cert.extensions() {
        match ext.oid.to_id_string().as_str() {
            ISSUER_V2 => issuer = utf8_string(ext.value),
            ISSUER_V1 if issuer.is_none() => {
                issuer = std::str::from_utf8(ext.value).ok().map(String::from)
            }
            _ => {}
        }
        if let ParsedExtension::SubjectAlternativeName(san) = ext.parsed_extension() {
            subject = san.general_names.iter().find_map(|n| match n {
                GeneralName::URI(u) => Some(u.to_string()),
                GeneralName::RFC822Name(e) => Some(e.to_string()),
                _ => None,
            });
        }
    }
    match (issuer, subject) {
        (Some(issuer), Some(subject)) => Ok(Identity { issuer, subject }),
        (None, _) => Err("a certificate without Fulcio's OIDC issuer extension".into()),
        (_, None) => Err("a certificate without a URI or email subject".into()),
    }
}

/// A DER UTF8String's text (short or one-byte long length).
fn utf8_string(der: &[u8]) -> Option<String> {
    let (&tag, rest) = der.split_first()?;
    if tag != 0x0c {
        return None;
    }
    let (len, body) = match rest.split_first()? {
        (&n, body) if n < 0x80 => (n as usize, body),
        (&0x81, body) => (*body.first()? as usize, &body[1..]),
        (&0x82, body) if body.len() >= 2 => {
            ((body[0] as usize) << 8 | body[1] as usize, &body[2..])
        }
        _ => return None,
    };
    std::str::from_utf8(body.get(..len)?).ok().map(String::from)
}

/// Refuses a chain annotation of more than [`MAX_CHAIN`] certificates
/// (it is not used: the trusted root's chain is).
pub fn check_chain_bound(pem: &str) -> Result<(), String> {
    let n = pem.matches("-----BEGIN CERTIFICATE-----").count();
    if n > MAX_CHAIN {
        return Err(format!(
            "a certificate chain of {n} certificates, over the bound of {MAX_CHAIN}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_match_anchored() {
        let m = IdentityMatch::new("https://token\\.example", "https://github.com/org/.*").unwrap();
        let id = |issuer: &str, subject: &str| Identity {
            issuer: issuer.into(),
            subject: subject.into(),
        };
        assert!(m.matches(&id("https://token.example", "https://github.com/org/app")));
        assert!(!m.matches(&id(
            "https://token.example.evil",
            "https://github.com/org/app"
        )));
        assert!(!m.matches(&id("https://token.example", "x https://github.com/org/app")));
        assert!(IdentityMatch::new("(", "x").is_err());
    }

    #[test]
    fn a_utf8_string_is_read_in_short_and_long_form() {
        assert_eq!(utf8_string(&[0x0c, 2, b'h', b'i']).as_deref(), Some("hi"));
        let long = "x".repeat(200);
        let mut der = vec![0x0c, 0x81, 200];
        der.extend(long.as_bytes());
        assert_eq!(utf8_string(&der), Some(long));
        assert_eq!(utf8_string(&[0x13, 1, b'x']), None);
        assert_eq!(utf8_string(&[0x0c, 5, b'x']), None);
    }
}
