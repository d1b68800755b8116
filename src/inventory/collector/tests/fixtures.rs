//! The collector's test cluster: caches filled by hand (no apiserver).

//! The collector on in-memory stores.

use super::super::*;
use crate::lean::helm::ReleaseSummary;
use crate::lean::kinds::{Container, Owner};
use crate::lean::kinds::{Ingress, Namespace, PersistentVolumeClaim, Pod, Service};
use crate::lean::objects::{INSTANCE_LABEL, LeanMeta, MANAGED_BY_LABEL};
use crate::lean::trivy::VulnerabilityReport;
use crate::lean::workloads::{ConfigMap, Deployment, ReleaseSecret, StatefulSet};
use kube::api::ObjectMeta;
use std::collections::BTreeMap;
use std::sync::Arc;

pub(super) fn meta(ns: &str, name: &str, labels: &[(&str, &str)]) -> LeanMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        ),
        ..Default::default()
    }
    .into()
}

pub(super) fn helm_labels(instance: &str) -> Vec<(&str, &str)> {
    vec![(INSTANCE_LABEL, instance), (MANAGED_BY_LABEL, "Helm")]
}

pub(super) fn release(
    ns: &str,
    name: &str,
    version: i64,
    status: &str,
    marker: bool,
) -> Arc<HelmRelease> {
    Arc::new(HelmRelease {
        metadata: meta(
            ns,
            &format!("sh.helm.release.v1.{name}.v{version}"),
            &[("owner", "helm")],
        ),
        release: Ok(ReleaseSummary {
            name: name.into(),
            namespace: ns.into(),
            version,
            status: status.into(),
            updated: format!("2024-02-28T01:32:3{version}.338988+05:30"),
            first_deployed: "2024-02-28T01:32:31.338988+05:30".into(),
            chart: format!("{name}-chart"),
            chart_version: "0.1.0".into(),
            app_version: "1.0".into(),
            hossted_helm: marker,
            server_side: false,
            objects: Vec::new(),
        }),
        digest: None,
        content: None,
        kept: 0,
    })
}

pub(super) fn namespace(c: &Caches, ns: &str) {
    c.namespaces.upsert(Arc::new(Namespace {
        metadata: ObjectMeta {
            name: Some(ns.into()),
            ..Default::default()
        }
        .into(),
    }));
}

pub(super) fn pod(ns: &str, name: &str, labels: &[(&str, &str)], image: &str) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: meta(ns, name, labels),
        containers: if image.is_empty() {
            Vec::new()
        } else {
            vec![Container {
                name: "main".into(),
                image: image.into(),
            }]
        },
        controller: None,
        phase: "Running".into(),
    })
}

/// A pod of a workload, with these containers (name, image).
pub(super) fn workload_pod(
    name: &str,
    instance: &str,
    owner: (&str, &str),
    containers: &[(&str, &str)],
) -> Arc<Pod> {
    Arc::new(Pod {
        metadata: meta("default", name, &helm_labels(instance)),
        containers: containers
            .iter()
            .map(|(n, i)| Container {
                name: n.to_string(),
                image: i.to_string(),
            })
            .collect(),
        controller: Some(Owner {
            kind: owner.0.into(),
            name: owner.1.into(),
        }),
        phase: "Running".into(),
    })
}

pub(super) fn report(
    kind: &str,
    workload: &str,
    container: &str,
    critical: &str,
) -> Arc<VulnerabilityReport> {
    use crate::lean::trivy::{Summary, Vulnerability};
    Arc::new(VulnerabilityReport {
        metadata: meta("default", &format!("{kind}-{workload}-{container}"), &[]),
        workload_kind: kind.into(),
        workload_name: workload.into(),
        container: container.into(),
        summary: Summary {
            critical_count: 1,
            high_count: 0,
            medium_count: 3,
            low_count: 0,
            unknown_count: 0,
        },
        vulnerabilities: vec![Vulnerability {
            vulnerability_id: critical.into(),
            severity: "CRITICAL".into(),
            resource: "openssl".into(),
            installed_version: "3.0.1".into(),
            fixed_version: "3.0.2".into(),
            title: "bad".into(),
        }],
    })
}

