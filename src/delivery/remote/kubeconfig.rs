//! A remote cluster's kubeconfig, read from the Secret a HelmApp names in
//! `spec.kubeConfig.secretRef` (docs/remote-clusters.md), and reduced to
//! the one shape the operator accepts: one cluster, one user, inline
//! credentials.
//!
//! A tenant writes that Secret and the operator acts on it from its own
//! pod, so the kubeconfig is hostile input. Everything that would make the
//! operator run a program, read one of its own files, send the credentials
//! through another host or act as someone else is refused by name, with
//! what to do instead:
//!
//! - `exec`, `auth-provider`: a plugin would run a program, or reach a
//!   provider, from inside the operator's pod;
//! - `tokenFile`, `client-certificate`, `client-key`,
//!   `certificate-authority`: paths, which would read the operator's own
//!   files (its ServiceAccount token, say) — the `…-data` and `token`
//!   forms carry the same inline;
//! - `proxy-url`: the traffic and the credentials would go through a host
//!   the address policy never checked;
//! - `username`, `password`: basic authentication;
//! - `as`, `as-groups`, `as-uid`, `as-user-extra`: impersonation is the
//!   HelmApp's to say (`serviceAccountName`), not the kubeconfig's.
//!
//! The keys read are an allow-list, so that a kubeconfig feature this
//! module does not know is refused rather than silently used: at the top
//! `apiVersion` (`v1`), `kind` (`Config`), `clusters`, `users`,
//! `contexts`, `current-context`, `preferences` (a mapping, not read) and
//! `extensions` (not read); in a cluster `server`,
//! `certificate-authority-data`, `insecure-skip-tls-verify`,
//! `tls-server-name`, `disable-compression` (a boolean, not read: a
//! transfer hint with no bearing on where or as whom the operator
//! connects) and `extensions`; in a user `token`,
//! `client-certificate-data`, `client-key-data` and `extensions`; in a
//! context `cluster`, `user`, `namespace` (not read: the HelmApp says
//! where its release goes) and `extensions`. Any other key is refused.
//!
//! Every entry is checked, not only the one used: a kubeconfig is accepted
//! or refused as a whole, so that switching `current-context` never
//! uncovers a refusal. Each user must hold exactly one credential.
//!
//! A refusal ([`Invalid`]) names the field by its path and index
//! (`users[0].user.exec`) and never quotes the document: not a token, a
//! server, nor a name the tenant wrote — the message ends up in a
//! HelmApp's status and Events, readable by more people than the Secret.
//!
//! Parsing is bounded before anything is built: the size
//! ([`MAX_KUBECONFIG_BYTES`]), then [`crate::lean::yaml::check`], which
//! counts what aliases expand to (at most 100,000 nodes, 256 levels). That
//! check is needed: serde_yaml_ng bounds alias *jumps* to 100 × the
//! document's event count and nesting to 128 levels, which does not bound
//! what the aliases expand to (one anchor of 10,000 nodes named by 10,000
//! aliases is within its limit and builds 10⁸ values).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Serialize;
use serde_yaml_ng::{Mapping, Value};
use sha2::{Digest, Sha256};

use crate::delivery::source::address::AddressPolicy;

/// The largest kubeconfig read: one cluster's, with its CA and a client
/// certificate inline, is a few KiB.
pub const MAX_KUBECONFIG_BYTES: usize = 256 * 1024;

/// The longest token accepted (a ServiceAccount JWT is about 1 KiB).
const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The longest DNS name (RFC 1035), and label.
const MAX_DNS_NAME: usize = 253;
const MAX_DNS_LABEL: usize = 63;

/// The field of a refusal about the document as a whole.
const DOCUMENT: &str = "kubeconfig";

/// The cluster, user and context names of the kubeconfig written back.
const NAME: &str = "remote";

/// What decoded PEM data holds (a certificate or a key).
const PEM_MARK: &[u8] = b"-----BEGIN ";

const CA_DATA: &str = "certificate-authority-data";
const CERT_DATA: &str = "client-certificate-data";
const KEY_DATA: &str = "client-key-data";
const INSECURE: &str = "insecure-skip-tls-verify";
const SERVER_NAME: &str = "tls-server-name";

/// The keys read at the top of the document.
const TOP_KEYS: &[&str] = &[
    "apiVersion",
    "kind",
    "clusters",
    "users",
    "contexts",
    "current-context",
    "preferences",
    "extensions",
];
/// The keys read in `clusters[].cluster`.
const CLUSTER_KEYS: &[&str] = &[
    "server",
    CA_DATA,
    INSECURE,
    SERVER_NAME,
    "disable-compression",
    "extensions",
];
/// The keys read in `users[].user`.
const USER_KEYS: &[&str] = &["token", CERT_DATA, KEY_DATA, "extensions"];
/// The keys read in `contexts[].context`.
const CONTEXT_KEYS: &[&str] = &["cluster", "user", "namespace", "extensions"];

const RUNS_A_PROGRAM: &str = "a credential plugin would run a program of the kubeconfig's choosing in the operator's pod: put a token, or client-certificate-data and client-key-data, inline";
const REACHES_A_PROVIDER: &str = "an auth provider would run code or fetch tokens on its own from the operator's pod: put a token inline";
const IMPERSONATES: &str = "impersonation is the HelmApp's to say, not the kubeconfig's: remove it and set the HelmApp's serviceAccountName";
const BASIC_AUTH: &str =
    "basic authentication is not supported: use a token or a client certificate and key";

/// Keys refused by name wherever they appear, with why and what to do.
const FORBIDDEN: &[(&str, &str)] = &[
    ("exec", RUNS_A_PROGRAM),
    ("auth-provider", REACHES_A_PROVIDER),
    (
        "tokenFile",
        "a file path would make the operator read one of its own files: put the token inline in token",
    ),
    (
        "client-certificate",
        "a file path would make the operator read one of its own files: put the certificate inline in client-certificate-data (base64 of the PEM)",
    ),
    (
        "client-key",
        "a file path would make the operator read one of its own files: put the key inline in client-key-data (base64 of the PEM)",
    ),
    (
        "certificate-authority",
        "a file path would make the operator read one of its own files: put the CA inline in certificate-authority-data (base64 of the PEM)",
    ),
    (
        "proxy-url",
        "a proxy would carry the traffic and the credentials through a host the address policy never checked: reach the API server directly",
    ),
    ("username", BASIC_AUTH),
    ("password", BASIC_AUTH),
    ("as", IMPERSONATES),
    ("as-groups", IMPERSONATES),
    ("as-uid", IMPERSONATES),
    ("as-user-extra", IMPERSONATES),
];

/// Why a kubeconfig is refused: the field, by its path with indexes
/// (`users[0].user.exec`, `contexts`, `clusters[0].cluster.server`), and
/// what to do. Never quotes a value of the document (no token, server or
/// name the tenant wrote): only field paths, counts and positions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Invalid {
    pub field: String,
    pub message: String,
}

impl Invalid {
    fn new(field: &str, message: impl Into<String>) -> Self {
        Invalid {
            field: field.to_string(),
            message: message.into(),
        }
    }
}

/// A kubeconfig reduced to what the operator accepts: one cluster, one
/// user, inline credentials.
#[derive(Clone)]
pub struct RemoteAccess {
    /// The https URL as written (validated), without trailing slashes; a
    /// path (a proxy's, as Rancher's) is kept.
    pub server: String,
    /// The server's host: an IP literal without brackets, or a DNS name.
    pub host: String,
    /// The server's port: as written, or 443.
    pub port: u16,
    /// `certificate-authority-data`, decoded (PEM).
    pub ca_pem: Option<Vec<u8>>,
    pub insecure_skip_tls_verify: bool,
    pub tls_server_name: Option<String>,
    /// The bearer token, without surrounding whitespace.
    pub token: Option<String>,
    /// `client-certificate-data`, decoded (PEM).
    pub client_certificate_pem: Option<Vec<u8>>,
    /// `client-key-data`, decoded (PEM).
    pub client_key_pem: Option<Vec<u8>>,
    /// The index of the cluster used in the document, for refusals that
    /// come later ([`check_address`]).
    cluster_index: usize,
}

impl std::fmt::Debug for RemoteAccess {
    /// Where, and which kinds of credential: never the token, key or
    /// certificate bytes (a RemoteAccess may be logged).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteAccess")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("ca", &self.ca_pem.is_some())
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("tls_server_name", &self.tls_server_name.is_some())
            .field("credential", &self.credential_kind())
            .finish_non_exhaustive()
    }
}

