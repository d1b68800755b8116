//! The lean types decode what the API serves, and keep only what is read.

use crate::lean::kinds::{Ingress, Namespace, PersistentVolumeClaim, Pod, Service};
use crate::lean::objects::*;
use crate::lean::storage::{HelmRelease, UuidSecret};
use base64::Engine;
use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::json;
use std::io::Write;

fn meta(name: &str) -> serde_json::Value {
    json!({
        "name": name, "namespace": "apps", "resourceVersion": "42", "uid": "u-1",
        "labels": { INSTANCE_LABEL: "web", MANAGED_BY_LABEL: "Helm", "pod-template-hash": "abc", "team": "x" },
        "annotations": { "big": "x".repeat(1000) },
        "managedFields": [{ "manager": "kubectl", "fieldsV1": { "f:metadata": {} } }]
    })
}

#[test]
fn metadata_keeps_only_what_the_collector_reads() {
    let ns: Namespace = serde_json::from_value(json!({ "metadata": meta("apps") })).unwrap();
    let m = &ns.metadata;
    assert_eq!(m.name.as_deref(), Some("apps"));
    assert_eq!(m.resource_version.as_deref(), Some("42"));
    let labels: Vec<&str> = m.labels().iter().map(|(k, _)| k).collect();
    assert_eq!(labels, [INSTANCE_LABEL, MANAGED_BY_LABEL]);
    assert!(m.annotations.is_none() && m.managed_fields.is_none() && m.uid.is_none());
    assert!(
        kube::Resource::meta(&ns).labels.is_none(),
        "labels are kept beside the ObjectMeta, not in a map"
    );
}

#[test]
fn the_release_helm_applied_an_object_for_is_kept_from_its_annotations() {
    let mut with = meta("web");
    with["annotations"] = json!({
        "meta.helm.sh/release-name": "web", "meta.helm.sh/release-namespace": "tenant",
        "big": "x".repeat(1000)
    });
    let ns: Namespace = serde_json::from_value(json!({ "metadata": with })).unwrap();
    assert_eq!(ns.metadata.helm_release(), Some("tenant/web"));
    assert!(
        ns.metadata.annotations.is_none(),
        "no other annotation kept"
    );
    // Both are needed: a name alone does not say where the release is.
    let mut half = meta("web");
    half["annotations"] = json!({ "meta.helm.sh/release-name": "web" });
    let ns: Namespace = serde_json::from_value(json!({ "metadata": half })).unwrap();
    assert_eq!(ns.metadata.helm_release(), None);
    let ns: Namespace = serde_json::from_value(json!({ "metadata": meta("web") })).unwrap();
    assert_eq!(ns.metadata.helm_release(), None);
    // A value no release could have is not kept: its size is the writer's.
    for (name, namespace) in [
        ("x".repeat(54), "tenant".into()),
        ("web".into(), "n".repeat(64)),
    ] {
        let mut long = meta("web");
        long["annotations"] = json!({
            "meta.helm.sh/release-name": name, "meta.helm.sh/release-namespace": namespace
        });
        let ns: Namespace = serde_json::from_value(json!({ "metadata": long })).unwrap();
        assert_eq!(ns.metadata.helm_release(), None);
    }
}

#[test]
fn pod_image_and_phase_and_a_pod_without_containers() {
    let p: Pod = serde_json::from_value(json!({
        "metadata": meta("web-0"),
        "spec": { "containers": [{ "name": "a", "image": "nginx:1" }, { "name": "b", "image": "sidecar:2" }] },
        "status": { "phase": "Running", "podIP": "10.0.0.1" }
    }))
    .unwrap();
    assert_eq!((p.image(), p.phase.as_str()), ("nginx:1", "Running"));
    let empty: Pod =
        serde_json::from_value(json!({ "metadata": meta("x"), "spec": { "containers": [] } }))
            .unwrap();
    assert_eq!((empty.image(), empty.phase.as_str()), ("", ""));
}

#[test]
fn service_first_port_and_headless_service_without_ports() {
    let s: Service = serde_json::from_value(json!({
        "metadata": meta("web"), "spec": { "ports": [{ "port": 80 }, { "port": 443 }] }
    }))
    .unwrap();
    assert_eq!(s.port, 80);
    let headless: Service =
        serde_json::from_value(json!({ "metadata": meta("h"), "spec": { "clusterIP": "None" } }))
            .unwrap();
    assert_eq!(headless.port, 0);
}

#[test]
fn pvc_size_in_bytes_and_unset() {
    let p: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": meta("data"), "spec": { "resources": { "requests": { "storage": "8Gi" } } }
    }))
    .unwrap();
    assert_eq!(p.size, 8_589_934_592);
    let unset: PersistentVolumeClaim =
        serde_json::from_value(json!({ "metadata": meta("d"), "spec": {} })).unwrap();
    assert_eq!(unset.size, 0);
}

