//! Reading a HelmApp's values: `valuesFrom` (and their cached digests),
//! SOPS-encrypted documents, merged in order. The chart is read by
//! `super::chart`; the hash of it all, and the other pure parts, are in
//! `decide/desired.rs`.

use apis::helmapp::HelmApp;
use base64::Engine;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::delivery::helm::values;
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::source;
use apis::helmapp::ValuesKind;
/// The cached digest of each `valuesFrom` key, in order (`None`: an
/// optional reference that is absent).
pub fn reference_digests(ctx: &Context, app: &HelmApp) -> Result<Vec<Option<String>>, String> {
    let ns = app.namespace().unwrap_or_default();
    app.spec
        .values_from
        .iter()
        .map(|r| {
            let key = format!("{ns}/{}", r.name);
            let keys = match r.kind {
                ValuesKind::Secret => ctx.secrets.get(&key).map(|s| s.keys.clone()),
                ValuesKind::ConfigMap => ctx.configmaps.get(&key).map(|c| c.keys.clone()),
                ValuesKind::Unknown => return Err(unknown_kind(&r.name)),
            };
            match keys.and_then(|mut k| k.remove(&r.key)) {
                Some(d) => Ok(Some(d)),
                None if r.optional => Ok(None),
                None => Err(format!(
                    "valuesFrom {} {key} key {}: not found (set optional: true if it may be absent)",
                    r.kind, r.key
                )),
            }
        })
        .collect()
}

/// The merged values (see [`merged_values`]), `files` being the
/// `valuesFiles` read with the chart.
pub async fn values(
    ctx: &Context,
    app: &HelmApp,
    files: &[source::ValuesFile],
) -> Result<Value, ValuesError> {
    merged_values_and_secrets(&ctx.client, app, files)
        .await
        .map(|(v, _)| v)
}

/// The merged values, read as `client`: `values`, `valuesFrom`,
/// `valuesBase64`, `set` (the operator's, and `kubectl hossted diff`'s with
/// the user's rights).
pub async fn merged_values(
    client: &kube::Client,
    app: &HelmApp,
    files: &[source::ValuesFile],
) -> Result<Value, ValuesError> {
    merged_values_and_secrets(client, app, files)
        .await
        .map(|(v, _)| v)
}

/// Why the values could not be had: `ValuesInvalid`, or
/// `DecryptionFailed` for a SOPS document that did not decrypt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValuesError {
    pub reason: Reason,
    pub message: String,
}

impl ValuesError {
    fn invalid(message: String) -> Self {
        ValuesError {
            reason: Reason::ValuesInvalid,
            message,
        }
    }
}

impl From<String> for ValuesError {
    fn from(message: String) -> Self {
        ValuesError::invalid(message)
    }
}

impl From<ValuesError> for String {
    fn from(e: ValuesError) -> String {
        e.message
    }
}

impl std::fmt::Display for ValuesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A values document: decrypted first when SOPS encrypted it, with the
/// keys of `spec.decryption` (read once, on the first such document).
/// Every string of a decrypted document is a secret (masked wherever
/// values are shown).
struct Documents<'a> {
    client: &'a kube::Client,
    app: &'a HelmApp,
    keys: Option<crate::delivery::helmapp::observe::sops::Keys>,
}

impl Documents<'_> {
    async fn parse(
        &mut self,
        what: &str,
        text: &str,
        secrets: &mut Vec<String>,
    ) -> Result<Value, ValuesError> {
        if !crate::delivery::helmapp::observe::sops::is_encrypted(text) {
            return values::parse_document(text)
                .map_err(|e| ValuesError::invalid(format!("{what}: {e}")));
        }
        let failed = |message: String| ValuesError {
            reason: Reason::DecryptionFailed,
            message: format!("{what}: {message}"),
        };
        if self.keys.is_none() {
            self.keys = Some(
                decryption_keys(self.client, self.app)
                    .await
                    .map_err(failed)?,
            );
        }
        let keys = self.keys.as_ref().expect("set above");
        let policy = match self
            .app
            .spec
            .decryption
            .as_ref()
            .is_some_and(|d| d.allow_unauthenticated)
        {
            true => crate::delivery::helmapp::observe::sops::Unauthenticated::Accepted,
            false => crate::delivery::helmapp::observe::sops::Unauthenticated::Refused,
        };
        let doc = crate::delivery::helmapp::observe::sops::decrypt(text, keys, policy)
            .map_err(|e| failed(e.to_string()))?;
        secrets.extend(values::secrets_of(&doc));
        Ok(doc)
    }
}

