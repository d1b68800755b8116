//! `hossted-operator convert` (and `kubectl hossted convert`): Flux
//! `HelmRelease`s (v2) with their `HelmRepository`, `OCIRepository` and
//! `HelmChart` sources, read from files or stdin, written as HelmApps.
//! Every field with an equivalent is mapped; every field without one is
//! reported with the reason ([`fields::FIELDS`] says which is which). A
//! converted HelmApp has `adopt: true`: it takes over the release
//! helm-controller made, without a new revision when nothing changed.

pub mod fields;

use std::collections::BTreeMap;
use std::io::Read;
use std::process::ExitCode;

use serde_json::{Map, Value, json};

use fields::Fate;

/// A field of a HelmRelease the HelmApp does not carry, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// `namespace/name` of the HelmRelease.
    pub release: String,
    /// The spec field, with list indexes (`valuesFrom[1].literal`).
    pub field: String,
    pub why: String,
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HelmRelease {}: spec.{} not converted: {}",
            self.release, self.field, self.why
        )
    }
}

/// The HelmApps made of the HelmReleases among `documents`, and what did
/// not convert.
#[derive(Debug, Default)]
pub struct Converted {
    pub apps: Vec<Value>,
    pub notes: Vec<Note>,
}

/// Converts every HelmRelease among `documents`, resolving its chart
/// source among them.
pub fn convert(documents: &[Value]) -> Converted {
    let sources = Sources::of(documents);
    let mut out = Converted::default();
    for doc in documents {
        let api = doc["apiVersion"].as_str().unwrap_or_default();
        if doc["kind"] == "HelmRelease" && api.starts_with("helm.toolkit.fluxcd.io/") {
            let (app, notes) = helm_app(doc, &sources);
            out.apps.push(app);
            out.notes.extend(notes);
        }
    }
    out
}

/// The Flux source objects of the input, by `kind/namespace/name`.
struct Sources(BTreeMap<String, Value>);

impl Sources {
    fn of(documents: &[Value]) -> Self {
        let mut by_key = BTreeMap::new();
        for doc in documents {
            let api = doc["apiVersion"].as_str().unwrap_or_default();
            if api.starts_with("source.toolkit.fluxcd.io/") {
                let key = format!(
                    "{}/{}/{}",
                    doc["kind"].as_str().unwrap_or_default(),
                    doc["metadata"]["namespace"].as_str().unwrap_or_default(),
                    doc["metadata"]["name"].as_str().unwrap_or_default()
                );
                by_key.insert(key, doc.clone());
            }
        }
        Sources(by_key)
    }

    fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<&Value> {
        self.0.get(&format!("{kind}/{namespace}/{name}"))
    }
}

