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
use rcgen::KeyPair;

use super::*;

/// cosign from the test assets, in `dir`.
fn cosign(f: &Fixture, dir: &Path, args: &[&str]) {
    envtest::signing::cosign(&f.cp, dir, args).unwrap();
}

/// Signs with cosign 3 (a Sigstore bundle), offline.
fn sign(f: &Fixture, dir: &Path, oci: &str, digest: &str, extra: &[&str]) {
    envtest::signing::cosign_sign(&f.cp, dir, oci, digest, extra).unwrap();
}

fn work_dir(f: &Fixture, name: &str) -> PathBuf {
    let dir = f.cp.dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(super) async fn secret(f: &Fixture, name: &str, data: &[(&str, Vec<u8>)]) {
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
    helm_calls(log).iter().filter(|c| c.on(release)).count()
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
    // First without verification: the chart is in the operator's cache
    // before any app asks for a signature.
    let unverified = json!({ "oci": oci, "version": "0.1.0", "insecure": true });
    apply(&f, "plain", json!({ "chart": unverified })).await;
    ready(&f, "plain", "InstallSucceeded", 1).await;
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
    // A second app of the same digest and trust: not verified again, also
    // as both re-resolve every second.
    apply(
        &f,
        "second",
        json!({ "chart": chart("cosign-pub"), "interval": "1s" }),
    )
    .await;
    ready(&f, "second", "InstallSucceeded", 1).await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        sample(
            &operator.scrape(),
            "hossted_chart_verifications_total{provider=\"cosign\",result=\"verified\"}"
        ),
        Some(1.0),
        "verified once for two apps"
    );
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

    // `kubectl hossted verify`: what was verified, against what, when.
    let plugins = crate::plugin::plugin_dir(&f);
    let (ok, out, err) =
        crate::plugin::kubectl_hossted(&f, &plugins, &["verify", "-n", NS, "signed"]).await;
    assert!(ok, "verified: exit 0: {out}{err}");
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
    };
    assert_eq!(field(&out, "verified:"), Some(digest.clone()), "{out}");
    assert_eq!(field(&out, "signer:"), Some(verification.signer.clone()));
    assert_eq!(field(&out, "at:"), Some(verification.verified_at.clone()));

    // In the cache already, and refused all the same.
    let refused = with_reason(&f, "wrongkey", "VerificationFailed").await;
    let message = message_of(&refused);
    assert!(
        message.contains(&format!("{NS}/other-pub/cosign.pub")),
        "names the key expected: {message}"
    );
    assert!(message.contains(&digest), "names the artifact: {message}");
    assert_eq!(helm_runs_on(&log, "wrongkey"), 0, "never given to helm");
    let (ok, out, _) =
        crate::plugin::kubectl_hossted(&f, &plugins, &["verify", "-n", NS, "wrongkey"]).await;
    assert!(!ok, "refused: exit 1: {out}");
    assert_eq!(field(&out, "refused:"), Some(message.clone()));
    an_event(&f, NS, "wrongkey", "VerificationFailed").await;

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

#[tokio::test]
async fn a_keyless_signature_of_a_private_root_installs_for_its_identity_only() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let charts = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let registry = envtest::OciRegistry::start(&f.cp, false).await.unwrap();
    let (oci, digest) = registry
        .push_with_digest(&f.cp, &charts.join("tiny"))
        .unwrap();
    let root = envtest::signing::PrivateSigstore::new().unwrap();
    let issuer = "https://token.actions.example";
    let subject = "https://git.example/org/app/.github/workflows/release.yml@refs/heads/main";
    let dir = work_dir(&f, "cosign-keyless");
    root.signer(&f.cp, &dir, issuer, subject).unwrap();
    sign(&f, &dir, &oci, &digest, envtest::signing::KEYLESS_FLAGS);
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

