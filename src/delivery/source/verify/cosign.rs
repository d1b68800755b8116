//! cosign's signatures of an OCI artifact, in either of the forms cosign
//! stores them:
//!
//! - **Bundles** (cosign 3's `sign`): an OCI artifact whose `subject` is
//!   the signed manifest, found through the registry's referrers API or
//!   its fallback tag `sha256-<digest>` (an index). Its one layer is a
//!   Sigstore bundle: a DSSE envelope of an in-toto statement naming the
//!   manifest digest, the signer's certificate chain (keyless), Rekor's
//!   entries.
//! - **Signature manifests** (cosign 2's `sign`, cosign 3's `attach
//!   signature`): an image manifest tagged `sha256-<digest>.sig`, one layer
//!   per signature: the blob is the signed "simple signing" payload naming
//!   the manifest digest; annotations hold the signature, certificate,
//!   chain and Rekor bundle.
//!
//! A signature counts when its payload names the manifest being installed
//! and it verifies with one of the Secret's keys — or, keyless, with a
//! certificate that chains to the trusted root, was valid when the
//! signature was made (Rekor's signed timestamp, or now without a log),
//! and names an identity `matchOIDCIdentity` allows.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rustls::pki_types::pem::PemObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::fulcio;
use super::keys::PublicKey;
use super::sigstore::TrustedRoot;
use crate::lean::hex::hex;

/// The media type of a signature layer.
pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const SIGNATURE: &str = "dev.cosignproject.cosign/signature";
const CERTIFICATE: &str = "dev.sigstore.cosign/certificate";
const CHAIN: &str = "dev.sigstore.cosign/chain";
const BUNDLE: &str = "dev.sigstore.cosign/bundle";
/// Signature layers looked at, at most.
pub const MAX_SIGNATURES: usize = 16;
/// The largest signed payload read (cosign's are under 1 KiB).
pub const MAX_PAYLOAD: u64 = 64 * 1024;
/// The largest annotation read (a certificate, a chain, a bundle).
pub const MAX_ANNOTATION: usize = 64 * 1024;

/// The tag cosign stores the signatures of `manifest_digest` under.
pub fn signature_tag(manifest_digest: &str) -> String {
    format!("{}.sig", manifest_digest.replace(':', "-"))
}

/// One signature layer as the signature manifest declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// The payload blob's `sha256:` digest.
    pub digest: String,
    pub size: u64,
    pub signature: String,
    pub certificate: Option<String>,
    pub chain: Option<String>,
    pub bundle: Option<String>,
}

/// The signature layers of a signature manifest (bounded: at most
/// [`MAX_SIGNATURES`], each annotation at most [`MAX_ANNOTATION`]).
pub fn declared(manifest: &[u8]) -> Result<Vec<Declared>, String> {
    let doc: Value = serde_json::from_slice(manifest)
        .map_err(|e| format!("the signature manifest is not JSON: {e}"))?;
    let layers = doc
        .get("layers")
        .and_then(Value::as_array)
        .ok_or("the signature manifest has no layers")?;
    let mut found = Vec::new();
    for layer in layers.iter().filter(|l| l["mediaType"] == SIMPLE_SIGNING) {
        if found.len() == MAX_SIGNATURES {
            break;
        }
        let note = |name: &str| -> Result<Option<String>, String> {
            match layer["annotations"][name].as_str() {
                Some(v) if v.len() > MAX_ANNOTATION => Err(format!(
                    "the signature's {name} annotation is {} bytes, over the {MAX_ANNOTATION}-byte bound",
                    v.len()
                )),
                v => Ok(v.map(String::from)),
            }
        };
        let Some(signature) = note(SIGNATURE)? else {
            continue;
        };
        found.push(Declared {
            digest: layer["digest"].as_str().unwrap_or_default().to_string(),
            size: layer["size"].as_u64().unwrap_or(u64::MAX),
            signature,
            certificate: note(CERTIFICATE)?,
            chain: note(CHAIN)?,
            bundle: note(BUNDLE)?,
        });
    }
    if found.is_empty() {
        return Err("the signature manifest holds no cosign signature".into());
    }
    Ok(found)
}

/// The media type of a Sigstore bundle (artifact type and layer).
pub const BUNDLE_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The in-toto predicate of a cosign signature (not an attestation).
const SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";

