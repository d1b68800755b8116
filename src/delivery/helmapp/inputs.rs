//! What a HelmApp's release is made of: its chart, its values (and their
//! cached digests), and the hash of it all.

use std::time::Duration;

use apis::helmapp::HelmApp;
use base64::Engine;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::context::Context;
use super::status::Reason;
use super::target::Target;
use crate::cached::hex::hex;
use crate::delivery::helm::values;
use crate::delivery::source;
use apis::helmapp::ValuesKind;

/// Why the chart could not be had, and whether retrying may help (a
/// repository that is down) or only a change of the spec can (a wrong path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartProblem {
    /// `ChartUnavailable`, `ChartInvalid` or `ChartSourceRefused`.
    pub reason: Reason,
    pub message: String,
    pub retry: bool,
}

impl Context {
    /// The chart, local: by path, or from an HTTP repository or an OCI
    /// registry (remembered for `interval`: a reconcile in between touches
    /// no network). `Ok(None)`: it is being fetched in the background,
    /// which re-queues the HelmApp when done. `Err` says whether retrying
    /// may help.
    pub async fn chart(&self, app: &HelmApp) -> Result<Option<source::LocalChart>, ChartProblem> {
        let chart = self.fetch_chart(app).await;
        if let Ok(Some(c)) = &chart
            && let Err(message) = c.check_pin(&app.spec.chart)
        {
            // Never given to helm. Retried: the right artifact may be
            // published again under the same version.
            return Err(ChartProblem {
                reason: Reason::VerificationFailed,
                message,
                retry: true,
            });
        }
        chart.map_err(|(e, retry)| ChartProblem {
            reason: match e {
                source::SourceError::Verification { .. } => Reason::VerificationFailed,
                source::SourceError::Invalid { .. } => Reason::ChartInvalid,
                source::SourceError::Refused { .. } => Reason::ChartSourceRefused,
                _ => Reason::ChartUnavailable,
            },
            message: e.to_string(),
            retry,
        })
    }

    async fn fetch_chart(
        &self,
        app: &HelmApp,
    ) -> Result<Option<source::LocalChart>, (source::SourceError, bool)> {
        let spec = &app.spec;
        if spec.chart.repo.is_empty() && spec.chart.oci.is_empty() {
            return source::resolve(&spec.chart, self.settings.chart_path_root.as_deref())
                .map(Some)
                .map_err(|e| (e, false));
        }
        let interval = parse_duration(&spec.interval).unwrap_or(Duration::from_secs(600));
        // Whose credentials: a chart fetched with one Secret is never
        // served to a HelmApp with another, or none.
        let scope = spec
            .chart
            .credentials_secret_ref
            .as_ref()
            .map(|r| format!("{}/{}", app.namespace().unwrap_or_default(), r.name))
            .unwrap_or_default()
            + &super::trust::scope(app);
        if let Some(c) = self.sources.resolved.fresh(&spec.chart, &scope, interval) {
            return Ok(Some(c));
        }
        let retry = |e: source::SourceError| {
            // An address refused stays refused until the spec changes.
            let retry = !matches!(e, source::SourceError::Refused { .. });
            (e, retry)
        };
        let key = source::RepoCache::key(&spec.chart, &scope);
        match self.sources.take(&key) {
            Some(None) => {
                // Another app's fetch of this chart runs: its end wakes us.
                self.sources.wake_too(&key, self.waker(app));
                return Ok(None);
            }
            Some(Some(done)) => return done.map(Some).map_err(retry),
            None => {}
        }
        let repo_error = |message: String| source::SourceError::Repo {
            repo: format!("{}{}", spec.chart.repo, spec.chart.oci),
            message,
        };
        let credentials = match &spec.chart.credentials_secret_ref {
            None => source::Credentials::default(),
            Some(r) => self
                .credentials(app, &r.name, scope)
                .await
                .map_err(|(message, retry)| (repo_error(message), retry))?,
        };
        let verification = |message: String| source::SourceError::Verification {
            repo: format!("{}{}", spec.chart.repo, spec.chart.oci),
            message,
        };
        let trust = super::trust::trust(&self.client, app)
            .await
            .map_err(|(message, retry)| (verification(message), retry))?;
        // Fetched in the background: a slow source holds a fetch slot,
        // never this worker.
        self.sources.start(
            key,
            &app.namespace().unwrap_or_default(),
            &spec.chart,
            credentials,
            trust,
            self.waker(app),
        );
        Ok(None)
    }

