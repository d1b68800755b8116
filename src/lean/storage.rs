//! Helm's release storage and the `uuid` Secrets, as cached: one revision
//! of a release decoded from its Secret (or ConfigMap), and the UUID a
//! namespace's `uuid` Secret holds.

use std::borrow::Cow;
use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};

use crate::lean::helm::{ReleaseSummary, decode_release_with};
use crate::lean::objects::{LeanMeta, label, lean_meta, lean_meta_with_uid, resource};

/// The `data` of a Secret as the API serves it: base64 values. Only the
/// entry `key` is decoded and kept.
fn secret_entry(data: &BTreeMap<String, String>, key: &str) -> Option<Result<Vec<u8>, String>> {
    data.get(key).map(|v| {
        base64::engine::general_purpose::STANDARD
            .decode(v.trim())
            .map_err(|e| format!("data.{key} is not base64: {e}"))
    })
}

/// On a release's storage: the UID of the HelmApp that owns it (delivery
/// writes it with `helm --labels`).
pub const HELMAPP_UID_LABEL: &str = "hossted.com/helmapp-uid";
/// On a release's storage: the hash of its HelmApp's configuration.
pub const CONFIG_HASH_LABEL: &str = "hossted.com/config-hash";

/// How Helm's release storage is watched — label `owner=helm`, small LIST
/// pages (a release Secret is large: a gzip'd release, base64'd twice) —:
/// one informer, shared by every controller that asks with these options.
pub fn helm_storage_options<K>() -> cache::InformerOptions<K> {
    let mut o = cache::InformerOptions::default().labels("owner=helm");
    o.list_watch.page_size = 50;
    o
}

/// One revision of a Helm release, from its storage Secret
/// (`sh.helm.release.v1.<name>.v<N>`, label `owner=helm`) or ConfigMap.
#[derive(Clone, Debug)]
pub struct HelmRelease {
    pub metadata: LeanMeta,
    /// The decoded release, or why it could not be decoded.
    pub release: Result<ReleaseSummary, String>,
    /// SHA-256 of `data.release` (helm's payload, as helm wrote it):
    /// delivery compares it with the digest it recorded before trusting
    /// the storage (`None`: no `data.release`, or not base64).
    pub digest: Option<[u8; 32]>,
    /// [`content_digest`] of the payload: only in a fresh read
    /// ([`FreshRelease`]), never in the cache.
    pub content: Option<String>,
    /// The number its payload is kept under by
    /// [`super::recent::keep_payload`] — decoded by the cache while a run
    /// of ours was in flight, of a revision a HelmApp owns (0: not kept).
    pub kept: u64,
}

/// The digest delivery records of a release revision: `sha256:<hex>` of
/// its storage's `data.release` (helm's payload).
pub fn release_digest(payload: &[u8]) -> String {
    use sha2::Digest;
    digest_text(&sha2::Sha256::digest(payload).into())
}

fn digest_text(sum: &[u8; 32]) -> String {
    format!("sha256:{}", crate::lean::hex::hex(sum))
}

impl HelmRelease {
    /// Keeps the UID only of storage that cannot be decoded: the one
    /// Warning about it is on the object itself (no read of it needed, and
    /// none allowed: the inventory may only list and watch Secrets). Of a
    /// decoded one, only delivery's labels are kept: Helm's (`owner`,
    /// `name`, `version`) say again what the release says, and a label map
    /// costs ~600 bytes — per revision, 50,000 of them at 10,000 releases.
    fn new(
        mut metadata: LeanMeta,
        release: Result<ReleaseSummary, String>,
        digest: Option<[u8; 32]>,
    ) -> Self {
        if release.is_ok() {
            metadata.uid = None;
            metadata
                .labels_mut()
                .retain(|k| k == HELMAPP_UID_LABEL || k == CONFIG_HASH_LABEL);
        }
        HelmRelease {
            metadata,
            release,
            digest,
            content: None,
            kept: 0,
        }
    }

