//! How the inventory runs (validated from flags by `crate::cli`).

use std::time::Duration;

/// What the inventory needs besides the cluster and the API.
#[derive(Debug, Clone)]
pub struct Settings {
    pub email_id: String,
    pub org_id: String,
    pub context_name: String,
    /// Safety resync period (`RECONCILE_DURATION`).
    pub resync: Duration,
    /// Events within this window after the first one become one reconcile.
    pub coalesce: Duration,
    /// Also watch Helm's configmap storage driver.
    pub configmap_driver: bool,
    /// Cache and send the data of releases' ConfigMaps.
    pub report_configmap_data: bool,
    /// Concurrent reconciles.
    pub workers: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            email_id: String::new(),
            org_id: String::new(),
            context_name: String::new(),
            resync: runtime::DEFAULT_RESYNC,
            coalesce: Duration::from_millis(500),
            configmap_driver: false,
            report_configmap_data: false,
            workers: 2,
        }
    }
}
