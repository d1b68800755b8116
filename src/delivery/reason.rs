//! The one [`Reason`] enum of every delivery controller (conditions and
//! Events). A leaf: every controller names its reasons from here.

/// Every reason delivery puts on a condition or an Event (docs/delivery.md
/// names each). The string is the variant's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    // HelmApp: refused or waiting (no helm run).
    Suspended,
    CrossNamespaceRef,
    DependencyCycle,
    DependencyNotFound,
    DependencyNotReady,
    ChartUnavailable,
    ChartInvalid,
    ChartSourceRefused,
    VerificationFailed,
    SourceUnavailable,
    DecryptionFailed,
    OutsideChangeWindow,
    InvalidChangeWindow,
    ForcedOutsideChangeWindow,
    InvalidExpression,
    InvalidDriftIgnore,
    ExpressionCostExceeded,
    ValuesInvalid,
    PostRendererInvalid,
    ReleaseLocked,
    ReleaseOwnedByOther,
    ReleaseNotOwned,
    RetriesExhausted,
    MissingRollbackTarget,
    StorageTampered,
    InvalidRelease,
    AdoptionRefused,
    InvalidValues,
    // HelmApp: what a run did.
    Forbidden,
    TimeoutClamped,
    InstallSucceeded,
    UpgradeSucceeded,
    InstallFailed,
    UpgradeFailed,
    CRDsFailed,
    DriftRepaired,
    DriftDetected,
    NoDrift,
    ReleaseUnlocked,
    RollbackPerformed,
    UninstallPerformed,
    UninstallSucceeded,
    UninstallFailed,
    PostRendererListReplaced,
    TestSucceeded,
    TestFailed,
    UpdateAvailable,
    // HelmApp: approval (`spec.approval: manual`).
    AwaitingApproval,
    ApprovalStale,
    Approved,
    PreviewFailed,
    // HelmApp: readiness.
    UpToDate,
    Progressing,
    ReadinessTimeout,
    ReadinessFailed,
    // HelmAppSet.
    AppsReady,
    InvalidName,
    NameTaken,
    AppRemoved,
    Uninstalling,
    // Hosstedproject delivery.
    DeliveryCreated,
    DeliveryRemoved,
    InvalidHelmEntry,
    PlatformChartsInvalid,
    DeliveryDisabled,
}

impl Reason {
    /// Every reason (docs/delivery.md documents each).
    pub const ALL: [Reason; 65] = [
        Reason::Suspended,
        Reason::CrossNamespaceRef,
        Reason::DependencyCycle,
        Reason::DependencyNotFound,
        Reason::DependencyNotReady,
        Reason::ChartUnavailable,
        Reason::ChartInvalid,
        Reason::ChartSourceRefused,
        Reason::VerificationFailed,
        Reason::SourceUnavailable,
        Reason::DecryptionFailed,
        Reason::OutsideChangeWindow,
        Reason::InvalidChangeWindow,
        Reason::InvalidExpression,
        Reason::InvalidDriftIgnore,
        Reason::ExpressionCostExceeded,
        Reason::ForcedOutsideChangeWindow,
        Reason::ValuesInvalid,
        Reason::PostRendererInvalid,
        Reason::ReleaseLocked,
        Reason::ReleaseOwnedByOther,
        Reason::ReleaseNotOwned,
        Reason::RetriesExhausted,
        Reason::MissingRollbackTarget,
        Reason::StorageTampered,
        Reason::InvalidRelease,
        Reason::AdoptionRefused,
        Reason::InvalidValues,
        Reason::Forbidden,
        Reason::TimeoutClamped,
        Reason::InstallSucceeded,
        Reason::UpgradeSucceeded,
        Reason::InstallFailed,
        Reason::UpgradeFailed,
        Reason::CRDsFailed,
        Reason::DriftRepaired,
        Reason::DriftDetected,
        Reason::NoDrift,
        Reason::ReleaseUnlocked,
        Reason::RollbackPerformed,
        Reason::UninstallPerformed,
        Reason::UninstallSucceeded,
        Reason::UninstallFailed,
        Reason::PostRendererListReplaced,
        Reason::TestSucceeded,
        Reason::TestFailed,
        Reason::UpdateAvailable,
        Reason::AwaitingApproval,
        Reason::ApprovalStale,
        Reason::Approved,
        Reason::PreviewFailed,
        Reason::UpToDate,
        Reason::Progressing,
        Reason::ReadinessTimeout,
        Reason::ReadinessFailed,
        Reason::AppsReady,
        Reason::InvalidName,
        Reason::NameTaken,
        Reason::AppRemoved,
        Reason::Uninstalling,
        Reason::DeliveryCreated,
        Reason::DeliveryRemoved,
        Reason::InvalidHelmEntry,
        Reason::PlatformChartsInvalid,
        Reason::DeliveryDisabled,
    ];

