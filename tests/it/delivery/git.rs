//! Charts and values files from Git (docs/sources.md): real repositories
//! made by the `git` command line, served by `git http-backend` over smart
//! HTTP on loopback, fetched by the operator with gitoxide.

use super::*;
use envtest::{GitRepo, GitServer};
use kube::ResourceExt;

/// A Git server on loopback with one repository, `charts`, holding the
/// `tiny` example chart at `charts/tiny`.
async fn served(f: &Fixture) -> (GitServer, GitRepo) {
    let root = f.cp.dir().join("git");
    std::fs::create_dir_all(&root).unwrap();
    let server = GitServer::start(&root).await.unwrap();
    let repo = GitRepo::create(&root, "charts");
    let tiny = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts/tiny");
    repo.copy_dir(&tiny, "charts/tiny");
    (server, repo)
}

fn url(server: &GitServer, repo: &GitRepo) -> String {
    format!("{}/{}", server.url(), repo.served_name())
}

/// The helm runs of release `name` logged by the counting wrapper.
fn runs_of(log: &std::path::Path, name: &str) -> usize {
    runs_in(log)
        .iter()
        .filter(|r| r.split_whitespace().nth(1) == Some(name))
        .count()
}

/// The message of `app`'s `Ready` condition.
fn ready_message(app: HelmApp) -> String {
    let status = app.status.expect("a status");
    let ready = status.conditions.into_iter().find(|c| c.type_ == "Ready");
    ready.expect("a Ready condition").message
}

/// Waits until `name`'s status says it resolved `commit`.
async fn resolved(f: &Fixture, name: &str, commit: &str) -> HelmApp {
    envtest::eventually(&format!("{name} resolves {commit}"), 60, || async {
        let app = get(f, name).await?;
        let revision = app.status.as_ref()?.source.as_ref()?.revision.clone();
        (revision == commit).then_some(app)
    })
    .await
}

#[tokio::test]
async fn a_chart_from_git_upgrades_on_a_change_to_it_and_not_on_a_commit_elsewhere() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (server, repo) = served(&f).await;
    let first = repo.commit("tiny");
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    apply(
        &f,
        "fromgit",
        json!({
            "interval": "2s",
            "chart": { "git": { "url": url(&server, &repo), "ref": { "branch": "main" }, "path": "charts/tiny" } }
        }),
    )
    .await;
    let app = ready(&f, "fromgit", "InstallSucceeded", 1).await;
    let status = app.status.unwrap();
    assert_eq!(status.source.unwrap().revision, first);
    assert_eq!(status.chart_version, "0.1.0");
    // A Git chart has no name in its spec: the status has its own, from
    // its Chart.yaml — what the CHART column and the web view show.
    assert_eq!(status.chart_name, "tiny");
    assert_eq!(get(&f, "fromgit").await.unwrap().chart_label(), "tiny");
    let cm: Api<ConfigMap> = Api::namespaced(f.cp.client(), NS);
    assert!(cm.get_opt("fromgit-tiny").await.unwrap().is_some());

    // A commit elsewhere in the repository: resolved, and no helm run.
    repo.write("README.md", "not the chart\n");
    let elsewhere = repo.commit("readme");
    let app = resolved(&f, "fromgit", &elsewhere).await;
    assert_eq!(app.status.unwrap().revision, 1, "no upgrade");
    assert_eq!(
        runs_of(&log, "fromgit"),
        1,
        "helm ran once: {:?}",
        runs_in(&log)
    );

    // A commit that changes the chart: one upgrade.
    repo.write(
        "charts/tiny/values.yaml",
        &format!(
            "{}label: from-git\n",
            std::fs::read_to_string(repo.work().join("charts/tiny/values.yaml")).unwrap()
        ),
    );
    let changed = repo.commit("label");
    let app = ready(&f, "fromgit", "UpgradeSucceeded", 2).await;
    assert_eq!(app.status.unwrap().source.unwrap().revision, changed);
    let live = cm.get("fromgit-tiny").await.unwrap();
    assert_eq!(
        live.labels().get("extra").map(String::as_str),
        Some("from-git")
    );
    // Settled: more intervals pass without another run.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(runs_of(&log, "fromgit"), 2, "{:?}", runs_in(&log));
    assert_eq!(revisions(&f, "fromgit").await.len(), 2);
    operator.stop().await;
}

#[tokio::test]
async fn a_semver_range_picks_the_highest_matching_tag_and_a_new_one_upgrades() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (server, repo) = served(&f).await;
    let chart_yaml = |version: &str| {
        format!("apiVersion: v2\nname: tiny\nversion: {version}\nappVersion: \"1.0.0\"\n")
    };
    for version in ["1.0.0", "1.1.0", "2.0.0"] {
        repo.write("charts/tiny/Chart.yaml", &chart_yaml(version));
        repo.commit(version);
        repo.tag(&format!("v{version}"));
    }
    let operator = f.start_delivery().await;
    apply(
        &f,
        "ranged",
        json!({
            "interval": "2s",
            "chart": { "git": { "url": url(&server, &repo), "ref": { "semver": ">=1.0.0 <2" }, "path": "charts/tiny" } }
        }),
    )
    .await;
    let app = ready(&f, "ranged", "InstallSucceeded", 1).await;
    assert_eq!(app.status.unwrap().chart_version, "1.1.0");
    repo.write("charts/tiny/Chart.yaml", &chart_yaml("1.2.0"));
    repo.commit("1.2.0");
    repo.tag("v1.2.0");
    let app = ready(&f, "ranged", "UpgradeSucceeded", 2).await;
    assert_eq!(app.status.unwrap().chart_version, "1.2.0");
    operator.stop().await;
}