    /// [`HelmRelease::digest`] in the form [`release_digest`] gives.
    pub fn digest_string(&self) -> Option<String> {
        self.digest.as_ref().map(digest_text)
    }
}
resource!(HelmRelease, "Secret", "secrets", NamespaceResourceScope);

impl<'de> Deserialize<'de> for HelmRelease {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawSecret::deserialize(d)?;
        let owned = !label(&raw.metadata, HELMAPP_UID_LABEL).is_empty();
        let payload = secret_entry(&raw.data, "release");
        // A run of ours in flight for the release: what it writes is kept
        // for its record (`super::recent`).
        let kept = match (owned && super::recent::capturing(), &payload) {
            (true, Some(Ok(payload))) => super::recent::keep_payload(
                raw.metadata.namespace.as_deref().unwrap_or_default(),
                label(&raw.metadata, "name"),
                payload,
            ),
            _ => 0,
        };
        // Only a revision a HelmApp owns has its objects listed in the
        // cache: the inventory reads none.
        let mut entry = read_entry(raw.metadata, payload, owned);
        entry.kept = kept;
        Ok(entry)
    }
}

/// A storage Secret as the API serves it, before it is read.
#[derive(Deserialize)]
struct RawSecret {
    #[serde(deserialize_with = "lean_meta_with_uid")]
    metadata: LeanMeta,
    #[serde(default)]
    data: BTreeMap<String, String>,
}

/// The one reading of a storage Secret, for the cache and for a fresh read
/// alike: digested, decoded, checked to be [`plausible`] (labels and
/// payload agree), its objects listed when `list_objects`. Every entry is
/// digested (SHA-256 runs far faster than the gunzip the decoding does):
/// delivery compares each revision helm may read with what it recorded.
fn read_entry(
    metadata: LeanMeta,
    payload: Option<Result<Vec<u8>, String>>,
    list_objects: bool,
) -> HelmRelease {
    let mut sum = None;
    let release = match payload {
        None => Err("the Secret has no data.release".to_string()),
        Some(Err(e)) => Err(e),
        Some(Ok(payload)) => {
            use sha2::Digest;
            sum = Some(sha2::Sha256::digest(&payload).into());
            decode_release_with(&payload, list_objects)
                .map_err(|e| e.to_string())
                .and_then(|r| plausible(r, &metadata))
        }
    };
    HelmRelease::new(metadata, release, sum)
}

/// A storage Secret read afresh from the API (not the cache): always
/// digested, its objects listed, by the same reading as the cache's; and
/// its payload as stored (compressed: no bigger than the Secret), from
/// which the caller may decode one revision's manifest — never every
/// revision's (a planted payload may decompress to 32 MiB).
#[derive(Clone, Debug)]
pub struct FreshRelease(pub HelmRelease, pub Option<Vec<u8>>);

impl<'de> Deserialize<'de> for FreshRelease {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawSecret::deserialize(d)?;
        let read = secret_entry(&raw.data, "release");
        let payload = read.as_ref().and_then(|r| r.as_ref().ok()).cloned();
        let content = payload.as_deref().and_then(content_digest);
        let mut entry = read_entry(raw.metadata, read, true);
        entry.content = content;
        Ok(FreshRelease(entry, payload))
    }
}

