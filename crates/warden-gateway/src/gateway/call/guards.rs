//! The guards of a call, between its in-order phase and its upstream: flow
//! rules, quotas, approval, before hooks and the ledger claim (F2, Q3, H1-H5,
//! I1), each of which may refuse it or hold it.

use super::{child, scope, Accepted, Calls, CREDIT_TTL};
use crate::gateway::approval::{self, Approval};
use crate::gateway::client_session::{self, ClientSession};
use crate::gateway::flow::{FlowDecision, Trail, FLOW_META_KEY};
use crate::gateway::inbox::Waiting;
use crate::gateway::ledger;
use crate::gateway::policy::Policy;
use crate::gateway::quota::{Admission, CREDIT_KEY};
use crate::gateway::rev2026::input;
use crate::gateway::rev2026::{self, Binding, FlowTrail};
use crate::gateway::settle::{Body, CallRecord, Decision, End};
use crate::logged::logged;
use crate::otel::Kind;
use crate::texts;
use serde_json::{Map, Value};
use std::sync::Arc;
use warden_core::hooks::{self, BeforeOutcome, CallContext};
use warden_core::{answer, CallScope, Caller};
use warden_store::{Claim, Finish, OnAbandoned};

impl Calls {
    /// The guards, and for a 2026-07-28 client under flow policy its sealed flow
    /// context in the result's `_meta` (F3).
    pub(super) async fn guarded(&self, session: &Arc<ClientSession>, a: Accepted) -> Option<Body> {
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
    pub(super) async fn guard(
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
        // S6: what a label guard found in the arguments is on the trail before
        // the flow rules look, so they can stop this very call.
        if let Err(body) = self.label_from_arguments(session, &mut a, &ctx.tool).await {
            return body;
        }
        // Flow rules first, then quotas: neither asks a human, runs a hook or
        // claims a key for a call it refuses.
        let caller = ctx.caller.as_ref().map_or("", |c| c.name.as_str());
        let home = a.revision.flow_trail();
        // Where replicas share this session's trail (only a labelled call can be
        // stopped or add to it, so only one reads or writes it).
        let scope = a
            .flow
            .as_ref()
            .filter(|(labels, _)| !labels.is_empty())
            .and_then(|_| policy.flows.shared_scope(home, caller, &session.label));
        let (flow_ask, after) = match self
            .flow_check(session, &mut a, &ctx, scope.as_deref(), context)
            .await
        {
            Ok(decided) => decided,
            Err(body) => return body,
        };
        if let Err(body) = self.admit(&mut a, &ctx).await {
            return body;
        }
        // From here until the call goes upstream, its client may cancel it.
        let held = session.hold(a.call.as_ref());
        if a.approval || flow_ask.is_some() {
            if let Err(body) = self.ask_human(session, &mut a, &ctx, flow_ask, &held).await {
                return body;
            }
        }
        let end = self.before_hooks(&a, &ctx, &held).await;
        drop(held);
        if let Some(end) = end {
            return self.settle.settle(&a.record, end).await;
        }
        // The ledger last: only a call that will run claims its key (I1).
        if let Some(end) = self.claim_key(&mut a, &ctx, &policy).await {
            return self.settle.settle(&a.record, end).await;
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
            match home {
                FlowTrail::Sealed => {
                    let flows = &policy.flows;
                    *context = Some(flows.remember_stateless(self.state_key(), caller, &after));
                }
                FlowTrail::Session => {
                    client_session::lock(&session.flow).extend(labels.iter().cloned());
                }
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

    /// F2: the flow rules' decision on a labelled call, over the trail of its
    /// session (or 2026-07-28 caller, or the shared store's); `Ok`: the
    /// reason an `ask` rule gives, and the trail once the call ran. `Err`:
    /// how the call ends instead. `context`: a 2026-07-28 client's sealed
    /// flow context to hand back.
    async fn flow_check(
        &self,
        session: &ClientSession,
        a: &mut Accepted,
        ctx: &CallContext,
        scope: Option<&str>,
        context: &mut Option<String>,
    ) -> Result<(Option<String>, Option<Trail>), Option<Body>> {
        let policy = a.policy.clone();
        let caller = ctx.caller.as_ref().map_or("", |c| c.name.as_str());
        let home = a.revision.flow_trail();
        let mut flow_ask = None;
        let mut after: Option<Trail> = None;
        if let Some((labels, sealed)) = &a.flow {
            let mut trail = match home {
                FlowTrail::Sealed => {
                    let flows = &policy.flows;
                    flows.stateless_trail(self.state_key(), caller, sealed.as_ref())
                }
                FlowTrail::Session => client_session::lock(&session.flow).clone(),
            };
            // The shared store's trail, which no client can drop and every replica reads.
            if let Some(scope) = scope {
                match policy.flows.shared_trail(scope).await {
                    Ok(shared) => trail.extend(shared),
                    Err(e) => return Err(self.flow_unverifiable(&a.record, &ctx.tool, &e).await),
                }
            }
            if home == FlowTrail::Sealed {
                let flows = &policy.flows;
                *context = Some(flows.remember_stateless(self.state_key(), caller, &trail));
            }
            if let Some(r) = a.record.audit.as_mut() {
                r.labels = labels.clone();
                r.touched = trail.iter().cloned().collect();
            }
            // The call's scope (X1), its labels those of the call and the trail.
            let scope = CallScope {
                tool_labels: labels.clone(),
                session_labels: trail.iter().cloned().collect(),
                ..CallScope::clone(&a.scope)
            };
            let anonymous = Caller::default();
            let input = call_input(ctx, ctx.caller.as_ref().unwrap_or(&anonymous), &scope);
            let shadow = policy.flows.shadow_verdict(&trail, labels, Some(&input));
            scope::note(&self.settle.metrics, &mut a.record, shadow.as_slice());
            let decided = policy.flows.decide(&trail, labels, Some(&input));
            let refusal = decided.refusal(&ctx.tool);
            match decided {
                FlowDecision::Pass => {}
                FlowDecision::Failed(note) => {
                    tracing::warn!(tool = %logged(&ctx.tool), note = %logged(&note), "a when_cel condition failed; the call is refused");
                    let end = End::Policy {
                        decision: Decision::FlowDenied,
                        text: refusal.unwrap_or_default(),
                        retry_ms: None,
                    };
                    return Err(self.settle.settle(&a.record, end).await);
                }
                FlowDecision::Ask(reason, approver) => {
                    flow_ask = Some(reason);
                    a.approvers.extend(approver);
                }
                FlowDecision::Deny(_) => {
                    tracing::info!(tool = %logged(&ctx.tool), caller = %logged(caller), touched = %logged(trail.iter().cloned().collect::<Vec<_>>().join(",")), "a flow rule refused the call");
                    let end = End::Policy {
                        decision: Decision::FlowDenied,
                        text: refusal.unwrap_or_default(),
                        retry_ms: None,
                    };
                    return Err(self.settle.settle(&a.record, end).await);
                }
            }
            let mut t = trail;
            t.extend(labels.iter().cloned());
            after = Some(t);
        }
        Ok((flow_ask, after))
    }

    /// H1-H3: the before hooks, in order; `Some`: how the call ends instead
    /// (a denial, a hook's own answer, a failed hook, or the client cancelled).
    async fn before_hooks(
        &self,
        a: &Accepted,
        ctx: &CallContext,
        held: &client_session::Held<'_>,
    ) -> Option<End> {
        let decided = hooks::run_before_observed(
            &a.policy.before_hooks,
            ctx,
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
        let decided = tokio::select! {
            decided = decided => decided,
            _ = held.cancelled.notified() => {
                return Some(End::Cancelled("cancelled by the client while its before hooks ran".into()));
            }
        };
        match decided {
            BeforeOutcome::Pass => None,
            BeforeOutcome::Deny(reason) => Some(End::Refused {
                decision: Decision::Denied,
                text: reason.as_str().to_owned(),
            }),
            BeforeOutcome::Answer(result) => Some(End::Hook(result)),
            BeforeOutcome::Failed(e) => {
                tracing::error!(tool = %logged(&ctx.tool), "a before hook failed; the tool is not run: {}", logged(&e));
                Some(End::Failed {
                    decision: Decision::Denied,
                    why: format!("before hook failed: {e}"),
                })
            }
        }
    }

    /// Q3: a call a quota applies to is counted, or refused with when to
    /// retry; `Err`: how the call ends instead.
    async fn admit(&self, a: &mut Accepted, ctx: &CallContext) -> Result<(), Option<Body>> {
        if !a.limited {
            return Ok(());
        }
        let policy = a.policy.clone();
        let caller = ctx.caller.as_ref().map_or("", |c| c.name.as_str());
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
        let call = ctx.caller.as_ref().map(|c| call_input(ctx, c, &a.scope));
        let admitted = policy.quotas.admit(call.as_ref(), lease, credited);
        match admitted.await {
            Admission::Admitted {
                slots,
                counted,
                shadow,
            } => {
                a.record.slots = slots;
                a.counted = counted;
                scope::note(&self.settle.metrics, &mut a.record, &shadow);
            }
            Admission::Failed(note) => {
                let end = scope::failed(&ctx.tool, &note, Decision::RateLimited);
                return Err(self.settle.settle(&a.record, end).await);
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
                return Err(self.settle.settle(&a.record, end).await);
            }
        }
        Ok(())
    }

    /// S6 `label`: the labels a guard found cause to add from the arguments
    /// join the trail; `Err`: the shared store could not take them, and the
    /// call is refused as a trail that cannot be checked is (F3).
    async fn label_from_arguments(
        &self,
        session: &ClientSession,
        a: &mut Accepted,
        tool: &str,
    ) -> Result<(), Option<Body>> {
        if a.labels.is_empty() {
            return Ok(());
        }
        let labels = std::mem::take(&mut a.labels);
        let flows = &a.policy.flows;
        let labelled = self.label_trail(session, flows, a.revision.flow_trail(), &labels);
        if let Err(e) = labelled.await {
            return Err(self.flow_unverifiable(&a.record, tool, &e).await);
        }
        if let Some(r) = a.record.audit.as_mut() {
            r.touched.extend(labels);
        }
        Ok(())
    }

    /// H5: a call an `ask` rule, an `ask` flow rule (F2) or an `ask` guard on
    /// its arguments (S6) sends to a human waits for the answer; `Err`: how the
    /// call ends instead (refused, cancelled, or handed back to a 2026-07-28
    /// client to ask its user).
    async fn ask_human(
        &self,
        session: &Arc<ClientSession>,
        a: &mut Accepted,
        ctx: &CallContext,
        flow_ask: Option<String>,
        held: &client_session::Held<'_>,
    ) -> Result<(), Option<Body>> {
        let policy = a.policy.clone();
        let mut span = child(&a.record, "warden.approval", Kind::Internal);
        let operators = approval::Operators {
            inbox: &self.inbox,
            approver: approval::approver_of(policy.approver, &a.approvers),
            waiting: self.waiting(a, ctx, flow_ask.as_deref()),
        };
        let asking = approval::approve(
            session,
            &self.sessions,
            a.call.clone(),
            approval::Question {
                ctx,
                because: a.approval_because.as_deref(),
                shown: a.approval_shown.as_ref(),
            },
            (&a.revision, a.binding.as_deref(), a.sealed.as_ref()),
            self.state_key(),
            policy.approval_timeout,
            operators,
        );
        let asked = tokio::select! {
            asked = asking => asked,
            _ = held.cancelled.notified() => {
                drop(span);
                let end = End::Cancelled("cancelled by the client while it waited for approval".into());
                return Err(self.settle.settle(&a.record, end).await);
            }
        };
        if let Some(s) = &mut span {
            let answer = match &asked {
                Approval::Approved(_) => "approved",
                Approval::Refused(..) => "refused",
                Approval::InputRequired(_) => "input_required",
            };
            s.set("warden.approval", answer);
        }
        drop(span);
        // Who answered, and their note, go in the call's audit record (H6).
        if let (Approval::Approved(Some(v)) | Approval::Refused(_, Some(v)), Some(r)) =
            (&asked, a.record.audit.as_mut())
        {
            r.approver = Some(v.by.clone());
            r.approval_note = v.note.clone();
        }
        match asked {
            Approval::Approved(_) => Ok(()),
            Approval::Refused(text, _) => {
                let text = match &flow_ask {
                    Some(reason) => texts::flow_not_approved(&ctx.tool, reason, text),
                    None => text.to_owned(),
                };
                let end = End::Refused {
                    decision: Decision::Denied,
                    text,
                };
                Err(self.settle.settle(&a.record, end).await)
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
                Err(Some(Ok(result)))
            }
        }
    }

    /// What the console's inbox shows of a call waiting for approval: the
    /// arguments as the audit trail records them (with what an `ask` guard
    /// found redacted too), and which rule asks.
    fn waiting(&self, a: &Accepted, ctx: &CallContext, flow_ask: Option<&str>) -> Waiting {
        let audit = &self.settle.audit;
        let arguments = match (&a.approval_shown, &a.record.audit) {
            (Some(Value::Object(shown)), _) => audit.redacted(shown),
            (_, Some(r)) => r.arguments.clone(),
            _ => audit.redacted(&ctx.arguments),
        };
        let rule = match (flow_ask, &a.approval_because, &a.approval_shown) {
            (Some(reason), _, _) => format!("an ask flow rule (F2): {reason}"),
            (None, Some(because), _) => format!("an ask rule (H5): {because}"),
            (None, None, Some(_)) => {
                "an ask guard found something in the arguments (S6)".to_owned()
            }
            (None, None, None) => "an ask rule (H5)".to_owned(),
        };
        Waiting {
            id: String::new(),
            caller: ctx.caller.as_ref().map(|c| c.name.clone()),
            tool: ctx.tool.clone(),
            arguments,
            rule,
            reason: ctx.reason.clone(),
            since: String::new(),
        }
    }

    /// I1: claims the call's idempotency key, if it has one; `Some`: how the call
    /// ends instead of running (a stored answer, or a refusal). A key whose
    /// attempt was abandoned (its gateway stopped mid-call) answers that its
    /// outcome is unknown, and the call does not run again, unless its tool is
    /// declared safe to repeat (`rerun_abandoned`): then this call takes the key
    /// over and runs. Either way the abandoned attempt is audited once.
    async fn claim_key(&self, a: &mut Accepted, ctx: &CallContext, policy: &Policy) -> Option<End> {
        let key = a.ledger.take()?;
        let refused = |text: &str| End::Refused {
            decision: Decision::Denied,
            text: text.to_owned(),
        };
        let args = Value::Object(ctx.arguments.clone());
        let lease = ledger::lease_for(a.up.timeout_ms());
        let own_name = a.params["name"].as_str().unwrap_or_default();
        let abandoned = match a.up.config.reruns_abandoned(own_name) {
            true => OnAbandoned::Rerun,
            false => OnAbandoned::Keep,
        };
        let claim = self
            .settle
            .ledger
            .claim(&key, (&ctx.tool, &args), lease, abandoned);
        let mut span = child(&a.record, "warden.ledger", Kind::Internal);
        let claim = claim.await;
        if let Some(s) = &mut span {
            match &claim {
                Ok(c) => s.set("warden.ledger.claim", claim_name(c)),
                Err(_) => s.fail("the store is unavailable"),
            }
        }
        drop(span);
        match claim {
            Ok(claim @ (Claim::Run | Claim::TakenOver)) => {
                if claim == Claim::TakenOver {
                    // The key's holder stopped renewing its lease mid-call (its
                    // gateway died): that attempt goes on the record before this
                    // one runs.
                    tracing::warn!(tool = %logged(&ctx.tool), key = %logged(&key.1), "an idempotency key's lease ran out mid-call; its tool may run again (rerun_abandoned), so the key is taken over and the call runs again");
                    self.settle.abandoned(&a.record).await;
                }
                // From here on the call's end is the ledger's to record, and
                // its lease is renewed until then.
                a.record.ledger = Some(self.settle.ledger.hold(key, lease));
                None
            }
            Ok(Claim::Abandoned { first }) => {
                if first {
                    tracing::warn!(tool = %logged(&ctx.tool), key = %logged(&key.1), "an idempotency key's lease ran out mid-call; the outcome of its call is unknown, and it is not run again");
                    self.settle.abandoned(&a.record).await;
                }
                Some(refused(texts::OUTCOME_UNKNOWN))
            }
            Ok(Claim::Replay(result)) => Some(End::Replayed(result)),
            Ok(Claim::Running) => Some(refused(answer::ALREADY_RUNNING)),
            Ok(Claim::Mismatch) => Some(refused(&answer::idempotency_mismatch(&key.1))),
            Err(e) => {
                // A call that needs the ledger fails closed when the store is
                // unavailable (down, or its disk full): it did not run.
                tracing::error!(tool = %logged(&ctx.tool), "the ledger is unavailable; the call is refused: {}", logged(&e));
                if a.counted {
                    // It did not run: the retry its answer advises is not charged twice.
                    let call = ctx.caller.as_ref().map(|c| call_input(ctx, c, &a.scope));
                    policy.quotas.refund(call.as_ref());
                }
                Some(End::NotRun {
                    why: e.to_string(),
                    text: texts::ledger_unavailable(&ctx.tool, 1),
                    retry_ms: 1000,
                })
            }
        }
    }

    /// A counted 2026-07-28 call handed back to its client (for an approval, or
    /// for an upstream's input request): its state carries a credit, so the
    /// retry is not counted again (Q3).
    pub(super) async fn credit(&self, result: &mut Value, binding: &Binding, counted: bool) {
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
    pub(super) async fn flow_unverifiable(
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
}

/// A call as a `when_cel` reads it (X1): as it goes upstream, with its scope.
fn call_input<'a>(
    ctx: &'a CallContext,
    caller: &'a Caller,
    scope: &'a CallScope,
) -> warden_core::CelInput<'a> {
    warden_core::CelInput {
        caller,
        tool: &ctx.tool,
        upstream: &ctx.upstream,
        args: &ctx.arguments,
        scope,
    }
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
        Claim::Abandoned { .. } => "abandoned",
    }
}
