//! Values documents encrypted with SOPS (docs/sources.md), decrypted in
//! memory with age identities: nothing decrypted is written anywhere.
//!
//! A SOPS document keeps its keys in the clear and each value as
//! `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]`: AES-256-GCM under one data
//! key, with the value's path (`a:b:`) as additional data — a value moved
//! elsewhere does not decrypt. The data key is in the `sops` section,
//! encrypted to each age recipient. The `mac` there is the SHA-512 of
//! every value in document order, encrypted with the document's
//! `lastmodified` as additional data: a value removed, added, reordered or
//! swapped for plaintext is caught. Compatibility with the `sops` tool is
//! the point: the rules below are its rules (which values are encrypted,
//! how each type is written into the MAC).

use std::io::Read;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use base64::Engine;
use serde_json::{Map, Value};
use sha2::{Digest, Sha512};
use yaml_rust2::{Yaml, YamlLoader};

/// AES-256-GCM with SOPS's 32-byte nonces.
type SopsGcm = aes_gcm::AesGcm<aes_gcm::aes::Aes256, aes_gcm::aead::consts::U32>;

/// Why a document did not decrypt. Never carries a decrypted value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SopsError {
    #[error("no age key of the decryption Secret opens it (its recipients: {0})")]
    NoKey(String),
    #[error("its MAC does not match: the file was changed after it was encrypted")]
    Mac,
    #[error("the value at {path} does not decrypt: {why}")]
    Value { path: String, why: String },
    #[error("{0}")]
    Malformed(String),
    /// Strict (the default): a value the MAC does not cover.
    #[error(
        "{path}: {why}, which its MAC does not authenticate — anyone who can write the file could have added it; set decryption.allowUnauthenticated: true to accept such files as sops does"
    )]
    Unauthenticated { path: String, why: &'static str },
}

/// Whether values the MAC leaves out are accepted (as sops does) or refuse
/// the file (the default: `decryption.allowUnauthenticated: false`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unauthenticated {
    Refused,
    Accepted,
}

/// The age identities of a decryption Secret.
pub struct Keys(Vec<age::x25519::Identity>);

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys({} identities)", self.0.len())
    }
}

impl Keys {
    /// Every `AGE-SECRET-KEY-1…` line of `texts` (comments and blank
    /// lines, as `age-keygen` writes them, are passed over). `Err` names
    /// the line number of one that does not parse, never its content.
    pub fn parse<'a>(texts: impl IntoIterator<Item = &'a str>) -> Result<Keys, String> {
        let mut keys = Vec::new();
        for text in texts {
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let key = line
                    .parse::<age::x25519::Identity>()
                    .map_err(|_| format!("line {} is not an age identity", n + 1))?;
                keys.push(key);
            }
        }
        if keys.is_empty() {
            return Err("it holds no age identity (AGE-SECRET-KEY-1…)".into());
        }
        Ok(Keys(keys))
    }
}

/// Whether `text` is a SOPS document: a mapping with a `sops` section
/// holding a `mac`.
pub fn is_encrypted(text: &str) -> bool {
    // Cheap first: most values documents are not.
    if !text.contains("sops") || !text.contains("mac") {
        return false;
    }
    match load(text) {
        Ok(doc) => sops_section(&doc).is_some_and(|s| !s["mac"].is_badvalue()),
        // One this parser refuses (a key twice: `password: plaintext` added
        // below its encrypted self) may still read as values to another
        // that lets the last key win: with a top-level `sops:` it is SOPS,
        // so decrypting it refuses it — never plain values past the MAC.
        Err(_) => text.lines().any(|l| l.starts_with("sops:")),
    }
}

