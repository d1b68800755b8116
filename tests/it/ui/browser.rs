//! The pages in a real headless Chromium (Debian's `chromium`, driven by
//! chromedriver): the overview with a failing, a pending and a ready app;
//! each page shot; Approve clicked until the app is Ready; an edit by
//! kubectl shown without a reload.
//!
//! Screenshots go to `$HOSSTED_UI_SCREENSHOTS` (hack/ui-screenshots.sh
//! points it at docs/images) or else `target/ui-screenshots`.

use std::path::PathBuf;
use std::time::Duration;

use envtest::browser::Browser;
use envtest::fantoccini::{self, Locator};
use serde_json::json;

use super::start_ui;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(60);

fn shots_dir() -> PathBuf {
    let dir = std::env::var_os("HOSSTED_UI_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Waits for `css` on the current page (live updates may bring it).
/// On a timeout the page is shot (`ui-failed.png`) and its `<main>` said.
pub(crate) async fn shown(b: &Browser, css: &str) -> fantoccini::elements::Element {
    match b
        .client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
    {
        Ok(e) => e,
        Err(e) => {
            shoot(b, "failed").await;
            let main = b
                .client
                .execute("return document.body.outerHTML;", vec![])
                .await;
            panic!("{css} not shown within {WAIT:?}: {e}\n{main:?}");
        }
    }
}

/// Controls a screen reader could not name, and whether the page says
/// its language: what every page must get right.
async fn unnamed_controls(b: &Browser) -> serde_json::Value {
    let script = r#"
        const named = el => (el.labels && el.labels.length > 0) || el.getAttribute('aria-label')
            || (el.textContent || '').trim().length > 0;
        const controls = [...document.querySelectorAll('input:not([type=hidden]), select, button, a')];
        return { lang: document.documentElement.lang,
                 unnamed: controls.filter(el => !named(el)).map(el => el.outerHTML) };"#;
    b.client.execute(script, vec![]).await.unwrap()
}

/// Text whose contrast with what is behind it is under 4.5:1 (WCAG AA),
/// as `text: ratio` (empty: none).
async fn low_contrast(b: &Browser) -> serde_json::Value {
    let script = r#"
        const rgb = c => (c.match(/[\d.]+/g) || []).map(Number);
        const lum = ([r, g, b]) => {
            const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
            return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
        };
        const behind = el => {
            for (let e = el; e; e = e.parentElement) {
                const c = rgb(getComputedStyle(e).backgroundColor);
                if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c.slice(0, 3);
            }
            return [255, 255, 255];
        };
        const low = [];
        for (const el of document.querySelectorAll('body *')) {
            const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
            if (!own || el.offsetParent === null) continue;
            const [a, b] = [lum(rgb(getComputedStyle(el).color)), lum(behind(el))];
            const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
            if (ratio < 4.5) low.push(el.textContent.trim().slice(0, 30) + ': ' + ratio.toFixed(2));
        }
        return low;"#;
    b.client.execute(script, vec![]).await.unwrap()
}

pub(crate) async fn shoot(b: &Browser, name: &str) {
    let png = b.client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(shots_dir().join(format!("ui-{name}.png")), png).unwrap();
}

#[tokio::test]
async fn the_ui_in_a_real_browser_shows_states_approves_and_updates_live() {
    let f = Fixture::new().await;
    f.namespace("apps").await;
    let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts");
    let repo = envtest::ChartRepo::start(&f.cp, &[&charts.join("tiny")], None)
        .await
        .unwrap();
    let _operator = f.start_delivery().await;
    let served = json!({ "repo": repo.url(), "name": "tiny", "version": "0.1.0" });
    // ok's label comes from a Secret: masked wherever the page shows it.
    f.secret("apps", "label", &[("value", "s3cr3tlabel42")])
        .await;
    apply_helmapp(
        &f,
        "apps",
        "ok",
        json!({ "chart": served, "valuesFrom": [
        { "kind": "Secret", "name": "label", "key": "value", "targetPath": "label" } ] }),
    )
    .await;
    apply_helmapp(
        &f,
        "apps",
        "held",
        json!({ "chart": served, "approval": "manual",
        "values": { "greeting": "hello" } }),
    )
    .await;
    apply_helmapp(
        &f,
        "apps",
        "broken",
        json!({ "chart": { "path": "no-such-chart" } }),
    )
    .await;
    let set = json!({ "apiVersion": "hossted.com/v1alpha1", "kind": "HelmAppSet",
        "metadata": { "name": "stack", "namespace": "apps" },
        "spec": { "sequenced": true, "apps": [
            { "name": "db", "spec": { "chart": served } },
            { "name": "web", "spec": { "chart": served } } ] } });
    let file = f.cp.dir().join("stack.yaml");
    std::fs::write(&file, set.to_string()).unwrap();
    f.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    helmapp_ready(&f, "apps", "ok", "InstallSucceeded", 1).await;
    helmapp_with_reason(&f, "apps", "held", "AwaitingApproval").await;
    helmapp_ready(&f, "apps", "stack-web", "InstallSucceeded", 1).await;

    let ui = start_ui(f.cp.kubeconfig_path(), &f.cp.helm_binary(), &[]).await;
    let b = Browser::start(1280, 900).await.unwrap();

    // The overview: each app in its group, the stream connected.
    b.client.goto(&ui.login_url).await.unwrap();
    shown(
        &b,
        r#"section[data-state="failing"] tr[data-app="apps/broken"]"#,
    )
    .await;
    shown(
        &b,
        r#"section[data-state="awaiting-approval"] tr[data-app="apps/held"]"#,
    )
    .await;
    shown(&b, r#"section[data-state="ready"] tr[data-app="apps/ok"]"#).await;
    shown(&b, r#"#approvals li[data-pending="apps/held"]"#).await;
    shown(&b, r#"#live[data-live="live"]"#).await;
    assert_eq!(
        unnamed_controls(&b).await,
        json!({ "lang": "en", "unnamed": [] })
    );
    assert_eq!(low_contrast(&b).await, json!([]), "light");
    shoot(&b, "overview").await;

    // A failing app: its condition and what to do about it.
    b.client
        .goto(&format!("{}/app/apps/broken", ui.origin))
        .await
        .unwrap();
    let remedy = shown(
        &b,
        r#"tr[data-condition="Ready"][data-status="False"] td.remedy"#,
    )
    .await;
    assert!(
        !remedy.text().await.unwrap().trim().is_empty(),
        "a sentence of what to do"
    );
    assert_eq!(
        unnamed_controls(&b).await,
        json!({ "lang": "en", "unnamed": [] })
    );
    assert_eq!(low_contrast(&b).await, json!([]), "light");
    shoot(&b, "helmapp-failing").await;

    // The set, as a chain in its order.
    b.client
        .goto(&format!("{}/set/apps/stack", ui.origin))
        .await
        .unwrap();
    shown(
        &b,
        r#"ol.chain.sequenced li[data-member="stack-db"] + li[data-member="stack-web"]"#,
    )
    .await;
    shoot(&b, "helmappset").await;

    // The inventory page answers (no Hosstedproject here).
    b.client
        .goto(&format!("{}/inventory", ui.origin))
        .await
        .unwrap();
    shown(&b, "#keys-h").await;

    // The pending change: its diff, then Approve → Ready, on the
    // HelmApp's page, by a live update.
    b.client
        .goto(&format!("{}/app/apps/held/pending", ui.origin))
        .await
        .unwrap();
    shown(&b, "pre.diff span.add").await;
    shoot(&b, "pending").await;
    shown(&b, r#"button[data-action="approve"]"#)
        .await
        .click()
        .await
        .unwrap();
    shown(
        &b,
        r#"tr[data-condition="Ready"][data-status="True"][data-reason="InstallSucceeded"]"#,
    )
    .await;
    let url = b.client.current_url().await.unwrap();
    assert_eq!(url.path(), "/app/apps/held");
    // The install's history entry, with how long helm ran.
    shown(
        &b,
        r#"tr[data-history="1"][data-result="succeeded"][data-duration$="s"]"#,
    )
    .await;
    shoot(&b, "helmapp").await;
    let approved = get_helmapp(&f, "apps", "held").await.unwrap();
    assert_eq!(approved.status.unwrap().revision, 1);

    // ok's page: the values helm received, the Secret's value masked; an
    // edit of its ConfigMap shown as drift (expected from the release,
    // live from the object), by a live update.
    b.client
        .goto(&format!("{}/app/apps/ok", ui.origin))
        .await
        .unwrap();
    let values = shown(&b, "pre.values").await.text().await.unwrap();
    let values: serde_json::Value = serde_yaml_ng::from_str(&values).unwrap();
    assert_eq!(values["label"], json!("[masked]"), "{values}");
    shown(
        &b,
        r#"tr[data-object="ConfigMap/apps/ok-tiny"][data-kstatus="Current"]"#,
    )
    .await;
    f.kubectl(&[
        "patch",
        "configmap",
        "ok-tiny",
        "-n",
        "apps",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"greeting":"edited"}}"#,
    ]);
    let drift = shown(&b, r#"tr[data-drift="/data/greeting"]"#).await;
    let cells = drift.find_all(Locator::Css("td code")).await.unwrap();
    let mut texts = Vec::new();
    for c in cells {
        texts.push(c.text().await.unwrap());
    }
    assert_eq!(
        texts,
        ["/data/greeting", "\"hello\"", "\"edited\""],
        "field, expected, live"
    );
    let source = b.client.source().await.unwrap();
    assert!(
        !source.contains("s3cr3tlabel42"),
        "a Secret's value on the page"
    );

    // A phone in dark mode, signed in with the same session: the system's
    // setting is followed, and nothing is wider than the screen (wide
    // tables scroll inside their own box).
    let port = ui.origin.rsplit(':').next().unwrap().to_string();
    let session = b
        .client
        .get_named_cookie(&format!("hossted-ui-{port}"))
        .await
        .unwrap();
    let phone = Browser::start_with(390, 844, &["--force-dark-mode"])
        .await
        .unwrap();
    phone
        .client
        .goto(&format!("{}/static/ui.css", ui.origin))
        .await
        .unwrap();
    phone.client.add_cookie(session.clone()).await.unwrap();
    phone.client.goto(&format!("{}/", ui.origin)).await.unwrap();
    shown(
        &phone,
        r#"section[data-state="ready"] tr[data-app="apps/ok"]"#,
    )
    .await;
    let look = phone
        .client
        .execute(
            r#"return { dark: matchMedia('(prefers-color-scheme: dark)').matches,
                        background: getComputedStyle(document.body).backgroundColor,
                        overflow: document.documentElement.scrollWidth - window.innerWidth };"#,
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(look["dark"], json!(true), "{look}");
    assert_eq!(
        look["background"],
        json!("rgb(13, 17, 23)"),
        "the dark background: {look}"
    );
    assert_eq!(look["overflow"], json!(0), "wider than a phone: {look}");
    assert_eq!(low_contrast(&phone).await, json!([]), "dark");
    shoot(&phone, "overview-phone-dark").await;
    phone.close().await;

    // An edit by kubectl: the overview changes without a reload (a mark
    // left on the window survives).
    b.client.goto(&format!("{}/", ui.origin)).await.unwrap();
    shown(&b, r#"#live[data-live="live"]"#).await;
    b.client
        .execute("window.__kept = 42; return 0;", vec![])
        .await
        .unwrap();
    f.kubectl(&[
        "patch",
        "helmapp",
        "ok",
        "-n",
        "apps",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"suspend":true}}"#,
    ]);
    shown(
        &b,
        r#"section[data-state="suspended"] tr[data-app="apps/ok"]"#,
    )
    .await;
    let kept = b
        .client
        .execute("return window.__kept;", vec![])
        .await
        .unwrap();
    assert_eq!(kept, json!(42), "the page was not reloaded");
    b.close().await;
}