/// Two releases sharing a namespace, plus noise.
pub(super) fn cluster() -> Caches {
    let c = Caches::new();
    for ns in ["default", "denied"] {
        namespace(&c, ns);
    }
    c.releases
        .upsert(release("default", "test", 1, "superseded", false));
    c.releases
        .upsert(release("default", "test", 2, "deployed", false));
    c.releases
        .upsert(release("default", "other", 1, "deployed", false));
    c.releases
        .upsert(release("denied", "hidden", 1, "deployed", false));
    c.releases
        .upsert(release("gone", "orphan", 1, "deployed", false)); // namespace not cached
    c.pods.upsert(pod(
        "default",
        "test-keycloak-1",
        &helm_labels("test"),
        "keycloak:23",
    ));
    c.pods.upsert(pod(
        "default",
        "test-keycloak-0",
        &helm_labels("test"),
        "keycloak:23",
    ));
    c.pods
        .upsert(pod("default", "other-0", &helm_labels("other"), "nginx:1"));
    c.pods.upsert(pod(
        "default",
        "test-by-hand",
        &[(INSTANCE_LABEL, "test")],
        "x",
    )); // not managed by Helm
    c.pods
        .upsert(pod("default", "no-containers", &helm_labels("other"), ""));
    c.services.upsert(Arc::new(Service {
        fingerprint: Default::default(),
        metadata: meta("default", "test-keycloak", &helm_labels("test")),
        port: 80,
    }));
    c.services.upsert(Arc::new(Service {
        fingerprint: Default::default(),
        metadata: meta("default", "test-headless", &helm_labels("test")),
        port: 0,
    }));
    // Claim templates carry the instance label only.
    c.pvcs.upsert(Arc::new(PersistentVolumeClaim {
        metadata: meta(
            "default",
            "data-test-postgresql-0",
            &[(INSTANCE_LABEL, "test")],
        ),
        size: 8_589_934_592,
    }));
    c.ingresses.upsert(Arc::new(Ingress {
        fingerprint: Default::default(),
        metadata: meta("default", "keycloak", &helm_labels("test")),
        hosts: vec![
            "keycloak.example.com".into(),
            "".into(),
            "admin.example.com".into(),
        ],
        tls_hosts: vec!["keycloak.example.com".into()],
    }));
    c.deployments.upsert(Arc::new(Deployment {
        fingerprint: Default::default(),
        metadata: meta("default", "test-keycloak", &helm_labels("test")),
        secret_ref: Some(crate::lean::workloads::SecretKeyRef {
            name: "test-keycloak".into(),
            key: "admin-password".into(),
        }),
        rollout: Default::default(),
    }));
    c.deployments.upsert(Arc::new(Deployment {
        fingerprint: Default::default(),
        metadata: meta("default", "test-worker", &helm_labels("test")),
        secret_ref: None,
        rollout: Default::default(),
    }));
    c.statefulsets.upsert(Arc::new(StatefulSet {
        fingerprint: Default::default(),
        metadata: meta("default", "test-postgresql", &helm_labels("test")),
        rollout: Default::default(),
    }));
    c.configmaps.upsert(Arc::new(ConfigMap {
        metadata: meta("default", "test-keycloak-env", &helm_labels("test")),
        data: None,
    }));
    c.configmaps.upsert(Arc::new(ConfigMap {
        metadata: meta("default", "not-helm", &[(INSTANCE_LABEL, "test")]),
        data: None,
    }));
    c.secrets.upsert(Arc::new(ReleaseSecret {
        metadata: meta("default", "test-postgresql", &helm_labels("test")),
    }));
    // Two pods of one StatefulSet, and a report per container of it; a
    // report of another workload with the same container name.
    c.pods.upsert(workload_pod(
        "test-postgresql-0",
        "test",
        ("StatefulSet", "test-postgresql"),
        &[("postgresql", "postgres:16"), ("metrics", "exporter:1")],
    ));
    c.vulnerability_reports.upsert(report(
        "StatefulSet",
        "test-postgresql",
        "postgresql",
        "CVE-PG",
    ));
    c.vulnerability_reports.upsert(report(
        "ReplicaSet",
        "other-7d4",
        "postgresql",
        "CVE-ELSEWHERE",
    ));
    c
}

pub(super) const CLUSTER: &str = "K-6f1c2a4e-8a51-4d0b-9a54-2b7f0e3c9d11";

/// The UUID a release of these tests gets when nothing was recorded.
pub(super) fn derived(ns: &str, name: &str) -> String {
    derived_app_uuid(CLUSTER, ns, name, "2024-02-28T01:32:31.338988+05:30")
}

pub(super) fn ctx<'a>(deny: &'a [String], known: &'a Known) -> Context<'a> {
    Context {
        cluster_uuid: CLUSTER,
        email_id: "ops@example.com",
        org_id: "org-123",
        deny_namespaces: deny,
        monitoring: true,
        cve: true,
        known,
    }
}