#[tokio::test]
async fn values_files_merge_in_order_and_a_missing_one_is_an_error_unless_ignored() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (server, repo) = served(&f).await;
    repo.write("values/base.yaml", "label: base\nother: kept\n");
    repo.write("values/prod.yaml", "label: prod\n");
    repo.commit("values");
    let operator = f.start_delivery().await;
    let git = json!({ "url": url(&server, &repo), "path": "charts/tiny" });
    apply(
        &f,
        "ordered",
        json!({ "chart": { "git": git }, "valuesFiles": ["values/base.yaml", "values/prod.yaml"] }),
    )
    .await;
    ready(&f, "ordered", "InstallSucceeded", 1).await;
    let cm: Api<ConfigMap> = Api::namespaced(f.cp.client(), NS);
    let live = cm.get("ordered-tiny").await.unwrap();
    assert_eq!(
        live.labels().get("extra").map(String::as_str),
        Some("prod"),
        "the later file wins"
    );
    // Values given in the spec come after the files.
    patch(
        &f,
        "ordered",
        json!({ "spec": { "values": { "label": "inline" } } }),
    )
    .await;
    ready(&f, "ordered", "UpgradeSucceeded", 2).await;
    let live = cm.get("ordered-tiny").await.unwrap();
    assert_eq!(
        live.labels().get("extra").map(String::as_str),
        Some("inline")
    );

    let missing = json!(["values/base.yaml", "values/staging.yaml"]);
    apply(
        &f,
        "strict",
        json!({ "chart": { "git": git }, "valuesFiles": missing }),
    )
    .await;
    let app = ready(&f, "strict", "ValuesInvalid", 0).await;
    let message = app.status.unwrap().conditions[0].message.clone();
    assert!(message.contains("values/staging.yaml"), "{message}");
    assert!(message.contains("ignoreMissingValuesFiles"), "{message}");
    assert!(revisions(&f, "strict").await.is_empty());
    apply(
        &f,
        "lenient",
        json!({ "chart": { "git": git }, "valuesFiles": missing, "ignoreMissingValuesFiles": true }),
    )
    .await;
    ready(&f, "lenient", "InstallSucceeded", 1).await;
    // A chart from elsewhere, its values files from Git.
    let values_source = json!({ "git": { "url": url(&server, &repo) } });
    apply(
        &f,
        "elsewhere",
        json!({ "chart": { "path": "tiny" }, "valuesSource": values_source, "valuesFiles": ["values/prod.yaml"] }),
    )
    .await;
    ready(&f, "elsewhere", "InstallSucceeded", 1).await;
    let live = cm.get("elsewhere-tiny").await.unwrap();
    assert_eq!(live.labels().get("extra").map(String::as_str), Some("prod"));
    let live = cm.get("lenient-tiny").await.unwrap();
    assert_eq!(live.labels().get("extra").map(String::as_str), Some("base"));
    operator.stop().await;
}

/// Every file under `dir`, read (what the operator wrote to its work
/// directory).
fn files_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path, bytes));
        }
    }
    out
}

