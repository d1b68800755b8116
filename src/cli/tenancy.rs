//! Tenancy flags: who a HelmApp's helm runs as, and which namespaces it
//! may name (docs/tenancy.md).

use clap::Args;

use crate::delivery::tenancy::{DEFAULT_SERVICE_ACCOUNT, Privileged, Tenancy};

#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Tenancy (--controllers delivery)")]
pub struct TenancyArgs {
    /// Namespaces whose HelmApps without serviceAccountName run helm as the
    /// operator (comma list; default: --operator-namespace). `*` makes every
    /// namespace privileged: any user who can create a HelmApp then gets the
    /// operator's cluster-wide rights.
    #[arg(long, value_delimiter = ',')]
    privileged_namespaces: Option<Vec<String>>,
    /// The ServiceAccount of a HelmApp's namespace that helm impersonates
    /// outside the privileged namespaces when the HelmApp names none.
    #[arg(long, default_value = DEFAULT_SERVICE_ACCOUNT)]
    default_service_account: String,
    /// Let HelmApps outside the privileged namespaces name another namespace
    /// (targetNamespace, dependsOn).
    #[arg(long, conflicts_with = "no_cross_namespace_refs")]
    allow_cross_namespace_refs: bool,
    /// Refuse targetNamespace and dependsOn of another namespace everywhere,
    /// privileged namespaces included (HelmApps made from a Hosstedproject
    /// excepted).
    #[arg(long)]
    no_cross_namespace_refs: bool,
    /// Refuse a chart that is neither pinned (chart.digest) nor verified
    /// (chart.verify) when helm runs as the operator (privileged namespaces,
    /// Hosstedproject apps); charts from --chart-path-root excepted. Off by
    /// default: a marketplace's apps often follow a public repository
    /// unpinned, and would stop.
    #[arg(long)]
    privileged_require_verified_charts: bool,
}

impl TenancyArgs {
    /// The tenancy settings; `Err` is the one line to print before exit 2.
    pub fn validate(self, operator_namespace: &str) -> Result<Tenancy, String> {
        let listed: Vec<String> = self
            .privileged_namespaces
            .unwrap_or_else(|| vec![operator_namespace.to_string()])
            .into_iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        let privileged = if listed.iter().any(|n| n == "*") {
            Privileged::All
        } else {
            Privileged::Namespaces(listed.into_iter().collect())
        };
        if self.default_service_account.is_empty() {
            return Err("--default-service-account is empty: name a ServiceAccount (the default is hossted-deployer)".into());
        }
        Ok(Tenancy {
            operator_namespace: operator_namespace.to_string(),
            privileged,
            default_service_account: self.default_service_account,
            allow_cross_namespace_refs: self.allow_cross_namespace_refs,
            no_cross_namespace_refs: self.no_cross_namespace_refs,
            require_verified_privileged: self.privileged_require_verified_charts,
        })
    }
}