impl kube::Resource for FreshRelease {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        "Secret".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "secrets".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// `sha256:<hex>` of a release payload without its `info` (status, times,
/// description): every other top-level field of the release JSON, by name,
/// in a canonical form (keys sorted, one spelling of each string and
/// number, members whose value is Go's zero value left out). Helm rewrites
/// a revision's `info` alone when it supersedes it or marks it uninstalled
/// or failed, so this digest stays; an edit of the manifest, hooks, chart
/// or values changes it. Canonical rather than the bytes as stored: a
/// revision re-encoded by another tool (key order, `\u003c` for `<`) and
/// accepted with `hossted.com/reconcile-at` is written back in helm's
/// encoding when helm supersedes it; and helm 4 superseding a revision
/// helm 3 wrote writes its own zero values (`"schemamodtime":
/// "0001-01-01T00:00:00Z"` added, empty `last_run` times left out) — the
/// same release to Go's decoder, which reads a missing member as its zero
/// value. Both must keep the digest. `None`: not a release payload.
pub fn content_digest(payload: &[u8]) -> Option<String> {
    content_digest_of_json(&crate::lean::helm::release_json(payload).ok()?)
}

/// [`content_digest_of_json`] with what `helm test` rewrites (with
/// `info`) in the revision it tests left out: each hook's `last_run`, a
/// hook's missing `delete_policies` (helm gives a hook without one
/// `before-hook-creation` as it runs it, the default it stands for), and
/// the order of hooks of different names (with `--filter`, helm stores the
/// skipped hooks first). A revision read after our own test whose digest this is agrees
/// with the release helm printed before the test in all that helm acts
/// on — every hook's manifest, events, weight and policies. `None`: not a
/// release, or one with a key Go's JSON would fold onto a field
/// (`crate::lean::go_keys`: a `Last_Run` is not taken off as `last_run`).
pub fn content_digest_untested(json: &[u8]) -> Option<String> {
    use serde_json::{Value, json};
    crate::lean::go_keys::check(json).ok()?;
    let mut release: Value = serde_json::from_slice(json).ok()?;
    if let Some(hooks) = release.get_mut("hooks").and_then(Value::as_array_mut) {
        for hook in hooks.iter_mut() {
            if let Some(hook) = hook.as_object_mut() {
                hook.remove("last_run");
                let unset = hook
                    .get("delete_policies")
                    .is_none_or(|p| p.is_null() || p.as_array().is_some_and(Vec::is_empty));
                if unset {
                    hook.insert("delete_policies".into(), json!(["before-hook-creation"]));
                }
            }
        }
        // By name, stably: helm's reorder moves hooks by name and keeps
        // the order among those of one name — which helm runs in that
        // order when their weights tie, so a swap of them is a change.
        hooks.sort_by(|a, b| {
            let name = |h: &Value| {
                h.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            name(a).cmp(&name(b))
        });
    }
    content_digest_of_json(&serde_json::to_vec(&release).ok()?)
}

/// [`content_digest`] of a release as JSON — as helm prints it with
/// `--output json`, the same release it stores.
pub fn content_digest_of_json(json: &[u8]) -> Option<String> {
    use sha2::Digest;
    let fields: BTreeMap<String, serde_json::Value> = serde_json::from_slice(json).ok()?;
    let mut sum = sha2::Sha256::new();
    let mut text = String::new();
    for (name, value) in fields.iter().filter(|(name, _)| name.as_str() != "info") {
        text.clear();
        canonical(value, &mut text);
        sum.update((name.len() as u64).to_be_bytes());
        sum.update(name.as_bytes());
        sum.update((text.len() as u64).to_be_bytes());
        sum.update(text.as_bytes());
    }
    Some(digest_text(&sum.finalize().into()))
}

/// `value` as JSON with every object's keys sorted, whatever order the
/// map type keeps, and without the members that are Go's zero value
/// ([`is_zero`], after their own members are left out). Its depth is
/// bounded by the parser's (128 levels).
fn canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut members: Vec<(&String, String)> = map
                .iter()
                .filter_map(|(key, value)| {
                    let mut text = String::new();
                    canonical(value, &mut text);
                    (!is_zero(&text)).then_some((key, text))
                })
                .collect();
            members.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, text)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                out.push_str(&text);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Whether a canonical member value is what Go writes for a zero value
/// (and reads a missing member as): null, false, 0, "", an empty list or
/// object, the zero `time.Time`.
fn is_zero(canonical: &str) -> bool {
    matches!(
        canonical,
        "null" | "false" | "0" | "\"\"" | "[]" | "{}" | "\"0001-01-01T00:00:00Z\""
    )
}

/// The newest release among `entries` (one release's storage): the
/// highest revision among those that decode and are [`plausible`]. An
/// entry whose labels and payload disagree is no release and is never
/// chosen — whichever of the two says the higher revision. Both readers
/// (the cache's and a fresh read) choose with this.
pub fn newest_of<'a, R>(entries: impl IntoIterator<Item = &'a R>) -> Option<&'a R>
where
    R: AsRef<HelmRelease> + 'a,
{
    entries
        .into_iter()
        .filter(|e| e.as_ref().release.is_ok())
        .max_by_key(|e| e.as_ref().version())
}

