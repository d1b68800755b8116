//! Chart verification (docs/verification.md): who must have signed a
//! chart, checked before it is stored for helm, and remembered by digest.
//!
//! - [`cosign`]: an OCI chart's cosign signatures (bundles or signature
//!   manifests), against PEM keys ([`keys`]) or keyless certificates
//!   ([`fulcio`]) of a Sigstore trust root ([`sigstore`]).
//! - [`provenance`]: an HTTP repository chart's `.prov` file, against an
//!   OpenPGP keyring.
//!
//! A verification is kept per (digest, [`Trust::fingerprint`]): a second
//! app of the same artifact under the same trust is not verified again,
//! and a chart already in the cache is verified before use all the same
//! (the cache is keyed by content, not by who vouched for it).

pub mod cosign;
pub mod fulcio;
pub mod keys;
pub mod provenance;
pub mod sigstore;

use std::collections::HashMap;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use apis::helmapp::VerifyProvider;

/// What a chart must be verified against: built from `chart.verify` and
/// the Secrets it names (see `helmapp::inputs`).
#[derive(Debug, Clone)]
pub struct Trust {
    pub provider: VerifyProvider,
    /// cosign's signers.
    pub signers: Option<cosign::Signers>,
    /// helm's keyrings: (`<secret>/<key>`, bytes).
    pub keyrings: Vec<(String, Vec<u8>)>,
    /// A hash of everything above: two apps with the same fingerprint
    /// trust the same signers.
    pub fingerprint: String,
}

/// What was verified, against what, and when (`status.verification`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verified {
    pub provider: String,
    /// The digest verified (`sha256:`: OCI manifest or archive).
    pub digest: String,
    /// Who signed: a key's name and fingerprint, or an identity.
    pub signer: String,
    /// RFC 3339.
    pub at: String,
}

impl From<&Verified> for apis::helmapp::VerificationStatus {
    fn from(v: &Verified) -> Self {
        apis::helmapp::VerificationStatus {
            provider: v.provider.clone(),
            digest: v.digest.clone(),
            signer: v.signer.clone(),
            verified_at: v.at.clone(),
        }
    }
}

/// Verifications done, by (digest, trust fingerprint); bounded.
#[derive(Debug, Default)]
pub struct VerifiedCache {
    done: Mutex<HashMap<(String, String), Verified>>,
    /// Signature checks run, by provider and result
    /// (`hossted_chart_verifications_total`): a second app of a verified
    /// digest adds none.
    pub runs: Family<[(&'static str, String); 2], Counter>,
}

impl VerifiedCache {
    /// Verifications kept at most (then the table starts over: a
    /// verification forgotten is only done again).
    pub const MAX_ENTRIES: usize = 4096;

    pub fn get(&self, digest: &str, trust: &Trust) -> Option<Verified> {
        self.done
            .lock()
            .get(&(digest.to_string(), trust.fingerprint.clone()))
            .cloned()
    }

    /// Counts one signature check of `trust`'s provider.
    pub fn ran(&self, trust: &Trust, ok: bool) {
        let result = if ok { "verified" } else { "refused" };
        self.runs
            .get_or_create(&[
                ("provider", trust.provider.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
    }

    pub fn put(&self, trust: &Trust, verified: &Verified) {
        let mut done = self.done.lock();
        if done.len() >= Self::MAX_ENTRIES {
            done.clear();
        }
        done.insert(
            (verified.digest.clone(), trust.fingerprint.clone()),
            verified.clone(),
        );
    }

    pub fn len(&self) -> usize {
        self.done.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Now, RFC 3339 (seconds).
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
