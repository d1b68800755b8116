//! Running helm: [`runner`] is the one place a helm process is spawned;
//! [`values`] merges and redacts the values it is given on stdin.

pub mod args;
pub mod detect;
pub mod manifest_bound;
pub mod manifest_diff;
pub mod plugin;
pub mod post_render;
pub mod runner;
pub mod values;
pub mod version;

pub use args::ServerSide;
pub use runner::{
    Flags, GetManifest, Helm, HelmConfig, HelmError, PostRender, Released, Rendered, Rollback,
    Test, Uninstall, Upgrade, says_release_not_found,
};
pub use version::HelmCli;

/// `release` and `namespace` as helm and Kubernetes name them (a release:
/// at most 53 characters of DNS-1123 subdomain; a namespace: a DNS-1123
/// label), checked in code where helm is spawned (the runner), before any
/// command line is built: the CRD's pattern does not bind objects stored
/// before it (CRD ratcheting), and a name is a positional argument of
/// helm — one starting with `-` would be read as a flag.
pub fn check_release_name(release: &str, namespace: &str) -> Result<(), String> {
    fn label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }
    if release.len() > 53 || !release.split('.').all(label) {
        return Err(format!(
            "release name {:?} is not a Helm release name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 53 characters): no helm command is built with it",
            release.escape_debug().to_string()
        ));
    }
    if !label(namespace) {
        return Err(format!(
            "namespace {:?} is not a namespace name: no helm command is built with it",
            namespace.escape_debug().to_string()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod name_tests {
    #[test]
    fn release_names_that_could_be_flags_or_paths_are_refused() {
        for ok in ["web", "a.b-c", "x1", &"a".repeat(53)] {
            assert_eq!(super::check_release_name(ok, "apps"), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "-x",
            "--kube-apiserver=https://evil",
            "a/b",
            "A",
            "a..b",
            "web-",
            &"a".repeat(54),
            "a b",
        ] {
            assert!(super::check_release_name(bad, "apps").is_err(), "{bad:?}");
        }
        assert!(super::check_release_name("web", "--namespace").is_err());
    }
}