impl AsRef<HelmRelease> for HelmRelease {
    fn as_ref(&self) -> &HelmRelease {
        self
    }
}

impl AsRef<HelmRelease> for FreshRelease {
    fn as_ref(&self) -> &HelmRelease {
        &self.0
    }
}

/// `release` if it could be what helm stored in the Secret `meta`: a name
/// in Helm's pattern (at most 53 characters) equal to the Secret's `name`
/// label, the Secret's namespace, a revision of at least 1. Anyone who may
/// write a Secret labelled `owner=helm` can forge one: an implausible one
/// is never reported, never in a status (a 1 MB name would push the
/// Hosstedproject's status past etcd's limit).
fn plausible(release: ReleaseSummary, meta: &LeanMeta) -> Result<ReleaseSummary, String> {
    let name = &release.name;
    let helm_name = name.len() <= 53
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !helm_name {
        return Err("not a plausible Helm release: its name is not a Helm release name".into());
    }
    if label(meta, "name") != name.as_str() {
        return Err(
            "not a plausible Helm release: its name differs from the Secret's name label".into(),
        );
    }
    if meta
        .namespace
        .as_deref()
        .is_some_and(|ns| ns != release.namespace)
    {
        return Err("not a plausible Helm release: its namespace is not the Secret's".into());
    }
    if release.version < 1 {
        return Err("not a plausible Helm release: its revision is below 1".into());
    }
    if label(meta, "version") != release.version.to_string() {
        return Err(
            "not a plausible Helm release: its revision differs from the Secret's version label"
                .into(),
        );
    }
    // Helm finds the deployed revision by this label, the operator reads
    // the payload: both must see the same release (helm writes the two
    // together; a `status: deployed` label on a `failed` payload is a
    // forgery that would make helm upgrade from it).
    let status = label(meta, "status");
    if !status.is_empty() && status != release.status.as_str() {
        return Err(
            "not a plausible Helm release: its status differs from the Secret's status label"
                .into(),
        );
    }
    Ok(release)
}

impl HelmRelease {
    /// The release name: from the payload, else Helm's `name` label.
    pub fn release_name(&self) -> &str {
        match &self.release {
            Ok(r) => &r.name,
            Err(_) => label(&self.metadata, "name"),
        }
    }

    /// The revision: from the payload, else Helm's `version` label, else 0.
    pub fn version(&self) -> i64 {
        match &self.release {
            Ok(r) => r.version,
            Err(_) => label(&self.metadata, "version").parse().unwrap_or(0),
        }
    }
}

/// The same, stored by Helm's configmap driver: `data.release` is the
/// payload itself (ConfigMap data is not base64-encoded by the API).
#[derive(Clone, Debug)]
pub struct HelmReleaseConfigMap(pub HelmRelease);

