//! Remote clusters (issue 53): a HelmApp whose `spec.kubeConfig.secretRef`
//! names a kubeconfig for another cluster releases in that cluster. Two
//! real control planes: A, the operator's (the Fixture's), and B, started
//! here with an audit log (what B decides about a request is read from
//! there, not from log text). Helm runs through a wrapper that logs every
//! command line, and the mode of each kubeconfig file it is given as it
//! starts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use envtest::ControlPlane;
use k8s_openapi::api::core::v1::{Event, Namespace};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{ListParams, ObjectMeta};

use super::*;

/// Where B's deployer ServiceAccount lives.
const DEPLOYER_NS: &str = "hossted-remote";
/// Whom B's kubeconfig authenticates as: a ServiceAccount of B bound to
/// cluster-admin (so it may impersonate).
const DEPLOYER: &str = "system:serviceaccount:hossted-remote:deployer";
/// The ServiceAccount `limited` of the HelmApps' namespace [`NS`].
const LIMITED: &str = "system:serviceaccount:apps:limited";
/// The Secret in A's [`NS`] that holds B's kubeconfig.
const CLUSTER_B: &str = "cluster-b";

/// Cluster B: a control plane of its own, with an audit log, and the text
/// of a kubeconfig for it (B's URL, B's CA inline, a bound token of
/// [`DEPLOYER`]).
struct Remote {
    cp: ControlPlane,
    audit: PathBuf,
    kubeconfig: String,
}

impl Remote {
    /// Starts B; binds [`DEPLOYER`] to cluster-admin and waits until B's
    /// authorizer says so.
    async fn start() -> Remote {
        let (cp, audit) = audited_control_plane().await;
        let path = cp
            .kubeconfig_for_service_account(DEPLOYER_NS, "deployer")
            .await
            .expect("a token kubeconfig for B's deployer");
        let binding = format!(
            r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{ name: remote-deployer }}
roleRef: {{ apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin }}
subjects: [{{ kind: ServiceAccount, name: deployer, namespace: {DEPLOYER_NS} }}]
"#
        );
        apply_yaml(&cp, "remote-deployer.yaml", &binding);
        authorizer_allows(
            &cp,
            DEPLOYER,
            "impersonate",
            "",
            "serviceaccounts",
            Some(NS),
        )
        .await;
        authorizer_allows(
            &cp,
            DEPLOYER,
            "create",
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            None,
        )
        .await;
        // B by name, not address: the operator resolves it, checks the
        // answer, and hands helm the address with the name to verify.
        let kubeconfig = std::fs::read_to_string(&path)
            .expect("reading B's kubeconfig")
            .replace("https://127.0.0.1:", "https://localhost:");
        assert!(kubeconfig.contains("https://localhost:"), "{kubeconfig}");
        Remote {
            cp,
            audit,
            kubeconfig,
        }
    }

    /// Creates namespace `name` in B (already there is fine).
    async fn namespace(&self, name: &str) {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        match Api::<Namespace>::all(self.cp.client())
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("creating namespace {name} in B: {e}"),
        }
    }

    /// Secret `name` in A's [`NS`] holding B's kubeconfig under key `key`.
    async fn kubeconfig_secret(&self, f: &Fixture, name: &str, key: &str) {
        f.secret(NS, name, &[(key, self.kubeconfig.as_str())]).await;
    }

    /// The bearer token of B's kubeconfig.
    fn token(&self) -> String {
        let doc: serde_json::Value =
            serde_yaml_ng::from_str(&self.kubeconfig).expect("B's kubeconfig is YAML");
        doc["users"][0]["user"]["token"]
            .as_str()
            .expect("B's kubeconfig has a token")
            .to_string()
    }

    /// The revisions of `release`'s storage Secrets in B's `ns`, sorted.
    async fn storage(&self, ns: &str, release: &str) -> Vec<i64> {
        let mut revisions: Vec<i64> = Api::<Secret>::namespaced(self.cp.client(), ns)
            .list(&ListParams::default().labels(&format!("owner=helm,name={release}")))
            .await
            .expect("listing the storage in B")
            .items
            .into_iter()
            .filter_map(|s| s.metadata.labels?.get("version")?.parse().ok())
            .collect();
        revisions.sort();
        revisions
    }

    /// ConfigMap `ns/name` in B, if there.
    async fn configmap(&self, ns: &str, name: &str) -> Option<ConfigMap> {
        Api::<ConfigMap>::namespaced(self.cp.client(), ns)
            .get_opt(name)
            .await
            .expect("reading a ConfigMap in B")
    }

    /// The events of B's audit log (one JSON object per request).
    fn audit_events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .collect()
    }
}

/// `kubectl apply` of `yaml` on `cp` (A or B), written to `file` in its
/// directory first.
fn apply_yaml(cp: &ControlPlane, file: &str, yaml: &str) {
    let path = cp.dir().join(file);
    std::fs::write(&path, yaml).expect("writing a manifest");
    output_ok(cp.kubectl().args(["apply", "-f"]).arg(&path));
}

/// Waits until `cp`'s authorizer lets `user` `verb` `resource` (RBAC
/// changes reach it through its cache).
async fn authorizer_allows(
    cp: &ControlPlane,
    user: &str,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
) {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
    };
    let reviews: Api<SubjectAccessReview> = Api::all(cp.client());
    let what = format!("the authorizer to let {user} {verb} {resource} in {namespace:?}");
    eventually(&what, 30, || async {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.into()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: namespace.map(str::to_string),
                    verb: Some(verb.into()),
                    group: Some(group.into()),
                    resource: Some(resource.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .expect("a SubjectAccessReview");
        answer.status?.allowed.then_some(())
    })
    .await;
}

