//! Input rounds with an upstream that speaks 2026-07-28.
//!
//! Such an upstream asks for input (elicitation, sampling, roots) by answering a
//! request with an `InputRequiredResult`: `inputRequests` by key, and an opaque
//! `requestState` of its own that must come back with the answers. The gateway
//! stands between, and what it does depends on its client:
//! - a 2026-07-28 client gets the result with the same input requests, but the
//!   upstream's state travels sealed inside the gateway's own state, bound to the
//!   caller, the request and the upstream ([`seal_for_client`]): the client can
//!   neither read it nor replay it under another caller, tool or arguments. Its
//!   retry is opened ([`open_state`]) and the upstream gets its state back beside
//!   the client's answers ([`add_retry`]).
//! - a client of an older revision cannot retry: the gateway puts each input
//!   request to it as the server-to-client request it stands for, as far as the
//!   client declared it can take it ([`ask_client`]), and sends the request again
//!   with the answers ([`next_round`]), up to [`MAX_ROUNDS`] times.

use super::envelope::Envelope;
use super::seal::{unix_now, Binding, Sealed, StateKey};
use super::wire::{input_capability, APPROVAL_KEY, SERVER_INFO_KEY};
use crate::gateway::client_session::{CallKey, ClientSession, Sessions};
use crate::gateway::relay::{self, FromClient};
use crate::texts;
use crate::upstream::{CallError, Upstream};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// Input rounds one request of an older client may take before the gateway
/// stops asking and fails it: an upstream that never stops asking is broken.
pub const MAX_ROUNDS: usize = 8;

/// Whether a result is an `InputRequiredResult`.
pub fn is_input_required(result: &Value) -> bool {
    result.get("resultType").and_then(Value::as_str) == Some("input_required")
}

/// Opens the state a 2026-07-28 request brought back: `Ok(None)` when it brought
/// none; `Err` (the JSON-RPC error to answer with) when it is not a state this
/// gateway sealed for this caller and request, or it expired.
pub fn open_state(
    key: &StateKey,
    envelope: &Envelope,
    binding: &Binding,
) -> Result<Option<Sealed>, Value> {
    let Some(token) = envelope.request_state.as_deref() else {
        return Ok(None);
    };
    match key.open_with(token, binding, unix_now()) {
        Some(sealed) => Ok(Some(sealed)),
        None => Err(json!({"code": crate::jsonrpc::INVALID_PARAMS,
            "message": texts::REQUEST_STATE_REFUSED})),
    }
}

/// Whether a sealed state records an approval already given for its call.
pub fn approved(sealed: Option<&Sealed>) -> bool {
    sealed.is_some_and(|s| s.get("ok") == Some(&Value::Bool(true)))
}

/// The params of a retried request as its 2026-07-28 upstream takes them: the
/// client's answers (but those to the gateway's own questions), and the
/// upstream's own state when the sealed state holds one for this upstream.
pub fn add_retry(
    params: &mut Value,
    envelope: Option<&Envelope>,
    sealed: Option<&Sealed>,
    upstream: &str,
) {
    let Some(obj) = params.as_object_mut() else {
        return;
    };
    if let Some(responses) = envelope.and_then(|e| e.input_responses.as_ref()) {
        let theirs: Map<String, Value> = responses
            .iter()
            .filter(|(k, _)| k.as_str() != APPROVAL_KEY)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !theirs.is_empty() {
            obj.insert("inputResponses".into(), Value::Object(theirs));
        }
    }
    let state = sealed
        .filter(|s| s.get("up").and_then(Value::as_str) == Some(upstream))
        .and_then(|s| s.get("u"));
    if let Some(state) = state {
        obj.insert("requestState".into(), state.clone());
    }
}

/// Makes an upstream's `InputRequiredResult` one for a 2026-07-28 client: the
/// input requests unchanged, the upstream's state sealed inside the gateway's,
/// with whether the call was approved (so the retry is not asked again).
pub fn seal_for_client(
    result: &mut Value,
    key: &StateKey,
    binding: &Binding,
    upstream: &str,
    approved: bool,
) {
    let Some(obj) = result.as_object_mut() else {
        return;
    };
    let mut extra = Sealed::new();
    extra.insert("up".into(), json!(upstream));
    if let Some(state) = obj.shift_remove("requestState") {
        extra.insert("u".into(), state);
    }
    if approved {
        extra.insert("ok".into(), Value::Bool(true));
    }
    let state = key.seal_with(binding, unix_now(), extra);
    obj.insert("requestState".into(), Value::String(state));
}

