//! `chart.verify` for `chart.git` (docs/verification.md): the signature of
//! the fetched commit (`HEAD`), of the annotated tag that named it (`Tag`),
//! or both (`TagAndHEAD`) — as source-controller's `verify.mode` — checked
//! against the OpenPGP keyrings and SSH public keys of `verify.secretRef`,
//! in-process (no `gpg` or `ssh-keygen` is run). The signed bytes are the
//! object's own, less its signature (gix finds them as git does).

use apis::helmapp::GitVerifyMode;
use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::types::KeyDetails;
use russh::keys::PublicKey as SshPublicKey;
use russh::keys::ssh_key::SshSig;

use super::git::Checkout;
use crate::lean::hex::hex;

/// The local ref a fetch of a tag writes (the tag object, not peeled).
pub const FETCHED_REF: &str = "refs/fetched";
/// Keys read from one Secret key, at most.
const MAX_KEYS: usize = 256;
/// The SSH signature namespace git signs commits and tags in.
const SSH_NAMESPACE: &str = "git";

/// What signs for a Git chart: `(name, keys)` of each Secret key.
#[derive(Clone, Default)]
pub struct GitSigners {
    pub openpgp: Vec<(String, Vec<SignedPublicKey>)>,
    pub ssh: Vec<(String, Vec<SshPublicKey>)>,
}

impl std::fmt::Debug for GitSigners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self
            .openpgp
            .iter()
            .map(|(n, _)| n.as_str())
            .chain(self.ssh.iter().map(|(n, _)| n.as_str()))
            .collect();
        write!(f, "GitSigners({names:?})")
    }
}

impl GitSigners {
    /// The signers of Secret data `data` (named `secret` in messages):
    /// keys ending `.gpg` or `.asc` are OpenPGP keyrings, keys ending
    /// `.pub` SSH public keys (`authorized_keys` lines). `Err` names a key
    /// that does not read, or says none is there.
    pub fn from_secret<'a>(
        secret: &str,
        data: impl IntoIterator<Item = (&'a String, &'a Vec<u8>)>,
    ) -> Result<GitSigners, String> {
        let mut signers = GitSigners::default();
        for (key, bytes) in data {
            let name = format!("{secret}/{key}");
            if key.ends_with(".gpg") || key.ends_with(".asc") {
                signers.openpgp.push((
                    name.clone(),
                    super::verify::provenance::keyring(&name, bytes)?,
                ));
            } else if key.ends_with(".pub") {
                signers.ssh.push((name.clone(), ssh_keys(&name, bytes)?));
            }
        }
        if signers.openpgp.is_empty() && signers.ssh.is_empty() {
            return Err(format!(
                "verify.secretRef {secret} has no key ending in .gpg or .asc (an OpenPGP keyring) or .pub (SSH public keys)"
            ));
        }
        Ok(signers)
    }
}

