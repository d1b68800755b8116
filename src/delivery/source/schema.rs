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
    let mut todo = vec![(Place::Schema, &doc)];
    while let Some((place, v)) = todo.pop() {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    let inner = place.of(k);
                    if inner == Place::Data {
                        continue;
                    }
                    if let Value::String(s) = v
                        && let Some(why) = refused(k, s)
                    {
                        let shown: String = s.chars().take(200).collect();
                        return Err(format!(
                            "{path}: {k} {shown:?} {why}; helm would load it itself, outside the operator's address policy (only references inside the schema, \"#/…\", are allowed)"
                        ));
                    }
                    todo.push((inner, v));
                }
            }
            Value::Array(items) => todo.extend(items.iter().map(|i| (place, i))),
            _ => {}
        }
    }
    Ok(())
}

/// Where a JSON value sits in a schema: whether its keys are keywords,
/// names, or neither known. Only a keyword's own data (`default`, `enum`…)
/// is left unread: a property or definition *named* `default` is a schema
/// helm compiles, and a value under a keyword helm does not know is read
/// whole — a reference in it is refused as anywhere else.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A schema: its keys are keywords.
    Schema,
    /// A map of names to schemas (`properties`, `$defs`…).
    Names,
    /// Data a keyword holds, never loaded.
    Data,
    /// Under a keyword helm does not know: everything is read.
    Unknown,
}

impl Place {
    /// The place of the value under `key` in a value at `self`.
    fn of(self, key: &str) -> Place {
        match self {
            Place::Names => Place::Schema,
            Place::Unknown | Place::Data => Place::Unknown,
            Place::Schema => match key {
                "default" | "const" | "enum" | "examples" => Place::Data,
                "properties" | "patternProperties" | "definitions" | "$defs"
                | "dependentSchemas" | "dependencies" => Place::Names,
                "allOf"
                | "anyOf"
                | "oneOf"
                | "not"
                | "if"
                | "then"
                | "else"
                | "items"
                | "prefixItems"
                | "additionalItems"
                | "additionalProperties"
                | "contains"
                | "propertyNames"
                | "unevaluatedItems"
                | "unevaluatedProperties" => Place::Schema,
                _ => Place::Unknown,
            },
        }
    }
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
        // Bitnami's charts name the unversioned meta-schema; a string in a
        // default is data.
        let bitnami = br#"{"$schema": "http://json-schema.org/schema#", "properties": {"a": {"default": {"$ref": "http://x"}}}}"#;
        assert_eq!(check("values.schema.json", bitnami), Ok(()));
        // A schema *named* like a data keyword is still a schema helm
        // compiles; a keyword helm does not know is read whole.
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
