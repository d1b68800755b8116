//! The operator end to end: real apiserver, real helm releases, a local API
//! receiver. The main reporting scenario, an upgrade, quiet time, restart.

use std::time::Duration;

use crate::support::*;
use hossted_operator::lean::helm::decode_release;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::json;

const PORTAL_UUID: &str = "0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30";

/// `info.last_deployed` of a release revision, as Helm stored it.
async fn updated(f: &Fixture, ns: &str, name: &str, version: u32) -> String {
    let s = Api::<Secret>::namespaced(f.cp.client(), ns)
        .get(&format!("sh.helm.release.v1.{name}.v{version}"))
        .await
        .unwrap();
    decode_release(&s.data.unwrap()["release"].0)
        .unwrap()
        .updated
}

#[tokio::test]
async fn reports_each_release_once_then_only_changes_and_survives_a_restart() {
    let f = Fixture::new().await;
    let (web, hossted, tiny) = (chart("web"), chart("hossted-app"), chart("tiny"));
    f.helm(&["install", "web", &web, "-n", "team-a", "--create-namespace"]);
    f.helm(&[
        "install",
        "api",
        &web,
        "-n",
        "team-a",
        "--set",
        "headless=true,defaultBackendOnly=true,port=8080,storage=512Mi",
    ]);
    f.namespace("team-b").await;
    f.secret("team-b", "uuid", &[("uuid", PORTAL_UUID)]).await;
    f.helm(&["install", "portal", &hossted, "-n", "team-b"]);
    f.helm(&[
        "install",
        "hidden",
        &tiny,
        "-n",
        "denied",
        "--create-namespace",
    ]);
    f.set_pod_phase("team-a", "web-web-0", "Running").await;
    f.set_pod_phase("team-a", "api-web-0", "Pending").await;
    f.hosstedproject(
        "cluster",
        json!({ "denyNamespaces": ["denied"], "monitoring": { "enable": true } }),
    )
    .await;

    let operator = f.start_operator();

    // One registration.
    let reg = f
        .api
        .wait_for(
            |r| r.path.ends_with("/register"),
            1,
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(reg.len(), 1, "{reg:?}");
    let cluster_uuid = reg[0]
        .path
        .strip_prefix("/v1/clusters/")
        .and_then(|p| p.strip_suffix("/register"))
        .unwrap()
        .to_string();
    assert!(
        cluster_uuid.starts_with("K-") && cluster_uuid.len() == 38,
        "{cluster_uuid}"
    );
    assert_eq!(
        reg[0].json(),
        json!({
            "type": "k8s", "org_id": "org-123", "context_name": "test-cluster", "email_id": EMAIL,
            "options_state": { "monitoring": true, "logging": false, "cve_scan": false, "ingress": false }
        })
    );
    assert_eq!(
        reg[0].header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );

    // Exactly one POST per release, each the whole expected document.
    let apps = f.wait_requests("/v1/apps", 3, 60).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let apps = {
        let all = f.requests_to("/v1/apps");
        assert_eq!(
            all.len(),
            3,
            "one POST per release: {:?}",
            by_app_name(&all).keys()
        );
        assert!(apps.len() <= 3);
        by_app_name(&all)
    };
    let uuid_of = |name: &str| {
        apps[name]["app_api_info"]["app_uuid"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let api_info = |name: &str, uuid: String, marker: bool| {
        json!({ "cluster_uuid": cluster_uuid, "app_uuid": uuid, "app_name": name,
                "email_id": EMAIL, "type": "k8s", "hossted_helm": marker, "org_id": "org-123",
                "options_state": { "monitoring": { "enabled": true, "grafana_product_name": "" } } })
    };
    // The Go 0.7.6 keys of a chart without workloads, Secrets or CVE data.
    let go_keys = |chart: &str, configmaps: serde_json::Value, urls: serde_json::Value| {
        json!({ "deployment_info": [], "statefulset_info": [], "configmap_info": configmaps,
                "secret_info": [], "helmvalue_info": { "chart_name": chart, "chart_values": {} },
                "access_info": { "urls": urls }, "security_info": [] })
    };
    let with = |mut base: serde_json::Value, more: serde_json::Value| {
        for (k, v) in more.as_object().unwrap() {
            base[k] = v.clone();
        }
        base
    };
    assert_eq!(
        apps["web"],
        json!({
            "app_api_info": api_info("web", uuid_of("web"), false),
            "app_info": with(json!({
                "helm_info": { "name": "web", "namespace": "team-a", "revision": 1,
                               "updated": updated(&f, "team-a", "web", 1).await, "status": "deployed",
                               "chart": "web", "appVersion": "1.27.3",
                               "appUUID": uuid_of("web"), "hossted_helm": false },
                "pod_info": [{ "name": "web-web-0", "namespace": "team-a",
                               "image": "docker.io/bitnami/nginx:1.27.3-debian-12-r0", "status": "Running" }],
                "service_info": [{ "name": "web-web", "namespace": "team-a", "port": 80 }],
                "volume_info": [{ "name": "data-web-web-0", "namespace": "team-a", "size": 1073741824u64 }],
                "ingress_info": [{ "name": "web-web", "namespace": "team-a", "domain": "web.example.com" }]
            }), go_keys("web", json!([]), json!([{ "url": "http://web.example.com" }])))
        })
    );
    // The headless service without ports and the ingress without rules.
    assert_eq!(
        apps["api"]["app_info"],
        with(
            json!({
                "helm_info": { "name": "api", "namespace": "team-a", "revision": 1,
                               "updated": updated(&f, "team-a", "api", 1).await, "status": "deployed",
                               "chart": "web", "appVersion": "1.27.3",
                               "appUUID": uuid_of("api"), "hossted_helm": false },
                "pod_info": [{ "name": "api-web-0", "namespace": "team-a",
                               "image": "docker.io/bitnami/nginx:1.27.3-debian-12-r0", "status": "Pending" }],
                "service_info": [{ "name": "api-headless", "namespace": "team-a", "port": 0 },
                                 { "name": "api-web", "namespace": "team-a", "port": 8080 }],
                "volume_info": [{ "name": "data-api-web-0", "namespace": "team-a", "size": 536870912u64 }],
                "ingress_info": [{ "name": "api-web", "namespace": "team-a", "domain": "" }]
            }),
            go_keys("web", json!([]), json!([]))
        )
    );
    // The marked release in a namespace with a uuid Secret takes that UUID.
    assert_eq!(
        apps["portal"],
        json!({
            "app_api_info": api_info("portal", format!("A-{PORTAL_UUID}"), true),
            "app_info": with(json!({
                "helm_info": { "name": "portal", "namespace": "team-b", "revision": 1,
                               "updated": updated(&f, "team-b", "portal", 1).await, "status": "deployed",
                               "chart": "hossted-app", "appVersion": "23.0.5",
                               "appUUID": format!("A-{PORTAL_UUID}"), "hossted_helm": true },
                "pod_info": [], "service_info": [], "volume_info": [], "ingress_info": []
            }), go_keys("hossted-app", json!([{ "name": "portal-settings", "data": {} }]), json!([])))
        })
    );
    for name in ["web", "api"] {
        let u = uuid_of(name);
        assert!(
            u.starts_with("A-") && u.len() == 38 && u != uuid_of("portal"),
            "{u}"
        );
    }

    // Status records what was delivered.
    let hp = eventually("status to record 3 apps", 30, || async {
        let hp = f.get_hp("cluster").await;
        (hp.status.as_ref()?.app_count == 3).then_some(hp)
    })
    .await;
    let st = hp.status.clone().unwrap();
    assert_eq!(st.cluster_uuid, cluster_uuid);
    assert!(st.cluster_registered);
    let (mut delivered, unreadable) = st.delivered();
    assert!(unreadable.is_empty(), "{unreadable:?}");
    delivered.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let recorded: Vec<(String, String, String, i64)> = delivered
        .iter()
        .map(|h| {
            (
                h.namespace.clone(),
                h.name.clone(),
                h.app_uuid.clone(),
                h.revision,
            )
        })
        .collect();
    assert_eq!(
        recorded,
        [
            ("team-a".into(), "api".into(), uuid_of("api"), 1),
            ("team-a".into(), "web".into(), uuid_of("web"), 1),
            (
                "team-b".into(),
                "portal".into(),
                format!("A-{PORTAL_UUID}"),
                1
            ),
        ]
    );
    // Compact: one string per namespace, and none of the Go operator's
    // one-entry-per-release fields.
    assert_eq!(st.apps.keys().collect::<Vec<_>>(), ["team-a", "team-b"]);
    assert!(st.helm_status.is_empty() && st.revision.is_empty());
    assert!(st.reconcile_helm_releases.is_empty());
    assert_eq!(st.observed_generation, hp.metadata.generation);
    assert!(!st.last_reconcile_timestamp.is_empty());
    let ready = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready condition");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Reporting")
    );

    // kubectl get hp / describe hp.
    let table = f.kubectl(&["get", "hp"]);
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..5],
        ["cluster", cluster_uuid.as_str(), "3", "false", "True"],
        "{table}"
    );
    let described = eventually("events in kubectl describe hp", 30, || async {
        let d = f.kubectl(&["describe", "hp", "cluster"]);
        (d.contains("ClusterRegistered") && d.contains("AppsReported")).then_some(d)
    })
    .await;
    assert!(described.contains("reported 3 app(s)"), "{described}");
    assert!(!described.contains(TOKEN));

    // helm upgrade of one release: exactly one POST, for it. (How fast is
    // a figure of the scale benchmark, hack/bench.sh: change-to-delivery.)
    f.helm(&[
        "upgrade",
        "web",
        &web,
        "-n",
        "team-a",
        "--set",
        "image=docker.io/bitnami/nginx:1.27.4",
    ]);
    let after = f.wait_requests("/v1/apps", 4, 30).await;
    let new = after[3].json();
    assert_eq!(new["app_info"]["helm_info"]["name"], "web");
    assert_eq!(new["app_info"]["helm_info"]["revision"], 2);
    assert_eq!(
        new["app_api_info"]["app_uuid"],
        uuid_of("web").as_str(),
        "the app UUID is stable"
    );
    assert_eq!(
        new["app_info"]["pod_info"][0]["image"],
        "docker.io/bitnami/nginx:1.27.4"
    );

    // No other change: a reconcile (a spec edit that changes nothing
    // reported) sends nothing, nor does anything in a short window after.
    let mark = operator.mark();
    f.patch_spec(
        "cluster",
        json!({ "denyNamespaces": ["denied", "no-such-namespace"] }),
    )
    .await;
    operator.reconciled_since(mark).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        f.requests_to("/v1/apps").len(),
        4,
        "a POST without a change"
    );

    // Restart: nothing is repeated once the new process has reconciled;
    // UUIDs stay.
    operator.stop().await;
    let before = f.api.requests().len();
    let operator = f.start_operator();
    operator.reconciled_since(0).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        f.api.requests().len(),
        before,
        "the restarted operator re-sent something"
    );
    let st = f.get_hp("cluster").await.status.unwrap();
    assert_eq!(st.cluster_uuid, cluster_uuid);
    let mut delivered = st.delivered().0;
    delivered.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let uuids: Vec<&str> = delivered.iter().map(|h| h.app_uuid.as_str()).collect();
    assert_eq!(
        uuids,
        [uuid_of("api"), uuid_of("web"), format!("A-{PORTAL_UUID}")]
    );
    operator.stop().await;
}
