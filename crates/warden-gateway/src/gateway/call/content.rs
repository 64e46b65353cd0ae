//! Guards over what a tool returned (S2-S4): between the upstream's answer and
//! its settling, so the audit record, the ledger (and so a replay), the after
//! hooks and the client all get the result as the guards left it.
//!
//! A call no guard applies to carries `None` from `prepare` and pays nothing
//! here. Guards run in file order over the result as the ones before left it:
//! `redact` replaces matches, `block` withholds the whole result (the first
//! blocking guard is named), `label` adds labels to the session's flow trail,
//! `report` only records. Findings go to the audit record, the metrics, the log
//! and the span: kind, path, count and action, never the matched text.

use super::{child, keys, scope, Calls};
use crate::config::guards::{Guard, GuardAction};
use crate::gateway::approval;
use crate::gateway::client_session::{self, CallKey, ClientSession};
use crate::gateway::flow::Flows;
use crate::gateway::rev2026::{FlowTrail, Revision};
use crate::gateway::settle::{self, CallRecord, Decision, End};
use crate::logged::logged;
use crate::otel::{self, Kind};
use crate::texts;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;
use warden_core::Forward;
use warden_store::GuardFinding;

/// The guards that apply to a call, with the flow trail their labels go to.
#[derive(Clone)]
pub(super) struct ResultGuards {
    pub guards: Arc<[Arc<Guard>]>,
    /// The guards in shadow mode, with their place in the file (X9).
    pub shadow: Vec<(usize, Arc<Guard>)>,
    pub flows: Arc<Flows>,
    /// The call's revision: where its trail lives, whether its client can be
    /// asked about the result.
    pub revision: Revision,
    /// For an `ask` guard: the call its question belongs to, and how long the
    /// human has to answer.
    pub call: Option<CallKey>,
    pub timeout: Duration,
}

/// What the guards did to one result.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Governed {
    pub findings: Vec<GuardFinding>,
    /// The first `block` guard with a finding, and the kinds it found.
    pub blocked: Option<(String, Vec<String>)>,
    /// Labels `label` guards add to the session's trail.
    pub labels: Vec<String>,
    /// The first `ask` guard with a finding, the kinds it found and where.
    pub asked: Option<(String, Vec<String>, Vec<String>)>,
}

impl Governed {
    /// S6 `block`: what the caller reads of a call whose arguments a guard
    /// blocked (`tool`: as the caller named it); `None`: no guard blocked it.
    /// The gateway and the offline judge (X11) both answer with it.
    pub(super) fn blocked_text(&self, tool: &str) -> Option<String> {
        let (guard, kinds) = self.blocked.as_ref()?;
        Some(texts::guard_blocked_arguments(tool, guard, kinds))
    }
}

/// The sorted distinct values of one field of some findings.
fn distinct(
    found: &[warden_core::scan::Finding],
    field: fn(&warden_core::scan::Finding) -> &str,
) -> Vec<String> {
    let mut out: Vec<String> = found.iter().map(|f| field(f).to_owned()).collect();
    out.sort();
    out.dedup();
    out
}

/// Runs `guards` over `result` in order, changing it where they redact or strip.
pub(super) fn govern_result(guards: &[Arc<Guard>], result: &mut Value) -> Governed {
    let mut out = Governed::default();
    let mut renamed = keys::Renamed::default();
    for g in guards {
        // Keys first, and every path names a flagged key redacted (below).
        let keys = keys::scan_keys(g, result, g.action == GuardAction::Redact);
        let mut found = match g.action {
            GuardAction::Redact => g.scanner.redact(result),
            _ => g.scanner.scan(result),
        };
        found.extend(keys.found);
        renamed.extend(keys.renamed);
        if found.is_empty() {
            continue;
        }
        match g.action {
            GuardAction::Block if out.blocked.is_none() => {
                out.blocked = Some((g.name.clone(), distinct(&found, |f| &f.kind)));
            }
            GuardAction::Ask if out.asked.is_none() => {
                let (kinds, paths) = (distinct(&found, |f| &f.kind), distinct(&found, |f| &f.path));
                out.asked = Some((g.name.clone(), kinds, paths));
            }
            GuardAction::Label => out.labels.extend(g.labels.iter().cloned()),
            _ => {}
        }
        out.findings.extend(found.into_iter().map(|f| GuardFinding {
            guard: g.name.clone(),
            detector: f.detector,
            kind: f.kind,
            path: f.path,
            count: f.count,
            action: g.action.as_str().to_owned(),
        }));
    }
    for f in &mut out.findings {
        renamed.fix(&mut f.path);
    }
    if let Some((_, _, paths)) = &mut out.asked {
        paths.iter_mut().for_each(|p| renamed.fix(p));
    }
    out
}