/// SOPS: values files encrypted by the real `sops` to an age recipient.
/// The operator binary runs with `RUST_LOG=debug`; its log, the status,
/// every Event and its work directory are searched for the plaintext.
#[tokio::test]
async fn sops_values_decrypt_with_the_key_and_a_wrong_key_or_tampering_is_refused() {
    const CANARY: &str = "sops-plaintext-canary";
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    let (server, repo) = served(&f).await;
    let keys_dir = f.cp.dir().join("age");
    std::fs::create_dir_all(&keys_dir).unwrap();
    let key = envtest::sops::age_keygen(&keys_dir).unwrap();
    let other = envtest::sops::age_keygen(&keys_dir).unwrap();
    let plain = format!("label: {CANARY}\nnote_unencrypted: clear\n");
    let sealed = envtest::sops::sops_encrypt(&keys_dir, &key.recipient, &plain, &[]).unwrap();
    assert!(!sealed.contains(CANARY), "sops encrypted it");
    repo.write("values/sealed.yaml", &sealed);
    // Changed after encryption where sops leaves the clear text: only the
    // MAC tells.
    repo.write(
        "values/tampered.yaml",
        &sealed.replace("note_unencrypted: clear", "note_unencrypted: changed"),
    );
    repo.commit("sealed values");
    f.secret(NS, "sops-age", &[("age.agekey", key.identity.as_str())])
        .await;
    f.secret(NS, "sops-other", &[("age.agekey", other.identity.as_str())])
        .await;

    let work = f.cp.dir().join("sops-work");
    let log_path = f.cp.dir().join("sops.log");
    let mut cmd = operator_binary();
    cmd.env("KUBECONFIG", f.cp.kubeconfig_path())
        .env("RUST_LOG", "debug")
        .args([
            "run",
            "--controllers",
            "delivery",
            "--metrics-bind-address",
            "0",
        ]);
    delivery_flags(&mut cmd, &f.cp, &work);
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();

    let git = json!({ "url": url(&server, &repo), "path": "charts/tiny" });
    let app = |file: &str, secret: Option<&str>| {
        let mut spec = json!({ "chart": { "git": git }, "valuesFiles": [file] });
        if let Some(secret) = secret {
            // The clear note's key is outside sops's MAC: accepted only
            // with the opt-in (docs/sources.md).
            spec["decryption"] = json!({
                "provider": "sops", "secretRef": { "name": secret }, "allowUnauthenticated": true
            });
        }
        spec
    };
    apply(&f, "sealed", app("values/sealed.yaml", Some("sops-age"))).await;
    apply(
        &f,
        "wrongkey",
        app("values/sealed.yaml", Some("sops-other")),
    )
    .await;
    apply(
        &f,
        "tampered",
        app("values/tampered.yaml", Some("sops-age")),
    )
    .await;
    apply(&f, "nokeys", app("values/sealed.yaml", None)).await;
    // A valuesFrom key SOPS encrypted decrypts the same way.
    let cms: Api<ConfigMap> = Api::namespaced(f.cp.client(), NS);
    let sealed_map: ConfigMap = serde_json::from_value(json!({
        "metadata": { "name": "sealed-values" }, "data": { "values.yaml": sealed }
    }))
    .unwrap();
    cms.create(&PostParams::default(), &sealed_map)
        .await
        .unwrap();
    apply(
        &f,
        "fromkey",
        json!({
            "chart": { "git": git },
            "valuesFrom": [{ "kind": "ConfigMap", "name": "sealed-values" }],
            "decryption": {
                "provider": "sops", "secretRef": { "name": "sops-age" }, "allowUnauthenticated": true
            }
        }),
    )
    .await;

    ready(&f, "sealed", "InstallSucceeded", 1).await;
    let cm = Api::<ConfigMap>::namespaced(f.cp.client(), NS)
        .get("sealed-tiny")
        .await
        .unwrap();
    assert_eq!(
        cm.labels().get("extra").map(String::as_str),
        Some(CANARY),
        "decrypted for helm"
    );
    ready(&f, "fromkey", "InstallSucceeded", 1).await;
    let cm = cms.get("fromkey-tiny").await.unwrap();
    assert_eq!(
        cm.labels().get("extra").map(String::as_str),
        Some(CANARY),
        "valuesFrom decrypted"
    );

    let message = ready_message(with_reason(&f, "wrongkey", "DecryptionFailed").await);
    assert!(
        message.contains(&key.recipient),
        "names the recipients: {message}"
    );
    let message = ready_message(with_reason(&f, "tampered", "DecryptionFailed").await);
    assert!(message.contains("MAC"), "{message}");
    let message = ready_message(with_reason(&f, "nokeys", "DecryptionFailed").await);
    assert!(message.contains("spec.decryption"), "{message}");
    for name in ["wrongkey", "tampered", "nokeys"] {
        assert!(revisions(&f, name).await.is_empty(), "{name}: no release");
        an_event(&f, NS, name, "DecryptionFailed").await;
    }
    let _ = child.kill();
    let _ = child.wait();

    // The plaintext is nowhere but in the release helm made.
    let logged = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        logged.contains("DecryptionFailed"),
        "the refusals were logged"
    );
    assert!(!logged.contains(CANARY), "the log has the plaintext");
    for name in ["sealed", "wrongkey", "tampered", "nokeys", "fromkey"] {
        let status = serde_json::to_string(&get(&f, name).await.unwrap().status).unwrap();
        assert!(
            !status.contains(CANARY),
            "{name}'s status has the plaintext"
        );
    }
    let events = f.kubectl(&["get", "events", "-n", NS, "-o", "json"]);
    assert!(!events.contains(CANARY), "an Event has the plaintext");
    let written = files_under(&work);
    assert!(
        !written.is_empty(),
        "the operator wrote to its work directory"
    );
    for (path, bytes) in written {
        assert!(
            !String::from_utf8_lossy(&bytes).contains(CANARY),
            "{} has the plaintext",
            path.display()
        );
    }
}

/// A Git host's push, signed: the HelmApps of that repository and branch
/// are re-resolved at once although their `interval` is an hour; a push
/// to another branch queues none.
#[tokio::test]
async fn a_signed_git_push_upgrades_at_once() {
    use super::webhook::{KEY, post_answer, signed, webhook_settings};
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (server, repo) = served(&f).await;
    repo.commit("tiny");
    let config = webhook_settings(&f);
    let operator = f
        .start_delivery_with(|s| s.webhook = Some(config.clone()))
        .await;
    let hooks = operator.webhook_address();
    let git = json!({ "url": url(&server, &repo), "path": "charts/tiny" });
    apply(
        &f,
        "pushed",
        json!({ "chart": { "git": git }, "interval": "1h" }),
    )
    .await;
    ready(&f, "pushed", "InstallSucceeded", 1).await;

    repo.write("charts/tiny/values.yaml", "label: pushed\n");
    let commit = repo.commit("label");
    let now = chrono::Utc::now().timestamp();
    let other = json!({ "git": url(&server, &repo), "ref": "refs/heads/other" }).to_string();
    let other = other.as_bytes();
    // The receiver's answer says what it queued: nothing for another
    // branch (no wait-and-see needed).
    let queued = |answer: (u16, String)| {
        assert_eq!(answer.0, 202, "{}", answer.1);
        serde_json::from_str::<serde_json::Value>(&answer.1).unwrap()["queued"].clone()
    };
    let answer = post_answer(
        hooks,
        "/hooks/chart-pushed",
        &signed(KEY, now, other),
        other,
    )
    .await;
    assert_eq!(queued(answer), 0, "another branch's push moves nothing");

    let body = json!({ "git": url(&server, &repo), "ref": "refs/heads/main" }).to_string();
    let body = body.as_bytes();
    let answer = post_answer(hooks, "/hooks/chart-pushed", &signed(KEY, now, body), body).await;
    assert_eq!(queued(answer), 1);
    let app = ready(&f, "pushed", "UpgradeSucceeded", 2).await;
    assert_eq!(app.status.unwrap().source.unwrap().revision, commit);
    operator.stop().await;
}

