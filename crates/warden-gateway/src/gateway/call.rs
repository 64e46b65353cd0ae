//! A `tools/call`, start to finish, and nothing else:
//!
//! begin → grant → pipeline → prepare → guards (flow rules, quotas, approval,
//! before hooks, ledger claim) → relay → settle.
//!
//! What must keep arrival order (the pipeline, queueing the call upstream) runs
//! in [`Calls::begin`] before the front reads its next message; waiting for the
//! upstream, and guards that may wait for a human or a webhook, run in the future
//! it returns. Every exit goes through [`Settle::settle`] exactly once.

use super::approval::{self, Approval};
use super::flow::{FlowDecision, Trail, FLOW_META_KEY};
use super::input::{self, Rounds};
use super::ledger::{self, LedgerKey};
use super::policy::Policy;
use super::quota::{Admission, Quotas, CREDIT_KEY};
use super::relay::{self, Pending};
use super::rev2026::{self, Binding, Bridged, Envelope, ParkedCalls, Sealed};
use super::session::{self, CallKey, ClientSession, Sessions};
use super::settle::{Body, CallRecord, Decision, End, Settle};
use super::upstreams::Upstreams;
use crate::logged::logged;
use crate::otel::{self, Kind, Span};
use crate::texts;
use crate::upstream::{CallError, Upstream};
use serde_json::{Map, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use warden_core::hooks::{self, BeforeOutcome, CallContext};
use warden_core::{answer, CallReport, Caller, Catalogue, Forward, Refusal, Verdict};
use warden_store::{Claim, Finish};

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
}

/// What a call brings of the 2026-07-28 revision: its request id, envelope, what
/// its state is bound to, and what the state it brought back holds.
type Revision2026 = (
    Option<CallKey>,
    Option<Arc<Envelope>>,
    Option<Arc<Binding>>,
    Option<Sealed>,
);

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
    ledger: Option<LedgerKey>,
    call: Option<CallKey>,
    envelope: Option<Arc<Envelope>>,
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
}

/// A call queued upstream.
pub struct Relayed {
    pending: Pending,
    record: CallRecord,
    /// The upstream round trip's span.
    span: Option<Span>,
    envelope: Option<Arc<Envelope>>,
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
}

