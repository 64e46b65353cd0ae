//! The one place a tool call ends (H4, I1, E2).
//!
//! Whatever happened to a call — refused by the pipeline, denied by a hook,
//! answered from the ledger, run upstream, failed, cancelled — it leaves through
//! [`Settle::settle`] exactly once: the after hooks see it, the ledger records its
//! end, its audit record is written (before the answer goes out), the metrics
//! count it, its progress token is forgotten, and the answer the caller gets is
//! built here. A call that only pauses (a 2026-07-28 input round) is recorded with
//! [`Settle::paused`] and settles later. A call that takes over an idempotency key
//! whose holder died mid-call first records that attempt with [`Settle::abandoned`].

use super::audit::AuditTrail;
use super::client_session::Sessions;
use super::ledger::{Held, Ledger};
use super::quota::{Slots, RETRY_META_KEY};
use crate::logged::logged;
use crate::metrics::Metrics;
use crate::otel::{Kind, Span};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use warden_core::hooks::{self, AfterHook, CallContext, CallEnd};
use warden_core::{answer, Answer};
use warden_store::{AuditRecord, Finish};

/// A JSON-RPC response body: the result, or the error object.
pub type Body = Result<Value, Value>;

/// What the gateway decided about a call (the audit record's and the metrics'
/// `decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Let through to the upstream (or to the ledger's stored answer).
    Allowed,
    /// Refused by an approval, a before hook or the ledger.
    Denied,
    /// A before hook answered in the tool's place.
    AnsweredByHook,
    /// The pipeline refused the arguments (N1, N2, A3, A5, A7).
    InvalidArguments,
    /// Hidden, absent, or no caller (G1, G2).
    UnknownTool,
    /// The grant source failed (G4).
    GrantFailure,
    /// A 2026-07-28 client was asked for an approval and will retry.
    ApprovalRequested,
    /// A 2026-07-28 client was handed an upstream's request and will retry.
    InputRequested,
    /// A quota refused the call (Q3).
    RateLimited,
    /// A flow rule refused the call (F2).
    FlowDenied,
}

impl Decision {
    /// How the audit records a call the pipeline answered itself; the
    /// gateway and the offline judge (X11) both record it so.
    pub fn of_refusal(refusal: warden_core::Refusal) -> Decision {
        use warden_core::Refusal;
        match refusal {
            Refusal::NoToolName | Refusal::InvalidArguments => Decision::InvalidArguments,
            Refusal::UnknownTool => Decision::UnknownTool,
            Refusal::GrantFailure => Decision::GrantFailure,
            Refusal::ArgumentRule | Refusal::ConditionFailed => Decision::Denied,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Denied => "denied",
            Decision::AnsweredByHook => "answered_by_hook",
            Decision::InvalidArguments => "invalid_arguments",
            Decision::UnknownTool => "unknown_tool",
            Decision::GrantFailure => "grant_failure",
            Decision::ApprovalRequested => "approval_requested",
            Decision::InputRequested => "input_requested",
            Decision::RateLimited => "rate_limited",
            Decision::FlowDenied => "flow_denied",
        }
    }
}

/// How a call ended (the audit record's and the metrics' `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The tool ran and answered `isError: true`.
    ToolError,
    /// The upstream answered with a JSON-RPC error.
    UpstreamError,
    /// The gateway answered with a refusal.
    Refused,
    /// Something the caller did not cause went wrong (E2).
    Failed,
    /// The client cancelled the call.
    Cancelled,
    /// The call waits for the client's input (2026-07-28).
    InputRequired,
    /// The call's idempotency key was taken over after its lease ran out: its
    /// gateway died (or lost the store) mid-call, so how it ended is unknown.
    Abandoned,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::UpstreamError => "upstream_error",
            Outcome::Refused => "refused",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
            Outcome::InputRequired => "input_required",
            Outcome::Abandoned => "abandoned",
        }
    }
}