/// One HelmRelease as a HelmApp, and the notes on it.
fn helm_app(release: &Value, sources: &Sources) -> (Value, Vec<Note>) {
    let name = release["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = release["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let key = format!("{namespace}/{name}");
    let spec = &release["spec"];
    let mut notes = Vec::new();
    for (field, fate) in present_fields(spec) {
        match fate {
            Some(Fate::Dropped(why)) => notes.push(Note {
                release: key.clone(),
                field,
                why: why.to_string(),
            }),
            None => notes.push(Note {
                release: key.clone(),
                field,
                why: "a field this converter does not know".into(),
            }),
            Some(_) => {}
        }
    }
    let mut metadata = json!({ "name": name, "namespace": namespace });
    if let Some(labels) = release["metadata"].get("labels") {
        metadata["labels"] = shard_label_carried_over(labels.clone());
        let shard = metadata["labels"][crate::delivery::SHARD_LABEL].as_str();
        if let Some(Err(why)) = shard.map(crate::delivery::ShardName::parse) {
            notes.push(Note {
                release: key.clone(),
                field: "metadata.labels[sharding.fluxcd.io/key]".into(),
                why: format!("carried over, but no shard process can take it: {why}"),
            });
        }
    }
    let mut to = To {
        spec: Map::new(),
        notes: &mut notes,
        release: &key,
    };
    to.chart(spec, namespace, sources);
    to.settings(spec, name);
    let app = json!({
        "apiVersion": "hossted.com/v1alpha1",
        "kind": "HelmApp",
        "metadata": metadata,
        "spec": Value::Object(to.spec),
    });
    (app, notes)
}

/// Flux's shard label (`sharding.fluxcd.io/key`) as the operator's
/// (docs/shards.md): a converted fleet keeps its shard layout. A label of
/// ours already there wins.
fn shard_label_carried_over(mut labels: Value) -> Value {
    const FLUX_SHARD: &str = "sharding.fluxcd.io/key";
    if let Some(map) = labels.as_object_mut()
        && let Some(shard) = map.remove(FLUX_SHARD)
    {
        map.entry(crate::delivery::SHARD_LABEL).or_insert(shard);
    }
    labels
}

/// The fields `spec` sets, as `FIELDS` names them, with list indexes kept
/// for the reader (`valuesFrom[1].literal`), each with its fate.
fn present_fields(spec: &Value) -> Vec<(String, Option<Fate>)> {
    let mut found = Vec::new();
    walk(spec, "", "", &mut found);
    found
}

fn walk(value: &Value, shown: &str, generic: &str, found: &mut Vec<(String, Option<Fate>)>) {
    let Some(object) = value.as_object() else {
        return;
    };
    for (key, child) in object {
        let (shown, generic) = match shown {
            "" => (key.clone(), key.clone()),
            _ => (format!("{shown}.{key}"), format!("{generic}.{key}")),
        };
        let fate = fields::fate(&generic);
        match fate {
            Some(Fate::Container) => match child {
                Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        walk(
                            item,
                            &format!("{shown}[{i}]"),
                            &format!("{generic}[]"),
                            found,
                        );
                    }
                }
                _ => walk(child, &shown, &generic, found),
            },
            // Below a mapped or dropped field nothing is judged apart.
            other => found.push((shown, other)),
        }
    }
}

/// The HelmApp spec being written, and the notes of its release.
struct To<'a> {
    spec: Map<String, Value>,
    notes: &'a mut Vec<Note>,
    release: &'a str,
}