impl RemoteAccess {
    /// SHA-256 (lower-case hex) of every field, credentials included, in a
    /// fixed order, each with a presence byte and a length prefix (no two
    /// different values concatenate alike). Names are not in it: two
    /// Secrets naming the same cluster with the same credentials share one
    /// digest, hence one client; other credentials make another.
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(b"hossted-operator remote kubeconfig v1\n");
        let port = self.port.to_be_bytes();
        let insecure = [u8::from(self.insecure_skip_tls_verify)];
        let fields: [Option<&[u8]>; 9] = [
            Some(self.server.as_bytes()),
            Some(self.host.as_bytes()),
            Some(port.as_slice()),
            self.ca_pem.as_deref(),
            Some(insecure.as_slice()),
            self.tls_server_name.as_deref().map(str::as_bytes),
            self.token.as_deref().map(str::as_bytes),
            self.client_certificate_pem.as_deref(),
            self.client_key_pem.as_deref(),
        ];
        for field in fields {
            match field {
                None => hasher.update([0u8]),
                Some(bytes) => {
                    hasher.update([1u8]);
                    hasher.update((bytes.len() as u64).to_be_bytes());
                    hasher.update(bytes);
                }
            }
        }
        crate::lean::hex::hex(&hasher.finalize())
    }

    /// The kubeconfig given to `helm --kubeconfig` (in a file of mode
    /// 0600): one cluster, one user, one context, all named `remote`,
    /// inline data only. Written by serde as JSON — a YAML document every
    /// kubeconfig reader takes — so that every string is quoted: a YAML 1.1
    /// reader (client-go's) never reads a token such as `yes` or `1_000` as
    /// a boolean or a number.
    pub fn helm_kubeconfig(&self) -> String {
        self.helm_kubeconfig_through(None)
    }

    /// [`RemoteAccess::helm_kubeconfig`] with `proxy-url`: every
    /// connection helm opens — a redirect's too — goes through that proxy
    /// (the operator's, `super::egress`), never one a tenant named.
    pub fn helm_kubeconfig_through(&self, proxy_url: Option<&str>) -> String {
        let file = File {
            api_version: "v1",
            kind: "Config",
            clusters: vec![FileCluster {
                name: NAME,
                cluster: FileClusterFields {
                    server: &self.server,
                    certificate_authority_data: self
                        .ca_pem
                        .as_deref()
                        .map(|pem| STANDARD.encode(pem)),
                    insecure_skip_tls_verify: self.insecure_skip_tls_verify,
                    tls_server_name: self.tls_server_name.as_deref(),
                    proxy_url,
                },
            }],
            users: vec![FileUser {
                name: NAME,
                user: FileUserFields {
                    token: self.token.as_deref(),
                    client_certificate_data: self
                        .client_certificate_pem
                        .as_deref()
                        .map(|pem| STANDARD.encode(pem)),
                    client_key_data: self
                        .client_key_pem
                        .as_deref()
                        .map(|pem| STANDARD.encode(pem)),
                },
            }],
            contexts: vec![FileContext {
                name: NAME,
                context: FileContextFields {
                    cluster: NAME,
                    user: NAME,
                },
            }],
            current_context: NAME,
        };
        match serde_json::to_string_pretty(&file) {
            Ok(mut text) => {
                text.push('\n');
                text
            }
            // Cannot happen (strings, booleans and lists only); never an
            // empty file, which client-go would replace with the pod's own
            // in-cluster config.
            Err(_) => UNUSABLE.to_string(),
        }
    }

    /// This access with its server at `address`, found allowed just now
    /// (`super::connect::checked`): helm, which resolves names itself,
    /// is handed no name to resolve again to somewhere else. The server's
    /// certificate is still verified for the host name — it becomes
    /// `tls-server-name` unless the kubeconfig named one. The path (a
    /// proxy's) and the port are kept.
    pub fn pinned_to(&self, address: IpAddr) -> RemoteAccess {
        let path = self
            .server
            .parse::<http::Uri>()
            .map(|uri| uri.path().trim_end_matches('/').to_string())
            .unwrap_or_default();
        let literal = match address {
            IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        };
        let named = self.host.parse::<IpAddr>().is_err();
        RemoteAccess {
            server: format!("https://{literal}:{}{path}", self.port),
            host: address.to_string(),
            tls_server_name: self
                .tls_server_name
                .clone()
                .or_else(|| named.then(|| self.host.clone())),
            ..self.clone()
        }
    }

    /// kube's form of [`RemoteAccess::helm_kubeconfig`], for
    /// `kube::Config::from_custom_kubeconfig`: the same cluster, user and
    /// context, built field by field.
    pub fn kubeconfig(&self) -> kube::config::Kubeconfig {
        use kube::config::{
            AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
        };
        let cluster = Cluster {
            server: Some(self.server.clone()),
            insecure_skip_tls_verify: self.insecure_skip_tls_verify.then_some(true),
            certificate_authority_data: self.ca_pem.as_deref().map(|pem| STANDARD.encode(pem)),
            tls_server_name: self.tls_server_name.clone(),
            ..Cluster::default()
        };
        let user = AuthInfo {
            token: self.token.clone().map(Into::into),
            client_certificate_data: self
                .client_certificate_pem
                .as_deref()
                .map(|pem| STANDARD.encode(pem)),
            client_key_data: self
                .client_key_pem
                .as_deref()
                .map(|pem| STANDARD.encode(pem).into()),
            ..AuthInfo::default()
        };
        let context = Context {
            cluster: NAME.to_string(),
            user: Some(NAME.to_string()),
            ..Context::default()
        };
        Kubeconfig {
            api_version: Some("v1".to_string()),
            kind: Some("Config".to_string()),
            clusters: vec![NamedCluster {
                name: NAME.to_string(),
                cluster: Some(cluster),
                ..NamedCluster::default()
            }],
            auth_infos: vec![NamedAuthInfo {
                name: NAME.to_string(),
                auth_info: Some(user),
                ..NamedAuthInfo::default()
            }],
            contexts: vec![NamedContext {
                name: NAME.to_string(),
                context: Some(context),
                ..NamedContext::default()
            }],
            current_context: Some(NAME.to_string()),
            ..Kubeconfig::default()
        }
    }

    /// Which credential the user holds, for Debug.
    fn credential_kind(&self) -> &'static str {
        match (&self.token, &self.client_certificate_pem) {
            (Some(_), _) => "token",
            (None, Some(_)) => "client-certificate",
            (None, None) => "none",
        }
    }
}

/// What [`RemoteAccess::helm_kubeconfig`] returns should serialization
/// fail: a kubeconfig helm cannot connect with (`.invalid` never
/// resolves), rather than an empty one.
const UNUSABLE: &str = r#"{"apiVersion":"v1","kind":"Config","clusters":[{"name":"remote","cluster":{"server":"https://kubeconfig-not-written.invalid"}}],"users":[{"name":"remote","user":{}}],"contexts":[{"name":"remote","context":{"cluster":"remote","user":"remote"}}],"current-context":"remote"}
"#;

/// The file [`RemoteAccess::helm_kubeconfig`] writes.
#[derive(Serialize)]
struct File<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    clusters: Vec<FileCluster<'a>>,
    users: Vec<FileUser<'a>>,
    contexts: Vec<FileContext>,
    #[serde(rename = "current-context")]
    current_context: &'static str,
}

#[derive(Serialize)]
struct FileCluster<'a> {
    name: &'static str,
    cluster: FileClusterFields<'a>,
}

#[derive(Serialize)]
struct FileClusterFields<'a> {
    server: &'a str,
    #[serde(
        rename = "certificate-authority-data",
        skip_serializing_if = "Option::is_none"
    )]
    certificate_authority_data: Option<String>,
    #[serde(rename = "insecure-skip-tls-verify", skip_serializing_if = "is_false")]
    insecure_skip_tls_verify: bool,
    #[serde(rename = "tls-server-name", skip_serializing_if = "Option::is_none")]
    tls_server_name: Option<&'a str>,
    #[serde(rename = "proxy-url", skip_serializing_if = "Option::is_none")]
    proxy_url: Option<&'a str>,
}

#[derive(Serialize)]
struct FileUser<'a> {
    name: &'static str,
    user: FileUserFields<'a>,
}

#[derive(Serialize)]
struct FileUserFields<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<&'a str>,
    #[serde(
        rename = "client-certificate-data",
        skip_serializing_if = "Option::is_none"
    )]
    client_certificate_data: Option<String>,
    #[serde(rename = "client-key-data", skip_serializing_if = "Option::is_none")]
    client_key_data: Option<String>,
}

#[derive(Serialize)]
struct FileContext {
    name: &'static str,
    context: FileContextFields,
}

