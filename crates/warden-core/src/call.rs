//! The values that travel through the pipeline: who calls, what the call became,
//! and how it was answered.

pub use crate::answer::Answer;
use crate::catalogue::ToolEntry;
use crate::meta::Meta;
use crate::policy::UnknownMode;
use serde_json::{Map, Value};
use std::sync::Arc;

/// The identity a call is made on behalf of (G1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Caller {
    pub name: String,
    pub groups: Vec<String>,
}

impl Caller {
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            groups: Vec::new(),
        }
    }
}

/// What a call carries beyond its caller, tool and arguments, for `when_cel`
/// conditions (X1): the host fills what it knows; the default is an empty scope.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallScope {
    /// The caller's verified token claims (empty without a token).
    pub claims: Map<String, Value>,
    /// The flow labels of the tool called (F1).
    pub tool_labels: Vec<String>,
    /// The flow labels the session has met so far (F1).
    pub session_labels: Vec<String>,
    /// Calls the session made before this one.
    pub session_calls: u64,
    /// When the call arrived, in seconds since the Unix epoch (UTC).
    pub time: i64,
    /// `stdio` or `http`.
    pub transport: String,
    /// The protocol revision the client agreed (`2025-06-18`), empty if none.
    pub revision: String,
}

/// Why the pipeline answered a call itself (for the audit trail and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The call named no tool (N1).
    NoToolName,
    /// Hidden, absent, or no caller (G1, G2): indistinguishable to the caller.
    UnknownTool,
    /// The grant source failed (G4).
    GrantFailure,
    /// The arguments were not an object (N2), had unknown keys (A3 reject),
    /// broke the schema (A5), or set a pinned argument (A7).
    InvalidArguments,
    /// A rule on the arguments refused the call (G6).
    ArgumentRule,
    /// A `when_cel` condition could not be evaluated: the call failed closed (X3).
    ConditionFailed,
}

/// What the argument stages noticed and did, whatever the outcome.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallReport {
    /// R1: the `reason` the caller gave, removed before the call goes upstream.
    pub reason: Option<String>,
    /// A2: (alias, canonical) pairs renamed.
    pub aliased: Vec<(String, String)>,
    /// A3: the undeclared keys the call carried, and the mode applied to them.
    pub unknown_keys: Vec<String>,
    pub unknown_mode: Option<UnknownMode>,
    /// X3: the `when_cel` condition that failed and how (no values), for the log.
    pub condition_failed: Option<String>,
    /// X6: what the shadow rules would have made of the call, where it differs.
    pub shadow: Option<Shadowed>,
    /// H6: the index of the rule whose `ask` puts the call to a human, when a
    /// rule does (its host may let each rule name who answers).
    pub ask_rule: Option<usize>,
}

/// What a shadow rule, quota, flow or guard would have made of a call, where
/// it differs from what was enforced (X6, X9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shadowed {
    /// `would_deny`, `would_ask`, `would_allow`, `would_redact`, `would_block`…
    pub would: &'static str,
    /// What kind of entry: `rule`, `quota`, `flow` or `guard`.
    pub of: &'static str,
    /// The entry that would have decided it (`None`: the access default).
    pub rule: Option<usize>,
}

impl std::fmt::Display for Shadowed {
    /// `would_deny by rule[2]`, as the audit trail records it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.rule {
            Some(i) => write!(f, "{} by {}[{i}]", self.would, self.of),
            None => write!(f, "{} by the default", self.would),
        }
    }
}

/// A call the pipeline lets through, as it should go upstream.
#[derive(Debug, Clone)]
pub struct Forward {
    pub tool: Arc<ToolEntry>,
    /// The arguments to send, in the caller's key order.
    pub arguments: Map<String, Value>,
    /// Whether any stage changed the arguments. When false they are exactly what
    /// the caller sent (absent `arguments` reads as `{}`).
    pub rewritten: bool,
    /// The bounded `_meta` (N3), for hooks; the upstream gets the caller's own.
    pub meta: Meta,
    /// The grant said `ask`: a human must approve this call before it runs (H5).
    pub needs_approval: bool,
    /// G6: the constraint an `ask` rule on the arguments put to the human.
    pub approval_because: Option<String>,
}

/// The pipeline's verdict on one call.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Run it upstream.
    Forward(Forward),
    /// Answer it here.
    Answer { answer: Answer, refusal: Refusal },
}

/// An [`Outcome`] with the report of what the stages saw.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub outcome: Outcome,
    pub report: CallReport,
}
