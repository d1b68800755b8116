//! The certificates and keys a control plane needs, generated in-process:
//! a CA, the apiserver's serving certificate, client certificates signed by
//! the CA (for `client_for_user`), and the service-account signing key.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::Error;

/// A certificate or key pair in PEM.
pub(crate) struct PemPair {
    pub cert: String,
    pub key: String,
}

/// The cluster CA; signs serving and client certificates.
pub(crate) struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Ca {
    pub fn generate() -> Result<Self, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "hossted-envtest-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(Ca { issuer })
    }

    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// A serving certificate for the apiserver on loopback.
    pub fn serving_cert(&self) -> Result<PemPair, Error> {
        let mut params = CertificateParams::new(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
        ])?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate: the apiserver maps CN to the user name and O to
    /// a group.
    pub fn client_cert(&self, user: &str, group: Option<&str>) -> Result<PemPair, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        if let Some(group) = group {
            params
                .distinguished_name
                .push(DnType::OrganizationName, group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Result<PemPair, Error> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(PemPair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}

/// The key pair that signs service-account tokens (ECDSA P-256, ES256).
pub(crate) fn service_account_key() -> Result<PemPair, Error> {
    let key = KeyPair::generate()?;
    Ok(PemPair {
        cert: key.public_key_pem(),
        key: key.serialize_pem(),
    })
}
