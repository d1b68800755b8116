//! Post-rendering inside the helm run: helm pipes the manifests it
//! rendered through `hossted-operator post-render <file>` (its
//! `--post-renderer`), so what helm applies and stores is the patched
//! result — drift, readiness and the inventory all read that one manifest.
//!
//! In order: each `postRenderers[].kustomize` — its `patches` (a JSON 6902
//! operation list, or a JSON merge patch object, on the objects `target`
//! names), then its `images` — and last `commonMetadata` (labels and
//! annotations of every object's own metadata, overriding).
//!
//! Hooks: helm 4 pipes them through the post-renderer with the other
//! templates; `postRenderStrategy: nohooks` passes them on as the chart
//! has them (helm 3's way, whose helm never sends them). The chart's
//! `crds/` never reach a post-renderer.
//!
//! The settings reach the subcommand as a file of the private work
//! directory ([`ConfigFile`], removed when the run ends), never as a
//! command-line argument.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use apis::helmapp::{
    CommonMetadata, HelmAppSpec, KustomizeImage, PatchTarget, PostRenderStrategy, PostRenderer,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::delivery::selector::{Candidate, Fields, ObjectSelector};

/// What one helm run's post-renderer does (the file's content).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    #[serde(default)]
    pub post_renderers: Vec<PostRenderer>,
    #[serde(default)]
    pub common_metadata: Option<CommonMetadata>,
    /// Whether hooks are changed too.
    #[serde(default)]
    pub strategy: PostRenderStrategy,
}

impl Config {
    /// The post-rendering `spec` asks for; `None`: none.
    pub fn of(spec: &HelmAppSpec) -> Option<Config> {
        spec.post_renders().then(|| Config {
            post_renderers: spec.post_renderers.clone(),
            common_metadata: spec.common_metadata.clone(),
            strategy: spec.post_render_strategy,
        })
    }

    /// Every patch parsed: the first that is not a patch, named by its
    /// place (`postRenderers[0].kustomize.patches[1]`).
    pub fn check(&self) -> Result<(), String> {
        // The CRD's bounds, held in code too (objects stored before them).
        let patches = self.patches().count();
        if self.post_renderers.len() > 16 || patches > 16 * 64 {
            return Err(format!(
                "postRenderers: {} with {patches} patches, at most 16 with 64 patches each",
                self.post_renderers.len()
            ));
        }
        self.patches().try_for_each(|(at, p)| {
            parse_patch(&p.patch).map_err(|e| format!("{at}: {e}"))?;
            p.target
                .as_ref()
                .map(compiled)
                .transpose()
                .map(|_| ())
                .map_err(|e| format!("{at}.target.{e}"))
        })
    }

    /// Merge patches that set a list: the list is replaced whole (a
    /// strategic merge, as Flux's kustomize does, would merge it by key).
    pub fn lists_replaced(&self) -> Vec<String> {
        self.patches()
            .filter(
                |(_, p)| matches!(parse_patch(&p.patch), Ok(Patch::Merge(m)) if sets_a_list(&m)),
            )
            .map(|(at, _)| at)
            .collect()
    }

    fn patches(&self) -> impl Iterator<Item = (String, &apis::helmapp::KustomizePatch)> {
        self.post_renderers.iter().enumerate().flat_map(|(i, r)| {
            r.kustomize.iter().flat_map(move |k| {
                k.patches
                    .iter()
                    .enumerate()
                    .map(move |(j, p)| (format!("postRenderers[{i}].kustomize.patches[{j}]"), p))
            })
        })
    }
}

/// A patch as written: operations, or a merge patch.
#[derive(Debug, Clone, PartialEq)]
enum Patch {
    Json6902(json_patch::Patch),
    Merge(Value),
}

/// A patch's text (JSON or YAML): a list is JSON 6902, an object a merge
/// patch. Errors name the problem, never the text.
fn parse_patch(text: &str) -> Result<Patch, String> {
    crate::lean::yaml::check(text).map_err(|e| format!("refused: {e}"))?;
    let v: Value = serde_yaml_ng::from_str(text).map_err(|_| "not JSON or YAML".to_string())?;
    match v {
        Value::Array(_) => serde_json::from_value(v)
            .map(Patch::Json6902)
            .map_err(|e| format!("not a list of JSON 6902 operations: {e}")),
        Value::Object(_) => Ok(Patch::Merge(v)),
        _ => Err("a patch is a list of JSON 6902 operations or a merge patch object".into()),
    }
}

