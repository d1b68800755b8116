//! The one Warning a release's storage object gets when it cannot be
//! decoded or is not a plausible Helm release (docs/security.md "Hostile input"): on the Secret (or ConfigMap) itself, where `kubectl describe`
//! shows it to whoever can fix it — once per version of it, however many
//! reconciles see it.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::ObjectMeta;
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
    recorder: EventRecorder,
    /// `namespace/name/resourceVersion` already warned about.
    warned: Arc<Mutex<HashSet<String>>>,
}

impl ForgedNotices {
    pub fn new(recorder: EventRecorder) -> Self {
        ForgedNotices {
            recorder,
            warned: Arc::default(),
        }
    }

    /// Warns about `bad` on its own object unless already done for this
    /// version. The object is named by what the cache kept of it (its
    /// UID included): nothing is read, as the inventory may only list and
    /// watch Secrets.
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
        let message = format!(
            "not reported: Helm release storage that cannot be decoded or is not a plausible release ({}); the other releases are still reported",
            bad.error
        );
        let metadata = ObjectMeta {
            name: Some(bad.secret.clone()),
            namespace: Some(bad.namespace.clone()),
            uid: bad.uid.clone(),
            ..Default::default()
        };
        if bad.kind == "ConfigMap" {
            let configmap = ConfigMap {
                metadata,
                ..Default::default()
            };
            self.warn_on(configmap, &message);
        } else {
            let secret = Secret {
                metadata,
                ..Default::default()
            };
            self.warn_on(secret, &message);
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
