//! What a model reads in place of a result a quota, a flow rule or a guard
//! refused or withheld (Q, F, S): tool errors it can act on.

use warden_core::answer::shown;

// Quotas and flows (Q, F): tool results a model reads and acts on.

/// Q3: a rate quota refused the call.
pub fn rate_limited(tool: &str, rate: &str, caller: &str, retry_s: u64) -> String {
    format!(
        "Error: Rate limit for tool '{}' reached ({rate} for caller '{}'). Retry in {retry_s} s.",
        shown(tool),
        shown(caller)
    )
}

/// Q3: a concurrency quota refused the call.
pub fn concurrency_limited(tool: &str, limit: u32, caller: &str, retry_s: u64) -> String {
    let calls = if limit == 1 { "call" } else { "calls" };
    format!(
        "Error: Concurrency limit for tool '{}' reached ({limit} {calls} at a time for caller '{}'). Retry in {retry_s} s.",
        shown(tool),
        shown(caller)
    )
}

/// I1: a keyed call whose idempotency key the store could not record (it is
/// down, or its disk is full): the tool did not run.
pub fn ledger_unavailable(tool: &str, retry_s: u64) -> String {
    format!(
        "Error: Tool '{}' was not run: its idempotency key could not be recorded just now. Retry in {retry_s} s; with the same key it still runs at most once.",
        shown(tool)
    )
}

/// I1: a keyed call whose earlier attempt was abandoned (its gateway stopped, or
/// lost the store, before recording how it ended): it is not run again.
pub const OUTCOME_UNKNOWN: &str = "Error: The outcome of this call is unknown: it may have run, but the gateway running it stopped before recording how it ended. Check whether it took effect, or send it with a new idempotency key.";

/// Q4: a strict quota could not be counted (the shared store did not answer).
pub fn quota_unverifiable(kind: &str, tool: &str, retry_s: u64) -> String {
    format!(
        "Error: The {kind} for tool '{}' could not be checked. Retry in {retry_s} s.",
        shown(tool)
    )
}

/// F2: a `deny` flow rule refused the call; `reason` is the rule's plain words.
pub fn flow_denied(tool: &str, reason: &str) -> String {
    format!(
        "Error: Tool '{}' cannot be called at this point of the session. {reason}",
        shown(tool)
    )
}

/// F3: a labelled call whose session trail lives in the shared store, which
/// could not be read or written (flows fail closed).
pub fn flow_unverifiable(tool: &str, retry_s: u64) -> String {
    format!(
        "Error: Tool '{}' cannot be called now: what this session has touched could not be checked. Retry in {retry_s} s.",
        shown(tool)
    )
}

/// F3: an `ask` flow rule's call was not approved (approval refused or impossible).
pub fn flow_not_approved(tool: &str, reason: &str, approval: &str) -> String {
    format!(
        "Error: Tool '{}' needs approval at this point of the session, and it was not given. {reason} ({})",
        shown(tool),
        approval.trim_start_matches("Error: ")
    )
}

// Guards (S): what a model reads in place of a result a guard blocked.

/// S3: a `block` guard found `kinds` in the tool's result; never the matched text.
pub fn guard_blocked(tool: &str, guard: &str, kinds: &[String]) -> String {
    format!(
        "Error: The result of tool '{}' was withheld: guard '{}' found {} in it. Do not retry the same call; ask the user how to proceed.",
        shown(tool),
        shown(guard),
        kinds.join(", ")
    )
}

/// S6: a `block` guard found `kinds` in a call's arguments; the call went nowhere.
pub fn guard_blocked_arguments(tool: &str, guard: &str, kinds: &[String]) -> String {
    format!(
        "Error: Tool '{}' was not called: guard '{}' found {} in its arguments. Do not send it in another form; ask the user how to proceed.",
        shown(tool),
        shown(guard),
        kinds.join(", ")
    )
}

