//! The informers the collector reads, all from the shared factory, and the
//! collector's view of their caches. (The Hosstedproject informer is the
//! controller's own: `collect` runs without the CRD.)

use std::sync::Arc;

use cache::{InformerOptions, SharedInformer, SharedInformerFactory};

use super::collector::{Caches, RELEASE_INDEX, WORKLOAD_INDEX, release_index, workload_index};
use super::settings::Settings;
use crate::lean::kinds::{Ingress, Namespace, PersistentVolumeClaim, Pod, Service};
use crate::lean::storage::{HelmRelease, HelmReleaseConfigMap, UuidSecret};
use crate::lean::trivy::VulnerabilityReport;
use crate::lean::workloads::{ConfigMap, Deployment, ReleaseSecret, StatefulSet};

/// Helm releases by label `owner=helm`, `uuid` Secrets by name; pods,
/// services, ingresses, deployments, statefulsets, configmaps and secrets by
/// label `app.kubernetes.io/managed-by=Helm` (docs/inventory.md's membership rule: the
/// cache, and the events, stay proportional to the releases, not to the
/// cluster); PVCs (claim templates carry only the instance label) and
/// namespaces all; trivy-operator's vulnerability reports while their CRD
/// exists — each cached as its lean type.
pub struct Informers {
    pub namespaces: Arc<SharedInformer<Namespace>>,
    pub releases: Arc<SharedInformer<HelmRelease>>,
    pub release_configmaps: Option<Arc<SharedInformer<HelmReleaseConfigMap>>>,
    pub uuid_secrets: Arc<SharedInformer<UuidSecret>>,
    pub pods: Arc<SharedInformer<Pod>>,
    pub services: Arc<SharedInformer<Service>>,
    pub pvcs: Arc<SharedInformer<PersistentVolumeClaim>>,
    pub ingresses: Arc<SharedInformer<Ingress>>,
    pub deployments: Arc<SharedInformer<Deployment>>,
    pub statefulsets: Arc<SharedInformer<StatefulSet>>,
    pub configmaps: Arc<SharedInformer<ConfigMap>>,
    pub secrets: Arc<SharedInformer<ReleaseSecret>>,
    /// Optional: runs only while `vulnerabilityreports.aquasecurity.github.io` exists.
    pub vulnerability_reports: Arc<SharedInformer<VulnerabilityReport>>,
}

impl Informers {
    /// Asks `factory` for every informer (shared with any other controller
    /// asking for the same), and indexes the release members.
    pub fn new(factory: &SharedInformerFactory, settings: &Settings) -> Self {
        use crate::lean::objects::managed_by_helm_options as managed_by_helm;
        use crate::lean::storage::helm_storage_options as helm;
        let i = Informers {
            namespaces: factory.informer(InformerOptions::default()),
            releases: factory.informer(helm()),
            release_configmaps: settings.configmap_driver.then(|| factory.informer(helm())),
            uuid_secrets: factory.informer(InformerOptions::default().fields("metadata.name=uuid")),
            pods: factory.informer(managed_by_helm()),
            services: factory.informer(managed_by_helm()),
            pvcs: factory.informer(InformerOptions::default()),
            ingresses: factory.informer(managed_by_helm()),
            deployments: factory.informer(managed_by_helm()),
            statefulsets: factory.informer(managed_by_helm()),
            configmaps: factory.informer(if settings.report_configmap_data {
                managed_by_helm()
            } else {
                managed_by_helm().transform("configmap-without-data", ConfigMap::without_data)
            }),
            secrets: factory.informer(managed_by_helm()),
            vulnerability_reports: factory.optional_informer(InformerOptions::default()),
        };
        i.pods.store().ensure_index(RELEASE_INDEX, release_index());
        i.services
            .store()
            .ensure_index(RELEASE_INDEX, release_index());
        i.pvcs.store().ensure_index(RELEASE_INDEX, release_index());
        i.ingresses
            .store()
            .ensure_index(RELEASE_INDEX, release_index());
        i.deployments
            .store()
            .ensure_index(RELEASE_INDEX, release_index());
        i.statefulsets
            .store()
            .ensure_index(RELEASE_INDEX, release_index());
        i.configmaps
            .store()
            .ensure_index(RELEASE_INDEX, release_index());
        i.secrets
            .store()
            .ensure_index(RELEASE_INDEX, release_index());
        i.vulnerability_reports
            .store()
            .add_index(WORKLOAD_INDEX, workload_index());
        i
    }

    /// The collector's view of these informers' caches.
    pub fn caches(&self) -> Caches {
        Caches {
            namespaces: self.namespaces.store(),
            releases: self.releases.store(),
            release_configmaps: self.release_configmaps.as_ref().map(|i| i.store()),
            uuid_secrets: self.uuid_secrets.store(),
            pods: self.pods.store(),
            services: self.services.store(),
            pvcs: self.pvcs.store(),
            ingresses: self.ingresses.store(),
            deployments: self.deployments.store(),
            statefulsets: self.statefulsets.store(),
            configmaps: self.configmaps.store(),
            secrets: self.secrets.store(),
            vulnerability_reports: self.vulnerability_reports.store(),
        }
    }
}
