//! Lower-case hexadecimal, the one spelling of every digest the operator
//! writes (status, cache file names, made names).

/// `bytes` as lower-case hex, two characters a byte.
///
/// ```
/// assert_eq!(hossted_operator::lean::hex::hex(&[0, 0xab, 0x7f]), "00ab7f");
/// ```
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}
