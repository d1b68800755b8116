//! trivy-operator's `VulnerabilityReport` (`aquasecurity.github.io/v1alpha1`),
//! cached as a lean summary: which workload and container it is about (its
//! `trivy-operator.*` labels), the severity counts, and the CRITICAL and
//! HIGH findings only — a report of a large image lists thousands of
//! MEDIUM/LOW entries the payload never carries.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer, Serialize};

use crate::lean::objects::{LeanMeta, resource};

/// The labels trivy-operator puts on a report.
pub const KIND_LABEL: &str = "trivy-operator.resource.kind";
pub const NAME_LABEL: &str = "trivy-operator.resource.name";
pub const CONTAINER_LABEL: &str = "trivy-operator.container.name";

/// One report: one container of one workload.
#[derive(Clone, Debug)]
pub struct VulnerabilityReport {
    /// Name, namespace and resourceVersion only.
    pub metadata: LeanMeta,
    /// The workload's kind (`ReplicaSet`, `StatefulSet`, `Pod`, ...).
    pub workload_kind: String,
    pub workload_name: String,
    pub container: String,
    pub summary: Summary,
    /// CRITICAL and HIGH findings, in the report's order.
    pub vulnerabilities: Vec<Vulnerability>,
}
resource!(
    VulnerabilityReport,
    "VulnerabilityReport",
    "aquasecurity.github.io",
    "v1alpha1",
    "vulnerabilityreports",
    NamespaceResourceScope
);

/// `report.summary`, as the payload carries it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    #[serde(default)]
    pub critical_count: i64,
    #[serde(default)]
    pub high_count: i64,
    #[serde(default)]
    pub medium_count: i64,
    #[serde(default)]
    pub low_count: i64,
    #[serde(default)]
    pub unknown_count: i64,
}

/// One finding, as the payload carries it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Vulnerability {
    #[serde(rename = "vulnerabilityID", default)]
    pub vulnerability_id: String,
    #[serde(default)]
    pub severity: String,
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub installed_version: String,
    #[serde(default)]
    pub fixed_version: String,
    #[serde(default)]
    pub title: String,
}

impl<'de> Deserialize<'de> for VulnerabilityReport {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            metadata: Meta,
            #[serde(default)]
            report: Report,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Meta {
            name: Option<String>,
            namespace: Option<String>,
            resource_version: Option<String>,
            #[serde(default)]
            labels: std::collections::BTreeMap<String, String>,
        }
        #[derive(Deserialize, Default)]
        struct Report {
            #[serde(default)]
            summary: Summary,
            #[serde(default, deserialize_with = "severe_only")]
            vulnerabilities: Vec<Vulnerability>,
        }
        let raw = Raw::deserialize(d)?;
        let mut labels = raw.metadata.labels;
        let mut take = |k: &str| labels.remove(k).unwrap_or_default();
        Ok(VulnerabilityReport {
            workload_kind: take(KIND_LABEL),
            workload_name: take(NAME_LABEL),
            container: take(CONTAINER_LABEL),
            metadata: LeanMeta::from(ObjectMeta {
                name: raw.metadata.name,
                namespace: raw.metadata.namespace,
                resource_version: raw.metadata.resource_version,
                ..Default::default()
            }),
            summary: raw.report.summary,
            vulnerabilities: raw.report.vulnerabilities,
        })
    }
}

/// Reads the findings one by one, keeping CRITICAL and HIGH: the others are
/// dropped as they are parsed, never collected.
fn severe_only<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vulnerability>, D::Error> {
    struct Severe;
    impl<'de> serde::de::Visitor<'de> for Severe {
        type Value = Vec<Vulnerability>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of vulnerabilities")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut kept = Vec::new();
            while let Some(v) = seq.next_element::<Vulnerability>()? {
                if matches!(v.severity.as_str(), "CRITICAL" | "HIGH") {
                    kept.push(v);
                }
            }
            Ok(kept)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
    }
    d.deserialize_any(Severe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_report_keeps_its_workload_counts_and_severe_findings_only() {
        let r: VulnerabilityReport = serde_json::from_value(json!({
            "metadata": { "name": "replicaset-web-7d4-web", "namespace": "shop", "labels": {
                KIND_LABEL: "ReplicaSet", NAME_LABEL: "web-7d4", CONTAINER_LABEL: "web",
                "trivy-operator.resource.namespace": "shop" } },
            "report": {
                "artifact": { "repository": "library/nginx", "tag": "1.25" },
                "summary": { "criticalCount": 1, "highCount": 1, "mediumCount": 2, "lowCount": 1, "unknownCount": 0 },
                "vulnerabilities": [
                    { "vulnerabilityID": "CVE-1", "severity": "LOW", "resource": "zlib" },
                    { "vulnerabilityID": "CVE-2", "severity": "CRITICAL", "resource": "openssl",
                      "installedVersion": "3.0.1", "fixedVersion": "3.0.2", "title": "bad", "score": 9.8 },
                    { "vulnerabilityID": "CVE-3", "severity": "MEDIUM", "resource": "curl" },
                    { "vulnerabilityID": "CVE-4", "severity": "HIGH", "resource": "glibc" },
                    { "vulnerabilityID": "CVE-5", "severity": "MEDIUM", "resource": "curl" }
                ]
            }
        }))
        .unwrap();
        assert_eq!(
            (
                r.workload_kind.as_str(),
                r.workload_name.as_str(),
                r.container.as_str()
            ),
            ("ReplicaSet", "web-7d4", "web")
        );
        assert_eq!(r.summary.medium_count, 2);
        let ids: Vec<&str> = r
            .vulnerabilities
            .iter()
            .map(|v| v.vulnerability_id.as_str())
            .collect();
        assert_eq!(ids, ["CVE-2", "CVE-4"]);
        assert_eq!(r.vulnerabilities[0].fixed_version, "3.0.2");
        let empty: VulnerabilityReport = serde_json::from_value(
            json!({ "metadata": { "name": "x" }, "report": { "vulnerabilities": null } }),
        )
        .unwrap();
        assert!(empty.vulnerabilities.is_empty() && empty.workload_kind.is_empty());
    }
}