/// `spec.kubeConfig` naming Secret `secret`, key `key` (`None`: no key,
/// the operator's default).
fn kube_config(secret: &str, key: Option<&str>) -> serde_json::Value {
    let mut reference = json!({ "secretRef": { "name": secret } });
    if let Some(key) = key {
        reference["secretRef"]["key"] = json!(key);
    }
    reference
}

/// A helm that logs each run's command line to `helm-runs.log` and, for
/// each kubeconfig file it is given, `<mode> <path>` (`stat -c %a`; no mode
/// when the file is not there) to `kubeconfig-modes.log` and `<path>
/// <server> <tls-server-name>` to `kubeconfig-modes.log.servers`, then
/// runs the real one; returns (wrapper, runs log, modes log).
fn remote_helm(f: &Fixture) -> (PathBuf, PathBuf, PathBuf) {
    let helm = f.cp.helm_binary();
    let log = f.cp.dir().join("helm-runs.log");
    let modes = f.cp.dir().join("kubeconfig-modes.log");
    let wrapper = f.cp.dir().join("remote-helm.sh");
    let script = r##"#!/bin/sh
@VERSION@echo "$*" >> '@LOG@'
prev=
for a in "$@"; do
  k=
  case "$a" in --kubeconfig=*) k="${a#--kubeconfig=}" ;; esac
  if [ "$prev" = --kubeconfig ]; then k="$a"; fi
  if [ -n "$k" ]; then
    echo "$(stat -c %a "$k" 2>/dev/null) $k" >> '@MODES@'
    echo "$k $(sed -n 's/.*"server": "\([^"]*\)".*/\1/p' "$k") $(sed -n 's/.*"tls-server-name": "\([^"]*\)".*/\1/p' "$k")" >> '@MODES@.servers'
  fi
  prev="$a"
done
exec '@HELM@' "$@"
"##
    .replace("@VERSION@", &version_passes_through(&helm))
    .replace("@LOG@", &log.display().to_string())
    .replace("@MODES@", &modes.display().to_string())
    .replace("@HELM@", &helm.display().to_string());
    std::fs::write(&wrapper, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    (wrapper, log, modes)
}

/// The values of `flag` (`--flag v` or `--flag=v`) among a run's flags
/// (before the `--` that starts the names).
fn flag_values(call: &HelmCall, flag: &str) -> Vec<String> {
    let prefix = format!("{flag}=");
    let mut values = Vec::new();
    let mut words = call.words.iter().take_while(|w| *w != "--");
    while let Some(w) = words.next() {
        if w == flag {
            values.extend(words.next().cloned());
        } else if let Some(v) = w.strip_prefix(&prefix) {
            values.push(v.to_string());
        }
    }
    values
}

/// The helm runs on `release` the wrapper logged, each checked: given one
/// `--kubeconfig`, a file of its own under the operator's work directory —
/// not A's kubeconfig — there with mode 0600 when helm started, and gone
/// once the run is over. B's kubeconfig names it `localhost`: each run's
/// names the address that resolved to, with `localhost` as the name the
/// certificate is verified for (docs/remote-clusters.md "Addresses").
async fn runs_through_a_kubeconfig_of_their_own(
    f: &Fixture,
    log: &Path,
    modes: &Path,
    release: &str,
) -> Vec<HelmCall> {
    let work_dir = f.delivery_settings().helm.work_dir;
    let runs: Vec<HelmCall> = helm_calls(log)
        .into_iter()
        .filter(|c| c.on(release))
        .collect();
    assert!(!runs.is_empty(), "no helm run on {release}");
    let seen = std::fs::read_to_string(modes).unwrap_or_default();
    let mut files = Vec::new();
    for call in &runs {
        let given = flag_values(call, "--kubeconfig");
        assert_eq!(given.len(), 1, "one --kubeconfig: {:?}", call.words);
        let file = PathBuf::from(&given[0]);
        assert!(
            file.starts_with(&work_dir),
            "the kubeconfig {} is not under the work directory {}",
            file.display(),
            work_dir.display()
        );
        assert!(
            file.as_path() != f.cp.kubeconfig_path(),
            "helm was given A's kubeconfig: {:?}",
            call.words
        );
        let mode = seen
            .lines()
            .filter_map(|l| l.split_once(' '))
            .find(|(_, p)| Path::new(p) == file.as_path())
            .map(|(m, _)| m);
        assert_eq!(
            mode,
            Some("600"),
            "the mode of {} as helm started",
            file.display()
        );
        let servers =
            std::fs::read_to_string(modes.with_extension("log.servers")).unwrap_or_default();
        let named = servers
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .find(|w| Path::new(w[0]) == file.as_path())
            .map(|w| (w.get(1).copied(), w.get(2).copied()));
        let (server, verified_as) =
            named.unwrap_or_else(|| panic!("{} not logged", file.display()));
        assert!(
            server.is_some_and(|s| s.starts_with("https://127.0.0.1:")),
            "helm was handed the checked address, not the name: {server:?}"
        );
        assert_eq!(verified_as, Some("localhost"), "tls-server-name");
        files.push(file);
    }
    eventually(
        &format!("{release}'s kubeconfig files removed"),
        30,
        || async { files.iter().all(|p| !p.exists()).then_some(()) },
    )
    .await;
    runs
}