/// Hostile repositories — a pack without end, a chart whose symlink leads
/// to `/etc/passwd` — each refused with a clear `SourceUnavailable` within
/// its bounds, while an honest HelmApp beside them installs.
#[tokio::test]
async fn an_endless_pack_and_a_symlink_out_are_refused_and_stop_no_one_else() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (server, repo) = served(&f).await;
    repo.commit("tiny");
    let root = server.root().to_path_buf();
    let evil = GitRepo::create(&root, "evil");
    let tiny = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts/tiny");
    evil.copy_dir(&tiny, "charts/tiny");
    evil.symlink("charts/tiny/templates/passwd.yaml", "/etc/passwd");
    evil.commit("a link out");
    let endless_root = f.cp.dir().join("git-endless");
    std::fs::create_dir_all(&endless_root).unwrap();
    let endless = GitServer::start(&endless_root).await.unwrap();
    let bottomless = GitRepo::create(&endless_root, "bottomless");
    bottomless.copy_dir(&tiny, "charts/tiny");
    bottomless.commit("tiny");
    endless.answer_packs(envtest::PackAnswer::Endless);
    let operator = f
        .start_delivery_with(|s| s.sources.fetch_timeout = std::time::Duration::from_secs(5))
        .await;
    let git = |server: &GitServer, repo: &GitRepo| json!({ "chart": { "git": { "url": url(server, repo), "path": "charts/tiny" } } });
    apply(&f, "endless", git(&endless, &bottomless)).await;
    apply(&f, "linked", git(&server, &evil)).await;
    apply(&f, "honest", git(&server, &repo)).await;
    ready(&f, "honest", "InstallSucceeded", 1).await;
    let linked = ready_message(with_reason(&f, "linked", "SourceUnavailable").await);
    assert!(linked.contains("leaving the repository"), "{linked}");
    let bottomless = ready_message(with_reason(&f, "endless", "SourceUnavailable").await);
    assert!(bottomless.contains("--chart-fetch-timeout"), "{bottomless}");
    for name in ["endless", "linked"] {
        assert!(revisions(&f, name).await.is_empty(), "{name}: no release");
        an_event(&f, NS, name, "SourceUnavailable").await;
    }
    // Still serving: a change to the honest app is delivered.
    patch(
        &f,
        "honest",
        json!({ "spec": { "values": { "label": "after" } } }),
    )
    .await;
    ready(&f, "honest", "UpgradeSucceeded", 2).await;
    operator.stop().await;
}

/// Five HelmApps of one repository and ref, created together: one pack
/// fetched for all, and each installed by one helm run (the chart read
/// out once, complete, before any helm sees it).
#[tokio::test]
async fn apps_of_one_repository_share_one_fetch_and_install_once() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (server, repo) = served(&f).await;
    repo.commit("tiny");
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let git = json!({ "url": url(&server, &repo), "path": "charts/tiny" });
    let names: Vec<String> = (0..5).map(|i| format!("shared-{i}")).collect();
    for name in &names {
        apply(&f, name, json!({ "chart": { "git": git } })).await;
    }
    for name in &names {
        ready(&f, name, "InstallSucceeded", 1).await;
    }
    assert_eq!(server.fetches(), 1, "{:?}", server.requests());
    for name in &names {
        assert_eq!(runs_of(&log, name), 1, "{name}: {:?}", runs_in(&log));
    }
    operator.stop().await;
}

/// Git over SSH: with the server's key in `known_hosts` the chart
/// installs; with another key the HelmApp is refused before any credential
/// reaches the server (`SourceUnavailable`, no authentication attempt).
#[tokio::test]
async fn ssh_with_the_host_key_installs_and_with_another_is_refused_before_any_credential() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let root = f.cp.dir().join("git-ssh");
    std::fs::create_dir_all(&root).unwrap();
    let repo = GitRepo::create(&root, "charts");
    let tiny = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/charts/tiny");
    repo.copy_dir(&tiny, "charts/tiny");
    repo.commit("tiny");
    let client = envtest::SshKey::generate();
    let server = envtest::SshGitServer::start(&root, &client).await.unwrap();
    let stranger = envtest::SshKey::generate();
    let port = server
        .url("x")
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let wrong_hosts = format!("[127.0.0.1]:{port} {}\n", stranger.public_openssh());
    let identity = client.openssh();
    f.secret(
        NS,
        "ssh-wrong",
        &[
            ("identity", identity.as_str()),
            ("known_hosts", wrong_hosts.as_str()),
        ],
    )
    .await;
    let operator = f.start_delivery().await;
    let git = |secret: &str| {
        json!({ "chart": { "git": { "url": server.url(&repo.served_name()), "path": "charts/tiny",
            "secretRef": { "name": secret } } } })
    };
    apply(&f, "impostor", git("ssh-wrong")).await;
    let message = ready_message(with_reason(&f, "impostor", "SourceUnavailable").await);
    assert!(message.contains("known_hosts"), "{message}");
    assert_eq!(
        server.auth_attempts(),
        0,
        "no credential reached the server"
    );
    assert!(revisions(&f, "impostor").await.is_empty());

    let known_hosts = server.known_hosts();
    f.secret(
        NS,
        "ssh-right",
        &[
            ("identity", identity.as_str()),
            ("known_hosts", known_hosts.as_str()),
        ],
    )
    .await;
    apply(&f, "trusted", git("ssh-right")).await;
    ready(&f, "trusted", "InstallSucceeded", 1).await;
    // The private key is nowhere a user reads.
    let key_line = identity.lines().nth(1).unwrap().to_string();
    for name in ["impostor", "trusted"] {
        let status = serde_json::to_string(&get(&f, name).await.unwrap().status).unwrap();
        assert!(!status.contains(&key_line), "{name}'s status has the key");
    }
    let events = f.kubectl(&["get", "events", "-n", NS, "-o", "json"]);
    assert!(!events.contains(&key_line));
    operator.stop().await;
}