#[derive(Serialize)]
struct FileContextFields {
    cluster: &'static str,
    user: &'static str,
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// Parses and validates a kubeconfig (see the module docs for what is
/// accepted); the refusal names the field.
pub fn parse(bytes: &[u8]) -> Result<RemoteAccess, Invalid> {
    let root = load(bytes)?;
    let document = read_document(&root)?;
    reduce(&document)
}

/// Checks the server's address now (`crate::delivery::remote::connect`):
/// refuses it if it does not resolve, or if any of its addresses is in a
/// network `policy` denies (`--deny-chart-source-cidrs`): the client may
/// connect to any of them. Every connection and every helm run checks its
/// own answer again, as a name's answer may change later.
pub async fn check_address(
    access: &RemoteAccess,
    policy: &AddressPolicy,
    lookup: &super::connect::Lookup,
) -> Result<(), Invalid> {
    let field = format!("clusters[{}].cluster.server", access.cluster_index);
    super::connect::checked(lookup, policy, &access.host)
        .await
        .map(drop)
        .map_err(|refusal| Invalid::new(&field, refusal.to_string()))
}

/// The document's top mapping, within the bounds of the module docs. No
/// parser's words are passed on (serde's quote the document): only where.
fn load(bytes: &[u8]) -> Result<Mapping, Invalid> {
    if bytes.len() > MAX_KUBECONFIG_BYTES {
        return Err(Invalid::new(
            DOCUMENT,
            format!(
                "is larger than {MAX_KUBECONFIG_BYTES} bytes: a kubeconfig of one cluster with inline credentials is a few KiB"
            ),
        ));
    }
    let text =
        std::str::from_utf8(bytes).map_err(|_| Invalid::new(DOCUMENT, "is not UTF-8 text"))?;
    // Its message says what was exceeded and where, never the text.
    crate::lean::yaml::check(text)
        .map_err(|e| Invalid::new(DOCUMENT, format!("is refused before parsing: {e}")))?;
    let value: Value = serde_yaml_ng::from_str(text).map_err(|e| match e.location() {
        Some(at) => {
            let (line, column) = (at.line(), at.column());
            Invalid::new(
                DOCUMENT,
                format!("is not a YAML document, or repeats a key (line {line}, column {column})"),
            )
        }
        None => Invalid::new(DOCUMENT, "is not a YAML document, or repeats a key"),
    })?;
    match value {
        Value::Mapping(root) => Ok(root),
        _ => Err(Invalid::new(
            DOCUMENT,
            "is not a YAML mapping: a kubeconfig has clusters, users and contexts",
        )),
    }
}

/// A kubeconfig's entries, each checked, in document order.
struct Document {
    clusters: Vec<(String, ClusterEntry)>,
    users: Vec<(String, Credential)>,
    contexts: Vec<(String, ContextEntry)>,
    /// `current-context`, unless absent or empty.
    current: Option<String>,
}

/// A checked `clusters[].cluster`.
#[derive(Clone)]
struct ClusterEntry {
    server: Server,
    ca_pem: Option<Vec<u8>>,
    insecure_skip_tls_verify: bool,
    tls_server_name: Option<String>,
}

/// A checked `server`.
#[derive(Clone)]
struct Server {
    url: String,
    host: String,
    port: u16,
}

/// A checked `users[].user`: exactly one kind of credential.
#[derive(Clone)]
enum Credential {
    Token(String),
    Certificate { certificate: Vec<u8>, key: Vec<u8> },
}

/// A checked `contexts[].context`.
struct ContextEntry {
    cluster: String,
    user: String,
}

/// Every key and entry of the document, checked.
fn read_document(root: &Mapping) -> Result<Document, Invalid> {
    check_keys(root, "", TOP_KEYS)?;
    if opt_str(root, "apiVersion", "")?.is_some_and(|v| v != "v1") {
        return Err(Invalid::new(
            "apiVersion",
            "must be v1, a kubeconfig's: the Secret's key should hold a kubeconfig",
        ));
    }
    if opt_str(root, "kind", "")?.is_some_and(|k| k != "Config") {
        return Err(Invalid::new(
            "kind",
            "must be Config, a kubeconfig's: the Secret's key should hold a kubeconfig",
        ));
    }
    if let Some(preferences) = root.get("preferences")
        && !preferences.is_null()
        && preferences.as_mapping().is_none()
    {
        return Err(Invalid::new(
            "preferences",
            "must be a mapping (it is not read)",
        ));
    }
    let clusters = read_list(root, "clusters", "cluster", read_cluster)?;
    let users = read_list(root, "users", "user", read_user)?;
    let contexts = read_list(root, "contexts", "context", read_context)?;
    let current = opt_str(root, "current-context", "")?
        .filter(|name| !name.is_empty())
        .map(str::to_string);
    Ok(Document {
        clusters,
        users,
        contexts,
        current,
    })
}

/// The entries of the list `list` (`clusters`), each a mapping of a
/// unique, non-empty `name` and an `item` (`cluster`) that `read` checks.
fn read_list<T>(
    root: &Mapping,
    list: &'static str,
    item: &'static str,
    read: fn(&Mapping, &str) -> Result<T, Invalid>,
) -> Result<Vec<(String, T)>, Invalid> {
    let entries = match root.get(list) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(value) => value
            .as_sequence()
            .ok_or_else(|| Invalid::new(list, "must be a list"))?,
    };
    let mut out = Vec::with_capacity(entries.len());
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, entry) in entries.iter().enumerate() {
        let at = format!("{list}[{i}]");
        let map = entry
            .as_mapping()
            .ok_or_else(|| Invalid::new(&at, format!("must be a mapping of name and {item}")))?;
        check_keys(map, &at, &["name", item])?;
        let name = req_str(map, "name", &at)?;
        if name.is_empty() {
            return Err(Invalid::new(&join(&at, "name"), "is empty"));
        }
        if let Some(first) = seen.get(name) {
            return Err(Invalid::new(
                &join(&at, "name"),
                format!("is the same as {list}[{first}].name: every name must be unique"),
            ));
        }
        seen.insert(name.to_string(), i);
        let inner = req_map(map, item, &at)?;
        let value = read(inner, &join(&at, item))?;
        out.push((name.to_string(), value));
    }
    Ok(out)
}

/// A `clusters[].cluster` (at `at`).
fn read_cluster(cluster: &Mapping, at: &str) -> Result<ClusterEntry, Invalid> {
    check_keys(cluster, at, CLUSTER_KEYS)?;
    let server = read_server(req_str(cluster, "server", at)?, &join(at, "server"))?;
    let ca_pem = opt_str(cluster, CA_DATA, at)?
        .map(|data| pem_data(data, &join(at, CA_DATA)))
        .transpose()?;
    let insecure_skip_tls_verify = opt_bool(cluster, INSECURE, at)?.unwrap_or(false);
    // Checked for its type, not read (see the module docs).
    opt_bool(cluster, "disable-compression", at)?;
    if insecure_skip_tls_verify && ca_pem.is_some() {
        return Err(Invalid::new(
            &join(at, INSECURE),
            "is true beside certificate-authority-data: keep the CA (the server's certificate is then checked) or remove it",
        ));
    }
    let tls_server_name = match opt_str(cluster, SERVER_NAME, at)? {
        None => None,
        Some(name) if is_dns_name(name) => Some(name.to_string()),
        Some(_) => {
            return Err(Invalid::new(
                &join(at, SERVER_NAME),
                "is not a DNS name (at most 253 characters; dot-separated labels of letters, digits, - and _, at most 63 each)",
            ));
        }
    };
    Ok(ClusterEntry {
        server,
        ca_pem,
        insecure_skip_tls_verify,
        tls_server_name,
    })
}

/// A `users[].user` (at `at`): a token, or a client certificate and its
/// key — exactly one.
fn read_user(user: &Mapping, at: &str) -> Result<Credential, Invalid> {
    check_keys(user, at, USER_KEYS)?;
    let token = opt_str(user, "token", at)?
        .map(|raw| read_token(raw, &join(at, "token")))
        .transpose()?;
    let certificate = opt_str(user, CERT_DATA, at)?
        .map(|data| pem_data(data, &join(at, CERT_DATA)))
        .transpose()?;
    let key = opt_str(user, KEY_DATA, at)?
        .map(|data| pem_data(data, &join(at, KEY_DATA)))
        .transpose()?;
    match (token, certificate, key) {
        (Some(token), None, None) => Ok(Credential::Token(token)),
        (None, Some(certificate), Some(key)) => Ok(Credential::Certificate { certificate, key }),
        (Some(_), _, _) => Err(Invalid::new(
            at,
            "has a token and a client certificate: keep one of the two",
        )),
        (None, Some(_), None) => Err(Invalid::new(
            &join(at, KEY_DATA),
            "is missing: client-certificate-data needs its key",
        )),
        (None, None, Some(_)) => Err(Invalid::new(
            &join(at, CERT_DATA),
            "is missing: client-key-data needs its certificate",
        )),
        (None, None, None) => Err(Invalid::new(
            at,
            "has no credential: set token, or client-certificate-data and client-key-data",
        )),
    }
}

/// A `contexts[].context` (at `at`).
fn read_context(context: &Mapping, at: &str) -> Result<ContextEntry, Invalid> {
    check_keys(context, at, CONTEXT_KEYS)?;
    let cluster = req_str(context, "cluster", at)?.to_string();
    let user = req_str(context, "user", at)?.to_string();
    // Checked for its type, not read: the HelmApp says where.
    opt_str(context, "namespace", at)?;
    Ok(ContextEntry { cluster, user })
}

/// The context used, its cluster and user: what [`parse`] returns.
fn reduce(document: &Document) -> Result<RemoteAccess, Invalid> {
    check_references(document)?;
    let context = chosen_context(&document.contexts, document.current.as_deref())?;
    let (cluster_index, cluster) =
        named(&document.clusters, &context.cluster).ok_or_else(|| {
            Invalid::new(
                "current-context",
                "names a context whose cluster is missing",
            )
        })?;
    let (_, credential) = named(&document.users, &context.user)
        .ok_or_else(|| Invalid::new("current-context", "names a context whose user is missing"))?;
    let (token, client_certificate_pem, client_key_pem) = match credential.clone() {
        Credential::Token(token) => (Some(token), None, None),
        Credential::Certificate { certificate, key } => (None, Some(certificate), Some(key)),
    };
    let ClusterEntry {
        server,
        ca_pem,
        insecure_skip_tls_verify,
        tls_server_name,
    } = cluster.clone();
    Ok(RemoteAccess {
        server: server.url,
        host: server.host,
        port: server.port,
        ca_pem,
        insecure_skip_tls_verify,
        tls_server_name,
        token,
        client_certificate_pem,
        client_key_pem,
        cluster_index,
    })
}

