//! Values every group of flags parses the same way, each error naming its
//! flag.

use std::net::SocketAddr;
use std::time::Duration;

use crate::duration;

/// A duration flag (Go syntax: `10m`, `30s`), named in the error.
pub(super) fn parse(name: &str, value: &str) -> Result<Duration, String> {
    duration::parse(value).map_err(|e| format!("{name}: {e}"))
}

/// An address flag: `"0"` disables; anything else must be `host:port`.
pub(super) fn address(flag: &str, value: &str) -> Result<Option<SocketAddr>, String> {
    if value == "0" {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .map_err(|e| format!("{flag}: {value:?} is not an address like 0.0.0.0:8080 ({e})"))
}
