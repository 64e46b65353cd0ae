//! G1-G3: who may see and call which tool.
//!
//! One decision serves `tools/list` and `tools/call`. It is taken over the
//! catalogue alone (G3: a name and, where the name resolves, its entry; no schema
//! work). A name that resolves to nothing runs the same decision before it is
//! refused, and a hidden tool, an absent tool and a call without a caller all get
//! the byte-identical unknown-tool answer (G2). A grant source that fails makes a
//! listing fall back to the base rules but makes a call fail closed (G4).

use crate::answer;
use crate::call::{Answer, CallScope, Caller, Refusal};
use crate::catalogue::{Catalogue, ToolEntry};
use serde_json::{Map, Value};
use std::sync::Arc;

/// A grant source's answer about one (caller, tool name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantDecision {
    /// The caller sees the tool and may call it.
    Allow,
    /// The caller sees the tool; each call needs a human's approval first (H5).
    Ask,
    /// The tool does not exist for this caller.
    Hide,
    /// The grant source could not decide (a webhook down, a rule engine error).
    Unavailable,
}

/// A grant source's answer about one call's arguments (G6), taken once they are
/// the values the tool will get. The texts are for the caller (a refusal) or the
/// human (a question), and name the argument and the constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgDecision {
    Allow,
    /// A human must approve; the text says which constraint the call did not keep.
    Ask(Option<String>),
    /// Refused with this text.
    Refuse(String),
    /// No rule lets this call through and none can say why: as if the tool were absent.
    Hide,
    /// A `when_cel` condition could not be evaluated (X3): the call is refused
    /// with a fixed answer; the text (rule and what went wrong, no values) is
    /// for the operator's log.
    Failed(String),
}

/// A source of grant decisions. `tool` is `None` when the name resolves to nothing;
/// implementations must not treat that case differently in cost or in answer.
pub trait Grant: Send + Sync {
    /// The decision on a name, as a listing takes it: a rule that reads arguments
    /// counts as if its conditions could hold (G6).
    fn decide(&self, caller: &Caller, name: &str, tool: Option<&ToolEntry>) -> GrantDecision;

    /// The decision on a call's arguments, after the name was granted. `None`: the
    /// name's decision stands (no rule read the arguments).
    fn decide_arguments(
        &self,
        _caller: &Caller,
        _tool: &ToolEntry,
        _args: &Map<String, Value>,
    ) -> Option<ArgDecision> {
        None
    }

    /// [`Grant::decide_arguments`] with what a call carries beyond its caller,
    /// tool and arguments, for `when_cel` conditions (X1). By default the scope
    /// is not read.
    fn decide_in_scope(
        &self,
        caller: &Caller,
        tool: &ToolEntry,
        args: &Map<String, Value>,
        _scope: &CallScope,
    ) -> Option<ArgDecision> {
        self.decide_arguments(caller, tool, args)
    }
}

/// Every caller may see and call every tool (the built-in default).
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Grant for AllowAll {
    fn decide(&self, _: &Caller, _: &str, _: Option<&ToolEntry>) -> GrantDecision {
        GrantDecision::Allow
    }
}

/// The grant decision on a call: the entry to run and whether it needs approval,
/// or the answer to give.
pub fn apply<'c>(
    grant: &dyn Grant,
    caller: Option<&Caller>,
    name: &str,
    catalogue: &'c Catalogue,
) -> Result<(&'c Arc<ToolEntry>, bool), (Answer, Refusal)> {
    let unknown = || {
        (
            Answer::RpcError {
                code: answer::INVALID_PARAMS,
                message: answer::unknown_tool(name),
            },
            Refusal::UnknownTool,
        )
    };
    // G1: with no caller there is no decision to take.
    let Some(caller) = caller else {
        return Err(unknown());
    };
    let entry = catalogue.get(name);
    match grant.decide(caller, name, entry.map(|e| &**e)) {
        GrantDecision::Allow => entry.map(|e| (e, false)).ok_or_else(unknown),
        GrantDecision::Ask => entry.map(|e| (e, true)).ok_or_else(unknown),
        GrantDecision::Hide => Err(unknown()),
        GrantDecision::Unavailable => Err((
            Answer::ToolError(answer::ACCESS_NOT_VERIFIED.to_owned()),
            Refusal::GrantFailure,
        )),
    }
}

