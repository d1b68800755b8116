//! What `chart.verify` trusts, read from the Secrets it names in the
//! HelmApp's namespace (docs/verification.md): cosign's public keys, a
//! keyless identity and trust root, or helm's OpenPGP keyrings.

use std::collections::BTreeMap;

use apis::helmapp::{ChartVerification, GitVerifyMode, HelmApp, VerifyProvider};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};
use sha2::{Digest, Sha256};

use crate::delivery::source::git_verify::GitSigners;
use crate::delivery::source::verify::Trust;
use crate::delivery::source::verify::cosign::Signers;
use crate::delivery::source::verify::fulcio::IdentityMatch;
use crate::delivery::source::verify::keys::PublicKey;
use crate::delivery::source::verify::sigstore::{PUBLIC_GOOD, TrustedRoot};
use crate::lean::hex::hex;

/// The key of a trust root Secret.
pub const TRUSTED_ROOT_KEY: &str = "trusted_root.json";

/// What tells one app's trust from another's without reading a Secret:
/// part of the resolution cache's key, so a chart verified for one trust
/// is never served to an app of another.
pub fn scope(app: &HelmApp) -> String {
    match &app.spec.chart.verify {
        None => String::new(),
        Some(v) => format!(
            "verify:{}/{}",
            app.namespace().unwrap_or_default(),
            serde_json::to_string(v).unwrap_or_default()
        ),
    }
}

/// The trust of `app`'s `chart.verify` (`None`: not set). `Err` says what
/// is wrong, and whether reading again may help.
pub async fn trust(client: &kube::Client, app: &HelmApp) -> Result<Option<Trust>, (String, bool)> {
    let Some(verify) = &app.spec.chart.verify else {
        return Ok(None);
    };
    let ns = app.namespace().unwrap_or_default();
    let mut hasher = Sha256::new();
    hasher.update(verify.provider.as_str());
    let secret = match &verify.secret_ref {
        None => None,
        Some(r) => Some((
            r.name.clone(),
            read(client, &ns, "verify.secretRef", &r.name).await?,
        )),
    };
    let mut add = |name: &str, bytes: &[u8]| {
        hasher.update(name.as_bytes());
        hasher.update([0]);
        hasher.update(Sha256::digest(bytes));
    };
    let spec_error = |m: String| (m, false);
    let (signers, keyrings) = match verify.provider {
        VerifyProvider::Cosign => {
            let signers = match &secret {
                Some((name, data)) => {
                    let keys = data
                        .iter()
                        .filter(|(k, _)| k.ends_with(".pub"))
                        .map(|(k, v)| {
                            add(k, v);
                            PublicKey::from_pem(&format!("{ns}/{name}/{k}"), v)
                        })
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(spec_error)?;
                    if keys.is_empty() {
                        return Err(spec_error(format!(
                            "verify.secretRef {ns}/{name} has no key ending in .pub (a PEM public key)"
                        )));
                    }
                    Signers::Keys(keys)
                }
                None => keyless(client, &ns, verify, &mut add).await?,
            };
            (Some(signers), Vec::new())
        }
        VerifyProvider::Helm => {
            let Some((name, data)) = &secret else {
                return Err(spec_error(
                    "verify.provider helm needs secretRef: a Secret of OpenPGP keyrings (.gpg or .asc keys)".into(),
                ));
            };
            let rings: Vec<(String, Vec<u8>)> = data
                .iter()
                .filter(|(k, _)| k.ends_with(".gpg") || k.ends_with(".asc"))
                .map(|(k, v)| {
                    add(k, v);
                    (format!("{ns}/{name}/{k}"), v.clone())
                })
                .collect();
            if rings.is_empty() {
                return Err(spec_error(format!(
                    "verify.secretRef {ns}/{name} has no key ending in .gpg or .asc (an OpenPGP keyring)"
                )));
            }
            (None, rings)
        }
        VerifyProvider::Unknown => {
            return Err(spec_error("verify.provider must be cosign or helm".into()));
        }
    };
    Ok(Some(Trust {
        provider: verify.provider,
        signers,
        keyrings,
        fingerprint: hex(&hasher.finalize()),
    }))
}

/// The signers of `app`'s `chart.verify` for a `chart.git` chart, with the
/// mode (`None`: not set). `Err` as [`trust`].
pub async fn git_signers(
    client: &kube::Client,
    app: &HelmApp,
) -> Result<Option<(GitVerifyMode, GitSigners)>, (String, bool)> {
    let Some(verify) = &app.spec.chart.verify else {
        return Ok(None);
    };
    let ns = app.namespace().unwrap_or_default();
    let Some(r) = &verify.secret_ref else {
        return Err((
            "chart.verify of a chart.git needs secretRef: a Secret of OpenPGP keyrings (.gpg or .asc keys) or SSH public keys (.pub keys)".into(),
            false,
        ));
    };
    let data = read(client, &ns, "verify.secretRef", &r.name).await?;
    let signers =
        GitSigners::from_secret(&format!("{ns}/{}", r.name), &data).map_err(|m| (m, false))?;
    Ok(Some((verify.mode, signers)))
}

/// Keyless signers: `matchOIDCIdentity` against the private root of
/// `trustedRootSecretRef`, or the public Sigstore root.
async fn keyless(
    client: &kube::Client,
    ns: &str,
    verify: &ChartVerification,
    add: &mut impl FnMut(&str, &[u8]),
) -> Result<Signers, (String, bool)> {
    if verify.match_oidc_identity.is_empty() {
        return Err((
            "verify.provider cosign needs secretRef (public keys) or matchOIDCIdentity (keyless)"
                .into(),
            false,
        ));
    }
    let identities = verify
        .match_oidc_identity
        .iter()
        .map(|i| {
            add(&i.issuer, i.subject.as_bytes());
            IdentityMatch::new(&i.issuer, &i.subject)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| (m, false))?;
    let root = match &verify.trusted_root_secret_ref {
        None => TrustedRoot::parse("the public Sigstore root", PUBLIC_GOOD.as_bytes()),
        Some(r) => {
            let data = read(client, ns, "verify.trustedRootSecretRef", &r.name).await?;
            let name = format!("{ns}/{}", r.name);
            let json = data.get(TRUSTED_ROOT_KEY).ok_or_else(|| {
                (
                    format!("verify.trustedRootSecretRef {name} has no key {TRUSTED_ROOT_KEY}"),
                    false,
                )
            })?;
            add(TRUSTED_ROOT_KEY, json);
            TrustedRoot::parse(&name, json)
        }
    }
    .map_err(|m| (m, false))?;
    Ok(Signers::Keyless { identities, root })
}

/// A Secret's data (`field` names the reference in messages).
async fn read(
    client: &kube::Client,
    ns: &str,
    field: &str,
    name: &str,
) -> Result<BTreeMap<String, Vec<u8>>, (String, bool)> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = api
        .get_opt(name)
        .await
        .map_err(|e| (format!("{field} {ns}/{name}: {e}"), true))?
        .ok_or_else(|| (format!("{field} {ns}/{name} does not exist"), false))?;
    Ok(secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect())
}
