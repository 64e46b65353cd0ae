//! A `tools/call`, start to finish, and nothing else:
//!
//! begin → grant → pipeline → prepare → guards (flow rules, quotas, approval,
//! before hooks, ledger claim) → relay → settle.
//!
//! This file holds the call's context (what [`Calls`] owns, a call `Accepted`
//! and [`Relayed`]) and the order of its phases ([`Calls::begin`]); the verdict
//! (judge, refuse, accept, prepare) is `verdict.rs`'s.
//!
//! What must keep arrival order (the pipeline, queueing the call upstream) runs
//! in [`Calls::begin`] before the front reads its next message; waiting for the
//! upstream, and guards that may wait for a human or a webhook, run in the future
//! it returns. Every exit goes through [`Settle::settle`] exactly once, a call
//! refused before it began too ([`edge`], T6); only what a virtual server
//! answers itself is no call's end (V4, V7).

mod content;
mod edge;
mod guards;
mod keys;
pub mod offline;
mod reads;
mod relaying;
mod routed;
mod scope;
mod verdict;

pub use edge::Early;
pub use reads::Read;

use super::client_session::{CallKey, ClientSession, Sessions};
use super::ledger::LedgerKey;
use super::policy::Policy;
use super::quota::Quotas;
use super::relay::Pending;
use super::rev2026::{self, Binding, ParkedCalls, Revision, Sealed};
use super::servers::Route;
use super::settle::{Body, CallRecord, Decision, End, Settle};
use super::upstream_set::Upstreams;
use crate::otel::{self, Kind, Span};
use crate::upstream::Upstream;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use warden_core::{CallScope, Catalogue};

/// How long a quota credit redeems: as long as the state that carries it opens.
const CREDIT_TTL: Duration = Duration::from_secs(rev2026::STATE_TTL_SECS);

/// A future that ends with a response body (`None`: nothing is due).
pub type Answering = Pin<Box<dyn Future<Output = Option<Body>> + Send>>;

/// How far a call got in its in-order phase.
pub enum Begun {
    /// Answered (or, `None`, nothing is due).
    Done(Option<Body>),
    /// Under way; the future answers it.
    Then(Answering),
}

/// Everything the tool-call path uses.
pub struct Calls {
    /// The configuration's part: read once when a call begins, swapped whole by a reload.
    policy: RwLock<Arc<Policy>>,
    pub settle: Arc<Settle>,
    upstreams: Arc<Upstreams>,
    sessions: Arc<Sessions>,
    /// 2026-07-28 calls waiting for their client's answer to an upstream's request.
    parked: Arc<ParkedCalls<Relayed>>,
    /// Calls waiting for an operator's approval in the console (H6).
    pub inbox: Arc<super::inbox::Inbox>,
}

/// A call accepted by the pipeline, on its way upstream.
struct Accepted {
    /// The policy the call began under; it keeps it to its end.
    policy: Arc<Policy>,
    up: Arc<Upstream>,
    /// The params as they go upstream.
    params: Value,
    record: CallRecord,
    approval: bool,
    /// G6: the constraint an `ask` rule on the arguments puts to the human.
    approval_because: Option<String>,
    /// H6: who the rule, flow rule and guard that ask name to answer.
    approvers: Vec<crate::config::Approver>,
    /// S6: the arguments as the human is shown them, when an `ask` guard
    /// found something in them (redacted).
    approval_shown: Option<Value>,
    /// S6: the labels `label` guards found cause to add from the arguments.
    labels: Vec<String>,
    ledger: Option<LedgerKey>,
    call: Option<CallKey>,
    /// The client's revision for this request (its envelope at 2026-07-28).
    revision: Revision,
    binding: Option<Arc<Binding>>,
    /// A quota applies to the call (Q1).
    limited: bool,
    /// A quota's rate counted the call (now, or before it paused): should it
    /// pause again, its retry is not counted again.
    counted: bool,
    /// Flow policy is on: the call's labels, and a 2026-07-28 client's sealed
    /// flow context from the request's `_meta` (F1-F4).
    flow: Option<(Vec<String>, Option<Value>)>,
    /// What the 2026-07-28 state the call brought back holds.
    sealed: Option<Sealed>,
    /// The guards over its result (S2; `None`: none apply).
    guards: Option<content::ResultGuards>,
    /// What its `when_cel` conditions read beyond caller, tool and arguments
    /// (X1, X8): empty when none reads it.
    scope: Arc<CallScope>,
}

