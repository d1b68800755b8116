//! Go's `time.ParseDuration` syntax, as `RECONCILE_DURATION` uses it:
//! `10m`, `30s`, `1h30m`, `1.5h`, `250ms`.

use std::time::Duration;

/// An age the way kubectl prints one: `45s`, `12m`, `5h`, `3d`.
pub fn short(secs: i64) -> String {
    match secs.max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// A duration the way Go prints one: `5m0s`, `2m30s`, `1h0m0s`,
/// `1.5s`, `500ms` — how `spec.timeout` is written.
pub fn go(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    let secs = d.as_secs();
    let (h, m) = (secs / 3600, secs / 60 % 60);
    // Seconds with the fraction Go keeps (to the millisecond here).
    let millis = d.subsec_millis();
    let s = match millis {
        0 => format!("{}", secs % 60),
        _ => format!("{}.{millis:03}", secs % 60)
            .trim_end_matches('0')
            .to_string(),
    };
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

/// Parses a Go duration; a bare `0` is zero. Negative durations are refused.
pub fn parse(s: &str) -> Result<Duration, String> {
    let err = || format!("invalid duration {s:?}: use Go syntax such as 10m, 30s or 1h30m");
    let mut rest = s.trim();
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() || rest.starts_with('-') {
        return Err(err());
    }
    rest = rest.strip_prefix('+').unwrap_or(rest);
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let value: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err()),
        };
        total += value * seconds;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| err())
}

#[cfg(test)]
mod tests {
    use super::parse;
    use std::time::Duration;

    #[test]
    fn printed_as_go_prints_it_and_parsed_back() {
        for (millis, printed) in [
            (0, "0s"),
            (500, "500ms"),
            (1_500, "1.5s"),
            (45_000, "45s"),
            (90_500, "1m30.5s"),
            (150_000, "2m30s"),
            (300_000, "5m0s"),
            (3_601_000, "1h0m1s"),
        ] {
            let d = Duration::from_millis(millis);
            assert_eq!(super::go(d), printed);
            assert_eq!(parse(printed), Ok(d));
        }
    }

    #[test]
    fn go_duration_syntax() {
        assert_eq!(parse("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("2m3.5s"), Ok(Duration::from_millis(123_500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        for bad in ["", "10", "m", "10x", "-5m", "1h-5m", "5 m"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
