//! What the operator did and sees: `status`.

use super::*;

/// A chart's verified signature, as `kubectl hossted verify` shows it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerificationStatus {
    /// `cosign` or `helm`.
    pub provider: String,
    /// What was verified: the OCI manifest's or the archive's digest.
    pub digest: String,
    /// Who signed: a key (its Secret key and fingerprint) or an identity.
    pub signer: String,
    /// When the operator verified it (RFC 3339).
    pub verified_at: String,
}

/// What the operator did and sees.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmAppStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub release_name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_namespace: String,
    /// The resolved chart version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chart_version: String,
    /// The chart's own name (its Chart.yaml's) as the operator's own last
    /// install or upgrade made the release (helm's output, never the
    /// storage); empty after a rollback or an adoption, until the next.
    /// The CHART column, the Ready message, `kubectl hossted get` and the
    /// web view show it (an OCI or Git chart has no name in the spec), and
    /// `upgrade.chartNameChangeStrategy` compares with it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chart_name: String,
    /// Where the chart last installed or upgraded came from, when it is
    /// more than its digest: the Git commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceStatus>,
    /// `sha256:<hex>` of the chart archive the release was last installed
    /// or upgraded from (for a chart by path: of its files).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub chart_digest: String,
    /// The signature check of the chart last installed or upgraded
    /// (`chart.verify`): what was verified, against what, and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationStatus>,
    /// The newest stable version the chart's repository or registry
    /// offers, also outside a pinned version or range (checked with each
    /// resolution, each `interval`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latest_available: String,
    /// While a change waits for a change window: when the next one opens
    /// (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next_window: String,
    /// When a version range was last resolved.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_resolved: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub app_version: String,
    #[serde(default)]
    pub revision: i64,
    /// The hash of everything that decides the release's content.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub config_hash: String,
    /// `install`, `upgrade`, `rollback`, `uninstall`, `unlock` or `none`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_action: String,
    /// Consecutive failed attempts of the current configuration.
    #[serde(default)]
    pub failures: i32,
    /// The `hossted.com/reconcile-at` value last acted on (a new value
    /// restarts exhausted retries).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_handled_reconcile_at: String,
    /// The `hossted.com/force-at` value last acted on (a new value runs
    /// one upgrade with `--force`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_handled_force_at: String,
    /// The last 5 operations, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryEntry>,
    /// Every revision of the release in Helm's storage after the
    /// operator's last action on it, with the digest of its payload: each
    /// revision helm may read is checked against this before any helm run
    /// (reason `StorageTampered` when one differs or is not here).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storage_digests: Vec<StorageDigest>,
    /// The helm run the operator started and has not yet recorded: written
    /// before helm starts, cleared once the revisions it left are recorded
    /// in `storageDigests`. The one proof that a revision missing from
    /// `storageDigests` is the leftover of the operator's own run (a helm
    /// or an operator that died) — no label of Helm's storage is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_intent: Option<RunIntent>,
    /// Objects of the release that drifted (at most 20, newest first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<DriftedObject>,
    /// With `approval: manual`: the change that waits for
    /// `hossted.com/approve` (no Secret value is ever in it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_change: Option<PendingChange>,
    /// Every object of the current release, from its manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inventory: Vec<InventoryEntry>,
    /// The revision `inventory` was read from.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub inventory_revision: i64,
    /// `Ready`, `Released`, `Drifted`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A change waiting for approval: what it would run and what it would
/// change, computed by the render `kubectl hossted diff` shows.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingChange {
    /// The chart version it would install.
    pub chart_version: String,
    /// Its configuration hash: the value `hossted.com/approve` must have.
    pub config_hash: String,
    /// The objects it adds, changes and removes: `Kind name`, or `Kind
    /// namespace/name` where the manifest gives a namespace.
    #[serde(default)]
    pub objects: PendingObjects,
    /// Lines of its unified diff (added and removed), Secret values masked.
    #[serde(default)]
    pub diff_lines: i64,
    /// When it was computed (RFC 3339).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub since: String,
}

/// The objects a pending change touches, at most 50 names each (the
/// `AwaitingApproval` Event gives the whole counts).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PendingObjects {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
}

/// An object of the release whose fields differ from its manifest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct DriftedObject {
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    /// JSON pointers of the fields that differ.
    #[serde(default)]
    pub fields: Vec<String>,
}

/// One object of the release.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InventoryEntry {
    pub kind: String,
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    /// A digest of the live object when drift was last decided on it
    /// (empty: not yet): an object whose digest has not moved since is not
    /// checked again.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub checked: String,
}

