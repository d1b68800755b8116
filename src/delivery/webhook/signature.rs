//! The webhook's signature: `X-Hossted-Signature: sha256=<hex>` is
//! HMAC-SHA256, under the shared key, of `<timestamp>.<body>`, where
//! `X-Hossted-Timestamp` is Unix seconds within [`WINDOW`] of now. The
//! comparison is constant-time (`hmac`'s `verify_slice`); a refusal says
//! nothing of why to the caller (the log does).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How far a timestamp may be from now, either way.
pub const WINDOW: i64 = 300;

/// The header with the Unix seconds the sender signed.
pub const TIMESTAMP_HEADER: &str = "x-hossted-timestamp";
/// The header with `sha256=<hex>`.
pub const SIGNATURE_HEADER: &str = "x-hossted-signature";
/// The header naming the namespace whose key signed (none: the shared key).
pub const NAMESPACE_HEADER: &str = "x-hossted-namespace";

/// Why a request is not taken as signed (for the log only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsigned {
    Missing,
    Malformed,
    Stale,
    Wrong,
}

/// Checks `signature` of `timestamp` and `body` under `key` at `now`
/// (Unix seconds).
pub fn verify(
    key: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), Unsigned> {
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return Err(Unsigned::Missing);
    };
    let at: i64 = timestamp.trim().parse().map_err(|_| Unsigned::Malformed)?;
    if (now - at).abs() > WINDOW {
        return Err(Unsigned::Stale);
    }
    let hex = signature
        .trim()
        .strip_prefix("sha256=")
        .ok_or(Unsigned::Malformed)?;
    let given = decode_hex(hex).ok_or(Unsigned::Malformed)?;
    mac(key, timestamp.trim(), body)
        .ok_or(Unsigned::Wrong)?
        .verify_slice(&given)
        .map_err(|_| Unsigned::Wrong)
}

/// `sha256=<hex>` of `timestamp` and `body` under `key`: what a sender
/// puts in [`SIGNATURE_HEADER`].
pub fn sign(key: &[u8], timestamp: &str, body: &[u8]) -> String {
    let sum = mac(key, timestamp, body).map(|m| m.finalize().into_bytes());
    format!("sha256={}", crate::lean::hex::hex(&sum.unwrap_or_default()))
}

/// The MAC of `<timestamp>.<body>` (`None` never happens: HMAC takes a key
/// of any length).
fn mac(key: &[u8], timestamp: &str, body: &[u8]) -> Option<Hmac<Sha256>> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).ok()?;
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(mac)
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"shared-key";
    const NOW: i64 = 1_800_000_000;

    #[test]
    fn a_signed_request_within_the_window_passes_and_nothing_else_does() {
        let body = br#"{"repo":"https://charts.example.com","name":"web"}"#;
        let ts = NOW.to_string();
        let good = sign(KEY, &ts, body);
        let check =
            |ts: Option<&str>, sig: Option<&str>, body: &[u8], now| verify(KEY, ts, sig, body, now);
        assert_eq!(check(Some(&ts), Some(&good), body, NOW), Ok(()));
        assert_eq!(check(Some(&ts), Some(&good), body, NOW + WINDOW), Ok(()));
        assert_eq!(check(None, Some(&good), body, NOW), Err(Unsigned::Missing));
        assert_eq!(check(Some(&ts), None, body, NOW), Err(Unsigned::Missing));
        assert_eq!(
            check(Some(&ts), Some(&good), body, NOW + WINDOW + 1),
            Err(Unsigned::Stale)
        );
        assert_eq!(
            check(Some(&ts), Some(&good), b"{}", NOW),
            Err(Unsigned::Wrong),
            "another body"
        );
        let other = (NOW + 1).to_string();
        assert_eq!(
            check(Some(&other), Some(&good), body, NOW),
            Err(Unsigned::Wrong),
            "another timestamp"
        );
        let under_other_key = sign(b"other", &ts, body);
        assert_eq!(
            check(Some(&ts), Some(&under_other_key), body, NOW),
            Err(Unsigned::Wrong)
        );
        for bad in ["sha1=00", "sha256=zz", "sha256=abc", &good[7..]] {
            assert_eq!(
                check(Some(&ts), Some(bad), body, NOW),
                Err(Unsigned::Malformed),
                "{bad}"
            );
        }
        assert_eq!(
            check(Some("soon"), Some(&good), body, NOW),
            Err(Unsigned::Malformed)
        );
    }
}
