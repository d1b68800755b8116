//! The precise check of one suspect object, and the put-back of a drifted
//! one — both as the HelmApp's identity (a tenant's ServiceAccount cannot
//! read or write through the operator what it could not itself).
//!
//! The check is a server-side apply dry run of the object as the manifest
//! has it (helm's field manager, forced — what a put-back would leave),
//! and a read of the live object; [`super::compare`] names the fields
//! that differ.

use kube::api::{Patch, PatchParams};
use kube::core::Request;
use serde_json::{Value, json};

use crate::delivery::helmapp::drift_cache::DriftCache;
use crate::delivery::helmapp::drift_cache::resources::collection_path;
use crate::delivery::helmapp::observe::drift::compare::{as_stored, drifted_fields};
use crate::delivery::tenancy::impersonate;
use crate::lean::fingerprint::Fingerprint;

/// The field manager of helm's own writes: a put-back owns what helm
/// owns.
const HELM_MANAGER: &str = "helm";

/// One object to check or put back.
pub struct Object<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// As the manifest has it, with helm's metadata ([`with_helm_metadata`]).
    pub desired: &'a Value,
    pub as_user: Option<&'a str>,
}

/// What a check found.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// The fields the manifest sets are as it sets them; `digest`: the
    /// live object's (what `status.inventory[].checked` records).
    Clean { digest: String },
    Drifted {
        fields: Vec<String>,
        digest: String,
        /// The live object read, when the drift is only likely (not
        /// confirmed by a dry run): the put-back compares with it.
        live: Option<Value>,
    },
    /// The object is gone (a deletion: put back by a helm upgrade).
    Gone,
    /// It carries `hossted.com/drift: disabled`.
    Disabled { digest: String },
}

/// `object` as helm applies it: helm's label and annotations added.
pub fn with_helm_metadata(object: &Value, release: &str, release_ns: &str) -> Value {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert("app.kubernetes.io/managed-by".into(), json!("Helm"));
        }
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert("meta.helm.sh/release-name".into(), json!(release));
            annotations.insert("meta.helm.sh/release-namespace".into(), json!(release_ns));
        }
    }
    object
}

impl DriftCache {
    /// Checks `object`, leaving out the fields `ignored` covers: reads it,
    /// and unless its digest is `previous` (`None`: first sight, its
    /// digest recorded) compares the fields its manifest sets with the
    /// live ones. Values as written can differ from values as stored
    /// (`cpu: 0.5` is kept as `500m`), so a difference is only *likely*
    /// drift: `confirm` (drift reported, not put back) settles it with a
    /// server-side apply dry run; otherwise the put-back itself does
    /// ([`Shared::put_back`] names only the fields it changed).
    pub async fn check(
        &self,
        client: &kube::Client,
        object: &Object<'_>,
        ignored: &[&str],
        previous: Option<&str>,
        confirm: bool,
    ) -> Result<Found, String> {
        let collection = self.collection(client, object).await?;
        let Some(live) = self.read_at(client, object, &collection).await? else {
            return Ok(Found::Gone);
        };
        let fingerprint = Fingerprint::of(&live);
        let digest = fingerprint.digest(ignored);
        if fingerprint.drift_disabled {
            return Ok(Found::Disabled { digest });
        }
        if previous.is_none_or(|p| p == digest) {
            return Ok(Found::Clean { digest });
        }
        self.metrics.drift_checked(object.kind);
        let stored = as_stored(object.desired);
        let likely = drifted_fields(&stored, &stored, &live, ignored);
        if likely.is_empty() {
            return Ok(Found::Clean { digest });
        }
        if !confirm {
            return Ok(Found::Drifted {
                fields: likely,
                digest,
                live: Some(live),
            });
        }
        let applied = self.apply(client, object, &collection, true).await?;
        self.metrics.drift_dry_run(object.kind);
        let fields = drifted_fields(object.desired, &applied, &live, ignored);
        Ok(if fields.is_empty() {
            Found::Clean { digest }
        } else {
            Found::Drifted {
                fields,
                digest,
                live: None,
            }
        })
    }

    /// The live object (`None`: it does not exist), read as
    /// `object.as_user` (`object.desired` is not used).
    pub async fn read(
        &self,
        client: &kube::Client,
        object: &Object<'_>,
    ) -> Result<Option<Value>, String> {
        let collection = self.collection(client, object).await?;
        self.read_at(client, object, &collection).await
    }

    async fn read_at(
        &self,
        client: &kube::Client,
        object: &Object<'_>,
        collection: &str,
    ) -> Result<Option<Value>, String> {
        let mut get = Request::new(collection)
            .get(object.name, &Default::default())
            .map_err(|e| e.to_string())?;
        impersonate(&mut get, object.as_user)?;
        match client.request(get).await {
            Ok(v) => Ok(Some(v)),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
            Err(e) => Err(format!("reading {}: {e}", describe(object))),
        }
    }

