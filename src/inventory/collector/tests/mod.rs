//! The collector on in-memory stores.

use super::*;
use crate::lean::storage::UuidSecret;
use serde_json::json;
use std::sync::Arc;

mod fixtures;
use fixtures::*;

#[test]
fn one_app_per_release_with_its_own_objects_from_its_latest_revision() {
    let deny = vec!["denied".to_string()];
    let (c, known) = (cluster(), Known::default());
    let context = ctx(&deny, &known);
    let got = collect(&c, &context);
    assert!(got.invalid.is_empty());
    let names: Vec<_> = got.apps.iter().map(|a| a.status.name.as_str()).collect();
    assert_eq!(
        names,
        ["other", "test"],
        "denied and vanished namespaces are left out"
    );

    let test = serde_json::to_value(got.apps[1].payload(&c, &context)).unwrap();
    assert_eq!(
        test,
        json!({
            "app_api_info": {
                "cluster_uuid": "K-6f1c2a4e-8a51-4d0b-9a54-2b7f0e3c9d11",
                "app_uuid": derived("default", "test"),
                "app_name": "test",
                "email_id": "ops@example.com",
                "type": "k8s",
                "hossted_helm": false,
                "org_id": "org-123",
                "options_state": { "monitoring": { "enabled": true, "grafana_product_name": "" } }
            },
            "app_info": {
                "helm_info": {
                    "name": "test", "namespace": "default", "revision": 2,
                    "updated": "2024-02-28T01:32:32.338988+05:30", "status": "deployed",
                    "chart": "test-chart", "appVersion": "1.0",
                    "appUUID": derived("default", "test"), "hossted_helm": false
                },
                "pod_info": [
                    { "name": "test-keycloak-0", "namespace": "default", "image": "keycloak:23", "status": "Running" },
                    { "name": "test-keycloak-1", "namespace": "default", "image": "keycloak:23", "status": "Running" },
                    { "name": "test-postgresql-0", "namespace": "default", "image": "postgres:16", "status": "Running" }
                ],
                "service_info": [
                    { "name": "test-headless", "namespace": "default", "port": 0 },
                    { "name": "test-keycloak", "namespace": "default", "port": 80 }
                ],
                "volume_info": [
                    { "name": "data-test-postgresql-0", "namespace": "default", "size": 8589934592u64 }
                ],
                "ingress_info": [
                    { "name": "keycloak", "namespace": "default", "domain": "keycloak.example.com" }
                ],
                "deployment_info": [
                    { "name": "test-keycloak", "namespace": "default",
                      "secretRef": { "name": "test-keycloak", "key": "admin-password" } },
                    { "name": "test-worker", "namespace": "default", "secretRef": null }
                ],
                "statefulset_info": [ { "name": "test-postgresql", "namespace": "default" } ],
                "configmap_info": [ { "name": "test-keycloak-env", "data": {} } ],
                "secret_info": [ { "name": "test-postgresql", "namespace": "default", "data": {} } ],
                "helmvalue_info": { "chart_name": "test-chart", "chart_values": {} },
                "access_info": { "urls": [
                    { "url": "http://admin.example.com" }, { "url": "https://keycloak.example.com" }
                ] },
                "security_info": [ { "pod_name": "test-postgresql-0", "pod_namespace": "default",
                    "containers": [ { "container_image": "postgres:16", "type": "k8s",
                        "summary": { "criticalCount": 1, "highCount": 0, "mediumCount": 3, "lowCount": 0, "unknownCount": 0 },
                        "vulnerabilities": [ { "vulnerabilityID": "CVE-PG", "severity": "CRITICAL", "resource": "openssl",
                            "installedVersion": "3.0.1", "fixedVersion": "3.0.2", "title": "bad" } ] } ] } ]
            }
        })
    );
    let other = serde_json::to_value(got.apps[0].payload(&c, &context).app_info).unwrap();
    assert_eq!(
        other["pod_info"],
        json!([
            { "name": "no-containers", "namespace": "default", "image": "", "status": "Running" },
            { "name": "other-0", "namespace": "default", "image": "nginx:1", "status": "Running" }
        ])
    );
    for list in [
        "service_info",
        "volume_info",
        "ingress_info",
        "deployment_info",
        "statefulset_info",
        "configmap_info",
        "secret_info",
        "security_info",
    ] {
        assert_eq!(other[list], json!([]), "{list} is [] not null");
    }
    assert_eq!(got.apps[1].status.revision, 2);
    assert_eq!(
        got.apps[1].status.app_uuid,
        got.apps[1].payload(&c, &context).app_api_info.app_uuid
    );
}

