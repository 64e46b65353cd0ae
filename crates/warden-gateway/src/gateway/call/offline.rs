//! One call judged offline (X11): the stages of the call path that need no
//! upstream, in the gateway's order, with the gateway's own functions and
//! texts. The tool's existence and visibility for the caller, the argument
//! stages (reasons, aliases, unknown keys, pins, schema) and the access rules
//! with `when` and `when_cel` are warden-core's pipeline, the very one a live
//! call runs; then the guards on the arguments and the flow rules over a given
//! trail, answered with the texts `Outbound::refusal` and
//! [`FlowDecision::refusal`] give the gateway. Quotas, the ledger, approval and
//! hooks keep state or ask someone: they are not judged.
//!
//! `mcp-warden replay` (X5) and `mcp-warden policy test` (X7) both judge with it.

use super::Calls;
use crate::config::Config;
use crate::gateway::flow::{FlowDecision, Flows, Trail};
use crate::gateway::settle::Decision;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use warden_core::{
    answer, CallScope, Caller, Catalogue, CelInput, Effect, Outcome, Pipeline, Refusal, Rules,
    Session,
};

/// A configuration's offline judge: its pipeline, rules, guards and flow
/// rules, over a catalogue of the tools the pins lock declares.
pub struct Offline {
    pipeline: Pipeline,
    rules: Arc<Rules>,
    catalogue: Catalogue,
    guards: crate::config::guards::Guards,
    flows: Flows,
    session: Session,
    /// Upstreams no pins lock declares: their tools are made as they are
    /// called, with an open schema (unknown keys and the schema not judged).
    undeclared: HashSet<String>,
}

/// One call to judge.
pub struct OfflineCall<'a> {
    pub caller: &'a Caller,
    /// The tool as the caller names it.
    pub tool: &'a str,
    /// The arguments as the caller sends them.
    pub arguments: Map<String, Value>,
    /// What `when_cel` reads of the call; its `tool_labels` and
    /// `session_labels` are the judge's to fill (the tool's labels under this
    /// configuration, and `trail`).
    pub scope: CallScope,
    /// The flow labels the call's session touched before it (F1).
    pub trail: &'a Trail,
}

/// What the configuration makes of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    pub effect: Effect,
    /// What decided: `rule[<i>]`, `default`, `guard[<i>]`, `flow[<i>]`,
    /// `arguments` (an argument stage) or `tool` (no such tool).
    pub by: String,
    /// For `deny`, the text the caller reads; for `ask`, the reason the human
    /// reads first, when there is one.
    pub message: Option<String>,
    /// How the gateway's audit would record the call's decision (`allowed`,
    /// `denied`, `unknown_tool`, `invalid_arguments`, `flow_denied`).
    pub decision: &'static str,
    /// The tool's input schema is unknown (no pins lock declares it): unknown
    /// keys and the schema were not judged.
    pub schema_skipped: bool,
}

fn rule_name(rule: Option<usize>) -> String {
    rule.map_or("default".to_owned(), |i| format!("rule[{i}]"))
}

