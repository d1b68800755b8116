//! What a Hosstedproject asks for: one HelmApp per valid `spec.helm`
//! entry, and for each enabled toggle the apps its key of the ConfigMap
//! `hossted-platform-charts` lists.

use std::collections::HashSet;

use apis::Hosstedproject;
use apis::helmapp::HelmAppSpec;
use record::EventType;
use serde_json::json;

use super::context::{PLATFORM_CONFIGMAP, ProjectDelivery, TOGGLES};
use crate::delivery::helmapp::decide::conditions::Reason;

/// One HelmApp a project asks for: release `release` in namespace
/// `target`, kept as the HelmApp [`Wanted::app_name`] in the operator's
/// namespace (docs/tenancy.md: only that place makes it privileged),
/// its spec's `releaseName` and `targetNamespace` always set.
pub(super) struct Wanted {
    pub(super) target: String,
    pub(super) release: String,
    pub(super) source: &'static str,
    pub(super) spec: HelmAppSpec,
}

impl Wanted {
    fn new(target: String, release: String, source: &'static str, mut spec: HelmAppSpec) -> Self {
        spec.release_name = release.clone();
        spec.target_namespace = target.clone();
        Wanted {
            target,
            release,
            source,
            spec,
        }
    }

    /// The HelmApp's name in the operator's namespace.
    pub(super) fn app_name(&self) -> String {
        crate::delivery::names::made_app_name(&self.target, &self.release)
    }
}

impl ProjectDelivery {
    /// The HelmApps `hp` asks for, and the toggles whose app list could
    /// not be read (their apps are kept as they are).
    pub(super) fn wanted(&self, hp: &Hosstedproject) -> (Vec<Wanted>, HashSet<&'static str>) {
        let mut wanted = Vec::new();
        let mut unreadable = HashSet::new();
        for entry in &hp.spec.helm {
            if entry.release_name.is_empty()
                || entry.namespace.is_empty()
                || entry.chart_name.is_empty()
                || entry.repo_url.is_empty()
            {
                self.recorder.event(
                    hp,
                    EventType::Warning,
                    Reason::InvalidHelmEntry.as_str(),
                    &format!(
                        "spec.helm entry {:?} in {:?} needs releaseName, namespace, chartName and repoUrl; skipped",
                        entry.release_name, entry.namespace
                    ),
                );
                continue;
            }
            let spec: HelmAppSpec = match serde_json::from_value(json!({
                "releaseName": entry.release_name,
                "targetNamespace": entry.namespace,
                "chart": { "repo": entry.repo_url, "name": entry.chart_name },
                "set": entry.values,
                "adopt": true,
            })) {
                Ok(s) => s,
                Err(e) => {
                    log::warn!("spec.helm entry {}: {e}", entry.release_name);
                    continue;
                }
            };
            wanted.push(Wanted::new(
                entry.namespace.clone(),
                entry.release_name.clone(),
                "helm",
                spec,
            ));
        }
        let toggles = [hp.spec.monitoring.enable, hp.spec.ingress.enable];
        for (toggle, _) in TOGGLES.iter().zip(toggles).filter(|(_, on)| *on) {
            match self.platform_apps(toggle) {
                Ok(apps) => wanted.extend(apps),
                Err(message) => {
                    unreadable.insert(*toggle);
                    self.recorder.event(
                        hp,
                        EventType::Warning,
                        Reason::PlatformChartsInvalid.as_str(),
                        &message,
                    );
                }
            }
        }
        (wanted, unreadable)
    }

    /// The apps the platform ConfigMap lists for `toggle`.
    fn platform_apps(&self, toggle: &'static str) -> Result<Vec<Wanted>, String> {
        let cm = self
            .platform
            .list()
            .into_iter()
            .next()
            .ok_or_else(|| {
                format!("{toggle} is enabled but the ConfigMap {PLATFORM_CONFIGMAP} does not exist in the operator's namespace")
            })?;
        let text = cm
            .data
            .as_ref()
            .and_then(|d| d.get(toggle))
            .ok_or_else(|| {
                format!("{toggle} is enabled but {PLATFORM_CONFIGMAP} has no key {toggle:?}")
            })?;
        let listed = parse_platform_list(text).map_err(|e| {
            format!("{PLATFORM_CONFIGMAP} key {toggle:?} is not a list of {{name, namespace, spec}}: {e}; its apps are left as they are")
        })?;
        Ok(listed
            .into_iter()
            .map(|l| {
                // The listed spec may name its release and namespace itself.
                let target = Some(l.spec.target_namespace.clone())
                    .filter(|t| !t.is_empty())
                    .unwrap_or(l.namespace);
                let release = Some(l.spec.release_name.clone())
                    .filter(|r| !r.is_empty())
                    .unwrap_or(l.name);
                Wanted::new(target, release, toggle, l.spec)
            })
            .collect())
    }
}

/// One app of a toggle's list in [`PLATFORM_CONFIGMAP`].
#[derive(Debug, serde::Deserialize)]
struct Listed {
    name: String,
    namespace: String,
    spec: HelmAppSpec,
}

fn parse_platform_list(text: &str) -> Result<Vec<Listed>, String> {
    crate::lean::yaml::check(text).map_err(|e| e.to_string())?;
    let listed: Vec<Listed> = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    if let Some((i, bad)) = listed
        .iter()
        .enumerate()
        .find(|(_, l)| l.name.is_empty() || l.namespace.is_empty())
    {
        // Its name and namespace only: the spec may hold values.
        return Err(format!(
            "entry {i} (name {:?}, namespace {:?}) has no name or no namespace",
            bad.name, bad.namespace
        ));
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn the_shipped_platform_charts_parse_into_pinned_helmapp_specs() {
        let manifest = include_str!("../../../manifests/delivery/platform-charts.yaml");
        let cm: ConfigMap = serde_yaml_ng::from_str(manifest).unwrap();
        assert_eq!(cm.metadata.name.as_deref(), Some(PLATFORM_CONFIGMAP));
        let data = cm.data.unwrap();
        let names = |toggle: &str| -> Vec<String> {
            let listed = parse_platform_list(&data[toggle]).unwrap();
            for l in &listed {
                assert_eq!(l.namespace, "hossted-platform");
                assert!(!l.spec.chart.version.is_empty(), "{} is not pinned", l.name);
                assert!(!l.spec.chart.repo.is_empty());
            }
            listed.into_iter().map(|l| l.name).collect()
        };
        assert_eq!(names("monitoring"), vec!["alloy", "kube-state-metrics"]);
        assert_eq!(names("ingress"), vec!["ingress-nginx"]);
    }

    #[test]
    fn a_list_entry_without_a_namespace_is_refused() {
        assert!(parse_platform_list("- {name: a, spec: {chart: {path: x}}}").is_err());
        assert!(
            parse_platform_list("- {name: a, namespace: '', spec: {chart: {path: x}}}").is_err()
        );
        assert!(parse_platform_list("not: a list").is_err());
        assert_eq!(parse_platform_list("[]").unwrap().len(), 0);
    }
}