impl To<'_> {
    fn note(&mut self, field: &str, why: impl Into<String>) {
        self.notes.push(Note {
            release: self.release.to_string(),
            field: field.to_string(),
            why: why.into(),
        });
    }

    /// Sets `path` (dotted) of the HelmApp spec to `value`.
    fn set(&mut self, path: &str, value: Value) {
        let mut at = &mut self.spec;
        let mut steps = path.split('.').peekable();
        while let Some(step) = steps.next() {
            if steps.peek().is_none() {
                at.insert(step.to_string(), value);
                return;
            }
            let next = at
                .entry(step.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !next.is_object() {
                *next = Value::Object(Map::new());
            }
            at = next.as_object_mut().expect("an object");
        }
    }

    /// Copies `from` (a pointer into the HelmRelease spec) to `to`, if set.
    fn copy(&mut self, spec: &Value, from: &str, to: &str) {
        if let Some(v) = spec.pointer(from).filter(|v| !v.is_null()) {
            self.set(to, v.clone());
        }
    }

    /// `spec.chart` from `chart.spec` and its source, or from `chartRef`.
    fn chart(&mut self, spec: &Value, namespace: &str, sources: &Sources) {
        if let Some(template) = spec.pointer("/chart/spec") {
            let source = &template["sourceRef"];
            let kind = source["kind"].as_str().unwrap_or("HelmRepository");
            let ns = source["namespace"].as_str().unwrap_or(namespace);
            let name = source["name"].as_str().unwrap_or_default();
            let chart = template["chart"].as_str().unwrap_or_default();
            self.chart_of_repository(kind, ns, name, chart, sources, "chart.spec.sourceRef");
            if self.spec.get("chart").and_then(|c| c.get("git")).is_some() {
                // A Git chart's version is its Chart.yaml's.
                self.values_files_of_git(spec);
            } else {
                self.copy(spec, "/chart/spec/version", "chart.version");
            }
            if let Some(verify) = template.get("verify") {
                self.signature(verify, "chart.spec.verify");
            }
            return;
        }
        let Some(reference) = spec.get("chartRef") else {
            self.note("chart", "neither chart nor chartRef: no chart to convert");
            return;
        };
        let kind = reference["kind"].as_str().unwrap_or_default();
        let ns = reference["namespace"].as_str().unwrap_or(namespace);
        let name = reference["name"].as_str().unwrap_or_default();
        let Some(source) = sources.get(kind, ns, name) else {
            self.note(
                "chartRef",
                format!("{kind} {ns}/{name} is not in the input: set spec.chart by hand"),
            );
            return;
        };
        match kind {
            "OCIRepository" => {
                let s = &source["spec"];
                self.copy(s, "/url", "chart.oci");
                match (s.pointer("/ref/tag"), s.pointer("/ref/semver")) {
                    (_, Some(v)) | (Some(v), None) => self.set("chart.version", v.clone()),
                    (None, None) => {}
                }
                if s.pointer("/ref/digest").is_some() {
                    self.note(
                        "chartRef",
                        format!("OCIRepository {ns}/{name}: ref.digest (a pin by digest) is not supported yet; its tag or semver is used"),
                    );
                }
                self.credentials(s);
                if let Some(verify) = s.get("verify") {
                    self.signature(verify, "chartRef");
                }
            }
            "HelmChart" => {
                let s = &source["spec"];
                let source_ref = &s["sourceRef"];
                let kind = source_ref["kind"].as_str().unwrap_or("HelmRepository");
                let name = source_ref["name"].as_str().unwrap_or_default();
                let chart = s["chart"].as_str().unwrap_or_default();
                self.chart_of_repository(kind, ns, name, chart, sources, "chartRef");
                self.copy(s, "/version", "chart.version");
                if let Some(verify) = s.get("verify") {
                    self.signature(verify, "chartRef");
                }
            }
            other => self.note(
                "chartRef",
                format!("a chartRef of kind {other} does not convert"),
            ),
        }
    }

    /// `spec.chart` for `chart` of the `kind` source `ns/name`.
    fn chart_of_repository(
        &mut self,
        kind: &str,
        ns: &str,
        name: &str,
        chart: &str,
        sources: &Sources,
        field: &str,
    ) {
        if kind == "GitRepository" {
            return self.chart_of_git(ns, name, chart, sources, field);
        }
        if kind != "HelmRepository" {
            self.note(
                field,
                format!("a chart from a {kind} does not convert: only HelmRepository, GitRepository and OCIRepository sources do"),
            );
            return;
        }
        let Some(repository) = sources.get(kind, ns, name) else {
            self.note(
                field,
                format!("HelmRepository {ns}/{name} is not in the input: set spec.chart.repo (or oci) by hand"),
            );
            self.set("chart.name", json!(chart));
            return;
        };
        let s = &repository["spec"];
        let url = s["url"].as_str().unwrap_or_default();
        if s["type"] == "oci" || url.starts_with("oci://") {
            self.set(
                "chart.oci",
                json!(format!("{}/{chart}", url.trim_end_matches('/'))),
            );
        } else {
            self.set("chart.repo", json!(url));
            self.set("chart.name", json!(chart));
        }
        self.credentials(s);
    }

    /// `spec.chart.git` for the chart at path `chart` of GitRepository
    /// `ns/name`; the release's `valuesFiles` (paths in the same
    /// repository) come with it.
    fn chart_of_git(&mut self, ns: &str, name: &str, chart: &str, sources: &Sources, field: &str) {
        let Some(repository) = sources.get("GitRepository", ns, name) else {
            self.note(
                field,
                format!(
                    "GitRepository {ns}/{name} is not in the input: set spec.chart.git by hand"
                ),
            );
            return;
        };
        let s = &repository["spec"];
        let mut git = json!({ "url": s["url"], "path": relative(chart) });
        let r = &s["ref"];
        let reference = match r["name"].as_str() {
            Some(full) if full.starts_with("refs/heads/") => {
                json!({ "branch": full.trim_start_matches("refs/heads/") })
            }
            Some(full) if full.starts_with("refs/tags/") => {
                json!({ "tag": full.trim_start_matches("refs/tags/") })
            }
            Some(full) => {
                self.note(field, format!("GitRepository {ns}/{name}: ref.name {full} is neither a branch nor a tag; set chart.git.ref by hand"));
                json!({})
            }
            // Flux's precedence: commit, then semver, then tag, then branch.
            None => ["commit", "semver", "tag", "branch"]
                .into_iter()
                .find_map(|k| r[k].as_str().map(|v| json!({ k: v })))
                .unwrap_or_else(|| json!({ "branch": "master" })),
        };
        git["ref"] = reference;
        if let Some(secret) = s.pointer("/secretRef/name") {
            git["secretRef"] = json!({ "name": secret });
        }
        for (key, why) in [
            (
                "ignore",
                "the chart is read from its path; ignore rules do not apply",
            ),
            ("include", "other repositories are not included"),
            ("recurseSubmodules", "submodules are not fetched"),
            ("proxySecretRef", "a proxy is not supported"),
        ] {
            if s.get(key).is_some() {
                self.note(
                    field,
                    format!("GitRepository {ns}/{name}: spec.{key} not converted: {why}"),
                );
            }
        }
        self.set("chart.git", git);
        if let Some(verify) = s.get("verify") {
            let mut converted = json!({ "mode": verify["mode"].as_str().unwrap_or("HEAD") });
            if let Some(secret) = verify.pointer("/secretRef/name") {
                converted["secretRef"] = json!({ "name": secret });
            }
            self.set("chart.verify", converted);
            self.note(
                field,
                format!("GitRepository {ns}/{name}: spec.verify converted to spec.chart.verify; the operator reads OpenPGP keys only from Secret keys ending in .asc or .gpg (SSH keys: .pub) — rename them if Flux's Secret names them otherwise"),
            );
        }
    }

    /// A chart signature check (`verify` of a HelmChart template, an
    /// OCIRepository or a HelmChart): cosign becomes `spec.chart.verify`
    /// with the same keys or keyless identities; notation has none here,
    /// and says so — the chart would install unverified.
    fn signature(&mut self, verify: &Value, field: &str) {
        match verify["provider"].as_str().unwrap_or("cosign") {
            "cosign" => {
                let mut converted = json!({ "provider": "cosign" });
                if let Some(secret) = verify.pointer("/secretRef/name") {
                    converted["secretRef"] = json!({ "name": secret });
                }
                if let Some(identities) = verify.get("matchOIDCIdentity") {
                    converted["matchOIDCIdentity"] = identities.clone();
                }
                self.set("chart.verify", converted);
            }
            other => self.note(
                &format!("{field}.provider"),
                format!("{other} signatures are not checked by the operator: spec.chart.verify is not set and the chart would install unverified — verify it with cosign, or set spec.chart.verify by hand"),
            ),
        }
    }

    /// A Git chart's `valuesFiles`: paths in the same repository, as
    /// `valuesFiles` reads them (their "not converted" notes withdrawn).
    fn values_files_of_git(&mut self, spec: &Value) {
        self.notes.retain(|n| {
            !matches!(
                generic_field(&n.field).as_str(),
                "chart.spec.valuesFiles" | "chart.spec.ignoreMissingValuesFiles"
            )
        });
        if let Some(files) = spec
            .pointer("/chart/spec/valuesFiles")
            .and_then(Value::as_array)
        {
            let files: Vec<Value> = files
                .iter()
                .filter_map(Value::as_str)
                .map(|f| json!(relative(f)))
                .collect();
            self.set("valuesFiles", json!(files));
        }
        self.copy(
            spec,
            "/chart/spec/ignoreMissingValuesFiles",
            "ignoreMissingValuesFiles",
        );
    }

    /// A source's `secretRef` and `insecure`.
    fn credentials(&mut self, source_spec: &Value) {
        if let Some(secret) = source_spec.pointer("/secretRef/name") {
            self.set("chart.credentialsSecretRef", json!({ "name": secret }));
        }
        if source_spec["insecure"] == true {
            self.set("chart.insecure", json!(true));
        }
        if source_spec.get("certSecretRef").is_some() {
            self.note(
                "chart",
                "the source's certSecretRef: put its ca.crt in the credentials Secret",
            );
        }
    }

    /// Everything but the chart.
    fn settings(&mut self, spec: &Value, name: &str) {
        self.set("adopt", json!(true));
        // Flux's default release name: [targetNamespace-]name.
        match (spec.get("releaseName"), spec["targetNamespace"].as_str()) {
            (Some(r), _) => self.set("releaseName", r.clone()),
            (None, Some(target)) => {
                let release = format!("{target}-{name}");
                if release.len() > 53 {
                    self.note(
                        "releaseName",
                        format!("Flux shortens the release name {release} with a hash: set spec.releaseName to the name helm-controller used"),
                    );
                }
                self.set("releaseName", json!(release));
            }
            (None, None) => {}
        }
        for (from, to) in [
            ("/targetNamespace", "targetNamespace"),
            ("/serviceAccountName", "serviceAccountName"),
            ("/suspend", "suspend"),
            ("/maxHistory", "maxHistory"),
            ("/values", "values"),
            ("/commonMetadata", "commonMetadata"),
            ("/install/createNamespace", "createNamespace"),
            ("/install/disableHooks", "install.disableHooks"),
            (
                "/install/disableSchemaValidation",
                "install.skipSchemaValidation",
            ),
            ("/install/serverSideApply", "install.serverSideApply"),
            ("/install/disableWaitForJobs", "install.disableWaitForJobs"),
            ("/upgrade/disableWaitForJobs", "upgrade.disableWaitForJobs"),
            ("/upgrade/disableHooks", "upgrade.disableHooks"),
            (
                "/upgrade/disableSchemaValidation",
                "upgrade.skipSchemaValidation",
            ),
            ("/upgrade/serverSideApply", "upgrade.serverSideApply"),
            ("/upgrade/force", "upgrade.force"),
            ("/upgrade/cleanupOnFail", "upgrade.cleanupOnFail"),
            (
                "/install/disableOpenAPIValidation",
                "install.disableOpenAPIValidation",
            ),
            (
                "/upgrade/disableOpenAPIValidation",
                "upgrade.disableOpenAPIValidation",
            ),
            (
                "/upgrade/chartNameChangeStrategy",
                "upgrade.chartNameChangeStrategy",
            ),
            ("/rollback/disableHooks", "rollback.disableHooks"),
            ("/rollback/force", "rollback.force"),
            ("/rollback/cleanupOnFail", "rollback.cleanupOnFail"),
            ("/rollback/serverSideApply", "rollback.serverSideApply"),
            (
                "/rollback/disableWaitForJobs",
                "rollback.disableWaitForJobs",
            ),
            ("/uninstall/disableHooks", "uninstall.disableHooks"),
            ("/uninstall/keepHistory", "uninstall.keepHistory"),
            (
                "/uninstall/deletionPropagation",
                "uninstall.deletionPropagation",
            ),
            ("/test/enable", "test.enable"),
            ("/test/timeout", "test.timeout"),
            ("/test/filters", "test.filters"),
            ("/test/ignoreFailures", "test.ignoreFailures"),
            ("/driftDetection/mode", "drift.mode"),
            ("/postRenderStrategy", "postRenderStrategy"),
        ] {
            self.copy(spec, from, to);
        }
        self.kube_config(spec);
        self.interval_and_timeout(spec);
        self.strategies(spec);
        self.waiting(spec);
        self.crds(spec);
        self.remediation(spec);
        self.lists(spec);
    }

    /// `kubeConfig.secretRef` as it is: the same Secret and key (Flux's
    /// key defaults to `value`, then `value.yaml`, as the HelmApp's does),
    /// so the release goes to the same remote cluster
    /// (docs/remote-clusters.md). `configMapRef` (workload identity) is
    /// noted by the field table.
    fn kube_config(&mut self, spec: &Value) {
        let Some(secret) = spec.pointer("/kubeConfig/secretRef") else {
            return;
        };
        let Some(name) = secret["name"].as_str().filter(|n| !n.is_empty()) else {
            self.note(
                "kubeConfig.secretRef",
                "no Secret name: set spec.kubeConfig.secretRef by hand",
            );
            return;
        };
        let mut to = json!({ "name": name });
        if let Some(key) = secret["key"].as_str().filter(|k| !k.is_empty()) {
            to["key"] = json!(key);
        }
        self.set("kubeConfig.secretRef", to);
    }

    fn interval_and_timeout(&mut self, spec: &Value) {
        match (spec.get("interval"), spec.pointer("/chart/spec/interval")) {
            (Some(i), _) | (None, Some(i)) => self.set("interval", i.clone()),
            (None, None) => {}
        }
        // Flux's per-action timeouts over the HelmRelease's: the same.
        if let Some(t) = spec.get("timeout") {
            self.set("timeout", t.clone());
        }
        for action in ["install", "upgrade", "rollback", "uninstall"] {
            if let Some(t) = spec.pointer(&format!("/{action}/timeout")) {
                self.set(&format!("{action}.timeout"), t.clone());
            }
        }
    }

    /// `install/upgrade.strategy` as they are; a `retryInterval` beside
    /// `RemediateOnFailure` (which Flux's schema refuses, and the
    /// HelmApp's too) is left out.
    fn strategies(&mut self, spec: &Value) {
        for action in ["install", "upgrade"] {
            let Some(mut strategy) = spec.pointer(&format!("/{action}/strategy")).cloned() else {
                continue;
            };
            if strategy["name"] != "RetryOnFailure"
                && let Some(fields) = strategy.as_object_mut()
            {
                fields.remove("retryInterval");
            }
            self.set(&format!("{action}.strategy"), strategy);
        }
    }

    /// Flux waits unless told not to; a HelmApp only with `wait: true`.
    fn waiting(&mut self, spec: &Value) {
        let off = ["install", "upgrade"]
            .map(|a| spec.pointer(&format!("/{a}/disableWait")) == Some(&json!(true)));
        self.set("wait", json!(!off[0] && !off[1]));
        if off[0] != off[1] {
            self.note(
                if off[0] {
                    "install.disableWait"
                } else {
                    "upgrade.disableWait"
                },
                "one wait serves install and upgrade: not waiting for either",
            );
            self.set("wait", json!(false));
        }
        // Flux's rollback and uninstall wait unless told not to: so do the
        // converted ones.
        for action in ["rollback", "uninstall"] {
            let off = spec.pointer(&format!("/{action}/disableWait")) == Some(&json!(true));
            self.set(&format!("{action}.wait"), json!(!off));
        }
    }

    fn crds(&mut self, spec: &Value) {
        let install = if spec.pointer("/install/skipCRDs") == Some(&json!(true)) {
            Some("Skip")
        } else {
            spec.pointer("/install/crds").and_then(Value::as_str)
        };
        let upgrade = spec.pointer("/upgrade/crds").and_then(Value::as_str);
        // Flux: installs create CRDs, upgrades skip them, unless told.
        let chosen = match (install, upgrade) {
            (_, Some("CreateReplace")) => Some("CreateReplace"),
            (Some(i), _) => Some(i),
            (None, Some(u)) => Some(u),
            (None, None) => None,
        };
        if let Some(c) = chosen {
            self.set("crds", json!(c));
            if upgrade.is_some_and(|u| u != c) {
                self.note(
                    "upgrade.crds",
                    format!("one CRD policy serves install and upgrade: {c}"),
                );
            }
        }
    }

    fn remediation(&mut self, spec: &Value) {
        let retries = spec
            .pointer("/upgrade/remediation/retries")
            .or(spec.pointer("/install/remediation/retries"));
        if let Some(r) = retries {
            self.set("remediation.retries", r.clone());
        }
        let strategy = spec.pointer("/upgrade/remediation/strategy");
        if let Some(s) = strategy {
            self.set("remediation.onFailure", s.clone());
        }
        // Flux's remediateLastFailure: whether the failure left once the
        // retries are spent is remediated — ours is onFailure, which acts
        // exactly then (false: the release stays as helm left it).
        // onFailure acts after a failed upgrade: the upgrade's setting (the
        // install's remedy is always an uninstall and a retry).
        let last = spec.pointer("/upgrade/remediation/remediateLastFailure");
        match last.and_then(Value::as_bool) {
            Some(false) => self.set("remediation.onFailure", json!("none")),
            Some(true) if strategy.is_none() => {
                self.set("remediation.onFailure", json!("rollback"))
            }
            _ => {}
        }
        let ignore = ["install", "upgrade"].iter().any(|a| {
            spec.pointer(&format!("/{a}/remediation/ignoreTestFailures")) == Some(&json!(true))
        });
        if ignore {
            self.set("test.ignoreFailures", json!(true));
        }
    }

    /// `dependsOn`, `healthCheckExprs`, `valuesFrom`, `driftDetection.ignore`,
    /// `postRenderers`.
    fn lists(&mut self, spec: &Value) {
        let items = |p: &str| {
            spec.pointer(p)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let depends = items("/dependsOn")
            .iter()
            .map(|d| {
                let keys = [
                    ("name", "name"),
                    ("namespace", "namespace"),
                    ("readyExpr", "readyExpr"),
                ];
                let mut to = picked(d, &keys);
                to.insert("kind".into(), json!("HelmApp"));
                Value::Object(to)
            })
            .collect();
        self.set_list("dependsOn", depends);
        // Flux's spelling and semantics (docs/dependencies.md).
        let checks = items("/healthCheckExprs")
            .iter()
            .map(|h| {
                let keys =
                    ["apiVersion", "kind", "current", "inProgress", "failed"].map(|k| (k, k));
                Value::Object(picked(h, &keys))
            })
            .collect();
        self.set_list("healthCheckExprs", checks);
        let values_from: Vec<Value> = items("/valuesFrom")
            .iter()
            .filter(|v| v.get("name").is_some())
            .map(|v| {
                let keys = [
                    ("kind", "kind"),
                    ("name", "name"),
                    ("valuesKey", "key"),
                    ("targetPath", "targetPath"),
                    ("literal", "literal"),
                    ("optional", "optional"),
                ];
                Value::Object(picked(v, &keys))
            })
            .collect();
        // Flux merges valuesFrom first and inline values last: so does the
        // converted HelmApp.
        if !values_from.is_empty() && spec.get("values").is_some_and(|v| !v.is_null()) {
            self.set("inlineValuesLast", json!(true));
        }
        self.set_list("valuesFrom", values_from);
        let ignore = items("/driftDetection/ignore")
            .iter()
            .map(|rule| {
                let mut to = json!({ "paths": rule["paths"] });
                if let Some(t) = rule.get("target") {
                    // Flux's semantics: patterns and selectors alike.
                    let target = [
                        "group",
                        "version",
                        "kind",
                        "name",
                        "namespace",
                        "labelSelector",
                        "annotationSelector",
                    ]
                    .map(|k| (k, k));
                    to["target"] = Value::Object(picked(t, &target));
                }
                to
            })
            .collect();
        self.set_list("drift.ignore", ignore);
        let renderers = items("/postRenderers")
            .iter()
            .map(|r| self.post_renderer(&r["kustomize"]))
            .collect();
        self.set_list("postRenderers", renderers);
    }

    /// Post-renderer `i`'s `kustomize`: its patches (targets select as
    /// kustomize's do) and images.
    fn post_renderer(&mut self, kustomize: &Value) -> Value {
        let mut to = picked(kustomize, &[("images", "images")]);
        let patches = kustomize["patches"].as_array().cloned().unwrap_or_default();
        if !patches.is_empty() {
            to.insert("patches".into(), json!(patches));
        }
        json!({ "kustomize": to })
    }

    /// Sets `path` to `items` unless there are none.
    fn set_list(&mut self, path: &str, items: Vec<Value>) {
        if !items.is_empty() {
            self.set(path, Value::Array(items));
        }
    }
}

/// The members of `from` that `keys` names, each under its new name
/// (`(from, to)`), in `keys`' order.
fn picked(from: &Value, keys: &[(&str, &str)]) -> Map<String, Value> {
    keys.iter()
        .filter_map(|(key, to)| Some((to.to_string(), from.get(*key)?.clone())))
        .collect()
}

/// Reads YAML documents from `paths` (`-` or none: stdin), writes the
/// HelmApps to stdout as YAML and the notes to stderr. Exit 2 only when
/// the input cannot be read.
pub fn main(paths: &[std::path::PathBuf]) -> ExitCode {
    let mut texts = Vec::new();
    let stdin = paths.is_empty() || paths.iter().any(|p| p.as_os_str() == "-");
    if stdin {
        let mut text = String::new();
        if let Err(e) = std::io::stdin().read_to_string(&mut text) {
            eprintln!("hossted-operator convert: cannot read stdin: {e}");
            return ExitCode::from(2);
        }
        texts.push(("stdin".to_string(), text));
    }
    for path in paths.iter().filter(|p| p.as_os_str() != "-") {
        match std::fs::read_to_string(path) {
            Ok(text) => texts.push((path.display().to_string(), text)),
            Err(e) => {
                eprintln!(
                    "hossted-operator convert: cannot read {}: {e}",
                    path.display()
                );
                return ExitCode::from(2);
            }
        }
    }
    let mut documents = Vec::new();
    for (name, text) in &texts {
        match read_documents(text) {
            Ok(docs) => documents.extend(docs),
            Err(e) => {
                eprintln!("hossted-operator convert: {name} is not YAML: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let converted = convert(&documents);
    for note in &converted.notes {
        eprintln!("{note}");
    }
    let yaml: Vec<String> = converted
        .apps
        .iter()
        .filter_map(|a| serde_yaml_ng::to_string(a).ok())
        .collect();
    print!("{}", yaml.join("---\n"));
    if converted.apps.is_empty() {
        eprintln!("hossted-operator convert: no HelmRelease (helm.toolkit.fluxcd.io) in the input");
    }
    ExitCode::SUCCESS
}

/// Every non-empty YAML document of `text`, as JSON values.
pub fn read_documents(text: &str) -> Result<Vec<Value>, String> {
    crate::lean::yaml::check(text).map_err(|e| e.to_string())?;
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value: Value = serde::Deserialize::deserialize(doc).map_err(|e| e.to_string())?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

#[cfg(test)]
mod tests;

/// A path of a Flux source, as `chart.git` reads it (no leading `./`).
fn relative(path: &str) -> String {
    path.trim_start_matches("./")
        .trim_start_matches('/')
        .to_string()
}

/// `field` without list indexes (`valuesFrom[1].literal` →
/// `valuesFrom.literal`), as the field table names it.
fn generic_field(field: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for c in field.chars() {
        match c {
            '[' => skipping = true,
            ']' => skipping = false,
            c if !skipping => out.push(c),
            _ => {}
        }
    }
    out
}
