//! Verified charts (issue 37, docs/verification.md): OCI charts signed by
//! the real cosign, checked by the operator before a byte of the chart is
//! pulled. A key-signed chart installs, and the same tag pushed again
//! unsigned is refused with the release untouched and no helm run; a
//! keyless signature against a private trust root installs for the
//! expected identity and is refused, naming expected and found, for
//! another.

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, CustomExtension, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};

use super::*;

/// cosign from the test assets, run in `dir` with a private HOME and no
/// key password.
fn cosign(f: &Fixture, dir: &Path, args: &[&str]) {
    let binary =
        f.cp.assets()
            .binary("cosign")
            .expect("cosign in the test assets");
    let out = Command::new(binary)
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env("COSIGN_PASSWORD", "")
        .output()
        .expect("cosign runs");
    assert!(
        out.status.success(),
        "cosign {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Signs `host/charts/<name>@digest` with cosign 3 (a Sigstore bundle), no
/// transparency log (a signing config without one: offline).
fn sign(f: &Fixture, dir: &Path, oci: &str, digest: &str, extra: &[&str]) {
    if !dir.join("signing-config.json").exists() {
        cosign(
            f,
            dir,
            &["signing-config", "create", "--out", "signing-config.json"],
        );
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
    cosign(f, dir, &args);
}

fn work_dir(f: &Fixture, name: &str) -> PathBuf {
    let dir = f.cp.dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn secret(f: &Fixture, name: &str, data: &[(&str, Vec<u8>)]) {
    let data: serde_json::Map<String, serde_json::Value> = data
        .iter()
        .map(|(k, v)| (k.to_string(), json!(STANDARD.encode(v))))
        .collect();
    Api::<Secret>::namespaced(f.cp.client(), NS)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": { "name": name, "namespace": NS }, "data": data }))
            .unwrap(),
        )
        .await
        .unwrap();
}

fn message_of(app: &HelmApp) -> String {
    app.status.as_ref().unwrap().conditions[0].message.clone()
}

fn helm_runs_on(log: &Path, release: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some(release))
        .count()
}

#[tokio::test]
async fn a_key_signed_chart_installs_and_the_tag_pushed_again_unsigned_is_refused() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let charts = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let registry = envtest::OciRegistry::start(&f.cp, false).await.unwrap();
    let (oci, digest) = registry
        .push_with_digest(&f.cp, &charts.join("tiny"))
        .unwrap();
    let dir = work_dir(&f, "cosign-key");
    cosign(&f, &dir, &["generate-key-pair"]);
    sign(&f, &dir, &oci, &digest, &["--key", "cosign.key"]);
    secret(
        &f,
        "cosign-pub",
        &[("cosign.pub", std::fs::read(dir.join("cosign.pub")).unwrap())],
    )
    .await;
    // Another key: a signature by the first is not one by it.
    let other = work_dir(&f, "cosign-other");
    cosign(&f, &other, &["generate-key-pair"]);
    secret(
        &f,
        "other-pub",
        &[(
            "cosign.pub",
            std::fs::read(other.join("cosign.pub")).unwrap(),
        )],
    )
    .await;

    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let chart = |key: &str| {
        json!({ "oci": oci, "version": "0.1.0", "insecure": true,
        "verify": { "provider": "cosign", "secretRef": { "name": key } } })
    };
    apply(
        &f,
        "signed",
        json!({ "chart": chart("cosign-pub"), "interval": "1s" }),
    )
    .await;
    apply(
        &f,
        "wrongkey",
        json!({ "chart": chart("other-pub"), "interval": "1s" }),
    )
    .await;

    let installed = ready(&f, "signed", "InstallSucceeded", 1).await;
    let verification = installed
        .status
        .unwrap()
        .verification
        .expect("status.verification");
    assert_eq!(verification.provider, "cosign");
    assert_eq!(verification.digest, digest, "the manifest signed");
    assert!(
        verification
            .signer
            .starts_with(&format!("key {NS}/cosign-pub/cosign.pub (sha256:")),
        "{}",
        verification.signer
    );
    assert!(!verification.verified_at.is_empty());

    let refused = with_reason(&f, "wrongkey", "VerificationFailed").await;
    let message = message_of(&refused);
    assert!(
        message.contains(&format!("{NS}/other-pub/cosign.pub")),
        "names the key expected: {message}"
    );
    assert!(message.contains(&digest), "names the artifact: {message}");
    assert_eq!(helm_runs_on(&log, "wrongkey"), 0, "never given to helm");
    assert!(
        reasons_of_events(&f, "wrongkey")
            .await
            .contains(&"VerificationFailed".to_string())
    );

    // The same tag pushed again, other bytes, unsigned.
    let repushed = super::sources::chart_at_version(&f, "tiny", "0.1.0");
    let values = repushed.join("values.yaml");
    let text = std::fs::read_to_string(&values).unwrap();
    std::fs::write(
        &values,
        text.replace("greeting: hello", "greeting: unsigned"),
    )
    .unwrap();
    let (_, new_digest) = registry.push_with_digest(&f.cp, &repushed).unwrap();
    assert_ne!(new_digest, digest);
    let refused = with_reason(&f, "signed", "VerificationFailed").await;
    let message = message_of(&refused);
    assert!(
        message.contains(&new_digest),
        "names what was served: {message}"
    );
    assert!(message.contains("no cosign signature"), "{message}");
    assert_eq!(
        revisions(&f, "signed").await.len(),
        1,
        "the release untouched"
    );
    assert_eq!(helm_runs_on(&log, "signed"), 1, "only its install ran");
    let live: Api<ConfigMap> = Api::namespaced(f.cp.client(), NS);
    assert_eq!(
        live.get("signed-tiny").await.unwrap().data.unwrap()["greeting"],
        "hello"
    );
    operator.stop().await;
}

/// A private Sigstore-like authority: a CA, and leaf certificates naming an
/// OIDC identity the way Fulcio's do (SAN URI, issuer extension, code
/// signing).
struct PrivateRoot {
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl PrivateRoot {
    fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "test-fulcio");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        PrivateRoot {
            ca: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    /// `trusted_root.json` naming the CA and no transparency log.
    fn trusted_root(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [],
            "certificateAuthorities": [{
                "subject": { "commonName": "test-fulcio" },
                "certChain": { "certificates": [{ "rawBytes": STANDARD.encode(self.ca.der()) }] },
                "validFor": { "start": "2020-01-01T00:00:00Z" } }] }))
        .unwrap()
    }

    /// A leaf for `subject` from `issuer`: (certificate PEM, key PEM).
    fn leaf(&self, issuer: &str, subject: &str) -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![SanType::URI(subject.try_into().unwrap())];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // Fulcio's OIDC issuer (1.3.6.1.4.1.57264.1.8): a DER UTF8String.
        let mut value = vec![0x0c, issuer.len() as u8];
        value.extend_from_slice(issuer.as_bytes());
        params.custom_extensions = vec![CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 4, 1, 57264, 1, 8],
            value,
        )];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

