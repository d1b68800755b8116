//! Who a HelmApp's helm runs as, and what it may reference (docs/tenancy.md). Every helm action — install, upgrade, rollback, uninstall,
//! the unlock's storage write, the CRD apply — asks [`Tenancy::identity`]
//! and runs as what it answers; nothing else chooses.
//!
//! The operator's own identity is broad. It is lent only in the
//! *privileged* namespaces (`--privileged-namespaces`, default the
//! operator's own), and only to a HelmApp that names no ServiceAccount.
//! Everywhere else helm impersonates `spec.serviceAccountName` or the
//! namespace's `--default-service-account` (`hossted-deployer`), so the
//! namespace's own RBAC bounds what its HelmApps can do.

use std::collections::BTreeSet;

use apis::helmapp::HelmApp;
use kube::ResourceExt;

/// Which namespaces lend the operator's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Privileged {
    /// `*`: every namespace (a single-tenant cluster).
    All,
    /// These namespaces only.
    Namespaces(BTreeSet<String>),
}

/// The tenancy flags, validated.
#[derive(Debug, Clone)]
pub struct Tenancy {
    /// The operator's namespace (its Hosstedproject HelmApps live there).
    pub operator_namespace: String,
    /// `--privileged-namespaces`.
    pub privileged: Privileged,
    /// `--default-service-account`.
    pub default_service_account: String,
    /// `--allow-cross-namespace-refs`: tenants may name other namespaces.
    pub allow_cross_namespace_refs: bool,
    /// `--no-cross-namespace-refs`: nobody may, privileged namespaces
    /// included (operator-made HelmApps excepted).
    pub no_cross_namespace_refs: bool,
    /// `--privileged-require-verified-charts`: a HelmApp whose helm runs as
    /// the operator must pin its chart (`chart.digest`) or verify it
    /// (`chart.verify`); a chart of the operator's own files
    /// (`chart.path`) excepted.
    pub require_verified_privileged: bool,
}

/// Whom helm runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The operator's own ServiceAccount (privileged namespaces only).
    Operator,
    /// Impersonated: `system:serviceaccount:<namespace>:<name>`.
    ServiceAccount { namespace: String, name: String },
    /// A remote cluster's kubeconfig's own identity, not impersonated
    /// (a HelmApp with `kubeConfig` and no `serviceAccountName`;
    /// docs/remote-clusters.md).
    Kubeconfig,
}

/// Whom a HelmApp with `kubeConfig` runs helm as in its remote cluster
/// (Flux's semantics): its `serviceAccountName` of its own namespace,
/// impersonated there; else the kubeconfig's own identity. The operator's
/// privileges never reach a remote cluster: its credentials are the
/// tenant's.
pub fn remote_identity(app: &HelmApp) -> Identity {
    match app.spec.service_account_name.as_str() {
        "" => Identity::Kubeconfig,
        name => Identity::ServiceAccount {
            namespace: app.namespace().unwrap_or_default(),
            name: name.to_string(),
        },
    }
}

/// The ServiceAccount name when the flag is not given. Not `default`:
/// rights given to `default` would reach every pod of the namespace.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "hossted-deployer";

impl Identity {
    /// The user to impersonate (`--kube-as-user`, `Impersonate-User`);
    /// `None` for the operator itself.
    pub fn user(&self) -> Option<String> {
        match self {
            Identity::Operator | Identity::Kubeconfig => None,
            Identity::ServiceAccount { namespace, name } => {
                Some(format!("system:serviceaccount:{namespace}:{name}"))
            }
        }
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Identity::Operator => f.write_str("the operator"),
            Identity::Kubeconfig => f.write_str("the kubeconfig's identity"),
            Identity::ServiceAccount { namespace, name } => {
                write!(f, "ServiceAccount {namespace}/{name}")
            }
        }
    }
}

