//! The one Warning a release's storage object gets when it cannot be
//! decoded or is not a plausible Helm release (DELIVERY.md "Hostile
//! input"): on the Secret (or ConfigMap) itself, where `kubectl describe`
//! shows it to whoever can fix it — once per version of it, however many
//! reconciles see it.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::ObjectMeta;
use kube::{Api, Client};
use parking_lot::Mutex;
use record::{EventRecorder, EventType};

use super::collector::InvalidRelease;
use super::status::Reason;

/// Storage objects warned about, kept at most this many (then forgotten:
/// one more Warning each is the worst that follows).
const REMEMBERED: usize = 10_000;

/// Warns each invalid storage object once per `resourceVersion`.
#[derive(Clone)]
pub struct ForgedNotices {
    client: Client,
    recorder: EventRecorder,
    /// `namespace/name/resourceVersion` already warned about.
    warned: Arc<Mutex<HashSet<String>>>,
}

impl ForgedNotices {
    pub fn new(client: Client, recorder: EventRecorder) -> Self {
        ForgedNotices {
            client,
            recorder,
            warned: Arc::default(),
        }
    }

    /// Warns about `bad` on its own object unless already done for this
    /// version; the object's UID (which `kubectl describe` matches on) is
    /// read in the background.
    pub fn warn(&self, bad: &InvalidRelease) {
        let key = format!("{}/{}/{}", bad.namespace, bad.secret, bad.resource_version);
        {
            let mut warned = self.warned.lock();
            if warned.len() >= REMEMBERED {
                warned.clear();
            }
            if !warned.insert(key) {
                return;
            }
        }
        let (me, bad) = (self.clone(), bad.clone());
        tokio::spawn(async move { me.send(&bad).await });
    }

    async fn send(&self, bad: &InvalidRelease) {
        let message = format!(
            "not reported: Helm release storage that cannot be decoded or is not a plausible release ({}); the other releases are still reported",
            bad.error
        );
        let (ns, name) = (bad.namespace.as_str(), bad.secret.as_str());
        // Helm's secret driver, or its configmap driver.
        if let Some(metadata) = self.uid_of::<Secret>(ns, name).await {
            let secret = Secret {
                metadata,
                ..Default::default()
            };
            self.warn_on(secret, &message);
        } else if let Some(metadata) = self.uid_of::<ConfigMap>(ns, name).await {
            let configmap = ConfigMap {
                metadata,
                ..Default::default()
            };
            self.warn_on(configmap, &message);
        } else {
            log::debug!("{ns}/{name}: the release storage is gone; no Warning on it");
        }
    }

    /// What an Event's reference needs of object `ns/name` of kind `K`:
    /// name, namespace, UID (`None`: not found, or not readable).
    async fn uid_of<K>(&self, ns: &str, name: &str) -> Option<ObjectMeta>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), ns);
        match api.get_metadata_opt(name).await {
            Ok(found) => found.map(|m| ObjectMeta {
                name: m.metadata.name,
                namespace: m.metadata.namespace,
                uid: m.metadata.uid,
                ..Default::default()
            }),
            Err(e) => {
                log::debug!("{ns}/{name}: cannot read the release storage to warn on it: {e}");
                None
            }
        }
    }

    fn warn_on<K: kube::Resource<DynamicType = ()>>(&self, object: K, message: &str) {
        self.recorder.event(
            &object,
            EventType::Warning,
            Reason::InvalidRelease.as_str(),
            message,
        );
    }
}
