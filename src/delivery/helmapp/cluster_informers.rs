//! The informers of one cluster releases go to — Helm's storage, the
//! release objects, the Secrets' and ConfigMaps' digests — and the handlers
//! that map their events to HelmApps: the operator's own cluster's, made
//! by `super::controller`, and each remote cluster's
//! (`super::remote`). Handlers only enqueue (`super::wiring`).

use std::sync::Arc;

use cache::{Event, HandlerFn, IndexFn, SharedInformerFactory};

use super::cluster::{DriftOnly, Members};
use super::wiring;
use crate::lean::digests::{ConfigMapDigests, SecretDigests};
use crate::lean::drift_kinds;
use crate::lean::fingerprint::Fingerprinted;
use crate::lean::members::member_informer;
use crate::lean::objects::Labelled;
use crate::lean::storage::HelmRelease;
use crate::lean::workloads::ReleaseSecret;

/// Release storage by `namespace/release name`.
pub fn release_by_name() -> IndexFn<HelmRelease> {
    Arc::new(|r: &HelmRelease| {
        let ns = r.metadata.namespace.as_deref().unwrap_or_default();
        match r.release_name() {
            "" => Vec::new(),
            name => vec![format!("{ns}/{name}")],
        }
    })
}

/// The informers of a release's objects (shared with the inventory: same
/// options, one watch each).
pub struct MemberInformers {
    deployments: Arc<cache::SharedInformer<crate::lean::workloads::Deployment>>,
    statefulsets: Arc<cache::SharedInformer<crate::lean::workloads::StatefulSet>>,
    daemonsets: Arc<cache::SharedInformer<crate::lean::workloads::DaemonSet>>,
    jobs: Arc<cache::SharedInformer<crate::lean::workloads::Job>>,
    services: Arc<cache::SharedInformer<crate::lean::kinds::Service>>,
    ingresses: Arc<cache::SharedInformer<crate::lean::kinds::Ingress>>,
    secrets: Arc<cache::SharedInformer<crate::lean::workloads::ReleaseSecret>>,
    service_accounts: Arc<cache::SharedInformer<drift_kinds::ServiceAccount>>,
    autoscalers: Arc<cache::SharedInformer<drift_kinds::HorizontalPodAutoscaler>>,
    disruption_budgets: Arc<cache::SharedInformer<drift_kinds::PodDisruptionBudget>>,
    roles: Arc<cache::SharedInformer<drift_kinds::Role>>,
    role_bindings: Arc<cache::SharedInformer<drift_kinds::RoleBinding>>,
    network_policies: Arc<cache::SharedInformer<drift_kinds::NetworkPolicy>>,
}

pub fn member_informers(factory: &SharedInformerFactory) -> MemberInformers {
    MemberInformers {
        deployments: member_informer(factory),
        statefulsets: member_informer(factory),
        daemonsets: member_informer(factory),
        jobs: member_informer(factory),
        services: member_informer(factory),
        ingresses: member_informer(factory),
        secrets: member_informer(factory),
        service_accounts: member_informer(factory),
        autoscalers: member_informer(factory),
        disruption_budgets: member_informer(factory),
        roles: member_informer(factory),
        role_bindings: member_informer(factory),
        network_policies: member_informer(factory),
    }
}

impl MemberInformers {
    pub fn stores(&self) -> Members {
        Members {
            deployments: self.deployments.store(),
            statefulsets: self.statefulsets.store(),
            daemonsets: self.daemonsets.store(),
            jobs: self.jobs.store(),
            services: self.services.store(),
            ingresses: self.ingresses.store(),
            secrets: self.secrets.store(),
            drift_only: DriftOnly {
                service_accounts: self.service_accounts.store(),
                autoscalers: self.autoscalers.store(),
                disruption_budgets: self.disruption_budgets.store(),
                roles: self.roles.store(),
                role_bindings: self.role_bindings.store(),
                network_policies: self.network_policies.store(),
            },
        }
    }

    /// Workloads' changes (their rollout, for `wait`), deletions of any
    /// member, and changes of a member's sections (drift) enqueue the
    /// release's HelmApps.
    pub fn wire(&self, to: &wiring::Handlers) {
        fn on<K: cache::Object + Fingerprinted + Labelled>(
            informer: &Arc<cache::SharedInformer<K>>,
            to: &wiring::Handlers,
            rollout: bool,
        ) {
            let to = to.clone();
            informer.add_event_handler(HandlerFn(move |e: &Event<K>| match e {
                Event::Delete(o) => to.on_release_object(o.lean_meta(), false),
                Event::Update { old, new } if old.fingerprint() != new.fingerprint() => {
                    to.on_release_object(new.lean_meta(), false)
                }
                _ if rollout => {
                    if let Some(o) = e.changed() {
                        to.on_release_object(o.lean_meta(), true);
                    }
                }
                _ => {}
            }));
        }
        on(&self.deployments, to, true);
        on(&self.statefulsets, to, true);
        on(&self.daemonsets, to, true);
        on(&self.jobs, to, true);
        on(&self.services, to, false);
        on(&self.ingresses, to, false);
        on(&self.service_accounts, to, false);
        on(&self.autoscalers, to, false);
        on(&self.disruption_budgets, to, false);
        on(&self.roles, to, false);
        on(&self.role_bindings, to, false);
        on(&self.network_policies, to, false);
        let to = to.clone();
        self.secrets
            .add_event_handler(HandlerFn(move |e: &Event<ReleaseSecret>| {
                if let Event::Delete(o) = e {
                    to.on_release_object(&o.metadata, false);
                }
            }));
    }
}

/// Registers the handlers of one cluster's release storage and its
/// Secrets' and ConfigMaps' digests (the operator's own, or a remote
/// one's): a revision written, a release's Secret or ConfigMap changed.
pub fn wire_cluster(
    to: &wiring::Handlers,
    releases: &cache::SharedInformer<HelmRelease>,
    secrets: &cache::SharedInformer<SecretDigests>,
    configmaps: &cache::SharedInformer<ConfigMapDigests>,
) {
    let h = to.clone();
    releases.add_event_handler(HandlerFn(move |e: &Event<HelmRelease>| h.on_storage(e)));
    let h = to.clone();
    secrets.add_event_handler(HandlerFn(move |e: &Event<SecretDigests>| {
        h.on_member_data(e)
    }));
    let h = to.clone();
    configmaps.add_event_handler(HandlerFn(move |e: &Event<ConfigMapDigests>| {
        h.on_member_data(e)
    }));
}
