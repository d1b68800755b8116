//! Fetching a HelmApp's chart: by path, from an HTTP repository, an OCI
//! registry or Git (verified as `chart.verify` asks, credentials read as
//! the HelmApp's identity), and the values files a Git checkout holds.
//! Slow fetches run in the background and re-queue the HelmApp.

use std::time::Duration;

use apis::helmapp::HelmApp;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, ResourceExt};

use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::conditions::Reason;
use crate::delivery::helmapp::decide::desired::{ChartProblem, parse_duration};
use crate::delivery::source;
use apis::helmapp::GitSource;
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
