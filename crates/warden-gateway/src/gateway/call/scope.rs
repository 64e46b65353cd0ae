//! What a `when_cel` condition (X1) and the shadow rules (X6) read of a call
//! beyond its caller, tool and arguments; and which rule asks about it, for
//! who answers (H6).

use super::super::policy::Policy;
use super::super::session::{self, ClientSession};
use super::content::Outbound;
use crate::config::Approver;
use serde_json::{Map, Value};
use warden_core::{CallReport, CallScope, Caller, Catalogue, Shadowed, Verdict};

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
        claims: Map::new(),
        tool_labels: tool.map_or(Vec::new(), |t| {
            policy.flows.labels_of(&t.upstream, &t.upstream_name)
        }),
        session_labels: session::lock(&session.flow).iter().cloned().collect(),
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
/// answer (`outbound`: when a guard asks).
pub(super) fn approvers(
    policy: &Policy,
    report: &CallReport,
    outbound: Option<&Outbound>,
) -> Vec<Approver> {
    let rule = report
        .ask_rule
        .and_then(|i| policy.rule_approvers.get(i).copied().flatten());
    rule.into_iter()
        .chain(outbound.and_then(Outbound::approver))
        .collect()
}
