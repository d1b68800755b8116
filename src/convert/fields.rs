//! What becomes of each spec field of a Flux `HelmRelease` v2: the table
//! the converter follows, and that its tests hold it to (every field of
//! `tests/fixtures/flux-helmrelease-v2-spec-fields.txt` is listed here).

/// The fate of one `HelmRelease` spec field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Holds fields listed separately.
    Container,
    /// Becomes this HelmApp spec field (a dotted path; `[]` for each item).
    Mapped(&'static str),
    /// Has no equivalent: reported on stderr with this reason.
    Dropped(&'static str),
    /// Needs none: nothing reported.
    Ignored,
}

use Fate::*;

/// Every spec field of HelmRelease v2, and its fate.
pub const FIELDS: &[(&str, Fate)] = &[
    ("chart", Container),
    ("chart.metadata", Container),
    (
        "chart.metadata.annotations",
        Dropped(
            "the HelmChart object Flux makes has no counterpart: the operator fetches the chart itself",
        ),
    ),
    (
        "chart.metadata.labels",
        Dropped(
            "the HelmChart object Flux makes has no counterpart: the operator fetches the chart itself",
        ),
    ),
    ("chart.spec", Container),
    ("chart.spec.chart", Mapped("chart.name")),
    (
        "chart.spec.ignoreMissingValuesFiles",
        Dropped(
            "values files inside a chart archive are not read: converted for a GitRepository source only",
        ),
    ),
    ("chart.spec.interval", Mapped("interval")),
    (
        "chart.spec.reconcileStrategy",
        Dropped(
            "a chart is fetched again when its version or source changes; there is no per-revision strategy",
        ),
    ),
    ("chart.spec.sourceRef", Container),
    ("chart.spec.sourceRef.apiVersion", Ignored),
    ("chart.spec.sourceRef.kind", Mapped("chart.repo")),
    ("chart.spec.sourceRef.name", Mapped("chart.repo")),
    ("chart.spec.sourceRef.namespace", Mapped("chart.repo")),
    (
        "chart.spec.valuesFiles",
        Dropped(
            "values files inside a chart archive are not read: converted for a GitRepository source only (else merge them into spec.values)",
        ),
    ),
    ("chart.spec.verify", Container),
    (
        "chart.spec.verify.provider",
        Mapped("chart.verify.provider"),
    ),
    (
        "chart.spec.verify.secretRef",
        Mapped("chart.verify.secretRef"),
    ),
    ("chart.spec.version", Mapped("chart.version")),
    ("chartRef", Container),
    ("chartRef.apiVersion", Ignored),
    ("chartRef.kind", Mapped("chart.oci")),
    ("chartRef.name", Mapped("chart.oci")),
    ("chartRef.namespace", Mapped("chart.oci")),
    ("commonMetadata", Container),
    (
        "commonMetadata.annotations",
        Mapped("commonMetadata.annotations"),
    ),
    ("commonMetadata.labels", Mapped("commonMetadata.labels")),
    ("dependsOn", Container),
    ("dependsOn[].name", Mapped("dependsOn[].name")),
    ("dependsOn[].namespace", Mapped("dependsOn[].namespace")),
    ("dependsOn[].readyExpr", Mapped("dependsOn[].readyExpr")),
    ("driftDetection", Container),
    ("driftDetection.ignore", Container),
    (
        "driftDetection.ignore[].paths",
        Mapped("drift.ignore[].paths"),
    ),
    ("driftDetection.ignore[].target", Container),
    (
        "driftDetection.ignore[].target.annotationSelector",
        Mapped("drift.ignore[].target.annotationSelector"),
    ),
    (
        "driftDetection.ignore[].target.group",
        Mapped("drift.ignore[].target.group"),
    ),
    (
        "driftDetection.ignore[].target.kind",
        Mapped("drift.ignore[].target.kind"),
    ),
    (
        "driftDetection.ignore[].target.labelSelector",
        Mapped("drift.ignore[].target.labelSelector"),
    ),
    (
        "driftDetection.ignore[].target.name",
        Mapped("drift.ignore[].target.name"),
    ),
    (
        "driftDetection.ignore[].target.namespace",
        Mapped("drift.ignore[].target.namespace"),
    ),
    (
        "driftDetection.ignore[].target.version",
        Mapped("drift.ignore[].target.version"),
    ),
    ("driftDetection.mode", Mapped("drift.mode")),
    ("healthCheckExprs", Container),
    (
        "healthCheckExprs[].apiVersion",
        Mapped("healthCheckExprs[].apiVersion"),
    ),
    (
        "healthCheckExprs[].current",
        Mapped("healthCheckExprs[].current"),
    ),
    (
        "healthCheckExprs[].failed",
        Mapped("healthCheckExprs[].failed"),
    ),
    (
        "healthCheckExprs[].inProgress",
        Mapped("healthCheckExprs[].inProgress"),
    ),
    ("healthCheckExprs[].kind", Mapped("healthCheckExprs[].kind")),
    ("install", Container),
    ("install.crds", Mapped("crds")),
    ("install.createNamespace", Mapped("createNamespace")),
    ("install.disableHooks", Mapped("install.disableHooks")),
    (
        "install.disableOpenAPIValidation",
        Mapped("install.disableOpenAPIValidation"),
    ),
    (
        "install.disableSchemaValidation",
        Mapped("install.skipSchemaValidation"),
    ),
    (
        "install.disableTakeOwnership",
        Dropped("objects are never taken over silently; adopt: true is per release"),
    ),
    ("install.disableWait", Mapped("wait")),
    (
        "install.disableWaitForJobs",
        Mapped("install.disableWaitForJobs"),
    ),
    ("install.remediation", Container),
    (
        "install.remediation.ignoreTestFailures",
        Mapped("test.ignoreFailures"),
    ),
    (
        "install.remediation.remediateLastFailure",
        Dropped(
            "a failed install is always uninstalled before it is tried again; remediateLastFailure applies to upgrades (onFailure)",
        ),
    ),
    ("install.remediation.retries", Mapped("remediation.retries")),
    (
        "install.replace",
        Dropped("a release name is never reused over an existing one"),
    ),
    ("install.serverSideApply", Mapped("install.serverSideApply")),
    ("install.skipCRDs", Mapped("crds")),
    ("install.strategy", Container),
    ("install.strategy.name", Mapped("install.strategy.name")),
    (
        "install.strategy.retryInterval",
        Mapped("install.strategy.retryInterval"),
    ),
    ("install.timeout", Mapped("install.timeout")),
    ("interval", Mapped("interval")),
    ("kubeConfig", Container),
    ("kubeConfig.configMapRef", Container),
    (
        "kubeConfig.configMapRef.name",
        Dropped(
            "workload identity (configMapRef) is not supported: put a kubeconfig with inline credentials in a Secret and name it in kubeConfig.secretRef",
        ),
    ),
    ("kubeConfig.secretRef", Container),
    (
        "kubeConfig.secretRef.key",
        Mapped("kubeConfig.secretRef.key"),
    ),
    (
        "kubeConfig.secretRef.name",
        Mapped("kubeConfig.secretRef.name"),
    ),
    ("maxHistory", Mapped("maxHistory")),
    (
        "persistentClient",
        Dropped(
            "Flux's switch for keeping its in-process Kubernetes client between helm actions; the operator runs each helm action as a process of its own, so there is no client to keep",
        ),
    ),
    ("postRenderStrategy", Mapped("postRenderStrategy")),
    ("postRenderers", Container),
    ("postRenderers[].kustomize", Container),
    (
        "postRenderers[].kustomize.images",
        Mapped("postRenderers[].kustomize.images"),
    ),
    (
        "postRenderers[].kustomize.images[].digest",
        Mapped("postRenderers[].kustomize.images[].digest"),
    ),
    (
        "postRenderers[].kustomize.images[].name",
        Mapped("postRenderers[].kustomize.images[].name"),
    ),
    (
        "postRenderers[].kustomize.images[].newName",
        Mapped("postRenderers[].kustomize.images[].newName"),
    ),
    (
        "postRenderers[].kustomize.images[].newTag",
        Mapped("postRenderers[].kustomize.images[].newTag"),
    ),
    (
        "postRenderers[].kustomize.patches",
        Mapped("postRenderers[].kustomize.patches"),
    ),
    (
        "postRenderers[].kustomize.patches[].patch",
        Mapped("postRenderers[].kustomize.patches[].patch"),
    ),
    (
        "postRenderers[].kustomize.patches[].target",
        Mapped("postRenderers[].kustomize.patches[].target"),
    ),
    ("releaseName", Mapped("releaseName")),
    ("rollback", Container),
    ("rollback.cleanupOnFail", Mapped("rollback.cleanupOnFail")),
    ("rollback.disableHooks", Mapped("rollback.disableHooks")),
    ("rollback.disableWait", Mapped("rollback.wait")),
    (
        "rollback.disableWaitForJobs",
        Mapped("rollback.disableWaitForJobs"),
    ),
    ("rollback.force", Mapped("rollback.force")),
    (
        "rollback.recreate",
        Dropped("helm 4 has no --recreate-pods"),
    ),
    (
        "rollback.serverSideApply",
        Mapped("rollback.serverSideApply"),
    ),
    ("rollback.timeout", Mapped("rollback.timeout")),
    ("serviceAccountName", Mapped("serviceAccountName")),
    (
        "storageNamespace",
        Dropped(
            "Helm's storage is kept in the release's namespace (helm's CLI has no other place), where its tenant may write Secrets: the operator records and checks every revision before helm reads it (docs/tenancy.md)",
        ),
    ),
    ("suspend", Mapped("suspend")),
    ("targetNamespace", Mapped("targetNamespace")),
    ("test", Container),
    ("test.enable", Mapped("test.enable")),
    ("test.filters", Container),
    ("test.filters[].exclude", Mapped("test.filters[].exclude")),
    ("test.filters[].name", Mapped("test.filters[].name")),
    ("test.ignoreFailures", Mapped("test.ignoreFailures")),
    ("test.timeout", Mapped("test.timeout")),
    ("timeout", Mapped("timeout")),
    ("uninstall", Container),
    (
        "uninstall.deletionPropagation",
        Mapped("uninstall.deletionPropagation"),
    ),
    ("uninstall.disableHooks", Mapped("uninstall.disableHooks")),
    ("uninstall.disableWait", Mapped("uninstall.wait")),
    ("uninstall.keepHistory", Mapped("uninstall.keepHistory")),
    ("uninstall.timeout", Mapped("uninstall.timeout")),
    ("upgrade", Container),
    (
        "upgrade.chartNameChangeStrategy",
        Mapped("upgrade.chartNameChangeStrategy"),
    ),
    ("upgrade.cleanupOnFail", Mapped("upgrade.cleanupOnFail")),
    ("upgrade.crds", Mapped("crds")),
    ("upgrade.disableHooks", Mapped("upgrade.disableHooks")),
    (
        "upgrade.disableOpenAPIValidation",
        Mapped("upgrade.disableOpenAPIValidation"),
    ),
    (
        "upgrade.disableSchemaValidation",
        Mapped("upgrade.skipSchemaValidation"),
    ),
    (
        "upgrade.disableTakeOwnership",
        Dropped("objects are never taken over silently; adopt: true is per release"),
    ),
    ("upgrade.disableWait", Mapped("wait")),
    (
        "upgrade.disableWaitForJobs",
        Mapped("upgrade.disableWaitForJobs"),
    ),
    ("upgrade.force", Mapped("upgrade.force")),
    (
        "upgrade.preserveValues",
        Dropped("the values are always exactly what the HelmApp says"),
    ),
    ("upgrade.remediation", Container),
    (
        "upgrade.remediation.ignoreTestFailures",
        Mapped("test.ignoreFailures"),
    ),
    (
        "upgrade.remediation.remediateLastFailure",
        Mapped("remediation.onFailure"),
    ),
    ("upgrade.remediation.retries", Mapped("remediation.retries")),
    (
        "upgrade.remediation.strategy",
        Mapped("remediation.onFailure"),
    ),
    ("upgrade.serverSideApply", Mapped("upgrade.serverSideApply")),
    ("upgrade.strategy", Container),
    ("upgrade.strategy.name", Mapped("upgrade.strategy.name")),
    (
        "upgrade.strategy.retryInterval",
        Mapped("upgrade.strategy.retryInterval"),
    ),
    ("upgrade.timeout", Mapped("upgrade.timeout")),
    ("values", Mapped("values")),
    ("valuesFrom", Container),
    ("valuesFrom[].kind", Mapped("valuesFrom[].kind")),
    ("valuesFrom[].literal", Mapped("valuesFrom[].literal")),
    ("valuesFrom[].name", Mapped("valuesFrom[].name")),
    ("valuesFrom[].optional", Mapped("valuesFrom[].optional")),
    ("valuesFrom[].targetPath", Mapped("valuesFrom[].targetPath")),
    ("valuesFrom[].valuesKey", Mapped("valuesFrom[].key")),
    ("waitStrategy", Container),
    (
        "waitStrategy.name",
        Dropped("readiness is judged by the operator from its caches, not by helm's wait"),
    ),
];

/// The fate of `field` (`None`: a field this table does not know).
pub fn fate(field: &str) -> Option<Fate> {
    FIELDS
        .iter()
        .find(|(f, _)| *f == field)
        .map(|(_, fate)| *fate)
}

/// The table of [`FIELDS`] as a reference page (`docs/reference/from-flux.md`).
pub fn markdown() -> String {
    let mut out = String::from(
        "# From a Flux HelmRelease\n\nGenerated from the converter's table (`src/convert/fields.rs`) by `hossted-operator docs reference`; do not edit by hand. What `hossted-operator convert` (or `kubectl hossted convert`) makes of each spec field of a Flux `HelmRelease` v2 — see [migrating-from-flux.md](../migrating-from-flux.md).\n\n| HelmRelease `spec.` | HelmApp `spec.` | or why not |\n| --- | --- | --- |\n",
    );
    for (field, fate) in FIELDS {
        let (to, why) = match fate {
            Fate::Container => continue,
            Fate::Mapped(to) => (format!("`{to}`"), String::new()),
            Fate::Dropped(why) => (String::new(), why.to_string()),
            Fate::Ignored => (String::new(), "not needed".to_string()),
        };
        out.push_str(&format!("| `{field}` | {to} | {why} |\n"));
    }
    out
}