impl Offline {
    /// The judge of `config`. Tools come from the pins lock beside it; for an
    /// upstream it does not declare, from `called` (the tools as callers name
    /// them, with their upstream when known; a name is read as prefixed by its
    /// upstream's name when that upstream prefixes, else as an unprefixed
    /// upstream's).
    pub fn new<'a>(
        config: &Config,
        called: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) -> Result<Offline, String> {
        let lock = crate::pins::Lock::read(&crate::pins::lock_path(&config.path))?;
        let policy = config.policy();
        let mut builder = Catalogue::builder(&policy);
        let mut undeclared = HashSet::new();
        for up in &config.upstream {
            match lock.as_ref().and_then(|l| l.upstreams.get(&up.name)) {
                Some(tools) => {
                    let tools: Vec<Value> = tools.values().cloned().collect();
                    builder.add_upstream(&up.name, up.prefix, &tools);
                }
                None => {
                    undeclared.insert(up.name.clone());
                }
            }
        }
        let made = made_tools(config, &undeclared, called);
        for up in config
            .upstream
            .iter()
            .filter(|u| undeclared.contains(&u.name))
        {
            if let Some(tools) = made.get(&up.name) {
                builder.add_upstream(&up.name, up.prefix, tools);
            }
        }
        let (catalogue, _) = builder.build();
        let rules = Arc::new(config.rules());
        let flows = Flows::new(
            config.limits.flows.clone(),
            config.limits.labels.clone(),
            (Duration::from_secs(1800), Duration::from_secs(86_400)),
            None,
        );
        Ok(Offline {
            pipeline: Pipeline::new().with_grant(rules.clone(), rules.clone()),
            rules,
            catalogue,
            guards: config.guards.clone(),
            flows,
            session: Session::new(Arc::new(|_: &warden_core::UnknownKeyWarning| {})),
            undeclared,
        })
    }

    /// The access rules it judges with.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// Judges one call, in the gateway's order: the pipeline (G, N, R, A,
    /// G6), the guards on the arguments (S6, X8), the flow rules (F2).
    pub fn judge(&self, call: OfflineCall<'_>) -> Judgement {
        let OfflineCall {
            caller,
            tool,
            arguments,
            mut scope,
            trail,
        } = call;
        let entry = self.catalogue.get(tool);
        let schema_skipped = entry.is_none_or(|e| self.undeclared.contains(&e.upstream));
        if let Some(e) = entry {
            scope.tool_labels = self.flows.labels_of(&e.upstream, &e.upstream_name);
        }
        scope.session_labels = trail.iter().cloned().collect();
        let judged = |effect, by, message, decision: Decision| Judgement {
            effect,
            by,
            message,
            decision: decision.as_str(),
            schema_skipped,
        };
        // Kept to name the rule that refused, which the verdict does not say.
        let sent = arguments.clone();
        let params = json!({"name": tool, "arguments": Value::Object(arguments)});
        let at = (Some(caller), &scope);
        let verdict =
            self.pipeline
                .check_in_scope(&*self.rules, &self.catalogue, &self.session, at, params);
        let forward = match verdict.outcome {
            Outcome::Forward(f) => f,
            Outcome::Answer { answer, refusal } => {
                let by = self.refused_by(refusal, caller, tool, &sent, &scope);
                let text = Some(answer.text().to_owned());
                return judged(Effect::Deny, by, text, Decision::of_refusal(refusal));
            }
        };
        let (effect, by, message, decision) = self.governed((caller, tool), forward, &scope, trail);
        judged(effect, by, message, decision)
    }

    /// A call the pipeline let through: the guards on its arguments (S6,
    /// X8), then the flow rules (F2); an `ask` anywhere asks.
    fn governed(
        &self,
        (caller, tool): (&Caller, &str),
        mut forward: warden_core::Forward,
        scope: &CallScope,
        trail: &Trail,
    ) -> (Effect, String, Option<String>, Decision) {
        let input = CelInput {
            caller,
            tool,
            upstream: &forward.tool.upstream,
            args: &forward.arguments,
            scope,
        };
        let mut by = rule_name(self.rule_of(&input));
        let guards = match self.guards.for_call(&input) {
            Ok(g) => g,
            Err(note) => {
                let guard = note.split('.').next().unwrap_or_default().to_owned();
                let text = Some(answer::CONDITION_FAILED.to_owned());
                return (Effect::Deny, guard, text, Decision::Denied);
            }
        };
        let outbound = Calls::govern_arguments(guards.arguments, &mut forward.arguments);
        if let Some((guard, text)) = outbound.as_ref().and_then(|o| o.refusal(tool)) {
            return (
                Effect::Deny,
                self.guard_name(guard),
                Some(text),
                Decision::Denied,
            );
        }
        if let Some(o) = &outbound {
            if let Some(guard) = o.asking() {
                by = self.guard_name(guard);
            }
            o.ask(&mut forward);
        }
        let labels = outbound.as_ref().map_or(&[][..], |o| o.labels());
        let (flow, i) = self.flow((caller, &forward), scope, (trail, labels));
        let flow_rule = || format!("flow[{}]", i.unwrap_or(0));
        if let Some(text) = flow.refusal(tool) {
            return (Effect::Deny, flow_rule(), Some(text), Decision::FlowDenied);
        }
        if let FlowDecision::Ask(reason, _) = flow {
            let message = forward.approval_because.or(Some(reason));
            return (Effect::Ask, flow_rule(), message, Decision::Allowed);
        }
        match forward.needs_approval {
            true => (Effect::Ask, by, forward.approval_because, Decision::Allowed),
            false => (Effect::Allow, by, None, Decision::Allowed),
        }
    }

    /// X5: the arguments a recorded call that went upstream was sent with, as
    /// near as the record tells: the trail holds them as they went upstream,
    /// so a key this configuration pins to the value recorded is taken as the
    /// gateway's (removed; the pin sets it again) and the `reason` recorded
    /// apart goes back in (R1). Aliases cannot be undone: the canonical names
    /// stand.
    pub fn as_sent(&self, tool: &str, args: &mut Map<String, Value>, reason: Option<&str>) {
        if let Some(entry) = self.catalogue.get(tool) {
            for (k, v) in &entry.policy.pins {
                if args.get(k) == Some(v) {
                    args.shift_remove(k);
                }
            }
        }
        if let Some(r) = reason {
            args.insert("reason".into(), Value::String(r.to_owned()));
        }
    }

    /// F2: the flow rules over the trail, a `label` guard's labels (S6) added.
    fn flow(
        &self,
        (caller, forward): (&Caller, &warden_core::Forward),
        scope: &CallScope,
        (trail, added): (&Trail, &[String]),
    ) -> (FlowDecision, Option<usize>) {
        if !self.flows.on() {
            return (FlowDecision::Pass, None);
        }
        let mut trail = trail.clone();
        trail.extend(added.iter().cloned());
        let scope = CallScope {
            session_labels: trail.iter().cloned().collect(),
            ..scope.clone()
        };
        let input = CelInput {
            caller,
            tool: &forward.tool.name,
            upstream: &forward.tool.upstream,
            args: &forward.arguments,
            scope: &scope,
        };
        self.flows
            .decide_by(&trail, &scope.tool_labels, Some(&input))
    }

    /// The rule that took the access decision on a call (`None`: the default).
    fn rule_of(&self, input: &CelInput<'_>) -> Option<usize> {
        let (effect, by) = self.rules.effect_by(input.caller, input.tool);
        if effect == Effect::Deny {
            return by;
        }
        match self.rules.judge_call(input) {
            None => by,
            Some((_, i)) => i,
        }
    }

    /// What refused a call the pipeline answered.
    fn refused_by(
        &self,
        refusal: Refusal,
        caller: &Caller,
        tool: &str,
        sent: &Map<String, Value>,
        scope: &CallScope,
    ) -> String {
        let Some(entry) = self.catalogue.get(tool) else {
            return "tool".to_owned();
        };
        let input = CelInput {
            caller,
            tool,
            upstream: &entry.upstream,
            args: sent,
            scope,
        };
        match refusal {
            Refusal::UnknownTool => rule_name(self.rules.effect_by(caller, tool).1),
            Refusal::ArgumentRule | Refusal::ConditionFailed => rule_name(self.rule_of(&input)),
            _ => "arguments".to_owned(),
        }
    }

    fn guard_name(&self, name: &str) -> String {
        match self.guards.list.iter().position(|g| g.name == name) {
            Some(i) => format!("guard[{i}]"),
            None => "guard".to_owned(),
        }
    }
}