/// Who may have signed.
#[derive(Debug, Clone)]
pub enum Signers {
    /// Any one of these keys.
    Keys(Vec<PublicKey>),
    /// A certificate of `root` naming one of `identities`.
    Keyless {
        identities: Vec<fulcio::IdentityMatch>,
        root: TrustedRoot,
    },
}

/// One signature, whatever its form: what it signs and what it offers as
/// proof.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// The manifest digest the signed content names.
    pub signed_digest: String,
    /// The bytes the signature is over (a payload, or a DSSE envelope's
    /// pre-authentication encoding).
    pub message: Vec<u8>,
    /// SHA-256 of the signed payload, hex (what a Rekor entry records).
    pub payload_sha256: String,
    pub signature: Vec<u8>,
    /// The signer's certificate, DER (keyless).
    pub certificate: Option<Vec<u8>>,
    /// Rekor's promise that it logged the signature.
    pub logged: Option<LogPromise>,
}

/// A Rekor entry and its signed entry timestamp.
#[derive(Debug, Clone)]
pub struct LogPromise {
    entry: Entry,
    timestamp: Vec<u8>,
}

/// A signature layer of a signature manifest, with its payload.
pub fn from_layer(declared: &Declared, payload: &[u8]) -> Result<Evidence, String> {
    let payload_digest = format!("sha256:{}", hex(&Sha256::digest(payload)));
    if payload_digest != declared.digest {
        return Err(format!(
            "a payload of digest {payload_digest}, not the layer's {}",
            declared.digest
        ));
    }
    let doc: Value = serde_json::from_slice(payload)
        .map_err(|_| "a payload that is not cosign's simple signing JSON".to_string())?;
    let critical = &doc["critical"];
    if critical["type"] != "cosign container image signature" {
        return Err("a payload that is not a cosign image signature".into());
    }
    let signed_digest = critical["image"]["docker-manifest-digest"]
        .as_str()
        .ok_or("a payload naming no manifest digest")?
        .to_string();
    if let Some(chain) = &declared.chain {
        fulcio::check_chain_bound(chain)?;
    }
    let certificate = match &declared.certificate {
        None => None,
        Some(pem) => Some(
            rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
                .map_err(|_| "a certificate annotation that is not PEM".to_string())?
                .to_vec(),
        ),
    };
    let logged = match &declared.bundle {
        None => None,
        Some(b) => {
            let b: ClassicBundle = serde_json::from_str(b)
                .map_err(|_| "a Rekor bundle that is not one".to_string())?;
            Some(LogPromise {
                entry: b.payload,
                timestamp: decode("a Rekor timestamp", &b.signed_entry_timestamp)?,
            })
        }
    };
    Ok(Evidence {
        signed_digest,
        message: payload.to_vec(),
        payload_sha256: hex(&Sha256::digest(payload)),
        signature: decode("a signature", declared.signature.trim())?,
        certificate,
        logged,
    })
}