/// The decrypted document of SOPS `text`, its MAC checked.
pub fn decrypt(text: &str, keys: &Keys, policy: Unauthenticated) -> Result<Value, SopsError> {
    let doc = load(text)?;
    let meta = sops_section(&doc).ok_or_else(|| malformed("it has no sops section"))?;
    let data_key = data_key(meta, keys)?;
    let rules = Rules::of(meta)?;
    let mac_only_encrypted = meta["mac_only_encrypted"].as_bool() == Some(true);
    if mac_only_encrypted && policy == Unauthenticated::Refused {
        return Err(SopsError::Unauthenticated {
            path: "sops.mac_only_encrypted".into(),
            why: "the values left in the clear are outside the MAC",
        });
    }
    let mut walk = Walk {
        key: &data_key,
        rules: &rules,
        mac: Sha512::new(),
        mac_only_encrypted,
        outside_mac: None,
    };
    if mac_only_encrypted {
        // sops starts such a MAC from sha256("sops"), so that it never
        // equals the MAC of the same values without the setting.
        walk.mac.update(sha2::Sha256::digest(b"sops"));
    }
    let Yaml::Hash(top) = &doc else {
        return Err(malformed("it is not a mapping"));
    };
    let mut out = Map::new();
    let mut path = Vec::new();
    for (k, v) in top {
        let name = key_text(k)?;
        if name == "sops" {
            continue;
        }
        path.push(name.clone());
        walk.joined(&name, &path);
        let value = walk.node(v, &mut path)?;
        path.pop();
        out.insert(name, value);
    }
    let computed = hex_upper(&walk.mac.finalize());
    let stored = meta["mac"]
        .as_str()
        .ok_or_else(|| malformed("its sops.mac is not a string"))?;
    let modified = meta["lastmodified"]
        .as_str()
        .ok_or_else(|| malformed("its sops.lastmodified is not a string"))?;
    let (mac, _) = open(stored, &data_key, modified).map_err(|_| SopsError::Mac)?;
    if mac.as_slice() != computed.as_bytes() {
        return Err(SopsError::Mac);
    }
    if let (Some((path, why)), Unauthenticated::Refused) = (walk.outside_mac, policy) {
        return Err(SopsError::Unauthenticated { path, why });
    }
    Ok(Value::Object(out))
}

fn malformed(what: &str) -> SopsError {
    SopsError::Malformed(format!("not a SOPS document SOPS can read: {what}"))
}

fn load(text: &str) -> Result<Yaml, SopsError> {
    crate::lean::yaml::check(text).map_err(|e| SopsError::Malformed(e.to_string()))?;
    // The parser's own words may quote the file (a duplicated key names
    // the key): only where, and what kind of fault, are said.
    let mut docs = YamlLoader::load_from_str(text).map_err(|e| {
        let what = if e.info().contains("duplicated key") {
            "a key appears twice in one mapping"
        } else {
            "not valid YAML"
        };
        SopsError::Malformed(format!(
            "YAML at line {}, column {}: {what}",
            e.marker().line(),
            e.marker().col() + 1
        ))
    })?;
    if docs.len() != 1 {
        return Err(malformed("one document is expected"));
    }
    Ok(docs.remove(0))
}

fn sops_section(doc: &Yaml) -> Option<&Yaml> {
    let section = &doc["sops"];
    matches!(section, Yaml::Hash(_)).then_some(section)
}

/// The data key, opened with the first age identity that a recipient's
/// stanza accepts.
fn data_key(meta: &Yaml, keys: &Keys) -> Result<Vec<u8>, SopsError> {
    let stanzas = meta["age"].as_vec().map(Vec::as_slice).unwrap_or_default();
    let mut recipients = Vec::new();
    for stanza in stanzas {
        recipients.push(stanza["recipient"].as_str().unwrap_or("?").to_string());
        let Some(enc) = stanza["enc"].as_str() else {
            continue;
        };
        let reader = age::armor::ArmoredReader::new(enc.as_bytes());
        let Ok(decryptor) = age::Decryptor::new(reader) else {
            continue;
        };
        let identities = keys.0.iter().map(|k| k as &dyn age::Identity);
        let Ok(mut opened) = decryptor.decrypt(identities) else {
            continue;
        };
        let mut key = Vec::new();
        if opened.read_to_end(&mut key).is_ok() && key.len() == 32 {
            return Ok(key);
        }
    }
    if recipients.is_empty() {
        return Err(malformed(
            "it has no age recipient (only age keys are supported)",
        ));
    }
    Err(SopsError::NoKey(recipients.join(", ")))
}