/// What a tool call carries from its start to its end: pingora's per-request
/// context, for the one phase that runs last.
pub struct CallRecord {
    pub started: Instant,
    /// The tool as the caller named it.
    pub tool: String,
    /// What the after hooks see (built only when there are hooks to see it).
    pub ctx: Option<Arc<CallContext>>,
    /// The call's audit record before its end is known (when calls are audited).
    pub audit: Option<AuditRecord>,
    /// The idempotency key the call holds in the ledger (and renews the lease of).
    pub ledger: Option<Held>,
    /// The progress token sent upstream for it.
    pub token: Option<String>,
    /// The call's span (traces on and sampled): its end is recorded here, and it
    /// ends when the record goes.
    pub span: Option<Box<Mutex<Span>>>,
    /// The concurrency quota slots it holds until it ends (Q2): freed when it
    /// settles, or when dropped should it never settle.
    pub slots: Slots,
    /// The after hooks of the configuration the call began under (H4): a
    /// reload meanwhile does not change who hears of its end.
    pub after: Arc<[Arc<dyn AfterHook>]>,
}

impl CallRecord {
    pub fn new(started: Instant, tool: &str) -> CallRecord {
        CallRecord {
            started,
            tool: tool.to_owned(),
            ctx: None,
            audit: None,
            ledger: None,
            token: None,
            span: None,
            slots: Slots::default(),
            after: Arc::new([]),
        }
    }
}

/// How a call ended, and so what its caller is answered.
pub enum End {
    /// The upstream answered: a result, or a JSON-RPC error as the client sees it
    /// (E3) with the whole of it for the audit trail.
    Upstream { body: Body, error: Option<String> },
    /// The gateway answers with a tool error of its own, a text the caller may read.
    Refused { decision: Decision, text: String },
    /// The pipeline answered (N, G, A): with a tool error or a JSON-RPC error.
    Pipeline { decision: Decision, answer: Answer },
    /// A before hook answered in the tool's place (H1).
    Hook(Value),
    /// The ledger holds this call's answer from an earlier run (I1).
    Replayed(Value),
    /// Something the caller did not cause went wrong: `why` goes to the log, the
    /// after hooks and the ledger; the caller gets the generic answer (E2, H3).
    Failed { decision: Decision, why: String },
    /// What must be recorded before the tool runs (its idempotency key) could
    /// not be, so it did not run (I1): the caller is told so, and when to retry
    /// (in `_meta` too), since the generic answer would leave it wondering whether
    /// the tool ran. `why` goes to the log, the after hooks and the audit trail.
    NotRun {
        why: String,
        text: String,
        retry_ms: u64,
    },
    /// The client cancelled the call: no answer is due.
    Cancelled(String),
    /// A quota or a flow rule refused the call before any hook, approval or
    /// ledger saw it (Q3, F2): a tool error, with when to retry in `_meta`
    /// when there is a time to say. No hook hears of it.
    Policy {
        decision: Decision,
        text: String,
        retry_ms: Option<u64>,
    },
    /// Refused before the call began: at the front (the step-up 403, a
    /// 2026-07-28 request's headers or envelope) or for the 2026-07-28 state it
    /// brought (one not sealed for it, a parked call gone). `body` is the answer
    /// as it was built (`None`: the front answers itself); `why` goes to the
    /// audit trail. No hook or ledger hears of it (G7, T6).
    Edge {
        decision: Decision,
        why: String,
        body: Option<Body>,
    },
}

/// The end of every tool call.
pub struct Settle {
    pub audit: AuditTrail,
    pub ledger: Ledger,
    pub metrics: Arc<Metrics>,
    sessions: Arc<Sessions>,
}

impl Settle {
    pub fn new(
        audit: AuditTrail,
        ledger: Ledger,
        metrics: Arc<Metrics>,
        sessions: Arc<Sessions>,
    ) -> Settle {
        Settle {
            audit,
            ledger,
            metrics,
            sessions,
        }
    }

