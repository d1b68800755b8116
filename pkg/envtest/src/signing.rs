//! Chart signers for the verification tests and benchmark: the real cosign
//! of the test assets (keys, bundles, attached signatures), and a private
//! Sigstore-like authority — a CA and leaf certificates naming an OIDC
//! identity the way Fulcio's do (a URI SAN, Fulcio's issuer extension,
//! code signing) — with the `trusted_root.json` that trusts it.

use std::path::Path;
use std::process::Command;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, CustomExtension, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};

use crate::{ControlPlane, Error};

/// Runs cosign in `dir`, with `dir` as its HOME and an empty key password.
pub fn cosign(cp: &ControlPlane, dir: &Path, args: &[&str]) -> Result<Vec<u8>, Error> {
    let out = Command::new(cp.assets().binary("cosign")?)
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env("COSIGN_PASSWORD", "")
        .output()?;
    if !out.status.success() {
        return Err(Error::Io(std::io::Error::other(format!(
            "cosign {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))));
    }
    Ok(out.stdout)
}

/// Signs `oci` (`oci://host/repo`) at manifest `digest` with cosign's
/// `sign` (a Sigstore bundle), offline: a signing config without a
/// transparency log, made in `dir` the first time. `extra`: the key, and
/// for keyless its certificate and chain.
pub fn cosign_sign(
    cp: &ControlPlane,
    dir: &Path,
    oci: &str,
    digest: &str,
    extra: &[&str],
) -> Result<(), Error> {
    if !dir.join("signing-config.json").exists() {
        cosign(
            cp,
            dir,
            &["signing-config", "create", "--out", "signing-config.json"],
        )?;
    }
    let reference = format!("{}@{digest}", oci.trim_start_matches("oci://"));
    let mut args = vec![
        "sign",
        "--signing-config",
        "signing-config.json",
        "--allow-http-registry",
        "-y",
    ];
    args.extend_from_slice(extra);
    args.push(&reference);
    cosign(cp, dir, &args).map(|_| ())
}

/// A private signing authority (see the module docs).
pub struct PrivateSigstore {
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl PrivateSigstore {
    pub fn new() -> Result<Self, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "test-fulcio");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ok(PrivateSigstore {
            ca: CertifiedIssuer::self_signed(params, KeyPair::generate()?)?,
        })
    }

    /// `trusted_root.json` naming the CA and no transparency log.
    pub fn trusted_root(&self) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [],
            "certificateAuthorities": [{
                "subject": { "commonName": "test-fulcio" },
                "certChain": { "certificates": [{ "rawBytes": STANDARD.encode(self.ca.der()) }] },
                "validFor": { "start": "2020-01-01T00:00:00Z" } }] }))
        .unwrap_or_default()
    }

    /// Writes in `dir` a leaf certificate for `subject` from `issuer`
    /// (`leaf.pem`), the CA (`ca.pem`) and the leaf's key as cosign's
    /// (`leaf.key`): sign with `--key leaf.key --certificate leaf.pem
    /// --certificate-chain ca.pem`.
    pub fn signer(
        &self,
        cp: &ControlPlane,
        dir: &Path,
        issuer: &str,
        subject: &str,
    ) -> Result<(), Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.subject_alt_names = vec![SanType::URI(subject.try_into()?)];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // Fulcio's OIDC issuer (1.3.6.1.4.1.57264.1.8): a DER UTF8String.
        let mut value = vec![0x0c, issuer.len() as u8];
        value.extend_from_slice(issuer.as_bytes());
        params.custom_extensions = vec![CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 4, 1, 57264, 1, 8],
            value,
        )];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.ca)?;
        std::fs::write(dir.join("leaf.pem"), cert.pem())?;
        std::fs::write(dir.join("ca.pem"), self.ca.pem())?;
        std::fs::write(dir.join("leaf-pkcs8.pem"), key.serialize_pem())?;
        cosign(
            cp,
            dir,
            &[
                "import-key-pair",
                "--key",
                "leaf-pkcs8.pem",
                "--output-key-prefix",
                "leaf",
            ],
        )
        .map(|_| ())
    }
}

/// The cosign flags signing with [`PrivateSigstore::signer`]'s files.
pub const KEYLESS_FLAGS: &[&str] = &[
    "--key",
    "leaf.key",
    "--certificate",
    "leaf.pem",
    "--certificate-chain",
    "ca.pem",
];
