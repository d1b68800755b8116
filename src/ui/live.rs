//! What the pages show, kept current by watches with the user's own
//! client: informers (pkg/cache) of HelmApps and HelmAppSets in the
//! namespaces the user may list, and a generation number that moves with
//! every change — what the `/events` stream tells browsers.

use std::sync::Arc;
use std::time::Duration;

use apis::helmapp::HelmApp;
use apis::helmappset::HelmAppSet;
use cache::{Event, HandlerFn, InformerOptions, SharedInformer, SharedInformerFactory};
use kube::Api;
use kube::api::ListParams;
use std::collections::VecDeque;

use parking_lot::Mutex;
use tokio::sync::watch;

/// Changes remembered for [`Live::touched`].
const RECENT: usize = 4096;

/// Where the UI looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The user may list HelmApps in every namespace.
    All,
    /// Only these (asked with `-n`, or the kubeconfig context's when a
    /// cluster-wide list is forbidden).
    Namespaces(Vec<String>),
}

/// The informers and the change counter.
pub struct Live {
    pub scope: Scope,
    apps: Vec<Arc<SharedInformer<HelmApp>>>,
    /// Empty when the user may not list HelmAppSets (or the CRD is absent).
    sets: Vec<Arc<SharedInformer<HelmAppSet>>>,
    /// Invariant: moves (by one) after each stored change of any informer
    /// here; never moves back.
    generation: watch::Sender<u64>,
    /// The newest changes, `(generation, kind/namespace/name)`, oldest
    /// first, at most [`RECENT`]: what tells a page about one object
    /// whether a generation touched it.
    recent: Arc<Mutex<VecDeque<(u64, String)>>>,
    _factory: SharedInformerFactory,
}

/// Whether a LIST of `api` (one item) is allowed: `Ok(false)` on 403 or
/// 404, the apiserver's other errors as they are.
async fn may_list<K>(api: &Api<K>) -> Result<bool, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// The handler body: one more generation, remembered with the key.
fn noter(
    generation: &watch::Sender<u64>,
    recent: &Arc<Mutex<VecDeque<(u64, String)>>>,
    kind: &'static str,
) -> impl Fn(&str) + Send + 'static {
    let (tx, recent) = (generation.clone(), recent.clone());
    move |key: &str| {
        // One lock for both, so `recent` and the generation agree.
        let mut r = recent.lock();
        tx.send_modify(|g| *g += 1);
        r.push_back((*tx.borrow(), format!("{kind}/{key}")));
        if r.len() > RECENT {
            r.pop_front();
        }
    }
}

/// What no page reads from the cache: bookkeeping, and inline values
/// (the values shown are helm's, from its storage; a diff reads the
/// HelmApp afresh).
/// [`Live::touched`] over the remembered changes `recent`.
fn touched_in(recent: &VecDeque<(u64, String)>, key: &str, since: u64, now: u64) -> bool {
    let oldest = recent.front().map_or(u64::MAX, |(g, _)| *g);
    if since + 1 < oldest && since < now {
        // Some changes after `since` are forgotten: they may have.
        return true;
    }
    recent
        .iter()
        .any(|(g, k)| *g > since && *g <= now && k == key)
}

fn strip_app(mut a: HelmApp) -> HelmApp {
    cache::strip_bookkeeping(&mut a.metadata);
    a.spec.values = None;
    a.spec.values_base64.clear();
    a
}

fn strip_set(mut s: HelmAppSet) -> HelmAppSet {
    cache::strip_bookkeeping(&mut s.metadata);
    s
}

