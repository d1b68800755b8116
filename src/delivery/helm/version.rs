//! Which helm the operator runs: asked once at start (`helm version`),
//! then every command line is built for it (`super::args`). Helm 4 is the
//! one the image ships; helm 3 from 3.22 on is still spoken (its security
//! fixes end on 10 February 2027 — docs/helm.md); anything older, or a
//! binary that does not say, stops delivery from starting.

use std::path::Path;
use std::process::{Command, Stdio};

/// The command line a helm speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HelmCli {
    /// helm 3.22 or a later 3.x: client-side apply, `--force`,
    /// `--post-renderer <program>`.
    V3,
    /// helm 4: server-side apply, `--force-replace`, `--post-renderer
    /// <plugin>`.
    #[default]
    V4,
}

/// The oldest helm 3 the operator runs.
pub const MINIMUM_HELM3: (u64, u64) = (3, 22);

/// A `helm version` answer (`v4.3.1`, `v3.22.0+gabc`) as the command line
/// to speak, or why that helm is not run.
pub fn parse(answer: &str) -> Result<HelmCli, String> {
    let text = answer.trim();
    let bare = text.strip_prefix('v').unwrap_or(text);
    let core = bare.split(['+', '-']).next().unwrap_or_default();
    let version = semver::Version::parse(core).map_err(|_| {
        format!("it answers `helm version` with {text:?}, which is no helm version")
    })?;
    let (major, minor) = MINIMUM_HELM3;
    match version.major {
        4 => Ok(HelmCli::V4),
        3 if version.minor >= minor => Ok(HelmCli::V3),
        _ => Err(format!(
            "it is helm {version}; the operator runs helm 4, or helm {major}.{minor} or a later helm 3"
        )),
    }
}

/// How long `helm version` may take.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

/// Asks `binary` its version (`helm version --template {{.Version}}`,
/// nothing of the operator's environment but `PATH` and `HOME`).
pub fn detect(binary: &Path) -> Result<HelmCli, String> {
    let refused = |why: String| {
        format!(
            "delivery cannot start with --helm-binary {}: {why}",
            binary.display()
        )
    };
    let mut child = Command::new(binary)
        .args(["version", "--template", "{{.Version}}"])
        .env_clear()
        .envs(std::env::vars().filter(|(k, _)| k == "PATH" || k == "HOME"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| refused(format!("it does not run ({e})")))?;
    // A binary that never answers must not hold the start for ever.
    let deadline = std::time::Instant::now() + ANSWER_WITHIN;
    while child.try_wait().ok().flatten().is_none() {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(refused(format!(
                "`helm version` did not answer within {ANSWER_WITHIN:?}"
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let output = child
        .wait_with_output()
        .map_err(|e| refused(format!("it does not run ({e})")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr.lines().next().unwrap_or_default();
        return Err(refused(format!(
            "`helm version` failed ({}): {first}",
            output.status
        )));
    }
    parse(&String::from_utf8_lossy(&output.stdout)).map_err(refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helm_4_and_helm_3_from_3_22_are_spoken_and_nothing_older() {
        assert_eq!(parse("v4.3.1"), Ok(HelmCli::V4));
        assert_eq!(parse("v4.0.0+g1234567"), Ok(HelmCli::V4));
        assert_eq!(parse("v3.22.0\n"), Ok(HelmCli::V3));
        assert_eq!(parse("v3.23.1-rc.1"), Ok(HelmCli::V3));
        let old = parse("v3.21.4").unwrap_err();
        assert!(old.contains("3.22"), "names the minimum: {old}");
        assert!(parse("v2.17.0").is_err());
        assert!(
            parse("v5.0.0").is_err(),
            "an unknown major is not guessed at"
        );
        assert!(parse("").is_err() && parse("hello").is_err());
    }
}
