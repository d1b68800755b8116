//! `kubectl hossted diff -n NS NAME`: what the next reconcile would change
//! in the release, as a unified diff of the live release's manifest (`helm
//! get manifest`) against the one helm renders now from the same inputs the
//! operator would use — the chart resolved and fetched from its repository
//! or registry, the values merged from every source (read with the user's
//! own rights), the post-renderers applied — by `helm upgrade --install
//! --dry-run`. Secrets' values are masked on both sides (a changed one
//! says so, never what it was or is). Exit status: 0 no difference, 1 a
//! difference, 2 an error (as `kubectl diff`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use apis::helmapp::HelmApp;
use kube::Api;
use serde::Deserialize;
use serde_json::Value;

use super::namespace_of;
use crate::delivery::helm::post_render;
use crate::delivery::helmapp::Target;
use crate::delivery::helmapp::inputs;
use crate::delivery::source::{Credentials, SourceLimits, fetch::Sources};

/// `kubectl hossted diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The HelmApp's namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// The HelmApp.
    pub name: String,
    /// The helm binary that renders.
    #[arg(long, default_value = "helm")]
    pub helm_binary: PathBuf,
}

/// Whether the release would change; `Err`: it could not be told.
pub async fn run(client: kube::Client, a: &DiffArgs) -> Result<bool, String> {
    let ns = namespace_of(&client, a.namespace.as_ref());
    let app = Api::<HelmApp>::namespaced(client.clone(), &ns)
        .get(&a.name)
        .await
        .map_err(|e| format!("HelmApp {ns}/{}: {e}", a.name))?;
    let target = Target::of(&app);
    let work = tempdir()?;
    let chart = chart_of(&client, &app, &work.0).await?;
    let values = inputs::merged_values(&client, &app).await?;
    let helm = Helm {
        binary: &a.helm_binary,
        target: &target,
    };
    let live = helm.live_manifest()?;
    let next = helm.render(&chart, &values, &app, &work.0)?;
    let text = diff(&live, &next, &target.key());
    print!("{text}");
    Ok(!text.is_empty())
}

/// The chart, fetched into `work` as the operator fetches it.
async fn chart_of(client: &kube::Client, app: &HelmApp, work: &Path) -> Result<PathBuf, String> {
    let chart = &app.spec.chart;
    if chart.repo.is_empty() && chart.oci.is_empty() {
        return Err(
            "chart.path is on the operator's filesystem (--chart-path-root): diff renders repo and oci charts only"
                .into(),
        );
    }
    let ns = app.metadata.namespace.clone().unwrap_or_default();
    let credentials = match &chart.credentials_secret_ref {
        None => Credentials::default(),
        Some(r) => {
            let scope = format!("{ns}/{}", r.name);
            inputs::credentials(client, app, &r.name, scope)
                .await
                .map_err(|(e, _)| e)?
        }
    };
    let sources = std::sync::Arc::new(Sources::new(work, SourceLimits::default()));
    let local = sources
        .fetch(&ns, chart, credentials)
        .await
        .map_err(|e| e.to_string())?;
    Ok(local.path)
}

struct Helm<'a> {
    binary: &'a Path,
    target: &'a Target,
}

impl Helm<'_> {
    fn command(&self) -> std::process::Command {
        let mut c = std::process::Command::new(self.binary);
        c.stderr(std::process::Stdio::piped());
        c
    }

    /// The deployed release's manifest (empty: none yet).
    fn live_manifest(&self) -> Result<String, String> {
        let out = self
            .command()
            .args([
                "get",
                "manifest",
                &self.target.release,
                "-n",
                &self.target.namespace,
            ])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.binary.display()))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && stderr.contains("release: not found") {
            return Ok(String::new());
        }
        if !out.status.success() {
            return Err(format!("helm get manifest: {}", stderr.trim()));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// What helm would apply now: `upgrade --install --dry-run`, values on
    /// stdin, post-rendered as the operator's run would be.
    fn render(
        &self,
        chart: &Path,
        values: &Value,
        app: &HelmApp,
        work: &Path,
    ) -> Result<String, String> {
        use std::io::Write;
        let config = post_render::Config::of(&app.spec);
        let file = match &config {
            Some(c) => Some(post_render::ConfigFile::write(work, c).map_err(|e| e.to_string())?),
            None => None,
        };
        let mut cmd = self.command();
        cmd.args(["upgrade", "--install", &self.target.release])
            .arg(chart)
            .args([
                "-n",
                &self.target.namespace,
                "--dry-run=client",
                "-o",
                "json",
                "--values",
                "-",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        if let Some(f) = &file {
            let me = std::env::current_exe().map_err(|e| e.to_string())?;
            cmd.arg("--post-renderer")
                .arg(me)
                .args([
                    "--post-renderer-args",
                    "post-render",
                    "--post-renderer-args",
                ])
                .arg(f.path());
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.binary.display()))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(values.to_string().as_bytes());
        }
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            // helm's message may quote values: say only that it failed and
            // where to look.
            let redacted = crate::delivery::helm::values::Redactor::of(values)
                .redact(String::from_utf8_lossy(&out.stderr).trim());
            return Err(format!(
                "helm could not render the next release: {redacted}"
            ));
        }
        #[derive(Deserialize)]
        struct Release {
            #[serde(default)]
            manifest: String,
        }
        let r: Release =
            serde_json::from_slice(&out.stdout).map_err(|e| format!("helm's output: {e}"))?;
        Ok(r.manifest)
    }
}

