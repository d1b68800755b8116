//! Which objects a drift ignore rule or a post-renderer's patch names
//! ([`ObjectSelector`], kustomize's and Flux's target): anchored regular
//! expressions on group, version, kind, name and namespace, and label
//! selector strings (`app=web,tier in (a,b),!canary`, as `kubectl -l`
//! writes them) on labels and annotations, parsed into kube's
//! [`Selector`].
//!
//! Every string is the tenant's (a HelmApp field): bounded by the CRD
//! ([`MAX_LEN`] characters for a selector), a selector parsed in one pass,
//! a pattern compiled within [`PATTERN_SIZE_LIMIT`] (the CRD bounds how
//! many there are) and matched in linear
//! time (the regex crate has no backtracking).

use std::collections::{BTreeMap, BTreeSet};

use kube::core::{Expression, Selector, SelectorExt};
use regex::Regex;
use serde_json::Value;

/// The most memory one pattern may compile to.
pub const PATTERN_SIZE_LIMIT: usize = 32 * 1024;

/// The fields of a target as written (empty: any).
#[derive(Debug, Default, Clone, Copy)]
pub struct Fields<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
    pub label_selector: &'a str,
    pub annotation_selector: &'a str,
}

/// A target compiled; `None` fields match any.
#[derive(Debug, Clone)]
pub struct ObjectSelector {
    group: Option<Regex>,
    version: Option<Regex>,
    kind: Option<Regex>,
    name: Option<Regex>,
    namespace: Option<Regex>,
    labels: Option<Selector>,
    annotations: Option<Selector>,
}

/// What an object is, for [`ObjectSelector::selects`]: its identity, and
/// its document (for labels and annotations; `None`: not known — a
/// selector on them selects nothing).
pub struct Candidate<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
    pub document: Option<&'a Value>,
}

impl ObjectSelector {
    /// `fields` compiled; an error names the field (`name: …`).
    pub fn compile(fields: &Fields) -> Result<ObjectSelector, String> {
        let pattern = |field: &str, text: &str| -> Result<Option<Regex>, String> {
            if text.is_empty() {
                return Ok(None);
            }
            regex::RegexBuilder::new(&format!("^(?:{text})$"))
                .size_limit(PATTERN_SIZE_LIMIT)
                .build()
                .map(Some)
                .map_err(|e| format!("{field}: not a regular expression: {}", last_line(&e)))
        };
        let select = |field: &str, text: &str| -> Result<Option<Selector>, String> {
            if text.is_empty() {
                return Ok(None);
            }
            parse(text).map(Some).map_err(|e| format!("{field}: {e}"))
        };
        Ok(ObjectSelector {
            group: pattern("group", fields.group)?,
            version: pattern("version", fields.version)?,
            kind: pattern("kind", fields.kind)?,
            name: pattern("name", fields.name)?,
            namespace: pattern("namespace", fields.namespace)?,
            labels: select("labelSelector", fields.label_selector)?,
            annotations: select("annotationSelector", fields.annotation_selector)?,
        })
    }

    /// Whether it selects by labels or annotations.
    pub fn reads_metadata(&self) -> bool {
        self.labels.is_some() || self.annotations.is_some()
    }

    /// Whether `c` is one it names.
    pub fn selects(&self, c: &Candidate) -> bool {
        let (group, version) = c
            .api_version
            .rsplit_once('/')
            .unwrap_or(("", c.api_version));
        let is = |want: &Option<Regex>, have: &str| want.as_ref().is_none_or(|r| r.is_match(have));
        let metadata = |field: &str, want: &Option<Selector>| {
            want.as_ref().is_none_or(|s| {
                c.document
                    .is_some_and(|d| selects(s, &string_map(d, field)))
            })
        };
        is(&self.group, group)
            && is(&self.version, version)
            && is(&self.kind, c.kind)
            && is(&self.name, c.name)
            && is(&self.namespace, c.namespace)
            && metadata("labels", &self.labels)
            && metadata("annotations", &self.annotations)
    }
}

