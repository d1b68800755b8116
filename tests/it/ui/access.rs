//! What the UI shows and does is what the user's kubeconfig may: a tenant
//! sees their namespace only; an Approve without `patch` gets the
//! apiserver's 403 and writes nothing; no cookie or no CSRF token: 403.

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{csrf_of, exchange, lists_app, sign_in, start_ui};
use crate::support::*;
use apis::helmapp::HelmApp;

/// alice may read HelmApps (and their Events) in `team-a`, nothing else:
/// no `patch`.
fn alice_reads_team_a(f: &Fixture) -> std::path::PathBuf {
    let rbac = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: { name: reader, namespace: team-a }
rules:
- apiGroups: [hossted.com]
  resources: [helmapps, helmappsets]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [events]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: { name: alice-reads, namespace: team-a }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader }
subjects: [{ kind: User, name: alice, apiGroup: rbac.authorization.k8s.io }]
"#;
    let file = f.cp.dir().join("alice-rbac.yaml");
    std::fs::write(&file, rbac).unwrap();
    f.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let kubeconfig = f.cp.kubeconfig_for_user("alice", None).unwrap();
    // Her context's namespace is team-a.
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(text.contains("namespace: default"), "{text}");
    std::fs::write(
        &kubeconfig,
        text.replace("namespace: default", "namespace: team-a"),
    )
    .unwrap();
    kubeconfig
}