/// A call queued upstream.
pub struct Relayed {
    pending: Pending,
    record: CallRecord,
    /// The upstream round trip's span.
    span: Option<Span>,
    revision: Revision,
    binding: Option<Arc<Binding>>,
    /// For an upstream's input rounds: the params as sent (kept only when an
    /// older client may need rounds), the client's capabilities, and whether the
    /// call was approved.
    params: Option<Value>,
    capabilities: Option<Value>,
    approved: bool,
    /// A quota counted the call: should a 2026-07-28 client be asked for input,
    /// its retry is not counted again (Q3).
    counted: bool,
    /// How long an input round may wait, as the call's policy says.
    approval_timeout: Duration,
    /// The guards over its result (S2; `None`: none apply).
    guards: Option<content::ResultGuards>,
}

impl Calls {
    pub fn new(
        policy: Policy,
        settle: Arc<Settle>,
        upstreams: Arc<Upstreams>,
        sessions: Arc<Sessions>,
        parked: ParkedCalls<Relayed>,
        inbox: super::inbox::Inbox,
    ) -> Calls {
        Calls {
            policy: RwLock::new(Arc::new(policy)),
            settle,
            upstreams,
            sessions,
            parked: Arc::new(parked),
            inbox: Arc::new(inbox),
        }
    }

    /// The policy now: what a call beginning now runs under.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The policy and the catalogue a call beginning now runs under, read together.
    pub fn snapshot(&self) -> (Arc<Policy>, Arc<Catalogue>) {
        let policy = self.policy.read().unwrap_or_else(|e| e.into_inner());
        (policy.clone(), self.upstreams.catalogue())
    }

    /// Puts a reloaded configuration's policy in force for every call that begins
    /// from now on, together with what `install` changes (the catalogue): no
    /// call begins between the two. Calls under way keep what they began with.
    pub fn swap<R>(&self, policy: Arc<Policy>, install: impl FnOnce() -> R) -> R {
        let mut now = self.policy.write().unwrap_or_else(|e| e.into_inner());
        let installed = install();
        *now = policy;
        installed
    }

    /// How long a client has to answer the gateway's (or an upstream's) question.
    pub fn approval_timeout(&self) -> Duration {
        self.policy().approval_timeout
    }

    /// The quotas and their counts (the operator console reads them).
    pub fn quotas(&self) -> Arc<Quotas> {
        self.policy().quotas.clone()
    }

    /// A virtual server's own instructions (V1): the upstreams' are about tools
    /// it may not show.
    pub fn server_instructions(&self, session: &ClientSession) -> Option<String> {
        let policy = self.policy();
        let server = policy.server(session.server()?)?;
        server.instructions.clone()
    }

    /// The key 2026-07-28 states are sealed with.
    pub fn state_key(&self) -> &rev2026::StateKey {
        self.parked.key()
    }