    /// Ends a call: after hooks, ledger, audit, metrics, once; returns its answer
    /// (`None`: cancelled, nothing is due).
    pub async fn settle(&self, call: &CallRecord, end: End) -> Option<Body> {
        // Its concurrency slots free before the answer leaves (Q2).
        call.slots.release().await;
        if let Some(t) = &call.token {
            self.sessions.forget_token(t);
        }
        let mut detail = None;
        let (decision, outcome, replayed, body) = match end {
            End::Upstream { body, error } => {
                detail = error;
                let outcome = self.upstream_answered(call, &body).await;
                (Decision::Allowed, outcome, false, Some(body))
            }
            End::Policy {
                decision,
                text,
                retry_ms,
            } => {
                let mut result = tool_error(&text);
                if let Some(ms) = retry_ms {
                    result["_meta"] = json!({ RETRY_META_KEY: ms });
                }
                (decision, Outcome::Refused, false, Some(Ok(result)))
            }
            End::Edge {
                decision,
                why,
                body,
            } => {
                detail = Some(why);
                (decision, Outcome::Refused, false, body)
            }
            End::Refused { decision, text } => {
                let result = tool_error(&text);
                self.after(call, Some(&result), None);
                (decision, Outcome::Refused, false, Some(Ok(result)))
            }
            End::Pipeline { decision, answer } => {
                if decision == Decision::GrantFailure {
                    // G4: no before hooks ran, but the after hooks hear of the refusal once.
                    self.after(call, None, Some("the grant source failed".into()));
                }
                (decision, Outcome::Refused, false, Some(answer_body(answer)))
            }
            End::Hook(result) => {
                self.after(call, Some(&result), None);
                (
                    Decision::AnsweredByHook,
                    Outcome::Ok,
                    false,
                    Some(Ok(result)),
                )
            }
            End::Replayed(result) => {
                self.after(call, Some(&result), None);
                (Decision::Allowed, Outcome::Ok, true, Some(Ok(result)))
            }
            End::Failed { decision, why } => {
                detail = Some(why.clone());
                self.after(call, None, Some(why.clone()));
                if let Some(held) = &call.ledger {
                    self.ledger.settle(held, Finish::Failed(why)).await;
                }
                (decision, Outcome::Failed, false, Some(internal_error()))
            }
            End::NotRun {
                why,
                text,
                retry_ms,
            } => {
                detail = Some(why.clone());
                self.after(call, None, Some(why));
                let mut result = tool_error(&text);
                result["_meta"] = json!({ RETRY_META_KEY: retry_ms });
                (Decision::Allowed, Outcome::Failed, false, Some(Ok(result)))
            }
            End::Cancelled(why) => {
                self.after(call, None, Some(why.clone()));
                if let Some(held) = &call.ledger {
                    self.ledger.settle(held, Finish::Failed(why)).await;
                }
                (Decision::Allowed, Outcome::Cancelled, false, None)
            }
        };
        self.record(call, decision, outcome, replayed, detail).await;
        body
    }

    /// An upstream's answer: its outcome, the after hooks told, the ledger's
    /// entry finished.
    async fn upstream_answered(&self, call: &CallRecord, body: &Body) -> Outcome {
        let outcome = match body {
            Ok(r) if r.get("isError") == Some(&Value::Bool(true)) => Outcome::ToolError,
            Ok(_) => Outcome::Ok,
            Err(_) => Outcome::UpstreamError,
        };
        match body {
            Ok(result) => self.after(call, Some(result), None),
            Err(error) => self.after(call, None, Some(format!("upstream error: {error}"))),
        }
        if let Some(held) = &call.ledger {
            let finish = match body {
                Ok(result) => Finish::Completed(result.clone()),
                Err(error) => Finish::Failed(error.to_string()),
            };
            self.ledger.settle(held, finish).await;
        }
        outcome
    }

    /// Records a call that waits for its client's input and is not over.
    pub async fn paused(&self, call: &CallRecord, decision: Decision) {
        self.record(call, decision, Outcome::InputRequired, false, None)
            .await;
    }

    /// Records the attempt a key was taken over from (I1): it was claimed, then its
    /// lease ran out mid-call, so nothing else will ever say how it ended. The
    /// record is `call`'s (same caller, tool, arguments and key) with decision
    /// "allowed" and outcome "abandoned"; its duration is unknown and left at 0.
    /// Metrics do not count it: they count this gateway's calls.
    pub async fn abandoned(&self, call: &CallRecord) {
        let Some(template) = &call.audit else { return };
        let mut record = template.clone();
        record.decision = Decision::Allowed.as_str().to_owned();
        record.outcome = Outcome::Abandoned.as_str().to_owned();
        self.audit.record(record, None).await;
    }

