//! `kubectl hossted diff -n NS NAME`: what the next reconcile would change
//! in the release, as a unified diff of the live release's manifest (`helm
//! get manifest`) against the one helm renders now from the same inputs the
//! operator would use — the chart resolved and fetched from its repository
//! or registry, the values merged from every source (read with the user's
//! own rights), the post-renderers applied — by `helm upgrade --install
//! --dry-run`. Secrets' values are masked on both sides (a changed one
//! says so, never what it was or is), and so is every value that came
//! from a `valuesFrom` Secret, wherever the chart renders it. Exit status: 0 no difference, 1 a
//! difference, 2 an error (as `kubectl diff`).

use std::path::{Path, PathBuf};

use apis::helmapp::HelmApp;
use kube::Api;
use serde::Deserialize;
use serde_json::Value;

use super::args::namespace_of;
use crate::delivery::helm::{HelmCli, args, manifest_diff, post_render, says_release_not_found};
use crate::delivery::helmapp::Target;
use crate::delivery::helmapp::observe::inputs;
use crate::delivery::source::{Credentials, SourceLimits, ValuesFile, fetch::Sources};

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
    let text = masked_diff(&client, &app, &a.helm_binary, None).await?;
    print!("{text}");
    Ok(!text.is_empty())
}

/// The unified diff of the live release against the next one, Secret
/// values and `valuesFrom` Secret values masked (empty: no difference).
/// Also what `kubectl hossted ui` shows for a pending change.
/// `as_user`: the user and groups helm impersonates (the served web view
/// renders as its signed-in user; the local one and `kubectl hossted diff`
/// run helm with the user's own kubeconfig: `None`).
pub async fn masked_diff(
    client: &kube::Client,
    app: &HelmApp,
    helm_binary: &Path,
    as_user: Option<(&str, &[String])>,
) -> Result<String, String> {
    let target = Target::of(app);
    // A positional of helm's argv, whatever the CRD in force let through.
    crate::delivery::helm::check_release_name(&target.release, &target.namespace)?;
    let work = tempdir()?;
    let (chart, files) = chart_of(client, app, &work.0).await?;
    let (values, from_secrets) = inputs::merged_values_and_secrets(client, app, &files).await?;
    let helm = Helm {
        binary: helm_binary,
        target: &target,
        as_user,
    };
    let live = helm.live_manifest()?;
    let live_values = helm.live_values()?;
    let next = helm.render(&chart, &values, app, &work.0)?;
    // A valuesFrom Secret's value a chart renders into another kind (a
    // ConfigMap, an argument) is masked like a Secret's own data — on the
    // live side with the values of the revision it shows: a Secret changed
    // since left its old value there.
    let text = manifest_diff::diff(&live, &next, &target.key()).text;
    Ok(diff_redactor(&live_values, &values, from_secrets).redact(&text))
}

/// What a diff is masked with: the strings of the current `valuesFrom`
/// Secrets (`from_secrets`), and every string of the live revision's
/// values (`live`) that the current values do not hold as a plain value —
/// the old value of a Secret among them (which source gave a live value is
/// not recorded; a changed plain value is masked on the live side too,
/// and shown on the next).
fn diff_redactor(
    live: &Value,
    current: &Value,
    from_secrets: Vec<String>,
) -> crate::delivery::helm::values::Redactor {
    use crate::delivery::helm::values::{Redactor, secrets_of};
    let plain: std::collections::HashSet<String> = secrets_of(current)
        .into_iter()
        .filter(|s| !from_secrets.contains(s))
        .collect();
    let mut masked = from_secrets;
    masked.extend(secrets_of(live).into_iter().filter(|s| !plain.contains(s)));
    Redactor::of_strings(masked)
}

