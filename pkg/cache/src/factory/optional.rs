//! Optional informers: an informer of a kind whose CustomResourceDefinition
//! may not exist runs only while it does, followed by one watch on that CRD
//! by name (no polling).

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;

use super::*;

impl SharedInformerFactory {
    /// An informer for `K` in all namespaces that runs only while the
    /// CustomResourceDefinition of `K` (`<plural>.<group>`) exists (see the
    /// type's docs). Its cache is empty while the CRD is absent.
    pub fn optional_informer<K>(&self, opts: InformerOptions<K>) -> Arc<SharedInformer<K>>
    where
        K: Object,
    {
        let crd = format!("{}.{}", K::plural(&()), K::group(&()));
        let informer = self.get_or_create(None, opts, Role::OnCrd(crd.clone()), || {
            Api::all(self.client.clone())
        });
        let crds = self.watch_crd(&crd);
        // Requested after the CRD was seen: run it now.
        if self.runtime.lock().is_some() && crds.store().list().iter().any(|c| established(c)) {
            informer.run();
        }
        informer
    }

    /// `(kind, CRD)` of each optional informer that is not running: its
    /// CustomResourceDefinition is absent (or not yet established).
    pub fn waiting_for_crds(&self) -> Vec<(String, String)> {
        let mut waiting: Vec<(String, String)> = self
            .informers
            .lock()
            .values()
            .filter_map(|e| match &e.role {
                Role::OnCrd(crd) if !e.informer.is_running() => {
                    Some((e.informer.kind(), crd.clone()))
                }
                _ => None,
            })
            .collect();
        waiting.sort();
        waiting
    }

    /// The watch on the CRD `name` (one per name): runs the informers gated
    /// on it while it exists and is established, stops and empties them
    /// when it goes away.
    fn watch_crd(&self, name: &str) -> Arc<SharedInformer<CustomResourceDefinition>> {
        let opts = InformerOptions::<CustomResourceDefinition>::default()
            .fields(&format!("metadata.name={name}"));
        let fresh = {
            let key = InformerKey {
                type_id: TypeId::of::<CustomResourceDefinition>(),
                namespace: None,
                label_selector: None,
                field_selector: opts.field_selector.clone(),
            };
            !self.informers.lock().contains_key(&key)
        };
        let crds = self.get_or_create(None, opts, Role::CrdWatch(name.to_string()), || {
            Api::all(self.client.clone())
        });
        if fresh {
            let (informers, runtime, crd) = (
                self.informers.clone(),
                self.runtime.clone(),
                name.to_string(),
            );
            crds.add_event_handler(HandlerFn(move |e: &Event<CustomResourceDefinition>| {
                let present = match e {
                    Event::Add(c) | Event::Update { new: c, .. } => established(c),
                    Event::Delete(_) => false,
                };
                let Some(rt) = runtime.lock().clone() else {
                    return;
                };
                let _entered = rt.enter();
                let gated: Vec<_> = informers
                    .lock()
                    .values()
                    .filter(|e| e.role == Role::OnCrd(crd.clone()))
                    .map(|e| e.informer.clone())
                    .collect();
                for informer in gated {
                    if present {
                        if !informer.is_running() {
                            log::info!(
                                "{crd} is established: starting the {} informer",
                                informer.kind()
                            );
                            informer.run();
                        }
                    } else if informer.is_running() {
                        log::info!(
                            "{crd} is gone: stopping the {} informer and emptying its cache",
                            informer.kind()
                        );
                        informer.stop_and_forget();
                    }
                }
            }));
        }
        crds
    }
}

/// Whether a CRD can be served: established and not being deleted.
fn established(crd: &CustomResourceDefinition) -> bool {
    crd.metadata.deletion_timestamp.is_none()
        && crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
}
