//! The client's revision for one request, made once where the request comes in
//! ([`Revision::take`]) and carried along the call path, which asks it instead of
//! branching on the revision itself.
//!
//! Each hook is one decision the 2026-07-28 revision changes; an older client's
//! request (no envelope) takes the older revision's side of each:
//! - at the edge: [`Revision::take`] (the envelope out of `_meta`), then
//!   what only the revision has (`requests.rs`: removed methods,
//!   `server/discover`, `subscriptions/listen`), and [`Revision::stamp`]
//!   (`resultType` and a list's cache hints) on the way out;
//! - what the client can take: [`Revision::capabilities`], [`Revision::can`],
//!   [`Revision::log_level`], [`Revision::can_ask_after_run`];
//! - the request's state: [`Revision::open_state`] (the `requestState` it brought
//!   back), [`Revision::approval_round`] (the gateway's own question as an input
//!   round), [`Revision::binds_call`] (what a call's state is bound to),
//!   [`Revision::flow_trail`] (where the caller's flow trail lives);
//! - the upstream's hop: [`Revision::speaks_2026_to`], [`Revision::for_upstream`]
//!   (a retry's answers and the upstream's own state), [`Revision::bridges`]
//!   (an older client of a 2026-07-28 upstream, for whom the gateway makes the
//!   revision's moves: [`Revision::removed_upstream`], and the input rounds of
//!   `input.rs`). What the upstream is then sent over the connection the request
//!   takes (the envelope, liveness, subscriptions) is that connection's own
//!   context, `crate::upstream::UpstreamRevision`.

use super::envelope::{take_envelope, Envelope};
use super::input;
use super::results::approval_required;
use super::seal::{unix_now, Binding, Sealed, StateKey};
use super::wire::APPROVAL_KEY;
use crate::gateway::client_session::ClientSession;
use crate::upstream::Upstream;
use serde_json::{json, Value};
use std::sync::Arc;
use warden_core::Caller;

/// The revision a request speaks: 2026-07-28 with its envelope, or an older one.
#[derive(Debug, Clone, Default)]
pub struct Revision(Option<Arc<Envelope>>);

/// Where a request's flow trail lives ([`Revision::flow_trail`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowTrail {
    /// A 2026-07-28 request has no session: its caller's trail is remembered
    /// by the gateway and sealed in the context handed back with the result.
    Sealed,
    /// An older request's trail is kept on its session.
    Session,
}

/// How a 2026-07-28 call's approval question stands ([`Revision::approval_round`]).
pub enum ApprovalRound {
    /// The client's retry answered it: approved or not.
    Answered(bool),
    /// Not asked yet: the `InputRequiredResult` that asks it.
    Ask(Value),
}

impl Revision {
    /// A request of an older revision (no envelope).
    pub fn older() -> Revision {
        Revision(None)
    }

    /// Takes the envelope out of a request's `_meta`: a request without one is
    /// of an older revision. `Err`: the JSON-RPC error object a faulty envelope
    /// is answered with.
    pub fn take(params: &mut Option<Value>) -> Result<Revision, Value> {
        Ok(Revision(take_envelope(params)?.map(Arc::new)))
    }

    /// Whether the request speaks 2026-07-28.
    pub fn is_2026(&self) -> bool {
        self.0.is_some()
    }

    /// The request's envelope, when it speaks 2026-07-28.
    pub fn envelope(&self) -> Option<&Envelope> {
        self.0.as_deref()
    }

    /// Stamps a result to `method` on its way out ([`super::stamp_result`]); an
    /// older client's result goes as it is.
    pub fn stamp(&self, method: &str, result: &mut Value) {
        if self.is_2026() {
            super::results::stamp_result(method, result);
        }
    }

    /// The capabilities the client declared: on this request at 2026-07-28,
    /// else at its session's `initialize`.
    pub fn capabilities(&self, session: &ClientSession) -> Option<Value> {
        match self.envelope() {
            Some(e) => Some(e.capabilities.clone()),
            None => session.capabilities(),
        }
    }

    /// Whether the client declared `capability` (on this request, or at its
    /// session's `initialize`).
    pub fn can(&self, capability: &str, session: &ClientSession) -> bool {
        match self.envelope() {
            Some(e) => e.can(capability),
            None => session.client_can(capability),
        }
    }

    /// The log level this request asked for in its envelope, if any.
    pub fn log_level(&self) -> Option<u8> {
        self.envelope().and_then(|e| e.log_level)
    }

