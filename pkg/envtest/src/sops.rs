//! Values files encrypted the way users encrypt them: the real `age-keygen`
//! and `sops` of the test assets (`hack/setup-envtest.sh`).

use std::path::Path;
use std::process::Command;

use crate::{Assets, Error};

/// An age key pair made by `age-keygen`.
pub struct AgeKey {
    /// The key file as `age-keygen` wrote it (comments and the
    /// `AGE-SECRET-KEY-1…` line): what a decryption Secret holds.
    pub identity: String,
    /// `age1…`.
    pub recipient: String,
}

/// A new age key pair, written under `dir`.
pub fn age_keygen(dir: &Path) -> Result<AgeKey, Error> {
    let file = dir.join(format!(
        "age-{}.txt",
        std::process::id() as u64 * 1000 + next()
    ));
    let out = Command::new(Assets::locate().binary("age-keygen")?)
        .arg("-o")
        .arg(&file)
        .output()?;
    if !out.status.success() {
        return Err(failed("age-keygen", &out));
    }
    let identity = std::fs::read_to_string(&file)?;
    let recipient = identity
        .lines()
        .find_map(|l| l.strip_prefix("# public key: "))
        .unwrap_or_default()
        .trim()
        .to_string();
    Ok(AgeKey {
        identity,
        recipient,
    })
}

/// `plaintext` (YAML) encrypted by `sops` to age `recipient`, with
/// `extra` flags (`--encrypted-regex`, …). The plaintext is written to a
/// file under `dir` for sops and removed after.
pub fn sops_encrypt(
    dir: &Path,
    recipient: &str,
    plaintext: &str,
    extra: &[&str],
) -> Result<String, Error> {
    let file = dir.join(format!("plain-{}.yaml", next()));
    std::fs::write(&file, plaintext)?;
    let out = Command::new(Assets::locate().binary("sops")?)
        .args(["encrypt", "--age", recipient])
        .args(extra)
        .arg(&file)
        .output();
    let _ = std::fs::remove_file(&file);
    let out = out?;
    if !out.status.success() {
        return Err(failed("sops", &out));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn next() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn failed(what: &str, out: &std::process::Output) -> Error {
    Error::Io(std::io::Error::other(format!(
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    )))
}