fn sets_a_list(v: &Value) -> bool {
    match v {
        Value::Array(_) => true,
        Value::Object(m) => m.values().any(sets_a_list),
        _ => false,
    }
}

/// Post-renders a manifest stream (see the module docs). Documents that are
/// empty are dropped; every other is written back as a JSON document.
pub fn render(config: &Config, manifests: &str) -> Result<String, String> {
    crate::lean::yaml::check(manifests).map_err(|e| format!("helm's output refused: {e}"))?;
    let mut all = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(manifests) {
        let v = Value::deserialize(doc).map_err(|e| format!("helm's output is not YAML: {e}"))?;
        if !v.is_null() {
            all.push(v);
        }
    }
    // What is changed, in helm's order; hooks kept as they are stay in
    // their place.
    let kept_as_is = |o: &Value| config.strategy == PostRenderStrategy::NoHooks && is_hook(o);
    let mut objects: Vec<&mut Value> = all.iter_mut().filter(|o| !kept_as_is(o)).collect();
    for (i, r) in config.post_renderers.iter().enumerate() {
        let Some(k) = &r.kustomize else { continue };
        for (j, p) in k.patches.iter().enumerate() {
            let at = format!("postRenderers[{i}].kustomize.patches[{j}]");
            let patch = parse_patch(&p.patch).map_err(|e| format!("{at}: {e}"))?;
            let target = p
                .target
                .clone()
                .or_else(|| implied_target(&patch))
                .map(|t| compiled(&t))
                .transpose()
                .map_err(|e| format!("{at}.target.{e}"))?;
            for o in objects.iter_mut().filter(|o| matches(target.as_ref(), o)) {
                apply(&patch, o).map_err(|e| format!("{at} on {}: {e}", describe(o)))?;
            }
        }
        for o in &mut objects {
            set_images(o, &k.images);
        }
    }
    if let Some(m) = &config.common_metadata {
        for o in &mut objects {
            add_metadata(o, m);
        }
    }
    // JSON, one document each: YAML to helm's parser, with every string
    // quoted — a YAML 1.2 writer leaves `yes` or `on` bare, which helm's
    // YAML 1.1 reading turns into booleans. No line of it starts with
    // `---` (every string is quoted), so helm splits it where it should.
    let mut out = String::new();
    for o in &all {
        out.push_str("---\n");
        out.push_str(&serde_json::to_string_pretty(o).map_err(|e| e.to_string())?);
        out.push('\n');
    }
    Ok(out)
}

/// Whether `o` is one of the chart's hooks (helm's `helm.sh/hook`
/// annotation).
fn is_hook(o: &Value) -> bool {
    o.pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key("helm.sh/hook"))
}

fn apply(patch: &Patch, o: &mut Value) -> Result<(), String> {
    match patch {
        Patch::Json6902(ops) => json_patch::patch(o, ops).map_err(|e| e.to_string()),
        Patch::Merge(m) => {
            json_patch::merge(o, m);
            Ok(())
        }
    }
}

/// A merge patch that names its object (`kind`, `metadata.name`) and has
/// no `target` applies to that object, as kustomize does.
fn implied_target(patch: &Patch) -> Option<PatchTarget> {
    let Patch::Merge(m) = patch else { return None };
    let kind = m.get("kind")?.as_str()?.to_string();
    let name = m
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // The object the patch names, exactly (targets are patterns).
    Some(PatchTarget {
        kind: regex::escape(&kind),
        name: regex::escape(name),
        ..Default::default()
    })
}

/// `t` compiled (see `crate::delivery::selector`).
fn compiled(t: &PatchTarget) -> Result<ObjectSelector, String> {
    ObjectSelector::compile(&Fields {
        group: &t.group,
        version: &t.version,
        kind: &t.kind,
        name: &t.name,
        namespace: &t.namespace,
        label_selector: &t.label_selector,
        annotation_selector: &t.annotation_selector,
    })
}

/// Whether `o` is one `target` names (none: every object).
fn matches(target: Option<&ObjectSelector>, o: &Value) -> bool {
    let Some(t) = target else { return true };
    let text = |p: &str| o.pointer(p).and_then(Value::as_str).unwrap_or_default();
    t.selects(&Candidate {
        api_version: text("/apiVersion"),
        kind: text("/kind"),
        name: text("/metadata/name"),
        namespace: text("/metadata/namespace"),
        document: Some(o),
    })
}