/// Which values are encrypted: the `sops` section's suffix and regex
/// options, as `sops` applies them.
struct Rules {
    unencrypted_suffix: String,
    encrypted_suffix: String,
    unencrypted_regex: Option<regex::Regex>,
    encrypted_regex: Option<regex::Regex>,
}

impl Rules {
    fn of(meta: &Yaml) -> Result<Rules, SopsError> {
        let text = |k: &str| meta[k].as_str().unwrap_or_default().to_string();
        let regex = |k: &str| -> Result<Option<regex::Regex>, SopsError> {
            match meta[k].as_str() {
                None | Some("") => Ok(None),
                Some(r) => regex::Regex::new(r)
                    .map(Some)
                    .map_err(|e| SopsError::Malformed(format!("sops.{k}: {e}"))),
            }
        };
        Ok(Rules {
            unencrypted_suffix: text("unencrypted_suffix"),
            encrypted_suffix: text("encrypted_suffix"),
            unencrypted_regex: regex("unencrypted_regex")?,
            encrypted_regex: regex("encrypted_regex")?,
        })
    }

    fn encrypted(&self, path: &[String]) -> bool {
        let mut encrypted = true;
        if !self.unencrypted_suffix.is_empty()
            && path.iter().any(|p| p.ends_with(&self.unencrypted_suffix))
        {
            encrypted = false;
        }
        if !self.encrypted_suffix.is_empty() {
            encrypted = path.iter().any(|p| p.ends_with(&self.encrypted_suffix));
        }
        if let Some(r) = &self.unencrypted_regex
            && path.iter().any(|p| r.is_match(p))
        {
            encrypted = false;
        }
        if let Some(r) = &self.encrypted_regex {
            encrypted = path.iter().any(|p| r.is_match(p));
        }
        encrypted
    }
}

/// The walk over a document's values, in order, hashing each into the MAC.
struct Walk<'a> {
    key: &'a [u8],
    rules: &'a Rules,
    mac: Sha512,
    mac_only_encrypted: bool,
    /// The first value the MAC does not cover, and why.
    outside_mac: Option<(String, &'static str)>,
}