    async fn record(
        &self,
        call: &CallRecord,
        decision: Decision,
        outcome: Outcome,
        replayed: bool,
        error: Option<String>,
    ) {
        let ms = call.started.elapsed().as_secs_f64() * 1e3;
        self.metrics
            .observe(decision.as_str(), outcome.as_str(), ms);
        let mut trace = None;
        if let Some(span) = &call.span {
            let mut span = span.lock().unwrap_or_else(|e| e.into_inner());
            trace = Some(span.context());
            span.set("warden.decision", decision.as_str());
            span.set("warden.outcome", outcome.as_str());
            span.set("warden.replayed", replayed);
            if outcome == Outcome::Failed {
                // What failed stays in the log and the audit trail; the trace says that it did.
                span.fail("the call failed (E2)");
            }
        }
        if let Some(template) = &call.audit {
            let mut record = template.clone();
            record.decision = decision.as_str().to_owned();
            record.outcome = outcome.as_str().to_owned();
            record.duration_ms = ms;
            record.replayed = replayed;
            record.error = error;
            self.audit.record(record, trace).await;
        }
    }

    /// H4: runs the after hooks once, without delaying the answer.
    /// (The result is copied only when a hook will read it.)
    fn after(&self, call: &CallRecord, result: Option<&Value>, failure: Option<String>) {
        if call.after.is_empty() {
            return;
        }
        let Some(ctx) = call.ctx.clone() else { return };
        let result = result.cloned();
        let hooks = call.after.clone();
        let end = CallEnd {
            result,
            failure,
            duration_ms: call.started.elapsed().as_secs_f64() * 1e3,
        };
        // Each hook's span sits under the call's, though it may end after it.
        let parent = call
            .span
            .as_ref()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).parent());
        tokio::spawn(async move {
            let start = |i: usize| {
                parent.as_ref().map(|p| {
                    let mut s = p.child("warden.after_hook", Kind::Internal);
                    s.set("warden.hook.index", i as i64);
                    s
                })
            };
            let done = |span: Option<Span>, ran: &Result<(), _>| {
                if let (Some(mut s), Err(_)) = (span, ran) {
                    s.fail("the hook failed");
                }
            };
            for e in hooks::run_after_observed(&hooks, &ctx, &end, start, done).await {
                tracing::warn!(tool = %logged(&ctx.tool), "an after hook failed (ignored): {}", logged(&e));
            }
        });
    }
}

/// A tool result with `isError: true` and `text`.
pub fn tool_error(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// E2: the answer to a tool call that failed for reasons the caller did not cause.
pub fn internal_error() -> Body {
    Ok(tool_error(answer::INTERNAL_ERROR))
}

/// The JSON-RPC body of a gateway answer.
pub fn answer_body(answer: Answer) -> Body {
    match answer {
        Answer::ToolError(text) => Ok(tool_error(&text)),
        Answer::RpcError { code, message } => Err(json!({"code": code, "message": message})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_and_outcomes_print_as_before() {
        let decisions = [
            Decision::Allowed,
            Decision::Denied,
            Decision::AnsweredByHook,
            Decision::InvalidArguments,
            Decision::UnknownTool,
            Decision::GrantFailure,
            Decision::ApprovalRequested,
            Decision::InputRequested,
            Decision::RateLimited,
            Decision::FlowDenied,
        ];
        assert_eq!(
            decisions.map(Decision::as_str),
            [
                "allowed",
                "denied",
                "answered_by_hook",
                "invalid_arguments",
                "unknown_tool",
                "grant_failure",
                "approval_requested",
                "input_requested",
                "rate_limited",
                "flow_denied"
            ]
        );
        let outcomes = [
            Outcome::Ok,
            Outcome::ToolError,
            Outcome::UpstreamError,
            Outcome::Refused,
            Outcome::Failed,
            Outcome::Cancelled,
            Outcome::InputRequired,
        ];
        assert_eq!(
            outcomes.map(Outcome::as_str),
            [
                "ok",
                "tool_error",
                "upstream_error",
                "refused",
                "failed",
                "cancelled",
                "input_required"
            ]
        );
    }

    #[test]
    fn an_abandoned_attempt_prints_as_abandoned() {
        assert_eq!(Outcome::Abandoned.as_str(), "abandoned");
    }

    #[test]
    fn gateway_answers() {
        assert_eq!(
            internal_error(),
            Ok(
                json!({"content": [{"type": "text", "text": answer::INTERNAL_ERROR}], "isError": true})
            )
        );
        assert_eq!(
            answer_body(Answer::RpcError {
                code: -32602,
                message: "m".into()
            }),
            Err(json!({"code": -32602, "message": "m"}))
        );
    }
}
