//! Asking the helm binary which command line it speaks, once at start
//! (the one process `super::version` leaves out, to stay pure).

use std::path::Path;
use std::process::{Command, Stdio};

use super::version::{HelmCli, parse};

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
