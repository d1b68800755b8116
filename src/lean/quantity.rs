//! Kubernetes resource quantities (`8Gi`, `500M`, `1.5Ti`, `1e9`) as bytes,
//! for `volume_info.size`.

/// The number of bytes `q` stands for, rounded up to a whole byte (as the
/// apiserver does), or `None` when `q` is not a valid quantity or does not
/// fit an `i64`.
///
/// ```
/// use hossted_operator::lean::quantity::bytes;
/// assert_eq!(bytes("8Gi"), Some(8 * 1024 * 1024 * 1024));
/// assert_eq!(bytes("1.5k"), Some(1500));
/// assert_eq!(bytes("lots"), None);
/// ```
pub fn bytes(q: &str) -> Option<i64> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    if number.is_empty() || number.starts_with('-') {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    let multiplier: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let b = (value * multiplier).ceil();
    (b.is_finite() && b >= 0.0 && b <= i64::MAX as f64).then_some(b as i64)
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn binary_decimal_and_exponent_suffixes() {
        assert_eq!(bytes("8Gi"), Some(8_589_934_592));
        assert_eq!(bytes("500Mi"), Some(524_288_000));
        assert_eq!(bytes("1Ki"), Some(1024));
        assert_eq!(bytes("1.5Gi"), Some(1_610_612_736));
        assert_eq!(bytes("10G"), Some(10_000_000_000));
        assert_eq!(bytes("100"), Some(100));
        assert_eq!(bytes("1e3"), Some(1000));
        assert_eq!(bytes("2E6"), Some(2_000_000));
        assert_eq!(bytes("1500m"), Some(2), "fractions round up");
        assert_eq!(bytes(" 1Ti "), Some(1_099_511_627_776));
    }

    #[test]
    fn invalid_or_out_of_range_is_none() {
        for bad in [
            "",
            "Gi",
            "abc",
            "8GiB",
            "-1Gi",
            "1.2.3",
            "9999999Ei",
            "1e999",
        ] {
            assert_eq!(bytes(bad), None, "{bad:?}");
        }
    }
}