/// `(status, reason)` of condition `type_` of `app`.
fn condition(app: &HelmApp, type_: &str) -> Option<(String, String)> {
    app.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

fn greeting(cm: &ConfigMap) -> Option<&str> {
    cm.data.as_ref()?.get("greeting").map(String::as_str)
}

/// A `kubectl edit` of ConfigMap `name`'s greeting in B's [`NS`].
async fn edit_greeting_in(b: &Remote, name: &str, value: &str) {
    let params = PatchParams {
        field_manager: Some("kubectl-edit".into()),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(b.cp.client(), NS)
        .patch(
            name,
            &params,
            &Patch::Merge(json!({ "data": { "greeting": value } })),
        )
        .await
        .expect("editing the ConfigMap in B");
}

/// A HelmApp whose kubeConfig names cluster B releases in B, as the
/// kubeconfig's identity: every helm run on it is given a kubeconfig file
/// of its own (0600, under the operator's work directory, removed after
/// the run; the token never on a command line) and no `--kube-as-user`,
/// and B's audit log shows helm storing the release as the deployer, with
/// nothing impersonated. The storage Secret and the chart's ConfigMap are
/// in B and nowhere in A; status and Events stay on the HelmApp in A. An
/// edit in B is reported as drift (warn, the default: left as it is), and
/// put back once `drift.mode` is `enabled`. Deleting the HelmApp
/// uninstalls the release from B.
#[tokio::test]
async fn a_release_goes_to_the_cluster_its_kubeconfig_names() {
    let (f, b) = tokio::join!(Fixture::new(), Remote::start());
    f.namespace(NS).await;
    b.namespace(NS).await;
    b.kubeconfig_secret(&f, CLUSTER_B, "value").await;
    let (wrapper, log, modes) = remote_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply(
        &f,
        "web",
        json!({ "chart": { "path": "reach" }, "kubeConfig": kube_config(CLUSTER_B, Some("value")) }),
    )
    .await;
    ready(&f, "web", "InstallSucceeded", 1).await;

    // The release is in B …
    assert_eq!(b.storage(NS, "web").await, [1], "the storage Secret in B");
    let cm = b
        .configmap(NS, "web-reach")
        .await
        .expect("the chart's ConfigMap in B");
    assert_eq!(greeting(&cm), Some("hello"));
    // … and nothing of it in A.
    assert!(revisions(&f, "web").await.is_empty(), "storage in A");
    let storage_in_a = Api::<Secret>::all(f.cp.client())
        .list(&ListParams::default().labels("owner=helm"))
        .await
        .unwrap();
    assert!(
        storage_in_a.items.is_empty(),
        "helm storage in A: {:?}",
        storage_in_a
            .items
            .iter()
            .map(|s| s.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    assert!(
        Api::<ConfigMap>::namespaced(f.cp.client(), NS)
            .get_opt("web-reach")
            .await
            .unwrap()
            .is_none(),
        "the chart's ConfigMap in A"
    );

    // Helm ran through a kubeconfig of its own, as the kubeconfig's
    // identity.
    let runs = runs_through_a_kubeconfig_of_their_own(&f, &log, &modes, "web").await;
    for call in &runs {
        assert!(
            flag_values(call, "--kube-as-user").is_empty(),
            "impersonates: {:?}",
            call.words
        );
    }
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        !logged.contains(&b.token()),
        "B's token on a helm command line"
    );
    eventually(
        "B's audit log: the release stored by the deployer",
        30,
        || async {
            b.audit_events()
                .iter()
                .any(|e| {
                    e["user"]["username"] == DEPLOYER
                        && e["impersonatedUser"].is_null()
                        && e["verb"] == "create"
                        && e["objectRef"]["resource"] == "secrets"
                        && e["objectRef"]["namespace"] == NS
                        && e["responseStatus"]["code"] == 201
                })
                .then_some(())
        },
    )
    .await;
    let impersonated: Vec<String> = b
        .audit_events()
        .iter()
        .filter(|e| !e["impersonatedUser"].is_null())
        .map(|e| e["requestURI"].to_string())
        .collect();
    assert!(
        impersonated.is_empty(),
        "requests to B impersonated someone: {impersonated:?}"
    );

    // An edit in B is reported (warn, the default), and left as it is.
    operator.settle().await;
    edit_greeting_in(&b, "web-reach", "edited-in-b").await;
    let app = eventually("the edit in B reported", 60, || async {
        let app = get(&f, "web").await?;
        (condition(&app, "Drifted")?.0 == "True").then_some(app)
    })
    .await;
    assert_eq!(condition(&app, "Drifted").unwrap().1, "DriftDetected");
    let drift = &app.status.as_ref().unwrap().drift;
    assert_eq!(drift.len(), 1, "{drift:?}");
    assert_eq!(
        (drift[0].kind.as_str(), drift[0].name.as_str()),
        ("ConfigMap", "web-reach")
    );
    assert_eq!(drift[0].fields, ["/data/greeting"]);
    operator.settle().await;
    assert_eq!(
        greeting(&b.configmap(NS, "web-reach").await.unwrap()),
        Some("edited-in-b"),
        "warn changed the object in B"
    );

    // drift.mode: enabled — once the operator has taken the change in, an
    // edit in B is put back.
    patch(
        &f,
        "web",
        json!({ "spec": { "drift": { "mode": "enabled" } } }),
    )
    .await;
    eventually("the mode change taken in", 60, || async {
        let app = get(&f, "web").await?;
        (app.status.as_ref()?.observed_generation == app.metadata.generation).then_some(())
    })
    .await;
    operator.settle().await;
    edit_greeting_in(&b, "web-reach", "edited-again").await;
    eventually("the edit in B put back", 60, || async {
        let app = get(&f, "web").await?;
        let cm = b.configmap(NS, "web-reach").await?;
        (greeting(&cm) == Some("hello") && app.status?.drift.is_empty()).then_some(())
    })
    .await;
    an_event(&f, NS, "web", "DriftRepaired").await;
    // Status and Events on the HelmApp in A; no Event about it in B.
    let events_in_b = Api::<Event>::all(b.cp.client())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(
        !events_in_b
            .items
            .iter()
            .any(|e| e.involved_object.kind.as_deref() == Some("HelmApp")),
        "an Event about the HelmApp in B"
    );

    // Deleted: uninstalled from B.
    Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the HelmApp gone", 60, || async {
        get(&f, "web").await.is_none().then_some(())
    })
    .await;
    eventually("the release gone from B", 30, || async {
        (b.storage(NS, "web").await.is_empty() && b.configmap(NS, "web-reach").await.is_none())
            .then_some(())
    })
    .await;
    let runs = runs_through_a_kubeconfig_of_their_own(&f, &log, &modes, "web").await;
    assert_eq!(
        runs.iter().filter(|c| c.subcommand == "uninstall").count(),
        1,
        "one uninstall, through B's kubeconfig"
    );
    operator.stop().await;
}

/// With `serviceAccountName: limited`, helm acts in B as that
/// ServiceAccount of the HelmApp's namespace: every run carries
/// `--kube-as-user system:serviceaccount:apps:limited` beside its own
/// `--kubeconfig`, the kubeconfig's deployer impersonating it, and B's RBAC
/// decides. What `limited`'s Role allows installs (B's audit log shows the
/// storage written as `limited`); a ClusterRoleBinding is refused by B —
/// `Forbidden` on the HelmApp in A, nothing bound, and nothing helm sent
/// went as the deployer itself.
#[tokio::test]
async fn helm_acts_in_the_remote_cluster_as_the_service_account() {
    let (f, b) = tokio::join!(Fixture::new(), Remote::start());
    f.namespace(NS).await;
    b.namespace(NS).await;
    // In B: `limited`, with a Role over secrets and configmaps of NS only.
    let rbac = format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{ name: limited, namespace: {NS} }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{ name: limited, namespace: {NS} }}
rules:
  - apiGroups: [""]
    resources: [secrets, configmaps]
    verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{ name: limited, namespace: {NS} }}