#[test]
fn app_uuids_are_kept_then_taken_from_the_uuid_secret_then_new() {
    let c = Caches::new();
    for ns in ["a", "b"] {
        namespace(&c, ns);
        c.uuid_secrets.upsert(Arc::new(UuidSecret {
            metadata: meta(ns, "uuid", &[]),
            uuid: Some(format!("{ns}{ns}{ns}-secret")),
        }));
    }
    c.releases
        .upsert(release("a", "known", 1, "deployed", true));
    c.releases
        .upsert(release("a", "marked", 1, "deployed", true));
    c.releases
        .upsert(release("b", "unmarked", 1, "deployed", false));
    let known = Known::new([DeliveredApp {
        name: "known".into(),
        namespace: "a".into(),
        app_uuid: "A-recorded".into(),
        ..Default::default()
    }]);
    let got = collect(&c, &ctx(&[], &known));
    let uuids: Vec<(&str, &str)> = got
        .apps
        .iter()
        .map(|a| (a.status.name.as_str(), a.status.app_uuid.as_str()))
        .collect();
    assert_eq!(
        uuids,
        [
            ("known", "A-recorded"),
            ("marked", "A-aaa-secret"),
            ("unmarked", derived("b", "unmarked").as_str()),
        ]
    );
}

#[test]
fn a_derived_app_uuid_is_stable_per_installation_and_cluster() {
    let first = derived_app_uuid(CLUSTER, "a", "web", "2024-01-01T00:00:00Z");
    assert!(first.starts_with("A-") && first.len() == 38, "{first}");
    assert_eq!(
        first,
        derived_app_uuid(CLUSTER, "a", "web", "2024-01-01T00:00:00Z")
    );
    let others = [
        derived_app_uuid(CLUSTER, "a", "web", "2024-06-01T00:00:00Z"), // reinstalled
        derived_app_uuid(CLUSTER, "b", "web", "2024-01-01T00:00:00Z"),
        derived_app_uuid(CLUSTER, "a", "api", "2024-01-01T00:00:00Z"),
        derived_app_uuid(
            "K-0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30",
            "a",
            "web",
            "2024-01-01T00:00:00Z",
        ),
    ];
    assert!(others.iter().all(|o| *o != first), "{others:?}");
    // Version 5 (name-based, SHA-1), as docs/inventory.md says.
    assert_eq!(
        uuid::Uuid::parse_str(&first[2..])
            .unwrap()
            .get_version_num(),
        5
    );
}

#[test]
fn a_corrupt_latest_revision_is_reported_and_the_others_still_collected() {
    let c = cluster();
    c.releases.upsert(Arc::new(HelmRelease {
        metadata: {
            let mut m = meta(
                "default",
                "sh.helm.release.v1.test.v3",
                &[("name", "test"), ("version", "3")],
            );
            m.uid = Some("uid-of-v3".into());
            m
        },
        release: Err("the release's gzip stream is corrupt".into()),
        digest: None,
        content: None,
        kept: 0,
    }));
    let got = collect(&c, &ctx(&[], &Known::default()));
    assert_eq!(
        got.invalid,
        [InvalidRelease {
            namespace: "default".into(),
            release: "test".into(),
            secret: "sh.helm.release.v1.test.v3".into(),
            kind: "Secret",
            uid: Some("uid-of-v3".into()),
            resource_version: String::new(),
            error: "the release's gzip stream is corrupt".into(),
        }]
    );
    let names: Vec<_> = got.apps.iter().map(|a| a.status.name.as_str()).collect();
    assert_eq!(names, ["other", "hidden"], "sorted by namespace, then name");
}

