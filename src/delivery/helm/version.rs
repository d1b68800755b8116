//! Which helm the operator runs: asked once at start (`helm version`, by
//! `super::detect`), then every command line is built for it
//! (`super::args`). Pure. Helm 4 is the
//! one the image ships; helm 3 from 3.22 on is still spoken (its security
//! fixes end on 10 February 2027 — docs/helm.md); anything older, or a
//! binary that does not say, stops delivery from starting.

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