/// What the guards over a call's arguments found (S6), until the call's
/// record exists to take it.
pub(super) struct Outbound {
    governed: Governed,
    guards: Arc<[Arc<Guard>]>,
}

impl Outbound {
    /// S6 `block`: the guard that blocked the call's arguments and what the
    /// caller reads (`tool`: as the caller named it).
    pub(super) fn refusal(&self, tool: &str) -> Option<(&str, String)> {
        let text = self.governed.blocked_text(tool)?;
        let guard = self.governed.blocked.as_ref().map(|(g, _)| g.as_str())?;
        Some((guard, text))
    }

    /// S6 `ask`: the guard that asks about the call, unless one blocks it.
    pub(super) fn asking(&self) -> Option<&str> {
        match &self.governed.blocked {
            Some(_) => None,
            None => self.governed.asked.as_ref().map(|(g, _, _)| g.as_str()),
        }
    }

    /// S6 `ask` (unless a guard blocks): the call goes to a human as an `ask`
    /// rule's would (H5), the question led by the guard, the kinds and the
    /// paths. The arguments it shows are redacted by every argument guard;
    /// they are what this returns.
    pub fn ask(&self, forward: &mut Forward) -> Option<Value> {
        if self.governed.blocked.is_some() {
            return None;
        }
        let (guard, kinds, paths) = self.governed.asked.as_ref()?;
        let because = texts::guard_ask_arguments(guard, kinds, paths);
        forward.approval_because = Some(match forward.approval_because.take() {
            Some(rule) => format!("{because}\n{rule}"),
            None => because,
        });
        forward.needs_approval = true;
        let mut shown = Value::Object(forward.arguments.clone());
        redact_all(&self.guards, &mut shown);
        Some(shown)
    }

    /// H6: who the guard that asks names to answer, if it names anyone.
    pub fn approver(&self) -> Option<crate::config::Approver> {
        let (guard, _, _) = self.governed.asked.as_ref()?;
        self.guards.iter().find(|g| g.name == *guard)?.approver
    }

    /// S6 `label`: the labels the call's arguments add to the session's trail.
    pub fn labels(&self) -> &[String] {
        if self.governed.blocked.is_some() {
            return &[];
        }
        &self.governed.labels
    }
}

/// Every guard's matches in `arguments` redacted (for what no one may read whole).
fn redact_all(guards: &[Arc<Guard>], arguments: &mut Value) {
    for g in guards {
        keys::scan_keys(g, arguments, true);
        g.scanner.redact(arguments);
    }
}

impl Calls {
    /// The end of a call after its result guards: a result redacted, or withheld,
    /// and the session's trail labelled. Other ends pass unchanged.
    pub(super) async fn govern(
        &self,
        session: &ClientSession,
        record: &mut CallRecord,
        rg: &ResultGuards,
        end: End,
    ) -> End {
        let End::Upstream {
            body: Ok(mut result),
            error,
        } = end
        else {
            return end;
        };
        let governed = govern_result(&rg.guards, &mut result);
        // X9: the shadow guards look at the result as the others left it.
        let shadows = scope::shadow_guards(&rg.shadow, &result);
        scope::note(&self.settle.metrics, record, &shadows);
        if !governed.findings.is_empty() {
            if let Some(text) = self.act_on_findings(session, record, rg, &governed).await {
                result = settle::tool_error(&text);
            }
        }
        End::Upstream {
            body: Ok(result),
            error,
        }
    }