/// Declarations for the tools called on upstreams no lock declares: the
/// name, and a schema that takes any object.
fn made_tools<'a>(
    config: &Config,
    undeclared: &HashSet<String>,
    called: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> BTreeMap<String, Vec<Value>> {
    let mut seen = HashSet::new();
    let mut made: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let ups: Vec<_> = config
        .upstream
        .iter()
        .filter(|u| undeclared.contains(&u.name))
        .collect();
    for (tool, upstream) in called {
        if !seen.insert(tool) {
            continue;
        }
        let found = ups.iter().find_map(|u| {
            if upstream.is_some_and(|n| n != u.name) {
                return None;
            }
            let own = match u.prefix {
                true => tool.strip_prefix(u.name.as_str())?.strip_prefix('.')?,
                false => tool,
            };
            Some((u.name.clone(), own))
        });
        if let Some((up, own)) = found {
            made.entry(up).or_default().push(json!({
                "name": own,
                "inputSchema": {"type": "object", "additionalProperties": true},
            }));
        }
    }
    made
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = "[[upstream]]\nname = \"drive\"\ncommand = [\"x\"]\nlabels = { \"*\" = [\"private_data\"] }\n\
        [[upstream]]\nname = \"mail\"\ncommand = [\"x\"]\nlabels = { send = [\"external_sink\"] }\n\
        [[flow]]\ntouched = [\"private_data\"]\ncalling = \"external_sink\"\neffect = \"deny\"\nwhen_cel = \"caller.name != 'bob'\"\n\
        [[guard]]\nname = \"tags\"\non = [\"arguments\"]\ndetect = [\"pii.email\"]\naction = \"label\"\nlabels = [\"private_data\"]\n\
        [[guard]]\nname = \"cards\"\non = [\"arguments\"]\ndetect = [\"pii.card\"]\naction = \"block\"\n";

    fn judge(tool: &str, args: Value, trail: &[&str]) -> Judgement {
        judge_as("alice", tool, args, trail)
    }

    fn judge_as(caller: &str, tool: &str, args: Value, trail: &[&str]) -> Judgement {
        let config = Config::parse(CONFIG, "w.toml").unwrap();
        let called = [("drive.read", None), ("mail.send", None)];
        let offline = Offline::new(&config, called).unwrap();
        let trail: Trail = trail.iter().map(|s| (*s).to_owned()).collect();
        offline.judge(OfflineCall {
            caller: &Caller::new(caller),
            tool,
            arguments: args.as_object().unwrap().clone(),
            scope: CallScope::default(),
            trail: &trail,
        })
    }

    #[test]
    fn a_flow_rule_refuses_over_the_trail_it_is_given() {
        let sent = judge("mail.send", json!({"to": "x"}), &[]);
        assert_eq!((sent.effect, sent.by.as_str()), (Effect::Allow, "default"));
        assert!(sent.schema_skipped);
        let after = judge("mail.send", json!({"to": "x"}), &["private_data"]);
        assert_eq!((after.effect, after.by.as_str()), (Effect::Deny, "flow[0]"));
        assert_eq!(after.decision, "flow_denied");
        // The rule's when_cel reads the caller: it passes bob over.
        let bob = judge_as("bob", "mail.send", json!({"to": "x"}), &["private_data"]);
        assert_eq!(bob.effect, Effect::Allow);
        let reason = "This session has already used tools labelled 'private_data', and this tool is labelled 'external_sink': together they could send what was read out of the session.";
        assert_eq!(
            after.message,
            Some(crate::texts::flow_denied("mail.send", reason))
        );
    }

    #[test]
    fn a_label_guard_adds_to_the_trail_and_a_block_guard_refuses() {
        // The call's own arguments carry an address: labelled, then stopped.
        let labelled = judge("mail.send", json!({"to": "a@example.org"}), &[]);
        assert_eq!(
            (labelled.effect, labelled.by.as_str()),
            (Effect::Deny, "flow[0]")
        );
        let card = judge("drive.read", json!({"q": "4111 1111 1111 1111"}), &[]);
        assert_eq!((card.effect, card.by.as_str()), (Effect::Deny, "guard[1]"));
        assert_eq!(
            card.message.as_deref(),
            Some("Error: Tool 'drive.read' was not called: guard 'cards' found pii.card in its arguments. Do not send it in another form; ask the user how to proceed.")
        );
    }

    #[test]
    fn a_tool_no_upstream_serves_is_absent() {
        let absent = judge("web.fetch", json!({}), &[]);
        assert_eq!((absent.effect, absent.by.as_str()), (Effect::Deny, "tool"));
        assert_eq!(absent.decision, "unknown_tool");
        assert_eq!(absent.message.as_deref(), Some("Unknown tool 'web.fetch'."));
    }
}
