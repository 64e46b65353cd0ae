//! R1: the optional `reason` parameter ("why are you calling this?").
//!
//! When on for a tool, its published declaration carries `reason` (added at
//! catalogue time) and this stage takes it out of the call, into the report, so the
//! upstream never sees a parameter it did not declare. A tool that declares its own
//! `reason` keeps it. R2 (tolerating `reason` when this stage is off) lives in the
//! unknown-key stage, so that stage is correct with reasons on or off.

use super::{ArgCall, Step};
use crate::answer;
use crate::answer::Answer;
use serde_json::Value;

pub const REASON: &str = "reason";

pub fn apply(call: &mut ArgCall<'_>) -> Step {
    if !call.tool.policy.reasons {
        return Step::Pass;
    }
    if call.tool.declares_reason {
        call.report.reason = call
            .args
            .get(REASON)
            .and_then(Value::as_str)
            .map(str::to_owned);
        return Step::Pass;
    }
    match call.args.get(REASON) {
        None => Step::Pass,
        Some(Value::String(_)) => {
            if let Some(Value::String(reason)) = call.args.shift_remove(REASON) {
                call.report.reason = Some(reason);
            }
            Step::Rewritten
        }
        Some(_) => Step::Answer(Answer::ToolError(answer::schema_violations(&[
            answer::Violation::Invalid {
                argument: REASON.into(),
                expected: "string".into(),
            },
        ]))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::CallReport;
    use crate::catalogue::Catalogue;
    use crate::policy::ToolPolicy;
    use serde_json::{json, Map};

    fn run(reasons: bool, schema: Value, args: Value) -> (Step, Map<String, Value>, CallReport) {
        let policy = ToolPolicy {
            reasons,
            ..Default::default()
        };
        let (c, _) = Catalogue::from_tools(&[json!({"name":"t","inputSchema":schema})], &policy);
        let mut args = args.as_object().unwrap().clone();
        let mut report = CallReport::default();
        let step = apply(&mut ArgCall {
            tool: c.get("t").unwrap(),
            args: &mut args,
            report: &mut report,
        });
        (step, args, report)
    }

    #[test]
    fn takes_reason_out_of_the_call() {
        let (step, args, report) = run(
            true,
            json!({"properties":{"a":{}}}),
            json!({"a":1,"reason":"to test"}),
        );
        assert_eq!(step, Step::Rewritten);
        assert_eq!(Value::Object(args), json!({"a":1}));
        assert_eq!(report.reason.as_deref(), Some("to test"));
    }

    #[test]
    fn off_leaves_the_call_alone() {
        let (step, args, report) = run(
            false,
            json!({"properties":{"a":{}}}),
            json!({"a":1,"reason":"x"}),
        );
        assert_eq!(step, Step::Pass);
        assert_eq!(args.len(), 2);
        assert_eq!(report.reason, None);
    }

    #[test]
    fn a_tool_that_declares_reason_keeps_it() {
        let (step, args, report) = run(
            true,
            json!({"properties":{"reason":{"type":"string"}}}),
            json!({"reason":"mine"}),
        );
        assert_eq!(step, Step::Pass);
        assert_eq!(args.get("reason"), Some(&json!("mine")));
        assert_eq!(report.reason.as_deref(), Some("mine"));
    }

    #[test]
    fn non_string_reason_is_an_invalid_argument() {
        let (step, _, _) = run(
            true,
            json!({"properties":{"a":{}}}),
            json!({"reason":{"x":1}}),
        );
        assert_eq!(
            step,
            Step::Answer(Answer::ToolError(
                "Error: Invalid value for argument 'reason': expected string.".into()
            ))
        );
    }
}
