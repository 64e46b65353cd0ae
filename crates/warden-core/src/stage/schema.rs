//! A5: JSON Schema validation, before anything has a side effect.
//!
//! The validator was compiled with the catalogue (A1); a call costs one `is_valid`
//! when its arguments are fine. Only a failing call walks the validator's errors,
//! and those are translated: each violation is named by the argument it concerns
//! and the expected value is described from the tool's own declaration, never
//! from the validator's wording or a schema path. All violations go in one answer.
//!
//! Undeclared top-level keys are the unknown-key stage's business (A3), whatever
//! the schema says about `additionalProperties`, so `warn` keeps its promise.
//! The pin stage runs first, so validation sees pinned values applied (A7).

use super::{ArgCall, Step};
use crate::answer::Answer;
use crate::answer::{self, Violation};
use jsonschema::error::ValidationErrorKind;
use serde_json::Value;

pub fn apply(call: &mut ArgCall<'_>) -> Step {
    let tool = call.tool;
    if !tool.policy.validate {
        return Step::Pass;
    }
    let Some(validator) = tool.validator() else {
        return Step::Pass;
    };
    // Validate the arguments in place: move them into a Value and back, no copy.
    let instance = Value::Object(std::mem::take(call.args));
    let violations = check(validator, &instance, tool);
    if let Value::Object(args) = instance {
        *call.args = args;
    }
    if violations.is_empty() {
        Step::Pass
    } else {
        Step::Answer(Answer::ToolError(answer::schema_violations(&violations)))
    }
}

fn check(
    validator: &jsonschema::Validator,
    instance: &Value,
    tool: &crate::catalogue::ToolEntry,
) -> Vec<Violation> {
    if validator.is_valid(instance) {
        return Vec::new();
    }
    let mut missing: Vec<String> = Vec::new();
    let mut invalid: Vec<String> = Vec::new();
    let mut whole = false;
    for error in validator.iter_errors(instance) {
        match first_segment(error.instance_path().as_str()) {
            Some(arg) => {
                if !invalid.contains(&arg) {
                    invalid.push(arg);
                }
            }
            None => match error.kind() {
                ValidationErrorKind::Required { property } => {
                    if let Some(p) = property.as_str() {
                        if !tool.defaulted(p) && !missing.iter().any(|m| m == p) {
                            missing.push(p.to_owned());
                        }
                    }
                }
                ValidationErrorKind::AdditionalProperties { .. }
                | ValidationErrorKind::UnevaluatedProperties { .. } => {}
                _ => whole = true,
            },
        }
    }
    // Report in declaration order, then anything undeclared in call order.
    let mut out = Vec::new();
    for p in &tool.params {
        if missing.contains(p) {
            out.push(Violation::Missing {
                argument: p.clone(),
            });
        }
        if invalid.contains(p) {
            out.push(Violation::Invalid {
                argument: p.clone(),
                expected: tool
                    .expected(p)
                    .unwrap_or_else(|| crate::expected::GENERIC.to_owned()),
            });
        }
    }
    for m in missing.iter().filter(|m| !tool.params.contains(m)) {
        out.push(Violation::Missing {
            argument: m.clone(),
        });
    }
    for i in invalid.iter().filter(|i| !tool.params.contains(i)) {
        out.push(Violation::Invalid {
            argument: i.clone(),
            expected: crate::expected::GENERIC.to_owned(),
        });
    }
    if whole {
        out.push(Violation::Whole);
    }
    out
}

