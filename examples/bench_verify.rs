//! The cost of verifying charts (issue 37, docs/verification.md), on a
//! real control plane with the release operator binary and real helm: apply
//! → Released of an OCI chart pushed unsigned, signed with a cosign key,
//! signed keyless against a private trust root (no network), and a second
//! app of a digest already verified — interleaved, each kind once a round,
//! every app its own freshly pushed version (a new digest, so each check is
//! a first one). Next to it, the operator's own measure of each check
//! (`hossted_chart_verification_seconds`: the signatures fetched and
//! verified) and how many checks ran.
//!
//! Prints one JSON line, and with `--markdown FILE` the report section.
//! `hack/bench-verify.sh` runs it and writes bench/REPORT.md.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use apis::helmapp::HelmApp;
use common::{Operator, delivery_cluster, percentile};
use envtest::signing::{KEYLESS_FLAGS, PrivateSigstore, cosign, cosign_sign};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

const NS: &str = "verify";
const ISSUER: &str = "https://token.actions.example";
const SUBJECT: &str = "https://git.example/org/app/.github/workflows/release.yml@refs/heads/main";

/// `examples/charts/tiny` at `version`, in `dir`.
fn tiny_at(dir: &Path, version: &str) -> PathBuf {
    let to = dir.join(format!("tiny-{version}"));
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts/tiny");
    let ok = Command::new("cp").arg("-r").arg(&from).arg(&to).status();
    assert!(ok.is_ok_and(|s| s.success()), "cp -r {}", from.display());
    let chart = to.join("Chart.yaml");
    let text = std::fs::read_to_string(&chart).expect("Chart.yaml");
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("version:") {
                format!("version: {version}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&chart, text + "\n").expect("Chart.yaml");
    to
}

/// Seconds from create to Released (revision 1, Ready), polled every 10 ms.
async fn apply_to_released(api: &Api<HelmApp>, name: &str, chart: serde_json::Value) -> f64 {
    let app: HelmApp = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": name, "namespace": NS }, "spec": { "chart": chart } }))
    .expect("app");
    let t = Instant::now();
    api.create(&PostParams::default(), &app)
        .await
        .expect("create");
    loop {
        if let Ok(Some(a)) = api.get_opt(name).await
            && let Some(s) = &a.status
        {
            let ready = s
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if ready && s.revision == 1 {
                return t.elapsed().as_secs_f64();
            }
            if let Some(c) = s
                .conditions
                .iter()
                .find(|c| c.reason == "VerificationFailed")
            {
                panic!("{name}: {}", c.message);
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "{name} not Released in 120 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn secret(client: &kube::Client, name: &str, key: &str, value: Vec<u8>) {
    use base64::Engine;
    let value = base64::engine::general_purpose::STANDARD.encode(value);
    let s: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": { "name": name, "namespace": NS },
        "data": { key: value } }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &s)
        .await
        .expect("secret");
}

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    percentile(&v, 50.0)
}

#[tokio::main]
async fn main() {
    let mut rounds = 10usize;
    let mut markdown: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--rounds" => rounds = v.parse().unwrap_or(rounds),
            "--markdown" => markdown = Some(v.into()),
            other => eprintln!("bench-verify: ignoring {other}"),
        }
    }
    let bin = std::env::var("HOSSTED_OPERATOR_BIN")
        .unwrap_or_else(|_| "target/release/hossted-operator".into());
    let dir = std::env::temp_dir().join(format!("bench-verify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (cp, _repo) = delivery_cluster("tiny").await;
    let client = cp.client();
    let registry = envtest::OciRegistry::start(&cp, false)
        .await
        .expect("registry");
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NS } })).expect("ns");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    cosign(&cp, &dir, &["generate-key-pair"]).expect("cosign key");
    let root = PrivateSigstore::new().expect("authority");
    root.signer(&cp, &dir, ISSUER, SUBJECT)
        .expect("keyless signer");
    secret(
        &client,
        "cosign-pub",
        "cosign.pub",
        std::fs::read(dir.join("cosign.pub")).expect("pub"),
    )
    .await;
    secret(
        &client,
        "private-root",
        "trusted_root.json",
        root.trusted_root(),
    )
    .await;

    let mut cmd = Command::new(&bin);
    cmd.env("KUBECONFIG", cp.kubeconfig_path())
        .env("RUST_LOG", "warn")
        .args([
            "run",
            "--controllers",
            "delivery",
            "--max-concurrent-helm",
            "4",
        ])
        .arg("--privileged-namespaces=*")
        .arg("--helm-binary")
        .arg(cp.helm_binary())
        .arg("--work-dir")
        .arg(dir.join("work"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("operator.log")).expect("log"));
    let op = Operator::spawn(cmd);
    op.ready().await;
    let api: Api<HelmApp> = Api::namespaced(client.clone(), NS);
    let key = json!({ "provider": "cosign", "secretRef": { "name": "cosign-pub" } });
    let keyless = json!({ "provider": "cosign", "trustedRootSecretRef": { "name": "private-root" },
        "matchOIDCIdentity": [{ "issuer": "^https://token\\.actions\\.example$", "subject": "^https://git\\.example/org/.*$" }] });
    let (mut unsigned, mut keyed, mut keyless_t, mut again) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    eprintln!(
        "bench-verify: {rounds} rounds after one warm-up, each: unsigned, key, keyless, a second app of the key-signed digest"
    );
    // Round 0 warms up (the CRD's watch cache, helm's first run): not counted.
    for i in 0..=rounds {
        let push = |k: usize| {
            let chart = tiny_at(&dir, &format!("1.{i}.{k}"));
            registry.push_with_digest(&cp, &chart).expect("push")
        };
        let (oci, _) = push(0);
        let (_, key_digest) = push(1);
        cosign_sign(&cp, &dir, &oci, &key_digest, &["--key", "cosign.key"]).expect("sign");
        let (_, keyless_digest) = push(2);
        cosign_sign(&cp, &dir, &oci, &keyless_digest, KEYLESS_FLAGS).expect("sign keyless");
        let chart = |k: usize, verify: Option<&serde_json::Value>| {
            let mut c = json!({ "oci": oci, "version": format!("1.{i}.{k}"), "insecure": true });
            if let Some(v) = verify {
                c["verify"] = v.clone();
            }
            c
        };
        let u = apply_to_released(&api, &format!("unsigned-{i}"), chart(0, None)).await;
        let k = apply_to_released(&api, &format!("key-{i}"), chart(1, Some(&key))).await;
        let l = apply_to_released(&api, &format!("keyless-{i}"), chart(2, Some(&keyless))).await;
        let a = apply_to_released(&api, &format!("again-{i}"), chart(1, Some(&key))).await;
        if i > 0 {
            unsigned.push(u);
            keyed.push(k);
            keyless_t.push(l);
            again.push(a);
        }
    }
    let metric = |s: &'static str| op.metric(s);
    let check = |kind: &'static str| async move {
        let sum = metric(if kind == "key" {
            "hossted_chart_verification_seconds_sum{signers=\"key\"}"
        } else {
            "hossted_chart_verification_seconds_sum{signers=\"keyless\"}"
        })
        .await;
        let count = metric(if kind == "key" {
            "hossted_chart_verification_seconds_count{signers=\"key\"}"
        } else {
            "hossted_chart_verification_seconds_count{signers=\"keyless\"}"
        })
        .await;
        (sum / count.max(1.0), count)
    };
    let (key_mean, key_checks) = check("key").await;
    let (keyless_mean, keyless_checks) = check("keyless").await;
    op.stop();
    let (u, k, l, a) = (p50(unsigned), p50(keyed), p50(keyless_t), p50(again));
    let ms = |s: f64| s * 1000.0;
    let out = json!({
        "rounds": rounds,
        "apply_to_released_p50_ms": { "unsigned": ms(u), "key": ms(k), "keyless": ms(l), "again": ms(a) },
        "added_p50_ms": { "key": ms(k - u), "keyless": ms(l - u), "again": ms(a - u) },
        "ratio_to_unsigned": { "key": k / u, "keyless": l / u, "again": a / u },
        "check_mean_ms": { "key": ms(key_mean), "keyless": ms(keyless_mean) },
        "checks": { "key": key_checks, "keyless": keyless_checks, "apps_verified": 3 * (rounds + 1) },
    });
    println!("{out}");
    if let Some(path) = markdown {
        let md = format!(
            "Apply → Released p50 over {rounds} interleaved rounds (one warm-up not counted), each app a freshly pushed OCI chart version, same run, release binary, real helm (`hack/bench-verify.sh`):\n\n\
| chart | apply → Released p50 | added vs unsigned | ratio | the check itself (mean, `hossted_chart_verification_seconds`) |\n|---|---|---|---|---|\n\
| unsigned | {:.0} ms | — | 1.00× | — |\n\
| cosign key (bundle, `secretRef`) | {:.0} ms | {:+.0} ms | {:.2}× | {:.1} ms |\n\
| cosign keyless (private trusted root, no log) | {:.0} ms | {:+.0} ms | {:.2}× | {:.1} ms |\n\
| a second app of a verified digest | {:.0} ms | {:+.0} ms | {:.2}× | not run |\n\n\
Signature checks run: {key_checks} with a key, {keyless_checks} keyless, for {} verifying apps: the second app of each digest ran none.\n",
            ms(u),
            ms(k),
            ms(k - u),
            k / u,
            ms(key_mean),
            ms(l),
            ms(l - u),
            l / u,
            ms(keyless_mean),
            ms(a),
            ms(a - u),
            a / u,
            3 * (rounds + 1),
        );
        std::fs::write(path, md).expect("markdown");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