roleRef: {{ apiGroup: rbac.authorization.k8s.io, kind: Role, name: limited }}
subjects: [{{ kind: ServiceAccount, name: limited, namespace: {NS} }}]
"#
    );
    apply_yaml(&b.cp, "limited-rbac.yaml", &rbac);
    authorizer_allows(&b.cp, LIMITED, "create", "", "configmaps", Some(NS)).await;
    // In A: `limited` may read the kubeconfig Secret, should the operator
    // read it as the HelmApp's identity.
    let reader = format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{ name: limited, namespace: {NS} }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{ name: limited-kubeconfig, namespace: {NS} }}
rules:
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{ name: limited-kubeconfig, namespace: {NS} }}
roleRef: {{ apiGroup: rbac.authorization.k8s.io, kind: Role, name: limited-kubeconfig }}
subjects: [{{ kind: ServiceAccount, name: limited, namespace: {NS} }}]
"#
    );
    apply_yaml(&f.cp, "limited-kubeconfig.yaml", &reader);
    authorizer_allows(&f.cp, LIMITED, "get", "", "secrets", Some(NS)).await;
    b.kubeconfig_secret(&f, CLUSTER_B, "value").await;
    let (wrapper, log, modes) = remote_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    // No key: the operator's default (`value`).
    let spec = |values: serde_json::Value| {
        json!({ "chart": { "path": "reach" }, "serviceAccountName": "limited",
                "kubeConfig": kube_config(CLUSTER_B, None), "values": values })
    };

    // Within the Role: installed in B, written as `limited`.
    apply(&f, "scoped", spec(json!({}))).await;
    ready(&f, "scoped", "InstallSucceeded", 1).await;
    assert_eq!(b.storage(NS, "scoped").await, [1], "the storage in B");
    assert!(b.configmap(NS, "scoped-reach").await.is_some());
    assert!(revisions(&f, "scoped").await.is_empty(), "storage in A");
    eventually(
        "B's audit log: the release stored as limited",
        30,
        || async {
            b.audit_events()
                .iter()
                .any(|e| {
                    e["user"]["username"] == DEPLOYER
                        && e["impersonatedUser"]["username"] == LIMITED
                        && e["verb"] == "create"
                        && e["objectRef"]["resource"] == "secrets"
                        && e["objectRef"]["namespace"] == NS
                        && e["responseStatus"]["code"] == 201
                })
                .then_some(())
        },
    )
    .await;

    // A ClusterRoleBinding: beyond the Role, refused by B.
    apply(&f, "admin", spec(json!({ "clusterAdmin": true }))).await;
    let app = with_reason(&f, "admin", "Forbidden").await;
    assert_eq!(condition(&app, "Ready").unwrap().0, "False");
    let bound_in_b = Api::<ClusterRoleBinding>::all(b.cp.client())
        .get_opt("admin-admin")
        .await
        .unwrap();
    assert!(bound_in_b.is_none(), "bound in B");
    let bound_in_a = Api::<ClusterRoleBinding>::all(f.cp.client())
        .get_opt("admin-admin")
        .await
        .unwrap();
    assert!(bound_in_a.is_none(), "bound in A");
    eventually(
        "B's audit log: the binding refused to limited",
        30,
        || async {
            b.audit_events()
                .iter()
                .any(|e| {
                    e["impersonatedUser"]["username"] == LIMITED
                        && e["objectRef"]["resource"] == "clusterrolebindings"
                        && e["responseStatus"]["code"] == 403
                })
                .then_some(())
        },
    )
    .await;

    // Every run, on either release, as limited through B's kubeconfig.
    for release in ["scoped", "admin"] {
        let runs = runs_through_a_kubeconfig_of_their_own(&f, &log, &modes, release).await;
        for call in &runs {
            assert_eq!(
                flag_values(call, "--kube-as-user"),
                [LIMITED],
                "{release}: {:?}",
                call.words
            );
        }
    }
    // Nothing helm sent to B went as the deployer itself.
    let as_deployer: Vec<String> = b
        .audit_events()
        .iter()
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("Helm"))
        })
        .filter(|e| e["impersonatedUser"]["username"] != LIMITED)
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect();
    assert!(
        as_deployer.is_empty(),
        "helm's requests to B not as limited: {as_deployer:?}"
    );
    operator.stop().await;
}

