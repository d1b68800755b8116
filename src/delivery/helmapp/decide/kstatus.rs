//! Readiness of an object of any kind, by the rules kstatus (the
//! Kubernetes CLI's status library) gives and docs/delivery.md "Readiness of
//! any kind" adopts (pure; unit-tested):
//!
//! - a PersistentVolumeClaim is ready once `Bound`;
//! - `status.observedGeneration` below `metadata.generation`: not yet;
//! - `Stalled` or `Failed` `True`: failed, with the condition's message;
//! - `Ready` (else `Available`) decides when present;
//! - `Reconciling` `True`: not yet;
//! - none of these (an HPA, a PDB, a ConfigMap): ready.

use serde_json::Value;

/// What an object's status says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    /// Not yet, and why.
    Pending(String),
    /// It will not become ready by waiting: its own message.
    Failed(String),
}

/// The readiness of `object` (as the API serves it).
pub fn readiness(object: &Value) -> Readiness {
    let status = object.get("status");
    if object.get("kind").and_then(Value::as_str) == Some("PersistentVolumeClaim") {
        let phase = status
            .and_then(|s| s.get("phase"))
            .and_then(Value::as_str)
            .unwrap_or("Pending");
        return match phase {
            "Bound" => Readiness::Ready,
            "Lost" => Readiness::Failed("its volume is lost (phase Lost)".into()),
            other => Readiness::Pending(format!("phase {other}, not Bound")),
        };
    }
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    let observed = status
        .and_then(|s| s.get("observedGeneration"))
        .and_then(Value::as_i64);
    if let (Some(generation), Some(observed)) = (generation, observed)
        && observed < generation
    {
        return Readiness::Pending(format!(
            "its controller has not seen generation {generation} yet (observed {observed})"
        ));
    }
    let conditions: Vec<&Value> = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .map(|c| c.iter().collect())
        .unwrap_or_default();
    let find = |type_: &str| {
        conditions
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
    };
    let is_true = |c: &&&Value| c.get("status").and_then(Value::as_str) == Some("True");
    let message = |c: &Value| {
        let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
        match (text("reason"), text("message")) {
            ("", "") => format!("{} is {}", text("type"), text("status")),
            (reason, "") => format!("{} is {} ({reason})", text("type"), text("status")),
            (_, message) => message.to_string(),
        }
    };
    for failing in ["Stalled", "Failed"] {
        if let Some(c) = find(failing).filter(is_true) {
            return Readiness::Failed(message(c));
        }
    }
    if let Some(c) = find("Ready").or_else(|| find("Available")) {
        return if is_true(&c) {
            Readiness::Ready
        } else {
            Readiness::Pending(message(c))
        };
    }
    if let Some(c) = find("Reconciling").filter(is_true) {
        return Readiness::Pending(message(c));
    }
    Readiness::Ready
}

/// Kinds that have no readiness of their own: never read while waiting.
pub fn without_readiness(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        (
            "v1",
            "ConfigMap" | "Secret" | "Service" | "ServiceAccount" | "Endpoints"
        ) | ("networking.k8s.io/v1", "Ingress" | "NetworkPolicy")
            | (
                "rbac.authorization.k8s.io/v1",
                "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding"
            )
            | ("policy/v1", "PodDisruptionBudget")
            | (
                "autoscaling/v2" | "autoscaling/v1",
                "HorizontalPodAutoscaler"
            )
            | ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    ) || matches!(
        (api_version, kind),
        ("apps/v1", "Deployment" | "StatefulSet" | "DaemonSet") | ("batch/v1", "Job")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with(conditions: Value, generation: i64, observed: i64) -> Value {
        json!({ "kind": "Certificate", "metadata": { "generation": generation },
                "status": { "observedGeneration": observed, "conditions": conditions } })
    }

    #[test]
    fn conditions_decide_by_kstatus_rules() {
        let ready = |s: &str| json!([{ "type": "Ready", "status": s, "reason": "Issuing", "message": "issuing the certificate" }]);
        assert_eq!(readiness(&with(ready("True"), 2, 2)), Readiness::Ready);
        assert_eq!(
            readiness(&with(ready("False"), 2, 2)),
            Readiness::Pending("issuing the certificate".into())
        );
        assert!(
            matches!(readiness(&with(ready("True"), 3, 2)), Readiness::Pending(m) if m.contains("generation 3"))
        );
        let stalled = json!([{ "type": "Ready", "status": "False" },
                             { "type": "Stalled", "status": "True", "message": "the issuer does not exist" }]);
        assert_eq!(
            readiness(&with(stalled, 1, 1)),
            Readiness::Failed("the issuer does not exist".into())
        );
        let available = json!([{ "type": "Available", "status": "True" }]);
        assert_eq!(readiness(&with(available, 1, 1)), Readiness::Ready);
        let reconciling =
            json!([{ "type": "Reconciling", "status": "True", "reason": "Progressing" }]);
        assert_eq!(
            readiness(&with(reconciling, 1, 1)),
            Readiness::Pending("Reconciling is True (Progressing)".into())
        );
        // Neither: an HPA's ScalingActive, a PDB — ready.
        let other = json!([{ "type": "ScalingActive", "status": "False" }]);
        assert_eq!(readiness(&with(other, 1, 1)), Readiness::Ready);
        assert_eq!(readiness(&json!({ "kind": "Gadget" })), Readiness::Ready);
    }

    #[test]
    fn a_claim_is_ready_once_bound() {
        let pvc =
            |phase: &str| json!({ "kind": "PersistentVolumeClaim", "status": { "phase": phase } });
        assert_eq!(readiness(&pvc("Bound")), Readiness::Ready);
        assert!(matches!(readiness(&pvc("Pending")), Readiness::Pending(_)));
        assert!(matches!(readiness(&pvc("Lost")), Readiness::Failed(_)));
        assert!(without_readiness("v1", "ConfigMap"));
        assert!(!without_readiness("v1", "PersistentVolumeClaim"));
        assert!(!without_readiness("cert-manager.io/v1", "Certificate"));
    }
}