#[test]
fn ingress_first_host_and_default_backend_only() {
    let i: Ingress = serde_json::from_value(json!({
        "metadata": meta("web"), "spec": { "rules": [{ "host": "a.example.com" }, { "host": "b.example.com" }] }
    }))
    .unwrap();
    assert_eq!(i.domain(), "a.example.com");
    let no_rules: Ingress = serde_json::from_value(json!({
        "metadata": meta("d"), "spec": { "defaultBackend": { "service": { "name": "web", "port": { "number": 80 } } } }
    }))
    .unwrap();
    assert_eq!(no_rules.domain(), "");
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// A release Secret as the API serves it: data values are base64 of
/// Helm's own base64(gzip(JSON)).
fn release_secret(payload_json: &str) -> serde_json::Value {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(payload_json.as_bytes()).unwrap();
    let helm = b64(&gz.finish().unwrap());
    json!({
        "metadata": { "name": "sh.helm.release.v1.web.v2", "namespace": "apps", "uid": "uid-of-v2",
                      "labels": { "owner": "helm", "name": "web", "version": "2", "status": "deployed" } },
        "type": "helm.sh/release.v1",
        "data": { "release": b64(helm.as_bytes()) }
    })
}

#[test]
fn a_helm_release_secret_is_cached_decoded() {
    let payload = json!({
        "name": "web", "namespace": "apps", "version": 2,
        "info": { "status": "deployed", "last_deployed": "2024-02-28T01:32:37.338988+05:30" },
        "chart": { "metadata": { "name": "nginx", "appVersion": "1.27" } },
        "manifest": "labels:\n  hossted_helm: \"true\"\n"
    });
    let r: HelmRelease = serde_json::from_value(release_secret(&payload.to_string())).unwrap();
    let s = r.release.as_ref().unwrap();
    assert_eq!(
        (s.name.as_str(), s.version, s.chart.as_str()),
        ("web", 2, "nginx")
    );
    assert!(s.hossted_helm);
    assert_eq!(
        r.metadata.labels().iter().count(),
        0,
        "Helm's labels say again what the release says: not kept"
    );
    assert_eq!(
        r.metadata.uid, None,
        "no Event can be about it: UID not kept"
    );
}

#[test]
fn a_release_a_helmapp_owns_keeps_delivery_labels_only() {
    let payload = json!({
        "name": "web", "namespace": "apps", "version": 2,
        "info": { "status": "deployed" },
        "chart": { "metadata": { "name": "nginx" } },
        "manifest": ""
    });
    let mut secret = release_secret(&payload.to_string());
    secret["metadata"]["labels"]["hossted.com/helmapp-uid"] = json!("uid-1");
    secret["metadata"]["labels"]["hossted.com/config-hash"] = json!("h1");
    let r: HelmRelease = serde_json::from_value(secret).unwrap();
    let kept: Vec<&str> = r.metadata.labels().iter().map(|(k, _)| k).collect();
    assert_eq!(kept, ["hossted.com/config-hash", "hossted.com/helmapp-uid"]);
    assert!(r.digest.is_some(), "owned: its digest is kept");
}

#[test]
fn a_corrupt_helm_release_secret_is_cached_with_its_error() {
    let mut secret = release_secret("{}");
    secret["data"]["release"] = json!(b64(b"H4sIAAAAAAAA/garbage"));
    let r: HelmRelease = serde_json::from_value(secret).unwrap();
    assert!(r.release.is_err());
    // Name and revision still come from Helm's labels.
    assert_eq!((r.release_name(), r.version()), ("web", 2));
    // The UID, for the Warning on it (the inventory cannot read it back).
    assert_eq!(r.metadata.uid.as_deref(), Some("uid-of-v2"));
    let mut missing = release_secret("{}");
    missing["data"] = json!({});
    let r: HelmRelease = serde_json::from_value(missing).unwrap();
    assert_eq!(r.release.unwrap_err(), "the Secret has no data.release");
}

#[test]
fn the_uuid_secret_yields_its_uuid() {
    let s: UuidSecret = serde_json::from_value(json!({
        "metadata": { "name": "uuid", "namespace": "apps" },
        "data": { "uuid": b64(b"0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30\n") }
    }))
    .unwrap();
    assert_eq!(
        s.uuid.as_deref(),
        Some("0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30")
    );
    let none: UuidSecret =
        serde_json::from_value(json!({ "metadata": { "name": "uuid" }, "data": {} })).unwrap();
    assert_eq!(none.uuid, None);
}

#[test]
fn kept_labels_hold_only_the_kept_ones() {
    let mut labels = KeptLabels::keep(BTreeMap::from([
        (INSTANCE_LABEL.to_string(), "web".to_string()),
        ("app".to_string(), "not kept".to_string()),
        ("owner".to_string(), "helm".to_string()),
    ]));
    assert_eq!(labels.get(INSTANCE_LABEL), Some("web"));
    assert_eq!(labels.get("owner"), Some("helm"));
    assert_eq!(labels.get("app"), None, "not one of KEPT_LABELS");
    assert_eq!(labels.get(MANAGED_BY_LABEL), None, "kept, but not set");
    labels.retain(|k| k == "owner");
    assert_eq!(labels.iter().collect::<Vec<_>>(), [("owner", "helm")]);
}

#[test]
fn lean_meta_from_object_meta_moves_its_labels() {
    let meta = LeanMeta::from(ObjectMeta {
        name: Some("web-0".into()),
        labels: Some(BTreeMap::from([(
            INSTANCE_LABEL.to_string(),
            "web".to_string(),
        )])),
        ..Default::default()
    });
    assert_eq!(meta.name.as_deref(), Some("web-0"));
    assert_eq!(label(&meta, INSTANCE_LABEL), "web");
    assert!((*meta).labels.is_none(), "the ObjectMeta keeps no map");
}