/// Issue 56, test 4: `chart.verify` of a Git chart checks the commit's
/// OpenPGP signature (`HEAD`) or the annotated tag's (`Tag`) with the
/// keyrings of `verify.secretRef` — real `git` and `gpg` sign; an unsigned
/// commit on top is `VerificationFailed` and the release stays at the
/// signed revision, no helm run; a signature by another key is refused
/// too; `chart.path` with `verify` is refused at admission.
#[tokio::test]
async fn a_signed_commit_or_tag_installs_and_an_unsigned_one_on_top_is_refused() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (server, repo) = served(&f).await;
    let keys = f.cp.dir().join("keys");
    let other = f.cp.dir().join("other-keys");
    for dir in [&keys, &other] {
        std::fs::create_dir_all(dir).unwrap();
        super::verification::gpg_keyrings(dir);
    }
    let signer = "signer@example.com";
    let signed = repo.commit_signed("tiny, signed", &keys.join("gnupg"), signer);
    repo.tag_signed("v1.0.0", &keys.join("gnupg"), signer);
    let pubring = std::fs::read(keys.join("pubring.gpg")).unwrap();
    let ring: Vec<(&str, Vec<u8>)> = vec![("signer.gpg", pubring)];
    super::verification::secret(&f, "git-keys", &ring).await;
    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let spec = |reference: serde_json::Value, mode: &str| {
        json!({ "chart": {
            "git": { "url": url(&server, &repo), "path": "charts/tiny", "ref": reference },
            "verify": { "secretRef": { "name": "git-keys" }, "mode": mode } },
          "interval": "2s" })
    };
    apply(&f, "head", spec(json!({ "branch": "main" }), "HEAD")).await;
    apply(&f, "tagged", spec(json!({ "tag": "v1.0.0" }), "TagAndHEAD")).await;
    for name in ["head", "tagged"] {
        let app = ready(&f, name, "InstallSucceeded", 1).await;
        let status = app.status.unwrap();
        assert_eq!(status.source.unwrap().revision, signed);
        let verification = status.verification.expect("the verification in the status");
        assert!(
            verification.signer.contains("git-keys/signer.gpg"),
            "{verification:?}"
        );
    }
    // `Tag` of a branch: no tag named the commit.
    apply(
        &f,
        "branch-as-tag",
        spec(json!({ "branch": "main" }), "Tag"),
    )
    .await;
    let refused = ready_message(with_reason(&f, "branch-as-tag", "VerificationFailed").await);
    assert!(refused.contains("annotated tag"), "{refused}");

    // An unsigned commit on top: refused, the release stays where it was.
    repo.write("charts/tiny/values.yaml", "label: unsigned\n");
    let unsigned = repo.commit("unsigned");
    let refused = ready_message(with_reason(&f, "head", "VerificationFailed").await);
    assert!(refused.contains("is not signed"), "{refused}");
    an_event(&f, NS, "head", "VerificationFailed").await;
    assert_eq!(
        revisions(&f, "head").await.len(),
        1,
        "still the signed revision"
    );
    // Signed by a key the Secret does not hold: refused as well.
    repo.write("charts/tiny/values.yaml", "label: other-key\n");
    repo.commit_signed("another signer", &other.join("gnupg"), signer);
    let refused = eventually("the other key's commit refused", 60, || async {
        let message = ready_message(get(&f, "head").await?);
        message.contains("verifies with none").then_some(message)
    })
    .await;
    assert!(
        refused.contains("git-keys/signer.gpg"),
        "names what it tried: {refused}"
    );
    assert_eq!(revisions(&f, "head").await.len(), 1);
    let helm_on_head = helm_calls(&log)
        .iter()
        .filter(|c| c.releases() && c.on("head"))
        .count();
    assert_eq!(helm_on_head, 1, "only the signed commit's install ran");
    assert_ne!(unsigned, signed);

    // chart.path with verify: refused by the API server.
    let app: HelmApp = serde_json::from_value(json!({
        "apiVersion": "hossted.com/v1alpha1", "kind": "HelmApp",
        "metadata": { "name": "local", "namespace": NS },
        "spec": { "chart": { "path": "tiny", "verify": { "secretRef": { "name": "git-keys" } } } }
    }))
    .unwrap();
    let err = Api::<HelmApp>::namespaced(f.cp.client(), NS)
        .create(&PostParams::default(), &app)
        .await
        .expect_err("chart.path with verify is refused at admission");
    assert!(
        matches!(err, kube::Error::Api(ref e) if e.code == 422),
        "{err}"
    );
    operator.stop().await;
}

