//! What a valid value of a declared property looks like, in words a model can act
//! on, read off the property's JSON Schema: `integer`, `one of: a, b`, `string of
//! at most 10 characters`. Built once per property when the catalogue is built
//! (A1) and quoted by the schema stage's answers (A5).

use crate::answer;
use serde_json::{Map, Value};
use std::fmt::Write as _;

pub const GENERIC: &str = "a value matching the tool's declaration";

/// What a valid value of a property looks like, in words a model can act on,
/// read off its declaration: `integer`, `one of: a, b`, `string of at most 10 characters`.
pub fn describe(prop: &Value) -> String {
    describe_at(prop, 0).unwrap_or_else(|| GENERIC.to_owned())
}

fn describe_at(prop: &Value, depth: usize) -> Option<String> {
    let obj = prop.as_object()?;
    if depth > 2 {
        return None;
    }
    if let Some(Value::Array(options)) = obj.get("enum") {
        let shown: Vec<String> = options.iter().map(literal).collect();
        return Some(format!("one of: {}", shown.join(", ")));
    }
    if let Some(c) = obj.get("const") {
        return Some(format!("the value {}", literal(c)));
    }
    let base = match obj.get("type") {
        Some(Value::String(t)) => Some(typed(t, obj, depth)),
        Some(Value::Array(ts)) => {
            let names: Vec<String> = ts
                .iter()
                .filter_map(Value::as_str)
                .map(|t| typed(t, obj, depth))
                .collect();
            (!names.is_empty()).then(|| names.join(" or "))
        }
        _ => None,
    };
    if base.is_some() {
        return base;
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(alts)) = obj.get(key) {
            let names: Option<Vec<String>> =
                alts.iter().map(|a| describe_at(a, depth + 1)).collect();
            if let Some(names) = names.filter(|n| !n.is_empty()) {
                return Some(names.join(" or "));
            }
        }
    }
    None
}

fn typed(t: &str, obj: &Map<String, Value>, depth: usize) -> String {
    let mut out = t.to_owned();
    let num = |k: &str| obj.get(k).filter(|v| v.is_number()).map(|v| v.to_string());
    match t {
        "integer" | "number" => {
            let mut parts = Vec::new();
            if let Some(v) = num("minimum") {
                parts.push(format!("at least {v}"));
            }
            if let Some(v) = num("exclusiveMinimum") {
                parts.push(format!("greater than {v}"));
            }
            if let Some(v) = num("maximum") {
                parts.push(format!("at most {v}"));
            }
            if let Some(v) = num("exclusiveMaximum") {
                parts.push(format!("less than {v}"));
            }
            if !parts.is_empty() {
                let _ = write!(out, " {}", parts.join(" and "));
            }
        }
        "string" => {
            match (num("minLength"), num("maxLength")) {
                (Some(a), Some(b)) => {
                    let _ = write!(out, " of {a} to {b} characters");
                }
                (Some(a), None) => {
                    let _ = write!(out, " of at least {a} characters");
                }
                (None, Some(b)) => {
                    let _ = write!(out, " of at most {b} characters");
                }
                (None, None) => {}
            }
            if let Some(Value::String(f)) = obj.get("format") {
                let _ = write!(out, " in {f} format");
            }
            if let Some(Value::String(p)) = obj.get("pattern") {
                let _ = write!(out, " matching the pattern {p}");
            }
        }
        "array" => {
            if let Some(items) = obj.get("items").and_then(|i| describe_at(i, depth + 1)) {
                let _ = write!(out, " of {items}");
            }
            match (num("minItems"), num("maxItems")) {
                (Some(a), Some(b)) => {
                    let _ = write!(out, " with {a} to {b} items");
                }
                (Some(a), None) => {
                    let _ = write!(out, " with at least {a} items");
                }
                (None, Some(b)) => {
                    let _ = write!(out, " with at most {b} items");
                }
                (None, None) => {}
            }
        }
        "object" => {
            if let Some(Value::Array(req)) = obj.get("required") {
                let names: Vec<&str> = req.iter().filter_map(Value::as_str).collect();
                if !names.is_empty() {
                    let _ = write!(out, " with {}", names.join(", "));
                }
            }
        }
        _ => {}
    }
    out
}

/// A JSON value as a model would write it in prose: strings bare, others as JSON.
fn literal(v: &Value) -> String {
    match v {
        Value::String(s) => answer::shown(s),
        other => {
            let s = other.to_string();
            answer::shown(&s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn descriptions() {
        let cases = [
            (json!({"type":"integer"}), "integer"),
            (
                json!({"type":"string","maxLength":10}),
                "string of at most 10 characters",
            ),
            (
                json!({"type":"string","format":"date-time"}),
                "string in date-time format",
            ),
            (json!({"type":["string","null"]}), "string or null"),
            (json!({"enum":["a",1,null]}), "one of: a, 1, null"),
            (json!({"const":"x"}), "the value x"),
            (
                json!({"anyOf":[{"type":"string"},{"type":"integer"}]}),
                "string or integer",
            ),
            (
                json!({"type":"array","items":{"type":"integer"},"minItems":1}),
                "array of integer with at least 1 items",
            ),
            (
                json!({"type":"number","exclusiveMinimum":0,"maximum":1}),
                "number greater than 0 and at most 1",
            ),
            (json!({}), "a value matching the tool's declaration"),
            (json!(true), "a value matching the tool's declaration"),
        ];
        for (schema, want) in cases {
            assert_eq!(describe(&schema), want, "{schema}");
        }
    }
}
