//! A call on its upstream: queued, answered (or failed), and for a 2026-07-28
//! client set aside while its client answers an input request, then resumed.

use super::edge::Early;
use super::{child, Accepted, Begun, Calls, Relayed};
use crate::gateway::client_session::{CallKey, ClientSession};
use crate::gateway::relay::{self, FromClient};
use crate::gateway::rev2026::input::{self, Rounds};
use crate::gateway::rev2026::{self, Binding, Bridged, Envelope};
use crate::gateway::settle::{self, Body, CallRecord, Decision, End};
use crate::logged::logged;
use crate::otel::{self, Kind};
use crate::texts;
use crate::upstream::CallError;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

impl Calls {
    /// Queues the call on its upstream.
    pub(super) async fn relay(
        &self,
        session: &ClientSession,
        mut a: Accepted,
    ) -> Result<Relayed, Option<Body>> {
        let log_level = a.revision.log_level();
        let span = child(&a.record, "tools/call", Kind::Client).map(|mut s| {
            s.set("mcp.method.name", "tools/call");
            s.set("warden.upstream", a.up.name.clone());
            // The upstream continues the trace under this span (the W3C key MCP
            // reserves in `_meta`; an HTTP upstream also gets the header).
            otel::set_traceparent(&mut a.params, &s.context());
            s
        });
        // The caller's credential for this upstream, if one is configured: the
        // audit record names it, the secret goes with the request only.
        let caller = session.caller();
        let subject = session.subject_token();
        let credential = match a
            .up
            .credentials
            .for_caller(caller.as_deref(), subject.as_deref())
            .await
        {
            Ok(c) => c,
            Err(why) => {
                tracing::error!(upstream = %a.up.name, caller = %logged(caller.as_deref().map_or("", |c| c.name.as_str())), "no credential for the call: {why}");
                let end = End::Failed {
                    decision: Decision::Allowed,
                    why: format!("no credential for the upstream: {why}"),
                };
                return Err(self.settle.settle(&a.record, end).await);
            }
        };
        if let (Some(c), Some(audit)) = (&credential, a.record.audit.as_mut()) {
            audit.credential = Some(c.name.clone());
        }
        let credential = credential.map(|c| c.token);
        let capabilities = a.revision.capabilities(session);
        // An older client's input rounds send the call again: keep it.
        let params = a.revision.bridges(&a.up).then(|| a.params.clone());
        let from = FromClient {
            older: !a.revision.is_2026(),
            log_level,
            capabilities: capabilities.as_ref(),
        };
        match relay::start(
            &a.up,
            session,
            a.call,
            "tools/call",
            a.params,
            from,
            credential,
        )
        .await
        {
            Ok(pending) => Ok(Relayed {
                pending,
                span,
                record: a.record,
                revision: a.revision,
                binding: a.binding,
                params,
                capabilities,
                approved: a.approval,
                counted: a.counted,
                approval_timeout: a.policy.approval_timeout,
                guards: a.guards,
            }),
            Err(e) => Err(self.failed(&a.record, &a.up.name, e).await),
        }
    }