/// Issue 56, test 3: a private repository behind basic auth. Tenant A
/// (credentials, a pinned commit) installs; tenant B naming the same URL
/// and commit without credentials does not — the commit A fetched is
/// never served to B, which fetches on its own and is refused.
#[tokio::test]
async fn a_pinned_commit_of_a_private_repository_is_never_served_to_an_app_without_its_credentials()
{
    let f = Fixture::new().await;
    for ns in ["team-a", "team-b"] {
        f.namespace(ns).await;
    }
    let (server, repo) = served(&f).await;
    let commit = repo.commit("tiny, private");
    server.require_basic_auth("team-a", "a-pa55word");
    f.secret(
        "team-a",
        "git-auth",
        &[("username", "team-a"), ("password", "a-pa55word")],
    )
    .await;
    let operator = f.start_delivery().await;
    let spec = |secret: bool| {
        let mut git = json!({ "url": url(&server, &repo), "path": "charts/tiny",
                              "ref": { "commit": commit } });
        if secret {
            git["secretRef"] = json!({ "name": "git-auth" });
        }
        json!({ "chart": { "git": git } })
    };
    apply_helmapp(&f, "team-a", "web", spec(true)).await;
    let a = helmapp_ready(&f, "team-a", "web", "InstallSucceeded", 1).await;
    assert_eq!(a.status.unwrap().source.unwrap().revision, commit);
    let refused_before = server
        .requests()
        .iter()
        .filter(|r| r.method == "UNAUTHORIZED")
        .count();

    apply_helmapp(&f, "team-b", "web", spec(false)).await;
    let b = eventually("team-b's app refused", 60, || async {
        let app = get_helmapp(&f, "team-b", "web").await?;
        let ready = app
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")?;
        (ready.status == "False" && ready.reason == "SourceUnavailable").then_some(app)
    })
    .await;
    let status = b.status.unwrap();
    assert_eq!(status.revision, 0, "nothing released for team-b");
    assert!(
        status.source.is_none_or(|s| s.revision.is_empty()),
        "no commit of A's is B's"
    );
    let releases: Api<Secret> = Api::namespaced(f.cp.client(), "team-b");
    let stored = releases
        .list(&kube::api::ListParams::default().labels("owner=helm"))
        .await
        .unwrap();
    assert!(stored.items.is_empty(), "no release in team-b");
    // B asked the server itself (without credentials) and was refused.
    let refused_after = server
        .requests()
        .iter()
        .filter(|r| r.method == "UNAUTHORIZED")
        .count();
    assert!(
        refused_after > refused_before,
        "B's own fetch was refused by the server"
    );
    operator.stop().await;
}

/// A tree object of raw `(mode, name, id)` entries — any name, as a
/// hostile server would store it (git itself refuses to make these).
fn raw_tree(repo: &gix::Repository, entries: &[(&str, &[u8], gix::ObjectId)]) -> gix::ObjectId {
    let mut raw = Vec::new();
    for (mode, name, id) in entries {
        raw.extend_from_slice(mode.as_bytes());
        raw.push(b' ');
        raw.extend_from_slice(name);
        raw.push(0);
        raw.extend_from_slice(id.as_bytes());
    }
    gix::objs::Write::write_buf(&repo.objects, gix::object::Kind::Tree, &raw).unwrap()
}

/// Points `main` of the bare repository of `repo` at a new commit of `tree`.
fn serve_tree(repo: &GitRepo, tree: gix::ObjectId) {
    let bare = gix::open(repo.bare()).unwrap();
    let who = gix::actor::Signature {
        name: "test".into(),
        email: "test@example.com".into(),
        time: gix::date::Time::new(0, 0),
    };
    let commit = bare
        .write_object(gix::objs::Commit {
            tree,
            parents: Default::default(),
            author: who.clone(),
            committer: who,
            encoding: None,
            message: "hostile".into(),
            extra_headers: Vec::new(),
        })
        .unwrap()
        .detach();
    std::fs::write(repo.bare().join("refs/heads/main"), format!("{commit}\n")).unwrap();
}

/// Issue 56, tests 1 and 2, through `git http-backend`: a tree whose
/// entries are named `../../…/x` and `/…/x` is `ChartInvalid` and nothing
/// is written where they point; a tree fanning out (33 trees, each naming
/// the next twice: 2^33 paths) is `ChartInvalid` within a minute, while
/// another tenant's Git chart installs meanwhile.
#[tokio::test]
async fn a_tree_climbing_out_or_fanning_out_is_refused_and_writes_nothing_outside() {
    let f = Fixture::new().await;
    for ns in [NS, "calm"] {
        f.namespace(ns).await;
    }
    let (server, honest) = served(&f).await;
    honest.commit("tiny");
    let root = server.root().to_path_buf();
    let escape = f.cp.dir().join("escaped-by-a-tree-entry");
    let climbing = GitRepo::create(&root, "climbing");
    climbing.commit("empty");
    {
        let bare = gix::open(climbing.bare()).unwrap();
        let chart = bare
            .write_blob(b"apiVersion: v2\nname: tiny\nversion: 0.1.0\n")
            .unwrap()
            .detach();
        let planted = bare.write_blob(b"planted\n").unwrap().detach();
        let up = format!("../../../../../../../../..{}", escape.display());
        let absolute = escape.display().to_string();
        let mut entries = vec![
            ("100644", "Chart.yaml".as_bytes(), chart),
            ("100644", up.as_bytes(), planted),
            ("100644", absolute.as_bytes(), planted),
        ];
        entries.sort_by(|a, b| a.1.cmp(b.1));
        let tree = raw_tree(&bare, &entries);
        serve_tree(&climbing, tree);
    }
    let fanning = GitRepo::create(&root, "fanning");
    fanning.commit("empty");
    {
        let bare = gix::open(fanning.bare()).unwrap();
        let mut tree = raw_tree(&bare, &[]);
        for _ in 0..33 {
            tree = raw_tree(&bare, &[("40000", b"a", tree), ("40000", b"b", tree)]);
        }
        serve_tree(&fanning, tree);
    }
    let operator = f.start_delivery().await;
    let git = |repo: &GitRepo, path: &str| json!({ "chart": { "git": { "url": url(&server, repo), "path": path } } });
    apply(&f, "climbing", git(&climbing, "")).await;
    let started = std::time::Instant::now();
    apply(&f, "fanning", git(&fanning, "")).await;
    apply_helmapp(&f, "calm", "web", git(&honest, "charts/tiny")).await;
    helmapp_ready(&f, "calm", "web", "InstallSucceeded", 1).await;

    let climbed = ready_message(with_reason(&f, "climbing", "ChartInvalid").await);
    assert!(climbed.contains(".."), "names the entry: {climbed}");
    assert!(!escape.exists(), "nothing written where the entry points");
    let fanned = ready_message(with_reason(&f, "fanning", "ChartInvalid").await);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "refused within a minute, not after 2^33 visits: {fanned}"
    );
    for name in ["climbing", "fanning"] {
        assert!(revisions(&f, name).await.is_empty(), "{name}: no release");
        an_event(&f, NS, name, "ChartInvalid").await;
    }
    operator.stop().await;
}