/// Every context names a cluster and a user of the document.
fn check_references(document: &Document) -> Result<(), Invalid> {
    for (i, (_, context)) in document.contexts.iter().enumerate() {
        if named(&document.clusters, &context.cluster).is_none() {
            return Err(Invalid::new(
                &format!("contexts[{i}].context.cluster"),
                "names no cluster of the kubeconfig (no clusters[].name is the same)",
            ));
        }
        if named(&document.users, &context.user).is_none() {
            return Err(Invalid::new(
                &format!("contexts[{i}].context.user"),
                "names no user of the kubeconfig (no users[].name is the same)",
            ));
        }
    }
    Ok(())
}

/// The context to use: the only one, or the one `current-context` names.
fn chosen_context<'a>(
    contexts: &'a [(String, ContextEntry)],
    current: Option<&str>,
) -> Result<&'a ContextEntry, Invalid> {
    let count = contexts.len();
    match (contexts.first(), current) {
        (None, _) => Err(Invalid::new(
            "contexts",
            "the kubeconfig has no context: add one naming its cluster and user",
        )),
        (Some(_), Some(name)) => named(contexts, name)
            .map(|(_, context)| context)
            .ok_or_else(|| {
                Invalid::new(
                    "current-context",
                    "names no context of the kubeconfig: set it to one of contexts[].name",
                )
            }),
        (Some((_, only)), None) if count == 1 => Ok(only),
        (Some(_), None) => Err(Invalid::new(
            "current-context",
            format!("the kubeconfig has {count} contexts: set current-context to the one to use"),
        )),
    }
}

/// The entry of `list` named `name`, with its index.
fn named<'a, T>(list: &'a [(String, T)], name: &str) -> Option<(usize, &'a T)> {
    list.iter()
        .enumerate()
        .find(|(_, (n, _))| n == name)
        .map(|(i, (_, value))| (i, value))
}

/// `server`: an https URL with a host, an optional port and path, and no
/// user information, query or fragment.
fn read_server(written: &str, field: &str) -> Result<Server, Invalid> {
    let refuse = |why: &str| Invalid::new(field, why);
    // http::Uri drops a fragment silently: it is looked for in the text.
    if written.contains('#') {
        return Err(refuse(
            "has a fragment (#…): write https://host[:port][/path]",
        ));
    }
    if written.contains('?') {
        return Err(refuse("has a query (?…): write https://host[:port][/path]"));
    }
    let uri: http::Uri = written
        .parse()
        .map_err(|_| refuse("is not a URL: write https://host[:port][/path]"))?;
    if uri.scheme_str() != Some("https") {
        return Err(refuse(
            "is not an https:// URL: the credentials are sent over TLS only",
        ));
    }
    let Some(authority) = uri.authority() else {
        return Err(refuse("has no host: write https://host[:port][/path]"));
    };
    if authority.as_str().contains('@') {
        return Err(refuse(
            "has user information (user@host): put the credentials in users[].user",
        ));
    }
    if uri.query().is_some() {
        return Err(refuse("has a query (?…): write https://host[:port][/path]"));
    }
    // client-go names its discovery cache directory after the whole URL:
    // a path that climbs (`/../`), doubles a slash or escapes a character
    // could point that directory at another cluster's.
    let path = uri.path();
    if path.contains("//")
        || path.contains('%')
        || path.contains('\\')
        || path
            .split('/')
            .any(|segment| segment == ".." || segment == ".")
    {
        return Err(refuse(
            "has a path with a . or .. segment, a // or an escape (%): write https://host[:port][/path] with plain segments",
        ));
    }
    let (host, port) = host_and_port(authority.as_str()).map_err(refuse)?;
    Ok(Server {
        url: written.trim_end_matches('/').to_string(),
        host,
        port,
    })
}

/// An authority's host (brackets removed from an IPv6 literal) and port
/// (443 if none). http::Uri takes a port it cannot read as none, so the
/// port is read here.
fn host_and_port(authority: &str) -> Result<(String, u16), &'static str> {
    let (host, rest) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let (inside, rest) = bracketed
                .split_once(']')
                .ok_or("has an IPv6 address without its closing ]")?;
            inside.parse::<Ipv6Addr>().map_err(
                |_| "has an IPv6 address that does not parse (zone identifiers are not supported)",
            )?;
            (inside, rest)
        }
        None => {
            let (host, rest) = match authority.find(':') {
                Some(colon) => authority.split_at(colon),
                None => (authority, ""),
            };
            if host.parse::<Ipv4Addr>().is_err() && !is_dns_name(host) {
                return Err(
                    "has a host that is neither an IP address nor a DNS name (dot-separated labels of letters, digits, - and _; not all digits at the end)",
                );
            }
            (host, rest)
        }
    };
    let port = if rest.is_empty() {
        443
    } else {
        rest.strip_prefix(':')
            .and_then(port_number)
            .ok_or("has a port that is not a number from 1 to 65535")?
    };
    Ok((host.to_string(), port))
}

/// A port written as 1 to 5 digits, 1 to 65535.
fn port_number(digits: &str) -> Option<u16> {
    if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u16>().ok().filter(|port| *port != 0)
}

/// Whether `name` is a DNS name: at most 253 characters, labels of 1 to 63
/// letters, digits, `-` (not at either end) and `_`. A last label of
/// digits, or `0x…`, is refused: some resolvers read such a name as an IPv4
/// address (`1.2.3` as 1.2.0.3), and only a real IP literal may be one.
fn is_dns_name(name: &str) -> bool {
    if name.is_empty() || name.len() > MAX_DNS_NAME {
        return false;
    }
    let labels = name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= MAX_DNS_LABEL
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    let last = name.rsplit('.').next().unwrap_or(name);
    let numeric =
        last.bytes().all(|b| b.is_ascii_digit()) || last.to_ascii_lowercase().starts_with("0x");
    labels && !numeric
}

/// `token`: printable ASCII without whitespace inside (surrounding
/// whitespace, as a pasted token has, is dropped), 1 byte to 16 KiB.
fn read_token(raw: &str, field: &str) -> Result<String, Invalid> {
    let token = raw.trim();
    if token.is_empty() {
        return Err(Invalid::new(field, "is empty"));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Invalid::new(
            field,
            format!("is longer than {MAX_TOKEN_BYTES} bytes"),
        ));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Invalid::new(
            field,
            "has a character that is not printable ASCII, or whitespace inside: put the token alone",
        ));
    }
    Ok(token.to_string())
}

/// A `…-data` field: standard base64 (whitespace anywhere ignored, as in
/// a wrapped or indented value) of PEM data.
fn pem_data(data: &str, field: &str) -> Result<Vec<u8>, Invalid> {
    let compact: Vec<u8> = data.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let decoded = STANDARD.decode(compact.as_slice()).map_err(|_| {
        Invalid::new(
            field,
            "is not base64 (standard alphabet, padded): write the PEM file base64-encoded, as base64 -w0 does",
        )
    })?;
    if !decoded
        .windows(PEM_MARK.len())
        .any(|window| window == PEM_MARK)
    {
        return Err(Invalid::new(
            field,
            "does not decode to PEM (-----BEGIN …): base64-encode the PEM file itself",
        ));
    }
    Ok(decoded)
}

/// Refuses any key of `map` (at `at`, "" for the top) not in `allowed`: a
/// known dangerous one by its name and why, any other by its position
/// only (its name is the tenant's text).
fn check_keys(map: &Mapping, at: &str, allowed: &[&str]) -> Result<(), Invalid> {
    for (i, key) in map.keys().enumerate() {
        let number = i + 1;
        let Value::String(key) = key else {
            return Err(Invalid::new(
                here(at),
                format!("key {number} is not a plain string"),
            ));
        };
        if allowed.contains(&key.as_str()) {
            continue;
        }
        if let Some((name, why)) = FORBIDDEN.iter().find(|(name, _)| name == key) {
            return Err(Invalid::new(&join(at, name), *why));
        }
        let read = allowed.join(", ");
        return Err(Invalid::new(
            here(at),
            format!("key {number} is not supported here (the keys read: {read}): remove it"),
        ));
    }
    Ok(())
}

/// `map[key]` as a string; absent or null is `None`.
fn opt_str<'a>(map: &'a Mapping, key: &str, at: &str) -> Result<Option<&'a str>, Invalid> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_str()
            .map(Some)
            .ok_or_else(|| Invalid::new(&join(at, key), "must be a string")),
    }
}

/// `map[key]` as a string, which must be there.
fn req_str<'a>(map: &'a Mapping, key: &str, at: &str) -> Result<&'a str, Invalid> {
    opt_str(map, key, at)?.ok_or_else(|| Invalid::new(&join(at, key), "is missing"))
}

/// `map[key]` as a mapping, which must be there.
fn req_map<'a>(map: &'a Mapping, key: &str, at: &str) -> Result<&'a Mapping, Invalid> {
    match map.get(key) {
        None | Some(Value::Null) => Err(Invalid::new(&join(at, key), "is missing")),
        Some(value) => value
            .as_mapping()
            .ok_or_else(|| Invalid::new(&join(at, key), "must be a mapping")),
    }
}

