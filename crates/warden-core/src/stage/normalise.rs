//! N1-N3: the shape of a `tools/call` request, made safe to read.
//!
//! A missing or non-string name is the only thing answered here (N1). Arguments
//! that are absent or `null` read as `{}`; any other non-object is remembered and
//! answered only after the grant decision (N2), so a hidden or absent tool still
//! gets the unknown-tool answer. `_meta` is bounded before anything reads it (N3).

use crate::answer;
use crate::answer::Answer;
use crate::meta::{Meta, MetaLimits};
use serde_json::{Map, Value};

/// The arguments as the call carried them.
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments {
    /// An object (absent and `null` read as an empty one).
    Object(Map<String, Value>),
    /// Anything else: refused once the tool is resolved and granted.
    NotObject,
}

/// A `tools/call` request after normalisation.
#[derive(Debug, Clone, PartialEq)]
pub struct Normalised {
    pub name: String,
    pub arguments: Arguments,
    pub meta: Meta,
}

/// Takes the `params` of a `tools/call` request apart. Consumes it, so the
/// arguments are moved, never copied.
pub fn apply(params: Value, limits: &MetaLimits) -> Result<Normalised, Answer> {
    let Value::Object(mut params) = params else {
        return Err(name_required());
    };
    let name = match params.shift_remove("name") {
        Some(Value::String(name)) if !name.is_empty() => name,
        _ => return Err(name_required()),
    };
    let arguments = match params.shift_remove("arguments") {
        None | Some(Value::Null) => Arguments::Object(Map::new()),
        Some(Value::Object(args)) => Arguments::Object(args),
        Some(_) => Arguments::NotObject,
    };
    let meta = Meta::bound(params.get("_meta"), limits);
    Ok(Normalised {
        name,
        arguments,
        meta,
    })
}

fn name_required() -> Answer {
    Answer::RpcError {
        code: answer::INVALID_PARAMS,
        message: answer::TOOL_NAME_REQUIRED.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn norm(v: Value) -> Result<Normalised, Answer> {
        apply(v, &MetaLimits::default())
    }

    #[test]
    fn name_is_required() {
        for bad in [
            json!(null),
            json!([]),
            json!({}),
            json!({"name": 3}),
            json!({"name": null}),
            json!({"name": ""}),
        ] {
            assert_eq!(
                norm(bad).unwrap_err(),
                Answer::RpcError {
                    code: -32602,
                    message: "Tool name is required.".into()
                }
            );
        }
    }

    #[test]
    fn arguments_absent_or_null_are_empty() {
        for v in [json!({"name":"t"}), json!({"name":"t","arguments":null})] {
            assert_eq!(norm(v).unwrap().arguments, Arguments::Object(Map::new()));
        }
    }

    #[test]
    fn non_object_arguments_are_remembered_not_raised() {
        for a in [json!([1]), json!("x"), json!(5), json!(true)] {
            assert_eq!(
                norm(json!({"name":"t","arguments":a})).unwrap().arguments,
                Arguments::NotObject
            );
        }
    }

    #[test]
    fn meta_is_bounded() {
        let n = norm(json!({"name":"t","_meta":"nope"})).unwrap();
        assert!(n.meta.is_empty());
        let n = norm(json!({"name":"t","_meta":{"progressToken":1,"k":"v"}})).unwrap();
        assert_eq!(n.meta.len(), 2);
    }
}
