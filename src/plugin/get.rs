//! `kubectl hossted get`: HelmAppSets with their apps as a tree (in the
//! set's order), then the apps of no set; READY, STATUS (the Ready
//! reason), REVISION, CHART@VERSION, CLUSTER (where the release goes: its
//! kubeconfig Secret's name, or `in-cluster`), DRIFT (objects drifted),
//! UPDATE (a newer version the chart's source offers), WAITING (what its
//! next change waits for: `dependency`, `approval`, or
//! `window:<opening>`), AGE. Colour only on a terminal.

use std::io::IsTerminal;

use apis::helmapp::HelmApp;
use apis::helmappset::HelmAppSet;
use kube::api::ListParams;
use kube::{Api, ResourceExt};

use super::args::{Where, namespace_of};

/// The HelmApps of `api`, each decoded on its own: one that does not
/// decode (nested past any decoder's depth, say) is named on stderr and
/// left out, and the others are shown.
async fn list_each(api: &Api<HelmApp>, lp: &ListParams) -> Result<Vec<HelmApp>, kube::Error> {
    #[derive(serde::Deserialize)]
    struct Raw {
        #[serde(default)]
        items: Vec<Box<serde_json::value::RawValue>>,
    }
    let req = kube::core::Request::new(api.resource_url())
        .list(lp)
        .map_err(kube::Error::BuildRequest)?;
    let raw: Raw = api.clone().into_client().request(req).await?;
    Ok(raw
        .items
        .iter()
        .filter_map(|item| match cache::decode_object::<HelmApp>(item.get()) {
            Ok(app) => Some(app),
            Err(refused) => {
                eprintln!("warning: HelmApp {refused}: left out");
                None
            }
        })
        .collect())
}

pub async fn run(client: kube::Client, w: &Where) -> Result<(), String> {
    let (apps, sets): (Api<HelmApp>, Api<HelmAppSet>) = if w.all_namespaces {
        (Api::all(client.clone()), Api::all(client))
    } else {
        let ns = namespace_of(&client, w.namespace.as_ref());
        (
            Api::namespaced(client.clone(), &ns),
            Api::namespaced(client, &ns),
        )
    };
    let lp = ListParams::default();
    let apps = list_each(&apps, &lp)
        .await
        .map_err(|e| format!("cannot list HelmApps: {e}"))?;
    // A cluster without the HelmAppSet CRD (or a user who may not list
    // them) still sees its HelmApps.
    let sets = sets.list(&lp).await.map(|l| l.items).unwrap_or_default();
    if apps.is_empty() && sets.is_empty() {
        eprintln!("No HelmApps or HelmAppSets found.");
        return Ok(());
    }
    let colour = std::io::stdout().is_terminal();
    print!(
        "{}",
        table(&sets, &apps, w.all_namespaces, chrono::Utc::now(), colour)
    );
    Ok(())
}

/// One printed row, before padding.
struct Row {
    namespace: String,
    name: String,
    ready: String,
    status: String,
    revision: String,
    chart: String,
    cluster: String,
    drift: String,
    update: String,
    waiting: String,
    age: String,
}

/// The table (see the module docs); pure, for tests.
pub fn table(
    sets: &[HelmAppSet],
    apps: &[HelmApp],
    all_namespaces: bool,
    now: chrono::DateTime<chrono::Utc>,
    colour: bool,
) -> String {
    let mut rows = Vec::new();
    let mut placed = std::collections::HashSet::new();
    let mut sets: Vec<&HelmAppSet> = sets.iter().collect();
    sets.sort_by_key(|s| (s.namespace(), s.name_any()));
    for set in sets {
        rows.push(set_row(set, now));
        let children = children_of(set, apps);
        for (i, child) in children.iter().enumerate() {
            let branch = if i + 1 == children.len() {
                "└─ "
            } else {
                "├─ "
            };
            let mut row = app_row(child, now);
            row.name = format!("{branch}{}", row.name);
            rows.push(row);
            placed.insert(child.uid());
        }
    }
    let mut rest: Vec<&HelmApp> = apps.iter().filter(|a| !placed.contains(&a.uid())).collect();
    rest.sort_by_key(|a| (a.namespace(), a.name_any()));
    rows.extend(rest.into_iter().map(|a| app_row(a, now)));
    render(&rows, all_namespaces, colour)
}

/// The apps `set` owns, in the order of its `spec.apps`.
fn children_of<'a>(set: &HelmAppSet, apps: &'a [HelmApp]) -> Vec<&'a HelmApp> {
    let uid = set.uid();
    let mut owned: Vec<&HelmApp> = apps
        .iter()
        .filter(|a| {
            a.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == uid.as_ref())
        })
        .collect();
    let order = |a: &HelmApp| {
        let name = a.name_any();
        set.spec
            .apps
            .iter()
            .position(|s| format!("{}-{}", set.name_any(), s.name) == name)
            .unwrap_or(usize::MAX)
    };
    owned.sort_by_key(|a| (order(a), a.name_any()));
    owned
}

fn set_row(set: &HelmAppSet, now: chrono::DateTime<chrono::Utc>) -> Row {
    let status = set.status.as_ref();
    let ready = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
    Row {
        namespace: set.namespace().unwrap_or_default(),
        name: format!("{} (set)", set.name_any()),
        ready: status
            .map(|s| s.ready.clone())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "-".into()),
        status: ready.map_or("-".into(), |c| c.reason.clone()),
        revision: "-".into(),
        chart: format!("{} apps", set.spec.apps.len()),
        // Each app names its own.
        cluster: "-".into(),
        drift: "-".into(),
        update: "-".into(),
        waiting: match ready.map(|c| c.reason.as_str()) {
            Some("DependencyNotReady" | "DependencyNotFound") => "dependency".into(),
            _ => "-".into(),
        },
        age: age(set.metadata.creation_timestamp.as_ref(), now),
    }
}

