//! Every text a caller (a model, through its client) can read from mcp-warden.
//!
//! Nothing else in the crate formats a caller-facing message: stages decide *what*
//! went wrong and hand the facts to a function here. Each text is tested byte for
//! byte below, because models and client code match on them.
//!
//! Names and keys come from callers and may be huge or carry control characters;
//! [`shown`] bounds and escapes them the same way everywhere, so a hidden and an
//! absent tool name are always rendered identically (G2).

use serde_json::Value;
use std::fmt::Write as _;

/// JSON-RPC "invalid params", the code MCP uses for unknown tools and malformed requests.
pub const INVALID_PARAMS: i64 = -32602;

/// How the gateway answers a call itself, without the tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A tool result with `isError: true` and this text: the model reads it and can correct itself.
    ToolError(String),
    /// A JSON-RPC error object.
    RpcError { code: i64, message: String },
}

impl Answer {
    pub fn text(&self) -> &str {
        match self {
            Answer::ToolError(t) => t,
            Answer::RpcError { message, .. } => message,
        }
    }

    /// The MCP `CallToolResult` for a tool error; `None` for a JSON-RPC error.
    pub fn to_tool_result(&self) -> Option<Value> {
        match self {
            Answer::ToolError(text) => Some(serde_json::json!({
                "content": [{"type": "text", "text": text}],
                "isError": true
            })),
            Answer::RpcError { .. } => None,
        }
    }
}

/// The longest name or key, in characters, echoed back to a caller.
const SHOWN_MAX_CHARS: usize = 128;

/// N1.
pub const TOOL_NAME_REQUIRED: &str = "Tool name is required.";
/// G4: the grant source failed while deciding a call.
pub const ACCESS_NOT_VERIFIED: &str = "Error: Tool access could not be verified.";
/// E2 and H3: anything that went wrong that the caller did not cause.
pub const INTERNAL_ERROR: &str = "Error: An internal error occurred while executing the tool.";
/// H5 `ask`: the human declined, cancelled, or did not answer in time.
pub const APPROVAL_REFUSED: &str = "Error: This call needs approval, and approval was refused.";
/// H5 `ask`: the client cannot ask its user (no elicitation capability).
pub const APPROVAL_UNAVAILABLE: &str =
    "Error: This call needs approval, and the client cannot ask for it. Ask for the tool to be allowed instead.";

/// The question put to the human for an `ask` call (flat form: one boolean).
pub fn approval_question(tool: &str, arguments: &str) -> String {
    format!(
        "Allow the call to '{}' with these arguments?\n{}",
        shown(tool),
        arguments
    )
}

/// H5 with G6: the question when a rule on the arguments asks, led by the
/// constraint the call did not keep.
pub fn approval_question_because(because: &str, tool: &str, arguments: &str) -> String {
    format!("{because}\n{}", approval_question(tool, arguments))
}

/// I1: an idempotency key reused for another tool or other arguments.
pub fn idempotency_mismatch(key: &str) -> String {
    format!(
        "Error: The idempotency key '{}' was already used for a different call (another tool or other arguments). Use a new key for a new call.",
        shown(key)
    )
}

/// I1: the same idempotency key is still running.
pub const ALREADY_RUNNING: &str = "This call is already running. Retry once it finished.";

/// A name or key as shown to a caller: at most 128 characters, control characters escaped.
pub fn shown(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len().min(SHOWN_MAX_CHARS + 8));
    let mut w = Escaping::new(&mut out, SHOWN_MAX_CHARS);
    let _ = w.write_str(raw).and_then(|()| w.finish());
    out
}

/// A [`fmt::Write`](std::fmt::Write) that escapes what passes through it and keeps
/// at most `max` characters, counted as written (an escape counts its length)
/// and the mark included: a text that does not fit ends in `…` within the
/// bound. The one way mcp-warden renders a string it did not write itself,
/// whether for a caller ([`shown`]) or for its log. Call [`Escaping::finish`]
/// after the last write: what fills the last places is held until it is known
/// that nothing follows it.
///
/// Escaped as `\u{..}`: control characters (a newline or an ESC would let a name
/// forge a line of a log or an answer, or drive a terminal), the Unicode line and
/// paragraph separators (line breaks to some viewers), and the bidirectional
/// formatting characters (they reorder what a reader sees).
pub struct Escaping<W> {
    out: W,
    /// Places left, the held tail's included.
    left: usize,
    /// Written only if the text ends with it: it takes the mark's place.
    tail: String,
    cut: bool,
}

