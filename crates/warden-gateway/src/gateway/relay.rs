//! Requests relayed to an upstream on a client's behalf: queued on the upstream's
//! connection in arrival order, then awaited, with the client's request id mapped
//! to the upstream's so a cancellation finds its way.

use super::client_session::{CallKey, ClientSession};
use super::settle::Body;
use crate::config::ErrorData;
use crate::jsonrpc;
use crate::logged::logged;
use crate::texts;
use crate::upstream::per_caller::Lease;
use crate::upstream::{CallError, Conn, PendingReply, Upstream};
use serde_json::{json, Map, Value};
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
    /// The hold on the caller's own child it runs on, if it does (G8): that
    /// child is not stopped as idle while the request is under way.
    pub lease: Option<Lease>,
}

/// What a client's request brings to the upstream's hop.
#[derive(Debug, Clone, Copy, Default)]
pub struct FromClient<'a> {
    /// The request is of a revision before 2026-07-28: it goes over the
    /// upstream's older-revision session where there is one (as
    /// `Revision::bridges` reckons), whatever the session spoke before.
    pub older: bool,
    /// The log level its own envelope asked for.
    pub log_level: Option<u8>,
    /// The capabilities the client declared, for a 2026-07-28 upstream's envelope.
    pub capabilities: Option<&'a Value>,
}