/// Adds `key: value` to the state an `InputRequiredResult` for a 2026-07-28
/// client carries (sealed by this gateway for `binding`): sealed again with it.
/// A result without such a state is left as it is.
pub fn add_to_state(result: &mut Value, key: &StateKey, binding: &Binding, extra: (&str, Value)) {
    let now = unix_now();
    let Some(token) = result.get("requestState").and_then(Value::as_str) else {
        return;
    };
    let Some(mut sealed) = key.open_with(token, binding, now) else {
        return;
    };
    sealed.insert(extra.0.to_owned(), extra.1);
    result["requestState"] = Value::String(key.seal_with(binding, now, sealed));
}

/// What an older client answered to an upstream's input requests.
pub struct Answers {
    pub responses: Map<String, Value>,
    /// The upstream's own state, to send back with them.
    pub state: Option<Value>,
}

/// Puts each of an `InputRequiredResult`'s input requests to a client of an
/// older revision as the request it stands for. A request the client did not
/// declare it can take, or one it answers with an error, gets no answer (the
/// upstream asks again or fails the call); `Err` says why the round cannot be
/// made at all.
pub async fn ask_client(
    session: &ClientSession,
    sessions: &Sessions,
    call: Option<CallKey>,
    result: &Value,
    timeout: Duration,
) -> Result<Answers, &'static str> {
    let Some(requests) = result.get("inputRequests").and_then(Value::as_object) else {
        return Err(texts::INPUT_REQUESTS_MISSING);
    };
    let mut responses = Map::new();
    for (key, request) in requests {
        let method = request.get("method").and_then(Value::as_str).unwrap_or("");
        let can = input_capability(method).is_some_and(|c| session.client_can(c));
        if !can {
            tracing::info!(method = %crate::logged::logged(method), "an upstream's input request the client cannot take; left unanswered");
            continue;
        }
        let id = sessions.next_request_id();
        let params = as_older_request(method, request.get("params"), &id);
        let answer = session.ask(call.clone(), id, method, params, timeout).await;
        match answer.as_ref().and_then(|a| a.get("result")) {
            Some(r) => {
                responses.insert(key.clone(), r.clone());
            }
            None => {
                let refusal = answer
                    .as_ref()
                    .and_then(|a| a.get("error"))
                    .map(Value::to_string)
                    .unwrap_or_default();
                tracing::info!(method = %crate::logged::logged(method), refusal = %crate::logged::logged(refusal), "the client did not answer an upstream's input request")
            }
        }
    }
    if responses.is_empty() {
        return Err(texts::CLIENT_DID_NOT_ANSWER);
    }
    Ok(Answers {
        responses,
        state: result.get("requestState").cloned(),
    })
}

/// An input request's params as a client of an older revision takes them. A
/// URL-mode elicitation carries an `elicitationId` up to 2025-11-25 (required
/// there; 2026-07-28 dropped it): one is made up from the gateway's own id for
/// the request, unique in the gateway, where the upstream gave none.
fn as_older_request(method: &str, params: Option<&Value>, id: &Value) -> Value {
    let mut params = params.cloned().unwrap_or_else(|| json!({}));
    if method == "elicitation/create" && params.get("mode").and_then(Value::as_str) == Some("url") {
        if let Some(p) = params.as_object_mut() {
            if !p.contains_key("elicitationId") {
                let id = id.as_str().map_or_else(|| id.to_string(), str::to_owned);
                p.insert("elicitationId".into(), Value::String(id));
            }
        }
    }
    params
}

/// The params of the next round: the request as first sent, with the answers
/// and the upstream's state.
pub fn next_round(params: &Value, answers: Answers) -> Value {
    let mut next = params.clone();
    if let Some(obj) = next.as_object_mut() {
        obj.insert("inputResponses".into(), Value::Object(answers.responses));
        match answers.state {
            Some(state) => obj.insert("requestState".into(), state),
            None => obj.shift_remove("requestState"),
        };
    }
    next
}