impl<W: std::fmt::Write> Escaping<W> {
    pub fn new(out: W, max: usize) -> Escaping<W> {
        Escaping {
            out,
            left: max,
            tail: String::new(),
            cut: false,
        }
    }

    /// Ends the text: the held tail is written, unless the text was cut.
    pub fn finish(&mut self) -> std::fmt::Result {
        if !self.cut {
            self.out.write_str(&std::mem::take(&mut self.tail))?;
        }
        Ok(())
    }

    /// Drops the rest of the text; the mark says something was.
    fn cut(&mut self) -> std::fmt::Result {
        self.cut = true;
        self.tail.clear();
        self.out.write_char('…')
    }
}

impl<W: std::fmt::Write> std::fmt::Write for Escaping<W> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        for c in s.chars() {
            if self.cut {
                return Ok(());
            }
            let len = written_len(c);
            if !self.tail.is_empty() || len > self.left {
                // More than fits: what is held and this go, the mark takes the
                // one place always kept for it.
                self.cut()?;
            } else if len < self.left {
                self.left -= len;
                put(&mut self.out, c)?;
            } else {
                // It fills the last places: kept only if the text ends here.
                self.left = 0;
                put(&mut self.tail, c)?;
            }
        }
        Ok(())
    }
}

/// `c` as [`Escaping`] writes it.
fn put(out: &mut impl std::fmt::Write, c: char) -> std::fmt::Result {
    if escaped(c) {
        write!(out, "\\u{{{:x}}}", c as u32)
    } else {
        out.write_char(c)
    }
}

/// How many characters [`put`] writes for `c`: `\u{` and `}` around its hex digits.
fn written_len(c: char) -> usize {
    if escaped(c) {
        let digits = (32 - (c as u32 | 1).leading_zeros()).div_ceil(4) as usize;
        4 + digits
    } else {
        1
    }
}

fn escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}'
                | '\u{2029}'
                | '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// G2: a hidden tool, an absent tool and a call without a caller all get this.
pub fn unknown_tool(name: &str) -> String {
    format!("Unknown tool '{}'.", shown(name))
}

/// N2: arguments that are not an object, for a tool the caller may call.
pub fn arguments_not_object(tool: &str) -> String {
    format!(
        "Invalid arguments for tool '{}': arguments must be a JSON object.",
        shown(tool)
    )
}

/// One undeclared key and the hint chosen for it, if any (A3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    pub key: String,
    pub hint: Option<String>,
}

/// A3 `reject`: the answer naming every undeclared key, with hints and the allowed list.
pub fn unknown_parameters(tool: &str, unknown: &[UnknownKey], allowed: &[String]) -> String {
    let mut out = String::new();
    match unknown {
        [one] => {
            let _ = writeln!(
                out,
                "Error: Unknown parameter '{}' for tool '{}'.",
                shown(&one.key),
                shown(tool)
            );
            if let Some(hint) = &one.hint {
                let _ = writeln!(out, "Did you mean: {hint}?");
            }
        }
        many => {
            let _ = writeln!(out, "Error: Unknown parameters for tool '{}':", shown(tool));
            for u in many {
                match &u.hint {
                    Some(hint) => {
                        let _ = writeln!(out, "  '{}' — did you mean: {hint}?", shown(&u.key));
                    }
                    None => {
                        let _ = writeln!(out, "  '{}'", shown(&u.key));
                    }
                }
            }
        }
    }
    out.push_str(&allowed_parameters(allowed));
    out
}

fn allowed_parameters(allowed: &[String]) -> String {
    if allowed.is_empty() {
        "This tool takes no parameters.".to_owned()
    } else {
        format!("Allowed parameters: {}.", allowed.join(", "))
    }
}

/// One schema violation, named by the argument it concerns (A5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A required argument was not sent (and has no default).
    Missing { argument: String },
    /// An argument's value does not fit its declaration; `expected` is read off the declaration.
    Invalid { argument: String, expected: String },
    /// The arguments as a whole break a rule not tied to one argument.
    Whole,
}