/// The older form (cosign 2's `sign`, `cosign attach signature`): a
/// `sha256-<digest>.sig` manifest whose layer is the signed payload.
#[tokio::test]
async fn a_signature_manifest_of_the_older_form_verifies_too() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let charts = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let registry = envtest::OciRegistry::start(&f.cp, false).await.unwrap();
    let (oci, digest) = registry
        .push_with_digest(&f.cp, &charts.join("tiny"))
        .unwrap();
    let reference = format!("{}@{digest}", oci.trim_start_matches("oci://"));
    let dir = work_dir(&f, "cosign-attach");
    cosign(&f, &dir, &["generate-key-pair"]);
    cosign(
        &f,
        &dir,
        &["signing-config", "create", "--out", "signing-config.json"],
    );
    // The payload as cosign makes it, signed by cosign (the signature read
    // back from its bundle), attached by cosign.
    let binary = f.cp.assets().binary("cosign").unwrap();
    let payload = Command::new(&binary)
        .args(["generate", &reference])
        .env("HOME", &dir)
        .output()
        .unwrap();
    assert!(
        payload.status.success(),
        "{}",
        String::from_utf8_lossy(&payload.stderr)
    );
    std::fs::write(dir.join("payload.json"), &payload.stdout).unwrap();
    cosign(
        &f,
        &dir,
        &[
            "sign-blob",
            "--key",
            "cosign.key",
            "--signing-config",
            "signing-config.json",
            "--bundle",
            "blob.bundle",
            "-y",
            "payload.json",
        ],
    );
    let bundle: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("blob.bundle")).unwrap()).unwrap();
    let signature = bundle["messageSignature"]["signature"].as_str().unwrap();
    std::fs::write(dir.join("payload.sig"), signature).unwrap();
    cosign(
        &f,
        &dir,
        &[
            "attach",
            "signature",
            "--allow-http-registry",
            "--payload",
            "payload.json",
            "--signature",
            "payload.sig",
            &reference,
        ],
    );
    secret(
        &f,
        "cosign-pub",
        &[("cosign.pub", std::fs::read(dir.join("cosign.pub")).unwrap())],
    )
    .await;

    let operator = f.start_delivery().await;
    apply(
        &f,
        "attached",
        json!({ "chart": { "oci": oci, "version": "0.1.0", "insecure": true,
        "verify": { "provider": "cosign", "secretRef": { "name": "cosign-pub" } } } }),
    )
    .await;
    let installed = ready(&f, "attached", "InstallSucceeded", 1).await;
    let verification = installed
        .status
        .unwrap()
        .verification
        .expect("status.verification");
    assert_eq!(verification.digest, digest);
    assert!(
        verification
            .signer
            .starts_with(&format!("key {NS}/cosign-pub/cosign.pub"))
    );
    operator.stop().await;
}

/// gpg's home with one unprotected RSA signing key; its secret and public
/// keyrings in `dir` (`secring.gpg`, `pubring.gpg`).
pub(super) fn gpg_keyrings(dir: &Path) {
    let home = dir.join("gnupg");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let gpg = |args: &[&str]| {
        let out = Command::new("gpg")
            .args(["--batch", "--homedir"])
            .arg(&home)
            .args(["--pinentry-mode", "loopback", "--passphrase", ""])
            .args(args)
            .output()
            .expect("gpg (Debian's gnupg) runs");
        assert!(
            out.status.success(),
            "gpg {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    gpg(&[
        "--quick-gen-key",
        "Chart Signer <signer@example.com>",
        "rsa3072",
        "sign",
        "never",
    ]);
    std::fs::write(dir.join("secring.gpg"), gpg(&["--export-secret-keys"])).unwrap();
    std::fs::write(dir.join("pubring.gpg"), gpg(&["--export"])).unwrap();
}

