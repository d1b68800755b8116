//! What a HelmApp page reads beside the HelmApp, per request and with the
//! user's rights: its Events, each inventory object's kstatus, the drifted
//! fields (expected from the release's manifest, live from the object)
//! and the values helm received — every Secret value masked.

use std::collections::HashMap;

use apis::helmapp::HelmApp;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, ResourceExt};
use parking_lot::Mutex;
use serde_json::Value;

use crate::delivery::helm::values::Redactor;
use crate::delivery::helmapp::Target;
use crate::delivery::helmapp::decide::kstatus::{self, Readiness};

/// Most inventory objects read for one page (the rest: `Unknown`).
const MAX_OBJECTS: usize = 200;
/// What replaces a masked value.
pub const MASKED: &str = "[masked]";

/// One inventory object and its kstatus.
pub struct ObjectHealth {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// kstatus's words: `Current`, `InProgress`, `Failed`, `NotFound`,
    /// `Unknown`.
    pub status: &'static str,
    pub detail: String,
}

/// One drifted field.
pub struct DriftRow {
    pub object: String,
    /// Its JSON pointer.
    pub field: String,
    pub expected: String,
    pub live: String,
}

/// Discovery answers, kept for the life of the UI.
#[derive(Default)]
pub struct Kinds(Mutex<HashMap<(String, String), ApiResource>>);

impl Kinds {
    async fn resource(
        &self,
        client: &kube::Client,
        api_version: &str,
        kind: &str,
    ) -> Result<ApiResource, String> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(r) = self.0.lock().get(&key) {
            return Ok(r.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, _) = kube::discovery::pinned_kind(client, &gvk)
            .await
            .map_err(|e| e.to_string())?;
        self.0.lock().insert(key, resource.clone());
        Ok(resource)
    }

    /// An object as the viewer's client reads it (`None`: not there), its
    /// resource found by discovery once.
    pub async fn get(
        &self,
        client: &kube::Client,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, String> {
        let ar = self.resource(client, api_version, kind).await?;
        let api: Api<DynamicObject> = if namespace.is_empty() {
            Api::all_with(client.clone(), &ar)
        } else {
            Api::namespaced_with(client.clone(), namespace, &ar)
        };
        let object = api.get_opt(name).await.map_err(|e| e.to_string())?;
        object
            .map(|o| serde_json::to_value(o).map_err(|e| e.to_string()))
            .transpose()
    }
}

/// The HelmApp's Events, newest first (at most 50).
pub async fn events(client: &kube::Client, app: &HelmApp) -> Result<Vec<Event>, String> {
    let ns = app.namespace().unwrap_or_default();
    let fields = format!(
        "involvedObject.kind=HelmApp,involvedObject.name={}",
        app.name_any()
    );
    let mut events = Api::<Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().fields(&fields))
        .await
        .map_err(|e| format!("cannot list Events: {e}"))?
        .items;
    let when = |e: &Event| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
            .unwrap_or_default()
    };
    events.sort_by_key(|e| std::cmp::Reverse(when(e)));
    events.truncate(50);
    Ok(events)
}

/// Reads of inventory objects in flight for one page.
const PARALLEL_READS: usize = 8;

/// Each inventory object with its kstatus, read [`PARALLEL_READS`] at a
/// time, in the inventory's order.
pub async fn inventory(client: &kube::Client, kinds: &Kinds, app: &HelmApp) -> Vec<ObjectHealth> {
    let Some(status) = &app.status else {
        return Vec::new();
    };
    let (read, unread) = status
        .inventory
        .split_at(status.inventory.len().min(MAX_OBJECTS));
    let mut out = Vec::with_capacity(status.inventory.len());
    for chunk in read.chunks(PARALLEL_READS) {
        let reads: Vec<_> = chunk.iter().map(|e| health(client, kinds, e)).collect();
        let healths = futures::future::join_all(reads).await;
        out.extend(
            chunk
                .iter()
                .zip(healths)
                .map(|(e, h)| ObjectHealth::of(e, h)),
        );
    }
    let not_read = || {
        (
            "Unknown",
            format!("not read: more than {MAX_OBJECTS} objects"),
        )
    };
    out.extend(unread.iter().map(|e| ObjectHealth::of(e, not_read())));
    out
}