    /// Waits for the upstream's answer and settles the call with it.
    pub(super) async fn answer(&self, session: &ClientSession, mut r: Relayed) -> Option<Body> {
        let result = match (&r.binding, &r.pending.call) {
            // A 2026-07-28 call: an upstream's request for it pauses the call.
            (Some(_), Some(_)) => {
                match rev2026::wait_bridged(session, &mut r.pending, r.revision.envelope()).await {
                    Bridged::Answered(result) => result,
                    Bridged::Asked(their_id, request) => {
                        // Boxed: the rare path would otherwise set the size
                        // of every call's answering future (10.2 KB, 7.1 without).
                        return Box::pin(self.park(r, their_id, request)).await;
                    }
                }
            }
            _ => relay::wait(session, &mut r.pending).await,
        };
        if let Some(s) = &mut r.span {
            match &result {
                Ok(v) if v.get("error").is_some() => s.fail("the upstream answered an error"),
                Ok(_) => {}
                Err(e) => s.fail(e.to_string()),
            }
        }
        r.span = None;
        let rounds = r.pending.conn.revision().asks_in_results();
        let up = rounds
            .then(|| self.upstreams.by_name(&r.pending.upstream))
            .flatten();
        let result = match up {
            Some(up) => {
                let rounds = Rounds {
                    up: &up,
                    session,
                    sessions: &self.sessions,
                    call: r.pending.call.clone(),
                    method: "tools/call",
                    params: r.params.take(),
                    capabilities: r.capabilities.take(),
                    binding: r.binding.as_deref(),
                    key: self.state_key(),
                    approved: r.approved,
                    timeout: r.approval_timeout,
                };
                let mut result = rounds.finish(result).await;
                let asked = result
                    .as_ref()
                    .ok()
                    .and_then(|r| r.get("result"))
                    .is_some_and(input::is_input_required);
                if asked {
                    // Not over: the 2026-07-28 client answers and retries. Its
                    // place frees now, and its retry is not counted again.
                    r.record.slots.release().await;
                    let out = result.as_mut().ok().and_then(|r| r.get_mut("result"));
                    if let (Some(binding), Some(out)) = (r.binding.as_deref(), out) {
                        self.credit(out, binding, r.counted).await;
                    }
                    self.settle
                        .paused(&r.record, Decision::InputRequested)
                        .await;
                    return result
                        .ok()
                        .and_then(|mut r| r.get_mut("result").map(Value::take).map(Ok));
                }
                result
            }
            None => result,
        };
        let policy = self.upstreams.error_data;
        let upstream = r.pending.upstream.as_str();
        let end = result.and_then(|response| {
            upstream_end(relay::upstream_body(
                response,
                policy,
                upstream,
                "tools/call",
            ))
        });
        match end {
            Ok(mut end) => {
                if let Some(rg) = r.guards.take() {
                    end = self.govern(session, &mut r.record, &rg, end).await;
                }
                tracing::debug!(tool = %logged(&r.record.tool), ms = r.record.started.elapsed().as_millis() as u64, "relayed");
                self.settle.settle(&r.record, end).await
            }
            Err(e) => self.failed(&r.record, &r.pending.upstream, e).await,
        }
    }

    /// E2: a call that failed upstream. Details go to the log, never to the caller.
    pub(super) async fn failed(
        &self,
        record: &CallRecord,
        upstream: &str,
        e: CallError,
    ) -> Option<Body> {
        if e == CallError::Cancelled {
            return self
                .settle
                .settle(record, End::Cancelled(e.to_string()))
                .await;
        }
        if let CallError::Crowded(_) = e {
            // The caller may retry; nothing went wrong that it could not be told.
            tracing::warn!(%upstream, tool = %logged(&record.tool), "call refused: {e}");
            let end = End::Refused {
                decision: Decision::Allowed,
                text: texts::CALLER_PROCESSES_BUSY.to_owned(),
            };
            return self.settle.settle(record, end).await;
        }
        let ms = record.started.elapsed().as_millis() as u64;
        tracing::error!(%upstream, method = "tools/call", tool = %logged(&record.tool), ms, "request failed: {e}");
        let end = End::Failed {
            decision: Decision::Allowed,
            why: e.to_string(),
        };
        self.settle.settle(record, end).await
    }

    /// Sets a 2026-07-28 call aside and puts its upstream's request to the client as
    /// an `InputRequiredResult`; the client's retry resumes it. A call nobody comes
    /// back for is cancelled upstream after its timeout.
    pub(super) async fn park(&self, r: Relayed, their_id: Value, request: Value) -> Option<Body> {
        let Some(binding) = r.binding.clone() else {
            let end = End::Failed {
                decision: Decision::Allowed,
                why: "a parked call has no binding".into(),
            };
            return self.settle.settle(&r.record, end).await;
        };
        let Some(park_id) = rev2026::park_id() else {
            let end = End::Failed {
                decision: Decision::Allowed,
                why: "the OS random source failed".into(),
            };
            return self.settle.settle(&r.record, end).await;
        };
        self.settle
            .paused(&r.record, Decision::InputRequested)
            .await;
        let timeout = Duration::from_millis(r.pending.timeout_ms);
        let state = self.parked.park(park_id.clone(), &binding, r, their_id);
        let (parked, settle) = (self.parked.clone(), self.settle.clone());
        tokio::spawn(async move {
            tokio::time::sleep(timeout).await;
            if let Some((r, asked)) = parked.take(&park_id) {
                let conn = r.pending.conn.clone();
                tracing::info!(upstream = %r.pending.upstream, "a parked call's client did not come back; cancelled");
                relay::refuse_upstream(&conn, asked, texts::CLIENT_DID_NOT_ANSWER).await;
                conn.cancel(r.pending.id, "the client did not come back");
                let why = CallError::Timeout(r.pending.timeout_ms).to_string();
                let end = End::Failed {
                    decision: Decision::Allowed,
                    why,
                };
                settle.settle(&r.record, end).await;
            }
        });
        Some(Ok(rev2026::input_required(&request, state)))
    }

