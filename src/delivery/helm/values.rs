//! A HelmApp's values as one document: inline `values`, then each
//! `valuesFrom` document, then `valuesBase64`, then the `set` strings —
//! merged as Helm merges `-f` files (maps key by key, anything else
//! replaced). The result goes to helm on standard input, never on its
//! command line.

use serde_json::{Map, Value};

/// Merges `overlay` into `base` as Helm merges values files: maps are
/// merged key by key, any other value (lists included) replaces; a `null`
/// in the overlay deletes the key.
pub fn merge(base: &mut Value, overlay: Value) {
    match (base, overlay) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match (b.get_mut(&k), v) {
                    (_, Value::Null) => {
                        b.remove(&k);
                    }
                    (Some(existing @ Value::Object(_)), v @ Value::Object(_)) => merge(existing, v),
                    (_, v) => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

/// Parses a YAML values document (`valuesFrom`, `valuesBase64`); an empty
/// document is `{}`. It must be a mapping.
pub fn parse_document(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    crate::lean::yaml::check(text).map_err(|e| format!("refused: {e}"))?;
    // The parser's words may quote the document (`invalid value: string
    // "…"`), and it may be a Secret's: only where is said.
    let v: Value = serde_yaml_ng::from_str(text).map_err(|e| match e.location() {
        Some(at) => format!(
            "not a YAML document (line {}, column {})",
            at.line(),
            at.column()
        ),
        None => "not a YAML document".to_string(),
    })?;
    match v {
        Value::Object(_) => Ok(v),
        Value::Null => Ok(Value::Object(Map::new())),
        _ => Err("a values document must be a mapping".into()),
    }
}

/// Applies one Helm `--set` string (`a.b=1,c[0]=x,d={e,f}`) to `into`,
/// with Helm's rules: `true`/`false` are booleans, `null` deletes, integers
/// are numbers, anything else a string; `\,` `\.` `\=` escape.
pub fn apply_set(line: &str, into: &mut Value) -> Result<(), String> {
    for pair in split_unescaped(line, ',', true) {
        if pair.is_empty() {
            continue;
        }
        let (key, value) = split_once_unescaped(&pair, '=')
            .ok_or_else(|| format!("`--set` entry without `=`: key {:?}", key_only(&pair)))?;
        let path = parse_key(&key)?;
        let value = if let Some(list) = value.strip_prefix('{').and_then(|v| v.strip_suffix('}')) {
            Value::Array(
                split_unescaped(list, ',', false)
                    .iter()
                    .map(|s| typed(&unescape(s)))
                    .collect(),
            )
        } else {
            typed(&unescape(&value))
        };
        set_path(into, &path, value)?;
    }
    Ok(())
}

/// Puts `raw` (a `valuesFrom` key with `targetPath`) at `path` (`--set`
/// path syntax), typed as `--set` types a value — unless it is quoted in
/// `'…'` or `"…"`, which makes it a string without its quotes (Flux's
/// rule). Unlike `--set`, a comma in `raw` is part of the value. `literal`
/// (`--set-literal`): `raw` as it is, a string, quotes and all.
pub fn set_at(path: &str, raw: &str, literal: bool, into: &mut Value) -> Result<(), String> {
    let steps = parse_key(path)?;
    let quoted = raw.len() >= 2
        && ((raw.starts_with('\'') && raw.ends_with('\''))
            || (raw.starts_with('"') && raw.ends_with('"')));
    let value = if literal {
        Value::String(raw.to_string())
    } else if quoted {
        Value::String(raw[1..raw.len() - 1].to_string())
    } else {
        typed(raw)
    };
    set_path(into, &steps, value)
}

/// What `key=...` names, without its value (for error messages: a value
/// may be secret).
fn key_only(pair: &str) -> &str {
    pair.split('=').next().unwrap_or_default()
}

#[derive(Debug, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
}

fn parse_key(key: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    for part in split_unescaped(key, '.', true) {
        let part_text = part.as_str();
        let (name, mut rest) = match part_text.find('[') {
            Some(i) => (&part_text[..i], &part_text[i..]),
            None => (part_text, ""),
        };
        if !name.is_empty() {
            steps.push(Step::Key(unescape(name)));
        }
        while let Some(r) = rest.strip_prefix('[') {
            let end = r
                .find(']')
                .ok_or_else(|| format!("unclosed `[` in key {key:?}"))?;
            let index = r[..end]
                .parse::<usize>()
                .map_err(|_| format!("bad list index in key {key:?}"))?;
            if index > MAX_LIST_INDEX {
                return Err(format!(
                    "list index {index} in key {key:?} is over {MAX_LIST_INDEX}"
                ));
            }
            steps.push(Step::Index(index));
            rest = &r[end + 1..];
        }
        if !rest.is_empty() {
            return Err(format!("unexpected {rest:?} in key {key:?}"));
        }
    }
    if steps.is_empty() {
        return Err("`--set` entry with an empty key".into());
    }
    Ok(steps)
}

/// Puts `value` at `path` under `root`, making maps and lists on the way
/// (a loop, not recursion: a path's length is bounded, but no stack
/// should depend on it).
fn set_path(root: &mut Value, path: &[Step], value: Value) -> Result<(), String> {
    let mut at = root;
    for (i, step) in path.iter().enumerate() {
        let last = i + 1 == path.len();
        at = match step {
            Step::Key(k) => {
                if !at.is_object() {
                    *at = Value::Object(Map::new());
                }
                let map = at.as_object_mut().ok_or("not a map")?;
                if last && value.is_null() {
                    map.remove(k);
                    return Ok(());
                }
                map.entry(k.clone()).or_insert(Value::Null)
            }
            Step::Index(i) => {
                if !at.is_array() {
                    *at = Value::Array(Vec::new());
                }
                let list = at.as_array_mut().ok_or("not a list")?;
                while list.len() <= *i {
                    list.push(Value::Null);
                }
                &mut list[*i]
            }
        };
    }
    *at = value;
    Ok(())
}

/// The most `set` strings a HelmApp may have.
pub const MAX_SET_ITEMS: usize = 200;
/// The longest one `set` string may be, in bytes.
pub const MAX_SET_LENGTH: usize = 4096;
/// The most steps one `--set` path may have (`a.b[0]` is three).
pub const MAX_PATH_STEPS: usize = 64;
/// The highest list index a `--set` path may name.
pub const MAX_LIST_INDEX: usize = 1_000;

/// Whether `spec`'s inline values and `set` strings are within the bounds
/// (the CRD says the same where its schema can: `maxItems`, `maxLength`):
/// `Err` names the first that is not — by its position and key, never its
/// value. Checked before anything else reads them (reason
/// `InvalidValues`, no helm run).
pub fn check_bounds(spec: &apis::HelmAppSpec) -> Result<(), String> {
    use apis::values::{MAX_VALUES_DEPTH, depth};
    if let Some(values) = &spec.values
        && depth(values) > MAX_VALUES_DEPTH
    {
        return Err(format!(
            "spec.values is nested more than {MAX_VALUES_DEPTH} levels deep"
        ));
    }
    if spec.set.len() > MAX_SET_ITEMS {
        return Err(format!(
            "spec.set has {} entries; at most {MAX_SET_ITEMS} are allowed",
            spec.set.len()
        ));
    }
    for (i, line) in spec.set.iter().enumerate() {
        if line.len() > MAX_SET_LENGTH {
            return Err(format!(
                "spec.set[{i}] is {} bytes long; at most {MAX_SET_LENGTH} are allowed",
                line.len()
            ));
        }
        for pair in split_unescaped(line, ',', true) {
            let Some((key, _)) = split_once_unescaped(&pair, '=') else {
                continue;
            };
            let steps = split_unescaped(&key, '.', true).len() + key.matches('[').count();
            if steps > MAX_PATH_STEPS {
                return Err(format!(
                    "spec.set[{i}]: a path of {steps} steps; at most {MAX_PATH_STEPS} are allowed"
                ));
            }
        }
    }
    Ok(())
}

/// Helm's typing of a `--set` value.
fn typed(s: &str) -> Value {
    match s {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        "null" => Value::Null,
        _ => {
            let digits = s.strip_prefix('-').unwrap_or(s);
            let integer = !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'));
            match s.parse::<i64>() {
                Ok(n) if integer => Value::from(n),
                _ => Value::String(s.to_string()),
            }
        }
    }
}

/// Splits on `sep` not preceded by a backslash (kept escaped), and — when
/// `braces` — not inside `{...}`.
fn split_unescaped(s: &str, sep: char, braces: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '{' if braces => {
                depth += 1;
                cur.push(c);
            }
            '}' if braces => {
                depth = depth.saturating_sub(1);
                cur.push(c);
            }
            c if c == sep && depth == 0 => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn split_once_unescaped(s: &str, sep: char) -> Option<(String, String)> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            c if c == sep && !escaped => {
                return Some((s[..i].to_string(), s[i + c.len_utf8()..].to_string()));
            }
            _ => escaped = false,
        }
    }
    None
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Every string leaf of `values` at least 4 characters long: what helm's
/// messages are scrubbed of before they reach a condition, an Event or a
/// log line.
pub fn secrets_of(values: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) if s.len() >= 4 => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(m) => m.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(values, &mut out);
    // Longest first, so a value containing another is scrubbed whole.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

