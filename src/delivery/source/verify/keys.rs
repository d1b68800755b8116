//! Public keys a signature is checked against: PEM `PUBLIC KEY`s (what
//! `cosign generate-key-pair` writes), parsed and checked by rustls-webpki
//! over ring — the same code that checks the operator's TLS peers.

use rustls::pki_types::SignatureVerificationAlgorithm;
use rustls::pki_types::SubjectPublicKeyInfoDer;
use rustls::pki_types::pem::PemObject;
use sha2::{Digest, Sha256};
use webpki::RawPublicKeyEntity;

use crate::lean::hex::hex;

/// The signature schemes a key may sign with: cosign's ECDSA P-256 by
/// default, P-384, Ed25519 and RSA PKCS#1 v1.5.
pub const ALGORITHMS: &[&dyn SignatureVerificationAlgorithm] = &[
    webpki::ring::ECDSA_P256_SHA256,
    webpki::ring::ECDSA_P384_SHA384,
    webpki::ring::ECDSA_P384_SHA256,
    webpki::ring::ED25519,
    webpki::ring::RSA_PKCS1_2048_8192_SHA256,
    webpki::ring::RSA_PKCS1_2048_8192_SHA256_ABSENT_PARAMS,
];

/// One public key, named for messages by where it came from and its
/// fingerprint (never its bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// `<secret>/<key>` it was read from.
    pub name: String,
    /// `sha256:` of its DER (SubjectPublicKeyInfo).
    pub fingerprint: String,
    der: Vec<u8>,
}

impl PublicKey {
    /// Reads a PEM `PUBLIC KEY` (the first one of `pem`).
    pub fn from_pem(name: &str, pem: &[u8]) -> Result<Self, String> {
        let spki = SubjectPublicKeyInfoDer::from_pem_slice(pem)
            .map_err(|e| format!("{name} is not a PEM public key: {e}"))?;
        Self::from_der(name, spki.as_ref())
    }

    /// A DER SubjectPublicKeyInfo.
    pub fn from_der(name: &str, der: &[u8]) -> Result<Self, String> {
        let spki = SubjectPublicKeyInfoDer::from(der);
        RawPublicKeyEntity::try_from(&spki)
            .map_err(|e| format!("{name} is not a public key: {e:?}"))?;
        Ok(PublicKey {
            name: name.to_string(),
            fingerprint: format!("sha256:{}", hex(&Sha256::digest(der))),
            der: der.to_vec(),
        })
    }

    /// The DER SubjectPublicKeyInfo.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// Whether `signature` is this key's over `message`, in any of
    /// [`ALGORITHMS`] its type allows.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        let spki = SubjectPublicKeyInfoDer::from(self.der.as_slice());
        let Ok(key) = RawPublicKeyEntity::try_from(&spki) else {
            return false;
        };
        ALGORITHMS
            .iter()
            .any(|alg| key.verify_signature(*alg, message, signature).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_verifies_its_own_signature_and_nothing_else() {
        let pair = rcgen::KeyPair::generate().unwrap();
        let key = PublicKey::from_pem("keys/cosign.pub", pair.public_key_pem().as_bytes()).unwrap();
        assert!(key.fingerprint.starts_with("sha256:"));
        let rng = ring::rand::SystemRandom::new();
        let signer = ring::signature::EcdsaKeyPair::from_pkcs8(
            &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            &pair.serialize_der(),
            &rng,
        )
        .unwrap();
        let sig = signer.sign(&rng, b"payload").unwrap();
        assert!(key.verifies(b"payload", sig.as_ref()));
        assert!(!key.verifies(b"payloaD", sig.as_ref()));
        let other = rcgen::KeyPair::generate().unwrap();
        let other =
            PublicKey::from_pem("keys/other.pub", other.public_key_pem().as_bytes()).unwrap();
        assert!(!other.verifies(b"payload", sig.as_ref()));
        assert!(PublicKey::from_pem("keys/x.pub", b"not a key").is_err());
    }
}
