//! The `ask` effect (H5): a call a rule marks `ask` runs only once a human
//! approved it, asked through MCP elicitation: a request to the client, or, for a
//! 2026-07-28 client, an `InputRequiredResult` whose answer comes back with the
//! retried call under a sealed state bound to the caller, tool and arguments.

use super::input;
use super::rev2026::{self, Binding, Envelope, Sealed, StateKey};
use super::session::{CallKey, ClientSession, Sessions};
use crate::logged::logged;
use crate::upstream::SUPPORTED_VERSIONS;
use serde_json::{json, Value};
use std::time::Duration;
use warden_core::{answer, CallContext};

/// How an approval question ended.
pub enum Approval {
    Approved,
    Refused(&'static str),
    /// A 2026-07-28 client is asked through the call's result; it retries.
    InputRequired(Value),
}

/// The call a human is asked about.
pub struct Question<'a> {
    pub ctx: &'a CallContext,
    /// G6: the constraint an `ask` rule on the arguments puts first.
    pub because: Option<&'a str>,
    /// S6: the arguments as the human is shown them (an `ask` guard's matches
    /// redacted); `None`: as they will be sent.
    pub shown: Option<&'a Value>,
}

/// Puts a call to the human. A 2026-07-28 call brings its envelope, what its
/// state is bound to, and what the state it brought back holds (opened already).
pub async fn approve(
    session: &ClientSession,
    sessions: &Sessions,
    call: Option<CallKey>,
    question: Question<'_>,
    (envelope, binding, sealed): (Option<&Envelope>, Option<&Binding>, Option<&Sealed>),
    key: &StateKey,
    timeout: Duration,
) -> Approval {
    let Question {
        ctx,
        because,
        shown,
    } = question;
    // Approved in an earlier round of this very call (its state says so).
    if input::approved(sealed) {
        return Approval::Approved;
    }
    let can = match envelope {
        Some(e) => e.can("elicitation"),
        None => session.client_can("elicitation"),
    };
    if !can {
        tracing::info!(tool = %logged(&ctx.tool), "approval needed but the client cannot elicit; denied");
        return Approval::Refused(answer::APPROVAL_UNAVAILABLE);
    }
    let args = match shown {
        Some(v) => serde_json::to_string(v),
        None => serde_json::to_string(&ctx.arguments),
    };
    let args = args.unwrap_or_default();
    let shown: String = args.chars().take(2000).collect();
    let mut params = form(&match because {
        Some(b) => answer::approval_question_because(b, &ctx.tool, &shown),
        None => answer::approval_question(&ctx.tool, &shown),
    });
    if let (Some(e), Some(binding)) = (envelope, binding) {
        let now = rev2026::unix_now();
        let answered = sealed
            .and(e.input_responses.as_ref())
            .and_then(|r| r.get(rev2026::APPROVAL_KEY));
        if let Some(answer) = answered {
            let approved = answer.get("action").and_then(Value::as_str) == Some("accept")
                && answer.pointer("/content/approve") == Some(&Value::Bool(true));
            return decided(ctx, approved);
        }
        params["mode"] = json!("form");
        return Approval::InputRequired(rev2026::approval_required(params, key.seal(binding, now)));
    }
    let approved = elicit(session, sessions, call, params, timeout).await;
    decided(ctx, approved)
}

/// The elicitation of one yes-or-no question (flat form: one boolean).
fn form(message: &str) -> Value {
    json!({
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {"approve": {"type": "boolean", "title": "Approve this call", "default": false}},
            "required": ["approve"]
        }
    })
}

/// Puts `message` to the human of a session whose client can elicit, as an
/// approval is put (S3 `ask` on a result); true when they approved in time.
pub async fn elicit_yes(
    session: &ClientSession,
    sessions: &Sessions,
    call: Option<CallKey>,
    message: &str,
    timeout: Duration,
) -> bool {
    elicit(session, sessions, call, form(message), timeout).await
}

async fn elicit(
    session: &ClientSession,
    sessions: &Sessions,
    call: Option<CallKey>,
    mut params: Value,
    timeout: Duration,
) -> bool {
    if session.version() == Some(SUPPORTED_VERSIONS[0]) {
        params["mode"] = json!("form");
    }
    let id = sessions.next_request_id();
    let answer = session
        .ask(call, id, "elicitation/create", params, timeout)
        .await;
    answer.as_ref().is_some_and(|a| {
        a.pointer("/result/action").and_then(Value::as_str) == Some("accept")
            && a.pointer("/result/content/approve") == Some(&Value::Bool(true))
    })
}

fn decided(ctx: &CallContext, approved: bool) -> Approval {
    tracing::info!(tool = %logged(&ctx.tool), approved, "approval answered");
    if approved {
        Approval::Approved
    } else {
        Approval::Refused(answer::APPROVAL_REFUSED)
    }
}