/// `text` with every one of `secrets` replaced by `[redacted]`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(text.to_string(), |t, s| t.replace(s.as_str(), "[redacted]"))
}

/// What a HelmApp's helm messages are scrubbed of (its values' strings,
/// [`secrets_of`], in every form a message may carry them: as written,
/// quoted by Go's `%q` or escaped in JSON — what the apiserver and helm
/// echo — and base64 as a Secret's `data` holds them), kept beside the
/// observation for every action — its `Debug` shows how many, never which.
#[derive(Clone, Default)]
pub struct Redactor {
    /// Every form of every value, longest first.
    forms: Vec<String>,
    /// How many values they are the forms of.
    values: usize,
}

impl Redactor {
    /// The strings of `values`, in each of their forms.
    pub fn of(values: &Value) -> Self {
        Self::of_strings(secrets_of(values))
    }

    /// `secrets` (those of at least 4 characters), in each of their forms.
    pub fn of_strings(secrets: Vec<String>) -> Self {
        let secrets: Vec<String> = secrets.into_iter().filter(|s| s.len() >= 4).collect();
        let mut all: Vec<String> = secrets
            .iter()
            .flat_map(|s| forms(s))
            .filter(|f| f.len() >= 4)
            .collect();
        // Longest first, so a form containing another is scrubbed whole.
        all.sort_by_key(|s| std::cmp::Reverse(s.len()));
        all.dedup();
        Redactor {
            forms: all,
            values: secrets.len(),
        }
    }