fn app_row(app: &HelmApp, now: chrono::DateTime<chrono::Utc>) -> Row {
    let status = app.status.as_ref();
    let (ready, reason, _) = super::ask::ready_of(app);
    let version = status.map(|s| s.chart_version.as_str()).unwrap_or_default();
    // The chart's own name (status.chartName), else what the spec says.
    let name = app.chart_label();
    Row {
        namespace: app.namespace().unwrap_or_default(),
        name: app.name_any(),
        ready,
        status: reason.clone(),
        revision: status
            .map(|s| s.revision)
            .filter(|r| *r > 0)
            .map_or("-".into(), |r| r.to_string()),
        chart: printable(&format!(
            "{name}@{}",
            if version.is_empty() { "-" } else { version }
        )),
        cluster: cluster_label(app),
        drift: status.map_or("-".into(), |s| s.drift.len().to_string()),
        update: status
            .filter(|s| crate::delivery::helmapp::observe::updates::newer(s))
            .map_or("-".into(), |s| s.latest_available.clone()),
        waiting: waiting(app, &reason),
        age: age(app.metadata.creation_timestamp.as_ref(), now),
    }
}

/// What the app's next change waits for (`-`: nothing).
fn waiting(app: &HelmApp, ready_reason: &str) -> String {
    let next_window = app
        .status
        .as_ref()
        .map(|s| s.next_window.as_str())
        .unwrap_or_default();
    match ready_reason {
        _ if !next_window.is_empty() => format!("window:{next_window}"),
        "DependencyNotReady" | "DependencyNotFound" => "dependency".into(),
        "AwaitingApproval" | "ApprovalStale" => "approval".into(),
        _ => "-".into(),
    }
}

/// The most characters the CLUSTER column shows of a name.
const CLUSTER_WIDTH: usize = 63;

/// Where `app`'s release goes: the name of its kubeconfig Secret
/// (`spec.kubeConfig.secretRef.name`, docs/remote-clusters.md), or
/// `in-cluster`. The tenant's text, so made [`printable`], and at most
/// [`CLUSTER_WIDTH`] characters (a longer name cut, ending in `…`). The
/// web view shows the same.
pub(crate) fn cluster_label(app: &HelmApp) -> String {
    let Some(remote) = app.spec.kube_config.as_ref() else {
        return "in-cluster".into();
    };
    match remote.secret_ref.name.as_str() {
        "" => "-".into(),
        name => bounded(&printable(name), CLUSTER_WIDTH),
    }
}

/// `s` cut to `width` characters, the last one `…` when cut.
fn bounded(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// kubectl's way: `45s`, `12m`, `5h`, `3d`.
fn age(
    created: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let Some(created) = created else {
        return "-".into();
    };
    crate::duration::short(now.timestamp() - created.0.as_second())
}

/// `s` with its control characters (C0, DEL, C1) and the invisible ones
/// that reorder or hide text (bidi controls, zero-width marks) shown as
/// `?`: a chart's OCI reference or Git path, or a kubeconfig Secret's
/// name, is the tenant's text, and an escape sequence in it would speak to
/// the terminal of whoever lists the apps, a bidi control would make the
/// column lie.
fn printable(s: &str) -> String {
    let invisible = |c: char| {
        matches!(c,
            '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
    };
    s.chars()
        .map(|c| {
            if c.is_control() || invisible(c) {
                '?'
            } else {
                c
            }
        })
        .collect()
}

fn render(rows: &[Row], all_namespaces: bool, colour: bool) -> String {
    let header = Row {
        namespace: "NAMESPACE".into(),
        name: "NAME".into(),
        ready: "READY".into(),
        status: "STATUS".into(),
        revision: "REVISION".into(),
        chart: "CHART@VERSION".into(),
        cluster: "CLUSTER".into(),
        drift: "DRIFT".into(),
        update: "UPDATE".into(),
        waiting: "WAITING".into(),
        age: "AGE".into(),
    };
    let all: Vec<&Row> = std::iter::once(&header).chain(rows).collect();
    let width = |f: fn(&Row) -> &str| all.iter().map(|r| f(r).chars().count()).max().unwrap_or(0);
    let widths = [
        width(|r| &r.namespace),
        width(|r| &r.name),
        width(|r| &r.ready),
        width(|r| &r.status),
        width(|r| &r.revision),
        width(|r| &r.chart),
        width(|r| &r.cluster),
        width(|r| &r.drift),
        width(|r| &r.update),
        width(|r| &r.waiting),
    ];
    let mut out = String::new();
    for (i, r) in all.iter().enumerate() {
        let pad = |s: &str, w: usize| {
            format!("{s}{}", " ".repeat(w.saturating_sub(s.chars().count()) + 3))
        };
        if all_namespaces {
            out.push_str(&pad(&r.namespace, widths[0]));
        }
        out.push_str(&pad(&r.name, widths[1]));
        let ready = pad(&r.ready, widths[2]);
        out.push_str(&match (colour && i > 0, r.ready.as_str()) {
            (true, "True") => format!("\x1b[32m{ready}\x1b[0m"),
            (true, "False") => format!("\x1b[31m{ready}\x1b[0m"),
            _ => ready,
        });
        out.push_str(&pad(&r.status, widths[3]));
        out.push_str(&pad(&r.revision, widths[4]));
        out.push_str(&pad(&r.chart, widths[5]));
        out.push_str(&pad(&r.cluster, widths[6]));
        out.push_str(&pad(&r.drift, widths[7]));
        out.push_str(&pad(&r.update, widths[8]));
        out.push_str(&pad(&r.waiting, widths[9]));
        out.push_str(&r.age);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