/// The chart, fetched into `work` as the operator fetches it, and its
/// `valuesFiles` (read from the chart's own Git commit).
async fn chart_of(
    client: &kube::Client,
    app: &HelmApp,
    work: &Path,
) -> Result<(PathBuf, Vec<ValuesFile>), String> {
    let chart = &app.spec.chart;
    if app
        .spec
        .values_source
        .as_ref()
        .is_some_and(|v| v.git.is_some())
        && !app.spec.values_files.is_empty()
    {
        return Err(
            "valuesFiles from valuesSource.git: diff does not read them yet (the operator does)"
                .into(),
        );
    }
    if chart.repo.is_empty() && chart.oci.is_empty() {
        if let Some(git) = &chart.git {
            return git_chart_of(client, app, git, work).await;
        }
        return Err(
            "chart.path is on the operator's filesystem (--chart-path-root): diff renders repo, oci and git charts only"
                .into(),
        );
    }
    let ns = app.metadata.namespace.clone().unwrap_or_default();
    let credentials = match &chart.credentials_secret_ref {
        None => Credentials::default(),
        Some(r) => {
            let scope = format!("{ns}/{}", r.name);
            crate::delivery::helmapp::observe::chart::credentials(client, app, &r.name, scope)
                .await
                .map_err(|(e, _)| e)?
        }
    };
    // Rendered only if it verifies, as the operator would install it.
    let trust = crate::delivery::helmapp::observe::trust::trust(client, app)
        .await
        .map_err(|(e, _)| e)?;
    let sources = std::sync::Arc::new(Sources::new(work, SourceLimits::default()));
    let local = sources
        .fetch(&ns, chart, credentials, trust)
        .await
        .map_err(|e| e.to_string())?;
    Ok((local.path, Vec::new()))
}

/// A `chart.git` chart, fetched and read into `work` as the operator does
/// it: the tree's names and bounds, every schema's references, and the
/// commit's signature when `chart.verify` is set — a chart the operator
/// would refuse is not rendered here either.
async fn git_chart_of(
    client: &kube::Client,
    app: &HelmApp,
    git: &apis::helmapp::GitSource,
    work: &Path,
) -> Result<(PathBuf, Vec<ValuesFile>), String> {
    use crate::delivery::source::{git as source_git, git_verify};
    let ns = app.metadata.namespace.clone().unwrap_or_default();
    let credentials = match &git.secret_ref {
        None => Credentials::default(),
        Some(r) => crate::delivery::helmapp::observe::chart::credentials(
            client,
            app,
            &r.name,
            format!("{ns}/{}", r.name),
        )
        .await
        .map_err(|(e, _)| e)?,
    };
    let signers = crate::delivery::helmapp::observe::trust::git_signers(client, app)
        .await
        .map_err(|(e, _)| e)?;
    let (source, work) = (git.clone(), work.to_path_buf());
    let (paths, ignore) = (
        app.spec.values_files.clone(),
        app.spec.ignore_missing_values_files,
    );
    tokio::task::spawn_blocking(move || {
        let checkout = source_git::fetch(&source, &credentials, &SourceLimits::default(), &work)
            .map_err(|e| e.to_string())?;
        if let Some((mode, signers)) = &signers {
            git_verify::verify(&checkout, *mode, signers)
                .map_err(|e| format!("chart.verify: {e}"))?;
        }
        let into = work.join("git-chart");
        source_git::read_chart(&checkout, &source.path, &into).map_err(|e| match e {
            source_git::ReadError::Invalid(m) | source_git::ReadError::Failed(m) => m,
        })?;
        let contents =
            source_git::read_files(&checkout, &paths).map_err(|e| format!("valuesFiles {e}"))?;
        let mut files = Vec::new();
        for (path, content) in paths.into_iter().zip(contents) {
            if content.is_none() && !ignore {
                return Err(format!(
                    "valuesFiles {path}: not in the repository at {}",
                    checkout.commit
                ));
            }
            files.push(ValuesFile { path, content });
        }
        Ok((into, files))
    })
    .await
    .map_err(|e| e.to_string())?
}