    /// Re-queues `app` (when a background fetch ends).
    fn waker(&self, app: &HelmApp) -> impl FnOnce() + Send + 'static {
        let (queue, key) = (self.wake.get().cloned(), cache::object_key(app));
        move || {
            if let Some(queue) = queue {
                queue.add(key);
            }
        }
    }

    /// What `credentialsSecretRef` `name` holds (see [`credentials`]).
    async fn credentials(
        &self,
        app: &HelmApp,
        name: &str,
        scope: String,
    ) -> Result<source::Credentials, (String, bool)> {
        credentials(&self.client, app, name, scope).await
    }

    /// The cached digest of each `valuesFrom` key, in order (`None`: an
    /// optional reference that is absent).
    pub fn reference_digests(&self, app: &HelmApp) -> Result<Vec<Option<String>>, String> {
        let ns = app.namespace().unwrap_or_default();
        app.spec
            .values_from
            .iter()
            .map(|r| {
                let key = format!("{ns}/{}", r.name);
                let keys = match r.kind {
                    ValuesKind::Secret => self.secrets.get(&key).map(|s| s.keys.clone()),
                    ValuesKind::ConfigMap => self.configmaps.get(&key).map(|c| c.keys.clone()),
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

    /// The merged values (see [`merged_values`]).
    pub async fn values(&self, app: &HelmApp) -> Result<Value, String> {
        merged_values(&self.client, app).await
    }
}

/// The merged values, read as `client`: `values`, `valuesFrom`,
/// `valuesBase64`, `set` (the operator's, and `kubectl hossted diff`'s with
/// the user's rights).
pub async fn merged_values(client: &kube::Client, app: &HelmApp) -> Result<Value, String> {
    merged_values_and_secrets(client, app).await.map(|(v, _)| v)
}

/// [`merged_values`], and every string that came from a `valuesFrom`
/// Secret: what anything shown to a person masks (`kubectl hossted diff`).
pub async fn merged_values_and_secrets(
    client: &kube::Client,
    app: &HelmApp,
) -> Result<(Value, Vec<String>), String> {
    let mut from_secrets = Vec::new();
    let spec = &app.spec;
    values::check_bounds(spec)?;
    let ns = app.namespace().unwrap_or_default();
    let mut merged = json!({});
    if let Some(v) = &spec.values {
        if !v.is_object() {
            return Err("spec.values must be a mapping".into());
        }
        values::merge(&mut merged, v.clone());
    }
    for r in &spec.values_from {
        let what = format!("valuesFrom {} {}/{} key {}", r.kind, ns, r.name, r.key);
        if r.kind == ValuesKind::Unknown {
            return Err(unknown_kind(&r.name));
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
                values::set_at(&r.target_path, &t, &mut merged)
                    .map_err(|e| format!("{what} targetPath: {e}"))?
            }
            Some(t) => {
                let doc = values::parse_document(&t).map_err(|e| format!("{what}: {e}"))?;
                if secret {
                    from_secrets.extend(values::secrets_of(&doc));
                }
                values::merge(&mut merged, doc)
            }
            None if r.optional => {}
            None => {
                return Err(format!(
                    "{what}: not found (set optional: true if it may be absent)"
                ));
            }
        }
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

/// What `credentialsSecretRef` `name` holds, read as `client`; `Err` says why not and
/// whether retrying may help (a Secret that does not exist waits for a
/// change).
pub async fn credentials(
    client: &kube::Client,
    app: &HelmApp,
    name: &str,
    scope: String,
) -> Result<source::Credentials, (String, bool)> {
    let ns = app.namespace().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let secret = api
        .get_opt(name)
        .await
        .map_err(|e| (format!("credentialsSecretRef {ns}/{name}: {e}"), true))?
        .ok_or_else(|| {
            (
                format!("credentialsSecretRef {ns}/{name} does not exist"),
                false,
            )
        })?;
    let mut data = secret.data.unwrap_or_default();
    let mut text = |k: &str| {
        data.remove(k)
            .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
    };
    Ok(source::Credentials {
        scope,
        username: text("username"),
        password: text("password"),
        ca: data.remove("ca.crt").map(|b| b.0),
    })
}

fn unknown_kind(name: &str) -> String {
    format!("valuesFrom {name}: kind must be Secret or ConfigMap")
}

/// What decides the release's content (docs/delivery.md): the chart (source,
/// resolved version, digest), every source of values (inline, each
/// `valuesFrom` with the digest of its content and its `targetPath`,
/// `valuesBase64`, `set`), release name, target namespace, `crds`,
/// `postRenderers` and `commonMetadata` — nothing else (docs/delivery.md's
/// list) — hashed to 32 hex characters (a label value).
pub fn config_hash(
    app: &HelmApp,
    target: &Target,
    chart: &source::LocalChart,
    references: &[Option<String>],
) -> String {
    let doc = hashed(app, target, chart, references);
    let mut hasher = Sha256::new();
    hasher.update(canonical(&doc).as_bytes());
    hex(&hasher.finalize())[..32].to_string()
}

/// The document [`config_hash`] hashes.
fn hashed(
    app: &HelmApp,
    target: &Target,
    chart: &source::LocalChart,
    references: &[Option<String>],
) -> Value {
    let c = &app.spec.chart;
    let s = &app.spec;
    let from: Vec<Value> = s
        .values_from
        .iter()
        .zip(references)
        .map(|(r, d)| {
            let mut v =
                json!({ "kind": r.kind.as_str(), "name": r.name, "key": r.key, "digest": d });
            if !r.target_path.is_empty() {
                v["targetPath"] = json!(r.target_path);
            }
            v
        })
        .collect();
    // A re-published version is an upgrade unless tracking is off (a pin
    // still decides which artifact is acceptable).
    let tracked = app
        .annotations()
        .get(crate::delivery::names::DIGEST_TRACKING)
        != Some(&"disabled".to_string());
    let digest = if tracked || !c.path.is_empty() {
        chart.digest.as_str()
    } else {
        ""
    };
    let mut doc = json!({
        "chart": { "repo": c.repo, "oci": c.oci, "path": c.path, "name": c.name,
                   "version": chart.version, "digest": digest },
        "values": { "inline": s.values, "from": from, "base64": s.values_base64, "set": s.set },
        "release": target.release,
        "namespace": target.namespace,
        "crds": app.spec.crds.as_str(),
    });
    // Fields added later enter only when used: an app that does not use
    // them keeps its hash, so a new operator version upgrades nothing.
    if !s.post_renderers.is_empty() {
        doc["postRenderers"] = json!(s.post_renderers);
    }
    if let Some(m) = &s.common_metadata {
        doc["commonMetadata"] = json!(m);
    }
    doc
}

/// JSON with every map's keys sorted, whatever serde_json's map order.
pub fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&m[k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// A duration of the spec (Go syntax, as the CRD's pattern allows).
pub fn parse_duration(s: &str) -> Option<Duration> {
    crate::duration::parse(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_ignores_map_order_and_follows_every_input() {
        let app: HelmApp = serde_json::from_value(json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": "web", "namespace": "apps" },
            "spec": { "chart": { "path": "web" } }
        }))
        .unwrap();
        let target = Target::of(&app);
        assert_eq!(
            (target.release.as_str(), target.namespace.as_str()),
            ("web", "apps")
        );
        let chart = source::LocalChart {
            path: "/charts/web".into(),
            version: "1.0.0".into(),
            digest: "d1".into(),
            manifest_digest: String::new(),
            latest: String::new(),
            verified: None,
        };
        let with_values = |v: serde_json::Value| {
            let mut a = app.clone();
            a.spec.values = Some(v);
            a
        };
        let a = config_hash(
            &with_values(json!({ "a": 1, "b": { "c": 2, "d": 3 } })),
            &target,
            &chart,
            &[],
        );
        let b = config_hash(
            &with_values(json!({ "b": { "d": 3, "c": 2 }, "a": 1 })),
            &target,
            &chart,
            &[],
        );
        assert_eq!(a, b, "map order does not count");
        assert_eq!(a.len(), 32);
        assert_ne!(
            a,
            config_hash(&with_values(json!({ "a": 2 })), &target, &chart, &[])
        );
        let newer = source::LocalChart {
            digest: "d2".into(),
            ..chart.clone()
        };
        let same = with_values(json!({ "a": 1, "b": { "c": 2, "d": 3 } }));
        assert_ne!(
            a,
            config_hash(&same, &target, &newer, &[]),
            "a changed chart counts"
        );
        let mut from = same.clone();
        from.spec.values_from = vec![apis::helmapp::ValuesReference {
            kind: ValuesKind::Secret,
            name: "vals".into(),
            key: "values.yaml".into(),
            ..Default::default()
        }];
        let d1 = config_hash(&from, &target, &chart, &[Some("d1".into())]);
        let d2 = config_hash(&from, &target, &chart, &[Some("d2".into())]);
        assert_ne!(d1, d2, "a referenced Secret's content counts");
        let mut at = from.clone();
        at.spec.values_from[0].target_path = "db.password".into();
        assert_ne!(
            d1,
            config_hash(&at, &target, &chart, &[Some("d1".into())]),
            "targetPath counts"
        );
    }

    #[test]
    fn a_republished_chart_counts_unless_digest_tracking_is_disabled_but_a_local_one_always() {
        let app = |chart: serde_json::Value, tracking: Option<&str>| -> HelmApp {
            let mut a: HelmApp = serde_json::from_value(json!({
                "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
                "metadata": { "name": "web", "namespace": "apps" },
                "spec": { "chart": chart }
            }))
            .unwrap();
            if let Some(t) = tracking {
                a.annotations_mut()
                    .insert(crate::delivery::names::DIGEST_TRACKING.into(), t.into());
            }
            a
        };
        let (first, again) = (
            source::LocalChart {
                version: "0.1.0".into(),
                digest: "d1".into(),
                ..Default::default()
            },
            source::LocalChart {
                version: "0.1.0".into(),
                digest: "d2".into(),
                ..Default::default()
            },
        );
        let oci = json!({ "oci": "oci://r.example/charts/web", "version": "0.1.0" });
        let hashes = |a: &HelmApp| {
            let t = Target::of(a);
            (
                config_hash(a, &t, &first, &[]),
                config_hash(a, &t, &again, &[]),
            )
        };
        let (a, b) = hashes(&app(oci.clone(), None));
        assert_ne!(a, b, "tracked: the same version re-published upgrades");
        let (a, b) = hashes(&app(oci.clone(), Some("enabled")));
        assert_ne!(a, b, "only `disabled` turns it off");
        let (a, b) = hashes(&app(oci, Some("disabled")));
        assert_eq!(a, b, "untracked: it does not");
        let (a, b) = hashes(&app(json!({ "path": "web" }), Some("disabled")));
        assert_ne!(a, b, "a chart by path changed is always a change");
    }

    #[test]
    fn the_hash_follows_post_renderers_and_metadata_and_nothing_of_the_actions() {
        let app: HelmApp = serde_json::from_value(json!({
            "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
            "metadata": { "name": "web", "namespace": "apps" },
            "spec": { "chart": { "path": "web" } }
        }))
        .unwrap();
        let target = Target::of(&app);
        let chart = source::LocalChart {
            path: "/charts/web".into(),
            version: "1.0.0".into(),
            digest: "d1".into(),
            manifest_digest: String::new(),
            latest: String::new(),
            verified: None,
        };
        let hash = |a: &HelmApp| config_hash(a, &target, &chart, &[]);
        let keys = |a: &HelmApp| {
            let doc = hashed(a, &target, &chart, &[]);
            let mut k: Vec<String> = doc.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(
            keys(&app),
            ["chart", "crds", "namespace", "release", "values"],
            "an app using none of the later fields hashes as it always did"
        );
        let base = hash(&app);
        let edited = |edit: fn(&mut HelmApp)| {
            let mut a = app.clone();
            edit(&mut a);
            hash(&a)
        };
        for (what, changed) in [
            ("upgrade.force", edited(|a| a.spec.upgrade.force = true)),
            (
                "install.disableHooks",
                edited(|a| a.spec.install.disable_hooks = true),
            ),
            (
                "uninstall.keepHistory",
                edited(|a| a.spec.uninstall.keep_history = true),
            ),
            ("maxHistory", edited(|a| a.spec.max_history = Some(2))),
            ("test.enable", edited(|a| a.spec.test.enable = true)),
            (
                "remediation.retries",
                edited(|a| a.spec.remediation.retries = -1),
            ),
            ("timeout", edited(|a| a.spec.timeout = "1m".into())),
        ] {
            assert_eq!(changed, base, "{what} does not enter the hash");
        }
        let post = edited(|a| {
            a.spec.post_renderers = vec![apis::helmapp::PostRenderer::default()];
        });
        assert_ne!(post, base, "postRenderers count");
        let meta = edited(|a| {
            let mut m = apis::helmapp::CommonMetadata::default();
            m.labels.insert("team".into(), "a".into());
            a.spec.common_metadata = Some(m);
        });
        assert_ne!(meta, base, "commonMetadata counts");
    }
}