fn ssh_keys(name: &str, bytes: &[u8]) -> Result<Vec<SshPublicKey>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| format!("{name} is not text"))?;
    let keys = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .take(MAX_KEYS)
        .enumerate()
        .map(|(n, line)| {
            // An `authorized_keys` line, or an `allowed_signers` one (its
            // principals and options first: the key starts at its type).
            let words: Vec<&str> = line.split_whitespace().collect();
            let at = words
                .iter()
                .position(|w| {
                    ["ssh-", "ecdsa-sha2-", "sk-ssh-", "sk-ecdsa-"]
                        .iter()
                        .any(|t| w.starts_with(t))
                })
                .unwrap_or(0);
            SshPublicKey::from_openssh(&words[at..].join(" "))
                .map_err(|_| format!("{name}: line {} is not an SSH public key", n + 1))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if keys.is_empty() {
        return Err(format!("{name} holds no key"));
    }
    Ok(keys)
}

/// Checks what `mode` asks of `checkout` against `signers`: who signed
/// (the Secret key and the key's fingerprint), or why it does not verify.
pub fn verify(
    checkout: &Checkout,
    mode: GitVerifyMode,
    signers: &GitSigners,
) -> Result<String, String> {
    let repo = gix::open(&checkout.repo).map_err(|e| format!("the checkout: {e}"))?;
    let (head, tag) = match mode {
        GitVerifyMode::Head => (true, false),
        GitVerifyMode::Tag => (false, true),
        GitVerifyMode::TagAndHead => (true, true),
        GitVerifyMode::Unknown => return Err("verify.mode must be HEAD, Tag or TagAndHEAD".into()),
    };
    let mut said = Vec::new();
    if tag {
        said.push(format!("tag: {}", signed_tag(&repo, checkout, signers)?));
    }
    if head {
        let id = gix::ObjectId::from_hex(checkout.commit.as_bytes())
            .map_err(|_| "the checkout's commit id is not one".to_string())?;
        let object = repo
            .find_object(id)
            .map_err(|e| format!("commit {}: {e}", short(&checkout.commit)))?;
        let signed = gix::objs::CommitRefIter::signature(&object.data, repo.object_hash())
            .map_err(|e| format!("commit {}: {e}", short(&checkout.commit)))?;
        let Some((signature, data)) = signed else {
            return Err(format!("commit {} is not signed", short(&checkout.commit)));
        };
        let who = check(signature.as_ref(), &data.to_bstring(), signers)
            .map_err(|e| format!("commit {}: {e}", short(&checkout.commit)))?;
        said.push(format!("commit: {who}"));
    }
    Ok(said.join("; "))
}

/// The annotated tag the fetch took the commit from, its signature checked.
fn signed_tag(
    repo: &gix::Repository,
    checkout: &Checkout,
    signers: &GitSigners,
) -> Result<String, String> {
    let not_a_tag = || {
        format!(
            "verify.mode Tag: commit {} was not fetched by an annotated tag (name ref.tag or ref.semver)",
            short(&checkout.commit)
        )
    };
    let reference = repo.find_reference(FETCHED_REF).map_err(|_| not_a_tag())?;
    let target = reference
        .target()
        .try_id()
        .map(|id| id.to_owned())
        .ok_or_else(not_a_tag)?;
    let object = repo.find_object(target).map_err(|_| not_a_tag())?;
    if object.kind != gix::object::Kind::Tag {
        return Err(not_a_tag());
    }
    let tag = object
        .try_to_tag_ref()
        .map_err(|e| format!("the tag: {e}"))?;
    if tag.target() != checkout.commit.as_str() {
        return Err(format!(
            "the tag names {}, not the commit fetched",
            short(&tag.target().to_string())
        ));
    }
    let name = tag.name.to_string();
    // The tag asked for, not any signed tag of the repository served under
    // its name: a server could serve an old signed tag object as a new tag.
    let fetched = std::fs::read_to_string(checkout.repo.join(super::git::FETCHED_NAME))
        .map_err(|_| not_a_tag())?;
    match fetched.trim().strip_prefix("refs/tags/") {
        Some(asked) if asked == name => {}
        Some(asked) => {
            return Err(format!(
                "the tag object served as {asked} is named {name}: not the tag asked for"
            ));
        }
        None => return Err(not_a_tag()),
    }
    let Some((signature, data)) = gix::objs::TagRefIter::signature(&object.data) else {
        return Err(format!("tag {name} is not signed"));
    };
    check(signature.data, &data.to_bstring(), signers).map_err(|e| format!("tag {name}: {e}"))
}

/// Who of `signers` made `signature` over `data`.
fn check(signature: &[u8], data: &[u8], signers: &GitSigners) -> Result<String, String> {
    let text = std::str::from_utf8(signature).map_err(|_| "the signature is not text")?;
    if text.contains("-----BEGIN SSH SIGNATURE-----") {
        let sig = SshSig::from_pem(text.trim()).map_err(|_| "the SSH signature does not read")?;
        for (name, keys) in &signers.ssh {
            for key in keys {
                if key.verify(SSH_NAMESPACE, data, &sig).is_ok() {
                    return Ok(format!(
                        "key {name} ({})",
                        key.fingerprint(Default::default())
                    ));
                }
            }
        }
        return Err(format!(
            "the SSH signature verifies with none of the SSH keys of verify.secretRef ({})",
            names(&signers.ssh)
        ));
    }
    if text.contains("-----BEGIN PGP SIGNATURE-----") {
        let (sig, _) = DetachedSignature::from_string(text.trim())
            .map_err(|_| "the OpenPGP signature does not read")?;
        // git signs the object's bytes as they are (`gpg -bsa`).
        if sig.signature.typ() != Some(pgp::packet::SignatureType::Binary) {
            return Err("the OpenPGP signature is not a binary document signature".into());
        }
        for (name, keys) in &signers.openpgp {
            for key in keys {
                let verifies = sig.verify(key, data).is_ok()
                    || key
                        .public_subkeys
                        .iter()
                        .any(|s| sig.verify(s, data).is_ok());
                if verifies {
                    return Ok(format!(
                        "key {name} ({})",
                        hex(key.fingerprint().as_bytes())
                    ));
                }
            }
        }
        return Err(format!(
            "the OpenPGP signature verifies with none of the keyrings of verify.secretRef ({})",
            names(&signers.openpgp)
        ));
    }
    Err("the signature is neither OpenPGP nor SSH (X.509 signatures are not checked)".into())
}

fn names<T>(keys: &[(String, T)]) -> String {
    if keys.is_empty() {
        return "none of that kind".into();
    }
    keys.iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn short(commit: &str) -> &str {
    &commit[..commit.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use russh::keys::ssh_key::{HashAlg, LineEnding, PrivateKey};

    /// A test-only key (made with `ssh-keygen -t ed25519 -N ""`).
    const SIGNING_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACDUVTR/6DYsMeNNUlULGF3QnBM+wQ++Tl6quvRTD9BoQQAAAJjNkmexzZJn
sQAAAAtzc2gtZWQyNTUxOQAAACDUVTR/6DYsMeNNUlULGF3QnBM+wQ++Tl6quvRTD9BoQQ
AAAEARvJADouAMZsXA+Es1yKWM0s9dC/TFnl2dEEOItExLydRVNH/oNiwx401SVQsYXdCc
Ez7BD75OXqq69FMP0GhBAAAAD2dpdC12ZXJpZnktdGVzdAECAwQFBg==
-----END OPENSSH PRIVATE KEY-----
";
    const ITS_PUBLIC: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINRVNH/oNiwx401SVQsYXdCcEz7BD75OXqq69FMP0GhB git-verify-test";
    const ANOTHER: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE5pEaTheI2KYFLDNwthVMkjvyGN1NtB4R9PlEH7dJcg other";

    fn signers(public: &str) -> GitSigners {
        let data = std::collections::BTreeMap::from([(
            "git.pub".to_string(),
            format!("# a comment\n{public}\n").into_bytes(),
        )]);
        GitSigners::from_secret("apps/git-keys", &data).unwrap()
    }

    /// A bare repository with one commit, signed by `SIGNING_KEY` when
    /// `signed`, its message `message`.
    fn repository(dir: &std::path::Path, signed: bool, message: &str) -> Checkout {
        std::fs::create_dir_all(dir).unwrap();
        let repo = gix::init_bare(dir).unwrap();
        let tree = repo
            .write_object(gix::objs::Tree { entries: vec![] })
            .unwrap()
            .detach();
        let who = gix::actor::Signature {
            name: "test".into(),
            email: "test@example.com".into(),
            time: gix::date::Time::new(0, 0),
        };
        let mut commit = gix::objs::Commit {
            tree,
            parents: Default::default(),
            author: who.clone(),
            committer: who,
            encoding: None,
            message: message.into(),
            extra_headers: Vec::new(),
        };
        if signed {
            let mut payload = Vec::new();
            gix::objs::WriteTo::write_to(&commit, &mut payload).unwrap();
            let key = PrivateKey::from_openssh(SIGNING_KEY).unwrap();
            let pem = key
                .sign(SSH_NAMESPACE, HashAlg::Sha512, &payload)
                .unwrap()
                .to_pem(LineEnding::LF)
                .unwrap();
            commit.extra_headers = vec![("gpgsig".into(), pem.trim_end().into())];
        }
        let id = repo.write_object(&commit).unwrap().detach();
        Checkout {
            repo: dir.to_path_buf(),
            commit: id.to_string(),
        }
    }

    #[test]
    fn an_ssh_signed_commit_verifies_with_its_key_only_and_an_unsigned_one_never() {
        let root = std::env::temp_dir().join(format!("git-verify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let signed = repository(&root.join("signed"), true, "signed\n");
        let who = verify(&signed, GitVerifyMode::Head, &signers(ITS_PUBLIC)).unwrap();
        assert!(
            who.starts_with("commit: key apps/git-keys/git.pub (SHA256:"),
            "{who}"
        );
        let other = verify(&signed, GitVerifyMode::Head, &signers(ANOTHER)).unwrap_err();
        assert!(other.contains("verifies with none"), "{other}");
        // `Tag` of a commit no tag named.
        let tag = verify(&signed, GitVerifyMode::Tag, &signers(ITS_PUBLIC)).unwrap_err();
        assert!(tag.contains("annotated tag"), "{tag}");
        let unsigned = repository(&root.join("unsigned"), false, "unsigned\n");
        let none = verify(&unsigned, GitVerifyMode::Head, &signers(ITS_PUBLIC)).unwrap_err();
        assert!(none.ends_with("is not signed"), "{none}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn an_allowed_signers_line_reads_as_its_key() {
        let line = format!("desk-ssh@example.com,ci@example.com namespaces=\"git\" {ITS_PUBLIC}");
        let data =
            std::collections::BTreeMap::from([("allowed.pub".to_string(), line.into_bytes())]);
        let signers = GitSigners::from_secret("apps/s", &data).unwrap();
        assert_eq!(
            signers.ssh[0].1[0],
            SshPublicKey::from_openssh(ITS_PUBLIC).unwrap()
        );
    }

    #[test]
    fn a_secret_without_a_key_of_a_known_kind_or_with_an_unreadable_one_is_refused() {
        let none = std::collections::BTreeMap::from([("token".to_string(), b"x".to_vec())]);
        let e = GitSigners::from_secret("apps/s", &none).unwrap_err();
        assert!(e.contains("no key ending in .gpg"), "{e}");
        let bad = std::collections::BTreeMap::from([(
            "git.pub".to_string(),
            b"ssh-ed25519 not-base64".to_vec(),
        )]);
        let e = GitSigners::from_secret("apps/s", &bad).unwrap_err();
        assert_eq!(e, "apps/s/git.pub: line 1 is not an SSH public key");
    }
}