/// A Sigstore bundle (a DSSE envelope of a cosign signature statement).
pub fn from_bundle(bytes: &[u8]) -> Result<Evidence, String> {
    let bundle: Value =
        serde_json::from_slice(bytes).map_err(|_| "a bundle that is not JSON".to_string())?;
    let envelope = &bundle["dsseEnvelope"];
    let payload_type = envelope["payloadType"].as_str().ok_or(
        "a bundle without a DSSE envelope (a message signature is not an image signature)",
    )?;
    let payload = decode(
        "a DSSE payload",
        envelope["payload"].as_str().unwrap_or_default(),
    )?;
    let signature = decode(
        "a DSSE signature",
        envelope["signatures"][0]["sig"]
            .as_str()
            .unwrap_or_default(),
    )?;
    let statement: Value = serde_json::from_slice(&payload)
        .map_err(|_| "a DSSE payload that is not an in-toto statement".to_string())?;
    if statement["predicateType"] != SIGN_PREDICATE {
        return Err(format!(
            "a bundle of predicate {} (an attestation, not a signature)",
            statement["predicateType"]
        ));
    }
    let signed_digest = statement["subject"][0]["digest"]["sha256"]
        .as_str()
        .map(|h| format!("sha256:{h}"))
        .ok_or("a statement naming no sha256 subject")?;
    let material = &bundle["verificationMaterial"];
    let certificates = material["x509CertificateChain"]["certificates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if certificates.len() > super::sigstore::MAX_CHAIN {
        return Err(format!(
            "a certificate chain of {} certificates, over the bound of {}",
            certificates.len(),
            super::sigstore::MAX_CHAIN
        ));
    }
    let raw = material["certificate"]["rawBytes"]
        .as_str()
        .or_else(|| certificates.first().and_then(|c| c["rawBytes"].as_str()));
    let certificate = raw.map(|r| decode("a certificate", r)).transpose()?;
    let logged = match material["tlogEntries"].get(0) {
        None => None,
        Some(t) => {
            let number = |v: &Value| {
                v.as_i64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                    .unwrap_or(-1)
            };
            let key_id = decode("a log ID", t["logId"]["keyId"].as_str().unwrap_or_default())?;
            Some(LogPromise {
                entry: Entry {
                    body: t["canonicalizedBody"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    integrated_time: number(&t["integratedTime"]),
                    log_id: hex(&key_id),
                    log_index: number(&t["logIndex"]),
                },
                timestamp: decode(
                    "a Rekor timestamp",
                    t["inclusionPromise"]["signedEntryTimestamp"]
                        .as_str()
                        .unwrap_or_default(),
                )?,
            })
        }
    };
    Ok(Evidence {
        signed_digest,
        message: pae(payload_type, &payload),
        payload_sha256: hex(&Sha256::digest(&payload)),
        signature,
        certificate,
        logged,
    })
}

/// DSSE's pre-authentication encoding: what an envelope's signature is
/// over.
fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

fn decode(what: &str, b64: &str) -> Result<Vec<u8>, String> {
    STANDARD
        .decode(b64)
        .map_err(|_| format!("{what} that is not base64"))
}

/// Checks that one of `signatures` signs `manifest_digest` for `signers`;
/// returns who signed (a key's name and fingerprint, or an identity).
/// `Err` says what was expected and what was found.
pub fn verify(
    signatures: &[Result<Evidence, String>],
    manifest_digest: &str,
    signers: &Signers,
    now: std::time::SystemTime,
) -> Result<String, String> {
    let mut seen = Vec::new();
    for s in signatures {
        match s
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|e| verify_one(e, manifest_digest, signers, now))
        {
            Ok(signer) => return Ok(signer),
            Err(e) if !seen.contains(&e) => seen.push(e),
            Err(_) => {}
        }
    }
    let expected = match signers {
        Signers::Keys(keys) => format!(
            "a signature by one of the keys {}",
            keys.iter()
                .map(|k| format!("{} ({})", k.name, k.fingerprint))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Signers::Keyless { identities, root } => format!(
            "a certificate of {} for {}",
            root.name,
            identities
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(" or ")
        ),
    };
    Err(format!(
        "expected {expected}; found {} signature(s): {}",
        signatures.len(),
        seen.join("; ")
    ))
}

fn verify_one(
    e: &Evidence,
    manifest_digest: &str,
    signers: &Signers,
    now: std::time::SystemTime,
) -> Result<String, String> {
    if e.signed_digest != manifest_digest {
        return Err(format!(
            "a signature of {}, not of {manifest_digest}",
            e.signed_digest
        ));
    }
    match signers {
        Signers::Keys(keys) => keys
            .iter()
            .find(|k| k.verifies(&e.message, &e.signature))
            .map(|k| format!("key {} ({})", k.name, k.fingerprint))
            .ok_or_else(|| "a signature by none of the keys".to_string()),
        Signers::Keyless { identities, root } => {
            let certificate = e
                .certificate
                .as_deref()
                .ok_or("a signature without a certificate (signed with a key?)")?;
            let signed_at = match &e.logged {
                Some(promise) => rekor_time(promise, root, e)?,
                None if !root.logs.is_empty() => {
                    return Err(format!(
                        "a signature without a Rekor entry, and {} names a transparency log",
                        root.name
                    ));
                }
                None => now,
            };
            let signer = fulcio::Signer::check(certificate, root, signed_at)?;
            if !signer.key.verifies(&e.message, &e.signature) {
                return Err(format!(
                    "a signature its certificate's key does not verify ({})",
                    signer.identity
                ));
            }
            if !identities.iter().any(|i| i.matches(&signer.identity)) {
                return Err(format!("a signer {}", signer.identity));
            }
            Ok(format!(
                "identity {} (certificate of {})",
                signer.identity, root.name
            ))
        }
    }
}

/// A signature manifest's Rekor bundle.
#[derive(Deserialize)]
struct ClassicBundle {
    #[serde(rename = "SignedEntryTimestamp")]
    signed_entry_timestamp: String,
    #[serde(rename = "Payload")]
    payload: Entry,
}

/// What the log signed, in canonical JSON's (sorted) key order.
#[derive(Debug, Clone, Deserialize, Serialize)]
struct Entry {
    body: String,
    #[serde(rename = "integratedTime")]
    integrated_time: i64,
    #[serde(rename = "logID")]
    log_id: String,
    #[serde(rename = "logIndex")]
    log_index: i64,
}

/// When the log says the signature was made: its signed entry timestamp
/// verified with the log's key of `root`, and its entry of this very
/// signature and payload (hashedrekord or dsse).
fn rekor_time(
    promise: &LogPromise,
    root: &TrustedRoot,
    e: &Evidence,
) -> Result<std::time::SystemTime, String> {
    let entry = &promise.entry;
    let log = root.log(&entry.log_id).ok_or_else(|| {
        format!(
            "a Rekor entry of log {}, which {} does not name",
            entry.log_id, root.name
        )
    })?;
    let canonical = serde_json::to_vec(entry).unwrap_or_default();
    if !log.verifies(&canonical, &promise.timestamp) {
        return Err("a Rekor timestamp its log's key does not verify".into());
    }
    let body: Value = serde_json::from_slice(&decode("a Rekor entry", &entry.body)?)
        .map_err(|_| "a Rekor entry that is not JSON".to_string())?;
    let spec = &body["spec"];
    let signature = |v: &Value| v.as_str().and_then(|s| STANDARD.decode(s).ok());
    let ours = match body["kind"].as_str() {
        Some("hashedrekord") => {
            spec["data"]["hash"]["value"] == e.payload_sha256.as_str()
                && signature(&spec["signature"]["content"]).as_deref() == Some(&e.signature[..])
        }
        Some("dsse") => {
            spec["payloadHash"]["value"] == e.payload_sha256.as_str()
                && spec["signatures"].as_array().is_some_and(|s| {
                    s.iter()
                        .any(|s| signature(&s["signature"]).as_deref() == Some(&e.signature[..]))
                })
        }
        _ => false,
    };
    if !ours {
        return Err("a Rekor entry of another signature".into());
    }
    let secs = u64::try_from(entry.integrated_time)
        .map_err(|_| "a Rekor entry without an integration time".to_string())?;
    Ok(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, CustomExtension,
        ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType, date_time_ymd,
    };
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair};

    const DIGEST: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000001";
    const SUBJECT: &str = "https://git.example/org/app";
    const ISSUER: &str = "https://token.example";

    fn sign(key: &KeyPair, message: &[u8]) -> Vec<u8> {
        let rng = SystemRandom::new();
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &key.serialize_der(), &rng)
                .unwrap();
        pair.sign(&rng, message).unwrap().as_ref().to_vec()
    }

    /// A keyless signature whose certificate was valid on 2020-01-01 only,
    /// and a trust root whose log key made `timestamp` true.
    struct Signed {
        root: TrustedRoot,
        evidence: Evidence,
        log: KeyPair,
    }

    fn signed(logged_at: i64) -> Signed {
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        ca.not_before = date_time_ymd(2019, 1, 1);
        ca.not_after = date_time_ymd(2040, 1, 1);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let mut leaf = CertificateParams::new(Vec::<String>::new()).unwrap();
        leaf.subject_alt_names = vec![SanType::URI(SUBJECT.try_into().unwrap())];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
        let mut issuer = vec![0x0c, ISSUER.len() as u8];
        issuer.extend_from_slice(ISSUER.as_bytes());
        leaf.custom_extensions = vec![CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 4, 1, 57264, 1, 8],
            issuer,
        )];
        leaf.not_before = date_time_ymd(2020, 1, 1);
        leaf.not_after = date_time_ymd(2020, 1, 2);
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = leaf.signed_by(&leaf_key, &ca).unwrap();
        let log = KeyPair::generate().unwrap();
        let log_key = PublicKey::from_pem("the test log", log.public_key_pem().as_bytes()).unwrap();
        let log_id = log_key
            .fingerprint
            .trim_start_matches("sha256:")
            .to_string();
        let root = TrustedRoot {
            authorities: vec![vec![ca.der().to_vec()]],
            logs: vec![(log_id.clone(), log_key)],
            name: "the test root".into(),
        };
        let payload = serde_json::to_vec(&serde_json::json!({ "critical": {
            "type": "cosign container image signature",
            "image": { "docker-manifest-digest": DIGEST } } }))
        .unwrap();
        let signature = sign(&leaf_key, &payload);
        let body = serde_json::json!({ "kind": "hashedrekord", "apiVersion": "0.0.1", "spec": {
            "data": { "hash": { "algorithm": "sha256", "value": hex(&Sha256::digest(&payload)) } },
            "signature": { "content": STANDARD.encode(&signature) } } });
        let entry = Entry {
            body: STANDARD.encode(body.to_string()),
            integrated_time: logged_at,
            log_id,
            log_index: 7,
        };
        let timestamp = sign(&log, &serde_json::to_vec(&entry).unwrap());
        Signed {
            root,
            evidence: Evidence {
                signed_digest: DIGEST.into(),
                payload_sha256: hex(&Sha256::digest(&payload)),
                message: payload,
                signature,
                certificate: Some(leaf.der().to_vec()),
                logged: Some(LogPromise { entry, timestamp }),
            },
            log,
        }
    }

    fn keyless(root: &TrustedRoot) -> Signers {
        Signers::Keyless {
            identities: vec![
                fulcio::IdentityMatch::new(
                    "https://token\\.example",
                    "https://git\\.example/org/.*",
                )
                .unwrap(),
            ],
            root: root.clone(),
        }
    }

    /// 2020-01-01T12:00:00Z: inside the certificate's one day.
    const NOON_2020_01_01: i64 = 1_577_880_000;

    #[test]
    fn a_logged_signature_is_checked_at_the_logs_time_not_now() {
        let s = signed(NOON_2020_01_01);
        let now = std::time::SystemTime::now();
        let who = verify(&[Ok(s.evidence.clone())], DIGEST, &keyless(&s.root), now).unwrap();
        assert!(who.contains(SUBJECT), "{who}");

        // The same, the certificate expired and no log entry: refused.
        let mut unlogged = s.evidence.clone();
        unlogged.logged = None;
        let e = verify(&[Ok(unlogged)], DIGEST, &keyless(&s.root), now).unwrap_err();
        assert!(e.contains("without a Rekor entry"), "{e}");
        let mut no_log_root = s.root.clone();
        no_log_root.logs.clear();
        let mut unlogged = s.evidence.clone();
        unlogged.logged = None;
        let e = verify(&[Ok(unlogged)], DIGEST, &keyless(&no_log_root), now).unwrap_err();
        assert!(e.contains("does not chain"), "checked now, expired: {e}");
    }

    #[test]
    fn a_log_promise_that_is_forged_or_of_another_signature_is_refused() {
        let now = std::time::SystemTime::now();
        // Logged outside the certificate's day: expired then.
        let late = signed(NOON_2020_01_01 + 7 * 86_400);
        let e = verify(&[Ok(late.evidence)], DIGEST, &keyless(&late.root), now).unwrap_err();
        assert!(e.contains("does not chain"), "{e}");

        let s = signed(NOON_2020_01_01);
        let mut forged = s.evidence.clone();
        if let Some(p) = forged.logged.as_mut() {
            p.entry.integrated_time += 1;
        }
        let e = verify(&[Ok(forged)], DIGEST, &keyless(&s.root), now).unwrap_err();
        assert!(e.contains("timestamp its log's key does not verify"), "{e}");

        let mut other = s.evidence.clone();
        if let Some(p) = other.logged.as_mut() {
            let body = serde_json::json!({ "kind": "hashedrekord", "spec": {
                "data": { "hash": { "value": "00" } }, "signature": { "content": "AA==" } } });
            p.entry.body = STANDARD.encode(body.to_string());
            p.timestamp = sign(&s.log, &serde_json::to_vec(&p.entry).unwrap());
        }
        let e = verify(&[Ok(other)], DIGEST, &keyless(&s.root), now).unwrap_err();
        assert!(e.contains("a Rekor entry of another signature"), "{e}");

        let e = verify(
            &[Ok(s.evidence.clone())],
            "sha256:ff",
            &keyless(&s.root),
            now,
        )
        .unwrap_err();
        assert!(e.contains("not of sha256:ff"), "{e}");
    }
}
