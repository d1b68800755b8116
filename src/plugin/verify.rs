//! `kubectl hossted verify -n NS NAME`: what the operator verified of a
//! HelmApp's chart, against what, and when (`status.verification`), beside
//! what `chart.verify` asks for. Exit status 0 when the installed chart was
//! verified under the current spec and no verification fails now; 1
//! otherwise (not asked for, not yet, or refused).

use apis::helmapp::{ChartVerification, HelmApp, VerifyProvider};
use kube::Api;

use super::args::namespace_of;
use super::ask::ready_of;

/// `kubectl hossted verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The HelmApp's namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// The HelmApp.
    pub name: String,
}

/// Prints the report; `Ok(true)`: verified (exit 0).
pub async fn run(client: kube::Client, a: &VerifyArgs) -> Result<bool, String> {
    let ns = namespace_of(&client, a.namespace.as_ref());
    let api: Api<HelmApp> = Api::namespaced(client, &ns);
    let app = api
        .get_opt(&a.name)
        .await
        .map_err(|e| format!("HelmApp {ns}/{}: {e}", a.name))?
        .ok_or_else(|| format!("HelmApp {ns}/{} does not exist", a.name))?;
    let (text, verified) = report(&app);
    print!("{text}");
    Ok(verified)
}

/// The report of `app`, a `field: value` line each, and whether it is
/// verified.
pub fn report(app: &HelmApp) -> (String, bool) {
    let mut out = String::new();
    let mut line = |field: &str, value: &str| out.push_str(&format!("{field:<10} {value}\n"));
    let chart = &app.spec.chart;
    let source = [&chart.oci, &chart.repo, &chart.path]
        .into_iter()
        .find(|s| !s.is_empty())
        .cloned()
        .unwrap_or_default();
    line(
        "chart:",
        &format!("{source} {} {}", chart.name, chart.version).replace("  ", " "),
    );
    let status = app.status.clone().unwrap_or_default();
    let (ready, reason, message) = ready_of(app);
    let Some(verify) = &chart.verify else {
        line("requires:", "nothing (chart.verify is not set)");
        line("installed:", or_dash(&status.chart_digest));
        return (out, false);
    };
    line("requires:", &requirement(verify));
    match &status.verification {
        Some(v) => {
            line("verified:", &v.digest);
            line("signer:", &v.signer);
            line("at:", &v.verified_at);
        }
        None => line("verified:", "- (no verified chart installed yet)"),
    }
    line("installed:", or_dash(&status.chart_digest));
    line("ready:", &format!("{ready} {reason}"));
    let failing = reason == "VerificationFailed";
    if failing {
        line("refused:", &message);
    }
    let verified = status.verification.is_some() && !failing;
    (out, verified)
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

/// What `chart.verify` trusts, in words.
fn requirement(v: &ChartVerification) -> String {
    let secret = |r: &Option<apis::helmapp::LocalObjectReference>| {
        r.as_ref()
            .map(|r| r.name.clone())
            .unwrap_or_else(|| "-".into())
    };
    match (v.provider, &v.secret_ref) {
        (VerifyProvider::Cosign, Some(_)) => {
            format!(
                "cosign signature by a key of Secret {} (*.pub)",
                secret(&v.secret_ref)
            )
        }
        (VerifyProvider::Cosign, None) => format!(
            "cosign keyless signature of {} by {}",
            match &v.trusted_root_secret_ref {
                Some(r) => format!("the trust root of Secret {}", r.name),
                None => "the public Sigstore root".into(),
            },
            v.match_oidc_identity
                .iter()
                .map(|i| format!("issuer {:?} subject {:?}", i.issuer, i.subject))
                .collect::<Vec<_>>()
                .join(" or ")
        ),
        (VerifyProvider::Helm, _) => format!(
            ".prov signed by a key of the keyrings of Secret {} (*.gpg, *.asc)",
            secret(&v.secret_ref)
        ),
        (VerifyProvider::Unknown, _) => "an unknown provider".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::helmapp::{HelmAppStatus, VerificationStatus};
    use serde_json::json;

    fn app(verify: serde_json::Value, status: serde_json::Value) -> HelmApp {
        serde_json::from_value(json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": "web", "namespace": "apps" },
            "spec": { "chart": { "oci": "oci://r/charts/web", "version": "1.0.0", "verify": verify } },
            "status": status }))
        .unwrap()
    }

    fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
        text.lines()
            .find_map(|l| l.strip_prefix(name).map(str::trim))
    }

    #[test]
    fn a_verified_app_names_digest_signer_and_time() {
        let status = HelmAppStatus {
            chart_digest: "sha256:aa".into(),
            verification: Some(VerificationStatus {
                provider: "cosign".into(),
                digest: "sha256:bb".into(),
                signer: "key apps/pub/cosign.pub (sha256:cc)".into(),
                verified_at: "2026-11-26T20:00:00Z".into(),
            }),
            ..Default::default()
        };
        let a = app(
            json!({ "provider": "cosign", "secretRef": { "name": "pub" } }),
            serde_json::to_value(status).unwrap(),
        );
        let (text, verified) = report(&a);
        assert!(verified, "{text}");
        assert_eq!(field(&text, "verified:"), Some("sha256:bb"));
        assert_eq!(
            field(&text, "signer:"),
            Some("key apps/pub/cosign.pub (sha256:cc)")
        );
        assert_eq!(field(&text, "at:"), Some("2026-11-26T20:00:00Z"));
        assert_eq!(
            field(&text, "requires:"),
            Some("cosign signature by a key of Secret pub (*.pub)")
        );
    }

    #[test]
    fn a_refused_or_unverified_app_exits_1() {
        let refused = app(
            json!({ "provider": "cosign", "matchOIDCIdentity": [{ "issuer": "i", "subject": "s" }] }),
            json!({ "conditions": [{ "type": "Ready", "status": "False", "reason": "VerificationFailed",
                "message": "expected x", "lastTransitionTime": "2026-11-26T20:00:00Z" }] }),
        );
        let (text, verified) = report(&refused);
        assert!(!verified);
        assert_eq!(field(&text, "refused:"), Some("expected x"));
        assert!(
            field(&text, "requires:")
                .unwrap()
                .contains("the public Sigstore root")
        );
        let mut plain = refused.clone();
        plain.spec.chart.verify = None;
        let (text, verified) = report(&plain);
        assert!(!verified);
        assert_eq!(
            field(&text, "requires:"),
            Some("nothing (chart.verify is not set)")
        );
    }
}