/// `kubectl hossted diff` of a Git chart: the next commit's change shown,
/// and a commit the operator would refuse — a schema naming a remote
/// document — refused by the diff too, naming the reference.
#[tokio::test]
async fn kubectl_hossted_diff_renders_a_git_chart_as_the_operator_reads_it() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (server, repo) = served(&f).await;
    repo.commit("tiny");
    let operator = f.start_delivery().await;
    apply(
        &f,
        "from-git",
        json!({ "chart": { "git": { "url": url(&server, &repo), "path": "charts/tiny" } } }),
    )
    .await;
    ready(&f, "from-git", "InstallSucceeded", 1).await;
    operator.stop().await;
    let dir = crate::plugin::plugin_dir(&f);
    let helm = f.cp.helm_binary();
    let diff = || {
        let (dir, helm) = (dir.clone(), helm.clone());
        let f = &f;
        async move {
            let args = [
                "diff",
                "-n",
                NS,
                "from-git",
                "--helm-binary",
                helm.to_str().unwrap(),
            ];
            crate::plugin::kubectl_hossted(f, &dir, &args).await
        }
    };
    let (ok, out, err) = diff().await;
    assert!(ok, "in sync: {out}{err}");

    let values = std::fs::read_to_string(repo.work().join("charts/tiny/values.yaml")).unwrap();
    repo.write(
        "charts/tiny/values.yaml",
        &values.replace("greeting: hello", "greeting: from-the-next-commit"),
    );
    repo.commit("a new greeting");
    let (ok, out, err) = diff().await;
    assert!(!ok, "a difference: {err}");
    assert!(
        out.contains("-  greeting: hello\n+  greeting: from-the-next-commit\n"),
        "{out}{err}"
    );

    let remote = "http://169.254.169.254/latest/meta-data";
    repo.write(
        "charts/tiny/values.schema.json",
        &json!({ "properties": { "greeting": { "$ref": remote } } }).to_string(),
    );
    repo.commit("a schema that names a server");
    let (ok, out, err) = diff().await;
    assert!(!ok);
    assert!(
        err.contains("values.schema.json") && err.contains(remote),
        "{out}{err}"
    );
}