/// The tools a caller sees, in catalogue order. A source that cannot decide falls
/// back to `base` (lenient: at worst the caller sees a tool it cannot call).
pub fn visible<'c>(
    grant: &dyn Grant,
    base: &dyn Grant,
    caller: Option<&Caller>,
    catalogue: &'c Catalogue,
) -> Vec<&'c Arc<ToolEntry>> {
    let Some(caller) = caller else {
        return Vec::new();
    };
    catalogue
        .tools()
        .iter()
        .filter(|t| {
            let decision = match grant.decide(caller, &t.name, Some(t)) {
                GrantDecision::Unavailable => base.decide(caller, &t.name, Some(t)),
                d => d,
            };
            matches!(decision, GrantDecision::Allow | GrantDecision::Ask)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ToolPolicy;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Hides names containing "secret"; fails for names containing "flaky"; counts calls.
    struct Rules(AtomicUsize);
    impl Grant for Rules {
        fn decide(&self, _: &Caller, name: &str, _: Option<&ToolEntry>) -> GrantDecision {
            self.0.fetch_add(1, Ordering::SeqCst);
            if name.contains("flaky") {
                GrantDecision::Unavailable
            } else if name.contains("secret") {
                GrantDecision::Hide
            } else {
                GrantDecision::Allow
            }
        }
    }

    fn catalogue() -> Catalogue {
        let tools = ["open", "secret", "flaky"].map(|n| json!({"name": n, "inputSchema": {}}));
        Catalogue::from_tools(&tools, &ToolPolicy::default()).0
    }

    #[test]
    fn hidden_and_absent_are_identical_and_both_decided() {
        let c = catalogue();
        let rules = Rules(AtomicUsize::new(0));
        let caller = Caller::new("alice");
        let hidden = apply(&rules, Some(&caller), "secret", &c).unwrap_err();
        let absent = apply(&rules, Some(&caller), "nothing", &c).unwrap_err();
        assert_eq!(
            rules.0.load(Ordering::SeqCst),
            2,
            "the absent name ran the decision too"
        );
        assert_eq!(hidden.1, absent.1);
        assert_eq!(
            absent.0,
            Answer::RpcError {
                code: -32602,
                message: "Unknown tool 'nothing'.".into()
            }
        );
        let hidden_named = apply(&rules, Some(&caller), "secret", &c).unwrap_err().0;
        let absent_named = apply(&rules, Some(&caller), "secret", &Catalogue::default())
            .unwrap_err()
            .0;
        assert_eq!(hidden_named, absent_named);
    }

    #[test]
    fn no_caller_is_an_unknown_tool() {
        let c = catalogue();
        let (answer, refusal) = apply(&AllowAll, None, "open", &c).unwrap_err();
        assert_eq!(refusal, Refusal::UnknownTool);
        assert_eq!(answer.text(), "Unknown tool 'open'.");
    }

    #[test]
    fn failing_source_fails_the_call_closed_but_not_the_listing() {
        let c = catalogue();
        let rules = Rules(AtomicUsize::new(0));
        let caller = Caller::new("alice");
        let (answer, refusal) = apply(&rules, Some(&caller), "flaky", &c).unwrap_err();
        assert_eq!(refusal, Refusal::GrantFailure);
        assert_eq!(
            answer,
            Answer::ToolError("Error: Tool access could not be verified.".into())
        );
        let names: Vec<_> = visible(&rules, &AllowAll, Some(&caller), &c)
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(names, ["open", "flaky"]);
    }
}
