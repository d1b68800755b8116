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
use prometheus_client::metrics::histogram::Histogram;

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

impl Trust {
    /// `key`, `keyless` or `keyring`: what kind of signer is trusted.
    pub fn signers_kind(&self) -> &'static str {
        match &self.signers {
            Some(cosign::Signers::Keys(_)) => "key",
            Some(cosign::Signers::Keyless { .. }) => "keyless",
            None => "keyring",
        }
    }
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

type Labels1 = [(&'static str, String); 1];
type Labels2 = [(&'static str, String); 2];

/// Verifications done, by (digest, trust fingerprint); bounded.
#[derive(Debug)]
pub struct VerifiedCache {
    done: Mutex<HashMap<(String, String), Verified>>,
    /// Signature checks run, by provider and result
    /// (`hossted_chart_verifications_total`): a second app of a verified
    /// digest adds none.
    pub runs: Family<Labels2, Counter>,
    /// Time a signature check took, fetching the signatures included, by
    /// what was trusted (`hossted_chart_verification_seconds`).
    pub seconds: Family<Labels1, Histogram, fn() -> Histogram>,
}

fn verification_histogram() -> Histogram {
    Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0])
}

impl Default for VerifiedCache {
    fn default() -> Self {
        VerifiedCache {
            done: Mutex::default(),
            runs: Family::default(),
            seconds: Family::new_with_constructor(verification_histogram),
        }
    }
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

    /// Counts one signature check of `trust`'s provider, `seconds` long.
    pub fn ran(&self, trust: &Trust, ok: bool, seconds: f64) {
        self.seconds
            .get_or_create(&[("signers", trust.signers_kind().to_string())])
            .observe(seconds);
        let result = if ok { "verified" } else { "refused" };
        self.runs
            .get_or_create(&[
                ("provider", trust.provider.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
    }

    /// The verification of `digest` under `trust`: remembered, or made now
    /// by `check` (which names the signer), timed, counted and remembered.
    pub fn get_or_verify<E>(
        &self,
        digest: &str,
        trust: &Trust,
        check: impl FnOnce() -> Result<String, E>,
    ) -> Result<Verified, E> {
        if let Some(done) = self.get(digest, trust) {
            return Ok(done);
        }
        let started = std::time::Instant::now();
        let signer = check();
        self.ran(trust, signer.is_ok(), started.elapsed().as_secs_f64());
        let done = Verified {
            provider: trust.provider.to_string(),
            digest: digest.to_string(),
            signer: signer?,
            at: now_rfc3339(),
        };
        self.put(trust, &done);
        Ok(done)
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
