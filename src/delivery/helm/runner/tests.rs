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