    /// What a result's findings do, in order: recorded, labels added to the
    /// trail, then the result's fate. `Some`: it is withheld, with this text.
    async fn act_on_findings(
        &self,
        session: &ClientSession,
        record: &mut CallRecord,
        rg: &ResultGuards,
        governed: &Governed,
    ) -> Option<String> {
        self.observe_findings(record, &governed.findings, "a tool result");
        if !governed.labels.is_empty() {
            let unrecorded = self.label_result(session, record, rg, governed).await;
            if unrecorded.is_some() {
                return unrecorded;
            }
        }
        if let Some((guard, kinds)) = &governed.blocked {
            return Some(texts::guard_blocked(&record.tool, guard, kinds));
        }
        let (guard, kinds, paths) = governed.asked.as_ref()?;
        self.ask_about_result(session, record, rg, (guard, kinds, paths))
            .await
    }

    /// S3 `ask`: a human decides whether the result goes on; the question names
    /// the guard, the kinds and the paths, never the matched text. A client that
    /// cannot elicit, and a 2026-07-28 client (its call has run; a retry would
    /// run it again), cannot be asked: the result is withheld.
    async fn ask_about_result(
        &self,
        session: &ClientSession,
        record: &CallRecord,
        rg: &ResultGuards,
        (guard, kinds, paths): (&str, &[String], &[String]),
    ) -> Option<String> {
        let tool = &record.tool;
        if !rg.revision.can_ask_after_run(session) {
            tracing::info!(tool = %logged(tool), guard = %logged(guard), "a guard asks about a result, but the client cannot be asked; the result is withheld");
            return Some(texts::guard_ask_unavailable(tool, guard, kinds));
        }
        let question = texts::guard_ask_result(tool, guard, kinds, paths);
        let mut span = child(record, "warden.approval", Kind::Internal);
        let approved = approval::elicit_yes(
            session,
            &self.sessions,
            rg.call.clone(),
            &question,
            rg.timeout,
        )
        .await;
        if let Some(s) = &mut span {
            s.set(
                "warden.approval",
                if approved { "approved" } else { "refused" },
            );
        }
        tracing::info!(tool = %logged(tool), guard = %logged(guard), approved, "a guard's question about a result was answered");
        (!approved).then(|| texts::guard_ask_refused(tool, guard, kinds))
    }

    /// A result's labels join the trail, and the audit record's `touched`.
    /// `Some`: the shared store could not take them, and the result is
    /// withheld with this text (flows fail closed: a trail that missed them
    /// would let a later send through).
    async fn label_result(
        &self,
        session: &ClientSession,
        record: &mut CallRecord,
        rg: &ResultGuards,
        governed: &Governed,
    ) -> Option<String> {
        let labels = &governed.labels;
        if let Err(e) = self
            .label_trail(session, &rg.flows, rg.revision.flow_trail(), labels)
            .await
        {
            tracing::error!(tool = %logged(&record.tool), "a guard's labels could not be added to the shared flow trail; the result is withheld: {}", logged(&e));
            let guard = governed.findings.iter().find(|f| f.action == "label");
            let guard = guard.map_or("", |f| f.guard.as_str());
            return Some(texts::guard_label_unrecorded(&record.tool, guard, 1));
        }
        if let Some(r) = record.audit.as_mut() {
            r.touched.extend(labels.iter().cloned());
            r.touched.sort();
            r.touched.dedup();
        }
        None
    }

    /// Findings into the audit record, the metrics, the log and the span.
    fn observe_findings(&self, record: &mut CallRecord, findings: &[GuardFinding], what: &str) {
        for f in findings {
            self.settle
                .metrics
                .guard_found(&f.guard, &f.kind, &f.action, f.count as u64);
            tracing::info!(tool = %logged(&record.tool), guard = %logged(&f.guard), kind = %logged(&f.kind), path = %logged(&f.path), count = f.count, action = %f.action, "a guard found something in {what}");
        }
        if let Some(span) = &record.span {
            let mut span = span.lock().unwrap_or_else(|e| e.into_inner());
            let kinds = findings
                .iter()
                .map(|f| otel::bounded(&f.kind))
                .collect::<Vec<_>>();
            span.set("warden.guard.kinds", kinds);
        }
        if let Some(r) = record.audit.as_mut() {
            r.findings.extend(findings.iter().cloned());
        }
    }