/// `map[key]` as a boolean; absent or null is `None`.
fn opt_bool(map: &Mapping, key: &str, at: &str) -> Result<Option<bool>, Invalid> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_bool()
            .map(Some)
            .ok_or_else(|| Invalid::new(&join(at, key), "must be true or false")),
    }
}

/// The path of `key` in the mapping at `at` ("" for the top).
fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

/// The field of a refusal about the mapping at `at` itself.
fn here(at: &str) -> &str {
    if at.is_empty() { DOCUMENT } else { at }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    const KEY_PEM: &str = "-----BEGIN EC PRIVATE KEY-----\nMHcC\n-----END EC PRIVATE KEY-----\n";
    const PLANT: &str = "SECRET-TOKEN-XYZ";

    const TOKEN_DOC: &str = "\
apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster:
    server: https://api.example.com:6443/
    certificate-authority-data: CA_DATA
users:
- name: deployer
  user:
    token: abc.def-ghi
contexts:
- name: prod
  context:
    cluster: prod
    user: deployer
    namespace: apps
current-context: prod
preferences: {}
";

    const CERT_DOC: &str = "\
clusters:
- name: edge
  cluster:
    server: https://[2001:db8::1]/k8s/clusters/c-abc
    insecure-skip-tls-verify: true
    tls-server-name: api.internal
    disable-compression: true
    extensions:
    - name: anything
      extension: {exec: not read}
users:
- name: admin
  user:
    client-certificate-data: CERT_DATA
    client-key-data: KEY_DATA
contexts:
- name: edge
  context: {cluster: edge, user: admin}
";

    const MULTI_DOC: &str = "\
clusters:
- name: a
  cluster: {server: 'https://a.example.com'}
- name: b
  cluster: {server: 'https://169.254.169.254:8443'}
users:
- name: ua
  user: {token: token-a}
- name: ub
  user: {token: token-b}
contexts:
- name: ca
  context: {cluster: a, user: ua}
- name: cb
  context: {cluster: b, user: ub}
current-context: cb
";

    fn b64(text: &str) -> String {
        base64::Engine::encode(&STANDARD, text)
    }

    fn token_text() -> String {
        TOKEN_DOC.replace("CA_DATA", &b64(PEM))
    }

    fn cert_text() -> String {
        CERT_DOC
            .replace("CERT_DATA", &b64(PEM))
            .replace("KEY_DATA", &b64(KEY_PEM))
    }

    fn doc(text: &str) -> Value {
        serde_yaml_ng::from_str(text).expect("a test document")
    }

    fn text_of(value: &Value) -> String {
        serde_yaml_ng::to_string(value).expect("serializes")
    }

    /// The value at the dotted `path` (numbers index lists), made if absent.
    fn at<'a>(value: &'a mut Value, path: &[&str]) -> &'a mut Value {
        match path.split_first() {
            None => value,
            Some((step, rest)) => {
                let next = match step.parse::<usize>() {
                    Ok(i) => &mut value[i],
                    Err(_) => &mut value[*step],
                };
                at(next, rest)
            }
        }
    }

    /// `base` with `value` at `path`, as text.
    fn with(base: &Value, path: &str, value: Value) -> String {
        let mut copy = base.clone();
        let steps: Vec<&str> = path.split('.').collect();
        *at(&mut copy, &steps) = value;
        text_of(&copy)
    }

    /// `base` without the key at `path`, as text.
    fn without(base: &Value, path: &str) -> String {
        let mut copy = base.clone();
        let steps: Vec<&str> = path.split('.').collect();
        let (key, parent) = steps.split_last().expect("a path");
        at(&mut copy, parent)
            .as_mapping_mut()
            .expect("a mapping")
            .shift_remove(*key);
        text_of(&copy)
    }

    /// `base` with a copy of the list's first entry appended, as text.
    fn with_copy(base: &Value, list: &str) -> String {
        let mut copy = base.clone();
        let sequence = copy[list].as_sequence_mut().expect("a list");
        let first = sequence[0].clone();
        sequence.push(first);
        text_of(&copy)
    }

    /// `users.0.user.exec` as a field path: `users[0].user.exec`.
    fn field_of(path: &str) -> String {
        let mut field = String::new();
        for step in path.split('.') {
            if step.parse::<usize>().is_ok() {
                field.push('[');
                field.push_str(step);
                field.push(']');
            } else {
                if !field.is_empty() {
                    field.push('.');
                }
                field.push_str(step);
            }
        }
        field
    }

    fn refused(text: &str) -> Invalid {
        parse(text.as_bytes()).expect_err("refused")
    }

    fn accepted(text: &str) -> RemoteAccess {
        parse(text.as_bytes()).unwrap_or_else(|e| panic!("refused: {e}"))
    }

    #[test]
    fn a_token_kubeconfig_is_accepted() {
        let access = accepted(&token_text());
        assert_eq!(access.server, "https://api.example.com:6443");
        assert_eq!(access.host, "api.example.com");
        assert_eq!(access.port, 6443);
        assert_eq!(access.ca_pem.as_deref(), Some(PEM.as_bytes()));
        assert!(!access.insecure_skip_tls_verify);
        assert_eq!(access.tls_server_name, None);
        assert_eq!(access.token.as_deref(), Some("abc.def-ghi"));
        assert!(access.client_certificate_pem.is_none());
        assert!(access.client_key_pem.is_none());
        assert_eq!(access.cluster_index, 0);
    }

    #[test]
    fn a_client_certificate_kubeconfig_is_accepted() {
        let access = accepted(&cert_text());
        assert_eq!(access.server, "https://[2001:db8::1]/k8s/clusters/c-abc");
        assert_eq!(access.host, "2001:db8::1");
        assert_eq!(access.port, 443);
        assert_eq!(access.ca_pem, None);
        assert!(access.insecure_skip_tls_verify);
        assert_eq!(access.tls_server_name.as_deref(), Some("api.internal"));
        assert_eq!(access.token, None);
        assert_eq!(
            access.client_certificate_pem.as_deref(),
            Some(PEM.as_bytes())
        );
        assert_eq!(access.client_key_pem.as_deref(), Some(KEY_PEM.as_bytes()));
    }

    #[test]
    fn current_context_picks_among_several() {
        let access = accepted(MULTI_DOC);
        assert_eq!(access.host, "169.254.169.254");
        assert_eq!(access.port, 8443);
        assert_eq!(access.token.as_deref(), Some("token-b"));
        assert_eq!(access.cluster_index, 1);

        let base = doc(MULTI_DOC);
        assert_eq!(
            refused(&without(&base, "current-context")).field,
            "current-context"
        );
        assert_eq!(
            refused(&with(&base, "current-context", Value::from("cc"))).field,
            "current-context"
        );
        let first = accepted(&with(&base, "current-context", Value::from("ca")));
        assert_eq!(first.token.as_deref(), Some("token-a"));
        assert_eq!(first.cluster_index, 0);
    }

    #[test]
    fn valid_variants_are_accepted() {
        let base = doc(&token_text());
        let server = "clusters.0.cluster.server";
        for (written, url, host, port) in [
            (
                "https://api.example.com",
                "https://api.example.com",
                "api.example.com",
                443,
            ),
            (
                "https://10.0.0.1:6443",
                "https://10.0.0.1:6443",
                "10.0.0.1",
                6443,
            ),
            ("https://[::1]:6443/", "https://[::1]:6443", "::1", 6443),
            (
                "https://rancher.example.com/k8s/clusters/c-m-abc/",
                "https://rancher.example.com/k8s/clusters/c-m-abc",
                "rancher.example.com",
                443,
            ),
            (
                "https://kube_api.local:443",
                "https://kube_api.local:443",
                "kube_api.local",
                443,
            ),
        ] {
            let access = accepted(&with(&base, server, Value::from(written)));
            assert_eq!(access.server, url);
            assert_eq!(access.host, host);
            assert_eq!(access.port, port);
        }
        // One context and no current-context; an empty current-context.
        accepted(&without(&base, "current-context"));
        accepted(&with(&base, "current-context", Value::from("")));
        // Surrounding whitespace of a token; base64 wrapped over lines.
        let padded = accepted(&with(&base, "users.0.user.token", Value::from("  abc \n")));
        assert_eq!(padded.token.as_deref(), Some("abc"));
        let encoded = b64(PEM);
        let wrapped = format!("{}\n  {}\n", &encoded[..20], &encoded[20..]);
        let access = accepted(&with(
            &base,
            "clusters.0.cluster.certificate-authority-data",
            Value::from(wrapped),
        ));
        assert_eq!(access.ca_pem.as_deref(), Some(PEM.as_bytes()));
        // insecure-skip-tls-verify false beside a CA; extensions not read.
        accepted(&with(
            &base,
            "clusters.0.cluster.insecure-skip-tls-verify",
            Value::from(false),
        ));
        accepted(&with(
            &base,
            "extensions",
            doc("[{name: x, extension: {exec: y}}]"),
        ));
        accepted(&with(
            &base,
            "users.0.user.extensions",
            doc("[{name: x, extension: 1}]"),
        ));
        accepted(&with(&base, "preferences", doc("{colors: true}")));
        // Null is absent.
        accepted(&with(
            &base,
            "clusters.0.cluster.tls-server-name",
            Value::Null,
        ));
        // A token of exactly 16 KiB.
        accepted(&with(
            &base,
            "users.0.user.token",
            Value::from("t".repeat(MAX_TOKEN_BYTES)),
        ));
        // A 253-character tls-server-name.
        let long = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        );
        accepted(&with(
            &base,
            "clusters.0.cluster.tls-server-name",
            Value::from(long),
        ));
        // Anchors and aliases within bounds.
        let anchored = token_text()
            .replace("- name: deployer", "- name: &u deployer")
            .replace("    user: deployer", "    user: *u");
        assert_eq!(accepted(&anchored).token.as_deref(), Some("abc.def-ghi"));
    }

    #[test]
    fn forbidden_keys_are_refused_by_name() {
        let base = doc(&token_text());
        for (path, value) in [
            ("users.0.user.exec", "{command: sh, args: [-c, id]}"),
            ("users.0.user.auth-provider", "{name: oidc}"),
            (
                "users.0.user.tokenFile",
                "/var/run/secrets/kubernetes.io/serviceaccount/token",
            ),
            ("users.0.user.client-certificate", "/etc/tls.crt"),
            ("users.0.user.client-key", "/etc/tls.key"),
            ("users.0.user.username", "admin"),
            ("users.0.user.password", "hunter2"),
            ("users.0.user.as", "system:admin"),
            ("users.0.user.as-groups", "['system:masters']"),
            ("users.0.user.as-uid", "'1'"),
            ("users.0.user.as-user-extra", "{scopes: [x]}"),
            ("clusters.0.cluster.certificate-authority", "/etc/ca.crt"),
            ("clusters.0.cluster.proxy-url", "http://proxy:3128"),
            ("contexts.0.context.exec", "{command: sh}"),
            ("exec", "{command: sh}"),
            ("users.0.user.exec", "null"),
        ] {
            let e = refused(&with(&base, path, doc(value)));
            assert_eq!(e.field, field_of(path), "{path}");
        }
    }

    #[test]
    fn unknown_keys_are_refused_without_their_name() {
        let base = doc(&token_text());
        for (path, field) in [
            ("newFeature", "kubeconfig"),
            ("clusters.0.newFeature", "clusters[0]"),
            ("clusters.0.cluster.newFeature", "clusters[0].cluster"),
            ("users.0.newFeature", "users[0]"),
            ("users.0.user.newFeature", "users[0].user"),
            ("users.0.user.token-file", "users[0].user"),
            ("contexts.0.newFeature", "contexts[0]"),
            ("contexts.0.context.newFeature", "contexts[0].context"),
            ("<<", "kubeconfig"),
        ] {
            let e = refused(&with(&base, path, Value::from("x")));
            assert_eq!(e.field, field, "{path}");
            assert!(!e.to_string().contains("newFeature"), "{e}");
        }
        let numeric_key = format!("{}1: one\n", token_text());
        assert_eq!(refused(&numeric_key).field, "kubeconfig");
        let complex_key = format!("{}? [a]\n: b\n", token_text());
        assert_eq!(refused(&complex_key).field, "kubeconfig");
    }

    #[test]
    fn documents_that_are_no_kubeconfig_are_refused() {
        let too_big = vec![b'#'; MAX_KUBECONFIG_BYTES + 1];
        assert_eq!(parse(&too_big).expect_err("refused").field, "kubeconfig");
        let inputs: [&[u8]; 8] = [
            b"clusters: \xff\n",
            b"clusters: [\n",
            b"- a\n- b\n",
            b"just text",
            b"",
            b"clusters: []\nclusters: []\n",
            b"a: 1\n---\nb: 2\n",
            b"!tagged {clusters: []}",
        ];
        for bytes in inputs {
            assert_eq!(parse(bytes).expect_err("refused").field, "kubeconfig");
        }
        let base = doc(&token_text());
        assert_eq!(
            refused(&with(&base, "apiVersion", Value::from("v2"))).field,
            "apiVersion"
        );
        assert_eq!(
            refused(&with(&base, "kind", Value::from("Secret"))).field,
            "kind"
        );
        assert_eq!(
            refused(&with(&base, "preferences", Value::from("x"))).field,
            "preferences"
        );
        assert_eq!(
            refused(&with(&base, "clusters", Value::from("x"))).field,
            "clusters"
        );
        assert_eq!(
            refused(&with(&base, "clusters.0", Value::from("x"))).field,
            "clusters[0]"
        );
        assert_eq!(
            refused(&without(&base, "clusters.0.cluster")).field,
            "clusters[0].cluster"
        );
        assert_eq!(
            refused(&with(&base, "users.0.user", Value::from("x"))).field,
            "users[0].user"
        );
        assert_eq!(
            refused(&without(&base, "clusters.0.name")).field,
            "clusters[0].name"
        );
        assert_eq!(
            refused(&with(&base, "clusters.0.name", Value::from(""))).field,
            "clusters[0].name"
        );
        assert_eq!(
            refused(&with(&base, "clusters.0.name", doc("7"))).field,
            "clusters[0].name"
        );
        assert_eq!(
            refused(&with(&base, "current-context", doc("[a]"))).field,
            "current-context"
        );
    }

    #[test]
    fn an_alias_bomb_is_refused_fast() {
        let mut text = String::from("apiVersion: v1\npreferences:\n");
        let xs = std::iter::repeat_n("x", 9).collect::<Vec<_>>().join(", ");
        text.push_str(&format!("  l0: &l0 [{xs}]\n"));
        for level in 1..9 {
            let below = level - 1;
            let refs = std::iter::repeat_n(format!("*l{below}"), 9)
                .collect::<Vec<_>>()
                .join(", ");
            text.push_str(&format!("  l{level}: &l{level} [{refs}]\n"));
        }
        let started = Instant::now();
        let e = refused(&text);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(e.field, "kubeconfig");
    }

    #[test]
    fn context_rules() {
        let base = doc(&token_text());
        assert_eq!(
            refused(&with(&base, "contexts", doc("[]"))).field,
            "contexts"
        );
        assert_eq!(refused(&without(&base, "contexts")).field, "contexts");
        assert_eq!(
            refused(&with(
                &base,
                "contexts.0.context.cluster",
                Value::from("nope")
            ))
            .field,
            "contexts[0].context.cluster"
        );
        assert_eq!(
            refused(&with(&base, "contexts.0.context.user", Value::from("nope"))).field,
            "contexts[0].context.user"
        );
        assert_eq!(
            refused(&without(&base, "contexts.0.context.user")).field,
            "contexts[0].context.user"
        );
        assert_eq!(
            refused(&with(&base, "contexts.0.context.namespace", doc("{a: b}"))).field,
            "contexts[0].context.namespace"
        );
        // An unused context is checked too.
        let mut grown = base.clone();
        grown["contexts"]
            .as_sequence_mut()
            .expect("a list")
            .push(doc(
                "{name: other, context: {cluster: gone, user: deployer}}",
            ));
        assert_eq!(
            refused(&text_of(&grown)).field,
            "contexts[1].context.cluster"
        );
        // Two contexts and no current-context.
        let mut two = grown.clone();
        two["contexts"][1]["context"]["cluster"] = Value::from("prod");
        accepted(&text_of(&two));
        let two = without(&two, "current-context");
        assert_eq!(refused(&two).field, "current-context");
    }

    #[test]
    fn duplicate_names_are_refused() {
        let base = doc(&token_text());
        assert_eq!(
            refused(&with_copy(&base, "clusters")).field,
            "clusters[1].name"
        );
        assert_eq!(refused(&with_copy(&base, "users")).field, "users[1].name");
        assert_eq!(
            refused(&with_copy(&base, "contexts")).field,
            "contexts[1].name"
        );
    }

    #[test]
    fn each_user_holds_exactly_one_credential() {
        let base = doc(&token_text());
        assert_eq!(
            refused(&without(&base, "users.0.user.token")).field,
            "users[0].user"
        );
        assert_eq!(
            refused(&with(&base, "users.0.user", doc("{}"))).field,
            "users[0].user"
        );
        let mut both = base.clone();
        both["users"][0]["user"][CERT_DATA] = Value::from(b64(PEM));
        both["users"][0]["user"][KEY_DATA] = Value::from(b64(KEY_PEM));
        assert_eq!(refused(&text_of(&both)).field, "users[0].user");

        let cert = doc(&cert_text());
        assert_eq!(
            refused(&without(&cert, "users.0.user.client-key-data")).field,
            "users[0].user.client-key-data"
        );
        assert_eq!(
            refused(&without(&cert, "users.0.user.client-certificate-data")).field,
            "users[0].user.client-certificate-data"
        );
        // An unused user is checked too.
        let mut unused = base.clone();
        unused["users"]
            .as_sequence_mut()
            .expect("a list")
            .push(doc("{name: other, user: {}}"));
        assert_eq!(refused(&text_of(&unused)).field, "users[1].user");
    }

    #[test]
    fn servers_other_than_plain_https_urls_are_refused() {
        let base = doc(&token_text());
        let path = "clusters.0.cluster.server";
        for server in [
            "http://api.example.com",
            "ftp://api.example.com",
            "https://user:pw@api.example.com",
            "https://api.example.com/?a=b",
            "https://api.example.com?",
            "https://api.example.com#frag",
            "https://api.example.com:99999",
            "https://api.example.com:0",
            "https://api.example.com:",
            "https://api.example.com:x",
            "api.example.com",
            "https://",
            "https:///path",
            "https://exa mple.com",
            "https://ex!ample.com",
            "https://a..b",
            "https://-bad.example.com",
            "https://1.2.3",
            "https://0x7f.1",
            "https://[fe80::1%25eth0]",
            "https://[::1",
            "https://[::1]x",
            "https://evil.example/../10.96.0.1_443",
            "https://evil.example/a/./b",
            "https://evil.example//k8s",
            "https://evil.example/%2e%2e/x",
            "",
        ] {
            let e = refused(&with(&base, path, Value::from(server)));
            assert_eq!(e.field, "clusters[0].cluster.server", "{server}");
        }
        assert_eq!(
            refused(&with(&base, path, doc("5"))).field,
            "clusters[0].cluster.server"
        );
        assert_eq!(
            refused(&without(&base, path)).field,
            "clusters[0].cluster.server"
        );
        // An unused cluster is checked too.
        let mut unused = base.clone();
        unused["clusters"]
            .as_sequence_mut()
            .expect("a list")
            .push(doc("{name: other, cluster: {server: 'http://x'}}"));
        assert_eq!(
            refused(&text_of(&unused)).field,
            "clusters[1].cluster.server"
        );
    }

    #[test]
    fn data_that_is_not_base64_pem_is_refused() {
        let base = doc(&token_text());
        let ca = "clusters.0.cluster.certificate-authority-data";
        let hello = b64("hello");
        for data in ["not base64!", "", "LS0tLS1CRUdJTi", hello.as_str()] {
            assert_eq!(
                refused(&with(&base, ca, Value::from(data))).field,
                field_of(ca),
                "{data}"
            );
        }
        assert_eq!(refused(&with(&base, ca, doc("[a]"))).field, field_of(ca));
        let cert = doc(&cert_text());
        for path in [
            "users.0.user.client-key-data",
            "users.0.user.client-certificate-data",
        ] {
            assert_eq!(
                refused(&with(&cert, path, Value::from("%%%"))).field,
                field_of(path)
            );
            assert_eq!(
                refused(&with(&cert, path, Value::from(b64("no pem")))).field,
                field_of(path)
            );
        }
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let base = doc(&token_text());
        let path = "users.0.user.token";
        for token in [
            String::new(),
            "   ".to_string(),
            "has space".to_string(),
            "tab\tinside".to_string(),
            "é-token".to_string(),
            "t".repeat(MAX_TOKEN_BYTES + 1),
        ] {
            assert_eq!(
                refused(&with(&base, path, Value::from(token))).field,
                "users[0].user.token"
            );
        }
        assert_eq!(
            refused(&with(&base, path, doc("12345"))).field,
            "users[0].user.token"
        );
    }

    #[test]
    fn cluster_options_are_checked() {
        let base = doc(&token_text());
        let name = "clusters.0.cluster.tls-server-name";
        let too_long = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(62)
        );
        for value in ["bad name", "a..b", "10.0.0.1", too_long.as_str()] {
            assert_eq!(
                refused(&with(&base, name, Value::from(value))).field,
                field_of(name),
                "{value}"
            );
        }
        let insecure = "clusters.0.cluster.insecure-skip-tls-verify";
        assert_eq!(
            refused(&with(&base, insecure, Value::from(true))).field,
            field_of(insecure)
        );
        assert_eq!(
            refused(&with(&base, insecure, Value::from("yes"))).field,
            field_of(insecure)
        );
        let compression = "clusters.0.cluster.disable-compression";
        assert_eq!(
            refused(&with(&base, compression, Value::from("no"))).field,
            field_of(compression)
        );
    }

    #[test]
    fn helm_kubeconfig_round_trips_to_the_same_digest() {
        for text in [token_text(), cert_text(), MULTI_DOC.to_string()] {
            let access = accepted(&text);
            let written = access.helm_kubeconfig();
            let again = accepted(&written);
            assert_eq!(again.digest(), access.digest());
            assert_eq!(again.server, access.server);
            let digest = access.digest();
            assert_eq!(digest.len(), 64);
            assert!(
                digest
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            );
            // One cluster, user and context, all named "remote".
            let value = doc(&written);
            for list in ["clusters", "users", "contexts"] {
                let entries = value[list].as_sequence().expect("a list");
                assert_eq!(entries.len(), 1);
                assert_eq!(entries[0]["name"].as_str(), Some("remote"));
            }
            assert_eq!(value["current-context"].as_str(), Some("remote"));
        }
    }

    #[test]
    fn kube_reads_helm_kubeconfig_as_kubeconfig_builds_it() {
        for text in [token_text(), cert_text()] {
            let access = accepted(&text);
            let read = kube::config::Kubeconfig::from_yaml(&access.helm_kubeconfig())
                .expect("kube reads it");
            assert_eq!(
                serde_json::to_value(read).expect("json"),
                serde_json::to_value(access.kubeconfig()).expect("json")
            );
        }
    }

    #[test]
    fn the_digest_follows_credentials_and_cluster_not_names() {
        let base = doc(&token_text());
        let digest = accepted(&text_of(&base)).digest();
        let other_token = accepted(&with(
            &base,
            "users.0.user.token",
            Value::from("other-token"),
        ));
        assert_ne!(other_token.digest(), digest);
        let other_port = accepted(&with(
            &base,
            "clusters.0.cluster.server",
            Value::from("https://api.example.com:6444"),
        ));
        assert_ne!(other_port.digest(), digest);
        let mut renamed = base.clone();
        renamed["clusters"][0]["name"] = Value::from("elsewhere");
        renamed["contexts"][0]["context"]["cluster"] = Value::from("elsewhere");
        renamed["users"][0]["name"] = Value::from("someone");
        renamed["contexts"][0]["context"]["user"] = Value::from("someone");
        assert_eq!(accepted(&text_of(&renamed)).digest(), digest);
    }

    #[test]
    fn debug_shows_no_credential() {
        let access = accepted(&with(
            &doc(&token_text()),
            "users.0.user.token",
            Value::from(PLANT),
        ));
        let shown = format!("{access:?}");
        assert!(!shown.contains(PLANT), "{shown}");
        assert!(shown.contains("token"), "{shown}");
        let access = accepted(&cert_text());
        let shown = format!("{access:?}");
        assert!(
            !shown.contains("BEGIN") && !shown.contains("MHcC"),
            "{shown}"
        );
    }

    #[tokio::test]
    async fn check_address_refuses_denied_networks() {
        let policy = AddressPolicy::default();
        let lookup = crate::delivery::remote::connect::system_lookup();
        let access = accepted(MULTI_DOC);
        let e = check_address(&access, &policy, &lookup)
            .await
            .expect_err("link-local");
        assert_eq!(e.field, "clusters[1].cluster.server");
        assert!(e.message.contains("169.254.0.0/16"), "{e}");

        let base = doc(&token_text());
        let server = "clusters.0.cluster.server";
        let mapped = accepted(&with(
            &base,
            server,
            Value::from("https://[::ffff:169.254.169.254]"),
        ));
        assert_eq!(
            check_address(&mapped, &policy, &lookup)
                .await
                .expect_err("mapped")
                .field,
            "clusters[0].cluster.server"
        );
        let private = accepted(&with(&base, server, Value::from("https://10.1.2.3:6443")));
        assert_eq!(check_address(&private, &policy, &lookup).await, Ok(()));

        // A name is resolved (localhost: from /etc/hosts) and never said.
        let loopback = AddressPolicy::parse("127.0.0.0/8,::1/128").expect("a policy");
        let named = accepted(&with(&base, server, Value::from("https://localhost:6443")));
        let e = check_address(&named, &loopback, &lookup)
            .await
            .expect_err("loopback");
        assert_eq!(e.field, "clusters[0].cluster.server");
        assert!(!e.to_string().contains("localhost"), "{e}");
    }

    #[test]
    fn pinned_to_names_the_address_and_verifies_the_host_name() {
        let base = doc(&token_text());
        let server = "clusters.0.cluster.server";
        let named = accepted(&with(
            &base,
            server,
            Value::from("https://api.example.test:6443/k8s/clusters/c-1/"),
        ));
        let pinned = named.pinned_to("10.1.2.3".parse().unwrap());
        assert_eq!(pinned.server, "https://10.1.2.3:6443/k8s/clusters/c-1");
        assert_eq!(pinned.host, "10.1.2.3");
        assert_eq!(pinned.tls_server_name.as_deref(), Some("api.example.test"));
        assert_eq!(pinned.token, named.token);
        let text = pinned.helm_kubeconfig();
        assert!(
            !text.contains("\"server\": \"https://api.example.test"),
            "{text}"
        );

        let v6 = named.pinned_to("2001:db8::7".parse().unwrap());
        assert_eq!(v6.server, "https://[2001:db8::7]:6443/k8s/clusters/c-1");

        // A name the kubeconfig gave for verification is kept.
        let mut given = accepted(&with(
            &base,
            server,
            Value::from("https://api.example.test"),
        ));
        given.tls_server_name = Some("other.example.test".into());
        let pinned = given.pinned_to("10.1.2.3".parse().unwrap());
        assert_eq!(pinned.server, "https://10.1.2.3:443");
        assert_eq!(
            pinned.tls_server_name.as_deref(),
            Some("other.example.test")
        );

        // An IP literal needs no name to verify against.
        let literal = accepted(&with(&base, server, Value::from("https://10.9.8.7:6443")));
        assert_eq!(
            literal
                .pinned_to("10.9.8.7".parse().unwrap())
                .tls_server_name,
            None
        );
    }

    /// Hostile documents with a planted secret in wrong places: refused,
    /// and the refusal never says it.
    #[test]
    fn refusals_never_quote_the_document() {
        let base = doc(&token_text());
        let plant = Value::from(PLANT);
        let mut duplicated = base.clone();
        duplicated["clusters"][0]["name"] = plant.clone();
        duplicated["contexts"][0]["context"]["cluster"] = plant.clone();
        let texts = [
            with_copy(&duplicated, "clusters"),
            with(&base, "users.0.user.secret", plant.clone()),
            with(
                &base,
                "users.0.user.exec",
                doc(&format!("{{command: sh, args: [{PLANT}]}}")),
            ),
            with(&base, "contexts.0.name", plant.clone()),
            with(&base, "current-context", plant.clone()),
            with(&base, "clusters.0.cluster.server", plant.clone()),
            with(
                &base,
                "clusters.0.cluster.server",
                Value::from(format!("https://{PLANT}@h")),
            ),
            with(
                &base,
                "clusters.0.cluster.server",
                Value::from(format!("http://{PLANT}")),
            ),
            with(
                &base,
                "clusters.0.cluster.server",
                Value::from(format!("https://h/?{PLANT}")),
            ),
            with(
                &base,
                "clusters.0.cluster.server",
                Value::from(format!("https://h#{PLANT}")),
            ),
            with(
                &base,
                "clusters.0.cluster.server",
                Value::from(format!("https://{PLANT}:99999")),
            ),
            with(
                &base,
                "clusters.0.cluster.certificate-authority-data",
                Value::from(format!("{PLANT}!")),
            ),
            with(
                &base,
                "clusters.0.cluster.certificate-authority-data",
                Value::from(b64(PLANT)),
            ),
            with(
                &base,
                "clusters.0.cluster.tls-server-name",
                Value::from(format!("{PLANT} x")),
            ),
            with(
                &base,
                "clusters.0.cluster.insecure-skip-tls-verify",
                plant.clone(),
            ),
            with(
                &base,
                "users.0.user.token",
                Value::from(format!("{PLANT} {PLANT}")),
            ),
            with(&base, "users.0.user.client-key-data", plant.clone()),
            with(&base, "apiVersion", plant.clone()),
            with(&base, "kind", plant.clone()),
            with(&base, "preferences", plant.clone()),
            with(&base, PLANT, plant.clone()),
            with(&base, "contexts.0.context.cluster", plant.clone()),
            with(
                &base,
                "contexts.0.context.namespace",
                doc(&format!("{{{PLANT}: {PLANT}}}")),
            ),
            format!("{PLANT}: 1\n{PLANT}: 2\n"),
            format!("token: \"{PLANT}\n"),
            format!("clusters: [{PLANT}\n"),
            PLANT.to_string(),
            format!("- {PLANT}\n"),
        ];
        for text in &texts {
            let e = refused(text);
            assert!(!e.to_string().contains(PLANT), "{e}");
            assert!(!format!("{e:?}").contains(PLANT), "{e:?}");
        }
    }

    /// A tiny deterministic generator (xorshift64), so a failure replays.
    struct Rng(u64);

    impl Rng {
        fn next_u64(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next_u64() % n.max(1) as u64) as usize
        }
    }

    /// One step of a path into a document.
    #[derive(Clone, Copy)]
    enum Step {
        Key(&'static str),
        Index(usize),
    }

    fn step_mut<'a>(value: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
        match path.split_first() {
            None => Some(value),
            Some((Step::Key(key), rest)) => step_mut(value.get_mut(*key)?, rest),
            Some((Step::Index(i), rest)) => step_mut(value.get_mut(*i)?, rest),
        }
    }

    const LISTS: [(&str, &str); 3] = [
        ("clusters", "cluster"),
        ("users", "user"),
        ("contexts", "context"),
    ];

    /// The mappings whose keys [`parse`] checks: the top, and each entry
    /// and its cluster, user or context.
    fn checked_mappings(document: &Value) -> Vec<Vec<Step>> {
        let mut places = vec![Vec::new()];
        for (list, item) in LISTS {
            let count = document
                .get(list)
                .and_then(Value::as_sequence)
                .map_or(0, |s| s.len());
            for i in 0..count {
                places.push(vec![Step::Key(list), Step::Index(i)]);
                places.push(vec![Step::Key(list), Step::Index(i), Step::Key(item)]);
            }
        }
        places
    }

    fn has_forbidden_key(document: &Value) -> bool {
        let mut copy = document.clone();
        checked_mappings(document).iter().any(|place| {
            step_mut(&mut copy, place)
                .and_then(|value| value.as_mapping())
                .is_some_and(|map| {
                    map.keys()
                        .filter_map(Value::as_str)
                        .any(|key| FORBIDDEN.iter().any(|(name, _)| *name == key))
                })
        })
    }

    const NOISE: &[u8] = b"abcXYZ019-_.:/@?#[]% !\"'\\\n\t{}*&|>~=,";

    fn noise(rng: &mut Rng) -> String {
        let len = rng.below(6);
        (0..len)
            .map(|_| char::from(NOISE[rng.below(NOISE.len())]))
            .collect()
    }

    fn planted_string(rng: &mut Rng) -> String {
        let prefix = ["https://", "", "https://[", "LS0t", "http://"][rng.below(5)];
        let before = noise(rng);
        let after = noise(rng);
        format!("{prefix}{before}{PLANT}{after}")
    }

    fn planted_value(rng: &mut Rng) -> Value {
        match rng.below(8) {
            0 => Value::Sequence(vec![Value::from(PLANT)]),
            1 => doc(&format!("{{{PLANT}: {PLANT}}}")),
            2 => Value::Null,
            3 => Value::from(true),
            _ => Value::from(planted_string(rng)),
        }
    }

    /// One random change of `document`: a key deleted, an entry
    /// duplicated, a forbidden key inserted, or a value replaced.
    fn mutate(document: &mut Value, rng: &mut Rng) {
        let kind = rng.below(4);
        if kind == 1 {
            let (list, _) = LISTS[rng.below(LISTS.len())];
            if let Some(entries) = document.get_mut(list).and_then(Value::as_sequence_mut)
                && !entries.is_empty()
            {
                let copy = entries[rng.below(entries.len())].clone();
                entries.push(copy);
            }
            return;
        }
        let places = checked_mappings(document);
        let place = places[rng.below(places.len())].clone();
        let Some(map) = step_mut(document, &place).and_then(Value::as_mapping_mut) else {
            return;
        };
        match kind {
            0 => {
                let key = map.keys().nth(rng.below(map.len())).cloned();
                if let Some(key) = key {
                    map.shift_remove(&key);
                }
            }
            2 => {
                let (name, _) = FORBIDDEN[rng.below(FORBIDDEN.len())];
                let value = match rng.below(3) {
                    0 => Value::from(PLANT),
                    1 => doc(&format!("{{command: {PLANT}, args: [{PLANT}]}}")),
                    _ => Value::Sequence(vec![Value::from(PLANT)]),
                };
                map.insert(Value::from(name), value);
            }
            _ => {
                let key = map.keys().nth(rng.below(map.len())).cloned();
                if let Some(key) = key {
                    let value = planted_value(rng);
                    map.insert(key, value);
                }
            }
        }
    }

    /// A few thousand random mutations of valid kubeconfigs: no panic, no
    /// forbidden key accepted, no refusal quoting the planted secret, and
    /// what is accepted writes a kubeconfig that reads back the same.
    #[test]
    fn hunt() {
        let two_of_each = doc(&token_text().replace(
            "current-context: prod\n",
            "- name: spare\n  context: {cluster: prod, user: deployer}\ncurrent-context: prod\n",
        ));
        let bases = [
            doc(&token_text()),
            doc(&cert_text()),
            doc(MULTI_DOC),
            two_of_each,
        ];
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut oks, mut errs) = (0, 0);
        for round in 0..2000 {
            let mut document = bases[round % bases.len()].clone();
            for _ in 0..=rng.below(3) {
                mutate(&mut document, &mut rng);
            }
            let mut bytes = text_of(&document).into_bytes();
            let corrupted = rng.below(8) == 0;
            if corrupted {
                let position = rng.below(bytes.len());
                match rng.below(3) {
                    0 => {
                        let tail = bytes.split_off(position);
                        bytes.extend_from_slice(PLANT.as_bytes());
                        bytes.extend_from_slice(&tail);
                    }
                    1 => bytes.truncate(position),
                    _ => bytes[position] = rng.next_u64() as u8,
                }
            }
            match parse(&bytes) {
                Ok(access) => {
                    oks += 1;
                    assert!(
                        corrupted || !has_forbidden_key(&document),
                        "round {round}: accepted a forbidden key:\n{}",
                        String::from_utf8_lossy(&bytes)
                    );
                    let again = accepted(&access.helm_kubeconfig());
                    assert_eq!(again.digest(), access.digest(), "round {round}");
                }
                Err(e) => {
                    errs += 1;
                    assert!(!e.to_string().contains(PLANT), "round {round}: {e}");
                }
            }
        }
        assert!(oks > 0 && errs > 0, "{oks} accepted, {errs} refused");
    }
}