/// The age identities of `spec.decryption`'s Secret (every key ending in
/// `.agekey`).
async fn decryption_keys(
    client: &kube::Client,
    app: &HelmApp,
) -> Result<crate::delivery::helmapp::observe::sops::Keys, String> {
    let Some(decryption) = &app.spec.decryption else {
        return Err("it is encrypted with SOPS: set spec.decryption (provider sops, secretRef to the age keys)".into());
    };
    if decryption.provider != "sops" {
        return Err(format!(
            "decryption.provider {:?} is not supported: use sops",
            decryption.provider
        ));
    }
    let ns = app.namespace().unwrap_or_default();
    let name = &decryption.secret_ref.name;
    let secret = Api::<Secret>::namespaced(client.clone(), &ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("decryption Secret {ns}/{name}: {e}"))?
        .ok_or_else(|| format!("decryption Secret {ns}/{name} does not exist"))?;
    let data = secret.data.unwrap_or_default();
    let texts: Vec<String> = data
        .iter()
        .filter(|(k, _)| k.ends_with(".agekey"))
        .map(|(_, v)| String::from_utf8_lossy(&v.0).into_owned())
        .collect();
    crate::delivery::helmapp::observe::sops::Keys::parse(texts.iter().map(String::as_str))
        .map_err(|e| format!("decryption Secret {ns}/{name} (keys ending in .agekey): {e}"))
}

/// [`merged_values`], and every string that came from a `valuesFrom`
/// Secret: what anything shown to a person masks (`kubectl hossted diff`).
pub async fn merged_values_and_secrets(
    client: &kube::Client,
    app: &HelmApp,
    files: &[source::ValuesFile],
) -> Result<(Value, Vec<String>), ValuesError> {
    let mut from_secrets = Vec::new();
    let spec = &app.spec;
    values::check_bounds(spec)?;
    let ns = app.namespace().unwrap_or_default();
    let mut merged = json!({});
    let mut documents = Documents {
        client,
        app,
        keys: None,
    };
    for file in files {
        let Some(content) = &file.content else {
            continue;
        };
        let what = format!("valuesFiles {}", file.path);
        let text = String::from_utf8_lossy(content);
        let doc = documents.parse(&what, &text, &mut from_secrets).await?;
        values::merge(&mut merged, doc);
    }
    let inline = match &spec.values {
        Some(v) if !v.is_object() => {
            return Err(ValuesError::invalid("spec.values must be a mapping".into()));
        }
        v => v.as_ref(),
    };
    if !spec.inline_values_last
        && let Some(v) = inline
    {
        values::merge(&mut merged, v.clone());
    }
    for r in &spec.values_from {
        let what = format!("valuesFrom {} {}/{} key {}", r.kind, ns, r.name, r.key);
        if r.kind == ValuesKind::Unknown {
            return Err(ValuesError::invalid(unknown_kind(&r.name)));
        }
        let text = values_from_key(client, &ns, r)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        let secret = r.kind == ValuesKind::Secret;
        match text {
            Some(t) if !r.target_path.is_empty() => {
                if secret {
                    from_secrets.push(t.trim().to_string());
                }
                values::set_at(&r.target_path, &t, r.literal, &mut merged)
                    .map_err(|e| format!("{what} targetPath: {e}"))?
            }
            Some(t) => {
                let doc = documents.parse(&what, &t, &mut from_secrets).await?;
                if secret {
                    from_secrets.extend(values::secrets_of(&doc));
                }
                values::merge(&mut merged, doc)
            }
            None if r.optional => {}
            None => {
                return Err(ValuesError::invalid(format!(
                    "{what}: not found (set optional: true if it may be absent)"
                )));
            }
        }
    }
    if spec.inline_values_last
        && let Some(v) = inline
    {
        // Flux's order: inline values over what valuesFrom gave.
        values::merge(&mut merged, v.clone());
    }
    if !spec.values_base64.is_empty() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(spec.values_base64.trim())
            .map_err(|e| format!("valuesBase64 is not base64: {e}"))?;
        let doc = values::parse_document(&String::from_utf8_lossy(&bytes))
            .map_err(|e| format!("valuesBase64: {e}"))?;
        values::merge(&mut merged, doc);
    }
    for s in &spec.set {
        values::apply_set(s, &mut merged).map_err(|e| format!("set: {e}"))?;
    }
    Ok((merged, from_secrets))
}

/// The key a `valuesFrom` entry names, read as `client` (`None`: the
/// object or the key is not there; a kind that is neither is refused by
/// the caller before).
async fn values_from_key(
    client: &kube::Client,
    ns: &str,
    r: &apis::helmapp::ValuesReference,
) -> Result<Option<String>, String> {
    Ok(match r.kind {
        ValuesKind::Secret => {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            let secret = api.get_opt(&r.name).await.map_err(|e| e.to_string())?;
            secret
                .and_then(|s| s.data)
                .and_then(|mut d| d.remove(&r.key))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        }
        ValuesKind::ConfigMap => {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            let map = api.get_opt(&r.name).await.map_err(|e| e.to_string())?;
            map.and_then(|c| c.data).and_then(|mut d| d.remove(&r.key))
        }
        ValuesKind::Unknown => None,
    })
}

fn unknown_kind(name: &str) -> String {
    format!("valuesFrom {name}: kind must be Secret or ConfigMap")
}
