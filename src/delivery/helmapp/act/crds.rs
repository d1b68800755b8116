//! `crds: CreateReplace`: the chart's `crds/` directory applied by the
//! operator before every install and upgrade, so a new chart version's CRDs
//! replace the old ones (helm itself only creates them, on install, and
//! never touches them again — `crds: Create`, helm's behaviour).
//!
//! The CRDs are read with `helm show crds` on the local chart (no cluster
//! access) and applied server-side with the operator's field manager,
//! forced: the chart is their owner. The apply runs as the HelmApp's
//! identity, as helm does — a tenant without the right to write CRDs gets
//! a forbidden error, not the operator's rights.

use kube::api::{Patch, PatchParams};
use kube::core::Request;
use serde_json::Value;

use super::super::cluster::Cluster;
use super::outcome::DeliveryError;

/// The field manager of the operator's own applies.
pub const FIELD_MANAGER: &str = "hossted-operator";

/// Applies every CustomResourceDefinition of the chart at `chart`;
/// returns their names. `Err` carries a message for the condition.
pub async fn replace_crds(
    cluster: &Cluster,
    chart: &std::path::Path,
    as_user: Option<&str>,
) -> Result<Vec<String>, String> {
    let text = cluster
        .helm
        .show_crds(chart)
        .await
        .map_err(|e| format!("reading the chart's crds/: {e}"))?;
    let mut applied = Vec::new();
    for crd in parse_crds(&text)? {
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        apply_crd(cluster, &name, &crd, as_user)
            .await
            .map_err(|e| format!("applying CustomResourceDefinition {name}: {e}"))?;
        applied.push(name);
    }
    Ok(applied)
}

async fn apply_crd(
    cluster: &Cluster,
    name: &str,
    crd: &Value,
    as_user: Option<&str>,
) -> Result<(), DeliveryError> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut request = Request::new("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
        .patch(name, &params, &Patch::Apply(crd))?;
    crate::delivery::tenancy::impersonate(&mut request, as_user)
        .map_err(DeliveryError::Impersonation)?;
    cluster.client.request::<Value>(request).await?;
    Ok(())
}

/// The CustomResourceDefinitions of a multi-document YAML stream (other
/// kinds and empty documents are skipped; a CRD without a name is an
/// error).
fn parse_crds(text: &str) -> Result<Vec<Value>, String> {
    crate::lean::yaml::check(text).map_err(|e| format!("the chart's crds/ is refused: {e}"))?;
    let mut crds = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value: Value = serde::Deserialize::deserialize(doc)
            .map_err(|e| format!("the chart's crds/ is not YAML: {e}"))?;
        if value.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
            continue;
        }
        if value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err("a CustomResourceDefinition in the chart's crds/ has no name".into());
        }
        crds.push(value);
    }
    Ok(crds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_are_picked_from_a_stream_and_a_nameless_one_is_refused() {
        let text = "---\n# Source: x/crds/a.yaml\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\n---\n\n---\nkind: ConfigMap\nmetadata: {name: c}\n";
        let crds = parse_crds(text).unwrap();
        assert_eq!(crds.len(), 1);
        assert_eq!(crds[0]["metadata"]["name"], "widgets.example.com");
        assert!(parse_crds("kind: CustomResourceDefinition\nmetadata: {}\n").is_err());
        assert!(parse_crds("a: [").is_err());
        assert_eq!(parse_crds("").unwrap().len(), 0);
    }
}
