//! The inventory's flags: the Hossted API (docs/inventory.md's environment variables)
//! and what is reported. Asked for only when the inventory runs.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::inventory::Settings;
use crate::inventory::poster::{ApiConfig, Token, check_url};

#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Inventory (--controllers inventory)")]
pub struct ApiArgs {
    /// Base URL of the Hossted API, e.g. https://api.example.com/v1 (required unless --dry-run).
    #[arg(long, env = "HOSSTED_API_URL")]
    api_url: Option<String>,
    /// Bearer token for the Hossted API (this or --auth-token-file, unless --dry-run). Never logged.
    #[arg(long, env = "HOSSTED_AUTH_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    /// A file holding the token, re-read for every request (a rotated Secret needs no restart).
    #[arg(long, env = "HOSSTED_AUTH_TOKEN_FILE")]
    auth_token_file: Option<PathBuf>,
    /// A PEM bundle trusted for the API besides the system's roots (a TLS-intercepting proxy).
    #[arg(long, env = "HOSSTED_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// Allow a plain http:// API URL that is not loopback (the token then crosses the network in clear text).
    #[arg(long)]
    allow_insecure_http: bool,
    /// Owner e-mail copied into every payload (required).
    #[arg(long, env = "EMAIL_ID")]
    email_id: Option<String>,
    /// Organisation id for cluster registration.
    #[arg(long, env = "HOSSTED_ORG_ID", default_value = "")]
    org_id: String,
    /// Human name of the cluster for registration.
    #[arg(long, env = "CONTEXT_NAME", default_value = "")]
    context_name: String,
    /// Print each request as a JSON line on stdout instead of sending it.
    #[arg(long)]
    pub dry_run: bool,
    /// Concurrent reconciles.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Changes within this window after the first become one reconcile.
    #[arg(long, default_value = "500ms")]
    coalesce_window: String,
    /// Also watch Helm releases stored by the configmap driver.
    #[arg(long)]
    configmap_driver: bool,
    /// Send the data of releases' ConfigMaps in `configmap_info` (cached
    /// only then). Secret values are never read or sent.
    #[arg(long)]
    report_configmap_data: bool,
}

impl ApiArgs {
    /// The inventory's settings and API configuration; `Err` is the one
    /// line to print before exit 2.
    pub fn validate(self, resync: Duration) -> Result<(Settings, ApiConfig), String> {
        let Some(email_id) = self.email_id.filter(|e| !e.is_empty()) else {
            return Err(
                "missing EMAIL_ID (or --email-id): the owner e-mail copied into every payload"
                    .into(),
            );
        };
        let token = match (
            self.auth_token.filter(|t| !t.is_empty()),
            self.auth_token_file.filter(|f| !f.as_os_str().is_empty()),
        ) {
            (Some(_), Some(_)) => {
                return Err(
                    "both HOSSTED_AUTH_TOKEN and HOSSTED_AUTH_TOKEN_FILE are set: give one".into(),
                );
            }
            (Some(t), None) => Some(Token::Inline(t)),
            (None, Some(f)) => Some(Token::File(f)),
            (None, None) => None,
        };
        let (base_url, token) = match (self.api_url.filter(|u| !u.is_empty()), token) {
            (Some(u), Some(t)) => {
                check_url(&u, self.allow_insecure_http)?;
                (u, t)
            }
            _ if self.dry_run => (String::new(), Token::Inline(String::new())),
            (None, _) => {
                return Err(
                    "missing HOSSTED_API_URL (or --api-url); use --dry-run to print requests instead, or --controllers delivery to run delivery alone"
                        .into(),
                );
            }
            (_, None) => {
                return Err(
                    "missing HOSSTED_AUTH_TOKEN or HOSSTED_AUTH_TOKEN_FILE (or --auth-token, --auth-token-file); use --dry-run to print requests instead"
                        .into(),
                );
            }
        };
        let settings = Settings {
            email_id,
            org_id: self.org_id,
            context_name: self.context_name,
            resync,
            coalesce: super::flag::parse("--coalesce-window", &self.coalesce_window)?,
            configmap_driver: self.configmap_driver,
            report_configmap_data: self.report_configmap_data,
            workers: self.workers.max(1),
        };
        let api = ApiConfig {
            base_url,
            token,
            ca_file: self.ca_file,
            dry_run: self.dry_run,
        };
        Ok((settings, api))
    }
}