/// Queues `method` on `up` for the client request `call`, remembering the way back
/// for cancellation (and the log level a 2026-07-28 call opted in to). An
/// upstream that speaks 2026-07-28 gets the envelope with the capabilities the
/// client declared (`capabilities`), never more. `credential` is the caller's
/// own for this upstream (G8): an HTTP upstream is shown it, and a child-process
/// upstream runs the request in the caller's own child, started with it.
pub async fn start(
    up: &Upstream,
    session: &ClientSession,
    call: Option<CallKey>,
    method: &str,
    params: Value,
    from: FromClient<'_>,
    credential: Option<Arc<str>>,
) -> Result<Pending, CallError> {
    let (conn, lease, credential) = match (credential, &up.children) {
        (Some(token), Some(children)) => {
            let caller = session.caller();
            let name = caller.as_deref().map_or("", |c| c.name.as_str());
            let (conn, lease) = children.conn_for(name, token).await?;
            (conn, Some(lease), None)
        }
        (credential, _) => {
            let conn = up.conn_for(from.older);
            (conn.ok_or(CallError::Gone)?, None, credential)
        }
    };
    // The log level the client wants for this request (its own envelope's, or an
    // older client's `logging/setLevel`), for a 2026-07-28 upstream's envelope.
    let level = match from.log_level {
        Some(rank) => super::client_session::log_level_name(rank).map(Value::from),
        None if from.older => super::client_session::lock(&session.log_level).clone(),
        None => None,
    };
    let params = conn
        .revision()
        .envelop(Some(params), from.capabilities, level);
    let (id, reply) = conn
        .start_as(method, params, up.timeout_ms(), credential)
        .await?;
    if let Some(k) = &call {
        session.track(k, &conn, id, from.older, from.log_level);
    }
    Ok(Pending {
        conn,
        id,
        reply,
        timeout_ms: up.timeout_ms(),
        upstream: up.name.clone(),
        method: method.to_owned(),
        call,
        lease,
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
/// queued now; [`forwarded`] answers it.
pub async fn begin_forward(
    up: &Upstream,
    session: &ClientSession,
    call: CallKey,
    method: &str,
    params: Value,
    from: FromClient<'_>,
) -> Result<Pending, Option<Body>> {
    let started = Instant::now();
    // A caller with its own credential for this upstream (G8) presents it here too.
    let caller = session.caller();
    let subject = session.subject_token();
    let credential = match up
        .credentials
        .for_caller(caller.as_deref(), subject.as_deref())
        .await
    {
        Ok(c) => c.map(|c| c.token),
        Err(why) => {
            tracing::error!(upstream = %up.name, method = %logged(method), "no credential for the request: {why}");
            return Err(Some(Err(
                json!({"code": jsonrpc::INTERNAL_ERROR, "message": texts::UPSTREAM_NO_ANSWER}),
            )));
        }
    };
    start(up, session, Some(call), method, params, from, credential)
        .await
        .map_err(|e| forward_failed(&up.name, method, started, e))
}

/// The answer to a forwarded request, once its upstream answered (`None`:
/// cancelled, nothing is due).
pub fn forwarded(
    p: &Pending,
    result: Result<Value, CallError>,
    started: Instant,
    policy: ErrorData,
) -> Option<Body> {
    match result {
        Ok(response) => {
            tracing::debug!(method = %logged(&p.method), "relayed");
            Some(upstream_body(response, policy, &p.upstream, &p.method).0)
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

/// JSON-RPC error codes whose `data` the MCP specification defines, passed on
/// whatever the policy: -32042, URL elicitation required (its data lists them),
/// and -32021, a client capability missing (its data names the capabilities).
const SPEC_DATA_CODES: &[i64] = &[-32042, jsonrpc::MISSING_CAPABILITY];

/// An upstream's response as its client gets it (E3): a result unchanged; an
/// error bounded by [`client_error`], with the whole error (as JSON) beside it
/// for the log and the audit trail.
pub fn upstream_body(
    response: Value,
    policy: ErrorData,
    upstream: &str,
    method: &str,
) -> (Body, Option<String>) {
    match response_body(response) {
        Ok(result) => (Ok(result), None),
        Err(error) => {
            // JSON escapes control characters: the whole error is safe in a log line.
            let whole = serde_json::to_string(&error).unwrap_or_default();
            tracing::info!(upstream = %logged(upstream), method = %logged(method), error = %whole, "the upstream answered with an error");
            (Err(client_error(&error, policy)), Some(whole))
        }
    }
}

/// What a client sees of an upstream's JSON-RPC error: its `code` (an integer, else
/// -32603), its `message` escaped and bounded as a log line's values are
/// ([`logged`]: 1,024 characters, control characters escaped), and its `data` only where the specification gives it a meaning or the
/// operator passes it (`gateway.upstream_error_data = "pass"`). Nothing else.
pub fn client_error(error: &Value, policy: ErrorData) -> Value {
    let code = error
        .get("code")
        .and_then(Value::as_i64)
        .unwrap_or(jsonrpc::INTERNAL_ERROR);
    let message = match error.get("message") {
        Some(Value::String(m)) => logged(m).to_string(),
        Some(other) => logged(other).to_string(),
        None => String::new(),
    };
    let mut out = Map::new();
    out.insert("code".into(), json!(code));
    out.insert("message".into(), Value::String(message));
    if let Some(data) = error.get("data") {
        if policy == ErrorData::Pass || SPEC_DATA_CODES.contains(&code) {
            out.insert("data".into(), data.clone());
        }
    }
    Value::Object(out)
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

    #[test]
    fn an_upstream_error_is_bounded_for_the_client() {
        let e = json!({"code": -32000, "message": "bad\n\u{1b}[31mthing", "data": {"path": "/etc/secret"}, "extra": 1});
        assert_eq!(
            client_error(&e, ErrorData::Drop),
            json!({"code": -32000, "message": "bad\\u{a}\\u{1b}[31mthing"})
        );
        assert_eq!(
            client_error(&e, ErrorData::Pass),
            json!({"code": -32000, "message": "bad\\u{a}\\u{1b}[31mthing", "data": {"path": "/etc/secret"}})
        );
        let url = json!({"code": -32042, "message": "m", "data": {"elicitations": []}});
        assert_eq!(client_error(&url, ErrorData::Drop), url);
        let missing = json!({"code": -32021, "message": "m", "data": {"requiredCapabilities": {"sampling": {}}}});
        assert_eq!(client_error(&missing, ErrorData::Drop), missing);
        let huge = json!({"code": 1, "message": "x".repeat(1_000_000)});
        let shown = client_error(&huge, ErrorData::Drop)["message"]
            .as_str()
            .unwrap()
            .to_owned();
        // At most 1,024 characters, the mark included (E3).
        assert_eq!(shown, format!("{}…", "x".repeat(1023)));
        let exact = json!({"code": 1, "message": "x".repeat(1024)});
        assert_eq!(
            client_error(&exact, ErrorData::Drop)["message"],
            json!("x".repeat(1024))
        );
        assert_eq!(
            client_error(&json!({"code": "nope", "message": 5}), ErrorData::Drop),
            json!({"code": -32603, "message": "5"})
        );
        assert_eq!(
            client_error(&json!({}), ErrorData::Drop),
            json!({"code": -32603, "message": ""})
        );
    }

    #[test]
    fn upstream_bodies_keep_results_and_say_the_whole_error() {
        let (body, whole) = upstream_body(
            json!({"id": 1, "result": {"a": 1}}),
            ErrorData::Drop,
            "u",
            "m",
        );
        assert_eq!((body, whole), (Ok(json!({"a": 1})), None));
        let (body, whole) = upstream_body(
            json!({"id": 1, "error": {"code": -32000, "message": "m", "data": "secret"}}),
            ErrorData::Drop,
            "u",
            "m",
        );
        assert_eq!(body, Err(json!({"code": -32000, "message": "m"})));
        assert_eq!(
            whole.as_deref(),
            Some(r#"{"code":-32000,"message":"m","data":"secret"}"#)
        );
    }
}