#[tokio::test]
async fn a_keyless_signature_of_a_private_root_installs_for_its_identity_only() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let charts = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let registry = envtest::OciRegistry::start(&f.cp, false).await.unwrap();
    let (oci, digest) = registry
        .push_with_digest(&f.cp, &charts.join("tiny"))
        .unwrap();
    let root = PrivateRoot::new();
    let issuer = "https://token.actions.example";
    let subject = "https://git.example/org/app/.github/workflows/release.yml@refs/heads/main";
    let (cert, key) = root.leaf(issuer, subject);
    let dir = work_dir(&f, "cosign-keyless");
    std::fs::write(dir.join("leaf.pem"), &cert).unwrap();
    std::fs::write(dir.join("leaf-pkcs8.pem"), &key).unwrap();
    std::fs::write(dir.join("ca.pem"), root.ca.pem()).unwrap();
    cosign(
        &f,
        &dir,
        &[
            "import-key-pair",
            "--key",
            "leaf-pkcs8.pem",
            "--output-key-prefix",
            "leaf",
        ],
    );
    sign(
        &f,
        &dir,
        &oci,
        &digest,
        &[
            "--key",
            "leaf.key",
            "--certificate",
            "leaf.pem",
            "--certificate-chain",
            "ca.pem",
        ],
    );
    secret(
        &f,
        "private-root",
        &[("trusted_root.json", root.trusted_root())],
    )
    .await;

    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let chart = |subject: &str| {
        json!({ "oci": oci, "version": "0.1.0", "insecure": true,
        "verify": { "provider": "cosign", "trustedRootSecretRef": { "name": "private-root" },
                    "matchOIDCIdentity": [{ "issuer": "^https://token\\.actions\\.example$", "subject": subject }] } })
    };
    apply(
        &f,
        "keyless",
        json!({ "chart": chart("^https://git\\.example/org/.*$"), "interval": "1s" }),
    )
    .await;
    apply(
        &f,
        "stranger",
        json!({ "chart": chart("^https://git\\.example/other/.*$"), "interval": "1s" }),
    )
    .await;

    let installed = ready(&f, "keyless", "InstallSucceeded", 1).await;
    let verification = installed
        .status
        .unwrap()
        .verification
        .expect("status.verification");
    assert_eq!(verification.digest, digest);
    assert!(
        verification.signer.contains(subject),
        "{}",
        verification.signer
    );

    let refused = with_reason(&f, "stranger", "VerificationFailed").await;
    let message = message_of(&refused);
    assert!(
        message.contains("^https://git\\\\.example/other/.*$"),
        "names the expected subject: {message}"
    );
    assert!(
        message.contains(subject),
        "names the subject found: {message}"
    );
    assert_eq!(helm_runs_on(&log, "stranger"), 0, "never given to helm");
    operator.stop().await;
}