impl<'de> Deserialize<'de> for HelmReleaseConfigMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta_with_uid")]
            metadata: LeanMeta,
            #[serde(default)]
            data: BTreeMap<String, String>,
        }
        let raw = Raw::deserialize(d)?;
        let release = match raw.data.get("release") {
            None => Err("the ConfigMap has no data.release".to_string()),
            Some(payload) => {
                crate::lean::helm::decode_release(payload.as_bytes()).map_err(|e| e.to_string())
            }
        };
        Ok(HelmReleaseConfigMap(HelmRelease::new(
            raw.metadata,
            release,
            None,
        )))
    }
}

impl crate::lean::objects::Labelled for HelmReleaseConfigMap {
    fn lean_meta(&self) -> &LeanMeta {
        &self.0.metadata
    }
}

impl kube::Resource for HelmReleaseConfigMap {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        "ConfigMap".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "configmaps".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// A Secret named `uuid` (field selector `metadata.name=uuid`): its `uuid` key.
#[derive(Clone, Debug)]
pub struct UuidSecret {
    pub metadata: LeanMeta,
    /// `data.uuid`, when present and valid UTF-8.
    pub uuid: Option<String>,
}
resource!(UuidSecret, "Secret", "secrets", NamespaceResourceScope);

impl<'de> Deserialize<'de> for UuidSecret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(deserialize_with = "lean_meta")]
            metadata: LeanMeta,
            #[serde(default)]
            data: BTreeMap<String, String>,
        }
        let raw = Raw::deserialize(d)?;
        let uuid = secret_entry(&raw.data, "uuid")
            .and_then(Result::ok)
            .and_then(|b| String::from_utf8(b).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        Ok(UuidSecret {
            metadata: raw.metadata,
            uuid,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::content_digest;

    /// As helm writes a revision: Go's field order, `<` as `\u003c`.
    const AS_HELM_WROTE: &str = r#"{"name":"web","info":{"status":"deployed","description":"Install complete"},"chart":{"metadata":{"name":"tiny","version":"0.1.0"}},"config":{"n":1000000,"text":"a \u003c b"},"manifest":"kind: ConfigMap\n","version":1}"#;

    #[test]
    fn the_content_digest_ignores_info_and_the_encoding_but_not_the_content() {
        let helm = content_digest(AS_HELM_WROTE.as_bytes()).unwrap();
        // Another tool's encoding of the same release (keys sorted, `<`
        // raw, compact or not), with a hand-edited description.
        let mut value: serde_json::Value = serde_json::from_str(AS_HELM_WROTE).unwrap();
        value["info"]["description"] = "edited by hand".into();
        let reencoded = serde_json::to_vec_pretty(&value).unwrap();
        assert!(!String::from_utf8_lossy(&reencoded).contains("\\u003c"));
        assert_eq!(content_digest(&reencoded).unwrap(), helm);
        // Gzipped and base64 as in a storage Secret: the same.
        let stored = crate::lean::helm::encode_release(AS_HELM_WROTE.as_bytes());
        assert_eq!(content_digest(&stored).unwrap(), helm);
        // Helm 4 superseding what helm 3 wrote: its own zero values.
        let mut rewritten: serde_json::Value = serde_json::from_str(AS_HELM_WROTE).unwrap();
        rewritten["chart"]["schemamodtime"] = "0001-01-01T00:00:00Z".into();
        rewritten["chart"]["lock"] = serde_json::Value::Null;
        rewritten["config"]["empty"] = serde_json::json!({ "started_at": "" });
        assert_eq!(
            content_digest(&serde_json::to_vec(&rewritten).unwrap()).unwrap(),
            helm
        );
        // A change outside `info` is a new content.
        value["manifest"] = "kind: Secret\n".into();
        let edited = serde_json::to_vec(&value).unwrap();
        assert_ne!(content_digest(&edited).unwrap(), helm);
        value["manifest"] = "kind: ConfigMap\n".into();
        value["config"]["n"] = 1000001.into();
        assert_ne!(
            content_digest(&serde_json::to_vec(&value).unwrap()).unwrap(),
            helm
        );
        assert_eq!(content_digest(b"not json"), None);
    }
}
