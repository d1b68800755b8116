//! The dry run of the `helm upgrade --install` a HelmApp would start, and
//! the manifest its release has now: what an approval shows and what an
//! adoption compares.

use apis::helmapp::HelmApp;

use super::release::{self, Parts};
use crate::delivery::helm::{GetManifest, Rendered, values};
use crate::delivery::helmapp::context::Context;
use crate::delivery::helmapp::decide::observed::{Inputs, Observed};
use crate::delivery::names::{HASH_LABEL, UID_LABEL};

/// `(live, next)`: the release's manifest now (empty when it has none)
/// and the one the run would deploy. `Err` says why either could not be
/// had (values redacted).
pub(super) async fn live_and_next(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
) -> Result<(String, String), String> {
    let (live, next) = run(ctx, app, o, true).await?;
    Ok((live, next.manifest))
}

/// What the run would deploy, manifest and hooks (values redacted in
/// `Err`).
pub(super) async fn next(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
) -> Result<Rendered, String> {
    Ok(run(ctx, app, o, false).await?.1)
}

/// The dry run, and with `live` the release's manifest now.
async fn run(
    ctx: &Context,
    app: &HelmApp,
    o: &mut Observed,
    live: bool,
) -> Result<(String, Rendered), String> {
    let Some(Inputs::Ready { chart, hash }) = &o.inputs else {
        return Err("the chart was not looked up".into());
    };
    let (chart, hash) = (chart.clone(), hash.clone());
    let values =
        crate::delivery::helmapp::observe::inputs::values(ctx, app, &chart.values_files).await?;
    o.done.redactor = values::Redactor::of(&values);
    let post_render = release::post_render_file(ctx, app)?;
    let uid = o.uid.clone();
    let labels = [(HASH_LABEL, hash.as_str()), (UID_LABEL, uid.as_str())];
    let user = o.identity.user();
    let kind = crate::delivery::helmapp::decide::run_flags::previewed_run(o);
    let parts = Parts {
        chart: &chart.path,
        values: &values,
        labels: &labels,
        user: user.as_deref(),
        post_render: post_render.as_ref(),
        flags: crate::delivery::helmapp::decide::run_flags::of_run(app, o, kind, false),
        timeout: o.timeouts.of_run(kind),
        absent: crate::delivery::helmapp::decide::run_flags::over_nothing(o, kind),
    };
    let upgrade = release::request(ctx, app, o, parts);
    let get = GetManifest {
        release: upgrade.release,
        namespace: upgrade.namespace,
        as_user: upgrade.as_user,
    };
    let live = match live {
        true => ctx.on(o).helm.manifest(&get).await,
        false => Ok(String::new()),
    };
    let next = ctx.on(o).helm.render(&upgrade).await;
    Ok((
        live.map_err(|e| e.summary(&o.done.redactor))?,
        next.map_err(|e| e.summary(&o.done.redactor))?,
    ))
}
