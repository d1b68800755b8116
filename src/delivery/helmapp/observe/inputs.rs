//! Fetching what a HelmApp's release is made of: its chart, its values
//! (and their cached digests). The hash of it all, and the other pure
//! parts, are in `config.rs`.

use std::time::Duration;

use apis::helmapp::HelmApp;
use base64::Engine;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use crate::delivery::helm::values;
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::helmapp::decide::desired::{ChartProblem, parse_duration};
use crate::delivery::source;
use apis::helmapp::{GitSource, ValuesKind};

/// The chart, local: by path, or from an HTTP repository or an OCI
/// registry (remembered for `interval`: a reconcile in between touches
/// no network). `Ok(None)`: it is being fetched in the background,
/// which re-queues the HelmApp when done. `Err` says whether retrying
/// may help.
pub async fn chart(
    ctx: &Context,
    app: &HelmApp,
) -> Result<Option<source::LocalChart>, ChartProblem> {
    if let Some(message) =
        unverifiable(&app.spec.chart).or_else(|| ctx.settings.tenancy.unpinned_privileged(app))
    {
        // An unverified chart never reaches helm (docs/verification.md).
        return Err(ChartProblem {
            reason: Reason::VerificationFailed,
            message,
            retry: false,
        });
    }
    let chart = fetch_chart(ctx, app).await;
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
    let chart = chart.map_err(|(e, retry)| ChartProblem {
        reason: match e {
            source::SourceError::Git { .. } => Reason::SourceUnavailable,
            source::SourceError::Verification { .. } => Reason::VerificationFailed,
            source::SourceError::Invalid { .. } => Reason::ChartInvalid,
            source::SourceError::Refused { .. } => Reason::ChartSourceRefused,
            _ => Reason::ChartUnavailable,
        },
        message: e.to_string(),
        retry,
    })?;
    let Some(mut chart) = chart else {
        return Ok(None);
    };
    match values_files(ctx, app).await? {
        Some(files) => chart.values_files = files,
        None => return Ok(None),
    }
    Ok(Some(chart))
}

