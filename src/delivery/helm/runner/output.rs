//! What a helm run says: its failure ([`HelmError`]), and what `-o json`
//! prints of a release it made ([`Released`]) or rendered ([`Rendered`]).

use std::time::Duration;

use crate::delivery::helm::values;

/// Why a helm run failed.
#[derive(Debug, thiserror::Error)]
pub enum HelmError {
    #[error("cannot run {binary}: {source}")]
    Spawn {
        binary: String,
        source: std::io::Error,
    },
    #[error("helm {action} did not finish within {timeout:?} and was killed")]
    Timeout {
        action: &'static str,
        timeout: Duration,
    },
    /// helm exited non-zero; `stderr` is its message (not yet redacted).
    #[error("helm {action} failed: {stderr}")]
    Failed {
        action: &'static str,
        stderr: String,
    },
    /// Not started: a name that is no release or namespace name
    /// ([`super::super::check_release_name`]).
    #[error("helm {action} refused: {message}")]
    InvalidName {
        action: &'static str,
        message: String,
    },
    /// Not started: the remote API server's host resolved to an address
    /// `--deny-chart-source-cidrs` refuses, or to none
    /// (`crate::delivery::remote::connect`).
    #[error("helm {action} did not start: {message}")]
    AddressRefused {
        action: &'static str,
        message: String,
    },
    /// Not started: the API server does not answer ([`Gate`]).
    #[error("helm {action} did not start: the API server does not answer")]
    Unreachable { action: &'static str },
    #[error("helm {action} printed something that is not a release: {message}")]
    Output {
        action: &'static str,
        message: String,
    },
}

impl HelmError {
    /// helm's message for a condition or an Event: redacted whole by
    /// `redactor` first — a cut could otherwise leave part of a value that
    /// no longer matches — then its first lines, at most 1,024 characters.
    pub fn summary(&self, redactor: &values::Redactor) -> String {
        let text = redactor.redact(&self.to_string());
        let mut lines: Vec<&str> = text.lines().take(5).collect();
        if lines.is_empty() {
            lines.push("helm failed");
        }
        lines.join(" ").chars().take(1024).collect()
    }

    /// What the API refused the identity helm ran as, when that is why helm
    /// failed: the "cannot <verb> resource ..." of the apiserver's
    /// Forbidden message (`... is forbidden: User "..." cannot ...`).
    pub fn forbidden(&self) -> Option<String> {
        let HelmError::Failed { stderr, .. } = self else {
            return None;
        };
        let at = stderr.find(" is forbidden: User \"")?;
        let rest = &stderr[at..];
        let what = rest.find(" cannot ").map_or(rest, |i| &rest[i + 1..]);
        // Up to the end of the apiserver's sentence (helm may append more).
        let end = what.find(['\n', ':']).unwrap_or(what.len());
        Some(what[..end].trim().chars().take(300).collect())
    }
}

/// Whether helm's `stderr` says the release has no revision — helm says
/// so only in words: its storage's error, `release: not found`, ends its
/// last line (`Error: release: not found`). The one place that reads it,
/// for the operator and `kubectl hossted` alike.
pub fn says_release_not_found(stderr: &str) -> bool {
    stderr
        .trim_end()
        .lines()
        .last()
        .is_some_and(|line| line.trim_end().ends_with("release: not found"))
}

/// What an install or upgrade left, from `helm ... -o json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Released {
    pub revision: i64,
    pub status: String,
    pub chart_version: String,
    pub app_version: String,
    /// `chart.metadata.name` of the release helm printed.
    pub chart_name: String,
    /// The content digest of the release helm printed
    /// ([`crate::lean::storage::content_digest_of_json`]): what the
    /// revision it stored has, read from our own helm, not the storage.
    pub content: String,
    /// The same with its hooks' last runs left out
    /// ([`crate::lean::storage::content_digest_untested`]): what the
    /// revision still has after our own `helm test` rewrote it.
    pub untested: String,
}

/// The `manifest` of the release helm printed as JSON.
/// What a dry run would deploy: the manifest, and each hook's.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub manifest: String,
    pub hooks: Vec<String>,
}

pub(super) fn manifest_of(action: &'static str, out: &str) -> Result<Rendered, HelmError> {
    #[derive(serde::Deserialize)]
    struct Hook {
        #[serde(default)]
        manifest: String,
    }
    #[derive(serde::Deserialize)]
    struct Release {
        #[serde(default)]
        manifest: String,
        #[serde(default)]
        hooks: Option<Vec<Hook>>,
    }
    serde_json::from_str::<Release>(out.trim())
        .map(|r| Rendered {
            manifest: r.manifest,
            hooks: r
                .hooks
                .unwrap_or_default()
                .into_iter()
                .map(|h| h.manifest)
                .collect(),
        })
        .map_err(|e| HelmError::Output {
            action,
            message: e.to_string(),
        })
}

/// The release helm printed with `-o json`.
pub(super) fn parse_release(action: &'static str, out: &str) -> Result<Released, HelmError> {
    #[derive(serde::Deserialize)]
    struct Release {
        #[serde(default)]
        version: i64,
        #[serde(default)]
        info: Info,
        #[serde(default)]
        chart: Chart,
    }
    #[derive(serde::Deserialize, Default)]
    struct Info {
        #[serde(default)]
        status: String,
    }
    #[derive(serde::Deserialize, Default)]
    struct Chart {
        #[serde(default)]
        metadata: Meta,
    }
    #[derive(serde::Deserialize, Default)]
    struct Meta {
        #[serde(default)]
        name: String,
        #[serde(default)]
        version: String,
        #[serde(default, rename = "appVersion")]
        app_version: String,
    }
    let r: Release = serde_json::from_str(out.trim()).map_err(|e| HelmError::Output {
        action,
        message: e.to_string(),
    })?;
    Ok(Released {
        revision: r.version,
        status: r.info.status,
        chart_version: r.chart.metadata.version,
        app_version: r.chart.metadata.app_version,
        chart_name: r.chart.metadata.name,
        content: crate::lean::storage::content_digest_of_json(out.trim().as_bytes())
            .unwrap_or_default(),
        untested: crate::lean::storage::content_digest_untested(out.trim().as_bytes())
            .unwrap_or_default(),
    })
}
