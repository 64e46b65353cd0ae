//! What a `when_cel` condition (X1, X8) and the shadow rules (X6) read of a
//! call beyond its caller, tool and arguments, and how shadow rules, quotas,
//! flows and guards (X9) are noted on the call; and which rule asks about
//! it, for who answers (H6).

use super::super::client_session::{self, ClientSession};
use super::super::policy::Policy;
use super::super::settle::{CallRecord, Decision, End};
use crate::config::guards::{CallGuards, Guard, GuardAction};
use crate::config::Approver;
use crate::logged::logged;
use crate::metrics::Metrics;
use serde_json::{Map, Value};
use std::sync::Arc;
use warden_core::{CallReport, CallScope, Caller, Catalogue, Forward, Shadowed, Verdict};

/// What a `when_cel` condition reads of a call beyond its caller, tool and
/// arguments (X1), `calls` being the session's calls before this one.
pub(super) fn of(
    policy: &Policy,
    catalogue: &Catalogue,
    session: &ClientSession,
    name: Option<&str>,
    calls: u64,
) -> CallScope {
    let tool = name.and_then(|n| catalogue.get(n));
    let transport = if session.label.starts_with("http") {
        "http"
    } else {
        "stdio"
    };
    CallScope {
        claims: session.claims(),
        tool_labels: tool.map_or(Vec::new(), |t| {
            policy.flows.labels_of(&t.upstream, &t.upstream_name)
        }),
        session_labels: client_session::lock(&session.flow)
            .iter()
            .cloned()
            .collect(),
        session_calls: calls,
        time: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64),
        transport: transport.to_owned(),
        revision: session.version().unwrap_or_default().to_owned(),
    }
}

/// X6: what the shadow rules would have made of the call, judged on the
/// arguments the tool would get or, for a call refused before they were
/// settled, on those `sent`.
pub(super) fn shadow(
    policy: &Policy,
    catalogue: &Catalogue,
    (caller, name, sent): (&Caller, &str, Option<&Value>),
    verdict: &Verdict,
    scope: &CallScope,
) -> Option<Shadowed> {
    let empty = Map::new();
    let args = match &verdict.outcome {
        warden_core::Outcome::Forward(f) => &f.arguments,
        _ => sent.and_then(Value::as_object).unwrap_or(&empty),
    };
    let input = warden_core::CelInput {
        caller,
        tool: name,
        upstream: catalogue.get(name).map_or("", |t| t.upstream.as_str()),
        args,
        scope,
    };
    policy.grant.rules.shadow_verdict(&input)
}

/// X9: what a `[[guard]]` in shadow mode would have done, in the audit's words.
fn would_of(action: GuardAction) -> &'static str {
    match action {
        GuardAction::Redact => "would_redact",
        GuardAction::Block => "would_block",
        GuardAction::Label => "would_label",
        GuardAction::Report => "would_report",
        GuardAction::Ask => "would_ask",
    }
}

/// X9: the shadow guards (with their place in the file) that find something
/// in `value`; it is scanned on a copy, and left as it was.
pub(super) fn shadow_guards(guards: &[(usize, Arc<Guard>)], value: &Value) -> Vec<Shadowed> {
    if guards.is_empty() {
        return Vec::new();
    }
    let mut copy = value.clone();
    guards
        .iter()
        .filter(|(_, g)| {
            !super::keys::scan_keys(g, &mut copy, false).found.is_empty()
                || !g.scanner.scan(&mut copy).is_empty()
        })
        .map(|(i, g)| Shadowed {
            would: would_of(g.action),
            of: "guard",
            rule: Some(*i),
        })
        .collect()
}

/// X6, X9: a shadow note joins the call's audit record (`; ` between notes)
/// and `warden_shadow_total`.
pub(super) fn note(metrics: &Metrics, record: &mut CallRecord, shadows: &[Shadowed]) {
    for s in shadows {
        metrics.shadow(s.would);
        if let Some(r) = record.audit.as_mut() {
            r.shadow = Some(match r.shadow.take() {
                Some(before) => format!("{before}; {s}"),
                None => s.to_string(),
            });
        }
    }
}

/// The guards over a call's result: those that act, and those in shadow mode (X9).
pub(super) type ResultsGuarded = (
    crate::config::guards::Applied,
    Vec<(usize, Arc<crate::config::guards::Guard>)>,
);

/// The guards of a call the pipeline let through (S2, S6), by their
/// `when_cel` (X8); `Err`: one failed (X3), the operator's note.
pub(super) fn guards_of(
    policy: &Policy,
    session: &ClientSession,
    forward: &Forward,
    scope: &CallScope,
) -> Result<CallGuards, String> {
    let caller = session.caller().unwrap_or_default();
    policy.guards.for_call(&warden_core::CelInput {
        caller: &caller,
        tool: &forward.tool.name,
        upstream: &forward.tool.upstream,
        args: &forward.arguments,
        scope,
    })
}

/// X9: the shadow guards over a call's arguments, as the others left them.
pub(super) fn shadow_arguments(
    guards: &[(usize, Arc<Guard>)],
    forward: &mut Forward,
) -> Vec<Shadowed> {
    if guards.is_empty() {
        return Vec::new();
    }
    let args = Value::Object(std::mem::take(&mut forward.arguments));
    let found = shadow_guards(guards, &args);
    if let Value::Object(m) = args {
        forward.arguments = m;
    }
    found
}

/// X3, X8: how a call ends whose quota's or guard's `when_cel` failed (`note`,
/// the operator's words, logged here).
pub(super) fn failed(tool: &str, note: &str, decision: Decision) -> End {
    tracing::warn!(tool = %logged(tool), note = %logged(note), "a when_cel condition failed; the call is refused");
    End::Policy {
        decision,
        text: warden_core::answer::CONDITION_FAILED.to_owned(),
        retry_ms: None,
    }
}

/// H6: the rule that puts the call to a human, judged as the call was, when
/// some rule names its own approver (else nobody needs to know).
pub(super) fn asking_rule(
    policy: &Policy,
    catalogue: &Catalogue,
    (caller, name): (&Caller, &str),
    verdict: &Verdict,
    scope: &CallScope,
) -> Option<usize> {
    let warden_core::Outcome::Forward(f) = &verdict.outcome else {
        return None;
    };
    if !f.needs_approval || policy.rule_approvers.iter().all(Option::is_none) {
        return None;
    }
    let input = warden_core::CelInput {
        caller,
        tool: name,
        upstream: catalogue.get(name).map_or("", |t| t.upstream.as_str()),
        args: &f.arguments,
        scope,
    };
    policy.grant.rules.asking_rule(&input)
}

/// H6: who the rule and the argument guard that ask about the call name to
/// answer (`guard`: whom an asking guard on the arguments names).
pub(super) fn approvers(
    policy: &Policy,
    report: &CallReport,
    guard: Option<Approver>,
) -> Vec<Approver> {
    let rule = report
        .ask_rule
        .and_then(|i| policy.rule_approvers.get(i).copied().flatten());
    rule.into_iter().chain(guard).collect()
}
