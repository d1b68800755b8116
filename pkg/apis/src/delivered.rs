//! `status.apps`: what was delivered to the Hossted API, compact enough that
//! 10,000 releases fit well under etcd's object limit (issue: a status of
//! one readable entry per release reached 1.5 MiB at a few thousand
//! releases, and then every status write failed).
//!
//! It keeps only what is needed never to repeat a delivered report and to
//! send a removal after a restart: per release its revision, settled
//! status, app UUID and whether it carries the `hossted_helm` marker.
//!
//! # Format
//!
//! A map from namespace to that namespace's releases, sorted by name and
//! separated by one space. Each release is `:`-separated fields, trailing
//! empty ones left out:
//!
//! ```text
//! <name>:<revision>:<app uuid>[:<status>[:h]]
//! ```
//!
//! - `<app uuid>`: `A-<uuid>` written as the UUID's 16 bytes in unpadded
//!   base64url (22 characters); any other value as `=` followed by the value
//!   with `%`, `:` and whitespace percent-escaped.
//! - `<status>`: empty means `deployed`.
//! - `h`: the release carries the `hossted_helm` marker.
//!
//! ```
//! use apis::{DeliveredApp, decode_apps, encode_apps};
//! let web = DeliveredApp {
//!     namespace: "shop".into(),
//!     name: "web".into(),
//!     revision: 3,
//!     status: "deployed".into(),
//!     app_uuid: "A-0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30".into(),
//!     hossted_helm: true,
//! };
//! let packed = encode_apps(std::slice::from_ref(&web));
//! assert_eq!(packed["shop"], "web:3:C36cUj2PTmGixF-dHnqLMA::h");
//! let (apps, errors) = decode_apps(&packed);
//! assert_eq!((apps, errors.len()), (vec![web], 0));
//! ```

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// One delivered release, as `status.apps` keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeliveredApp {
    pub namespace: String,
    pub name: String,
    pub revision: i64,
    /// The Helm status delivered (`deployed`, `failed`, ...).
    pub status: String,
    /// `A-<uuid>`.
    pub app_uuid: String,
    pub hossted_helm: bool,
}

/// Packs `apps` into the `status.apps` map (see the module docs).
pub fn encode_apps(apps: &[DeliveredApp]) -> BTreeMap<String, String> {
    let mut by_namespace: BTreeMap<&str, Vec<&DeliveredApp>> = BTreeMap::new();
    for app in apps {
        by_namespace.entry(&app.namespace).or_default().push(app);
    }
    by_namespace
        .into_iter()
        .map(|(namespace, mut apps)| {
            apps.sort_by(|a, b| a.name.cmp(&b.name));
            let mut packed = String::with_capacity(apps.len() * 40);
            for (i, app) in apps.into_iter().enumerate() {
                if i > 0 {
                    packed.push(' ');
                }
                encode_one(app, &mut packed);
            }
            (namespace.to_string(), packed)
        })
        .collect()
}

fn encode_one(app: &DeliveredApp, out: &mut String) {
    use std::fmt::Write;
    let _ = write!(out, "{}:{}:", app.name, app.revision);
    encode_uuid(&app.app_uuid, out);
    let status = if app.status == "deployed" {
        ""
    } else {
        app.status.as_str()
    };
    match (status, app.hossted_helm) {
        ("", false) => {}
        (s, false) => {
            out.push(':');
            out.push_str(s);
        }
        (s, true) => {
            out.push(':');
            out.push_str(s);
            out.push_str(":h");
        }
    }
}

fn encode_uuid(app_uuid: &str, out: &mut String) {
    if let Some(uuid) = app_uuid
        .strip_prefix("A-")
        .and_then(|u| uuid::Uuid::parse_str(u).ok())
        .filter(|u| format!("A-{u}") == app_uuid)
    {
        URL_SAFE_NO_PAD.encode_string(uuid.as_bytes(), out);
        return;
    }
    out.push('=');
    for c in app_uuid.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            c if c.is_whitespace() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
            c => out.push(c),
        }
    }
}

/// An entry of `status.apps` that could not be read (edited by hand?).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub namespace: String,
    pub entry: String,
    pub reason: &'static str,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status.apps[{}] entry {:?}: {}",
            self.namespace, self.entry, self.reason
        )
    }
}

/// Unpacks `status.apps`. Entries that cannot be read are returned as
/// errors; the others are still read.
pub fn decode_apps(packed: &BTreeMap<String, String>) -> (Vec<DeliveredApp>, Vec<DecodeError>) {
    let mut apps = Vec::new();
    let mut errors = Vec::new();
    for (namespace, entries) in packed {
        for entry in entries.split_whitespace() {
            match decode_one(namespace, entry) {
                Ok(app) => apps.push(app),
                Err(reason) => errors.push(DecodeError {
                    namespace: namespace.clone(),
                    entry: entry.to_string(),
                    reason,
                }),
            }
        }
    }
    (apps, errors)
}

