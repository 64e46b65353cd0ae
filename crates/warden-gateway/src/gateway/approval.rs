//! The `ask` effect (H5): a call a rule marks `ask` runs only once a human
//! approved it, asked through MCP elicitation: a request to the client, or, for a
//! 2026-07-28 client, an `InputRequiredResult` whose answer comes back with the
//! retried call under a sealed state bound to the caller, tool and arguments.
//! With `[access] approver = "console"` an operator answers in the console's
//! inbox instead (H6); with `"both"`, whichever answers first.

use super::client_session::{CallKey, ClientSession, Sessions};
use super::inbox::{Inbox, Verdict, Waiting};
use super::rev2026::input;
use super::rev2026::{ApprovalRound, Binding, Revision, Sealed, StateKey};
use crate::config::Approver;
use crate::logged::logged;
use crate::upstream::SUPPORTED_VERSIONS;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use warden_core::{answer, CallContext};

/// How an approval question ended, and who answered (`None`: nobody did, or an
/// earlier round of a 2026-07-28 call had).
pub enum Approval {
    Approved(Option<Verdict>),
    Refused(&'static str, Option<Verdict>),
    /// A 2026-07-28 client is asked through the call's result; it retries.
    InputRequired(Value),
}

/// The operators' side of an approval: the inbox, who may answer, and what the
/// inbox shows of the call.
pub struct Operators<'a> {
    pub inbox: &'a Arc<Inbox>,
    pub approver: Approver,
    pub waiting: Waiting,
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

/// Puts a call to the human. A 2026-07-28 call brings its revision, what its
/// state is bound to, and what the state it brought back holds (opened already).
#[allow(clippy::too_many_arguments)]
pub async fn approve(
    session: &ClientSession,
    sessions: &Sessions,
    call: Option<CallKey>,
    question: Question<'_>,
    (revision, binding, sealed): (&Revision, Option<&Binding>, Option<&Sealed>),
    key: &StateKey,
    timeout: Duration,
    operators: Operators<'_>,
) -> Approval {
    // Approved in an earlier round of this very call (its state says so).
    if input::approved(sealed) {
        return Approval::Approved(None);
    }
    let can = revision.can("elicitation", session);
    let Operators {
        inbox,
        approver,
        waiting,
    } = operators;
    match approver {
        Approver::Client => {}
        // A 2026-07-28 call is not held while its client asks (it retries),
        // so nothing can race the console for it: the console answers it.
        Approver::Console => return console(inbox, waiting, timeout).await,
        Approver::Both if !can || revision.is_2026() => {
            return console(inbox, waiting, timeout).await
        }
        Approver::Both => {
            let params = question_form(&question);
            return tokio::select! {
                answered = console(inbox, waiting, timeout) => answered,
                approved = elicit(session, sessions, call, params, timeout) => decided(question.ctx, approved),
            };
        }
    }
    let ctx = question.ctx;
    if !can {
        tracing::info!(tool = %logged(&ctx.tool), "approval needed but the client cannot elicit; denied");
        return Approval::Refused(answer::APPROVAL_UNAVAILABLE, None);
    }
    // A 2026-07-28 client is asked by an input round, and answers by its retry.
    match revision.approval_round(binding, sealed, key, || question_form(&question)) {
        Some(ApprovalRound::Answered(approved)) => return decided(ctx, approved),
        Some(ApprovalRound::Ask(result)) => return Approval::InputRequired(result),
        None => {}
    }
    let params = question_form(&question);
    let approved = elicit(session, sessions, call, params, timeout).await;
    decided(ctx, approved)
}

/// H6: who answers a call's question: `[access] approver` (`default`) unless
/// what asks (a rule, a flow rule, an argument guard) names someone; where
/// those it names differ, the console answers, since only an operator's answer
/// is one the caller's own user cannot give.
pub fn approver_of(default: Approver, named: &[Approver]) -> Approver {
    match named.split_first() {
        None => default,
        Some((first, rest)) if rest.iter().all(|a| a == first) => *first,
        Some(_) => Approver::Console,
    }
}

/// The elicitation that puts `question` to the client's user.
fn question_form(question: &Question<'_>) -> Value {
    let ctx = question.ctx;
    let args = match question.shown {
        Some(v) => serde_json::to_string(v),
        None => serde_json::to_string(&ctx.arguments),
    };
    let args = args.unwrap_or_default();
    let shown: String = args.chars().take(2000).collect();
    form(&match question.because {
        Some(b) => answer::approval_question_because(b, &ctx.tool, &shown),
        None => answer::approval_question(&ctx.tool, &shown),
    })
}

/// Lists the call in the console's inbox and waits for an operator's answer
/// (H6); nobody answering in time refuses it, as a client's silence does.
async fn console(inbox: &Arc<Inbox>, waiting: Waiting, timeout: Duration) -> Approval {
    let tool = waiting.tool.clone();
    let mut ticket = inbox.enter(waiting, timeout).await;
    tracing::info!(tool = %logged(&tool), id = %ticket.id, "a call waits for an operator's approval in the console");
    match tokio::time::timeout(timeout, &mut ticket.answer).await {
        Ok(Ok(v)) => {
            tracing::info!(tool = %logged(&tool), approved = v.approved, by = %logged(&v.by), "approval answered in the console");
            if v.approved {
                Approval::Approved(Some(v))
            } else {
                Approval::Refused(answer::APPROVAL_REFUSED, Some(v))
            }
        }
        _ => {
            tracing::info!(tool = %logged(&tool), "nobody answered the approval in the console in time; refused");
            Approval::Refused(answer::APPROVAL_REFUSED, None)
        }
    }
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

/// The client's user answered (or did not, in time).
fn decided(ctx: &CallContext, approved: bool) -> Approval {
    tracing::info!(tool = %logged(&ctx.tool), approved, "approval answered");
    let by = Some(Verdict {
        approved,
        by: "client".to_owned(),
        note: None,
    });
    if approved {
        Approval::Approved(by)
    } else {
        Approval::Refused(answer::APPROVAL_REFUSED, by)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_answers_is_what_asks_names_or_the_access_default() {
        use Approver::{Both, Client, Console};
        assert_eq!(approver_of(Client, &[]), Client);
        assert_eq!(approver_of(Both, &[]), Both);
        assert_eq!(approver_of(Client, &[Console]), Console);
        assert_eq!(approver_of(Console, &[Client, Client]), Client);
        assert_eq!(approver_of(Client, &[Both, Client]), Console);
    }
}