    /// `text` with every value replaced by `[redacted]`.
    pub fn redact(&self, text: &str) -> String {
        redact(text, &self.forms)
    }
}

/// `secret` as written, Go-quoted (`strconv.Quote`, without its quotes),
/// JSON-escaped (also as Go's encoder escapes `<`, `>`, `&`), and base64.
fn forms(secret: &str) -> Vec<String> {
    use base64::Engine;
    let json = serde_json::to_string(secret).unwrap_or_default();
    let json = json
        .strip_prefix('"')
        .and_then(|j| j.strip_suffix('"'))
        .unwrap_or_default()
        .to_string();
    let go_json = json
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026");
    vec![
        secret.to_string(),
        go_quoted(secret),
        json,
        go_json,
        base64::engine::general_purpose::STANDARD.encode(secret),
    ]
}

/// What Go's `strconv.Quote` makes of `s`, without the surrounding quotes.
fn go_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} values)", self.values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_value_at_a_target_path_is_typed_unless_quoted_and_keeps_its_commas() {
        let mut v = json!({ "db": { "host": "h" } });
        set_at("db.auth.password", "p,a=s:s", false, &mut v).unwrap();
        set_at("db.port", "5432", false, &mut v).unwrap();
        set_at("db.name", "'5432'", false, &mut v).unwrap();
        set_at("list[1].x", "true", false, &mut v).unwrap();
        assert_eq!(
            v,
            json!({
                "db": { "host": "h", "auth": { "password": "p,a=s:s" }, "port": 5432, "name": "5432" },
                "list": [null, { "x": true }]
            })
        );
        assert!(set_at("a[", "x", false, &mut v).is_err());
    }

    #[test]
    fn a_literal_value_is_the_string_as_written() {
        let mut v = json!({});
        for (path, raw) in [
            ("a", "5432"),
            ("b", "'quoted'"),
            ("c", "{x: [1, 2]}"),
            ("d", "true"),
        ] {
            set_at(path, raw, true, &mut v).unwrap();
        }
        assert_eq!(
            v,
            json!({ "a": "5432", "b": "'quoted'", "c": "{x: [1, 2]}", "d": "true" })
        );
        // The path is still a path.
        set_at(r"e\.f.g", "1", true, &mut v).unwrap();
        assert_eq!(v["e.f"]["g"], "1");
    }

    fn set(lines: &[&str]) -> Value {
        let mut v = json!({});
        for l in lines {
            apply_set(l, &mut v).unwrap();
        }
        v
    }

    #[test]
    fn set_follows_helms_rules_for_paths_types_lists_and_escapes() {
        assert_eq!(
            set(&["image.tag=1.2.3,replicas=3,debug=true,ratio=0.5,zip=0123"]),
            json!({ "image": { "tag": "1.2.3" }, "replicas": 3, "debug": true,
                    "ratio": "0.5", "zip": "0123" })
        );
        assert_eq!(
            set(&["hosts[1]=b,hosts[0]=a", "list={x,y,3}"]),
            json!({ "hosts": ["a", "b"], "list": ["x", "y", 3] })
        );
        assert_eq!(
            set(&[
                r"annotations.kubernetes\.io/ingress\.class=nginx",
                r"msg=a\,b",
                "url=http://x?a=b"
            ]),
            json!({ "annotations": { "kubernetes.io/ingress.class": "nginx" }, "msg": "a,b",
                    "url": "http://x?a=b" })
        );
        assert_eq!(set(&["a.b=1", "a.b=null"]), json!({ "a": {} }));
        let mut v = json!({});
        let err = apply_set("password", &mut v).unwrap_err();
        assert!(err.contains("without `=`"), "{err}");
        assert!(apply_set("a[x]=1", &mut v).is_err());
    }

    #[test]
    fn later_documents_merge_into_earlier_ones_like_helm_values_files() {
        let mut base = json!({ "image": { "repo": "nginx", "tag": "1" }, "ports": [80, 443], "keep": 1, "drop": 2 });
        merge(
            &mut base,
            json!({ "image": { "tag": "2" }, "ports": [8080], "drop": null, "new": { "a": 1 } }),
        );
        assert_eq!(
            base,
            json!({ "image": { "repo": "nginx", "tag": "2" }, "ports": [8080], "keep": 1, "new": { "a": 1 } })
        );
    }

    #[test]
    fn a_values_document_past_the_yaml_budget_is_refused() {
        let mut doc = String::from("l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let refs = vec![format!("*l{}", i - 1); 10].join(", ");
            doc.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
        }
        let e = parse_document(&doc).unwrap_err();
        assert!(e.contains("more than 100000 nodes"), "{e}");
        let deep = format!("a: {}{}", "[".repeat(300), "]".repeat(300));
        assert!(parse_document(&deep).unwrap_err().contains("deeper than"));
    }

    #[test]
    fn documents_must_be_mappings_and_empty_is_empty() {
        assert_eq!(parse_document("").unwrap(), json!({}));
        assert_eq!(
            parse_document("a: 1\nb: [x]\n").unwrap(),
            json!({ "a": 1, "b": ["x"] })
        );
        assert!(parse_document("- a\n- b\n").is_err());
        assert!(parse_document("a: [").is_err());
        // An error never quotes the document (it may be a Secret's).
        let e = parse_document("key: !!int s3cr3t\n").unwrap_err();
        assert!(!e.contains("s3cr3t"), "{e}");
    }

    #[test]
    fn messages_are_scrubbed_of_every_value() {
        let values =
            json!({ "db": { "password": "hunter22", "user": "app" }, "list": ["tokenvalue"] });
        let secrets = secrets_of(&values);
        let said = redact(
            "Error: password hunter22 rejected for tokenvalue (app)",
            &secrets,
        );
        assert_eq!(
            said,
            "Error: password [redacted] rejected for [redacted] (app)"
        );
    }

    #[test]
    fn a_value_is_scrubbed_in_every_form_a_message_echoes_it() {
        let r = Redactor::of(&json!({ "password": "p\"w<&>1\n" }));
        for echoed in [
            "raw: p\"w<&>1\n.",
            // Go's %q, as the apiserver quotes a value it refuses.
            r#"go: "p\"w<&>1\n"."#,
            // Go's JSON encoder (HTML-safe).
            r#"json: "p\"w\u003c\u0026\u003e1\n"."#,
            // base64, as a Secret's data holds it.
            "b64: cCJ3PCY+MQo=.",
        ] {
            let said = r.redact(echoed);
            assert!(said.contains("[redacted]"), "{echoed:?} → {said:?}");
            assert!(
                !said.contains("w<&>") && !said.contains("u003c") && !said.contains("cCJ3"),
                "{said:?}"
            );
        }
    }
}