fn decode_one(namespace: &str, entry: &str) -> Result<DeliveredApp, &'static str> {
    let mut fields = entry.split(':');
    let name = fields.next().filter(|n| !n.is_empty()).ok_or("no name")?;
    let revision = fields
        .next()
        .and_then(|r| r.parse::<i64>().ok())
        .ok_or("no revision number")?;
    let app_uuid = decode_uuid(fields.next().ok_or("no app UUID")?)?;
    let status = match fields.next() {
        None | Some("") => "deployed",
        Some(s) => s,
    };
    let hossted_helm = match fields.next() {
        None | Some("") => false,
        Some("h") => true,
        Some(_) => return Err("unknown flag (only `h` is defined)"),
    };
    if fields.next().is_some() {
        return Err("too many fields");
    }
    Ok(DeliveredApp {
        namespace: namespace.to_string(),
        name: name.to_string(),
        revision,
        status: status.to_string(),
        app_uuid,
        hossted_helm,
    })
}

fn decode_uuid(field: &str) -> Result<String, &'static str> {
    if let Some(verbatim) = field.strip_prefix('=') {
        return percent_decode(verbatim).ok_or("a bad %-escape in the app UUID");
    }
    let bytes = URL_SAFE_NO_PAD
        .decode(field)
        .map_err(|_| "the app UUID is not base64url")?;
    let uuid = uuid::Uuid::from_slice(&bytes).map_err(|_| "the app UUID is not 16 bytes")?;
    Ok(format!("A-{uuid}"))
}

fn percent_decode(s: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(s.len());
    let mut rest = s.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(ns: &str, name: &str, rev: i64, status: &str, uuid: &str, h: bool) -> DeliveredApp {
        DeliveredApp {
            namespace: ns.into(),
            name: name.into(),
            revision: rev,
            status: status.into(),
            app_uuid: uuid.into(),
            hossted_helm: h,
        }
    }

    #[test]
    fn every_shape_of_entry_round_trips() {
        let apps = vec![
            app(
                "a",
                "api",
                12,
                "failed",
                "A-5f9d1e7a-8b30-4e61-a2c4-0b7e9c523d8f",
                true,
            ),
            app(
                "a",
                "web",
                1,
                "deployed",
                "A-0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30",
                false,
            ),
            app(
                "b",
                "db.main",
                2,
                "superseded",
                "A-0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30",
                false,
            ),
            // Not the canonical form: kept verbatim, escaped.
            app("b", "odd", 3, "deployed", "A-0B7E9C52 x:y%z", true),
            app("b", "short", 4, "deployed", "", false),
        ];
        let packed = encode_apps(&apps);
        assert_eq!(packed.len(), 2);
        assert!(!packed["b"].contains("x:y"), "{}", packed["b"]);
        let (mut back, errors) = decode_apps(&packed);
        assert!(errors.is_empty(), "{errors:?}");
        back.sort_by(|x, y| (&x.namespace, &x.name).cmp(&(&y.namespace, &y.name)));
        let mut want = apps;
        want.sort_by(|x, y| (&x.namespace, &x.name).cmp(&(&y.namespace, &y.name)));
        assert_eq!(back, want);
    }

    #[test]
    fn a_deployed_unmarked_release_is_three_fields() {
        let packed = encode_apps(&[app(
            "a",
            "web",
            7,
            "deployed",
            "A-0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30",
            false,
        )]);
        assert_eq!(packed["a"].split(':').count(), 3, "{}", packed["a"]);
        assert_eq!(packed["a"].len(), "web:7:".len() + 22);
    }

    #[test]
    fn a_broken_entry_is_an_error_and_the_others_still_read() {
        let good = encode_apps(&[app(
            "a",
            "web",
            1,
            "deployed",
            "A-0b7e9c52-3d8f-4e61-a2c4-5f9d1e7a8b30",
            false,
        )]);
        for bad in [
            "x",
            "x:notanumber:AAAAAAAAAAAAAAAAAAAAAA",
            "x:1:!!",
            "x:1:AAAA",
            "x:1:=%zz",
            "x:1:AAAAAAAAAAAAAAAAAAAAAA:deployed:q",
            "x:1:AAAAAAAAAAAAAAAAAAAAAA:deployed:h:extra",
            ":1:AAAAAAAAAAAAAAAAAAAAAA",
        ] {
            let packed: BTreeMap<String, String> =
                [("a".to_string(), format!("{} {bad}", good["a"]))].into();
            let (apps, errors) = decode_apps(&packed);
            assert_eq!(apps.len(), 1, "{bad}");
            assert_eq!(errors.len(), 1, "{bad}");
            assert_eq!(errors[0].entry, bad);
        }
    }
}