    /// Puts `object` back as its manifest has it; returns the fields the
    /// put-back changed against `live` (empty: nothing had drifted — values
    /// written differently than stored) and the digest of what the server
    /// then holds. Without `live`, the fields are not known: empty.
    pub async fn put_back(
        &self,
        client: &kube::Client,
        object: &Object<'_>,
        ignored: &[&str],
        live: Option<&Value>,
    ) -> Result<(Vec<String>, String), String> {
        let collection = self.collection(client, object).await?;
        let applied = self.apply(client, object, &collection, false).await?;
        let fields = live
            .map(|live| drifted_fields(object.desired, &applied, live, ignored))
            .unwrap_or_default();
        Ok((fields, Fingerprint::of(&applied).digest(ignored)))
    }

    async fn collection(
        &self,
        client: &kube::Client,
        object: &Object<'_>,
    ) -> Result<String, String> {
        let resource = self
            .resources
            .lookup(client, object.api_version, object.kind)
            .await?
            .ok_or_else(|| {
                format!(
                    "{} {} is not served by the API server",
                    object.api_version, object.kind
                )
            })?;
        Ok(collection_path(
            object.api_version,
            &resource,
            object.namespace,
        ))
    }

    /// Server-side apply of the object's manifest (helm's field manager,
    /// forced). When the server finds the merged result invalid — an edit
    /// that added to a keyed list (a second Service port then lacks its
    /// required name) — a JSON merge patch of the manifest instead, which
    /// sets each list the manifest sets to exactly its items.
    async fn apply(
        &self,
        client: &kube::Client,
        object: &Object<'_>,
        collection: &str,
        dry_run: bool,
    ) -> Result<Value, String> {
        let what = if dry_run { "checking" } else { "putting back" };
        let key = format!("{collection}/{}", object.name);
        let merge = |dry_run: bool| {
            let mut params = PatchParams {
                field_manager: Some(HELM_MANAGER.into()),
                ..Default::default()
            };
            params.dry_run = dry_run;
            params
        };
        let merged = Patch::Merge(object.desired);
        let known = self.merge_first.lock().contains(&key);
        if known {
            let result = self
                .patch(client, object, collection, &merge(dry_run), &merged)
                .await;
            return result.map_err(|e| format!("{what} {}: {e}", describe(object)));
        }
        let mut params = PatchParams::apply(HELM_MANAGER).force();
        params.dry_run = dry_run;
        let applied = Patch::Apply(object.desired);
        let result = match self
            .patch(client, object, collection, &params, &applied)
            .await
        {
            Err(Failure::Api(e)) if e.code == 422 => {
                self.remember_merge_first(key);
                self.patch(client, object, collection, &merge(dry_run), &merged)
                    .await
            }
            other => other,
        };
        result.map_err(|e| format!("{what} {}: {e}", describe(object)))
    }

    fn remember_merge_first(&self, key: String) {
        let mut remembered = self.merge_first.lock();
        if remembered.len() >= crate::delivery::helmapp::drift_cache::MERGE_FIRST {
            remembered.clear();
        }
        remembered.insert(key);
    }

    async fn patch(
        &self,
        client: &kube::Client,
        object: &Object<'_>,
        collection: &str,
        params: &PatchParams,
        patch: &Patch<&Value>,
    ) -> Result<Value, Failure> {
        let mut request = Request::new(collection)
            .patch(object.name, params, patch)
            .map_err(|e| Failure::Other(e.to_string()))?;
        impersonate(&mut request, object.as_user).map_err(Failure::Other)?;
        client.request(request).await.map_err(|e| match e {
            kube::Error::Api(e) => Failure::Api(e),
            e => Failure::Other(e.to_string()),
        })
    }
}

/// Why a patch failed: the API's answer, or anything else.
#[derive(Debug)]
enum Failure {
    Api(Box<kube::core::Status>),
    Other(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Api(e) => write!(f, "{} ({})", e.message, e.reason),
            Failure::Other(e) => f.write_str(e),
        }
    }
}

fn describe(object: &Object<'_>) -> String {
    match object.namespace {
        "" => format!("{} {}", object.kind, object.name),
        ns => format!("{} {ns}/{}", object.kind, object.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helm_metadata_is_added_and_the_rest_kept() {
        let o = json!({ "kind": "ConfigMap", "metadata": { "name": "c", "labels": { "a": "1" } }, "data": { "k": "v" } });
        let w = with_helm_metadata(&o, "web", "apps");
        assert_eq!(w["metadata"]["labels"]["a"], "1");
        assert_eq!(
            w["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "Helm"
        );
        assert_eq!(
            w["metadata"]["annotations"]["meta.helm.sh/release-name"],
            "web"
        );
        assert_eq!(
            w["metadata"]["annotations"]["meta.helm.sh/release-namespace"],
            "apps"
        );
        assert_eq!(w["data"], o["data"]);
    }
}
