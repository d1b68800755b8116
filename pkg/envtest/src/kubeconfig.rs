//! Kubeconfig files and `kube::Client`s for the identities a test needs.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::Error;

/// How a kubeconfig user authenticates.
pub(crate) enum Credentials<'a> {
    Token(&'a str),
    ClientCert { cert_pem: &'a str, key_pem: &'a str },
}

/// Renders a single-context kubeconfig for `server` trusting `ca_pem`.
pub(crate) fn render(server: &str, ca_pem: &str, user: &str, creds: Credentials<'_>) -> String {
    let user_fields = match creds {
        Credentials::Token(t) => format!("    token: {t}\n"),
        Credentials::ClientCert { cert_pem, key_pem } => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            STANDARD.encode(cert_pem),
            STANDARD.encode(key_pem)
        ),
    };
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters:\n- name: envtest\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         users:\n- name: {user}\n  user:\n{user_fields}\
         contexts:\n- name: envtest\n  context:\n    cluster: envtest\n    user: {user}\n    namespace: default\n\
         current-context: envtest\n",
        ca = STANDARD.encode(ca_pem),
    )
}

/// A client for the kubeconfig text `yaml`.
pub(crate) async fn client_from(yaml: &str) -> Result<kube::Client, Error> {
    let kubeconfig = Kubeconfig::from_yaml(yaml)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    Ok(kube::Client::try_from(config)?)
}