/// `metadata.<field>` of `object` as a map (non-string values left out).
fn string_map(object: &Value, field: &str) -> BTreeMap<String, String> {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// The regex crate's error text is several lines (the pattern, a caret):
/// a condition gets its last line, what is wrong.
fn last_line(e: &regex::Error) -> String {
    e.to_string()
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The longest selector the CRD accepts.
pub const MAX_LEN: usize = 1024;

/// `text` parsed; an error names the requirement it could not read.
pub fn parse(text: &str) -> Result<Selector, String> {
    if text.len() > MAX_LEN {
        return Err(format!("longer than {MAX_LEN} characters"));
    }
    let mut expressions = Vec::new();
    for requirement in requirements(text)? {
        let r = trimmed(requirement);
        if r.is_empty() {
            return Err("an empty requirement (two commas in a row?)".into());
        }
        expressions.push(expression(r).map_err(|e| format!("{r:?}: {e}"))?);
    }
    Ok(Selector::from_iter(expressions))
}

/// Whether `selector` selects an object with `pairs` (its labels or
/// annotations).
pub fn selects(selector: &Selector, pairs: &BTreeMap<String, String>) -> bool {
    selector.matches(pairs)
}

/// The requirements of `text`: split at commas outside `( … )`.
fn requirements(text: &str) -> Result<Vec<&str>, String> {
    let (mut out, mut start, mut open) = (Vec::new(), 0, false);
    for (i, c) in text.char_indices() {
        match c {
            '(' if open => return Err("a `(` inside a set".into()),
            '(' => open = true,
            ')' if !open => return Err("a `)` without its `(`".into()),
            ')' => open = false,
            ',' if !open => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if open {
        return Err("a set without its `)`".into());
    }
    if !trimmed(text).is_empty() {
        out.push(&text[start..]);
    }
    Ok(out)
}

fn expression(r: &str) -> Result<Expression, String> {
    if let Some(key) = r.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(key_of(key)?));
    }
    if let Some((key, value)) = r.split_once("!=") {
        return Ok(Expression::NotEqual(key_of(key)?, value_of(value)?));
    }
    if let Some((key, value)) = r.split_once("==").or_else(|| r.split_once('=')) {
        return Ok(Expression::Equal(key_of(key)?, value_of(value)?));
    }
    if let Some(open) = r.find('(') {
        let head = trimmed(&r[..open]);
        let set = r[open + 1..]
            .strip_suffix(')')
            .ok_or("text after the set's `)`")?;
        let values = set
            .split(',')
            .map(value_of)
            .collect::<Result<BTreeSet<_>, _>>()?;
        return match head.rsplit_once(|c: char| c.is_ascii_whitespace()) {
            Some((key, "notin")) => Ok(Expression::NotIn(key_of(key)?, values)),
            Some((key, "in")) => Ok(Expression::In(key_of(key)?, values)),
            _ => Err("a set needs `in` or `notin` before it".into()),
        };
    }
    Ok(Expression::Exists(key_of(r)?))
}

/// A key: an optional DNS prefix and `/`, then a name of at most 63
/// characters of `[A-Za-z0-9._-]`, alphanumeric at both ends.
fn key_of(text: &str) -> Result<String, String> {
    let key = trimmed(text);
    let name = match key.rsplit_once('/') {
        Some((prefix, name)) => {
            let dns = !prefix.is_empty()
                && prefix.len() <= 253
                && prefix
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
            if !dns {
                return Err(format!(
                    "{key:?} is not a key: its prefix is not a DNS name"
                ));
            }
            name
        }
        None => key,
    };
    if name.is_empty() || !valid_name(name) {
        return Err(format!("{key:?} is not a key"));
    }
    Ok(key.to_string())
}

/// A value: empty, or a name as [`key_of`]'s.
fn value_of(text: &str) -> Result<String, String> {
    let value = trimmed(text);
    if value.is_empty() || valid_name(value) {
        Ok(value.to_string())
    } else {
        Err(format!("{value:?} is not a value"))
    }
}

/// `text` without ASCII white space at its ends (Kubernetes' own: other
/// white space is part of the text, and refused).
fn trimmed(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_ascii_whitespace())
}

fn valid_name(name: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    name.len() <= 63
        && alnum(name.chars().next())
        && alnum(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn each_operator_selects_as_kubectl_does() {
        let web = pairs(&[("app", "web"), ("tier", "a"), ("team.io/owner", "x")]);
        for (selector, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("tier in (a, b)", true),
            ("tier\tin\t(a)", true),
            ("tier notin (a,b)", false),
            ("tier notin (c)", true),
            ("canary notin (c)", true),
            ("team.io/owner", true),
            ("!team.io/owner", false),
            ("!canary", true),
            ("app=web,tier in (a,b),!canary", true),
            ("app=web,tier=b", false),
            ("", true),
        ] {
            let s = parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
            assert_eq!(selects(&s, &web), want, "{selector}");
        }
    }

    #[test]
    fn a_malformed_selector_is_an_error_naming_its_requirement() {
        for bad in [
            "app=web,,tier=a",
            "tier in (a,b",
            "tier in a,b)",
            "tier (a)",
            "tier in ((a))",
            "app=we b",
            "=web",
            "-app=web",
            "/app=web",
            "Bad_Prefix/app=web",
            "tier in (a) x",
            "app=\u{a0}web",
            "tier\u{3000}in (a)",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        let e = parse("app=web,tier=b c").unwrap_err();
        assert!(e.starts_with("\"tier=b c\""), "{e}");
        assert!(parse(&"a".repeat(MAX_LEN + 1)).is_err());
    }

    /// Hostile input: any string of selector characters parses or is an
    /// error, never a panic, in time linear in its length.
    #[test]
    fn random_strings_never_panic() {
        let alphabet: Vec<char> = "ab=!(), in notin/.-_\u{e9}".chars().collect();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..20_000 {
            let len = (seed % 24) as usize;
            let text: String = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    alphabet[(seed % alphabet.len() as u64) as usize]
                })
                .collect();
            let _ = parse(&text);
        }
    }
}
