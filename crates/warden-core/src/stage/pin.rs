//! A7: arguments fixed by configuration (`is_public = false`).
//!
//! A pinned argument is not the caller's to choose: it is hidden from the
//! declaration the caller sees (at catalogue time), a call that sends it anyway is
//! refused, and the configured value is set on the way upstream.

use super::{ArgCall, Step};
use crate::answer;
use crate::answer::Answer;

pub fn apply(call: &mut ArgCall<'_>) -> Step {
    let pins = &call.tool.policy.pins;
    if pins.is_empty() {
        return Step::Pass;
    }
    if let Some(sent) = pins.keys().find(|k| call.args.contains_key(*k)) {
        return Step::Answer(Answer::ToolError(answer::pinned_argument(
            sent,
            &call.tool.name,
        )));
    }
    for (k, v) in pins {
        call.args.insert(k.clone(), v.clone());
    }
    Step::Rewritten
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::CallReport;
    use crate::catalogue::Catalogue;
    use crate::policy::ToolPolicy;
    use serde_json::{json, Map, Value};

    fn run(args: Value) -> (Step, String) {
        let mut pins = Map::new();
        pins.insert("is_public".into(), json!(false));
        let policy = ToolPolicy {
            pins,
            ..Default::default()
        };
        let (c, _) = Catalogue::from_tools(
            &[
                json!({"name":"create_note","inputSchema":{"properties":{"title":{},"is_public":{}}}}),
            ],
            &policy,
        );
        let mut args = args.as_object().unwrap().clone();
        let mut report = CallReport::default();
        let step = apply(&mut ArgCall {
            tool: c.get("create_note").unwrap(),
            args: &mut args,
            report: &mut report,
        });
        (step, serde_json::to_string(&args).unwrap())
    }

    #[test]
    fn sets_the_pinned_value() {
        assert_eq!(
            run(json!({"title":"t"})),
            (Step::Rewritten, r#"{"title":"t","is_public":false}"#.into())
        );
    }

    #[test]
    fn refuses_a_caller_that_sends_it() {
        let (step, _) = run(json!({"title":"t","is_public":true}));
        assert_eq!(
            step,
            Step::Answer(Answer::ToolError(
                "Error: Argument 'is_public' of tool 'create_note' is fixed by configuration and cannot be set by the caller.".into()
            ))
        );
    }
}