impl Calls {
    pub fn new(
        policy: Policy,
        settle: Arc<Settle>,
        upstreams: Arc<Upstreams>,
        sessions: Arc<Sessions>,
        parked: ParkedCalls<Relayed>,
    ) -> Calls {
        Calls {
            policy: RwLock::new(Arc::new(policy)),
            settle,
            upstreams,
            sessions,
            parked: Arc::new(parked),
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

    /// The key 2026-07-28 states are sealed with.
    pub fn state_key(&self) -> &rev2026::StateKey {
        self.parked.key()
    }

    /// Begins one `tools/call` (`id`: the client's request id, when it has one;
    /// `trace`: the request's span, when traces are on).
    pub async fn begin(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        id: Option<&Value>,
        mut params: Value,
        envelope: Option<Arc<Envelope>>,
        trace: Option<&Span>,
    ) -> Begun {
        let started = Instant::now();
        // Read once: the whole call runs under this policy and catalogue,
        // whatever a reload does meanwhile.
        let (policy, catalogue) = self.snapshot();
        let call = id.map(crate::jsonrpc::id_key);
        let mut sealed = None;
        if let Some(e) = &envelope {
            if let Some(resumed) = self.resume(session, call.clone(), &params, e).await {
                return resumed;
            }
            // A state the gateway did not seal for exactly this call is refused,
            // not ignored: a client cannot bring another call's answers.
            let name = params
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let binding = binding_of(session.caller().as_deref(), name, params.get("arguments"));
            match input::open_state(self.state_key(), e, &binding) {
                Ok(s) => sealed = s,
                Err(error) => return Begun::Done(Some(Err(error))),
            }
        }
        let mut span = trace.map(|t| call_span(t, session, &params));
        // Move the arguments out (no copy); a placeholder keeps their position.
        let arguments = params.get_mut("arguments").map(Value::take);
        let had_arguments = params.get("arguments").is_some();
        // Refused calls are audited with the arguments they carried: kept only when audited.
        let sent = self.settle.audit.on().then(|| match &arguments {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        });
        let name = params.get("name").cloned().unwrap_or(Value::Null);
        let binding = envelope.as_ref().map(|_| {
            Arc::new(binding_of(
                session.caller().as_deref(),
                name.as_str().unwrap_or_default(),
                arguments.as_ref(),
            ))
        });
        let mut check = Map::new();
        check.insert("name".into(), name);
        if let Some(args) = arguments {
            check.insert("arguments".into(), args);
        }
        if let Some(meta) = params.get("_meta") {
            check.insert("_meta".into(), meta.clone());
        }
        let verdict = self
            .check((&policy, &catalogue), session, check, span.as_ref())
            .await;
        if let Some(s) = &mut span {
            if !verdict.report.unknown_keys.is_empty() {
                let keys = verdict.report.unknown_keys.iter();
                s.set(
                    "warden.undeclared_keys",
                    keys.map(|k| otel::bounded(k)).collect::<Vec<_>>(),
                );
            }
        }
        self.settle
            .metrics
            .unknown_keys
            .fetch_add(verdict.report.unknown_keys.len() as u64, Ordering::Relaxed);
        let forward = match verdict.outcome {
            warden_core::Outcome::Forward(f) => f,
            warden_core::Outcome::Answer { answer, refusal } => {
                tracing::info!(caller = %logged(session.caller().as_deref().map_or("", |c| c.name.as_str())), ?refusal, unknown = %logged(verdict.report.unknown_keys.join(", ")), answer = %logged(answer.text()), "call answered by the gateway");
                let tool = params
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let mut record =
                    self.refused_record(session, tool, sent, &verdict.report, refusal, started);
                record.after = policy.after_hooks.clone();
                record.span = span.map(|s| Box::new(Mutex::new(s)));
                let decision = match refusal {
                    Refusal::NoToolName | Refusal::InvalidArguments => Decision::InvalidArguments,
                    Refusal::UnknownTool => Decision::UnknownTool,
                    Refusal::GrantFailure => Decision::GrantFailure,
                    Refusal::ArgumentRule => Decision::Denied,
                };
                let end = End::Pipeline { decision, answer };
                return Begun::Done(self.settle.settle(&record, end).await);
            }
        };
        if let Some(s) = &mut span {
            s.set("warden.upstream", forward.tool.upstream.clone());
        }
        if !verdict.report.unknown_keys.is_empty() {
            tracing::info!(tool = %logged(&forward.tool.name), mode = ?verdict.report.unknown_mode, keys = %logged(verdict.report.unknown_keys.join(", ")), "undeclared argument keys");
        }
        let accepted = self.prepare(
            &policy,
            session,
            params,
            had_arguments,
            forward,
            &verdict.report,
            (call, envelope, binding, sealed),
            started,
        );
        let mut accepted = match accepted {
            Ok(a) => a,
            Err(tool) => {
                let mut record = CallRecord::new(started, &tool);
                record.after = policy.after_hooks.clone();
                record.span = span.map(|s| Box::new(Mutex::new(s)));
                let end = End::Failed {
                    decision: Decision::Allowed,
                    why: "the tool's upstream is not configured".into(),
                };
                return Begun::Done(self.settle.settle(&record, end).await);
            }
        };
        accepted.record.span = span.map(|s| Box::new(Mutex::new(s)));
        let guarded = accepted.approval
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

    /// The grant, then the pipeline (G, N, R, A).
    async fn check(
        &self,
        (policy, catalogue): (&Policy, &Catalogue),
        session: &ClientSession,
        check: Map<String, Value>,
        span: Option<&Span>,
    ) -> Verdict {
        let name = check.get("name").and_then(Value::as_str);
        let caller = session.caller();
        let caller = caller.as_deref();
        match policy.grant.for_call(caller, name, span).await {
            Some(grant) => policy.pipeline.check_with(
                &*grant,
                catalogue,
                &session.warn,
                caller,
                Value::Object(check),
            ),
            None => policy
                .pipeline
                .check(catalogue, &session.warn, caller, Value::Object(check)),
        }
    }

    /// What a call the pipeline refused leaves behind: its audit record, and for a
    /// failed grant source the context the after hooks hear of it with (G4).
    fn refused_record(
        &self,
        session: &ClientSession,
        tool: &str,
        sent: Option<Map<String, Value>>,
        report: &CallReport,
        refusal: Refusal,
        started: Instant,
    ) -> CallRecord {
        let mut record = CallRecord::new(started, tool);
        record.audit = sent.map(|args| {
            self.settle.audit.template(
                &session.label,
                session.caller().as_deref(),
                tool,
                None,
                &args,
                report,
                None,
            )
        });
        if refusal == Refusal::GrantFailure {
            record.ctx = Some(Arc::new(CallContext {
                caller: session.caller().map(|c| Caller::clone(&c)),
                tool: tool.to_owned(),
                upstream: String::new(),
                arguments: Map::new(),
                meta: Default::default(),
                reason: None,
            }));
        }
        record
    }

    /// Turns the pipeline's verdict into the request that goes upstream and the
    /// record its end needs. `Err`: the tool's upstream is gone from the config (its name).
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &self,
        policy: &Arc<Policy>,
        session: &Arc<ClientSession>,
        mut params: Value,
        had_arguments: bool,
        forward: Forward,
        report: &CallReport,
        (call, envelope, binding, sealed): Revision2026,
        started: Instant,
    ) -> Result<Accepted, String> {
        let tool = forward.tool.clone();
        let (Some(up), Some(obj)) = (
            self.upstreams.by_name(&tool.upstream),
            params.as_object_mut(),
        ) else {
            return Err(tool.name.clone());
        };
        let caller = session.caller();
        let caller = caller.as_deref();
        let ledger = self.settle.ledger.key_of(
            caller.map(|c| c.name.as_str()).unwrap_or_default(),
            &forward.meta,
        );
        let mut record = CallRecord::new(started, &tool.name);
        record.after = policy.after_hooks.clone();
        record.audit = self.settle.audit.on().then(|| {
            self.settle.audit.template(
                &session.label,
                caller,
                &tool.name,
                Some(&tool.upstream),
                &forward.arguments,
                report,
                ledger.as_ref().map(|(_, k)| k.clone()),
            )
        });
        let limited = policy.quotas.any_for(caller, &tool.name);
        // The flow context is the gateway's: it never goes upstream.
        let context = obj
            .get_mut("_meta")
            .and_then(Value::as_object_mut)
            .and_then(|m| m.shift_remove(FLOW_META_KEY));
        if obj
            .get("_meta")
            .and_then(Value::as_object)
            .is_some_and(|m| m.is_empty())
            && context.is_some()
        {
            obj.shift_remove("_meta");
        }
        let flow = policy.flows.on().then(|| {
            let labels = policy.flows.labels_of(&tool.upstream, &tool.upstream_name);
            (labels, context)
        });
        let guarded = forward.needs_approval
            || !policy.before_hooks.is_empty()
            || ledger.is_some()
            || limited
            || flow.is_some();
        // Hooks see the call as it goes upstream; built only when someone will look.
        record.ctx = (guarded || !record.after.is_empty()).then(|| {
            Arc::new(CallContext {
                caller: session.caller().map(|c| Caller::clone(&c)),
                tool: tool.name.clone(),
                upstream: tool.upstream.clone(),
                arguments: forward.arguments.clone(),
                meta: forward.meta.clone(),
                reason: report.reason.clone(),
            })
        });
        obj.insert("name".into(), Value::String(tool.upstream_name.clone()));
        if had_arguments || forward.rewritten {
            obj.insert("arguments".into(), Value::Object(forward.arguments));
        }
        record.token = self
            .sessions
            .map_progress_token(session, call.as_ref(), obj);
        let mut params = Value::Object(std::mem::take(obj));
        if up.is_stateless() {
            input::add_retry(&mut params, envelope.as_deref(), sealed.as_ref(), &up.name);
        }
        Ok(Accepted {
            policy: policy.clone(),
            up,
            params,
            record,
            approval: forward.needs_approval,
            approval_because: forward.approval_because,
            ledger,
            call,
            envelope,
            binding,
            limited,
            counted: false,
            flow,
            sealed,
        })
    }

    /// The guards, and for a 2026-07-28 client under flow policy its sealed flow
    /// context in the result's `_meta` (F3).
    async fn guarded(&self, session: &Arc<ClientSession>, a: Accepted) -> Option<Body> {
        let mut context = None;
        let mut body = self.guard(session, a, &mut context).await;
        if let (Some(Ok(Value::Object(result))), Some(sealed)) = (&mut body, context) {
            let meta = result
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert(FLOW_META_KEY.into(), Value::String(sealed));
            }
        }
        body
    }

    /// Flow rules and quotas, approval, before hooks, then the ledger (F2, Q3,
    /// H1-H5, I1): only then upstream. `context`: the sealed flow context to
    /// hand a 2026-07-28 client back.
    async fn guard(
        &self,
        session: &Arc<ClientSession>,
        mut a: Accepted,
        context: &mut Option<String>,
    ) -> Option<Body> {
        let policy = a.policy.clone();
        let Some(ctx) = a.record.ctx.clone() else {
            let end = End::Failed {
                decision: Decision::Allowed,
                why: "a guarded call has no context".into(),
            };
            return self.settle.settle(&a.record, end).await;
        };
        let refused = |text: &str| End::Refused {
            decision: Decision::Denied,
            text: text.to_owned(),
        };
        // Flow rules first, then quotas: neither asks a human, runs a hook or
        // claims a key for a call it refuses.
        let caller = ctx.caller.as_ref().map_or("", |c| c.name.as_str());
        let stateless = a.envelope.is_some();
        let mut flow_ask = None;
        let mut after: Option<Trail> = None;
        // Where replicas share this session's trail (only a labelled call can be
        // stopped or add to it, so only one reads or writes it).
        let scope = a
            .flow
            .as_ref()
            .filter(|(labels, _)| !labels.is_empty())
            .and_then(|_| policy.flows.shared_scope(stateless, caller, &session.label));
        if let Some((labels, sealed)) = &a.flow {
            let mut trail = if stateless {
                policy
                    .flows
                    .stateless_trail(self.state_key(), caller, sealed.as_ref())
            } else {
                session::lock(&session.flow).clone()
            };
            // The shared store's trail, which no client can drop and every replica reads.
            if let Some(scope) = &scope {
                match policy.flows.shared_trail(scope).await {
                    Ok(shared) => trail.extend(shared),
                    Err(e) => return self.flow_unverifiable(&a.record, &ctx.tool, &e).await,
                }
            }
            if stateless {
                *context = Some(
                    policy
                        .flows
                        .remember_stateless(self.state_key(), caller, &trail),
                );
            }
            if let Some(r) = a.record.audit.as_mut() {
                r.labels = labels.clone();
                r.touched = trail.iter().cloned().collect();
            }
            match policy.flows.decide(&trail, labels) {
                FlowDecision::Pass => {}
                FlowDecision::Ask(reason) => flow_ask = Some(reason),
                FlowDecision::Deny(reason) => {
                    tracing::info!(tool = %logged(&ctx.tool), caller = %logged(caller), touched = %logged(trail.iter().cloned().collect::<Vec<_>>().join(",")), "a flow rule refused the call");
                    let end = End::Policy {
                        decision: Decision::FlowDenied,
                        text: texts::flow_denied(&ctx.tool, &reason),
                        retry_ms: None,
                    };
                    return self.settle.settle(&a.record, end).await;
                }
            }
            let mut t = trail;
            t.extend(labels.iter().cloned());
            after = Some(t);
        }
        if a.limited {
            // A retry of a call that was counted before it paused redeems its credit.
            let credit = a
                .sealed
                .as_ref()
                .and_then(|s| s.get(CREDIT_KEY))
                .and_then(Value::as_str);
            let credited = match credit {
                Some(id) => policy.quotas.redeem_credit(id).await,
                None => false,
            };
            let lease = ledger::lease_for(a.up.timeout_ms());
            let admitted = policy
                .quotas
                .admit(ctx.caller.as_ref(), &ctx.tool, lease, credited);
            match admitted.await {
                Admission::Admitted { slots, counted } => {
                    a.record.slots = slots;
                    a.counted = counted;
                }
                Admission::Refused { text, retry_ms } => {
                    if let (true, Some(id)) = (credited, credit) {
                        // Refused for its concurrency: the credit stands for the next retry.
                        policy.quotas.issue_credit(id, CREDIT_TTL).await;
                    }
                    tracing::info!(tool = %logged(&ctx.tool), caller = %logged(caller), retry_ms, "a quota refused the call");
                    let end = End::Policy {
                        decision: Decision::RateLimited,
                        text,
                        retry_ms: Some(retry_ms),
                    };
                    return self.settle.settle(&a.record, end).await;
                }
            }
        }
        if a.approval || flow_ask.is_some() {
            let mut span = child(&a.record, "warden.approval", Kind::Internal);
            let asked = approval::approve(
                session,
                &self.sessions,
                a.call.clone(),
                approval::Question {
                    ctx: &ctx,
                    because: a.approval_because.as_deref(),
                },
                (
                    a.envelope.as_deref(),
                    a.binding.as_deref(),
                    a.sealed.as_ref(),
                ),
                self.state_key(),
                policy.approval_timeout,
            )
            .await;
            if let Some(s) = &mut span {
                let answer = match &asked {
                    Approval::Approved => "approved",
                    Approval::Refused(_) => "refused",
                    Approval::InputRequired(_) => "input_required",
                };
                s.set("warden.approval", answer);
            }
            drop(span);
            match asked {
                Approval::Approved => {}
                Approval::Refused(text) => {
                    let text = match &flow_ask {
                        Some(reason) => texts::flow_not_approved(&ctx.tool, reason, text),
                        None => text.to_owned(),
                    };
                    return self.settle.settle(&a.record, refused(&text)).await;
                }
                Approval::InputRequired(mut result) => {
                    // Not over: the client asks its user and retries the call;
                    // its place frees now, and a counted call is not counted again.
                    a.record.slots.release().await;
                    if let Some(binding) = a.binding.as_deref() {
                        self.credit(&mut result, binding, a.counted).await;
                    }
                    self.settle
                        .paused(&a.record, Decision::ApprovalRequested)
                        .await;
                    return Some(Ok(result));
                }
            }
        }
        let decided = hooks::run_before_observed(
            &policy.before_hooks,
            &ctx,
            |i| {
                child(&a.record, "warden.hook", Kind::Internal).map(|mut s| {
                    s.set("warden.hook.index", i as i64);
                    s
                })
            },
            |span, decision| {
                if let Some(mut s) = span {
                    match decision {
                        Ok(d) => s.set("warden.hook.decision", hook_decision(d)),
                        Err(_) => s.fail("the hook failed"),
                    }
                }
            },
        );
        let end = match decided.await {
            BeforeOutcome::Pass => None,
            BeforeOutcome::Deny(reason) => Some(refused(reason.as_str())),
            BeforeOutcome::Answer(result) => Some(End::Hook(result)),
            BeforeOutcome::Failed(e) => {
                tracing::error!(tool = %logged(&ctx.tool), "a before hook failed; the tool is not run: {}", logged(&e));
                Some(End::Failed {
                    decision: Decision::Denied,
                    why: format!("before hook failed: {e}"),
                })
            }
        };
        if let Some(end) = end {
            return self.settle.settle(&a.record, end).await;
        }
        // The ledger last: only a call that will run claims its key (I1).
        if let Some(key) = a.ledger.take() {
            let args = Value::Object(ctx.arguments.clone());
            let lease = ledger::lease_for(a.up.timeout_ms());
            let claim = self.settle.ledger.claim(&key, &ctx.tool, &args, lease);
            let mut span = child(&a.record, "warden.ledger", Kind::Internal);
            let claim = claim.await;
            if let Some(s) = &mut span {
                match &claim {
                    Ok(c) => s.set("warden.ledger.claim", claim_name(c)),
                    Err(_) => s.fail("the store is unavailable"),
                }
            }
            drop(span);
            let end = match claim {
                Ok(claim @ (Claim::Run | Claim::TakenOver)) => {
                    if claim == Claim::TakenOver {
                        // The key's holder stopped renewing its lease mid-call (its
                        // gateway died): that attempt goes on the record before this
                        // one runs.
                        tracing::warn!(tool = %ctx.tool, key = %key.1, "an idempotency key's lease ran out mid-call; the key is taken over and the call runs again");
                        self.settle.abandoned(&a.record).await;
                    }
                    // From here on the call's end is the ledger's to record, and
                    // its lease is renewed until then.
                    a.record.ledger = Some(self.settle.ledger.hold(key, lease));
                    None
                }
                Ok(Claim::Replay(result)) => Some(End::Replayed(result)),
                Ok(Claim::Running) => Some(refused(answer::ALREADY_RUNNING)),
                Ok(Claim::Mismatch) => Some(refused(&answer::idempotency_mismatch(&key.1))),
                Err(e) => {
                    // A call that needs the ledger fails closed when the store is unavailable.
                    tracing::error!(tool = %logged(&ctx.tool), "the ledger is unavailable; the call is refused: {}", logged(&e));
                    Some(End::Failed {
                        decision: Decision::Allowed,
                        why: e.to_string(),
                    })
                }
            };
            if let Some(end) = end {
                return self.settle.settle(&a.record, end).await;
            }
        }
        // Let through: from now on the session has touched the call's labels (F4).
        if let (Some((labels, _)), Some(mut after)) = (&a.flow, after) {
            if let Some(scope) = &scope {
                match policy.flows.touch_shared(scope, labels).await {
                    Ok(shared) => after.extend(shared),
                    Err(e) => {
                        // It does not run: its key, if it claimed one, may be used again.
                        if let Some(held) = a.record.ledger.take() {
                            let why = "the flow trail could not be recorded".to_owned();
                            self.settle.ledger.settle(&held, Finish::Failed(why)).await;
                        }
                        return self.flow_unverifiable(&a.record, &ctx.tool, &e).await;
                    }
                }
            }
            if stateless {
                *context = Some(
                    policy
                        .flows
                        .remember_stateless(self.state_key(), caller, &after),
                );
            } else {
                session::lock(&session.flow).extend(labels.iter().cloned());
            }
            if let Some(r) = a.record.audit.as_mut() {
                r.touched = after.into_iter().collect();
            }
        }
        match self.relay(session, a).await {
            Ok(relayed) => self.answer(session, relayed).await,
            Err(body) => body,
        }
    }

    /// A counted 2026-07-28 call handed back to its client (for an approval, or
    /// for an upstream's input request): its state carries a credit, so the
    /// retry is not counted again (Q3).
    async fn credit(&self, result: &mut Value, binding: &Binding, counted: bool) {
        if !counted {
            return;
        }
        let Some(id) = rev2026::park_id() else { return };
        input::add_to_state(
            result,
            self.state_key(),
            binding,
            (CREDIT_KEY, Value::String(id.clone())),
        );
        self.policy().quotas.issue_credit(&id, CREDIT_TTL).await;
    }

    /// A labelled call whose trail the shared store could not read or write:
    /// refused (flows fail closed), with when to retry.
    async fn flow_unverifiable(
        &self,
        record: &CallRecord,
        tool: &str,
        e: &warden_store::StoreError,
    ) -> Option<Body> {
        tracing::error!(tool = %logged(tool), "the store cannot keep a session's flow trail; the call is refused: {}", logged(e));
        let end = End::Policy {
            decision: Decision::FlowDenied,
            text: texts::flow_unverifiable(tool, 1),
            retry_ms: Some(1000),
        };
        self.settle.settle(record, end).await
    }

    /// Queues the call on its upstream.
    async fn relay(
        &self,
        session: &ClientSession,
        mut a: Accepted,
    ) -> Result<Relayed, Option<Body>> {
        let log_level = a.envelope.as_ref().and_then(|e| e.log_level);
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
        let capabilities = match &a.envelope {
            Some(e) => Some(e.capabilities.clone()),
            None => session.capabilities(),
        };
        // An older client's input rounds send the call again: keep it.
        let params = (a.up.is_stateless() && a.envelope.is_none()).then(|| a.params.clone());
        let extras = (log_level, capabilities.as_ref());
        match relay::start(
            &a.up,
            session,
            a.call,
            "tools/call",
            a.params,
            extras,
            credential,
        )
        .await
        {
            Ok(pending) => Ok(Relayed {
                pending,
                span,
                record: a.record,
                envelope: a.envelope,
                binding: a.binding,
                params,
                capabilities,
                approved: a.approval,
                counted: a.counted,
                approval_timeout: a.policy.approval_timeout,
            }),
            Err(e) => Err(self.failed(&a.record, &a.up.name, e).await),
        }
    }

    /// Waits for the upstream's answer and settles the call with it.
    async fn answer(&self, session: &ClientSession, mut r: Relayed) -> Option<Body> {
        let result = match (&r.binding, &r.pending.call) {
            // A 2026-07-28 call: an upstream's request for it pauses the call.
            (Some(_), Some(_)) => {
                match rev2026::wait_bridged(session, &mut r.pending, r.envelope.as_deref()).await {
                    Bridged::Answered(result) => result,
                    Bridged::Asked(their_id, request) => {
                        return self.park(r, their_id, request).await
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
        let stateless = r.pending.conn.is_stateless();
        let up = stateless
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
            Ok(end) => {
                tracing::debug!(tool = %logged(&r.record.tool), ms = r.record.started.elapsed().as_millis() as u64, "relayed");
                self.settle.settle(&r.record, end).await
            }
            Err(e) => self.failed(&r.record, &r.pending.upstream, e).await,
        }
    }

    /// E2: a call that failed upstream. Details go to the log, never to the caller.
    async fn failed(&self, record: &CallRecord, upstream: &str, e: CallError) -> Option<Body> {
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
    async fn park(&self, r: Relayed, their_id: Value, request: Value) -> Option<Body> {
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
    async fn resume(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        call: Option<CallKey>,
        params: &Value,
        envelope: &Arc<Envelope>,
    ) -> Option<Begun> {
        let name = params.get("name")?.as_str()?;
        let binding = binding_of(session.caller().as_deref(), name, params.get("arguments"));
        let Some((mut r, asked)) = self.parked.resume(envelope, &binding)? else {
            let body = Ok(super::settle::tool_error(texts::INPUT_ROUND_EXPIRED));
            return Some(Begun::Done(Some(body)));
        };
        r.pending
            .conn
            .send(rev2026::upstream_answer(asked, envelope))
            .await;
        let log_level = envelope
            .log_level
            .or(r.envelope.as_ref().and_then(|e| e.log_level));
        if let Some(k) = &call {
            session.track(k, &r.pending.conn, r.pending.id, log_level);
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

fn hook_decision(d: &hooks::BeforeDecision) -> &'static str {
    match d {
        hooks::BeforeDecision::Pass => "pass",
        hooks::BeforeDecision::Deny(_) => "deny",
        hooks::BeforeDecision::Answer(_) => "answer",
    }
}

fn claim_name(c: &Claim) -> &'static str {
    match c {
        Claim::Run => "run",
        Claim::TakenOver => "taken_over",
        Claim::Replay(_) => "replay",
        Claim::Running => "running",
        Claim::Mismatch => "mismatch",
    }
}

/// What a 2026-07-28 call's sealed state is bound to: the caller, the tool as the
/// caller named it, and the arguments as the caller sent them.
fn binding_of(caller: Option<&Caller>, tool: &str, arguments: Option<&Value>) -> Binding {
    let caller = caller.map(|c| c.name.as_str()).unwrap_or_default();
    let empty = Map::new();
    let args = arguments.and_then(Value::as_object).unwrap_or(&empty);
    Binding::new(caller, tool, args)
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

    #[test]
    fn a_binding_ignores_nothing_the_caller_sent() {
        let alice = Caller::new("alice");
        let a = binding_of(Some(&alice), "t", Some(&json!({"x": 1})));
        assert_eq!(a, binding_of(Some(&alice), "t", Some(&json!({"x": 1}))));
        assert_ne!(a, binding_of(Some(&alice), "t", Some(&json!({"x": 2}))));
        assert_ne!(a, binding_of(Some(&alice), "u", Some(&json!({"x": 1}))));
        assert_ne!(a, binding_of(None, "t", Some(&json!({"x": 1}))));
        assert_eq!(
            binding_of(None, "t", None),
            binding_of(None, "t", Some(&json!({})))
        );
    }
}