impl Live {
    /// Decides the scope, starts the informers and waits (up to 60 s) for
    /// their first LIST.
    pub async fn start(client: kube::Client, asked: &[String]) -> Result<Arc<Live>, String> {
        let scope = if !asked.is_empty() {
            Scope::Namespaces(asked.to_vec())
        } else if may_list(&Api::<HelmApp>::all(client.clone()))
            .await
            .map_err(|e| format!("cannot list HelmApps: {e}"))?
        {
            Scope::All
        } else {
            Scope::Namespaces(vec![client.default_namespace().to_string()])
        };
        let factory = SharedInformerFactory::new(client.clone(), None);
        let (generation, _) = watch::channel(0u64);
        let app_opts = || InformerOptions::default().transform("ui-strip", strip_app);
        let set_opts = || InformerOptions::default().transform("ui-strip", strip_set);
        let (mut apps, mut sets) = (Vec::new(), Vec::new());
        match &scope {
            Scope::All => {
                apps.push(factory.informer::<HelmApp>(app_opts()));
                if may_list(&Api::<HelmAppSet>::all(client.clone()))
                    .await
                    .unwrap_or(false)
                {
                    sets.push(factory.informer::<HelmAppSet>(set_opts()));
                }
            }
            Scope::Namespaces(namespaces) => {
                for ns in namespaces {
                    if !may_list(&Api::<HelmApp>::namespaced(client.clone(), ns))
                        .await
                        .map_err(|e| format!("cannot list HelmApps in {ns}: {e}"))?
                    {
                        return Err(format!(
                            "you may not list HelmApps in namespace {ns} (kubectl auth can-i list helmapps -n {ns})"
                        ));
                    }
                    apps.push(factory.namespaced_informer::<HelmApp>(ns, app_opts()));
                    if may_list(&Api::<HelmAppSet>::namespaced(client.clone(), ns))
                        .await
                        .unwrap_or(false)
                    {
                        sets.push(factory.namespaced_informer::<HelmAppSet>(ns, set_opts()));
                    }
                }
            }
        }
        let recent = Arc::new(Mutex::new(VecDeque::new()));
        for informer in &apps {
            let note = noter(&generation, &recent, "HelmApp");
            informer.add_event_handler(HandlerFn(move |e: &Event<HelmApp>| {
                if let Some(o) = e.changed() {
                    note(&cache::object_key(o.as_ref()));
                }
            }));
        }
        for informer in &sets {
            let note = noter(&generation, &recent, "HelmAppSet");
            informer.add_event_handler(HandlerFn(move |e: &Event<HelmAppSet>| {
                if let Some(o) = e.changed() {
                    note(&cache::object_key(o.as_ref()));
                }
            }));
        }
        factory.start().map_err(|e| e.to_string())?;
        if !factory.wait_for_cache_sync(Duration::from_secs(60)).await {
            return Err("the HelmApp watches did not sync within 60 s".into());
        }
        Ok(Arc::new(Live {
            scope,
            apps,
            sets,
            generation,
            recent,
            _factory: factory,
        }))
    }

    pub fn apps(&self) -> Vec<Arc<HelmApp>> {
        self.apps.iter().flat_map(|i| i.store().list()).collect()
    }

    pub fn sets(&self) -> Vec<Arc<HelmAppSet>> {
        self.sets.iter().flat_map(|i| i.store().list()).collect()
    }

    pub fn app(&self, namespace: &str, name: &str) -> Option<Arc<HelmApp>> {
        let key = format!("{namespace}/{name}");
        self.apps.iter().find_map(|i| i.store().get(&key))
    }

    pub fn set(&self, namespace: &str, name: &str) -> Option<Arc<HelmAppSet>> {
        let key = format!("{namespace}/{name}");
        self.sets.iter().find_map(|i| i.store().get(&key))
    }

    /// The current generation (see [`Live::subscribe`]).
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// Whether a change after generation `since`, up to `now`, touched
    /// `kind/namespace/name` — `true` also when the changes since are no
    /// longer all remembered.
    pub fn touched(&self, key: &str, since: u64, now: u64) -> bool {
        touched_in(&self.recent.lock(), key, since, now)
    }

    /// The keys (`kind/namespace/name`) changes after generation `since`,
    /// up to `now`, touched — `None` when they are no longer all
    /// remembered.
    pub fn touched_keys(&self, since: u64, now: u64) -> Option<Vec<String>> {
        let recent = self.recent.lock();
        let oldest = recent.front().map_or(u64::MAX, |(g, _)| *g);
        if since + 1 < oldest && since < now {
            return None;
        }
        Some(
            recent
                .iter()
                .filter(|(g, _)| *g > since && *g <= now)
                .map(|(_, k)| k.clone())
                .collect(),
        )
    }

    /// A receiver woken on every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_about_one_object_hears_of_its_changes_only() {
        let recent: VecDeque<(u64, String)> =
            [(5, "HelmApp/a/x"), (6, "HelmApp/a/y"), (7, "HelmApp/a/x")]
                .into_iter()
                .map(|(g, k)| (g, k.to_string()))
                .collect();
        assert!(touched_in(&recent, "HelmApp/a/x", 4, 5));
        assert!(!touched_in(&recent, "HelmApp/a/x", 5, 6), "6 was y's");
        assert!(touched_in(&recent, "HelmApp/a/x", 6, 7));
        assert!(!touched_in(&recent, "HelmApp/a/z", 4, 7));
        // Changes before the oldest remembered are forgotten: maybe.
        assert!(touched_in(&recent, "HelmApp/a/z", 2, 7));
        assert!(!touched_in(&recent, "HelmApp/a/z", 7, 7), "nothing new");
    }
}