/// A5: every violation, one per line, in one answer.
pub fn schema_violations(violations: &[Violation]) -> String {
    let mut out = String::new();
    for (i, v) in violations.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        match v {
            Violation::Missing { argument } => {
                let _ = write!(
                    out,
                    "Error: Missing required argument '{}'.",
                    shown(argument)
                );
            }
            Violation::Invalid { argument, expected } => {
                let _ = write!(
                    out,
                    "Error: Invalid value for argument '{}': expected {expected}.",
                    shown(argument)
                );
            }
            Violation::Whole => {
                out.push_str("Error: The arguments do not match the schema the tool declares.");
            }
        }
    }
    out
}

/// A7: the caller sent an argument the configuration fixes.
pub fn pinned_argument(argument: &str, tool: &str) -> String {
    format!(
        "Error: Argument '{}' of tool '{}' is fixed by configuration and cannot be set by the caller.",
        shown(argument),
        shown(tool)
    )
}

/// G6: the constraint a call's argument missed, as one sentence; a refusal puts
/// `Error: ` before it, an approval question puts it above the question.
pub fn argument_constraint(argument: &str, tool: &str, must: &str, caller: &str) -> String {
    format!(
        "Argument '{}' of tool '{}' {} for caller '{}'.",
        shown(argument),
        shown(tool),
        must,
        shown(caller)
    )
}

/// X2: the words for a call a `when_cel` condition decided: a refusal (after
/// "Error: "), or the question put to a human.
pub fn policy_condition(ask: bool, tool: &str, caller: &str) -> String {
    match ask {
        true => format!(
            "Policy asks for approval of this call to tool '{}' for caller '{}'.",
            shown(tool),
            shown(caller)
        ),
        false => format!(
            "Policy does not allow this call to tool '{}' for caller '{}'.",
            shown(tool),
            shown(caller)
        ),
    }
}

/// X3: a `when_cel` condition could not be evaluated: the call fails closed.
pub const CONDITION_FAILED: &str = "Error: Policy could not decide on this call, so it is refused.";