    pub fn as_str(self) -> &'static str {
        use Reason::*;
        match self {
            Suspended => "Suspended",
            CrossNamespaceRef => "CrossNamespaceRef",
            DependencyCycle => "DependencyCycle",
            DependencyNotFound => "DependencyNotFound",
            DependencyNotReady => "DependencyNotReady",
            ChartUnavailable => "ChartUnavailable",
            ChartInvalid => "ChartInvalid",
            ChartSourceRefused => "ChartSourceRefused",
            VerificationFailed => "VerificationFailed",
            SourceUnavailable => "SourceUnavailable",
            DecryptionFailed => "DecryptionFailed",
            OutsideChangeWindow => "OutsideChangeWindow",
            InvalidChangeWindow => "InvalidChangeWindow",
            InvalidExpression => "InvalidExpression",
            InvalidDriftIgnore => "InvalidDriftIgnore",
            ExpressionCostExceeded => "ExpressionCostExceeded",
            ForcedOutsideChangeWindow => "ForcedOutsideChangeWindow",
            ValuesInvalid => "ValuesInvalid",
            PostRendererInvalid => "PostRendererInvalid",
            PostRendererListReplaced => "PostRendererListReplaced",
            TestSucceeded => "TestSucceeded",
            TestFailed => "TestFailed",
            UpdateAvailable => "UpdateAvailable",
            AwaitingApproval => "AwaitingApproval",
            ApprovalStale => "ApprovalStale",
            Approved => "Approved",
            PreviewFailed => "PreviewFailed",
            ReleaseLocked => "ReleaseLocked",
            ReleaseOwnedByOther => "ReleaseOwnedByOther",
            ReleaseNotOwned => "ReleaseNotOwned",
            RetriesExhausted => "RetriesExhausted",
            MissingRollbackTarget => "MissingRollbackTarget",
            StorageTampered => "StorageTampered",
            InvalidRelease => "InvalidRelease",
            AdoptionRefused => "AdoptionRefused",
            InvalidValues => "InvalidValues",
            Forbidden => "Forbidden",
            TimeoutClamped => "TimeoutClamped",
            InstallSucceeded => "InstallSucceeded",
            UpgradeSucceeded => "UpgradeSucceeded",
            InstallFailed => "InstallFailed",
            UpgradeFailed => "UpgradeFailed",
            CRDsFailed => "CRDsFailed",
            DriftRepaired => "DriftRepaired",
            DriftDetected => "DriftDetected",
            NoDrift => "NoDrift",
            ReleaseUnlocked => "ReleaseUnlocked",
            RollbackPerformed => "RollbackPerformed",
            UninstallPerformed => "UninstallPerformed",
            UninstallSucceeded => "UninstallSucceeded",
            UninstallFailed => "UninstallFailed",
            UpToDate => "UpToDate",
            Progressing => "Progressing",
            ReadinessTimeout => "ReadinessTimeout",
            ReadinessFailed => "ReadinessFailed",
            AppsReady => "AppsReady",
            InvalidName => "InvalidName",
            NameTaken => "NameTaken",
            AppRemoved => "AppRemoved",
            Uninstalling => "Uninstalling",
            DeliveryCreated => "DeliveryCreated",
            DeliveryRemoved => "DeliveryRemoved",
            InvalidHelmEntry => "InvalidHelmEntry",
            PlatformChartsInvalid => "PlatformChartsInvalid",
            DeliveryDisabled => "DeliveryDisabled",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_named_in_docs_delivery() {
        let readme = include_str!("../../docs/delivery.md");
        for reason in Reason::ALL {
            let named = format!("`{reason}`");
            assert!(
                readme.contains(&named),
                "docs/delivery.md does not name {named}"
            );
        }
    }
}