    /// Where the request's flow trail lives: sealed per caller at 2026-07-28,
    /// else on its session.
    pub fn flow_trail(&self) -> FlowTrail {
        if self.is_2026() {
            FlowTrail::Sealed
        } else {
            FlowTrail::Session
        }
    }

    /// Whether a guard can ask the client about what a call or read returned:
    /// an older client that declared elicitation is asked over its session; a
    /// 2026-07-28 client cannot be (its call has run, and a retry would run it
    /// again).
    pub fn can_ask_after_run(&self, session: &ClientSession) -> bool {
        !self.is_2026() && session.client_can("elicitation")
    }

    /// What the state a 2026-07-28 call may be handed is bound to: its caller,
    /// tool and arguments. `None`: an older call is handed no state.
    pub fn binds_call(
        &self,
        caller: Option<&Caller>,
        tool: &str,
        arguments: Option<&Value>,
    ) -> Option<Binding> {
        self.is_2026()
            .then(|| Binding::of_call(caller, tool, arguments))
    }

    /// Opens the `requestState` a 2026-07-28 request brought back, as sealed for
    /// `binding`: `Ok(None)` when it brought none (or the request is older);
    /// `Err` (the JSON-RPC error to answer with) when this gateway did not seal
    /// it for this call, or it expired.
    pub fn open_state(&self, key: &StateKey, binding: &Binding) -> Result<Option<Sealed>, Value> {
        match self.envelope() {
            Some(e) => input::open_state(key, e, binding),
            None => Ok(None),
        }
    }

    /// Whether the client is of an older revision and `up` speaks 2026-07-28 to
    /// it: the gateway then makes the revision's moves for the client (input
    /// rounds it answers by asking the client, removed methods done the
    /// revision's way).
    pub fn bridges(&self, up: &Upstream) -> bool {
        !self.is_2026() && up.revision_for(true).is_2026()
    }

    /// Whether this request goes to `up` at 2026-07-28: the upstream speaks it,
    /// and the client does too or `up` has no older-revision session for it.
    pub fn speaks_2026_to(&self, up: &Upstream) -> bool {
        up.revision_for(!self.is_2026()).is_2026()
    }

    /// What an older client asks of a 2026-07-28 upstream by a method that
    /// revision removed, done the revision's way: a resource subscription rides
    /// the gateway's own subscription stream (the log level: `log_level.rs`).
    /// `None`: the request is relayed as it is.
    pub async fn removed_upstream(
        &self,
        up: &Upstream,
        method: &str,
        params: Option<&Value>,
    ) -> Option<Result<Value, Value>> {
        if !self.bridges(up) {
            return None;
        }
        match method {
            "resources/subscribe" | "resources/unsubscribe" => {
                let Some(uri) = params.and_then(|p| p.get("uri")).and_then(Value::as_str) else {
                    return Some(Err(json!({"code": crate::jsonrpc::INVALID_PARAMS,
                        "message": crate::texts::invalid_param("uri")})));
                };
                up.subscribe_resource(uri, method == "resources/subscribe")
                    .await;
                Some(Ok(json!({})))
            }
            _ => None,
        }
    }

    /// The params of a request as `up` takes them: when the request goes to it
    /// at 2026-07-28, with the client's answers (but those to the gateway's own
    /// questions) and the upstream's own state the sealed state holds for it.
    pub fn for_upstream(&self, up: &Upstream, params: &mut Value, sealed: Option<&Sealed>) {
        if self.speaks_2026_to(up) {
            input::add_retry(params, self.envelope(), sealed, &up.name);
        }
    }

    /// The gateway's own approval question to a 2026-07-28 client, as an input
    /// round: answered by the retry that brought the state sealed for it, or
    /// asked (`question` makes the elicitation's params; sent in form mode) with a state
    /// sealed for `binding`. `None`: not a 2026-07-28 call (an older client is
    /// asked over its session).
    pub fn approval_round(
        &self,
        binding: Option<&Binding>,
        sealed: Option<&Sealed>,
        key: &StateKey,
        question: impl FnOnce() -> Value,
    ) -> Option<ApprovalRound> {
        let (e, binding) = (self.envelope()?, binding?);
        let answered = sealed
            .and(e.input_responses.as_ref())
            .and_then(|r| r.get(APPROVAL_KEY));
        if let Some(answer) = answered {
            let approved = answer.get("action").and_then(Value::as_str) == Some("accept")
                && answer.pointer("/content/approve") == Some(&Value::Bool(true));
            return Some(ApprovalRound::Answered(approved));
        }
        let mut question = question();
        question["mode"] = json!("form");
        let state = key.seal(binding, unix_now());
        Some(ApprovalRound::Ask(approval_required(question, state)))
    }
}