/// The first property name of a JSON pointer (`/top/0` → `top`), unescaped.
fn first_segment(pointer: &str) -> Option<String> {
    let rest = pointer.strip_prefix('/')?;
    let seg = rest.split('/').next().unwrap_or(rest);
    Some(seg.replace("~1", "/").replace("~0", "~"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::CallReport;
    use crate::catalogue::Catalogue;
    use crate::policy::ToolPolicy;
    use serde_json::{json, Map};

    fn run_with(policy: ToolPolicy, schema: Value, args: Value) -> (Step, Map<String, Value>) {
        let (c, problems) =
            Catalogue::from_tools(&[json!({"name":"t","inputSchema":schema})], &policy);
        assert!(problems.is_empty(), "{problems:?}");
        let mut args = args.as_object().unwrap().clone();
        let mut report = CallReport::default();
        let step = apply(&mut ArgCall {
            tool: c.get("t").unwrap(),
            args: &mut args,
            report: &mut report,
        });
        (step, args)
    }

    fn run(schema: Value, args: Value) -> Step {
        run_with(ToolPolicy::default(), schema, args).0
    }

    fn error(text: &str) -> Step {
        Step::Answer(Answer::ToolError(text.into()))
    }

    fn note_schema() -> Value {
        json!({"type":"object","properties":{
            "title":{"type":"string"},"text":{"type":"string"},
            "top":{"type":"integer","minimum":1},
            "kind":{"enum":["a","b"]},
            "size":{"type":"integer","default":10}},
            "required":["title","text","size"]})
    }

    #[test]
    fn valid_call_passes_unchanged() {
        let (step, args) = run_with(
            ToolPolicy::default(),
            note_schema(),
            json!({"title":"t","text":"x","top":2}),
        );
        assert_eq!(step, Step::Pass);
        assert_eq!(
            serde_json::to_string(&args).unwrap(),
            r#"{"title":"t","text":"x","top":2}"#
        );
    }

    #[test]
    fn all_violations_in_one_answer_in_declaration_order() {
        assert_eq!(
            run(note_schema(), json!({"kind":"c","top":"3"})),
            error(
                "Error: Missing required argument 'title'.\n\
                 Error: Missing required argument 'text'.\n\
                 Error: Invalid value for argument 'top': expected integer at least 1.\n\
                 Error: Invalid value for argument 'kind': expected one of: a, b."
            )
        );
    }

    #[test]
    fn nested_violation_names_the_top_level_argument() {
        let schema = json!({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"}}}});
        assert_eq!(
            run(schema, json!({"tags":["a", 2]})),
            error("Error: Invalid value for argument 'tags': expected array of string.")
        );
    }

    #[test]
    fn undeclared_keys_are_left_to_the_unknown_key_stage() {
        let schema = json!({"type":"object","properties":{"a":{}},"additionalProperties":false});
        assert_eq!(run(schema, json!({"a":1,"b":2})), Step::Pass);
    }

    #[test]
    fn whole_object_rules_get_a_general_line() {
        let schema = json!({"type":"object","properties":{"a":{},"b":{}},"minProperties":2});
        assert_eq!(
            run(schema, json!({"a":1})),
            error("Error: The arguments do not match the schema the tool declares.")
        );
    }

    #[test]
    fn validate_off_skips() {
        let policy = ToolPolicy {
            validate: false,
            ..Default::default()
        };
        assert_eq!(run_with(policy, note_schema(), json!({})).0, Step::Pass);
    }

    #[test]
    fn numbers_keep_their_form() {
        let schema = json!({"type":"object","properties":{"n":{"type":"number"}}});
        let (step, args) = run_with(
            ToolPolicy::default(),
            schema,
            serde_json::from_str(r#"{"n":1.0}"#).unwrap(),
        );
        assert_eq!(step, Step::Pass);
        assert_eq!(serde_json::to_string(&args).unwrap(), r#"{"n":1.0}"#);
        let integer = json!({"type":"object","properties":{"n":{"type":"integer"}}});
        let huge: Value = serde_json::from_str(r#"{"n":123456789012345678901234567890}"#).unwrap();
        let (step, args) = run_with(ToolPolicy::default(), integer, huge);
        assert_eq!(step, Step::Pass);
        assert_eq!(
            serde_json::to_string(&args).unwrap(),
            r#"{"n":123456789012345678901234567890}"#
        );
    }

    #[test]
    fn first_segment_unescapes() {
        assert_eq!(first_segment(""), None);
        assert_eq!(first_segment("/a~1b/0"), Some("a/b".into()));
        assert_eq!(first_segment("/12"), Some("12".into()));
    }
}
