//! What a HelmApp's release is made of, as data: the hash of its
//! configuration, the durations of its spec, what is wrong with its chart.
//! Pure — `observed.rs` and `state.rs` depend on it and on no I/O
//! (fetching is `inputs.rs`).

use std::time::Duration;

use apis::helmapp::{HelmApp, PostRenderStrategy};
use kube::ResourceExt;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::helmapp::decide::target::Target;
use crate::delivery::source::LocalChart;
use crate::lean::hex::hex;

/// Why the chart could not be had, and whether retrying may help (a
/// repository that is down) or only a change of the spec can (a wrong path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartProblem {
    /// `ChartUnavailable`, `ChartInvalid` or `ChartSourceRefused`.
    pub reason: Reason,
    pub message: String,
    pub retry: bool,
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
    chart: &LocalChart,
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
    chart: &LocalChart,
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
            if r.literal {
                v["literal"] = json!(true);
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
    let digest = if tracked || !c.path.is_empty() || c.git.is_some() {
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
    if s.inline_values_last {
        doc["values"]["inlineLast"] = json!(true);
    }
    // Whether hooks are post-rendered changes them only when something
    // post-renders; `separate` makes the same objects as `combined`.
    if s.post_renders() && s.post_render_strategy == PostRenderStrategy::NoHooks {
        doc["postRenderStrategy"] = json!(s.post_render_strategy.as_str());
    }
    // From Git: the repository and the directory, never the commit — a
    // commit that changes neither the chart's files (its digest) nor a
    // values file is no upgrade.
    if let Some(git) = &c.git {
        doc["chart"]["git"] = json!({ "url": git.url, "path": git.path });
    }
    if !chart.values_files.is_empty() {
        let files: Vec<Value> = chart
            .values_files
            .iter()
            .map(|f| {
                let digest = f.content.as_ref().map(|c| hex(&Sha256::digest(c)));
                json!({ "path": f.path, "digest": digest })
            })
            .collect();
        doc["valuesFiles"] = json!(files);
    }
    if let Some(d) = &s.decryption {
        doc["decryption"] = json!({ "provider": d.provider, "secret": d.secret_ref.name });
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
    use apis::helmapp::ValuesKind;

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
        let chart = LocalChart {
            path: "/charts/web".into(),
            version: "1.0.0".into(),
            digest: "d1".into(),
            manifest_digest: String::new(),
            latest: String::new(),
            verified: None,
            ..Default::default()
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
        let newer = LocalChart {
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
            LocalChart {
                version: "0.1.0".into(),
                digest: "d1".into(),
                ..Default::default()
            },
            LocalChart {
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
        let chart = LocalChart {
            path: "/charts/web".into(),
            version: "1.0.0".into(),
            digest: "d1".into(),
            manifest_digest: String::new(),
            latest: String::new(),
            verified: None,
            ..Default::default()
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
        fn labelled(a: &mut HelmApp, with: PostRenderStrategy) {
            let mut m = apis::helmapp::CommonMetadata::default();
            m.labels.insert("team".into(), "a".into());
            a.spec.common_metadata = Some(m);
            a.spec.post_render_strategy = with;
        }
        assert_eq!(
            edited(|a| labelled(a, PostRenderStrategy::Combined)),
            meta,
            "the default"
        );
        assert_eq!(
            edited(|a| labelled(a, PostRenderStrategy::Separate)),
            meta,
            "the same objects as combined"
        );
        assert_ne!(
            edited(|a| labelled(a, PostRenderStrategy::NoHooks)),
            meta,
            "hooks left as the chart has them"
        );
        assert_eq!(
            edited(|a| a.spec.post_render_strategy = PostRenderStrategy::NoHooks),
            base,
            "nothing post-renders: no difference"
        );
    }
}
