//! The pipeline's verdict on a `tools/call` and what follows from it (steps 3-5):
//! judged (the grant, then the pipeline), refused (settled with the answer the
//! pipeline gave), or accepted (the guards on its arguments, then made ready to
//! go upstream as an [`Accepted`] call).

use super::super::client_session::{CallKey, ClientSession};
use super::super::flow::FLOW_META_KEY;
use super::super::ledger::LedgerKey;
use super::super::policy::Policy;
use super::super::rev2026::{Binding, Revision, Sealed};
use super::super::settle::{Body, CallRecord, Decision, End};
use super::content::{self, Outbound};
use super::{scope, Accepted, Calls};
use crate::logged::logged;
use crate::otel::{self, Span};
use serde_json::{Map, Value};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use warden_core::hooks::CallContext;
use warden_core::{Answer, CallReport, CallScope, Caller, Catalogue, Forward, Refusal, Verdict};

/// What a call brings of the 2026-07-28 revision: its request id, revision, what
/// its state is bound to, and what the state it brought back holds.
type Revision2026 = (
    Option<CallKey>,
    Revision,
    Option<Arc<Binding>>,
    Option<Sealed>,
);

/// What the pipeline let through, with what it noticed (step 3).
pub(super) struct Judged {
    forward: Forward,
    report: CallReport,
    scope: CallScope,
    /// The call's params, its arguments moved out (into `forward`).
    params: Value,
    had_arguments: bool,
    /// What a 2026-07-28 call's state is bound to.
    binding: Option<Arc<Binding>>,
    span: Option<Span>,
}