async fn fetch_chart(
    ctx: &Context,
    app: &HelmApp,
) -> Result<Option<source::LocalChart>, (source::SourceError, bool)> {
    let spec = &app.spec;
    let others = [&spec.chart.repo, &spec.chart.oci, &spec.chart.path];
    if let Some(git) = &spec.chart.git
        && others.iter().all(|s| s.is_empty())
    {
        return git_chart(ctx, app, git).await;
    }
    if spec.chart.repo.is_empty() && spec.chart.oci.is_empty() {
        return source::resolve(&spec.chart, ctx.settings.chart_path_root.as_deref())
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
        + &crate::delivery::helmapp::observe::trust::scope(app);
    if let Some(c) = ctx.sources.resolved.fresh(&spec.chart, &scope, interval) {
        return Ok(Some(c));
    }
    let retry = |e: source::SourceError| {
        // An address refused stays refused until the spec changes.
        let retry = !matches!(e, source::SourceError::Refused { .. });
        (e, retry)
    };
    let key = source::RepoCache::key(&spec.chart, &scope);
    match ctx.sources.take(&key) {
        Some(None) => {
            // Another app's fetch of this chart runs: its end wakes us.
            ctx.sources.wake_too(&key, waker(ctx, app));
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
        Some(r) => credentials(&ctx.client, app, &r.name, scope)
            .await
            .map_err(|(message, retry)| (repo_error(message), retry))?,
    };
    let verification = |message: String| source::SourceError::Verification {
        repo: format!("{}{}", spec.chart.repo, spec.chart.oci),
        message,
    };
    let trust = crate::delivery::helmapp::observe::trust::trust(&ctx.client, app)
        .await
        .map_err(|(message, retry)| (verification(message), retry))?;
    // Fetched in the background: a slow source holds a fetch slot,
    // never this worker.
    ctx.sources.start(
        key,
        &app.namespace().unwrap_or_default(),
        &spec.chart,
        credentials,
        trust,
        waker(ctx, app),
    );
    Ok(None)
}

/// The chart at `git.path` of the commit `git.ref` names (see
/// [`Context::checkout`]), read out once per commit and path.
async fn git_chart(
    ctx: &Context,
    app: &HelmApp,
    git: &GitSource,
) -> Result<Option<source::LocalChart>, (source::SourceError, bool)> {
    let Some(checkout) = checkout(ctx, app, git).await? else {
        return Ok(None);
    };
    // Verified before a file of it is read: an unverified commit never
    // reaches helm (docs/verification.md).
    let verified = verify_git(ctx, app, git, &checkout).await?;
    let (sources, path, at) = (ctx.sources.clone(), git.path.clone(), checkout.clone());
    let read = tokio::task::spawn_blocking(move || {
        sources.git.chart(&at, &path, &sources.git_charts_dir())
    })
    .await
    .map_err(|e| source::git::ReadError::Failed(e.to_string()))
    .and_then(|r| r)
    .map_err(|e| match e {
        // A tree git refuses, or one past its bounds: the commit does
        // not change by retrying; a new one re-queues.
        source::git::ReadError::Invalid(message) => (
            source::SourceError::Invalid {
                repo: format!(
                    "{} at {}",
                    source::http::without_credentials(&git.url),
                    checkout.commit
                ),
                message,
            },
            false,
        ),
        source::git::ReadError::Failed(message) => (git_error(git, message), true),
    })?;
    Ok(Some(source::LocalChart {
        version: source::chart_version(&read.dir),
        path: read.dir,
        digest: read.digest,
        revision: checkout.commit,
        verified,
        ..Default::default()
    }))
}

/// `chart.verify` of a Git chart: the signature(s) `verify.mode` asks
/// for, checked against `verify.secretRef`'s keys (`None`: not set).
async fn verify_git(
    ctx: &Context,
    app: &HelmApp,
    git: &GitSource,
    checkout: &source::git::Checkout,
) -> Result<Option<std::sync::Arc<source::verify::Verified>>, (source::SourceError, bool)> {
    let repo = || {
        format!(
            "{} at {}",
            source::http::without_credentials(&git.url),
            checkout.commit
        )
    };
    let refused = |message: String, retry: bool| {
        (
            source::SourceError::Verification {
                repo: repo(),
                message,
            },
            retry,
        )
    };
    let Some((mode, signers)) =
        crate::delivery::helmapp::observe::trust::git_signers(&ctx.client, app)
            .await
            .map_err(|(m, retry)| refused(m, retry))?
    else {
        return Ok(None);
    };
    let at = checkout.clone();
    let signer =
        tokio::task::spawn_blocking(move || source::git_verify::verify(&at, mode, &signers))
            .await
            .map_err(|e| refused(e.to_string(), true))?
            // Retried (with back-off): the branch may move to a signed commit,
            // the Secret may gain the key.
            .map_err(|m| refused(m, true))?;
    Ok(Some(std::sync::Arc::new(source::verify::Verified {
        provider: format!("git {}", mode.as_str()),
        digest: checkout.commit.clone(),
        signer,
        at: source::verify::now_rfc3339(),
    })))
}

/// The commit of `git` — remembered for `interval`, fetched in the
/// background otherwise (`Ok(None)`: the fetch's end re-queues `app`).
/// One fetch per URL, ref and credentials, however many apps ask.
async fn checkout(
    ctx: &Context,
    app: &HelmApp,
    git: &GitSource,
) -> Result<Option<source::git::Checkout>, (source::SourceError, bool)> {
    let interval = parse_duration(&app.spec.interval).unwrap_or(Duration::from_secs(600));
    let ns = app.namespace().unwrap_or_default();
    let scope = git
        .secret_ref
        .as_ref()
        .map(|r| format!("{ns}/{}", r.name))
        .unwrap_or_default();
    let key = source::git::key(git, &scope);
    if let Some(c) = ctx.sources.git.fresh(&key, interval) {
        return Ok(Some(c));
    }
    match ctx.sources.take_git(&key) {
        Some(None) => {
            ctx.sources.wake_too_git(&key, waker(ctx, app));
            return Ok(None);
        }
        Some(Some(done)) => return done.map(Some).map_err(|e| (e, true)),
        None => {}
    }
    let credentials = match &git.secret_ref {
        None => source::Credentials::default(),
        Some(r) => credentials(&ctx.client, app, &r.name, scope)
            .await
            .map_err(|(message, retry)| (git_error(git, message), retry))?,
    };
    ctx.sources
        .start_git(key, &ns, git, credentials, waker(ctx, app));
    Ok(None)
}

/// `valuesFiles`, read from `chart.git` or `valuesSource.git`, in
/// order (`Ok(None)`: that source is being fetched).
async fn values_files(
    ctx: &Context,
    app: &HelmApp,
) -> Result<Option<Vec<source::ValuesFile>>, ChartProblem> {
    let spec = &app.spec;
    if spec.values_files.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let git = spec
        .chart
        .git
        .as_ref()
        .or(spec.values_source.as_ref().and_then(|v| v.git.as_ref()));
    let Some(git) = git else {
        return Err(ChartProblem {
            reason: Reason::ValuesInvalid,
            message: "valuesFiles are read from chart.git or valuesSource.git: set one".into(),
            retry: false,
        });
    };
    let unavailable = |(e, retry): (source::SourceError, bool)| ChartProblem {
        reason: Reason::SourceUnavailable,
        message: e.to_string(),
        retry,
    };
    let Some(checkout) = checkout(ctx, app, git).await.map_err(unavailable)? else {
        return Ok(None);
    };
    // Files of the chart's own repository are read only from a commit
    // that verifies, as its chart is: the checkout read here may be a
    // later fetch than the chart's (valuesSource.git is not verified:
    // docs/verification.md).
    if spec.chart.git.as_ref() == Some(git) {
        verify_git(ctx, app, git, &checkout)
            .await
            .map_err(|(e, retry)| ChartProblem {
                reason: Reason::VerificationFailed,
                message: e.to_string(),
                retry,
            })?;
    }
    let (paths, ignore) = (spec.values_files.clone(), spec.ignore_missing_values_files);
    let url = source::http::without_credentials(&git.url);
    tokio::task::spawn_blocking(move || {
        let contents = source::git::read_files(&checkout, &paths)
            .map_err(|e| format!("valuesFiles {e}"))?;
        let mut files = Vec::new();
        for (path, content) in paths.into_iter().zip(contents) {
            if content.is_none() && !ignore {
                return Err(format!(
                    "valuesFiles {path}: not in {url} at {} (set ignoreMissingValuesFiles: true if it may be absent)",
                    checkout.commit
                ));
            }
            files.push(source::ValuesFile { path, content });
        }
        Ok(files)
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r)
    .map(Some)
    .map_err(|message| ChartProblem {
        reason: Reason::ValuesInvalid,
        message,
        retry: true,
    })
}

/// Re-queues `app` (when a background fetch ends).
fn waker(ctx: &Context, app: &HelmApp) -> impl FnOnce() + Send + 'static {
    let (queue, key) = (ctx.queue.clone(), cache::object_key(app));
    move || queue.add(key)
}

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
    // A private key keeps its line breaks.
    let ssh_identity = data
        .remove("identity")
        .map(|b| String::from_utf8_lossy(&b.0).into_owned());
    let mut text = |k: &str| {
        data.remove(k)
            .map(|b| String::from_utf8_lossy(&b.0).trim().to_string())
    };
    Ok(source::Credentials {
        scope,
        username: text("username"),
        password: text("password"),
        token: text("bearerToken"),
        ssh_identity,
        known_hosts: text("known_hosts"),
        ca: data.remove("ca.crt").map(|b| b.0),
    })
}

fn unknown_kind(name: &str) -> String {
    format!("valuesFrom {name}: kind must be Secret or ConfigMap")
}

/// A Git source's problem, with its URL (without credentials).
/// Why `chart.verify` cannot be met by the chart's source, if it cannot:
/// a directory (`chart.path`) has no signature, and a Git commit's is not
/// checked yet — refused rather than installed unverified.
fn unverifiable(chart: &apis::helmapp::ChartSource) -> Option<String> {
    let verify = chart.verify.as_ref()?;
    if !chart.path.is_empty() {
        return Some(
            "chart.verify cannot be met by chart.path: a directory has no signature; remove verify, or use a signed chart from chart.repo or chart.oci".into(),
        );
    }
    let git_only = chart.git.is_none() || !chart.repo.is_empty() || !chart.oci.is_empty();
    if verify.mode != apis::helmapp::GitVerifyMode::Head && git_only {
        return Some(format!(
            "chart.verify.mode {} is for chart.git: a repository or registry chart is verified by verify.provider; remove mode",
            verify.mode.as_str()
        ));
    }
    None
}

fn git_error(git: &GitSource, message: String) -> source::SourceError {
    source::SourceError::Git {
        url: source::http::without_credentials(&git.url),
        message,
    }
}