/// A helm run about to start (`status.runIntent`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunIntent {
    /// `install`, `upgrade` or `rollback`.
    pub action: String,
    /// The revision the run writes: the newest in Helm's storage, plus 1.
    pub revision: i64,
    /// The config hash it runs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub config_hash: String,
    /// When it was started (RFC 3339).
    pub started_at: String,
    /// Once helm ended and printed the release it stored: that revision's
    /// content digest (and `revision` is the one it printed). A new
    /// revision is recorded as the run's only if its content is this.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub content: String,
}

/// One revision of the release as the operator left it in Helm's storage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageDigest {
    pub revision: i64,
    /// `sha256:<hex>` of its storage's `data.release`.
    pub digest: String,
    /// `sha256:<hex>` of the release without its `info` (status, times,
    /// description): what helm itself rewrites when it supersedes a
    /// revision leaves this unchanged, an edit of what helm acts on does
    /// not (empty: recorded before this was).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub content: String,
}

/// A string enum of the status, serialised as its word; a word this
/// version does not know is kept as it was (`Other`), so reading a status
/// written by another version loses nothing.
macro_rules! status_word {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $word:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
        #[serde(from = "String", into = "String")]
        #[schemars(with = "String")]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
            /// A word this version does not write (empty: none).
            Other(String),
        }

        impl Default for $name {
            fn default() -> Self {
                $name::Other(String::new())
            }
        }

        impl $name {
            /// Its word in the status.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $word,)+
                    $name::Other(w) => w,
                }
            }
        }

        impl From<&str> for $name {
            fn from(word: &str) -> Self {
                match word {
                    $($word => $name::$variant,)+
                    other => $name::Other(other.to_string()),
                }
            }
        }

        impl From<String> for $name {
            fn from(word: String) -> Self {
                $name::from(word.as_str())
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.as_str().to_string()
            }
        }

        /// Its word equals `word` (a test reading a status as JSON would).
        impl PartialEq<&str> for $name {
            fn eq(&self, word: &&str) -> bool {
                self.as_str() == *word
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

status_word! {
    /// What a history entry did: `install`, `upgrade` (a repair is one),
    /// `rollback`, `uninstall`, `test`, `unlock` or `adopt`.
    HistoryAction {
        Install => "install",
        Upgrade => "upgrade",
        Rollback => "rollback",
        Uninstall => "uninstall",
        Test => "test",
        Unlock => "unlock",
        Adopt => "adopt",
    }
}

status_word! {
    /// How a history entry ended: `succeeded`, `failed`, `forbidden` (the
    /// apiserver refused helm) or `refused` (not run: Helm's storage was
    /// not the operator's).
    HistoryResult {
        Succeeded => "succeeded",
        Failed => "failed",
        /// The apiserver refused helm (the HelmApp's identity may not).
        Forbidden => "forbidden",
        /// Not run: the operator refused it (Helm's storage untrusted).
        Refused => "refused",
    }
}

impl HistoryAction {
    /// An install, upgrade (a repair is one) or test: an attempt at the
    /// configuration, which a failure counts against.
    pub fn attempts_configuration(&self) -> bool {
        matches!(
            self,
            HistoryAction::Install | HistoryAction::Upgrade | HistoryAction::Test
        )
    }
}

/// One helm operation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub action: HistoryAction,
    #[serde(default)]
    pub revision: i64,
    #[serde(default)]
    pub chart_version: String,
    #[serde(default)]
    pub config_hash: String,
    pub result: HistoryResult,
    /// RFC 3339.
    pub time: String,
    /// `sha256:<hex>` of the newest revision in Helm's storage after this
    /// operation (`data.release`): checked before the storage is trusted
    /// again (reason `StorageTampered` when it differs).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub release_digest: String,
    /// How long helm ran for an install, upgrade or repair (`12.3s`;
    /// empty: not measured).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub duration: String,
}

/// The source revision a release was made from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    /// The Git commit id.
    pub revision: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_words_read_and_write_as_before_and_keep_unknown_ones() {
        let written = serde_json::json!({
            "action": "upgrade", "result": "forbidden", "time": "t"
        });
        let entry: HistoryEntry = serde_json::from_value(written.clone()).unwrap();
        assert_eq!(entry.action, HistoryAction::Upgrade);
        assert_eq!(entry.result, HistoryResult::Forbidden);
        let again = serde_json::to_value(&entry).unwrap();
        assert_eq!(again["action"], "upgrade");
        assert_eq!(again["result"], "forbidden");
        // A word of another version: kept, written back as it was.
        let other: HistoryEntry = serde_json::from_value(
            serde_json::json!({"action": "dance", "result": "", "time": "t"}),
        )
        .unwrap();
        assert_eq!(other.action, HistoryAction::Other("dance".into()));
        assert_eq!(serde_json::to_value(&other).unwrap()["action"], "dance");
    }
}