impl Tenancy {
    /// Every namespace privileged: the behaviour before tenancy (tests that
    /// are not about tenancy, `--privileged-namespaces='*'`).
    pub fn single_tenant(operator_namespace: &str) -> Self {
        Tenancy {
            operator_namespace: operator_namespace.to_string(),
            privileged: Privileged::All,
            default_service_account: DEFAULT_SERVICE_ACCOUNT.into(),
            allow_cross_namespace_refs: false,
            no_cross_namespace_refs: false,
            require_verified_privileged: false,
        }
    }

    /// Why `app`'s chart may not reach a helm that runs as the operator,
    /// if it may not (`--privileged-require-verified-charts`).
    pub fn unpinned_privileged(&self, app: &HelmApp) -> Option<String> {
        let chart = &app.spec.chart;
        let pinned = chart.verify.is_some() || !chart.digest.is_empty();
        (self.require_verified_privileged
            && self.identity(app) == Identity::Operator
            && chart.path.is_empty()
            && !pinned)
            .then(|| {
                "helm runs as the operator for this HelmApp and the operator requires a pinned or verified chart for such apps (--privileged-require-verified-charts): set chart.digest or chart.verify, or name a serviceAccountName".into()
            })
    }

    /// Whether HelmApps in `namespace` may run helm as the operator.
    pub fn is_privileged(&self, namespace: &str) -> bool {
        match &self.privileged {
            Privileged::All => true,
            Privileged::Namespaces(set) => set.contains(namespace),
        }
    }

    /// Whom `app`'s helm runs as: its `serviceAccountName` if set; else the
    /// operator in a privileged namespace; else the namespace's default
    /// ServiceAccount.
    pub fn identity(&self, app: &HelmApp) -> Identity {
        let namespace = app.namespace().unwrap_or_default();
        let named = &app.spec.service_account_name;
        if named.is_empty() && (self.is_privileged(&namespace) || self.operator_made(app)) {
            return Identity::Operator;
        }
        let name = if named.is_empty() {
            self.default_service_account.clone()
        } else {
            named.clone()
        };
        Identity::ServiceAccount { namespace, name }
    }

    /// Whether `app` is made by a Hosstedproject: only its place (the
    /// operator's namespace) and its label together say so.
    pub fn operator_made(&self, app: &HelmApp) -> bool {
        app.namespace().as_deref() == Some(self.operator_namespace.as_str())
            && app
                .labels()
                .contains_key(crate::delivery::names::PROJECT_LABEL)
    }

    /// Why `app` may not name `namespace` (its `targetNamespace` or a
    /// `dependsOn`), if it may not. Its own namespace is always allowed.
    pub fn refuses_reference(&self, app: &HelmApp, namespace: &str) -> Option<&'static str> {
        let own = app.namespace().unwrap_or_default();
        if namespace == own || self.operator_made(app) {
            return None;
        }
        if self.no_cross_namespace_refs {
            return Some("--no-cross-namespace-refs refuses another namespace");
        }
        if self.allow_cross_namespace_refs || self.is_privileged(&own) {
            return None;
        }
        Some(
            "a HelmApp outside the privileged namespaces (--privileged-namespaces) may not name another namespace",
        )
    }
}