/// A request relayed to an upstream, as its input rounds need it.
pub struct Rounds<'a> {
    pub up: &'a Upstream,
    pub session: &'a ClientSession,
    pub sessions: &'a Sessions,
    pub call: Option<CallKey>,
    pub method: &'a str,
    /// The params as first sent upstream: kept for an older client's next rounds
    /// (only when the upstream speaks 2026-07-28 and the client does not).
    pub params: Option<Value>,
    /// The capabilities the client declared, for the envelope of each round.
    pub capabilities: Option<Value>,
    /// For a 2026-07-28 client: what its state is bound to, and the key.
    pub binding: Option<&'a Binding>,
    pub key: &'a StateKey,
    /// The call was approved: a retry need not be asked again.
    pub approved: bool,
    /// How long the client has to answer one input request.
    pub timeout: Duration,
}

impl Rounds<'_> {
    /// The upstream's answer to the request, as its client takes it: an
    /// `InputRequiredResult` sealed for a 2026-07-28 client, or, for an older
    /// client, the input rounds made with it until the upstream's result is
    /// complete.
    pub async fn finish(self, first: Result<Value, CallError>) -> Result<Value, CallError> {
        let mut response = first?;
        for _ in 0..MAX_ROUNDS {
            let asked = response.get("result").is_some_and(is_input_required);
            if !asked {
                break;
            }
            if let Some(binding) = self.binding {
                if let Some(result) = response.get_mut("result") {
                    without_server_info(result);
                    seal_for_client(result, self.key, binding, &self.up.name, self.approved);
                }
                return Ok(response);
            }
            let Some(params) = &self.params else {
                return Err(CallError::Input(texts::INPUT_NOT_BRIDGEABLE));
            };
            let answers = ask_client(
                self.session,
                self.sessions,
                self.call.clone(),
                &response["result"],
                self.timeout,
            )
            .await
            .map_err(CallError::Input)?;
            let next = next_round(params, answers);
            // Only an older client's rounds are made here (a 2026-07-28 client
            // got its InputRequiredResult above).
            let from = FromClient {
                older: true,
                log_level: None,
                capabilities: self.capabilities.as_ref(),
            };
            // Each round presents the caller's credential (G8), as the first did.
            let caller = self.session.caller();
            let subject = self.session.subject_token();
            let credential = match self
                .up
                .credentials
                .for_caller(caller.as_deref(), subject.as_deref())
                .await
            {
                Ok(c) => c.map(|c| c.token),
                Err(why) => {
                    tracing::error!(upstream = %self.up.name, "no credential for an input round: {why}");
                    return Err(CallError::Gone);
                }
            };
            let mut p = relay::start(
                self.up,
                self.session,
                self.call.clone(),
                self.method,
                next,
                from,
                credential,
            )
            .await?;
            response = relay::wait(self.session, &mut p).await?;
        }
        let older = self.binding.is_none();
        match response.get_mut("result") {
            Some(r) if is_input_required(r) => Err(CallError::Input(texts::INPUT_ROUNDS_EXHAUSTED)),
            Some(r) => {
                without_server_info(r);
                if older {
                    for_older_client(r);
                }
                Ok(response)
            }
            None => Ok(response),
        }
    }
}

/// A result without the upstream's `serverInfo` in its `_meta`: on the client's
/// hop the server is the gateway (its own is in `server/discover`).
pub fn without_server_info(result: &mut Value) {
    let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) else {
        return;
    };
    meta.shift_remove(SERVER_INFO_KEY);
    if meta.is_empty() {
        if let Some(obj) = result.as_object_mut() {
            obj.shift_remove("_meta");
        }
    }
}