/// B's apiserver stops answering (frozen: connections open, no answer)
/// after app-b was installed there. Its values changed meanwhile, app-b
/// gets `ClusterUnreachable` and no helm process is started for it
/// through the outage, while app-a, in A, installs. B back, app-b
/// converges: Ready at revision 2 with the new values in B.
#[tokio::test]
async fn an_unreachable_cluster_parks_its_apps_and_no_helm_starts() {
    let (f, b) = tokio::join!(Fixture::new(), Remote::start());
    f.namespace(NS).await;
    b.namespace(NS).await;
    b.kubeconfig_secret(&f, CLUSTER_B, "value").await;
    let (wrapper, log, _) = remote_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply(
        &f,
        "app-b",
        json!({ "chart": { "path": "reach" }, "kubeConfig": kube_config(CLUSTER_B, Some("value")) }),
    )
    .await;
    ready(&f, "app-b", "InstallSucceeded", 1).await;
    assert_eq!(b.storage(NS, "app-b").await, [1]);
    operator.settle().await;
    let runs_on_b = || {
        helm_calls(&log)
            .into_iter()
            .filter(|c| c.on("app-b"))
            .count()
    };
    let before = runs_on_b();

    b.cp.freeze_apiserver();
    // A change app-b must run helm for, and an app of A's own.
    patch(
        &f,
        "app-b",
        json!({ "spec": { "values": { "greeting": "while-down" } } }),
    )
    .await;
    apply(&f, "app-a", json!({ "chart": { "path": "reach" } })).await;
    ready(&f, "app-a", "InstallSucceeded", 1).await;
    assert_eq!(
        revisions(&f, "app-a").await.len(),
        1,
        "app-a's storage in A"
    );
    let parked = with_reason(&f, "app-b", "ClusterUnreachable").await;
    assert_eq!(condition(&parked, "Ready").unwrap().0, "False");
    // A few seconds more of the outage: a retry would start its helm
    // within them (refused runs are retried 2 s apart at first).
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        runs_on_b(),
        before,
        "helm started for app-b while B did not answer"
    );
    b.cp.thaw_apiserver();

    eventually("app-b upgraded in B after the thaw", 120, || async {
        let app = get(&f, "app-b").await?;
        let st = app.status.as_ref()?;
        if !(is_ready(&app)
            && st.revision == 2
            && st.observed_generation == app.metadata.generation)
        {
            return None;
        }
        let cm = b.configmap(NS, "app-b-reach").await?;
        (greeting(&cm) == Some("while-down")).then_some(())
    })
    .await;
    assert_eq!(b.storage(NS, "app-b").await, [1, 2]);
    assert!(runs_on_b() > before, "app-b's upgrade ran after the thaw");
    assert!(b.storage(NS, "app-a").await.is_empty(), "app-a went to B");
    operator.stop().await;
}

/// A first install in B whose record is held for its rollout
/// (`decide::ready::hold`): B stops answering, and the app is parked —
/// not reconciled until B answers again. Its record goes to A's API with
/// the report that parks it (`ClusterUnreachable`, no `Progressing`),
/// long before the hold's cap, not after the outage. (A request to B
/// that goes unanswered later in a reconcile parks the app from
/// `reconcile`'s error arm, which writes the held record too; that race
/// is not staged here.)
#[tokio::test]
async fn a_record_held_for_a_rollout_in_a_cluster_that_stops_answering_is_written_when_parked() {
    let (f, b) = tokio::join!(Fixture::new(), Remote::start());
    f.namespace(NS).await;
    b.namespace(NS).await;
    b.kubeconfig_secret(&f, CLUSTER_B, "value").await;
    let (wrapper, _log, _) = remote_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply(
        &f,
        "slow-b",
        json!({ "chart": { "path": "podinfo" }, "wait": true,
                "kubeConfig": kube_config(CLUSTER_B, Some("value")) }),
    )
    .await;
    // B has no controllers: its Deployment never rolls out; held.
    record_held(&operator).await;
    assert_eq!(get(&f, "slow-b").await.unwrap().status.unwrap().revision, 0);
    assert_eq!(b.storage(NS, "slow-b").await, [1]);

    b.cp.freeze_apiserver();
    // A change brings a reconcile, which finds B not answering.
    patch(
        &f,
        "slow-b",
        json!({ "spec": { "values": { "replicaCount": 0 } } }),
    )
    .await;
    with_reason(&f, "slow-b", "ClusterUnreachable").await;
    // Well within the hold's two minutes.
    let app = eventually("the held record written", 30, || async {
        let app = get(&f, "slow-b").await?;
        (app.status.as_ref()?.revision == 1).then_some(app)
    })
    .await;
    let status = app.status.unwrap();
    assert_eq!(status.inventory_revision, 1, "the run's record");
    assert_eq!(
        sample(&operator.scrape(), "hossted_helmapp_records_held"),
        Some(0.0)
    );
    b.cp.thaw_apiserver();
    operator.stop().await;
}

/// One context, `a`, current.
const ONE_CONTEXT: &str =
    "- name: a\n  context:\n    cluster: a\n    user: u\ncurrent-context: a\n";

/// Two contexts, none current.
const TWO_CONTEXTS: &str = "- name: one\n  context:\n    cluster: a\n    user: u\n\
     - name: two\n  context:\n    cluster: a\n    user: u\n    namespace: kube-system\n";