impl Calls {
    /// The grant and the pipeline (step 3) over the call's name, arguments and
    /// `_meta`: what goes on, or (`Err`) the answer of a call they refused,
    /// settled. `revision`: the call's, which says what its state is bound to.
    pub(super) async fn judge(
        &self,
        (policy, catalogue, routed): (&Arc<Policy>, &Arc<Catalogue>, &Option<Option<String>>),
        session: &ClientSession,
        mut params: Value,
        revision: &Revision,
        mut span: Option<Span>,
        started: Instant,
    ) -> Result<Judged, Option<Body>> {
        // Move the arguments out (no copy); a placeholder keeps their position.
        let arguments = params.get_mut("arguments").map(Value::take);
        let had_arguments = params.get("arguments").is_some();
        // Refused calls are audited with the arguments they carried: kept only when audited.
        let sent = self.settle.audit.on().then(|| match &arguments {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        });
        let name = params.get("name").cloned().unwrap_or(Value::Null);
        let tool = name.as_str().unwrap_or_default();
        let binding = revision
            .binds_call(session.caller().as_deref(), tool, arguments.as_ref())
            .map(Arc::new);
        let mut check = Map::new();
        check.insert("name".into(), name);
        if let Some(args) = arguments {
            check.insert("arguments".into(), args);
        }
        if let Some(meta) = params.get("_meta") {
            check.insert("_meta".into(), meta.clone());
        }
        let (verdict, scope) = self
            .routed_check((policy, catalogue), session, check, span.as_ref(), routed)
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
                let refused = (answer, refusal, &verdict.report, sent);
                let end = self.refuse(policy, session, &params, routed, refused, span, started);
                return Err(end.await);
            }
        };
        let report = verdict.report;
        Ok(Judged {
            forward,
            report,
            scope,
            params,
            had_arguments,
            binding,
            span,
        })
    }

    /// Settles a call the pipeline answered itself (`End::Pipeline`).
    #[allow(clippy::too_many_arguments)]
    async fn refuse(
        &self,
        policy: &Policy,
        session: &ClientSession,
        params: &Value,
        routed: &Option<Option<String>>,
        (answer, refusal, report, sent): (Answer, Refusal, &CallReport, Option<Map<String, Value>>),
        span: Option<Span>,
        started: Instant,
    ) -> Option<Body> {
        tracing::info!(caller = %logged(session.caller().as_deref().map_or("", |c| c.name.as_str())), ?refusal, unknown = %logged(report.unknown_keys.join(", ")), answer = %logged(answer.text()), "call answered by the gateway");
        // A hidden renamed tool is recorded as the absent name it was called by.
        let tool = match (routed, refusal) {
            (Some(Some(shown)), Refusal::UnknownTool) => shown.as_str(),
            _ => params
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        };
        let mut record = self.refused_record(session, tool, sent, report, refusal, started);
        record.after = policy.after_hooks.clone();
        record.span = span.map(|s| Box::new(Mutex::new(s)));
        let decision = Decision::of_refusal(refusal);
        if let Some(note) = &report.condition_failed {
            tracing::warn!(tool = %logged(tool), note = %logged(note), "a when_cel condition failed; the call is refused");
        }
        let end = End::Pipeline { decision, answer };
        self.settle.settle(&record, end).await
    }

    /// What the pipeline let through, made ready to go upstream: the guards on
    /// its arguments (steps 4, 5), then [`Calls::prepare`]. `Err`: the answer of
    /// a call refused or failed here, settled.
    pub(super) async fn accept(
        &self,
        policy: &Arc<Policy>,
        session: &Arc<ClientSession>,
        judged: Judged,
        (call, revision, sealed): (Option<CallKey>, Revision, Option<Sealed>),
        started: Instant,
    ) -> Result<Accepted, Option<Body>> {
        let Judged {
            mut forward,
            report,
            scope,
            params,
            had_arguments,
            binding,
            mut span,
        } = judged;
        if let Some(s) = &mut span {
            s.set("warden.upstream", forward.tool.upstream.clone());
        }
        if !report.unknown_keys.is_empty() {
            tracing::info!(tool = %logged(&forward.tool.name), mode = ?report.unknown_mode, keys = %logged(report.unknown_keys.join(", ")), "undeclared argument keys");
        }
        // The guards whose `when_cel` holds for the call (X8), on the
        // arguments as the argument stages left them; a failed one refuses it.
        let scope = Arc::new(scope);
        let (guards, guard_failed) = match scope::guards_of(policy, session, &forward, &scope) {
            Ok(g) => (g, None),
            Err(note) => (Default::default(), Some(note)),
        };
        let outbound = Calls::govern_arguments(guards.arguments, &mut forward.arguments);
        // X9: shadow guards look at the arguments as the others left them.
        let shadow_args = scope::shadow_arguments(&guards.shadow_arguments, &mut forward);
        let results = (guards.results, guards.shadow_results);
        let accepted = self.prepare(
            policy,
            session,
            params,
            had_arguments,
            (forward, outbound.as_ref(), results),
            (&report, scope),
            (call, revision, binding, sealed),
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
                return Err(self.settle.settle(&record, end).await);
            }
        };
        accepted.record.span = span.map(|s| Box::new(Mutex::new(s)));
        scope::note(&self.settle.metrics, &mut accepted.record, &shadow_args);
        if let Some(note) = guard_failed {
            let end = scope::failed(&accepted.record.tool, &note, Decision::Denied);
            return Err(self.settle.settle(&accepted.record, end).await);
        }
        if let Some(end) = outbound.and_then(|o| self.arguments_end(&mut accepted.record, o)) {
            return Err(self.settle.settle(&accepted.record, end).await);
        }
        Ok(accepted)
    }

    /// The grant, then the pipeline (G, N, R, A).
    pub(super) async fn check(
        &self,
        (policy, catalogue): (&Policy, &Catalogue),
        session: &ClientSession,
        check: Map<String, Value>,
        span: Option<&Span>,
    ) -> (Verdict, CallScope) {
        let name = check.get("name").and_then(Value::as_str).map(str::to_owned);
        let name = name.as_deref();
        let caller = session.caller();
        let caller = caller.as_deref();
        let calls = session.calls.fetch_add(1, Ordering::Relaxed);
        // Only a `when_cel` condition reads the scope: build it only for one.
        let scope = match policy.reads_scope() {
            true => scope::of(policy, catalogue, session, name, calls),
            false => CallScope::default(),
        };
        let shadow = policy.grant.rules.has_shadow();
        let sent = shadow.then(|| check.get("arguments").cloned());
        let params = Value::Object(check);
        let at = (caller, &scope);
        let mut verdict = match policy.grant.for_call(caller, name, span).await {
            Some(grant) => {
                policy
                    .pipeline
                    .check_in_scope(&*grant, catalogue, &session.warn, at, params)
            }
            None => {
                let rules = &*policy.grant.rules;
                policy
                    .pipeline
                    .check_in_scope(rules, catalogue, &session.warn, at, params)
            }
        };
        if let (Some(sent), Some(caller), Some(name)) = (sent, caller, name) {
            let call = (caller, name, sent.as_ref());
            verdict.report.shadow = scope::shadow(policy, catalogue, call, &verdict, &scope);
            if let Some(s) = verdict.report.shadow {
                self.settle.metrics.shadow(s.would);
            }
        }
        if let (Some(caller), Some(name)) = (caller, name) {
            let call = (caller, name);
            verdict.report.ask_rule = scope::asking_rule(policy, catalogue, call, &verdict, &scope);
        }
        (verdict, scope)
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
                session.server(),
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
        (mut forward, outbound, results): (Forward, Option<&Outbound>, scope::ResultsGuarded),
        (report, scope): (&CallReport, Arc<CallScope>),
        (call, revision, binding, sealed): Revision2026,
        started: Instant,
    ) -> Result<Accepted, String> {
        let tool = forward.tool.clone();
        // S6 `ask` and `label`: the arguments' findings join the guards below.
        let approval_shown = outbound.and_then(|o| o.ask(&mut forward));
        let labels = outbound.map_or(Vec::new(), |o| o.labels().to_vec());
        let guard = approval_shown
            .as_ref()
            .and(outbound)
            .and_then(Outbound::approver);
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
        let mut record = self.accepted_record(policy, session, &forward, report, &ledger, started);
        let limited = policy.quotas.any_for(caller, &tool.name);
        let guards = result_guards(policy, results, &revision, &call);
        // The flow context is the gateway's: it never goes upstream.
        let flow = flow_of(policy, obj, &tool.upstream, &tool.upstream_name);
        let guarded = forward.needs_approval
            || !labels.is_empty()
            || !policy.before_hooks.is_empty()
            || ledger.is_some()
            || limited
            || flow.is_some();
        // Hooks see the call as it goes upstream; built only when someone will look.
        if guarded || !record.after.is_empty() {
            record.ctx = Some(hook_context(session, &forward, report));
        }
        obj.insert("name".into(), Value::String(tool.upstream_name.clone()));
        if had_arguments || forward.rewritten {
            obj.insert("arguments".into(), Value::Object(forward.arguments));
        }
        record.token = self
            .sessions
            .map_progress_token(session, call.as_ref(), obj);
        let mut params = Value::Object(std::mem::take(obj));
        revision.for_upstream(&up, &mut params, sealed.as_ref());
        Ok(Accepted {
            policy: policy.clone(),
            up,
            params,
            record,
            approval: forward.needs_approval,
            approval_because: forward.approval_because,
            approvers: scope::approvers(policy, report, guard),
            approval_shown,
            labels,
            ledger,
            call,
            revision,
            binding,
            limited,
            counted: false,
            flow,
            sealed,
            guards,
            scope,
        })
    }

    /// The record of a call the pipeline let through: its audit template with
    /// the upstream and the idempotency key, and the after hooks it began under.
    fn accepted_record(
        &self,
        policy: &Policy,
        session: &ClientSession,
        forward: &Forward,
        report: &CallReport,
        ledger: &Option<LedgerKey>,
        started: Instant,
    ) -> CallRecord {
        let tool = &forward.tool;
        let mut record = CallRecord::new(started, &tool.name);
        record.after = policy.after_hooks.clone();
        record.audit = self.settle.audit.on().then(|| {
            self.settle.audit.template(
                &session.label,
                session.caller().as_deref(),
                &tool.name,
                Some(&tool.upstream),
                session.server(),
                &forward.arguments,
                report,
                ledger.as_ref().map(|(_, k)| k.clone()),
            )
        });
        record
    }
}

