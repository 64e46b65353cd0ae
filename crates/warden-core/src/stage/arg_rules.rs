//! G6: access rules that read a call's arguments.
//!
//! Runs once the arguments are the values the tool will get (after aliases,
//! stripping and pins, and once they passed the schema), so a condition judges
//! what the tool would actually receive. The name was already granted with
//! conditions counted as if they could hold; here the arguments settle it: the
//! call runs, is put to a human, or is refused with the constraint it missed.

use crate::answer::{self, Answer};
use crate::call::{CallScope, Caller, Refusal};
use crate::catalogue::ToolEntry;
use crate::stage::grant::{ArgDecision, Grant};
use serde_json::{Map, Value};

/// What the arguments made of a granted call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ruled {
    /// No rule read the arguments: the name's decision stands.
    Stands,
    /// Runs without asking.
    Allow,
    /// Runs once a human approves; the text (if any) leads the question.
    Ask(Option<String>),
    /// Answered here.
    Answer(Answer, Refusal),
    /// A `when_cel` condition failed (X3): refused with
    /// [`answer::CONDITION_FAILED`]; the note is for the operator's log.
    Failed(String),
}

pub fn apply(
    grant: &dyn Grant,
    caller: &Caller,
    tool: &ToolEntry,
    args: &Map<String, Value>,
    scope: &CallScope,
) -> Ruled {
    match grant.decide_in_scope(caller, tool, args, scope) {
        None => Ruled::Stands,
        Some(ArgDecision::Allow) => Ruled::Allow,
        Some(ArgDecision::Ask(why)) => Ruled::Ask(why),
        Some(ArgDecision::Refuse(why)) => Ruled::Answer(
            Answer::ToolError(answer::argument_refused(&why)),
            Refusal::ArgumentRule,
        ),
        // X3: fails closed; what went wrong is the operator's, not the caller's.
        Some(ArgDecision::Failed(note)) => Ruled::Failed(note),
        // G2: answered exactly like a name the caller cannot see.
        Some(ArgDecision::Hide) => Ruled::Answer(
            Answer::RpcError {
                code: answer::INVALID_PARAMS,
                message: answer::unknown_tool(&tool.name),
            },
            Refusal::UnknownTool,
        ),
    }
}
