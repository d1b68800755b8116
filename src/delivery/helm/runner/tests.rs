//! The runner's pure parts: helm's messages and its JSON release.

use super::*;

#[test]
fn a_message_is_redacted_whole_before_it_is_cut() {
    let secret = "s3cret-password-value";
    let values = serde_json::json!({ "db": { "password": secret } });
    // The value straddles the 1,024-character cut.
    // ("helm rollback failed: " is 22 characters: the cut falls 7 into it.)
    let stderr = format!("{}{secret} and more", "x".repeat(995));
    let e = HelmError::Failed {
        action: "rollback",
        stderr,
    };
    let summary = e.summary(&crate::delivery::helm::values::Redactor::of(&values));
    assert!(!summary.contains("s3cret"), "{summary}");
    assert!(summary.len() <= 1024);
    assert_eq!(
        format!("{:?}", crate::delivery::helm::values::Redactor::of(&values)),
        "Redactor(1 values)",
        "Debug never shows a value"
    );
}

#[test]
fn a_forbidden_run_says_what_the_identity_may_not_do() {
    let e = HelmError::Failed {
        action: "upgrade",
        stderr: "Error: UPGRADE FAILED: failed to create resource: clusterrolebindings.rbac.authorization.k8s.io \"admin\" is forbidden: User \"system:serviceaccount:team-a:hossted-deployer\" cannot create resource \"clusterrolebindings\" in API group \"rbac.authorization.k8s.io\" at the cluster scope".into(),
    };
    assert_eq!(
        e.forbidden().as_deref(),
        Some(
            "cannot create resource \"clusterrolebindings\" in API group \"rbac.authorization.k8s.io\" at the cluster scope"
        )
    );
    let other = HelmError::Failed {
        action: "upgrade",
        stderr: "Error: timed out waiting for the condition after 403 ms".into(),
    };
    assert_eq!(other.forbidden(), None);
}

#[test]
fn helms_json_release_gives_revision_status_and_versions() {
    let out = r#"{"name":"web","info":{"status":"deployed","notes":"x"},
        "chart":{"metadata":{"name":"web","version":"1.2.0","appVersion":"1.27.3"},"values":{"a":1}},
        "config":{"password":"never-read"},"version":3,"namespace":"apps"}"#;
    assert_eq!(
        parse_release("upgrade", out).unwrap(),
        Released {
            revision: 3,
            status: "deployed".into(),
            chart_version: "1.2.0".into(),
            app_version: "1.27.3".into(),
            chart_name: "web".into(),
            content: crate::lean::storage::content_digest_of_json(out.as_bytes()).unwrap(),
            // No hooks: the same release.
            untested: crate::lean::storage::content_digest_of_json(out.as_bytes()).unwrap(),
        }
    );
    assert!(parse_release("upgrade", "Error: nope").is_err());
}

#[test]
fn helm_gets_its_settings_and_gos_but_not_the_operators_secrets() {
    for passed in [
        "PATH",
        "HOME",
        "KUBECONFIG",
        "HELM_CACHE_HOME",
        "GOGC",
        "GOMEMLIMIT",
        "GOMAXPROCS",
    ] {
        assert!(helm_needs(passed), "{passed} reaches helm");
    }
    for kept in [
        "HOSSTED_AUTH_TOKEN",
        "HOSSTED_API_URL",
        "EMAIL_ID",
        "RUST_LOG",
        // Helm's storage stays in the Secrets the operator checks.
        "HELM_DRIVER",
        "HELM_DRIVER_SQL_CONNECTION_STRING",
    ] {
        assert!(!helm_needs(kept), "{kept} does not reach helm");
    }
}

#[test]
fn helm_processes_share_the_cores_among_the_slots() {
    assert_eq!(child_max_procs(2, 4), 1, "more slots than cores: one each");
    assert_eq!(child_max_procs(2, 10), 1);
    assert_eq!(child_max_procs(16, 4), 4);
    assert_eq!(child_max_procs(16, 0), 16, "0 slots counts as one");
    assert_eq!(child_max_procs(0, 4), 1, "never 0: Go would ignore it");
}