/// Makes `request` run as `as_user` (the `Impersonate-User` header), for
/// the writes the operator makes itself on a HelmApp's behalf. `Err` names
/// a user that cannot be a header value.
pub fn impersonate<B>(request: &mut http::Request<B>, as_user: Option<&str>) -> Result<(), String> {
    if let Some(user) = as_user {
        let value = http::HeaderValue::from_str(user).map_err(|e| format!("{user:?}: {e}"))?;
        request.headers_mut().insert("Impersonate-User", value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(ns: &str, sa: &str) -> HelmApp {
        let mut a = HelmApp::new("web", Default::default());
        a.metadata.namespace = Some(ns.into());
        a.spec.service_account_name = sa.into();
        a
    }

    fn tenancy(privileged: &[&str]) -> Tenancy {
        Tenancy {
            privileged: Privileged::Namespaces(privileged.iter().map(|s| s.to_string()).collect()),
            ..Tenancy::single_tenant("hossted-operator")
        }
    }

    #[test]
    fn a_privileged_app_needs_a_pinned_or_verified_chart_only_when_the_operator_says_so() {
        let mut from_repo = app("hossted-operator", "");
        from_repo.spec.chart.repo = "https://charts.example.com".into();
        from_repo.spec.chart.name = "web".into();
        let off = tenancy(&["hossted-operator"]);
        assert_eq!(off.unpinned_privileged(&from_repo), None, "off by default");
        let on = Tenancy {
            require_verified_privileged: true,
            ..off
        };
        assert!(on.unpinned_privileged(&from_repo).is_some());
        let mut pinned = from_repo.clone();
        pinned.spec.chart.digest = "sha256:00".into();
        assert_eq!(on.unpinned_privileged(&pinned), None);
        let mut verified = from_repo.clone();
        verified.spec.chart.verify = Some(Default::default());
        assert_eq!(on.unpinned_privileged(&verified), None);
        // A tenant's helm is bounded by its own rights: not asked.
        let mut tenant = from_repo.clone();
        tenant.metadata.namespace = Some("team-a".into());
        assert_eq!(on.unpinned_privileged(&tenant), None);
        // Naming a ServiceAccount in a privileged namespace: not the operator.
        let mut named = from_repo.clone();
        named.spec.service_account_name = "ci".into();
        assert_eq!(on.unpinned_privileged(&named), None);
        // The operator's own files.
        let mut local = app("hossted-operator", "");
        local.spec.chart.path = "web".into();
        assert_eq!(on.unpinned_privileged(&local), None);
    }

    #[test]
    fn helm_runs_as_the_operator_only_in_a_privileged_namespace_without_a_service_account() {
        let t = tenancy(&["hossted-operator"]);
        assert_eq!(t.identity(&app("hossted-operator", "")), Identity::Operator);
        let sa = |ns: &str, name: &str| Identity::ServiceAccount {
            namespace: ns.into(),
            name: name.into(),
        };
        assert_eq!(
            t.identity(&app("team-a", "")),
            sa("team-a", "hossted-deployer")
        );
        assert_eq!(t.identity(&app("team-a", "ci")), sa("team-a", "ci"));
        assert_eq!(
            t.identity(&app("hossted-operator", "ci")),
            sa("hossted-operator", "ci")
        );
        assert_eq!(
            sa("team-a", "ci").user().as_deref(),
            Some("system:serviceaccount:team-a:ci")
        );
        let all = Tenancy::single_tenant("hossted-operator");
        assert_eq!(all.identity(&app("team-a", "")), Identity::Operator);
    }

    #[test]
    fn another_namespace_is_refused_outside_the_privileged_ones_unless_allowed() {
        let t = tenancy(&["hossted-operator"]);
        assert!(t.refuses_reference(&app("team-a", ""), "team-a").is_none());
        assert!(
            t.refuses_reference(&app("team-a", ""), "kube-system")
                .is_some()
        );
        assert!(
            t.refuses_reference(&app("hossted-operator", ""), "apps")
                .is_none()
        );
        let allowed = Tenancy {
            allow_cross_namespace_refs: true,
            ..t.clone()
        };
        assert!(
            allowed
                .refuses_reference(&app("team-a", ""), "team-b")
                .is_none()
        );
        let strict = Tenancy {
            no_cross_namespace_refs: true,
            ..t.clone()
        };
        assert!(
            strict
                .refuses_reference(&app("hossted-operator", ""), "apps")
                .is_some()
        );
        // An operator-made app: its place and its label together.
        let mut made = app("hossted-operator", "");
        made.labels_mut()
            .insert(crate::delivery::names::PROJECT_LABEL.into(), "p".into());
        assert!(strict.refuses_reference(&made, "apps").is_none());
        let mut elsewhere = app("team-a", "");
        elsewhere
            .labels_mut()
            .insert(crate::delivery::names::PROJECT_LABEL.into(), "p".into());
        assert!(
            t.refuses_reference(&elsewhere, "apps").is_some(),
            "the label alone grants nothing"
        );
    }
}