    /// Begins one `tools/call` (`id`: the client's request id, when it has one;
    /// `trace`: the request's span, when traces are on). Each phase that ends the
    /// call settles it: route, reopen its 2026-07-28 state, judge, accept; then
    /// it is queued upstream here, or guarded in the future it returns.
    pub async fn begin(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        id: Option<&Value>,
        mut params: Value,
        revision: Revision,
        trace: Option<&Span>,
    ) -> Begun {
        let started = Instant::now();
        // Read once: the whole call runs under this policy and catalogue,
        // whatever a reload does meanwhile.
        let (policy, catalogue) = self.snapshot();
        // On a virtual server the name is the server's (V2-V4).
        let routed = match session.server() {
            None => None,
            Some(name) => match self
                .route((&policy, &catalogue), session, name, id, &mut params)
                .await
            {
                Route::Answer(result) | Route::Found(result, _) => {
                    return Begun::Done(Some(Ok(result)))
                }
                Route::Real { shown } => Some(Some(shown)),
                Route::Absent => Some(None),
            },
        };
        let call = id.map(crate::jsonrpc::id_key);
        let sealed = match self.reopen(session, &call, &params, &revision).await {
            Ok(sealed) => sealed,
            Err(begun) => return begun,
        };
        let span = trace.map(|t| call_span(t, session, &params));
        let at = (&policy, &catalogue, &routed);
        let judged = match self
            .judge(at, session, params, &revision, span, started)
            .await
        {
            Ok(judged) => judged,
            Err(body) => return Begun::Done(body),
        };
        let accepted = self.accept(&policy, session, judged, (call, revision, sealed), started);
        let accepted = match accepted.await {
            Ok(accepted) => accepted,
            Err(body) => return Begun::Done(body),
        };
        let guarded = !accepted.labels.is_empty()
            || accepted.approval
            || !policy.before_hooks.is_empty()
            || accepted.ledger.is_some()
            || accepted.limited
            || accepted.flow.is_some();
        let (me, session) = (self.clone(), session.clone());
        if guarded {
            return Begun::Then(Box::pin(
                async move { me.guarded(&session, accepted).await },
            ));
        }
        match self.relay(&session, accepted).await {
            Ok(relayed) => Begun::Then(Box::pin(async move { me.answer(&session, relayed).await })),
            Err(body) => Begun::Done(body),
        }
    }

    /// A 2026-07-28 call's state: a retry naming a parked call resumes it
    /// (`Err`: answered already); otherwise what the state it brought holds
    /// (an older call brings none).
    /// A state the gateway did not seal for exactly this call is refused, not
    /// ignored: a client cannot bring another call's answers (T6).
    async fn reopen(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        call: &Option<CallKey>,
        params: &Value,
        revision: &Revision,
    ) -> Result<Option<Sealed>, Begun> {
        let Some(envelope) = revision.envelope() else {
            return Ok(None);
        };
        if let Some(resumed) = self.resume(session, call.clone(), params, envelope).await {
            return Err(resumed);
        }
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let caller = session.caller();
        let binding = Binding::of_call(caller.as_deref(), name, params.get("arguments"));
        let error = match revision.open_state(self.state_key(), &binding) {
            Ok(sealed) => return Ok(sealed),
            Err(error) => error,
        };
        let end = End::Edge {
            decision: Decision::Denied,
            why: "the requestState was not sealed by this gateway for this call".into(),
            body: Some(Err(error)),
        };
        let early = Early::on(session, caller.as_deref(), name, Some(params));
        Err(Begun::Done(self.settle_early(early, end).await))
    }
}

/// The span of one tool call, under its request's.
fn call_span(request: &Span, session: &ClientSession, params: &Value) -> Span {
    let tool = params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let tool = otel::bounded(tool);
    let mut s = request.child(format!("execute_tool {tool}"), Kind::Internal);
    s.set("gen_ai.operation.name", "execute_tool");
    s.set("gen_ai.tool.name", tool);
    if let Some(c) = &session.caller() {
        s.set("warden.caller", otel::bounded(&c.name));
    }
    s
}

/// A span under the call's, when the call has one.
fn child(record: &CallRecord, name: &str, kind: Kind) -> Option<Span> {
    let span = record.span.as_ref()?;
    let span = span.lock().unwrap_or_else(|e| e.into_inner());
    Some(span.child(name, kind))
}