/// A kubeconfig for A's apiserver (its URL, its CA inline) whose one user
/// `u` has `user_fields` (YAML, indented four spaces), with `contexts`
/// (the list's items, then any `current-context`).
fn kubeconfig_for_a(f: &Fixture, user_fields: &str, contexts: &str) -> String {
    use base64::Engine;
    let ca = std::fs::read(f.cp.dir().join("ca.crt")).expect("A's CA");
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters:\n- name: a\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         users:\n- name: u\n  user:\n{user_fields}\
         contexts:\n{contexts}",
        server = f.cp.server_url(),
        ca = base64::engine::general_purpose::STANDARD.encode(ca),
    )
}

/// Kubeconfigs that would run a program or read the operator's files —
/// an exec plugin (that would create a file), a `tokenFile`, client
/// certificate and key files — or that name no context out of two: each
/// HelmApp gets `InvalidKubeConfig`, no helm runs for any of them, and
/// the plugin's file is never made. (A local app in the same operator
/// installs: the wrapper's log is live.)
#[tokio::test]
async fn a_kubeconfig_that_runs_a_program_or_reads_a_file_is_refused() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let pwned = PathBuf::from(format!("/tmp/pwned-{}", uuid::Uuid::new_v4()));
    let exec = kubeconfig_for_a(
        &f,
        &format!(
            "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"touch {}\"]\n      interactiveMode: Never\n",
            pwned.display()
        ),
        ONE_CONTEXT,
    );
    let token_file = kubeconfig_for_a(
        &f,
        "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n",
        ONE_CONTEXT,
    );
    let cert_files = kubeconfig_for_a(
        &f,
        &format!(
            "    client-certificate: {}\n    client-key: {}\n",
            f.cp.dir().join("apiserver.crt").display(),
            f.cp.dir().join("apiserver.key").display()
        ),
        ONE_CONTEXT,
    );
    let two_contexts = kubeconfig_for_a(&f, "    token: not-a-token\n", TWO_CONTEXTS);
    // (HelmApp, Secret, the key the Secret holds it under, the key the
    // HelmApp names): the default key, the fallback `value.yaml`, and
    // named keys.
    let cases = [
        ("runs-a-program", "exec-plugin", "value", None, exec),
        (
            "reads-a-token-file",
            "token-file",
            "value.yaml",
            None,
            token_file,
        ),
        (
            "reads-key-files",
            "cert-files",
            "value",
            Some("value"),
            cert_files,
        ),
        (
            "names-no-context",
            "two-contexts",
            "config",
            Some("config"),
            two_contexts,
        ),
    ];
    for (_, secret, key, _, kubeconfig) in &cases {
        f.secret(NS, secret, &[(*key, kubeconfig.as_str())]).await;
    }
    let (wrapper, log, _) = remote_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    for (app, secret, _, key, _) in &cases {
        apply(
            &f,
            app,
            json!({ "chart": { "path": "reach" }, "kubeConfig": kube_config(secret, *key) }),
        )
        .await;
    }
    apply(&f, "local", json!({ "chart": { "path": "reach" } })).await;
    ready(&f, "local", "InstallSucceeded", 1).await;
    for (app, ..) in &cases {
        let refused = with_reason(&f, app, "InvalidKubeConfig").await;
        assert_eq!(condition(&refused, "Ready").unwrap().0, "False", "{app}");
    }

    let calls = helm_calls(&log);
    assert!(calls.iter().any(|c| c.on("local")), "the wrapper logs");
    for (app, ..) in &cases {
        let ran: Vec<&HelmCall> = calls
            .iter()
            .filter(|c| c.words.iter().any(|w| w == app))
            .collect();
        assert!(ran.is_empty(), "helm ran for {app}: {ran:?}");
    }
    assert!(
        !pwned.exists(),
        "the exec plugin ran: {} exists",
        pwned.display()
    );
    operator.stop().await;
}

// A hostile remote API server: the tenant's cluster attacks the operator
// through the answers of its LISTs. What the operator holds of one is
// bounded, the HelmApp naming it is parked, and the others go on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use envtest::HostileApiServer;
use envtest::hostile_apiserver::Mode;
use hossted_operator::delivery::helmapp::remote::{MAX_ANSWER_BYTES, MAX_REMOTE_OBJECTS};

/// The Secret in A's [`NS`] holding the hostile API server's kubeconfig.
const HOSTILE: &str = "hostile-cluster";

/// How far the test process's memory (the operator runs in it) may grow
/// while a hostile API server attacks.
const ATTACK_BOUND_MIB: f64 = 256.0;

const MIB: f64 = 1024.0 * 1024.0;

/// Field `field` (`VmHWM`, `VmRSS`) of this process's `/proc/self/status`,
/// in kB.
fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// How far this process's memory grew since [`Growth::start`]: the
/// kernel's high-water mark (`VmHWM`, read as git.rs's `peak_mib` reads
/// it) and the resident size (`VmRSS`) sampled every 100 ms. The mark is
/// not reset (`/proc/self/clear_refs`): the tests of this binary run in
/// one process, and a reset would skew a peak another test is measuring.
/// Unreset, it hides growth below a peak an earlier test left — which the
/// sampled resident size shows.
struct Growth {
    hwm_before: u64,
    rss_before: u64,
    rss_max: Arc<AtomicU64>,
    sampler: tokio::task::JoinHandle<()>,
}