fn describe(o: &Value) -> String {
    let text = |p: &str| {
        o.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string()
    };
    format!("{} {}", text("/kind"), text("/metadata/name"))
}

/// Replaces the images `images` names in every container list of `o`
/// (`containers`, `initContainers`, `ephemeralContainers`, at any depth:
/// a Pod, a workload's template, a CronJob's job template).
fn set_images(o: &mut Value, images: &[KustomizeImage]) {
    if images.is_empty() {
        return;
    }
    match o {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                let containers = matches!(
                    k.as_str(),
                    "containers" | "initContainers" | "ephemeralContainers"
                );
                match v {
                    Value::Array(list) if containers => {
                        for c in list.iter_mut() {
                            if let Some(Value::String(image)) = c.get_mut("image")
                                && let Some(new) = replaced(image, images)
                            {
                                *image = new;
                            }
                        }
                    }
                    _ => set_images(v, images),
                }
            }
        }
        Value::Array(list) => list.iter_mut().for_each(|v| set_images(v, images)),
        _ => {}
    }
}

/// `image` with `images`' override for its name, if one names it.
fn replaced(image: &str, images: &[KustomizeImage]) -> Option<String> {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    // A tag is after the last ':' that follows the last '/' (a registry
    // port is not a tag).
    let (name, tag) = match name.rfind(':') {
        Some(i) if name.rfind('/').is_none_or(|s| s < i) => (&name[..i], Some(&name[i + 1..])),
        _ => (name, None),
    };
    let o = images.iter().find(|o| o.name == name)?;
    let new_name = if o.new_name.is_empty() {
        name
    } else {
        &o.new_name
    };
    Some(if !o.digest.is_empty() {
        format!("{new_name}@{}", o.digest)
    } else if !o.new_tag.is_empty() {
        format!("{new_name}:{}", o.new_tag)
    } else if let Some(d) = digest {
        format!("{new_name}@{d}")
    } else if let Some(t) = tag {
        format!("{new_name}:{t}")
    } else {
        new_name.to_string()
    })
}

/// `commonMetadata` on the object's own metadata (not its templates),
/// overriding what the chart set.
fn add_metadata(o: &mut Value, m: &CommonMetadata) {
    let Some(obj) = o.as_object_mut() else { return };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    for (field, add) in [("labels", &m.labels), ("annotations", &m.annotations)] {
        if add.is_empty() {
            continue;
        }
        let map = meta
            .entry(field)
            .or_insert_with(|| Value::Object(Default::default()));
        if !map.is_object() {
            *map = Value::Object(Default::default());
        }
        if let Some(map) = map.as_object_mut() {
            for (k, v) in add {
                map.insert(k.clone(), Value::String(v.clone()));
            }
        }
    }
}

/// Most a post-renderer reads from helm: far above any release helm can
/// store (1 MiB compressed in a Secret).
pub const MAX_INPUT: u64 = 256 * 1024 * 1024;

/// `hossted-operator post-render <file>`: helm's manifests on stdin, the
/// post-rendered ones on stdout; on error, one line on stderr (helm puts
/// it in its own) and exit status 1.
pub fn run_subcommand(config: &Path) -> std::process::ExitCode {
    match post_render_stdio(config) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("post-render: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn post_render_stdio(config: &Path) -> Result<(), String> {
    let text = std::fs::read(config).map_err(|e| format!("cannot read its settings: {e}"))?;
    let config: Config =
        serde_json::from_slice(&text).map_err(|e| format!("its settings do not parse: {e}"))?;
    let mut input = String::new();
    std::io::stdin()
        .take(MAX_INPUT)
        .read_to_string(&mut input)
        .map_err(|e| format!("cannot read helm's output: {e}"))?;
    let out = render(&config, &input)?;
    std::io::stdout()
        .write_all(out.as_bytes())
        .map_err(|e| format!("cannot write: {e}"))
}

/// A post-renderer's settings in a file of the work directory, readable by
/// the operator's user only, removed when dropped (the run has ended).
#[derive(Debug)]
pub struct ConfigFile {
    path: PathBuf,
}

impl ConfigFile {
    /// Writes `config` to `<work_dir>/post-render/<random>.json`.
    pub fn write(work_dir: &Path, config: &Config) -> std::io::Result<ConfigFile> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = work_dir.join("post-render");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{}.json", uuid::Uuid::new_v4()));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        let file_guard = ConfigFile { path };
        file.write_all(&serde_json::to_vec(config).map_err(std::io::Error::other)?)?;
        Ok(file_guard)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests;