/// The guards over a call's result (S2; `None`: none apply).
fn result_guards(
    policy: &Policy,
    (results, shadow): scope::ResultsGuarded,
    revision: &Revision,
    call: &Option<CallKey>,
) -> Option<content::ResultGuards> {
    (results.is_some() || !shadow.is_empty()).then(|| content::ResultGuards {
        guards: results.unwrap_or_else(|| Arc::from(Vec::new())),
        shadow,
        flows: policy.flows.clone(),
        revision: revision.clone(),
        call: call.clone(),
        timeout: policy.approval_timeout,
    })
}

/// Flow policy on (F1-F4): the labels of the tool's upstream, and the sealed
/// flow context a 2026-07-28 client brought in `_meta`, taken out of the params
/// (an emptied `_meta` with it). Off: the params are left as they are.
fn flow_of(
    policy: &Policy,
    obj: &mut Map<String, Value>,
    upstream: &str,
    upstream_name: &str,
) -> Option<(Vec<String>, Option<Value>)> {
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
    policy.flows.on().then(|| {
        let labels = policy.flows.labels_of(upstream, upstream_name);
        (labels, context)
    })
}

/// What the hooks see of a call: as it goes upstream.
fn hook_context(
    session: &ClientSession,
    forward: &Forward,
    report: &CallReport,
) -> Arc<CallContext> {
    Arc::new(CallContext {
        caller: session.caller().map(|c| Caller::clone(&c)),
        tool: forward.tool.name.clone(),
        upstream: forward.tool.upstream.clone(),
        arguments: forward.arguments.clone(),
        meta: forward.meta.clone(),
        reason: report.reason.clone(),
    })
}