impl Walk<'_> {
    fn node(&mut self, node: &Yaml, path: &mut Vec<String>) -> Result<Value, SopsError> {
        match node {
            Yaml::Hash(h) if h.is_empty() => {
                self.outside(path, "an empty mapping");
                Ok(Value::Object(Map::new()))
            }
            Yaml::Array(items) if items.is_empty() => {
                self.outside(path, "an empty list");
                Ok(Value::Array(Vec::new()))
            }
            Yaml::Hash(h) => {
                let mut out = Map::new();
                for (k, v) in h {
                    let name = key_text(k)?;
                    path.push(name.clone());
                    self.joined(&name, path);
                    let value = self.node(v, path)?;
                    path.pop();
                    out.insert(name, value);
                }
                Ok(Value::Object(out))
            }
            // The items of a list share the list's path.
            Yaml::Array(items) => items
                .iter()
                .map(|i| self.node(i, path))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            scalar => self.leaf(scalar, path),
        }
    }

    fn leaf(&mut self, node: &Yaml, path: &[String]) -> Result<Value, SopsError> {
        let encrypted = self.rules.encrypted(path);
        let value = match node {
            Yaml::String(s) if encrypted && s.is_empty() => Value::String(String::new()),
            Yaml::String(s) if encrypted => {
                let aad = format!("{}:", path.join(":"));
                let (plain, kind) = open(s, self.key, &aad).map_err(|why| SopsError::Value {
                    path: path.join("."),
                    why,
                })?;
                typed(&plain, &kind).map_err(|why| SopsError::Value {
                    path: path.join("."),
                    why,
                })?
            }
            Yaml::Null => Value::Null,
            _ if encrypted => {
                return Err(SopsError::Value {
                    path: path.join("."),
                    why: "it is in the clear where SOPS encrypts".into(),
                });
            }
            other => {
                // sops's MAC hashes values, never keys, and only encrypted
                // values are bound to their path: a value in the clear can
                // be moved under another key without the key.
                self.outside(path, "in the clear, so its key is outside the MAC");
                plain(other)
            }
        };
        if encrypted || !self.mac_only_encrypted {
            let bytes = mac_bytes(&value);
            if bytes.is_empty() {
                // sops hashes nothing for null and "": they could be added.
                self.outside(path, "a null or empty value");
            }
            self.mac.update(bytes);
        }
        Ok(value)
    }

    /// A key holding `:`: sops binds an encrypted value to its path joined
    /// with `:`, so `a: {b: …}` and `"a:b": …` read the same to it — the
    /// one could be made the other without the key.
    fn joined(&mut self, name: &str, path: &[String]) {
        if name.contains(':') {
            self.outside(
                path,
                "a key holding ':', which sops cannot tell from a nested one",
            );
        }
    }

    fn outside(&mut self, path: &[String], why: &'static str) {
        if self.outside_mac.is_none() {
            self.outside_mac = Some((path.join("."), why));
        }
    }
}

/// A mapping key as text (SOPS keys are strings; numbers and booleans as
/// YAML writes them).
fn key_text(k: &Yaml) -> Result<String, SopsError> {
    match k {
        Yaml::String(s) | Yaml::Real(s) => Ok(s.clone()),
        Yaml::Integer(i) => Ok(i.to_string()),
        Yaml::Boolean(b) => Ok(b.to_string()),
        _ => Err(malformed("a key is not a scalar")),
    }
}

/// A scalar left in the clear, as JSON.
fn plain(node: &Yaml) -> Value {
    match node {
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .unwrap_or_else(|| Value::String(r.clone())),
        Yaml::Boolean(b) => Value::Bool(*b),
        _ => Value::Null,
    }
}

/// A value as `sops` writes it into the MAC: strings as they are,
/// numbers in Go's shortest form, booleans as `True`/`False`.
fn mac_bytes(v: &Value) -> Vec<u8> {
    match v {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Bool(true) => b"True".to_vec(),
        Value::Bool(false) => b"False".to_vec(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string().into_bytes(),
        Value::Number(n) => format!("{}", n.as_f64().unwrap_or_default()).into_bytes(),
        _ => Vec::new(),
    }
}

/// The plaintext of `ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]` and its
/// type. The error never quotes the value.
fn open(value: &str, key: &[u8], aad: &str) -> Result<(Vec<u8>, String), String> {
    let inner = value
        .strip_prefix("ENC[AES256_GCM,")
        .and_then(|v| v.strip_suffix(']'))
        .ok_or("it is not in SOPS's ENC[AES256_GCM,…] form")?;
    let (mut data, mut iv, mut tag, mut kind) = (None, None, None, String::new());
    let b64 = |s: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|_| "a part of it is not base64".to_string())
    };
    for part in inner.split(',') {
        match part.split_once(':') {
            Some(("data", v)) => data = Some(b64(v)?),
            Some(("iv", v)) => iv = Some(b64(v)?),
            Some(("tag", v)) => tag = Some(b64(v)?),
            Some(("type", v)) => kind = v.to_string(),
            _ => return Err("it has a part SOPS does not write".into()),
        }
    }
    let (Some(mut data), Some(iv), Some(tag)) = (data, iv, tag) else {
        return Err("it lacks its data, iv or tag".into());
    };
    if iv.len() != 32 || tag.len() != 16 {
        return Err("its iv or tag has the wrong length".into());
    }
    let cipher = SopsGcm::new_from_slice(key).map_err(|_| "the data key is not 32 bytes")?;
    data.extend_from_slice(&tag);
    let nonce = aes_gcm::Nonce::<aes_gcm::aead::consts::U32>::from_slice(&iv);
    let plain = cipher
        .decrypt(
            nonce,
            Payload {
                msg: &data,
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| "authentication failed (changed, moved, or another key)".to_string())?;
    Ok((plain, kind))
}