/// A complete result for a client of an older revision: `resultType` belongs to
/// the 2026-07-28 hop and goes.
pub fn for_older_client(result: &mut Value) {
    if let Some(obj) = result.as_object_mut() {
        if obj.get("resultType").and_then(Value::as_str) == Some("complete") {
            obj.shift_remove("resultType");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(state: Option<String>, responses: Option<Value>) -> Envelope {
        Envelope {
            request_state: state,
            input_responses: responses.and_then(|r| r.as_object().cloned()),
            ..Envelope::default()
        }
    }

    #[test]
    fn an_upstreams_state_travels_sealed_and_comes_back_only_to_it() {
        let key = StateKey::random();
        let b = Binding::new("alice", "fx.ask", &Map::new());
        let mut result = json!({"resultType": "input_required",
            "inputRequests": {"q": {"method": "elicitation/create", "params": {}}},
            "requestState": "upstream-secret"});
        seal_for_client(&mut result, &key, &b, "fx", true);
        let token = result["requestState"].as_str().unwrap().to_owned();
        assert!(!token.contains("upstream-secret"));
        assert_eq!(result["inputRequests"]["q"]["method"], "elicitation/create");

        let e = envelope(
            Some(token.clone()),
            Some(json!({"q": {"action": "accept"}, "warden/approval": {"action": "accept"}})),
        );
        let sealed = open_state(&key, &e, &b).unwrap();
        assert!(approved(sealed.as_ref()));
        // Something added later travels with what was sealed first.
        let mut again = result.clone();
        add_to_state(&mut again, &key, &b, ("q", json!("credit")));
        let e2 = envelope(again["requestState"].as_str().map(str::to_owned), None);
        let resealed = open_state(&key, &e2, &b).unwrap().unwrap();
        assert_eq!(resealed["q"], "credit");
        assert_eq!(resealed["u"], "upstream-secret");
        assert!(approved(Some(&resealed)));
        let mut params = json!({"name": "ask", "arguments": {}});
        add_retry(&mut params, Some(&e), sealed.as_ref(), "fx");
        assert_eq!(
            params,
            json!({"name": "ask", "arguments": {}, "inputResponses": {"q": {"action": "accept"}},
                "requestState": "upstream-secret"})
        );
        // Another upstream never gets it.
        let mut other = json!({"name": "ask"});
        add_retry(&mut other, Some(&e), sealed.as_ref(), "gx");
        assert!(other.get("requestState").is_none());

        // Another caller, another tool, a changed byte: refused, not ignored.
        for (binding, token) in [
            (Binding::new("bob", "fx.ask", &Map::new()), token.clone()),
            (
                Binding::new("alice", "fx.other", &Map::new()),
                token.clone(),
            ),
            (b.clone(), format!("{token}-TAMPERED")),
        ] {
            let e = envelope(Some(token), None);
            assert_eq!(
                open_state(&key, &e, &binding).unwrap_err(),
                json!({"code": -32602, "message": texts::REQUEST_STATE_REFUSED})
            );
        }
        assert_eq!(open_state(&key, &envelope(None, None), &b).unwrap(), None);
    }

    #[test]
    fn a_url_elicitation_reaches_an_older_client_with_an_elicitation_id() {
        let id = json!("warden-7");
        let url = json!({"mode": "url", "message": "Sign in", "url": "https://example.com/"});
        assert_eq!(
            as_older_request("elicitation/create", Some(&url), &id),
            json!({"mode": "url", "message": "Sign in", "url": "https://example.com/",
                "elicitationId": "warden-7"})
        );
        // The upstream's own id is kept; form mode and other requests are left alone.
        let own = json!({"mode": "url", "message": "m", "url": "u", "elicitationId": "e1"});
        assert_eq!(as_older_request("elicitation/create", Some(&own), &id), own);
        let form = json!({"mode": "form", "message": "m", "requestedSchema": {}});
        assert_eq!(
            as_older_request("elicitation/create", Some(&form), &id),
            form
        );
        let bare = json!({"message": "m", "requestedSchema": {}});
        assert_eq!(
            as_older_request("elicitation/create", Some(&bare), &id),
            bare
        );
        assert_eq!(as_older_request("roots/list", None, &id), json!({}));
    }

    #[test]
    fn an_older_clients_next_round_carries_the_answers() {
        let first = json!({"name": "ask", "arguments": {"x": 1}});
        let answers = Answers {
            responses: json!({"q": {"action": "accept"}})
                .as_object()
                .cloned()
                .unwrap(),
            state: Some(json!("s1")),
        };
        assert_eq!(
            next_round(&first, answers),
            json!({"name": "ask", "arguments": {"x": 1}, "inputResponses": {"q": {"action": "accept"}},
                "requestState": "s1"})
        );
        let mut done = json!({"content": [], "resultType": "complete"});
        for_older_client(&mut done);
        assert_eq!(done, json!({"content": []}));
        let mut r =
            json!({"content": [], "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "up"}}});
        without_server_info(&mut r);
        assert_eq!(r, json!({"content": []}));
        let mut r =
            json!({"_meta": {"io.modelcontextprotocol/serverInfo": {}, "progressToken": 1}});
        without_server_info(&mut r);
        assert_eq!(r, json!({"_meta": {"progressToken": 1}}));
        assert!(is_input_required(&json!({"resultType": "input_required"})));
        assert!(!is_input_required(&json!({"resultType": "complete"})));
    }
}
