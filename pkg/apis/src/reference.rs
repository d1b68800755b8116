//! The API reference of a CRD as Markdown, generated from its OpenAPI
//! schema: every field with its type, default, validation and
//! description (`hossted-operator docs reference` writes `docs/reference/`;
//! a test fails when the committed files are stale).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// The file name of `crd`'s reference page: its plural, `.md`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.md", crd.spec.names.plural)
}

/// The reference page of `crd` (its served, stored version).
pub fn markdown(crd: &CustomResourceDefinition) -> String {
    let names = &crd.spec.names;
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .or(crd.spec.versions.first());
    let mut out = format!(
        "# {} (`{}/{}`)\n\nGenerated from the CustomResourceDefinition's OpenAPI schema by `hossted-operator docs reference` (run `hack/update-crds.sh`); do not edit by hand.\n\n",
        names.kind,
        crd.spec.group,
        version.map(|v| v.name.as_str()).unwrap_or_default()
    );
    let short = names.short_names.clone().unwrap_or_default().join(", ");
    out.push_str(&format!(
        "Scope: {}. Plural: `{}`.{}\n\n",
        crd.spec.scope,
        names.plural,
        if short.is_empty() {
            String::new()
        } else {
            format!(" Short names: `{short}`.")
        }
    ));
    let schema = version
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null);
    let columns = version
        .and_then(|v| v.additional_printer_columns.as_ref())
        .map(|c| {
            c.iter()
                .map(|c| format!("`{}` ({})", c.name, c.json_path))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    if !columns.is_empty() {
        out.push_str(&format!("`kubectl get` columns: {columns}.\n\n"));
    }
    out.push_str("| field | type | required | default | validation | description |\n");
    out.push_str("| --- | --- | --- | --- | --- | --- |\n");
    for top in ["spec", "status"] {
        if let Some(s) = schema.pointer(&format!("/properties/{top}")) {
            let required = schema_required(&schema).contains(&top.to_string());
            rows(&mut out, top, s, required);
        }
    }
    out
}

fn schema_required(schema: &Value) -> Vec<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// One row for `path`, then its children.
fn rows(out: &mut String, path: &str, schema: &Value, required: bool) {
    out.push_str(&format!(
        "| `{path}` | {} | {} | {} | {} | {} |\n",
        type_of(schema),
        if required { "yes" } else { "" },
        schema
            .get("default")
            .map(|d| format!("`{}`", cell(&d.to_string())))
            .unwrap_or_default(),
        validation(schema),
        cell(
            schema
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
        ),
    ));
    let needed = schema_required(schema);
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, child) in props {
            rows(out, &format!("{path}.{name}"), child, needed.contains(name));
        }
    }
    if let Some(items) = schema.get("items")
        && (items.get("properties").is_some() || items.get("items").is_some())
    {
        let needed = schema_required(items);
        if let Some(props) = items.get("properties").and_then(Value::as_object) {
            for (name, child) in props {
                rows(
                    out,
                    &format!("{path}[].{name}"),
                    child,
                    needed.contains(name),
                );
            }
        }
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object())
        && values.get("properties").is_some()
    {
        rows(out, &format!("{path}.<key>"), values, false);
    }
}

/// The type as a reader says it: `string`, `[]object`, `map[string]string`,
/// `any`.
fn type_of(schema: &Value) -> String {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        && schema.get("type").is_none()
    {
        return "any".into();
    }
    if schema.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        return "int or string".into();
    }
    let kind = schema.get("type").and_then(Value::as_str).unwrap_or("any");
    match kind {
        "array" => format!(
            "[]{}",
            schema
                .get("items")
                .map(type_of)
                .unwrap_or_else(|| "any".into())
        ),
        "object" => match schema.get("additionalProperties") {
            Some(v) if v.is_object() => format!("map[string]{}", type_of(v)),
            _ => "object".into(),
        },
        other => match schema.get("format").and_then(Value::as_str) {
            Some(format) => format!("{other} ({format})"),
            None => other.to_string(),
        },
    }
}

/// Enum values, bounds, patterns and CEL rules, as one cell.
fn validation(schema: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values: Vec<String> = values
            .iter()
            .map(|v| {
                format!(
                    "`{}`",
                    v.as_str().map(str::to_string).unwrap_or(v.to_string())
                )
            })
            .collect();
        parts.push(format!("one of {}", values.join(", ")));
    }
    for (key, says) in [
        ("minimum", "≥"),
        ("maximum", "≤"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
        ("maxProperties", "keys ≤"),
    ] {
        if let Some(v) = schema.get(key) {
            parts.push(format!("{says} {v}"));
        }
    }
    if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
        parts.push(format!("matches `{}`", cell(p)));
    }
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for rule in rules {
            let said = rule
                .get("message")
                .or(rule.get("rule"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            parts.push(cell(said));
        }
    }
    parts.join("; ")
}

/// `text` fit for one table cell: one line, `|` escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}
