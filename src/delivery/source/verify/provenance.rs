//! Helm provenance (`helm package --sign`, checked as `helm verify` does):
//! a `.prov` file beside the chart archive, an OpenPGP clear-signed
//! document — the chart's Chart.yaml, then a `files:` map naming the
//! archive and its SHA-256. The signature must verify with a key of the
//! keyrings, and the archive must be the one it names.

use pgp::composed::{CleartextSignedMessage, PublicOrSecret, SignedPublicKey};
use pgp::types::KeyDetails;
use sha2::{Digest, Sha256};

use super::Trust;
use crate::lean::hex::hex;

/// The largest `.prov` read (a Chart.yaml and a signature: a few KiB).
pub const MAX_PROV: u64 = 256 * 1024;
/// Keys read from one keyring, at most.
const MAX_KEYS: usize = 256;

/// Checks `prov` against `archive` and the keyrings of `trust`; returns
/// the key that signed (`<secret>/<key>` and its fingerprint).
pub fn verify(prov: &[u8], archive: &[u8], trust: &Trust) -> Result<String, String> {
    let text = std::str::from_utf8(prov).map_err(|_| "the .prov file is not text".to_string())?;
    let (message, _) = CleartextSignedMessage::from_string(text)
        .map_err(|_| "the .prov file is not an OpenPGP clear-signed document".to_string())?;
    let mut tried = Vec::new();
    let mut signer = None;
    'rings: for (name, ring) in &trust.keyrings {
        for key in keyring(name, ring)? {
            let fingerprint = hex(key.fingerprint().as_bytes());
            let verifies = message.verify(&key).is_ok()
                || key
                    .public_subkeys
                    .iter()
                    .any(|sub| message.verify(sub).is_ok());
            if verifies {
                signer = Some(format!("key {name} ({fingerprint})"));
                break 'rings;
            }
            tried.push(fingerprint);
        }
    }
    let signer = signer.ok_or_else(|| {
        format!(
            "the .prov signature verifies with none of the keys of {} ({})",
            trust
                .keyrings
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            tried.join(", ")
        )
    })?;
    let digest = format!("sha256:{}", hex(&Sha256::digest(archive)));
    let named = files(&message.signed_text());
    if !named.iter().any(|(_, d)| *d == digest) {
        return Err(format!(
            "the archive's digest is {digest}; the signed .prov names {}",
            if named.is_empty() {
                "no file".to_string()
            } else {
                named
                    .iter()
                    .map(|(f, d)| format!("{f} {d}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ));
    }
    Ok(signer)
}

/// The public keys of a keyring, binary or ASCII-armored (bounded), those
/// the primary key binds only (the `.prov` check and Git signatures).
pub fn keyring(name: &str, bytes: &[u8]) -> Result<Vec<SignedPublicKey>, String> {
    let (keys, _) = PublicOrSecret::from_reader_many(std::io::Cursor::new(bytes))
        .map_err(|_| format!("{name} is not an OpenPGP keyring"))?;
    let mut out = Vec::new();
    for key in keys.take(MAX_KEYS) {
        let key = match key {
            Ok(PublicOrSecret::Public(k)) => k,
            Ok(PublicOrSecret::Secret(k)) => k.to_public_key(),
            Err(_) => return Err(format!("{name} is not an OpenPGP keyring")),
        };
        // Only keys whose user ids and subkeys the primary key binds.
        if key.verify_bindings().is_ok() {
            out.push(key);
        }
    }
    if out.is_empty() {
        return Err(format!("{name} holds no key with valid bindings"));
    }
    Ok(out)
}

/// The `files:` entries of a signed provenance text: (file, digest).
fn files(text: &str) -> Vec<(String, String)> {
    let Some((_, rest)) = text.split_once("\nfiles:") else {
        return Vec::new();
    };
    rest.lines()
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .filter_map(|l| l.trim().split_once(": "))
        .map(|(f, d)| {
            (
                f.trim_matches('"').to_string(),
                d.trim().trim_matches('"').to_string(),
            )
        })
        .take(64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_section_is_read() {
        let text = "apiVersion: v2\nname: web\n\n...\nfiles:\n  web-0.1.0.tgz: sha256:abc\n";
        assert_eq!(
            files(text),
            vec![("web-0.1.0.tgz".into(), "sha256:abc".into())]
        );
        assert!(files("name: web\n").is_empty());
    }

    #[test]
    fn a_prov_that_is_not_openpgp_is_refused_by_name() {
        let trust = Trust {
            provider: apis::helmapp::VerifyProvider::Helm,
            signers: None,
            keyrings: vec![],
            fingerprint: String::new(),
        };
        let e = verify(b"files:\n  x.tgz: sha256:00\n", b"x", &trust).unwrap_err();
        assert_eq!(e, "the .prov file is not an OpenPGP clear-signed document");
        let e = verify(&[0xff, 0xfe, 0x00], b"x", &trust).unwrap_err();
        assert_eq!(e, "the .prov file is not text");
    }
}