impl Growth {
    fn start() -> Growth {
        let rss_before = status_kb("VmRSS");
        let rss_max = Arc::new(AtomicU64::new(rss_before));
        let sampler = tokio::spawn({
            let rss_max = rss_max.clone();
            async move {
                loop {
                    rss_max.fetch_max(status_kb("VmRSS"), Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        Growth {
            hwm_before: status_kb("VmHWM"),
            rss_before,
            rss_max,
            sampler,
        }
    }

    /// (peak growth, largest resident growth sampled) so far, in MiB.
    fn so_far(&self) -> (f64, f64) {
        let mib = |kb: u64| kb as f64 / 1024.0;
        let rss = self.rss_max.load(Relaxed).max(status_kb("VmRSS"));
        (
            mib(status_kb("VmHWM").saturating_sub(self.hwm_before)),
            mib(rss.saturating_sub(self.rss_before)),
        )
    }
}

impl Drop for Growth {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

/// A hostile API server in `mode` attacks an operator that also serves
/// local HelmApps: HelmApp `hostile`'s kubeConfig names the server (token
/// auth, the server's CA inline). Checks what both attacks must leave
/// true — `hostile` parked (Ready=False, `ClusterUnreachable`) and nothing
/// of it released in A; `local` installed meanwhile, and `local-later`
/// after 20 s more of the attack; the server asked for LISTs (the attack
/// was made); the test process's memory grown by less than
/// [`ATTACK_BOUND_MIB`] — then runs `check` on the server (before the
/// operator stops: stopping ends every connection) and stops the operator.
/// `until`: what the attack must have shown before the checks (looked at
/// for up to two minutes after its 20 s).
async fn attack_of(
    mode: Mode,
    until: impl Fn(&HostileApiServer) -> bool,
    check: impl FnOnce(&HostileApiServer),
) {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let server = HostileApiServer::start(mode)
        .await
        .expect("the hostile API server");
    let kubeconfig = server.kubeconfig("tenant-token");
    f.secret(NS, HOSTILE, &[("value", kubeconfig.as_str())])
        .await;
    let operator = f.start_delivery().await;
    let growth = Growth::start();
    apply(
        &f,
        "hostile",
        json!({ "chart": { "path": "reach" }, "kubeConfig": kube_config(HOSTILE, None) }),
    )
    .await;
    apply(&f, "local", json!({ "chart": { "path": "reach" } })).await;

    let parked = with_reason(&f, "hostile", "ClusterUnreachable").await;
    assert_eq!(condition(&parked, "Ready").unwrap().0, "False", "hostile");
    ready(&f, "local", "InstallSucceeded", 1).await;
    // The attack goes on: the cluster is looked at again, its informers
    // retry their LISTs.
    tokio::time::sleep(Duration::from_secs(20)).await;
    apply(&f, "local-later", json!({ "chart": { "path": "reach" } })).await;
    ready(&f, "local-later", "InstallSucceeded", 1).await;
    let parked = with_reason(&f, "hostile", "ClusterUnreachable").await;
    assert_eq!(
        condition(&parked, "Ready").unwrap().0,
        "False",
        "hostile, after the attack"
    );
    assert!(
        revisions(&f, "hostile").await.is_empty(),
        "hostile released in A"
    );

    eventually("the attack to show what it is checked for", 120, || {
        let shown = until(&server);
        async move { shown.then_some(()) }
    })
    .await;
    let (peak, resident) = growth.so_far();
    let seen = server.seen();
    let lists = seen.iter().filter(|r| r.is_list()).count();
    eprintln!(
        "{mode:?}: peak +{peak:.1} MiB, resident +{resident:.1} MiB; {lists} LIST requests of {} seen; {:.1} MiB of LIST bodies sent",
        seen.len(),
        server.sent_bytes() as f64 / MIB
    );
    assert!(
        lists > 0,
        "the hostile API server saw no LIST: {:?}",
        &seen[..seen.len().min(20)]
    );
    assert!(
        peak < ATTACK_BOUND_MIB && resident < ATTACK_BOUND_MIB,
        "the test process's memory under a hostile API server's {mode:?} grew past {ATTACK_BOUND_MIB} MiB: peak +{peak:.1} MiB, resident +{resident:.1} MiB"
    );
    check(&server);
    operator.stop().await;
}

/// A tenant's API server whose every LIST answer has no end — 200,
/// chunked, `{"kind":"SecretList",…,"items":[` (the kind of the
/// collection asked) and then objects of ~1 KiB for ever, written as fast
/// as the operator reads — is cut off: the operator goes away from such
/// answers, none read past `MAX_ANSWER_BYTES` (the server counts what it
/// wrote; what socket buffers hold aside), and it did read into them (the
/// cut, not a refusal up front, is what is proven). The HelmApp naming
/// that cluster is parked `ClusterUnreachable`, local HelmApps install
/// meanwhile and after 20 s more of the attack, and the test process's
/// memory grows by less than 256 MiB.
#[tokio::test]
async fn a_remote_server_that_answers_without_end_is_cut_off() {
    attack_of(Mode::EndlessBody, |_| true, |server| {
        let cut = server.cut_answers();
        let largest = cut.iter().copied().max().unwrap_or(0);
        eprintln!(
            "EndlessBody: {} answers cut off, the largest after {:.1} MiB",
            cut.len(),
            largest as f64 / MIB
        );
        assert!(
            server.sent_bytes() as f64 >= MIB,
            "the operator read {} bytes of the endless answers: the attack was not made",
            server.sent_bytes()
        );
        assert!(
            !cut.is_empty(),
            "no endless answer was cut off while the operator ran"
        );
        // Beyond what the operator read: what the sockets' buffers and TLS
        // held when it went away.
        let slack = 16 * 1024 * 1024;
        assert!(
            largest <= (MAX_ANSWER_BYTES + slack) as u64,
            "one answer of the hostile API server was read past MAX_ANSWER_BYTES ({} MiB): {:.1} MiB written before the operator went away",
            MAX_ANSWER_BYTES >> 20,
            largest as f64 / MIB
        );
    })
    .await;
}

/// A tenant's API server whose every LIST goes on without end — each page
/// a valid list of `limit` small objects of the kind asked, carrying the
/// labels asked (`owner=helm` for Helm's storage, none of `owner` for
/// `owner!=helm`), with a fresh `continue` token — is refused: the
/// operator pages (asks with the tokens), no LIST of it goes past
/// `MAX_REMOTE_OBJECTS` objects by more than one page (500), the LISTs do
/// reach that bound (it, not something else, is what refused them), and a
/// refused LIST is tried again from its first page. The HelmApp naming
/// that cluster is parked `ClusterUnreachable`, local HelmApps install
/// meanwhile and after 20 s more of the attack, and the test process's
/// memory grows by less than 256 MiB.
#[tokio::test]
async fn a_remote_server_that_pages_without_end_is_refused() {
    attack_of(Mode::EndlessPages, |server| lists_started_most(server) >= 2, |server| {
        let seen = server.seen();
        let pages: Vec<_> = seen.iter().filter(|r| r.is_list()).collect();
        let continued = pages
            .iter()
            .filter(|r| r.param("continue").is_some())
            .count();
        // (path, labelSelector) → the LISTs of it started (first pages).
        let mut started: BTreeMap<(String, String), usize> = BTreeMap::new();
        for r in pages.iter().filter(|r| r.param("continue").is_none()) {
            let selector = r.param("labelSelector").unwrap_or_default().to_string();
            *started.entry((r.path.clone(), selector)).or_default() += 1;
        }
        let retried = lists_started_most(server);
        let deepest = server.deepest_list();
        eprintln!(
            "EndlessPages: {} pages, {continued} of them continued; the deepest LIST {deepest} objects; at most {retried} LISTs of one collection started",
            pages.len()
        );
        assert!(continued > 0, "the operator never asked for a next page");
        assert!(
            deepest <= MAX_REMOTE_OBJECTS + 500,
            "one LIST of the hostile API server was paged past MAX_REMOTE_OBJECTS ({MAX_REMOTE_OBJECTS}) + one page (500): {deepest} objects"
        );
        assert!(
            deepest >= MAX_REMOTE_OBJECTS,
            "no LIST reached MAX_REMOTE_OBJECTS ({MAX_REMOTE_OBJECTS}): the deepest ended at {deepest} objects"
        );
        assert!(
            retried >= 2,
            "no refused LIST was tried again: {started:?}"
        );
    })
    .await;
}

/// The most LISTs (first pages) of one collection and selector `server`
/// saw started: 2 or more, a refused LIST was tried again.
fn lists_started_most(server: &HostileApiServer) -> usize {
    let mut started: BTreeMap<(String, String), usize> = BTreeMap::new();
    for r in server
        .seen()
        .iter()
        .filter(|r| r.is_list() && r.param("continue").is_none())
    {
        let selector = r.param("labelSelector").unwrap_or_default().to_string();
        *started.entry((r.path.clone(), selector)).or_default() += 1;
    }
    started.values().copied().max().unwrap_or(0)
}

/// A tenant's API server that redirects helm — every request of helm's
/// answered `307` to an address `--deny-chart-source-cidrs` refuses
/// (127.0.0.2 here, 169.254.169.254 in a cloud), while the operator's own
/// requests are answered as a healthy cluster's — sends helm nowhere:
/// every connection of helm's goes through the operator's egress proxy,
/// which refuses that target. Nothing ever connects to the denied
/// listener; helm did run and was redirected (the attack was made); the
/// install fails and nothing of it is released in A.
#[tokio::test]
async fn a_remote_server_redirecting_helm_sends_it_nowhere_the_policy_refuses() {
    use hossted_operator::delivery::source::address::{AddressPolicy, DEFAULT_DENIED};
    const DENIED: &str = "127.0.0.2";
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let denied = tokio::net::TcpListener::bind((DENIED, 0))
        .await
        .expect("a listener on the denied address");
    let to: &'static str =
        Box::leak(format!("https://{}", denied.local_addr().unwrap()).into_boxed_str());
    let accepted = Arc::new(AtomicU64::new(0));
    let listening = tokio::spawn({
        let accepted = accepted.clone();
        async move {
            while denied.accept().await.is_ok() {
                accepted.fetch_add(1, Relaxed);
            }
        }
    });
    let server = HostileApiServer::start(Mode::RedirectHelm { to })
        .await
        .expect("the hostile API server");
    let kubeconfig = server.kubeconfig("tenant-token");
    f.secret(NS, HOSTILE, &[("value", kubeconfig.as_str())])
        .await;
    let operator = f
        .start_delivery_with(|s| {
            s.sources.policy =
                AddressPolicy::parse(&format!("{DEFAULT_DENIED},{DENIED}/32")).unwrap();
        })
        .await;
    apply(
        &f,
        "hostile",
        json!({ "chart": { "path": "reach" }, "kubeConfig": kube_config(HOSTILE, None) }),
    )
    .await;
    let failed = with_reason(&f, "hostile", "InstallFailed").await;
    assert_eq!(condition(&failed, "Ready").unwrap().0, "False");
    let redirected = server.seen().iter().filter(|r| r.is_helms()).count();
    eprintln!(
        "{redirected} requests of helm's redirected to {to}; {} connections reached it",
        accepted.load(Relaxed)
    );
    assert!(
        redirected > 0,
        "helm never asked the hostile API server: the redirect was not tried"
    );
    assert_eq!(
        accepted.load(Relaxed),
        0,
        "helm, redirected by the remote API server, connected to an address the policy refuses"
    );
    assert!(
        revisions(&f, "hostile").await.is_empty(),
        "hostile released in A"
    );
    operator.stop().await;
    listening.abort();
}