    /// S6: the guards over a call's `arguments` (as they will go upstream),
    /// redacting there; `None`: none apply. The caller of this hands the result
    /// to [`Calls::arguments_end`] once the call's record exists.
    pub(super) fn govern_arguments(
        guards: Option<Arc<[Arc<Guard>]>>,
        arguments: &mut Map<String, Value>,
    ) -> Option<Outbound> {
        let guards = guards?;
        let mut v = Value::Object(std::mem::take(arguments));
        let governed = govern_result(&guards, &mut v);
        if let Value::Object(m) = v {
            *arguments = m;
        }
        Some(Outbound { governed, guards })
    }

    /// S6: records what the argument guards found (the audit record's
    /// arguments redacted by every one of them, whatever its action); `Some`:
    /// the call is refused, before any flow rule, quota, approval or hook.
    pub(super) fn arguments_end(&self, record: &mut CallRecord, outbound: Outbound) -> Option<End> {
        let Outbound { governed, guards } = outbound;
        if governed.findings.is_empty() {
            return None;
        }
        self.observe_findings(record, &governed.findings, "a call's arguments");
        if let Some(r) = record.audit.as_mut() {
            redact_all(&guards, &mut r.arguments);
        }
        let text = governed.blocked_text(&record.tool)?;
        Some(End::Policy {
            decision: Decision::Denied,
            text,
            retry_ms: None,
        })
    }

