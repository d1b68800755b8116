//! The JSON schemas of a chart (`values.schema.json`, subcharts' too) hold
//! no reference helm would resolve over the network or the disk: helm
//! loads what a `$ref` (or a `$schema` it does not know) names itself, on
//! install, upgrade and dry run — outside the operator's address policy,
//! from the operator's network position (cloud metadata, cluster-internal
//! services). So every reference must stay inside its document (`#…`) and
//! `$schema` must name a JSON Schema draft; anything else refuses the chart
//! (`ChartInvalid`, naming the file and the reference) before helm sees it.
//! Validation itself stays helm's.

use serde_json::Value;

/// Bytes of one schema file read, at most.
pub const MAX_SCHEMA_BYTES: usize = 4 * 1024 * 1024;

/// The JSON Schema drafts helm knows without loading them.
const DRAFTS: [&str; 6] = [
    "json-schema.org/schema",
    "json-schema.org/draft-04/schema",
    "json-schema.org/draft-06/schema",
    "json-schema.org/draft-07/schema",
    "json-schema.org/draft/2019-09/schema",
    "json-schema.org/draft/2020-12/schema",
];

/// Whether `path` (in a chart) names a schema helm reads.
pub fn is_schema(path: &str) -> bool {
    path == "values.schema.json" || path.ends_with("/values.schema.json")
}

/// `Err` names the first reference of the schema `text` (the file at
/// `path`) that leaves the document, or why the file is refused.
pub fn check(path: &str, text: &[u8]) -> Result<(), String> {
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(format!("{path} is larger than {MAX_SCHEMA_BYTES} bytes"));
    }
    let doc: Value = serde_json::from_slice(text)
        .map_err(|e| format!("{path} is not JSON ({})", e.classify_name()))?;
    // Every object of the file is read, data included: a local pointer
    // (`"$ref": "#/default"`) makes helm's validator compile whatever it
    // points at — a keyword's data, a property named `default` — as a
    // schema, so no part of the document is out of its reach.
    let mut todo = vec![&doc];
    while let Some(v) = todo.pop() {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    if let Value::String(s) = v
                        && let Some(why) = refused(k, s)
                    {
                        let shown: String = s.chars().take(200).collect();
                        return Err(format!(
                            "{path}: {k} {shown:?} {why}; helm would load it itself, outside the operator's address policy (only references inside the schema, \"#/…\", are allowed, anywhere in the file)"
                        ));
                    }
                    todo.push(v);
                }
            }
            Value::Array(items) => todo.extend(items),
            _ => {}
        }
    }
    Ok(())
}

/// Why the keyword `key` with value `value` is refused, if it is.
fn refused(key: &str, value: &str) -> Option<&'static str> {
    match key {
        "$ref" | "$dynamicRef" | "$recursiveRef" if !value.starts_with('#') => {
            Some("names another document")
        }
        "$schema" => {
            let bare = value
                .strip_prefix("https://")
                .or_else(|| value.strip_prefix("http://"))
                .unwrap_or(value);
            let bare = bare.strip_suffix('#').unwrap_or(bare);
            (!DRAFTS.contains(&bare)).then_some("is not a JSON Schema draft helm knows")
        }
        _ => None,
    }
}

/// `serde_json`'s error category, never the input.
trait Classify {
    fn classify_name(&self) -> &'static str;
}

impl Classify for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "unreadable",
            serde_json::error::Category::Syntax => "a syntax error",
            serde_json::error::Category::Data => "unexpected data",
            serde_json::error::Category::Eof => "cut short",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_references_inside_the_document_and_known_drafts_pass() {
        let ok = br##"{"$schema": "http://json-schema.org/draft-07/schema#",
            "$id": "https://example.com/values", "definitions": {"p": {"type": "integer"}},
            "properties": {"port": {"$ref": "#/definitions/p"}, "$ref": {"type": "string"}}}"##;
        assert_eq!(check("values.schema.json", ok), Ok(()));
        for bad in [
            r#"{"properties": {"x": {"$ref": "http://169.254.169.254/latest/meta-data"}}}"#,
            r#"{"allOf": [{"$ref": "file:///etc/passwd"}]}"#,
            r#"{"$ref": "other.json#/x"}"#,
            r#"{"$ref": "//evil.example/x"}"#,
            r#"{"$schema": "http://10.0.0.1/schema"}"#,
            r#"{"items": [{"$dynamicRef": "https://evil/x"}]}"#,
        ] {
            let e = check("charts/sub/values.schema.json", bad.as_bytes()).unwrap_err();
            assert!(e.starts_with("charts/sub/values.schema.json: $"), "{e}");
        }
        assert!(check("values.schema.json", b"{not json").is_err());
        // Bitnami's charts name the unversioned meta-schema.
        let bitnami = br#"{"$schema": "http://json-schema.org/schema#", "properties": {"a": {"default": "$ref"}}}"#;
        assert_eq!(check("values.schema.json", bitnami), Ok(()));
        // A keyword's data is a schema too once a local pointer names it.
        for pointed in [
            r##"{"default": {"$ref": "http://169.254.169.254/"}, "$ref": "#/default"}"##,
            r##"{"enum": [{"$ref": "http://x/"}], "$ref": "#/enum/0"}"##,
            r##"{"properties": {"a": {"examples": [{"$schema": "http://x/"}]}}}"##,
        ] {
            assert!(
                check("values.schema.json", pointed.as_bytes()).is_err(),
                "{pointed}"
            );
        }
        // A schema *named* like a data keyword, or under a keyword helm does
        // not know.
        for named in [
            r#"{"properties": {"default": {"$ref": "http://169.254.169.254/"}}}"#,
            r##"{"definitions": {"enum": {"$ref": "http://x/"}}, "$ref": "#/definitions/enum"}"##,
            r#"{"$defs": {"examples": {"items": {"$ref": "http://x/"}}}}"#,
            r#"{"patternProperties": {"const": {"allOf": [{"$ref": "http://x/"}]}}}"#,
            r#"{"x-unknown": {"default": {"$ref": "http://x/"}}}"#,
        ] {
            let e = check("values.schema.json", named.as_bytes()).unwrap_err();
            assert!(e.starts_with("values.schema.json: $ref"), "{named}: {e}");
        }
        let doubled = br#"{"$schema": "https://http://json-schema.org/draft-07/schema"}"#;
        assert!(check("values.schema.json", doubled).is_err());
        assert!(is_schema("charts/db/values.schema.json") && is_schema("values.schema.json"));
        assert!(!is_schema("templates/values.schema.json.tpl"));
    }
}
