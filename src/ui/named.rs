//! The names an action of the served view leaves behind (docs/ui.md
//! "Actions with a name on them"): the Event reasons, and the annotations
//! that say who acted and what they approved.

/// The annotation of a `…By` Event of the served view naming the user who
/// acted.
pub const EVENT_USER: &str = "hossted.com/user";
/// The annotation of an `ApprovedBy` Event naming the configuration hash
/// approved.
pub const EVENT_CONFIG_HASH: &str = "hossted.com/config-hash";
/// The annotation naming who suspended a HelmApp in the served view.
pub const SUSPENDED_BY: &str = "hossted.com/suspended-by";

/// The Event reason of `action` done by a named user.
pub fn reason_of(action: &str) -> &'static str {
    match action {
        "approve" => "ApprovedBy",
        "suspend" => "SuspendedBy",
        "resume" => "ResumedBy",
        "force" => "ForceRequestedBy",
        _ => "ReconcileRequestedBy",
    }
}