#[test]
fn a_report_is_needed_for_new_apps_and_changed_revision_or_status() {
    let got = collect(&cluster(), &ctx(&[], &Known::default()));
    let test = got.apps.iter().find(|a| a.status.name == "test").unwrap();
    assert!(needs_report(test, None));
    let delivered = test.delivered();
    assert!(!needs_report(test, Some(&delivered)));
    let mut older = test.delivered();
    older.revision = 1;
    assert!(needs_report(test, Some(&older)));
    let mut failed = test.delivered();
    failed.status = "failed".into();
    assert!(needs_report(test, Some(&failed)));
}

#[test]
fn a_removal_carries_the_chart_last_seen_of_that_revision_only() {
    let got = collect(&cluster(), &ctx(&[], &Known::default()));
    let test = got.apps.iter().find(|a| a.status.name == "test").unwrap();
    let known = test.delivered();
    let no_deny: Vec<String> = Vec::new();
    let unknown = Known::default();
    let context = ctx(&no_deny, &unknown);
    let sent = uninstalled(&known, Some(&test.status), &context);
    let helm = &sent.app_info.helm_info;
    assert_eq!(helm.status, "uninstalled");
    assert_eq!(helm.chart, test.status.chart);
    assert!(!helm.chart.is_empty() && !helm.updated.is_empty());
    assert_eq!(sent.app_api_info.app_uuid, known.app_uuid);
    // After a restart nothing was seen: what the status keeps, no chart.
    let mut older = test.status.clone();
    older.revision -= 1;
    for seen in [None, Some(&older)] {
        let sent = uninstalled(&known, seen, &context);
        assert_eq!(sent.app_info.helm_info.chart, "");
        assert_eq!(sent.app_info.helm_info.revision, known.revision);
        assert_eq!(sent.app_api_info.hossted_helm, known.hossted_helm);
    }
}

#[test]
fn security_info_is_empty_when_cve_scanning_is_off() {
    let c = cluster();
    let known = Known::default();
    let mut context = ctx(&[], &known);
    context.cve = false;
    let got = collect(&c, &context);
    let test = got.apps.iter().find(|a| a.status.name == "test").unwrap();
    assert!(test.payload(&c, &context).app_info.security_info.is_empty());
    context.cve = true;
    context.monitoring = false;
    let got = collect(&c, &context);
    let test = got.apps.iter().find(|a| a.status.name == "test").unwrap();
    let payload = test.payload(&c, &context);
    assert_eq!(payload.app_info.security_info.len(), 1);
    assert!(!payload.app_api_info.options_state.monitoring.enabled);
}

#[test]
fn the_docs_key_table_names_every_key_sent() {
    let readme = include_str!("../../../../docs/inventory.md");
    let table = readme
        .split("### Every payload key")
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .expect("docs/inventory.md has the key table");
    let (c, known) = (cluster(), Known::default());
    let context = ctx(&[], &known);
    let got = collect(&c, &context);
    let payload = serde_json::to_value(got.apps[1].payload(&c, &context)).unwrap();
    for part in ["app_api_info", "app_info"] {
        for key in payload[part].as_object().unwrap().keys() {
            assert!(
                table.contains(key.as_str()),
                "docs/inventory.md's key table lacks {part}.{key}"
            );
        }
    }
    for key in payload["app_info"]["helm_info"].as_object().unwrap().keys() {
        assert!(
            table.contains(key.as_str()),
            "docs/inventory.md's key table lacks helm_info.{key}"
        );
    }
}
