//! The pipeline stages, one module each. Every stage has the same shape: it reads
//! what it needs from the [`ToolEntry`](crate::catalogue::ToolEntry) built at
//! catalogue time, acts on one call, and returns an explicit [`Step`].
//! The order they run in is written once, in [`crate::pipeline`].

pub mod aliases;
pub mod arg_rules;
pub mod grant;
pub mod normalise;
pub mod pin;
pub mod reasons;
pub mod schema;
pub mod unknown_keys;

use crate::answer::Answer;
use crate::call::CallReport;
use crate::catalogue::ToolEntry;
use serde_json::{Map, Value};

/// What a stage did with a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do; the call goes on as it was.
    Pass,
    /// The stage changed the arguments; the call goes on.
    Rewritten,
    /// The stage answered the call; no later stage runs and the tool is not called.
    Answer(Answer),
}

/// A resolved call as the argument stages see it.
pub struct ArgCall<'a> {
    pub tool: &'a ToolEntry,
    pub args: &'a mut Map<String, Value>,
    pub report: &'a mut CallReport,
}
