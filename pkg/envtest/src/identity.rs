//! Identities in the test cluster: a user by client certificate, a
//! ServiceAccount by token — each as a kubeconfig file or a client, with
//! no permissions until RBAC grants some.

use std::path::PathBuf;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use crate::kubeconfig::{self, Credentials};
use crate::util::{file_safe, ignore_conflict};
use crate::{ControlPlane, Error};

impl ControlPlane {
    /// A kubeconfig file for user `user` (optionally in `group`),
    /// authenticated by a client certificate signed by the cluster CA.
    /// The user has no permissions until RBAC grants some.
    pub fn kubeconfig_for_user(&self, user: &str, group: Option<&str>) -> Result<PathBuf, Error> {
        let pair = self.ca.client_cert(user, group)?;
        let yaml = kubeconfig::render(
            &self.server,
            &self.ca.cert_pem(),
            user,
            Credentials::ClientCert {
                cert_pem: &pair.cert,
                key_pem: &pair.key,
            },
        );
        let path = self
            .dir
            .path()
            .join(format!("user-{}.kubeconfig", file_safe(user)));
        std::fs::write(&path, yaml)?;
        Ok(path)
    }

    /// A client acting as user `user` (see [`Self::kubeconfig_for_user`]).
    pub async fn client_for_user(
        &self,
        user: &str,
        group: Option<&str>,
    ) -> Result<kube::Client, Error> {
        let path = self.kubeconfig_for_user(user, group)?;
        kubeconfig::client_from(&std::fs::read_to_string(path)?).await
    }

    /// A kubeconfig file for ServiceAccount `namespace/name`, with a bound
    /// token from the TokenRequest API (valid 24 h). Creates the namespace
    /// and the ServiceAccount when they do not exist.
    pub async fn kubeconfig_for_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<PathBuf, Error> {
        let pp = PostParams::default();
        let namespaces: Api<Namespace> = Api::all(self.client());
        if namespaces.get_opt(namespace).await?.is_none() {
            let ns = Namespace {
                metadata: ObjectMeta {
                    name: Some(namespace.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            ignore_conflict(namespaces.create(&pp, &ns).await)?;
        }
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client(), namespace);
        if accounts.get_opt(name).await?.is_none() {
            let sa = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(name.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            ignore_conflict(accounts.create(&pp, &sa).await)?;
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(24 * 3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let token = accounts
            .create_token_request(name, &pp, &request)
            .await?
            .status
            .map(|s| s.token)
            .ok_or_else(|| {
                Error::Kubeconfig(format!(
                    "TokenRequest for {namespace}/{name} returned no token"
                ))
            })?;
        let user = format!("system:serviceaccount:{namespace}:{name}");
        let yaml = kubeconfig::render(
            &self.server,
            &self.ca.cert_pem(),
            &user,
            Credentials::Token(&token),
        );
        let path = self.dir.path().join(format!(
            "sa-{}-{}.kubeconfig",
            file_safe(namespace),
            file_safe(name)
        ));
        std::fs::write(&path, yaml)?;
        Ok(path)
    }

    /// A client acting as ServiceAccount `namespace/name`
    /// (see [`Self::kubeconfig_for_service_account`]).
    pub async fn client_for_service_account(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<kube::Client, Error> {
        let path = self.kubeconfig_for_service_account(namespace, name).await?;
        kubeconfig::client_from(&std::fs::read_to_string(path)?).await
    }
}