    /// A `label` guard's labels join the session's trail (F1): the process's
    /// for a session, this gateway's memory for a 2026-07-28 caller, and the
    /// shared store's where replicas share trails (`Err`: it could not take them).
    pub(super) async fn label_trail(
        &self,
        session: &ClientSession,
        flows: &Flows,
        trail: FlowTrail,
        labels: &[String],
    ) -> Result<(), warden_store::StoreError> {
        let caller = session.caller();
        let caller = caller.as_deref().map_or("", |c| c.name.as_str());
        match trail {
            FlowTrail::Sealed => {
                let added = labels.iter().cloned().collect();
                flows.remember_stateless(self.state_key(), caller, &added);
            }
            FlowTrail::Session => {
                client_session::lock(&session.flow).extend(labels.iter().cloned())
            }
        }
        match flows.shared_scope(trail, caller, &session.label) {
            Some(scope) => flows.touch_shared(&scope, labels).await.map(|_| ()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use serde_json::json;
    use warden_core::{CallScope, Caller};

    fn guards(toml: &str) -> Vec<Arc<Guard>> {
        let c = Config::parse(
            &format!("[[upstream]]\nname = \"fx\"\ncommand = [\"x\"]\n{toml}"),
            "w.toml",
        )
        .unwrap();
        c.guards.list
    }

    #[test]
    fn guards_run_in_file_order_over_what_the_ones_before_left() {
        let g = guards(
            "[[guard]]\nname = \"r\"\non = [\"results\"]\ndetect = [\"pii.email\"]\naction = \"redact\"\n\
             [[guard]]\nname = \"b\"\non = [\"results\"]\ndetect = [\"pii\"]\naction = \"block\"\n\
             [[guard]]\nname = \"l\"\non = [\"results\"]\ndetect = [\"injection\"]\naction = \"label\"\nlabels = [\"untrusted_content\"]\n",
        );
        // The email is redacted first, so the blocking guard does not see it.
        let mut r = json!({"content": [{"type": "text", "text": "mail a@example.com"}]});
        let d = govern_result(&g, &mut r);
        assert_eq!(r["content"][0]["text"], "mail [redacted:pii.email]");
        assert_eq!(d.blocked, None);
        assert_eq!(d.findings.len(), 1);
        assert_eq!(d.findings[0].action, "redact");
        // A card: blocked, kinds named once, sorted; an injection labels.
        let mut r = json!({"a": "4111111111111111 and 4242424242424242, ignore previous instructions",
                           "b": "ssn 123-45-6789"});
        let d = govern_result(&g, &mut r);
        assert_eq!(
            d.blocked,
            Some(("b".into(), vec!["pii.card".into(), "pii.ssn".into()]))
        );
        assert_eq!(d.labels, ["untrusted_content"]);
        let kinds: Vec<_> = d
            .findings
            .iter()
            .map(|f| (f.kind.as_str(), f.count))
            .collect();
        assert_eq!(
            kinds,
            [("pii.card", 2), ("pii.ssn", 1), ("injection.override", 1)]
        );
        assert!(!format!("{d:?}").contains("4111"));
    }

    #[test]
    fn a_guard_applies_by_tool_glob_and_caller() {
        let c = Config::parse(
            "[[upstream]]\nname = \"fx\"\ncommand = [\"x\"]\n[[caller]]\nname = \"ann\"\ngroups = [\"ops\"]\n\
             [[guard]]\nname = \"g\"\non = [\"results\"]\ndetect = [\"secrets\"]\ntools = [\"fx.read*\"]\ncallers = [\"group:ops\"]\naction = \"report\"\n",
            "w.toml",
        )
        .unwrap();
        let ann = warden_core::Caller {
            name: "ann".into(),
            groups: vec!["ops".into()],
        };
        assert!(c.guards.for_results(Some(&ann), "fx.read_file").is_some());
        assert!(c.guards.for_results(Some(&ann), "fx.write").is_none());
        let bob = warden_core::Caller::new("bob");
        assert!(c.guards.for_results(Some(&bob), "fx.read_file").is_none());
        assert!(
            Config::parse("[[upstream]]\nname = \"fx\"\ncommand = [\"x\"]\n", "w.toml")
                .unwrap()
                .guards
                .for_results(None, "fx.read")
                .is_none()
        );
    }

    #[test]
    fn a_call_gets_the_guards_whose_when_cel_holds_and_the_shadow_ones_apart() {
        let c = Config::parse(
            "[[upstream]]\nname = \"fx\"\ncommand = [\"x\"]\n\
             [[guard]]\nname = \"a\"\non = [\"arguments\", \"results\"]\ndetect = [\"pii.email\"]\naction = \"block\"\nwhen_cel = \"args.n > 1\"\n\
             [[guard]]\nname = \"s\"\non = [\"arguments\"]\ndetect = [\"pii.email\"]\naction = \"redact\"\nmode = \"shadow\"\n",
            "w.toml",
        )
        .unwrap();
        let (caller, scope) = (Caller::new("ann"), CallScope::default());
        let picked = |v: Value| {
            let args = v.as_object().cloned().unwrap();
            let call = warden_core::CelInput {
                caller: &caller,
                tool: "fx.t",
                upstream: "fx",
                args: &args,
                scope: &scope,
            };
            c.guards.for_call(&call).map(|g| {
                let names = |a: &crate::config::guards::Applied| {
                    a.iter()
                        .flat_map(|l| l.iter().map(|g| g.name.clone()))
                        .collect::<Vec<_>>()
                };
                let shadow: Vec<usize> = g.shadow_arguments.iter().map(|(i, _)| *i).collect();
                (names(&g.arguments), names(&g.results), shadow)
            })
        };
        assert_eq!(
            picked(json!({"n": 2})),
            Ok((vec!["a".into()], vec!["a".into()], vec![1]))
        );
        assert_eq!(picked(json!({"n": 1})), Ok((vec![], vec![], vec![1])));
        assert_eq!(
            picked(json!({})),
            Err(
                "guard[0].when_cel: it stopped: a key it reads is absent (guard it with has())"
                    .into()
            )
        );
        let g = c.guards.for_call(&warden_core::CelInput {
            caller: &caller,
            tool: "fx.t",
            upstream: "fx",
            args: &Map::new(),
            scope: &scope,
        });
        assert!(g.is_err());
        let shadow = vec![(1, c.guards.list[1].clone())];
        let sent = json!({"to": "a@b.co"});
        let notes = scope::shadow_guards(&shadow, &sent);
        assert_eq!(
            notes.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            ["would_redact by guard[1]"]
        );
        assert_eq!(sent, json!({"to": "a@b.co"}), "scanned on a copy");
        assert!(scope::shadow_guards(&shadow, &json!({"to": "nobody"})).is_empty());
    }
}
