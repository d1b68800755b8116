//! TLS trust for the operator's own HTTPS clients (the Hossted API, chart
//! repositories): the system's roots plus a CA bundle the user gives.

/// Where distributions keep the system's CA bundle (`SSL_CERT_FILE` first).
const SYSTEM_BUNDLES: [&str; 2] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// A TLS configuration trusting the system's roots and the certificates of
/// `extra_pem`. `Err` says why the bundle cannot be used, as the end of a
/// sentence that names it ("is not a PEM bundle: ...").
pub fn with_extra_ca(extra_pem: &[u8]) -> Result<ureq::tls::TlsConfig, String> {
    let mut certs = parse_certs(extra_pem).map_err(|e| format!("is not a PEM bundle: {e}"))?;
    if certs.is_empty() {
        return Err("holds no certificate".into());
    }
    let system = std::env::var("SSL_CERT_FILE")
        .ok()
        .into_iter()
        .chain(SYSTEM_BUNDLES.iter().map(|s| s.to_string()))
        .find_map(|p| std::fs::read(p).ok());
    certs.extend(
        system
            .and_then(|pem| parse_certs(&pem).ok())
            .unwrap_or_default(),
    );
    Ok(ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
        .build())
}

fn parse_certs(pem: &[u8]) -> Result<Vec<ureq::tls::Certificate<'static>>, String> {
    ureq::tls::parse_pem(pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c.to_owned())),
            Ok(_) => None,
            Err(e) => Some(Err(e.to_string())),
        })
        .collect()
}