    /// A retried 2026-07-28 call whose requestState names a parked call: the
    /// client's answer goes to the upstream's request and the wait goes on.
    /// `None` when the call names no parked call (it then runs as a new one).
    pub(super) async fn resume(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        call: Option<CallKey>,
        params: &Value,
        envelope: &Envelope,
    ) -> Option<Begun> {
        let name = params.get("name")?.as_str()?;
        let caller = session.caller();
        let binding = Binding::of_call(caller.as_deref(), name, params.get("arguments"));
        let Some((mut r, asked)) = self.parked.resume(envelope, &binding)? else {
            // T6: the retry is recorded; the parked call settled on its own (answered,
            // or failed when its wait ran out).
            let end = End::Edge {
                decision: Decision::Denied,
                why: "the parked call this requestState names is gone".into(),
                body: Some(Ok(settle::tool_error(texts::INPUT_ROUND_EXPIRED))),
            };
            let early = Early::on(session, caller.as_deref(), name, Some(params));
            return Some(Begun::Done(self.settle_early(early, end).await));
        };
        r.pending
            .conn
            .send(rev2026::upstream_answer(asked, envelope))
            .await;
        let log_level = envelope.log_level.or(r.revision.log_level());
        if let Some(k) = &call {
            session.track(k, &r.pending.conn, r.pending.id, false, log_level);
        }
        r.pending.call = call;
        let (me, session) = (self.clone(), session.clone());
        Some(Begun::Then(Box::pin(async move {
            me.answer(&session, r).await
        })))
    }
}

/// The end of a call its upstream answered. A result or a JSON-RPC error passes
/// through unchanged (E3), but a result that is not an object is no
/// `CallToolResult`: relayed, it would hand the caller `null` or a bare string as
/// a tool's answer. The upstream failed, so the call fails like any other upstream
/// failure (E2): the generic answer, `failed` in the audit trail and the ledger.
fn upstream_end((body, error): (Body, Option<String>)) -> Result<End, CallError> {
    let kind = match &body {
        Ok(Value::Object(_)) | Err(_) => return Ok(End::Upstream { body, error }),
        Ok(Value::Null) => "null",
        Ok(Value::Bool(_)) => "a boolean",
        Ok(Value::Number(_)) => "a number",
        Ok(Value::String(_)) => "a string",
        Ok(Value::Array(_)) => "an array",
    };
    Err(CallError::NotAnObject(kind))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_result_that_is_no_object_is_an_upstream_failure() {
        let ok = json!({"content": [], "isError": true});
        assert!(
            matches!(upstream_end((Ok(ok.clone()), None)), Ok(End::Upstream { body: Ok(r), .. }) if r == ok)
        );
        let error = json!({"code": -32000, "message": "m"});
        assert!(matches!(
            upstream_end((Err(error.clone()), None)),
            Ok(End::Upstream { body: Err(e), .. }) if e == error
        ));
        for (result, kind) in [
            (json!(null), "null"),
            (json!("a string"), "a string"),
            (json!([1]), "an array"),
            (json!(1), "a number"),
            (json!(true), "a boolean"),
        ] {
            match upstream_end((Ok(result), None)) {
                Err(e) => assert_eq!(e, CallError::NotAnObject(kind)),
                Ok(_) => panic!("{kind} passed as a result"),
            }
        }
        assert_eq!(
            CallError::NotAnObject("null").to_string(),
            "the upstream's result is null, not a JSON object"
        );
    }
}