#[tokio::test]
async fn the_ui_lists_what_the_user_may_and_refuses_what_they_may_not() {
    let f = Fixture::new().await;
    f.helmapp_crd().await;
    for ns in ["team-a", "team-b"] {
        f.namespace(ns).await;
    }
    let spec = json!({ "chart": { "path": "tiny" } });
    apply_helmapp(&f, "team-a", "shop", spec.clone()).await;
    apply_helmapp(&f, "team-b", "bank", spec).await;
    // A change waiting for approval (as the operator would write it).
    let pending = json!({ "status": { "pendingChange": {
        "chartVersion": "0.1.0", "configHash": "cafe0123", "diffLines": 3,
        "objects": { "added": ["ConfigMap shop"] } } } });
    Api::<HelmApp>::namespaced(f.cp.client(), "team-a")
        .patch_status("shop", &PatchParams::default(), &Patch::Merge(&pending))
        .await
        .unwrap();
    // What the inventory reported (as it would write it).
    f.hosstedproject("cluster", json!({})).await;
    let shop = apis::DeliveredApp {
        namespace: "team-a".into(),
        name: "shop".into(),
        revision: 2,
        status: "deployed".into(),
        app_uuid: "A-0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30".into(),
        hossted_helm: false,
    };
    let reported = json!({ "status": { "clusterUUID": "K-7f2c", "lastReconcileTimestamp": "2026-11-27T05:00:00Z",
        "apps": apis::encode_apps(&[shop]), "appCount": 1 } });
    Api::<apis::Hosstedproject>::all(f.cp.client())
        .patch_status("cluster", &PatchParams::default(), &Patch::Merge(&reported))
        .await
        .unwrap();
    let helm = f.cp.helm_binary();

    // The cluster admin sees both namespaces.
    let admin = start_ui(f.cp.kubeconfig_path(), &helm, &[]).await;
    let admin_cookie = sign_in(&admin).await;
    let page = exchange(
        "GET",
        &format!("{}/", admin.origin),
        Some(&admin_cookie),
        None,
    )
    .await;
    assert_eq!(page.status, 200);
    let admin_csrf = csrf_of(&page.body);
    let inventory = exchange(
        "GET",
        &format!("{}/inventory", admin.origin),
        Some(&admin_cookie),
        None,
    )
    .await;
    assert!(
        inventory.body.contains("data-cluster-uuid=\"K-7f2c\""),
        "{}",
        inventory.body
    );
    assert!(
        inventory.body.contains("data-release=\"team-a/shop\""),
        "{}",
        inventory.body
    );
    assert!(lists_app(&page.body, "team-a", "shop") && lists_app(&page.body, "team-b", "bank"));

    // alice, who may list only team-a, sees only team-a.
    let alice = start_ui(&alice_reads_team_a(&f), &helm, &[]).await;
    let cookie = sign_in(&alice).await;
    let page = exchange("GET", &format!("{}/", alice.origin), Some(&cookie), None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(lists_app(&page.body, "team-a", "shop"), "{}", page.body);
    assert!(
        !lists_app(&page.body, "team-b", "bank"),
        "a tenant sees another namespace"
    );
    let other = exchange(
        "GET",
        &format!("{}/app/team-b/bank", alice.origin),
        Some(&cookie),
        None,
    )
    .await;
    assert_eq!(other.status, 404);
    // She may not list Hosstedprojects: the page says so, shows none.
    let inventory = exchange(
        "GET",
        &format!("{}/inventory", alice.origin),
        Some(&cookie),
        None,
    )
    .await;
    assert!(
        inventory.body.contains("data-error=\"projects\""),
        "{}",
        inventory.body
    );
    assert!(!inventory.body.contains("K-7f2c"));

    // The login link works once.
    let reused = exchange("GET", &alice.login_url, None, None).await;
    assert_eq!(
        (reused.status, reused.refusal.as_deref()),
        (403, Some("LoginUsed"))
    );

    // No cookie: 403, for a page and for an action.
    let anonymous = exchange("GET", &format!("{}/", alice.origin), None, None).await;
    assert_eq!(
        (anonymous.status, anonymous.refusal.as_deref()),
        (403, Some("NoSession"))
    );
    let csrf = csrf_of(&page.body);
    let approve_url = format!("{}/app/team-a/shop/approve", alice.origin);
    let form = format!("csrf={csrf}&hash=cafe0123");
    let no_cookie = exchange("POST", &approve_url, None, Some(form.clone())).await;
    assert_eq!(
        (no_cookie.status, no_cookie.refusal.as_deref()),
        (403, Some("NoSession"))
    );
    // The cookie without the CSRF token, or with a wrong one: 403.
    for bad in ["hash=cafe0123", "csrf=0000&hash=cafe0123"] {
        let a = exchange("POST", &approve_url, Some(&cookie), Some(bad.into())).await;
        assert_eq!(
            (a.status, a.refusal.as_deref()),
            (403, Some("NoCsrf")),
            "{bad}"
        );
    }

    // Cookie and CSRF token, but alice may not patch HelmApps: the
    // apiserver's 403 is shown, nothing is written.
    let denied = exchange("POST", &approve_url, Some(&cookie), Some(form.clone())).await;
    assert_eq!(denied.status, 403, "{denied:?}");
    assert_eq!(
        denied.refusal, None,
        "refused by the apiserver, not by the UI"
    );
    assert!(
        denied.body.contains("data-error-status=\"403\""),
        "{}",
        denied.body
    );
    let app = get_helmapp(&f, "team-a", "shop").await.unwrap();
    let annotations = app.metadata.annotations.unwrap_or_default();
    assert!(
        !annotations.contains_key("hossted.com/approve"),
        "{annotations:?}"
    );

    // One UI's cookie does not open another's.
    let crossed = exchange("GET", &format!("{}/", admin.origin), Some(&cookie), None).await;
    assert_eq!(
        (crossed.status, crossed.refusal.as_deref()),
        (403, Some("NoSession"))
    );

    // The admin, who may patch: a stale hash is refused (409) and writes
    // nothing; the pending one is written as hossted.com/approve.
    let admin_url = format!("{}/app/team-a/shop/approve", admin.origin);
    let stale = exchange(
        "POST",
        &admin_url,
        Some(&admin_cookie),
        Some(format!("csrf={admin_csrf}&hash=beef")),
    )
    .await;
    assert_eq!(stale.status, 409, "{stale:?}");
    let app = get_helmapp(&f, "team-a", "shop").await.unwrap();
    assert!(
        !app.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("hossted.com/approve")
    );
    let approved = exchange(
        "POST",
        &admin_url,
        Some(&admin_cookie),
        Some(format!("csrf={admin_csrf}&hash=cafe0123")),
    )
    .await;
    assert_eq!(
        (approved.status, approved.location.as_deref()),
        (303, Some("/app/team-a/shop")),
        "{approved:?}"
    );
    let app = get_helmapp(&f, "team-a", "shop").await.unwrap();
    assert_eq!(
        app.metadata
            .annotations
            .unwrap_or_default()
            .get("hossted.com/approve")
            .map(String::as_str),
        Some("cafe0123")
    );
}
