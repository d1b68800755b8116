//! Finding an OCI chart's cosign signatures (see [`cosign`] for their two
//! forms): the referrers API or its fallback tag for bundles, then the
//! `.sig` tag — every document bounded, every blob checked by digest.

use sha2::{Digest, Sha256};

use super::SourceError;
use super::verify::cosign::{self, BUNDLE_TYPE, Evidence, MAX_PAYLOAD, MAX_SIGNATURES};
use crate::lean::hex::hex;

/// The reads of one repository of a registry that finding signatures
/// needs (the OCI client's, [`super::oci`]); each bounded, `None` on 404.
pub trait Registry {
    /// An image manifest by tag or digest.
    fn manifest(&mut self, reference: &str) -> Result<Option<Vec<u8>>, SourceError>;
    /// An index at `path` under `/v2/<repository>/` (referrers, or a tag).
    fn index(&mut self, path: &str) -> Result<Option<Vec<u8>>, SourceError>;
    /// A blob, at most `limit` bytes.
    fn blob(&mut self, digest: &str, limit: u64) -> Result<Option<Vec<u8>>, SourceError>;
}
/// The largest bundle read (one with a certificate chain is a few KiB).
pub const MAX_BUNDLE: u64 = 256 * 1024;

/// Every cosign signature of the manifest `digest`, each parsed or with
/// what is wrong with it; empty: none is published.
pub fn collect(
    registry: &mut impl Registry,
    digest: &str,
) -> Result<Vec<Result<Evidence, String>>, SourceError> {
    let mut found = Vec::new();
    for manifest in bundle_manifests(registry, digest)? {
        found.push(bundle(registry, &manifest)?);
    }
    let tag = cosign::signature_tag(digest);
    if let Some(manifest) = registry.manifest(&tag)? {
        match cosign::declared(&manifest) {
            Err(e) => found.push(Err(e)),
            Ok(layers) => {
                for layer in layers {
                    found.push(classic(registry, &layer)?);
                }
            }
        }
    }
    Ok(found)
}

/// The digests of the bundle manifests that refer to `digest`: from the
/// referrers API, or (a registry without it, 404) its fallback tag.
fn bundle_manifests(
    registry: &mut impl Registry,
    digest: &str,
) -> Result<Vec<String>, SourceError> {
    let referrers = format!(
        "referrers/{digest}?artifactType={}",
        BUNDLE_TYPE.replace('+', "%2B")
    );
    let index = match registry.index(&referrers)? {
        Some(index) => Some(index),
        None => {
            let tag = digest.replace(':', "-");
            registry.index(&format!("manifests/{tag}"))?
        }
    };
    let Some(index) = index else {
        return Ok(Vec::new());
    };
    let index: serde_json::Value = serde_json::from_slice(&index).unwrap_or_default();
    Ok(index["manifests"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter(|m| m["artifactType"] == BUNDLE_TYPE)
        .filter_map(|m| m["digest"].as_str().map(String::from))
        .take(MAX_SIGNATURES)
        .collect())
}

/// A bundle manifest's bundle.
fn bundle(
    registry: &mut impl Registry,
    manifest_digest: &str,
) -> Result<Result<Evidence, String>, SourceError> {
    let Some(manifest) = registry.manifest(manifest_digest)? else {
        return Ok(Err(format!(
            "a referrer {manifest_digest} that is not there"
        )));
    };
    if format!("sha256:{}", hex(&Sha256::digest(&manifest))) != manifest_digest {
        return Ok(Err(format!(
            "a referrer manifest that is not {manifest_digest}"
        )));
    }
    let doc: serde_json::Value = serde_json::from_slice(&manifest).unwrap_or_default();
    let layer = &doc["layers"][0];
    let (Some(digest), Some(size)) = (layer["digest"].as_str(), layer["size"].as_u64()) else {
        return Ok(Err("a bundle manifest without a layer".into()));
    };
    if size > MAX_BUNDLE {
        return Ok(Err(format!(
            "a bundle of {size} bytes, over the {MAX_BUNDLE}-byte bound"
        )));
    }
    Ok(match blob(registry, digest, size)? {
        Ok(bytes) => cosign::from_bundle(&bytes),
        Err(e) => Err(e),
    })
}

/// A signature manifest's layer with its payload.
fn classic(
    registry: &mut impl Registry,
    layer: &cosign::Declared,
) -> Result<Result<Evidence, String>, SourceError> {
    if layer.size > MAX_PAYLOAD {
        return Ok(Err(format!(
            "a signature payload of {} bytes, over the {MAX_PAYLOAD}-byte bound",
            layer.size
        )));
    }
    Ok(match blob(registry, &layer.digest, layer.size)? {
        Ok(payload) => cosign::from_layer(layer, &payload),
        Err(e) => Err(e),
    })
}

/// The blob `digest`, at most `size` bytes, checked against its digest.
fn blob(
    registry: &mut impl Registry,
    digest: &str,
    size: u64,
) -> Result<Result<Vec<u8>, String>, SourceError> {
    let Some(bytes) = registry.blob(digest, size)? else {
        return Ok(Err(format!("a signature blob {digest} that is not there")));
    };
    if format!("sha256:{}", hex(&Sha256::digest(&bytes))) != digest {
        return Ok(Err(format!("a signature blob that is not {digest}")));
    }
    Ok(Ok(bytes))
}