struct Helm<'a> {
    binary: &'a Path,
    target: &'a Target,
    as_user: Option<(&'a str, &'a [String])>,
}

impl Helm<'_> {
    fn command(&self) -> std::process::Command {
        let mut c = std::process::Command::new(self.binary);
        c.stderr(std::process::Stdio::piped());
        if let Some((user, groups)) = self.as_user {
            c.arg(format!("--kube-as-user={user}"));
            for g in groups {
                c.arg(format!("--kube-as-group={g}"));
            }
        }
        c
    }

    /// The deployed release's manifest (empty: none yet).
    fn live_manifest(&self) -> Result<String, String> {
        let out = self
            .command()
            .args([
                "get",
                "manifest",
                "-n",
                &self.target.namespace,
                "--",
                &self.target.release,
            ])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.binary.display()))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && says_release_not_found(&stderr) {
            return Ok(String::new());
        }
        if !out.status.success() {
            return Err(format!("helm get manifest: {}", stderr.trim()));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The values of the deployed revision (`{}`: no release yet), as
    /// helm stored them.
    fn live_values(&self) -> Result<Value, String> {
        let out = self
            .command()
            .args([
                "get",
                "values",
                "-n",
                &self.target.namespace,
                "-o",
                "json",
                "--",
                &self.target.release,
            ])
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.binary.display()))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && says_release_not_found(&stderr) {
            return Ok(Value::Object(Default::default()));
        }
        if !out.status.success() {
            // Never shown: it may quote values.
            return Err(
                "helm get values failed: the live side cannot be masked, so no diff is shown"
                    .into(),
            );
        }
        serde_json::from_slice(&out.stdout)
            .map_err(|_| "helm get values printed no JSON: no diff is shown".into())
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
        // The operator's own command line (`helm::args`), for the helm
        // found here; helm 4 post-renders through the plugin, written
        // into the temporary work directory.
        let cli = crate::delivery::helm::detect::detect(self.binary)?;
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        if cli == HelmCli::V4 && file.is_some() {
            crate::delivery::helm::plugin::install_post_renderer(work, &me)?;
        }
        let uid = app.metadata.uid.clone().unwrap_or_default();
        let labels = [(crate::delivery::UID_LABEL, uid.as_str())];
        let request = args::Upgrade {
            // A preview of an upgrade: `upgrade --install --dry-run=client`
            // (which still reads the history, under helm 4).
            absent: false,
            release: &self.target.release,
            namespace: &self.target.namespace,
            chart,
            values,
            labels: &labels,
            create_namespace: false,
            skip_crds: false,
            as_user: None,
            timeout: std::time::Duration::from_secs(300),
            flags: args::Flags::default(),
            history_max: app.spec.max_history(),
            post_renderer: file.as_ref().map(|f| args::PostRender {
                binary: &me,
                config: f.path(),
            }),
        };
        let mut cmd = self.command();
        cmd.args(request.dry_run_args(cli))
            .env(
                "HELM_PLUGINS",
                crate::delivery::helm::plugin::plugins_dir(work),
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
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
    // Only its owner may read what is rendered into it (values, charts).
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    Ok(TempDir(dir))
}

#[cfg(test)]
mod redactor_tests {
    use serde_json::json;

    #[test]
    fn an_old_secret_value_on_the_live_side_is_masked_and_plain_values_are_not() {
        let live = json!({ "token": "old-secret-value", "image": "web:1.0" });
        let current = json!({ "token": "new-secret-value", "image": "web:1.0" });
        let r = super::diff_redactor(&live, &current, vec!["new-secret-value".into()]);
        let text = "- token: old-secret-value\n+ token: new-secret-value\n  image: web:1.0\n";
        let masked = r.redact(text);
        assert!(!masked.contains("old-secret-value"), "{masked}");
        assert!(!masked.contains("new-secret-value"), "{masked}");
        assert!(masked.contains("web:1.0"), "{masked}");
    }
}
