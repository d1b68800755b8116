//! The arguments the subcommands share: which namespaces, which HelmApp.

use std::time::Duration;

use clap::Args;

/// Which namespaces.
#[derive(Debug, Args)]
pub struct Where {
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// This namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    pub namespace: Option<String>,
}

/// One HelmApp.
#[derive(Debug, Args)]
pub struct Target {
    /// The HelmApp's namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// The HelmApp.
    pub name: String,
    /// Wait until the operator has acted on it, printing progress.
    #[arg(long)]
    pub wait: bool,
    /// How long --wait waits.
    #[arg(long, default_value = "5m", value_parser = crate::duration::parse)]
    pub timeout: Duration,
}

/// The namespace asked for, else the kubeconfig context's.
pub(crate) fn namespace_of(client: &kube::Client, asked: Option<&String>) -> String {
    asked
        .cloned()
        .unwrap_or_else(|| client.default_namespace().to_string())
}