/// `plaintext` encrypted by the assets' `sops` with `--mac-only-encrypted`
/// (its MAC covers only the values it encrypts): a global flag, so before
/// `encrypt`, where [`envtest::sops::sops_encrypt`] puts no flag.
fn sops_mac_only(
    dir: &std::path::Path,
    recipient: &str,
    plaintext: &str,
    extra: &[&str],
) -> String {
    let file = dir.join("mac-only.yaml");
    std::fs::write(&file, plaintext).unwrap();
    let sops = envtest::Assets::locate().binary("sops").unwrap();
    let out = std::process::Command::new(sops)
        .args(["--mac-only-encrypted", "encrypt", "--age", recipient])
        .args(extra)
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "sops: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Issue 56, test 7: SOPS files the real `sops` wrote, changed after
/// encryption by someone without the key where the MAC does not look — a
/// value added in the clear under `mac_only_encrypted`, a
/// `securityContext: null` (sops hashes nothing for null), a file whose
/// `unencrypted_suffix` leaves a value in the clear (its key is outside the
/// MAC) — are refused (`DecryptionFailed`, no helm run) until the HelmApp
/// sets `decryption.allowUnauthenticated: true`; then each installs as
/// sops decrypts it. A file sops encrypted whole installs without it.
#[tokio::test]
async fn sops_values_outside_the_mac_are_refused_until_the_app_accepts_them() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    let (server, repo) = served(&f).await;
    let keys_dir = f.cp.dir().join("age");
    std::fs::create_dir_all(&keys_dir).unwrap();
    let key = envtest::sops::age_keygen(&keys_dir).unwrap();

    // mac_only_encrypted: only `password` is encrypted, and only it is in
    // the MAC; a clear `label` is added after.
    let mac_only = sops_mac_only(
        &keys_dir,
        &key.recipient,
        "password: hunter22\n",
        &["--encrypted-regex", "^password$"],
    );
    assert!(mac_only.contains("mac_only_encrypted: true"), "{mac_only}");
    repo.write(
        "values/mac-only.yaml",
        &mac_only.replacen("sops:", "label: added-in-the-clear\nsops:", 1),
    );
    // Encrypted whole (sops's default): it passes as it is; a null value
    // added after is outside the MAC.
    let whole =
        envtest::sops::sops_encrypt(&keys_dir, &key.recipient, "label: sealed-whole\n", &[])
            .unwrap();
    repo.write("values/whole.yaml", &whole);
    repo.write(
        "values/null-added.yaml",
        &whole.replacen("sops:", "securityContext: null\nsops:", 1),
    );
    // A value the unencrypted_suffix leaves in the clear.
    let suffixed = envtest::sops::sops_encrypt(
        &keys_dir,
        &key.recipient,
        "label: sealed-suffixed\nnote_unencrypted: clear\n",
        &["--unencrypted-suffix", "_unencrypted"],
    )
    .unwrap();
    assert!(
        suffixed.contains("note_unencrypted: clear"),
        "left in the clear"
    );
    repo.write("values/suffixed.yaml", &suffixed);
    repo.commit("sops files with values outside their MAC");
    f.secret(NS, "sops-age", &[("age.agekey", key.identity.as_str())])
        .await;

    let (wrapper, log) = counting_helm(&f);
    let operator = f
        .start_delivery_with(|s| s.helm.binary = wrapper.clone())
        .await;
    let git = json!({ "url": url(&server, &repo), "path": "charts/tiny" });
    let spec = |file: &str| {
        json!({
            "chart": { "git": git },
            "valuesFiles": [file],
            "decryption": { "provider": "sops", "secretRef": { "name": "sops-age" } }
        })
    };
    // (HelmApp, file, what the refusal names, the label once accepted)
    let outside = [
        (
            "maconly",
            "values/mac-only.yaml",
            "mac_only_encrypted",
            "added-in-the-clear",
        ),
        (
            "nulladded",
            "values/null-added.yaml",
            "securityContext",
            "sealed-whole",
        ),
        (
            "suffixed",
            "values/suffixed.yaml",
            "note_unencrypted",
            "sealed-suffixed",
        ),
    ];
    apply(&f, "whole", spec("values/whole.yaml")).await;
    for (name, file, ..) in outside {
        apply(&f, name, spec(file)).await;
    }
    let cms: Api<ConfigMap> = Api::namespaced(f.cp.client(), NS);
    let label_of = |name: &str| {
        let cms = cms.clone();
        let name = format!("{name}-tiny");
        async move {
            let cm = cms.get(&name).await.unwrap();
            cm.labels().get("extra").cloned().unwrap_or_default()
        }
    };
    ready(&f, "whole", "InstallSucceeded", 1).await;
    assert_eq!(label_of("whole").await, "sealed-whole");

    for (name, _, named, _) in outside {
        let app = with_reason(&f, name, "DecryptionFailed").await;
        let status = app.status.expect("a status");
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .expect("a Ready condition");
        assert_eq!(condition.status, "False", "{name}");
        assert!(
            condition.message.contains(named),
            "{name}: names {named}: {}",
            condition.message
        );
        assert!(
            condition.message.contains("allowUnauthenticated"),
            "{name}: says what to set: {}",
            condition.message
        );
        an_event(&f, NS, name, "DecryptionFailed").await;
        assert!(revisions(&f, name).await.is_empty(), "{name}: no release");
        assert_eq!(
            runs_of(&log, name),
            0,
            "{name}: helm never ran: {:?}",
            runs_in(&log)
        );
    }

    // Opted in: each installs, as sops itself decrypts it.
    for (name, _, _, label) in outside {
        patch(
            &f,
            name,
            json!({ "spec": { "decryption": { "allowUnauthenticated": true } } }),
        )
        .await;
        let app = ready(&f, name, "InstallSucceeded", 1).await;
        assert!(is_ready(&app), "{name}");
        assert_eq!(runs_of(&log, name), 1, "{name}: {:?}", runs_in(&log));
        assert_eq!(label_of(name).await, label, "{name}");
    }
    operator.stop().await;
}

/// The peak resident memory of this process, in MiB.
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb / 1024.0
}

/// Issue 56: a blob of 1 GiB of zeros is about a megabyte of pack; no
/// allocation of the fetch may be larger than `MAX_OBJECT_BYTES`, so it is
/// refused before it is inflated.
#[tokio::test]
async fn a_blob_that_inflates_past_the_bound_is_refused_before_it_is_inflated() {
    let f = Fixture::new().await;
    f.namespace(NS).await;
    f.helmapp_crd().await;
    let (server, repo) = served(&f).await;
    let zeros = repo.work().join("charts/tiny/zeros.bin");
    std::fs::File::create(&zeros)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    repo.commit("a gibibyte of zeros");
    let _operator = f.start_delivery().await;
    let before = peak_mib();
    apply(
        &f,
        "zeros",
        json!({ "chart": { "git": { "url": url(&server, &repo), "path": "charts/tiny" } } }),
    )
    .await;
    let app = envtest::eventually("zeros gets a verdict", 120, || async {
        let app = get(&f, "zeros").await?;
        let reason = app
            .status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")?
            .reason
            .clone();
        (reason != "Progressing").then_some(app)
    })
    .await;
    let grown = peak_mib() - before;
    let ready = app.status.unwrap().conditions;
    let ready = ready.iter().find(|c| c.type_ == "Ready").unwrap();
    // Refused by the fetch, before the pack's objects are indexed (it was
    // ChartInvalid by the blob's header, after 1,041 MiB were inflated).
    assert_eq!(ready.reason, "SourceUnavailable", "{}", ready.message);
    assert!(
        grown < 256.0,
        "the operator's peak memory grew by {grown:.1} MiB"
    );
}