impl ObjectHealth {
    fn of(e: &apis::helmapp::InventoryEntry, (status, detail): (&'static str, String)) -> Self {
        ObjectHealth {
            kind: e.kind.clone(),
            namespace: e.namespace.clone(),
            name: e.name.clone(),
            status,
            detail,
        }
    }
}

/// One object's kstatus word and why.
async fn health(
    client: &kube::Client,
    kinds: &Kinds,
    e: &apis::helmapp::InventoryEntry,
) -> (&'static str, String) {
    match kinds
        .get(client, &e.api_version, &e.kind, &e.namespace, &e.name)
        .await
    {
        Ok(None) => ("NotFound", String::new()),
        Ok(Some(_)) if kstatus::without_readiness(&e.api_version, &e.kind) => {
            ("Current", String::new())
        }
        Ok(Some(live)) => match kstatus::readiness(&live) {
            Readiness::Ready => ("Current", String::new()),
            Readiness::Pending(why) => ("InProgress", why),
            Readiness::Failed(why) => ("Failed", why),
        },
        Err(e) => ("Unknown", e),
    }
}

/// The deployed revision's storage entry (helm's `secret` driver), as JSON.
async fn deployed_release(client: &kube::Client, app: &HelmApp) -> Result<Value, String> {
    let target = Target::of(app);
    let revision = app.status.as_ref().map_or(0, |s| s.revision);
    if revision == 0 {
        return Err("no revision deployed yet".into());
    }
    let name = format!("sh.helm.release.v1.{}.v{revision}", target.release);
    let secret = Api::<Secret>::namespaced(client.clone(), &target.namespace)
        .get(&name)
        .await
        .map_err(|e| {
            format!(
                "cannot read the release's storage {}/{name}: {e}",
                target.namespace
            )
        })?;
    let data = secret
        .data
        .and_then(|mut d| d.remove("release"))
        .ok_or_else(|| format!("{}/{name} has no release entry", target.namespace))?;
    let json = crate::lean::helm::release_json(&data.0).map_err(|e| e.to_string())?;
    serde_json::from_slice(&json).map_err(|e| e.to_string())
}

/// The strings of every Secret the values came from, or why they cannot
/// be told (then nothing of the values is shown).
async fn secret_strings(client: &kube::Client, app: &HelmApp) -> Result<Redactor, String> {
    if app.spec.decryption.is_some() {
        return Err("not shown: decrypted SOPS values may be among them (spec.decryption)".into());
    }
    let (_, from_secrets) =
        crate::delivery::helmapp::observe::inputs::merged_values_and_secrets(client, app, &[])
            .await
            .map_err(|e| format!("not shown: cannot tell which values came from Secrets: {e}"))?;
    Ok(Redactor::of_strings(from_secrets))
}

/// The values the deployed revision was made with (helm's `config`), as
/// YAML, every value that came from a Secret masked.
pub async fn values(client: &kube::Client, app: &HelmApp) -> Result<String, String> {
    let redactor = secret_strings(client, app).await?;
    let release = deployed_release(client, app).await?;
    let mut config = release
        .get("config")
        .cloned()
        .unwrap_or(Value::Object(Default::default()));
    mask(&mut config, &redactor);
    serde_yaml_ng::to_string(&config).map_err(|e| e.to_string())
}

/// Every scalar of `v` that holds a Secret's value (whole or in part)
/// becomes the string [`MASKED`] — masked as a value, so the YAML shown
/// still reads as the values it stands for.
fn mask(v: &mut Value, redactor: &Redactor) {
    match v {
        Value::Object(map) => map.values_mut().for_each(|v| mask(v, redactor)),
        Value::Array(items) => items.iter_mut().for_each(|v| mask(v, redactor)),
        Value::Null => {}
        scalar => {
            let text = match &*scalar {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if redactor.redact(&text) != text {
                *scalar = Value::String(MASKED.into());
            }
        }
    }
}

/// Each drifted field: the manifest's value and the live one (a Secret's
/// both masked; a valuesFrom Secret's strings masked wherever they are).
pub async fn drift(client: &kube::Client, kinds: &Kinds, app: &HelmApp) -> Vec<DriftRow> {
    let Some(status) = app.status.as_ref().filter(|s| !s.drift.is_empty()) else {
        return Vec::new();
    };
    let redactor = secret_strings(client, app).await.ok();
    let manifest = deployed_release(client, app).await.map(|r| {
        r.get("manifest")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    });
    let mut rows = Vec::new();
    for d in &status.drift {
        let api_version = status
            .inventory
            .iter()
            .find(|e| e.kind == d.kind && e.name == d.name && e.namespace == d.namespace)
            .map(|e| e.api_version.clone())
            .unwrap_or_default();
        let expected_doc = manifest
            .as_ref()
            .ok()
            .and_then(|m| manifest_object(m, &d.kind, &d.name));
        let live = kinds
            .get(client, &api_version, &d.kind, &d.namespace, &d.name)
            .await;
        for field in &d.fields {
            let show = |v: Option<&Value>| -> String {
                if d.kind == "Secret" {
                    return MASKED.into();
                }
                let text = v.map_or("(absent)".into(), |v| v.to_string());
                match &redactor {
                    Some(r) => r.redact(&text).replace("[redacted]", MASKED),
                    None => MASKED.into(),
                }
            };
            let expected = match (&manifest, &expected_doc) {
                (Err(e), _) => e.clone(),
                (Ok(_), None) => "(not in the manifest)".into(),
                (Ok(_), Some(doc)) => show(doc.pointer(field)),
            };
            let live = match &live {
                Err(e) => e.clone(),
                Ok(None) => "(object gone)".into(),
                Ok(Some(o)) => show(o.pointer(field)),
            };
            rows.push(DriftRow {
                object: format!(
                    "{} {}",
                    d.kind,
                    if d.namespace.is_empty() {
                        d.name.clone()
                    } else {
                        format!("{}/{}", d.namespace, d.name)
                    }
                ),
                field: field.clone(),
                expected,
                live,
            });
        }
    }
    rows
}

/// The document of `kind` `name` in a multi-document manifest.
fn manifest_object(manifest: &str, kind: &str, name: &str) -> Option<Value> {
    manifest
        .split("\n---")
        .filter_map(|doc| serde_yaml_ng::from_str::<Value>(doc).ok())
        .find(|v| {
            v.get("kind").and_then(Value::as_str) == Some(kind)
                && v.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_value_is_masked_as_a_whole_scalar() {
        let r = Redactor::of_strings(vec!["hunter22".into(), "424242".into()]);
        let mut v = serde_json::json!({ "a": "hunter22", "b": { "c": ["x-hunter22-y", "free"] }, "n": 424242, "ok": 7 });
        mask(&mut v, &r);
        assert_eq!(
            v,
            serde_json::json!({ "a": MASKED, "b": { "c": [MASKED, "free"] }, "n": MASKED, "ok": 7 })
        );
        let yaml = serde_yaml_ng::to_string(&v).unwrap();
        let back: Value = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(
            back["a"],
            Value::from(MASKED),
            "still a string once shown: {yaml}"
        );
    }

    #[test]
    fn a_manifest_object_is_found_by_kind_and_name() {
        let m = "---\n# Source: a\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: one\ndata:\n  k: v\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: one\n";
        let cm = manifest_object(m, "ConfigMap", "one").unwrap();
        assert_eq!(cm.pointer("/data/k"), Some(&Value::from("v")));
        assert!(manifest_object(m, "Service", "one").is_some());
        assert!(manifest_object(m, "Secret", "one").is_none());
    }
}