#[tokio::test]
async fn a_prov_signed_chart_installs_and_a_changed_missing_or_forged_prov_is_refused() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts/tiny");
    let dir = work_dir(&f, "gpg");
    gpg_keyrings(&dir);
    let secring = dir.join("secring.gpg");
    let sign = [
        "--sign",
        "--key",
        "Chart Signer",
        "--keyring",
        secring.to_str().unwrap(),
    ];
    let signed = envtest::ChartRepo::start_packaged_with(&f.cp, &[&tiny], None, &sign)
        .await
        .unwrap();
    assert!(
        signed.dir().join("tiny-0.1.0.tgz.prov").exists(),
        "helm wrote the .prov"
    );
    // Another chart for these two: a digest verified once is verified
    // for every app of the same trust, whichever repository served it.
    let web = tiny.with_file_name("web");
    let unsigned = envtest::ChartRepo::start(&f.cp, &[&web], None)
        .await
        .unwrap();
    let forged = envtest::ChartRepo::start(&f.cp, &[&web], None)
        .await
        .unwrap();
    std::fs::write(
        forged.dir().join("web-1.2.0.tgz.prov"),
        b"files:\n  web-1.2.0.tgz: sha256:00\n",
    )
    .unwrap();
    secret(
        &f,
        "keyring",
        &[(
            "pubring.gpg",
            std::fs::read(dir.join("pubring.gpg")).unwrap(),
        )],
    )
    .await;

    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let chart = |repo: &str| {
        let (name, version) = if repo == signed.url() {
            ("tiny", "0.1.0")
        } else {
            ("web", "1.2.0")
        };
        json!({ "repo": repo, "name": name, "version": version,
        "verify": { "provider": "helm", "secretRef": { "name": "keyring" } } })
    };
    apply(
        &f,
        "provenance",
        json!({ "chart": chart(signed.url()), "interval": "1s" }),
    )
    .await;
    apply(&f, "noprov", json!({ "chart": chart(unsigned.url()) })).await;
    apply(&f, "forged", json!({ "chart": chart(forged.url()) })).await;

    let installed = ready(&f, "provenance", "InstallSucceeded", 1).await;
    let verification = installed
        .status
        .unwrap()
        .verification
        .expect("status.verification");
    assert_eq!(verification.provider, "helm");
    assert!(
        verification
            .signer
            .starts_with(&format!("key {NS}/keyring/pubring.gpg (")),
        "{}",
        verification.signer
    );

    let message = message_of(&with_reason(&f, "noprov", "VerificationFailed").await);
    assert!(message.contains("no provenance file"), "{message}");
    let message = message_of(&with_reason(&f, "forged", "VerificationFailed").await);
    assert!(
        message.contains("not an OpenPGP clear-signed document"),
        "{message}"
    );
    assert_eq!(
        helm_runs_on(&log, "noprov") + helm_runs_on(&log, "forged"),
        0,
        "never given to helm"
    );

    // One byte of the archive changed (gzip's mtime: still a valid
    // archive), the index made to agree: the .prov no longer does.
    let archive = signed.dir().join("tiny-0.1.0.tgz");
    let mut bytes = std::fs::read(&archive).unwrap();
    bytes[4] ^= 0x01;
    std::fs::write(&archive, &bytes).unwrap();
    signed.reindex(&f.cp).unwrap();
    let flipped = format!("sha256:{}", sha256_hex(&bytes));
    let message = message_of(&with_reason(&f, "provenance", "VerificationFailed").await);
    assert!(
        message.contains(&flipped),
        "names the archive's digest: {message}"
    );
    assert_eq!(
        revisions(&f, "provenance").await.len(),
        1,
        "the release untouched"
    );
    assert_eq!(helm_runs_on(&log, "provenance"), 1, "only its install ran");
    operator.stop().await;
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Hostile signatures: a payload declared 64 MiB is refused unread; a
/// chain of 1,000 certificates is refused by its bound; either way a
/// clear reason, and the operator goes on with the others.
#[tokio::test]
async fn hostile_signatures_are_refused_by_their_bounds_and_the_operator_goes_on() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let hostile = envtest::HostileServer::start().await.unwrap();
    let signature = json!({ "dev.cosignproject.cosign/signature": "AAAA" });
    let (huge, _) = hostile.signed_oci_chart(
        "charts/huge",
        "1.0.0",
        None,
        Some(64 << 20),
        signature.clone(),
    );
    let chain = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n".repeat(1000);
    let mut deep_annotations = signature.clone();
    deep_annotations["dev.sigstore.cosign/chain"] = json!(chain);
    let (deep, _) = hostile.signed_oci_chart("charts/deep", "1.0.0", None, None, deep_annotations);
    let key = KeyPair::generate().unwrap();
    secret(
        &f,
        "cosign-pub",
        &[("cosign.pub", key.public_key_pem().into_bytes())],
    )
    .await;

    let operator = f.start_delivery().await;
    let verify = json!({ "provider": "cosign", "secretRef": { "name": "cosign-pub" } });
    for (name, oci) in [("huge", &huge), ("deep", &deep)] {
        apply(&f, name, json!({ "chart": { "oci": oci, "version": "1.0.0", "insecure": true, "verify": verify } })).await;
    }
    let message = message_of(&with_reason(&f, "huge", "VerificationFailed").await);
    assert!(
        message.contains("a signature payload of 67108864 bytes, over the 65536-byte bound"),
        "{message}"
    );
    assert!(
        !hostile
            .seen()
            .iter()
            .any(|s| s.path.starts_with("/v2/charts/huge/blobs/")),
        "the payload was never asked for"
    );
    let message = message_of(&with_reason(&f, "deep", "VerificationFailed").await);
    assert!(
        message.contains("a certificate chain of 1000 certificates, over the bound of 10"),
        "{message}"
    );
    apply(&f, "calm", json!({ "chart": { "path": "tiny" } })).await;
    ready(&f, "calm", "InstallSucceeded", 1).await;
    operator.stop().await;
}