/// A decrypted value as its `type` says.
fn typed(plain: &[u8], kind: &str) -> Result<Value, String> {
    let text = String::from_utf8(plain.to_vec()).map_err(|_| "it is not UTF-8".to_string())?;
    Ok(match kind {
        "str" | "bytes" | "" => Value::String(text),
        "int" => Value::from(
            text.parse::<i64>()
                .map_err(|_| "its type is int, its value is not".to_string())?,
        ),
        "float" => text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or("its type is float, its value is not")?,
        "bool" => Value::Bool(match text.as_str() {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
            _ => return Err("its type is bool, its value is not".into()),
        }),
        other => {
            return Err(format!(
                "its type {other:?} is not one SOPS writes for values"
            ));
        }
    })
}

fn hex_upper(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_values_are_encrypted_follows_sops_options() {
        let rules = |k: &str, v: &str| {
            let doc = YamlLoader::load_from_str(&format!("{k}: '{v}'")).unwrap();
            Rules::of(&doc[0]).unwrap()
        };
        let p = |s: &str| s.split('.').map(String::from).collect::<Vec<_>>();
        let r = rules("unencrypted_suffix", "_unencrypted");
        assert!(r.encrypted(&p("a.b")));
        assert!(!r.encrypted(&p("a_unencrypted.b")));
        let r = rules("encrypted_regex", "^(data|stringData)$");
        assert!(r.encrypted(&p("data.password")));
        assert!(!r.encrypted(&p("metadata.name")));
    }

    #[test]
    fn mac_bytes_are_written_as_sops_writes_them() {
        assert_eq!(mac_bytes(&Value::Bool(true)), b"True");
        assert_eq!(mac_bytes(&serde_json::json!(42)), b"42");
        assert_eq!(mac_bytes(&serde_json::json!(1.5)), b"1.5");
        assert_eq!(mac_bytes(&serde_json::json!("x")), b"x");
    }

    #[test]
    fn a_document_without_a_sops_section_is_not_encrypted() {
        assert!(!is_encrypted("a: 1\n"));
        assert!(!is_encrypted("sops: plain\nmac: 1\n"));
        assert!(is_encrypted("a: 1\nsops:\n  mac: ENC[x]\n"));
    }

    /// What `sops` of the test assets wrote, decrypted here.
    fn encrypted(plain: &str, extra: &[&str]) -> (String, envtest::sops::AgeKey) {
        let dir = std::env::temp_dir().join(format!("sops-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = envtest::sops::age_keygen(&dir).unwrap();
        let text = envtest::sops::sops_encrypt(&dir, &key.recipient, plain, extra).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        (text, key)
    }

    const PLAIN: &str = "password: hunter22\nnested:\n  list:\n    - a\n    - 42\n  flag: true\n  ratio: 1.5\n  empty: \"\"\nplain_unencrypted: visible\n";

    #[test]
    fn what_the_sops_tool_encrypts_decrypts_with_its_age_key() {
        let (text, key) = encrypted(PLAIN, &[]);
        assert!(is_encrypted(&text));
        assert!(!text.contains("hunter22"), "sops encrypted it");
        let keys = Keys::parse([key.identity.as_str()]).unwrap();
        let doc = decrypt(&text, &keys, Unauthenticated::Accepted).unwrap();
        let expected: Value = serde_yaml_ng::from_str(PLAIN).unwrap();
        assert_eq!(doc, expected);

        // With encrypted_regex: only the matching keys are encrypted.
        let (text, key) = encrypted(PLAIN, &["--encrypted-regex", "^password$"]);
        assert!(text.contains("ratio: 1.5"), "left in the clear");
        let doc = decrypt(
            &text,
            &Keys::parse([key.identity.as_str()]).unwrap(),
            Unauthenticated::Accepted,
        )
        .unwrap();
        assert_eq!(doc, expected);
    }

    #[test]
    fn values_outside_the_mac_refuse_the_file_unless_accepted() {
        // Issue 56, test 7: sops leaves null and empty values, and with
        // mac_only_encrypted the clear ones, out of the MAC — a writer
        // without the key adds them undetected.
        let (text, key) = encrypted("password: hunter22\nreplicas: 2\n", &[]);
        let keys = Keys::parse([key.identity.as_str()]).unwrap();
        assert!(decrypt(&text, &keys, Unauthenticated::Refused).is_ok());
        let added = text.replacen("sops:", "securityContext: null\nsops:", 1);
        assert_eq!(
            decrypt(&added, &keys, Unauthenticated::Accepted).map(|d| d["securityContext"].clone()),
            Ok(Value::Null),
            "sops itself accepts it"
        );
        let Err(SopsError::Unauthenticated { path, .. }) =
            decrypt(&added, &keys, Unauthenticated::Refused)
        else {
            panic!("a null value added without the key was accepted");
        };
        assert_eq!(path, "securityContext");
        for empty in ["hostNetwork: \"\"", "extra: {}", "list: []"] {
            let added = text.replacen("sops:", &format!("{empty}\nsops:"), 1);
            assert!(
                matches!(
                    decrypt(&added, &keys, Unauthenticated::Refused),
                    Err(SopsError::Unauthenticated { .. })
                ),
                "{empty}"
            );
        }
        // Values an unencrypted_suffix or an encrypted_regex leaves in the
        // clear: their keys are outside the MAC.
        let (clear, key) = encrypted("password: hunter22\nplain_unencrypted: visible\n", &[]);
        let keys_clear = Keys::parse([key.identity.as_str()]).unwrap();
        assert!(matches!(
            decrypt(&clear, &keys_clear, Unauthenticated::Refused),
            Err(SopsError::Unauthenticated { path, .. }) if path == "plain_unencrypted"
        ));
        let moved = clear.replace(
            "plain_unencrypted: visible",
            "hostNetwork_unencrypted: visible",
        );
        assert!(
            decrypt(&moved, &keys_clear, Unauthenticated::Accepted).is_ok(),
            "sops itself accepts a clear value under another key"
        );
        let (regex, key) = encrypted(
            "password: hunter22
replicas: 2
",
            &["--encrypted-regex", "^password$"],
        );
        let keys_regex = Keys::parse([key.identity.as_str()]).unwrap();
        assert!(matches!(
            decrypt(&regex, &keys_regex, Unauthenticated::Refused),
            Err(SopsError::Unauthenticated { path, .. }) if path == "replicas"
        ));
        // A nested key joined with ':' decrypts the same (its additional
        // data is the same path): refused unless accepted.
        let (nested, key) = encrypted("db:\n  password: hunter22\n", &[]);
        let keys_nested = Keys::parse([key.identity.as_str()]).unwrap();
        let joined = nested.replacen("db:\n    password:", "\"db:password\":", 1);
        assert_ne!(joined, nested, "the nested key was found");
        assert!(
            decrypt(&joined, &keys_nested, Unauthenticated::Accepted).is_ok(),
            "sops itself accepts it"
        );
        assert!(matches!(
            decrypt(&joined, &keys_nested, Unauthenticated::Refused),
            Err(SopsError::Unauthenticated { path, .. }) if path == "db:password"
        ));
        // mac_only_encrypted (this sops sets it from .sops.yaml only): the
        // metadata alone refuses the file, before its MAC is read.
        let mac_only = text.replacen("sops:", "sops:\n    mac_only_encrypted: true", 1);
        assert!(matches!(
            decrypt(&mac_only, &keys, Unauthenticated::Refused),
            Err(SopsError::Unauthenticated { path, .. }) if path == "sops.mac_only_encrypted"
        ));
    }

    #[test]
    fn a_plaintext_key_added_twice_is_refused_never_read_as_values() {
        // Found by the attacker's read: yaml-rust2 refuses a key twice,
        // serde's YAML takes the last; a SOPS file whose encrypted value
        // is shadowed by a plaintext one must not become plain values.
        let (text, key) = encrypted("password: hunter22\n", &[]);
        let keys = Keys::parse([key.identity.as_str()]).unwrap();
        let shadowed = text.replacen("sops:", "password: planted\nsops:", 1);
        assert!(is_encrypted(&shadowed), "read as plain values");
        assert!(matches!(
            decrypt(&shadowed, &keys, Unauthenticated::Accepted),
            Err(SopsError::Malformed(_))
        ));
        assert!(!is_encrypted("password: a\npassword: b\n# sops and mac\n"));
    }

    #[test]
    fn a_yaml_error_never_quotes_the_file() {
        // Found by hack/fuzz.sh: the parser's message for a duplicated key
        // names the key.
        let (_, key) = encrypted("a: b\n", &[]);
        let keys = Keys::parse([key.identity.as_str()]).unwrap();
        let text = "hunter22 key: 1\nhunter22 key: 2\n";
        let Err(SopsError::Malformed(message)) = decrypt(text, &keys, Unauthenticated::Refused)
        else {
            panic!("a duplicated key was read");
        };
        assert!(!message.contains("hunter22"), "{message}");
        assert!(message.contains("line 2"), "{message}");
    }

    #[test]
    fn another_key_a_changed_value_or_a_planted_plaintext_is_refused() {
        let (text, key) = encrypted(PLAIN, &[]);
        let keys = Keys::parse([key.identity.as_str()]).unwrap();
        let (_, other) = encrypted("a: b\n", &[]);
        let wrong = Keys::parse([other.identity.as_str()]).unwrap();
        assert!(
            matches!(decrypt(&text, &wrong, Unauthenticated::Accepted), Err(SopsError::NoKey(r)) if r.contains(&key.recipient))
        );

        // A value swapped for another encrypted value of the same file:
        // its path is part of what it was encrypted with.
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(prefix))
                .unwrap()
                .split_once(": ")
                .unwrap()
                .1
                .to_string()
        };
        let moved = text.replacen(&line("password:"), &line("flag:"), 1);
        assert!(
            matches!(decrypt(&moved, &keys, Unauthenticated::Accepted), Err(SopsError::Value { path, .. }) if path == "password")
        );
        // A plaintext planted where sops encrypts.
        let planted = text.replacen(&line("password:"), "planted", 1);
        assert!(matches!(
            decrypt(&planted, &keys, Unauthenticated::Accepted),
            Err(SopsError::Value { .. })
        ));
        // A clear value changed: only the MAC tells.
        let changed = text.replace("plain_unencrypted: visible", "plain_unencrypted: changed");
        assert_eq!(
            decrypt(&changed, &keys, Unauthenticated::Accepted),
            Err(SopsError::Mac)
        );
        // A value removed: the MAC tells too.
        let removed: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("ratio:"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            decrypt(&removed, &keys, Unauthenticated::Accepted),
            Err(SopsError::Mac)
        );
        // No error quotes a value.
        for e in [
            decrypt(&moved, &keys, Unauthenticated::Accepted),
            decrypt(&planted, &keys, Unauthenticated::Accepted),
        ] {
            let message = e.unwrap_err().to_string();
            assert!(
                !message.contains("hunter22") && !message.contains("planted"),
                "{message}"
            );
        }
    }
}