/// A temporary directory, removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir() -> Result<TempDir, String> {
    let dir = std::env::temp_dir().join(format!("kubectl-hossted-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(TempDir(dir))
}

/// The objects of a manifest by `Kind namespace/name`.
fn objects(manifest: &str) -> BTreeMap<String, Value> {
    serde_yaml_ng::Deserializer::from_str(manifest)
        .filter_map(|d| Value::deserialize(d).ok())
        .filter(Value::is_object)
        .map(|o| {
            let text = |p: &str| {
                o.pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let at = match text("/metadata/namespace") {
                ns if ns.is_empty() => text("/metadata/name"),
                ns => format!("{ns}/{}", text("/metadata/name")),
            };
            (format!("{} {at}", text("/kind")), o)
        })
        .collect()
}

/// Masks the values of a Secret on both sides: `***` where they agree,
/// `*** (old)` and `*** (new)` where they differ.
fn mask_secrets(old: &mut Value, new: &mut Value) {
    for field in ["data", "stringData"] {
        let before = old
            .get(field)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let after = new
            .get(field)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mark = |v: &mut Value, other: &serde_json::Map<String, Value>, side: &str| {
            if let Some(m) = v.get_mut(field).and_then(Value::as_object_mut) {
                for (k, val) in m.iter_mut() {
                    let same = other.get(k) == Some(&*val);
                    *val = Value::String(if same {
                        "***".into()
                    } else {
                        format!("*** ({side})")
                    });
                }
            }
        };
        mark(old, &after, "old");
        mark(new, &before, "new");
    }
}

/// The unified diff, object by object (empty: no difference).
pub fn diff(live: &str, next: &str, release: &str) -> String {
    let (mut before, mut after) = (objects(live), objects(next));
    let keys: std::collections::BTreeSet<String> =
        before.keys().chain(after.keys()).cloned().collect();
    let mut out = String::new();
    for key in keys {
        let (mut old, mut new) = (
            before.remove(&key).unwrap_or(Value::Null),
            after.remove(&key).unwrap_or(Value::Null),
        );
        if key.starts_with("Secret ") {
            mask_secrets(&mut old, &mut new);
        }
        if old == new {
            continue;
        }
        let text = |v: &Value| {
            if v.is_null() {
                String::new()
            } else {
                serde_yaml_ng::to_string(v).unwrap_or_default()
            }
        };
        let (a, b) = (text(&old), text(&new));
        let d = similar::TextDiff::from_lines(&a, &b);
        out.push_str(
            &d.unified_diff()
                .context_radius(3)
                .header(
                    &format!("{release} live: {key}"),
                    &format!("{release} next: {key}"),
                )
                .to_string(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIVE: &str = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: apps}\ndata: {greeting: hello}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: apps}\ndata: {password: b2xk, user: YWRtaW4=}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: gone, namespace: apps}\nspec: {ports: [{port: 80}]}\n";

    #[test]
    fn a_changed_field_an_added_and_a_removed_object_and_no_secret_value() {
        let next = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: apps}\ndata: {greeting: hi}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: apps}\ndata: {password: bmV3, user: YWRtaW4=}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: added, namespace: apps}\n";
        let d = diff(LIVE, next, "apps/web");
        assert!(d.contains("-  greeting: hello\n+  greeting: hi\n"), "{d}");
        assert!(d.contains("+++ apps/web next: ConfigMap apps/added"), "{d}");
        assert!(d.contains("--- apps/web live: Service apps/gone"), "{d}");
        assert!(
            d.contains("-  password: '*** (old)'\n+  password: '*** (new)'\n"),
            "{d}"
        );
        assert!(
            d.contains(" user: '***'\n"),
            "an unchanged key is masked alike: {d}"
        );
        assert!(
            !d.contains("b2xk") && !d.contains("bmV3") && !d.contains("YWRtaW4="),
            "{d}"
        );
    }

    #[test]
    fn the_same_release_is_no_difference() {
        assert_eq!(diff(LIVE, LIVE, "apps/web"), "");
    }
}
