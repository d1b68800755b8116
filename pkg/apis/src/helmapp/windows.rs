//! When helm may change the release (docs/change-windows.md).

use super::*;

/// When changes may run: every time is allowed when `allow` is empty; a
/// `deny` window wins over an `allow` one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangeWindows {
    /// The IANA time zone the schedules are read in (default `UTC`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time_zone: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub allow: Vec<ChangeWindow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub deny: Vec<ChangeWindow>,
    /// Drift is repaired outside the windows too.
    #[serde(default)]
    pub repair_anytime: bool,
}

/// A window: opens at each time `schedule` names, for `duration`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ChangeWindow {
    /// A cron expression: five fields (minute hour day month weekday), or
    /// six with seconds first.
    #[schemars(length(max = 128))]
    pub schedule: String,
    /// How long each opening lasts (Go syntax: `2h`, `30m`; at most `744h`).
    #[schemars(length(max = 32))]
    pub duration: String,
}