/// G6: a call refused by a rule on its arguments.
pub fn argument_refused(constraint: &str) -> String {
    format!("Error: {constraint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fixed_texts_are_exact() {
        assert_eq!(TOOL_NAME_REQUIRED, "Tool name is required.");
        assert_eq!(
            ACCESS_NOT_VERIFIED,
            "Error: Tool access could not be verified."
        );
        assert_eq!(
            INTERNAL_ERROR,
            "Error: An internal error occurred while executing the tool."
        );
        assert_eq!(
            ALREADY_RUNNING,
            "This call is already running. Retry once it finished."
        );
    }

    #[test]
    fn unknown_tool_text() {
        assert_eq!(unknown_tool("notes.secret"), "Unknown tool 'notes.secret'.");
    }

    #[test]
    fn shown_escapes_control_characters_and_bounds_length() {
        assert_eq!(shown("a\nb\u{7}"), "a\\u{a}b\\u{7}");
        let long = "x".repeat(1000);
        let s = shown(&long);
        assert_eq!(s.chars().count(), 128);
        assert!(s.ends_with('…'));
        assert_eq!(shown("ünï"), "ünï");
        assert_eq!(shown(&"x".repeat(128)), "x".repeat(128));
    }

    #[test]
    fn shown_escapes_what_breaks_or_reorders_lines() {
        assert_eq!(shown("a\u{1b}[31m"), "a\\u{1b}[31m");
        assert_eq!(shown("a\u{2028}b\u{2029}"), "a\\u{2028}b\\u{2029}");
        assert_eq!(shown("a\u{202e}b\u{2066}"), "a\\u{202e}b\\u{2066}");
        assert_eq!(shown("a\u{85}b"), "a\\u{85}b");
    }

    #[test]
    fn escaping_counts_characters_across_writes() {
        use std::fmt::Write as _;
        let mut out = String::new();
        let mut w = Escaping::new(&mut out, 10);
        w.write_str("ab").unwrap();
        w.write_str("\ncd").unwrap();
        w.write_str("ef").unwrap();
        w.finish().unwrap();
        // An escape counts as long as it is written; the mark fits in the bound.
        assert_eq!(out, "ab\\u{a}cd…");
        assert_eq!(out.chars().count(), 10);
    }

    #[test]
    fn a_text_that_fits_exactly_is_kept_whole_and_one_more_character_is_cut_within_the_bound() {
        let fit = |raw: &str, max: usize| {
            let mut out = String::new();
            let mut w = Escaping::new(&mut out, max);
            w.write_str(raw).and_then(|()| w.finish()).unwrap();
            out
        };
        assert_eq!(fit("abcd", 4), "abcd");
        assert_eq!(fit("abcde", 4), "abc…");
        assert_eq!(fit("ab\u{1b}", 8), "ab\\u{1b}");
        assert_eq!(fit("ab\u{1b}c", 8), "ab…");
        assert_eq!(fit("\u{2028}", 8), "\\u{2028}");
        assert_eq!(fit("\u{2028}", 7), "…");
        assert_eq!(fit(&"x".repeat(200), 128).chars().count(), 128);
    }

    #[test]
    fn one_unknown_key_with_hint() {
        let text = unknown_parameters(
            "azdo_builds",
            &[UnknownKey {
                key: "minFinishTime".into(),
                hint: Some("minTime".into()),
            }],
            &names(&["org", "project", "top", "branch", "minTime", "maxTime"]),
        );
        assert_eq!(
            text,
            "Error: Unknown parameter 'minFinishTime' for tool 'azdo_builds'.\n\
             Did you mean: minTime?\n\
             Allowed parameters: org, project, top, branch, minTime, maxTime."
        );
    }

    #[test]
    fn one_unknown_key_without_hint() {
        let text = unknown_parameters(
            "azdo_builds",
            &[UnknownKey {
                key: "fooBar".into(),
                hint: None,
            }],
            &names(&["org", "top"]),
        );
        assert_eq!(
            text,
            "Error: Unknown parameter 'fooBar' for tool 'azdo_builds'.\n\
             Allowed parameters: org, top."
        );
    }

    #[test]
    fn several_unknown_keys() {
        let text = unknown_parameters(
            "azdo_builds",
            &[
                UnknownKey {
                    key: "minFinishTime".into(),
                    hint: Some("minTime".into()),
                },
                UnknownKey {
                    key: "fooBar".into(),
                    hint: None,
                },
            ],
            &names(&["org", "project", "top", "branch", "minTime", "maxTime"]),
        );
        assert_eq!(
            text,
            "Error: Unknown parameters for tool 'azdo_builds':\n  \
             'minFinishTime' — did you mean: minTime?\n  \
             'fooBar'\n\
             Allowed parameters: org, project, top, branch, minTime, maxTime."
        );
    }

    #[test]
    fn parameterless_tool_says_so() {
        let text = unknown_parameters(
            "ping",
            &[UnknownKey {
                key: "x".into(),
                hint: None,
            }],
            &[],
        );
        assert_eq!(
            text,
            "Error: Unknown parameter 'x' for tool 'ping'.\nThis tool takes no parameters."
        );
    }

    #[test]
    fn schema_violation_lines() {
        let text = schema_violations(&[
            Violation::Missing {
                argument: "title".into(),
            },
            Violation::Invalid {
                argument: "top".into(),
                expected: "integer".into(),
            },
            Violation::Whole,
        ]);
        assert_eq!(
            text,
            "Error: Missing required argument 'title'.\n\
             Error: Invalid value for argument 'top': expected integer.\n\
             Error: The arguments do not match the schema the tool declares."
        );
    }

    #[test]
    fn idempotency_texts() {
        assert_eq!(
            idempotency_mismatch("k-1"),
            "Error: The idempotency key 'k-1' was already used for a different call (another tool or other arguments). Use a new key for a new call."
        );
    }

    #[test]
    fn approval_texts() {
        assert_eq!(
            APPROVAL_REFUSED,
            "Error: This call needs approval, and approval was refused."
        );
        assert_eq!(
            APPROVAL_UNAVAILABLE,
            "Error: This call needs approval, and the client cannot ask for it. Ask for the tool to be allowed instead."
        );
        assert_eq!(
            approval_question("notes.publish_note", "{\"id\":1}"),
            "Allow the call to 'notes.publish_note' with these arguments?\n{\"id\":1}"
        );
    }

    #[test]
    fn other_texts() {
        assert_eq!(
            arguments_not_object("notes.create_note"),
            "Invalid arguments for tool 'notes.create_note': arguments must be a JSON object."
        );
        assert_eq!(
            pinned_argument("is_public", "notes.create_note"),
            "Error: Argument 'is_public' of tool 'notes.create_note' is fixed by configuration and cannot be set by the caller."
        );
    }
}