/// S6 `ask`: what leads the approval question when a guard found `kinds` at
/// `paths` of a call's arguments (the arguments shown under it are redacted).
pub fn guard_ask_arguments(guard: &str, kinds: &[String], paths: &[String]) -> String {
    format!(
        "Guard '{}' found {} in the arguments (at {}); the matches are hidden below.",
        shown(guard),
        kinds.join(", "),
        paths.join(", ")
    )
}

/// S3 `ask`: the question put to the human about a result a guard found
/// `kinds` in, at `paths`; never the matched text.
pub fn guard_ask_result(tool: &str, guard: &str, kinds: &[String], paths: &[String]) -> String {
    format!(
        "Guard '{}' found {} in the result of tool '{}' (at {}). Pass the result on to the model?",
        shown(guard),
        kinds.join(", "),
        shown(tool),
        paths.join(", ")
    )
}

/// S3 `ask`: the human did not let the result through (declined, cancelled,
/// no answer in time).
pub fn guard_ask_refused(tool: &str, guard: &str, kinds: &[String]) -> String {
    format!(
        "Error: The result of tool '{}' was withheld: guard '{}' found {} in it, and the user did not let it through. Do not retry the same call; ask the user how to proceed.",
        shown(tool),
        shown(guard),
        kinds.join(", ")
    )
}

/// S3 `ask`: nobody can be asked about the result (the client cannot elicit,
/// or it is a 2026-07-28 client, whose call has run already).
pub fn guard_ask_unavailable(tool: &str, guard: &str, kinds: &[String]) -> String {
    format!(
        "Error: The result of tool '{}' was withheld: guard '{}' found {} in it, and the client cannot ask the user to let it through. Do not retry the same call; ask the user how to proceed.",
        shown(tool),
        shown(guard),
        kinds.join(", ")
    )
}

/// S3 `label`: the shared store could not take the labels a guard found cause
/// to add, so the result is withheld (flows fail closed).
pub fn guard_label_unrecorded(tool: &str, guard: &str, retry_s: u64) -> String {
    format!(
        "Error: The result of tool '{}' was withheld: guard '{}' labelled it, and what this session has touched could not be recorded. Retry in {retry_s} s.",
        shown(tool),
        shown(guard)
    )
}

/// S8: why a read's result was withheld.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withheld {
    /// A `block` guard found something.
    Blocked,
    /// An `ask` guard found something and the human did not let it through.
    NotLetThrough,
    /// An `ask` guard found something and nobody can be asked.
    CannotAsk,
    /// A `label` guard found something and the shared trail could not take it.
    Unrecorded,
}

/// S8: a `resources/read` or `prompts/get` result withheld (`what`:
/// `resource '<uri>'` or `prompt '<name>'`); never the matched text.
pub fn guard_withheld_read(what: &str, guard: &str, kinds: &[String], why: Withheld) -> String {
    let guard = shown(guard);
    let kinds = kinds.join(", ");
    match why {
        Withheld::Blocked => format!("The {what} was withheld: guard '{guard}' found {kinds} in it. Do not retry the same request; ask the user how to proceed."),
        Withheld::NotLetThrough => format!("The {what} was withheld: guard '{guard}' found {kinds} in it, and the user did not let it through. Do not retry the same request; ask the user how to proceed."),
        Withheld::CannotAsk => format!("The {what} was withheld: guard '{guard}' found {kinds} in it, and the client cannot ask the user to let it through. Do not retry the same request; ask the user how to proceed."),
        Withheld::Unrecorded => format!("The {what} was withheld: guard '{guard}' labelled it, and what this session has touched could not be recorded. Retry in 1 s."),
    }
}

/// S8 `ask`: the question about a read's result.
pub fn guard_ask_read(what: &str, guard: &str, kinds: &[String], paths: &[String]) -> String {
    format!(
        "Guard '{}' found {} in the {what} (at {}). Pass it on to the model?",
        shown(guard),
        kinds.join(", "),
        paths.join(", ")
    )
}
