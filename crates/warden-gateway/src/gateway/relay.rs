//! Requests relayed to an upstream on a client's behalf: queued on the upstream's
//! connection in arrival order, then awaited, with the client's request id mapped
//! to the upstream's so a cancellation finds its way.

use super::session::{CallKey, ClientSession};
use super::settle::Body;
use crate::jsonrpc;
use crate::logged::logged;
use crate::texts;
use crate::upstream::{CallError, Conn, PendingReply, Upstream};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

/// A request queued upstream whose answer is awaited.
pub struct Pending {
    pub conn: Arc<Conn>,
    /// The upstream's id for it.
    pub id: u64,
    pub reply: PendingReply,
    pub timeout_ms: u64,
    pub upstream: String,
    pub method: String,
    /// The client request it answers.
    pub call: Option<CallKey>,
}

/// Queues `method` on `up` for the client request `call`, remembering the way back
/// for cancellation (and the log level a 2026-07-28 call opted in to).
pub async fn start(
    up: &Upstream,
    session: &ClientSession,
    call: Option<CallKey>,
    method: &str,
    params: Value,
    log_level: Option<u8>,
) -> Result<Pending, CallError> {
    let conn = up.conn().ok_or(CallError::Gone)?;
    let (id, reply) = conn.start(method, Some(params), up.timeout_ms()).await?;
    if let Some(k) = &call {
        session.track(k, &conn, id, log_level);
    }
    Ok(Pending {
        conn,
        id,
        reply,
        timeout_ms: up.timeout_ms(),
        upstream: up.name.clone(),
        method: method.to_owned(),
        call,
    })
}

/// Waits for a relayed request's answer; the client request no longer waits after.
pub async fn wait(session: &ClientSession, p: &mut Pending) -> Result<Value, CallError> {
    let result = p.conn.wait(p.id, &mut p.reply, p.timeout_ms).await;
    if let Some(k) = &p.call {
        session.untrack(k);
    }
    result
}

/// A request the gateway does not govern (`resources/read`, `prompts/get` …),
/// queued now; the returned future answers it.
pub async fn begin_forward(
    up: &Upstream,
    session: &ClientSession,
    call: CallKey,
    method: &str,
    params: Value,
) -> Result<Pending, Option<Body>> {
    let started = Instant::now();
    start(up, session, Some(call), method, params, None)
        .await
        .map_err(|e| forward_failed(&up.name, method, started, e))
}

/// The answer to a forwarded request (`None`: cancelled, nothing is due).
pub async fn await_forward(session: &ClientSession, mut p: Pending) -> Option<Body> {
    let started = Instant::now();
    match wait(session, &mut p).await {
        Ok(response) => {
            tracing::debug!(method = %logged(&p.method), "relayed");
            Some(response_body(response))
        }
        Err(e) => forward_failed(&p.upstream, &p.method, started, e),
    }
}

/// A forwarded request that failed: the details go to the log, the client gets
/// the generic answer (or none when it cancelled).
fn forward_failed(upstream: &str, method: &str, started: Instant, e: CallError) -> Option<Body> {
    if e == CallError::Cancelled {
        return None;
    }
    let ms = started.elapsed().as_millis() as u64;
    tracing::error!(%upstream, method = %logged(method), ms, "request failed: {e}");
    Some(Err(
        json!({"code": jsonrpc::INTERNAL_ERROR, "message": texts::UPSTREAM_NO_ANSWER}),
    ))
}

/// The body of an upstream's response, passed through unchanged (E3).
pub fn response_body(mut response: Value) -> Body {
    if let Some(result) = response.get_mut("result") {
        return Ok(result.take());
    }
    match response.get_mut("error") {
        Some(error) => Err(error.take()),
        None => {
            Err(json!({"code": jsonrpc::INTERNAL_ERROR, "message": texts::UPSTREAM_EMPTY_ANSWER}))
        }
    }
}

/// Answers an upstream's request with an error: nobody can answer it.
pub async fn refuse_upstream(conn: &Conn, id: Value, text: &str) {
    conn.send(jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, text))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_bodies_pass_through() {
        assert_eq!(
            response_body(json!({"id": 1, "result": {"a": 1}})),
            Ok(json!({"a": 1}))
        );
        assert_eq!(
            response_body(json!({"id": 1, "error": {"code": -32000, "message": "m", "data": [1]}})),
            Err(json!({"code": -32000, "message": "m", "data": [1]}))
        );
    }
}