#[test]
fn release_not_found_is_read_from_helms_last_line_only() {
    use super::output::says_release_not_found;
    assert!(says_release_not_found("Error: release: not found\n"));
    assert!(says_release_not_found(
        "WARNING: x\nError: release: not found"
    ));
    // The words inside an earlier line (a value helm quoted) are not it.
    assert!(!says_release_not_found(
        "Error: template: x: \"release: not found\"\nError: render failed\n"
    ));
    assert!(!says_release_not_found(""));
}

/// Each remote run resolves the server's host again and is handed the
/// address it checked, never the name: a DNS answer that turns to a
/// denied address between two runs (rebinding) refuses the second run's
/// kubeconfig — `run` returns before any process starts — and the next
/// allowed answer is pinned again.
#[tokio::test]
async fn a_remote_runs_kubeconfig_names_the_checked_address_or_is_refused() {
    use crate::delivery::remote::connect::{Lookup, Refusal};
    use std::net::IpAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let doc = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://api.rebinding.test:6443\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: abc.def\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n";
    let access = crate::delivery::remote::kubeconfig::parse(doc.as_bytes()).expect("a kubeconfig");
    let answers: [&[&str]; 4] = [
        &["10.0.0.7"],
        &["169.254.169.254"],
        &["10.0.0.8", "169.254.169.254"],
        &["10.0.0.9"],
    ];
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let lookup: Lookup = Arc::new(move |host: String| {
        assert_eq!(host, "api.rebinding.test");
        let at = counted.fetch_add(1, Ordering::SeqCst);
        let answer: Vec<IpAddr> = answers[at].iter().map(|a| a.parse().unwrap()).collect();
        Box::pin(async move { Ok(answer) })
    });
    let run = RemoteRun {
        id: "c".into(),
        access: Arc::new(access),
        policy: Default::default(),
        lookup: lookup.clone(),
        egress: crate::delivery::remote::egress::Egress::new(Default::default(), lookup),
        gate: Arc::new(|| Box::pin(async { true })),
    };
    let server_of = |text: &str| -> (String, Option<String>) {
        let v: serde_json::Value = serde_json::from_str(text).expect("JSON");
        let cluster = &v["clusters"][0]["cluster"];
        (
            cluster["server"].as_str().unwrap().to_string(),
            cluster["tls-server-name"].as_str().map(str::to_string),
        )
    };
    let first = run.kubeconfig().await.expect("an allowed answer");
    // Every connection of helm's goes through the operator's egress proxy,
    // on loopback, authenticated as cluster `c`.
    let v: serde_json::Value = serde_json::from_str(&first).expect("JSON");
    let proxy: http::Uri = v["clusters"][0]["cluster"]["proxy-url"]
        .as_str()
        .expect("a proxy-url")
        .parse()
        .expect("a URL");
    assert_eq!(proxy.scheme_str(), Some("http"));
    assert_eq!(proxy.host(), Some("127.0.0.1"));
    assert!(
        proxy
            .authority()
            .is_some_and(|a| a.as_str().starts_with("c:")),
        "the proxy's user part names the cluster"
    );
    assert_eq!(
        server_of(&first),
        (
            "https://10.0.0.7:6443".into(),
            Some("api.rebinding.test".into())
        )
    );
    for _ in 0..2 {
        assert!(matches!(
            run.kubeconfig().await,
            Err(RunRefusal::Address(Refusal::Denied { address, .. })) if address.to_string() == "169.254.169.254"
        ));
    }
    let again = run.kubeconfig().await.expect("allowed again");
    assert_eq!(server_of(&again).0, "https://10.0.0.9:6443");
    assert_eq!(calls.load(Ordering::SeqCst), 4, "one lookup per run");
}
