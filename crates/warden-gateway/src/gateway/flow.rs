//! Session flow policy (F1-F4): what a session has touched decides what it may
//! call next.
//!
//! Tools carry labels from config (`private_data`, `untrusted_content`,
//! `external_sink`, or any an operator names). A session's trail is the set of
//! labels of the calls it was let through. A `[[flow]]` rule stops a call that
//! carries its `calling` label once the trail, with the call's own labels added,
//! holds every label of its `touched` list: so a tool that both reads untrusted
//! content and sends data out is stopped after private data was read, even though
//! the session never touched untrusted content before. A `deny` rule refuses the
//! call with the rule's reason; an `ask` rule puts it to a human through the
//! approval path of `ask` access rules. A denial beats an ask.
//!
//! The session is the client session (stdio, or an HTTP `Mcp-Session-Id`). A
//! 2026-07-28 client has none, so its trail is carried in a sealed flow context
//! ([`FlowContexts`]) handed back in every `tools/call` result's `_meta` and read
//! from the next request's, and also remembered per caller by this gateway: a
//! client that drops or alters its context still meets what it touched here, and
//! a replica that shares the sealing secret accepts the context another replica
//! sealed.
//!
//! With a shared PostgreSQL store, the trails of sessions that can move between
//! replicas are also kept there: a 2026-07-28 caller's under the caller's name
//! (which the client cannot shed), so a client that drops its context and moves
//! to another replica still meets what it touched; an HTTP session's under its
//! session id, so the replica that takes the session up knows its trail. A
//! labelled call reads it before it is decided and adds its labels once let
//! through; when the store cannot answer, the call is refused (flows fail
//! closed). Calls without labels neither read nor write it. A stdio session
//! never moves: its trail stays in the process.

use super::rev2026::{unix_now, FlowTrail, StateKey};
use crate::config::limits::{Flow, FlowEffect, Labels};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use warden_store::{Postgres, StoreError};

/// The `_meta` key that carries a 2026-07-28 client's sealed flow context, in
/// results from the gateway and in requests back to it.
pub const FLOW_META_KEY: &str = "warden/flowContext";

/// How an HTTP session's trail is named in the shared store (then `http:<sid>`).
const SESSION_SCOPE: &str = "session:";

/// The labels a session has touched.
pub type Trail = BTreeSet<String>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the flow rules say about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowDecision {
    Pass,
    /// Refused: the rule's reason.
    Deny(String),
    /// Runs once a human approves: the rule's reason, and who it names to
    /// answer (H6; `None`: `[access] approver`).
    Ask(String, Option<crate::config::Approver>),
    /// A rule's `when_cel` failed (X3): refused closed; the note is the operator's.
    Failed(String),
}

impl FlowDecision {
    /// What the caller reads of a call the flow rules refuse (F2, X3; `tool`
    /// as the caller named it); `None`: they do not refuse it. The gateway and
    /// the offline judge (X11) both answer with it.
    pub fn refusal(&self, tool: &str) -> Option<String> {
        match self {
            FlowDecision::Deny(reason) => Some(crate::texts::flow_denied(tool, reason)),
            FlowDecision::Failed(_) => Some(warden_core::answer::CONDITION_FAILED.to_owned()),
            FlowDecision::Pass | FlowDecision::Ask(..) => None,
        }
    }
}

/// The flow rules and tool labels of one gateway.
pub struct Flows {
    rules: Vec<Flow>,
    labels: Labels,
    /// 2026-07-28 trails remembered per caller, and when last used.
    stateless: Mutex<HashMap<String, (Trail, Instant)>>,
    /// A stateless trail not used for this long is forgotten (and its sealed
    /// context expires with it).
    idle: Duration,
    /// How long an HTTP session's id is good for (`gateway.session_lifetime`):
    /// its trail in the shared store is kept as long after its last labelled
    /// call, so whenever the id is taken up again its trail comes back with it.
    lifetime: Duration,
    /// Where replicas keep stateless trails together.
    shared: Option<Postgres>,
}

impl Flows {
    pub fn new(
        rules: Vec<Flow>,
        labels: Labels,
        (idle, lifetime): (Duration, Duration),
        shared: Option<Postgres>,
    ) -> Flows {
        Flows {
            rules,
            labels,
            stateless: Mutex::new(HashMap::new()),
            idle,
            lifetime,
            shared,
        }
    }

    /// Where the shared store keeps a trail: a 2026-07-28 caller's (`trail`
    /// [`FlowTrail::Sealed`]), or an HTTP session's (its audit label,
    /// `http:<sid>`); `None` without a shared store or for a session that
    /// never moves.
    pub fn shared_scope(&self, trail: FlowTrail, caller: &str, session: &str) -> Option<String> {
        self.shared.as_ref()?;
        match trail {
            FlowTrail::Sealed => Some(format!("caller:{caller}")),
            FlowTrail::Session if session.starts_with("http:") && session != "http:stateless" => {
                Some(format!("{SESSION_SCOPE}{session}"))
            }
            FlowTrail::Session => None,
        }
    }

    /// A trail in the shared store (see [`Flows::shared_scope`]).
    pub async fn shared_trail(&self, scope: &str) -> Result<Trail, StoreError> {
        match &self.shared {
            Some(pg) => Ok(pg.flow_trail(scope).await?.into_iter().collect()),
            None => Ok(Trail::new()),
        }
    }

    /// Adds a call's labels to a trail in the shared store; the whole trail there.
    /// A stateless caller's is kept `session_idle`, as its sealed context; an
    /// HTTP session's as long as its id may still be taken up (F3).
    pub async fn touch_shared(&self, scope: &str, labels: &[String]) -> Result<Trail, StoreError> {
        let keep = if scope.starts_with(SESSION_SCOPE) {
            self.lifetime
        } else {
            self.idle
        };
        match &self.shared {
            Some(pg) => Ok(pg
                .touch_flow(scope, labels, keep)
                .await?
                .into_iter()
                .collect()),
            None => Ok(Trail::new()),
        }
    }

    /// Whether a rule has a `when_cel` (X1).
    pub fn has_cel(&self) -> bool {
        self.rules.iter().any(|r| r.cel.is_some())
    }

    /// Whether flow policy is on at all (rules and labels configured).
    pub fn on(&self) -> bool {
        !self.rules.is_empty() && !self.labels.is_empty()
    }

    /// The labels of a tool (the upstream's own name) on `upstream`.
    pub fn labels_of(&self, upstream: &str, tool: &str) -> Vec<String> {
        self.labels.of(upstream, tool)
    }

    /// The rules' decision on a call carrying `labels` in a session that has touched `trail`.
    /// A rule with `when_cel` stops the call only where it holds for `call`
    /// (X1); without the call to read, or where it fails, the call fails closed.
    /// Shadow rules (X9) are passed over.
    pub fn decide(
        &self,
        trail: &Trail,
        labels: &[String],
        call: Option<&warden_core::CelInput<'_>>,
    ) -> FlowDecision {
        self.decide_in((trail, labels), call, false).0
    }

    /// X9: what the shadow rules would have made of the call, where it differs
    /// from the enforced decision (a failed expression would deny).
    pub fn shadow_verdict(
        &self,
        trail: &Trail,
        labels: &[String],
        call: Option<&warden_core::CelInput<'_>>,
    ) -> Option<warden_core::Shadowed> {
        if !self.rules.iter().any(|r| r.shadow) {
            return None;
        }
        let word = |d: &FlowDecision| match d {
            FlowDecision::Pass => "would_allow",
            FlowDecision::Ask(..) => "would_ask",
            FlowDecision::Deny(_) | FlowDecision::Failed(_) => "would_deny",
        };
        let (enforced, _) = self.decide_in((trail, labels), call, false);
        let (would, rule) = self.decide_in((trail, labels), call, true);
        (word(&would) != word(&enforced)).then(|| warden_core::Shadowed {
            would: word(&would),
            of: "flow",
            rule,
        })
    }

    /// [`Flows::decide`] and the rule that decided, shadow rules enforced or
    /// passed over.
    /// [`Flows::decide`], with the rule that decided (the offline judge, X11).
    pub(crate) fn decide_by(
        &self,
        trail: &Trail,
        labels: &[String],
        call: Option<&warden_core::CelInput<'_>>,
    ) -> (FlowDecision, Option<usize>) {
        self.decide_in((trail, labels), call, false)
    }

    fn decide_in(
        &self,
        (trail, labels): (&Trail, &[String]),
        call: Option<&warden_core::CelInput<'_>>,
        shadow: bool,
    ) -> (FlowDecision, Option<usize>) {
        let mut ask = None;
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.shadow && !shadow {
                continue;
            }
            let carries = labels.contains(&rule.calling);
            let completes = rule
                .touched
                .iter()
                .all(|l| trail.contains(l) || labels.contains(l));
            if !(carries && completes) {
                continue;
            }
            if rule.cel.is_some() {
                let held = match call {
                    Some(c) => crate::config::limits::holds(rule.cel.as_ref(), c),
                    None => Err("when_cel: no call to read".to_owned()),
                };
                match held {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => return (FlowDecision::Failed(format!("flow[{i}].{e}")), Some(i)),
                }
            }
            match rule.effect {
                FlowEffect::Deny => return (FlowDecision::Deny(rule.reason.clone()), Some(i)),
                FlowEffect::Ask => {
                    ask.get_or_insert_with(|| (rule.reason.clone(), rule.approver, i));
                }
            }
        }
        ask.map_or((FlowDecision::Pass, None), |(r, approver, i)| {
            (FlowDecision::Ask(r, approver), Some(i))
        })
    }

    /// A 2026-07-28 caller's trail: what this gateway remembers for it, with what
    /// its sealed context says when the context opens for this caller.
    pub fn stateless_trail(&self, key: &StateKey, caller: &str, context: Option<&Value>) -> Trail {
        let mut trail = {
            let mut all = lock(&self.stateless);
            let now = Instant::now();
            all.retain(|_, (_, used)| now.duration_since(*used) < self.idle);
            all.get(caller).map(|(t, _)| t.clone()).unwrap_or_default()
        };
        if let Some(sealed) = context.and_then(Value::as_str) {
            match open_context(key, sealed, caller, unix_now()) {
                Some(labels) => trail.extend(labels),
                None => {
                    tracing::info!(caller = %crate::logged::logged(caller), "a flow context that does not open (altered, expired, another caller's or another gateway's) was ignored")
                }
            }
        }
        trail
    }

    /// Adds a stateless caller's call to its remembered trail; returns the trail
    /// sealed for the result's `_meta`.
    pub fn remember_stateless(&self, key: &StateKey, caller: &str, trail: &Trail) -> String {
        let mut all = lock(&self.stateless);
        let entry = all
            .entry(caller.to_owned())
            .or_insert_with(|| (Trail::new(), Instant::now()));
        entry.0.extend(trail.iter().cloned());
        entry.1 = Instant::now();
        seal_context(key, caller, &entry.0, unix_now() + self.idle.as_secs())
    }
}

/// Seals a caller's trail until `until` (unix seconds).
fn seal_context(key: &StateKey, caller: &str, trail: &Trail, until: u64) -> String {
    let payload = json!({"k": "flow", "c": caller, "l": trail, "e": until});
    key.seal_value(&payload)
}

/// The labels in a sealed context, when it was sealed by `key` for `caller` and
/// has not expired.
fn open_context(key: &StateKey, token: &str, caller: &str, now: u64) -> Option<Vec<String>> {
    let v = key.open_value(token)?;
    let ok = v["k"] == "flow" && v["c"] == caller && v["e"].as_u64().is_some_and(|e| e >= now);
    if !ok {
        return None;
    }
    Some(
        v["l"]
            .as_array()?
            .iter()
            .filter_map(|l| Some(l.as_str()?.to_owned()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn flows() -> Flows {
        let c = Config::parse(
            "[[upstream]]\nname = \"p\"\ncommand = [\"x\"]\nlabels = { \"*\" = [\"private_data\"] }\n\
             [[upstream]]\nname = \"w\"\ncommand = [\"x\"]\nlabels = { fetch = [\"untrusted_content\", \"external_sink\"], read = [\"untrusted_content\"] }\n\
             [[upstream]]\nname = \"m\"\ncommand = [\"x\"]\nlabels = { \"send*\" = [\"external_sink\"] }\n\
             [[flow]]\ntouched = [\"private_data\", \"untrusted_content\"]\ncalling = \"external_sink\"\neffect = \"deny\"\n\
             [[flow]]\ntouched = [\"private_data\"]\ncalling = \"external_sink\"\neffect = \"ask\"\nreason = \"Private data was read.\"\n",
            "w.toml",
        )
        .unwrap();
        Flows::new(
            c.limits.flows,
            c.limits.labels,
            (Duration::from_secs(60), Duration::from_secs(600)),
            None,
        )
    }

    fn trail(labels: &[&str]) -> Trail {
        labels.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn the_trifecta_in_any_order_and_a_tool_that_is_two_of_it() {
        let f = flows();
        assert_eq!(
            f.labels_of("w", "fetch"),
            ["external_sink", "untrusted_content"]
        );
        assert_eq!(f.labels_of("m", "send_mail"), ["external_sink"]);
        assert!(f.labels_of("m", "list").is_empty());
        let sink = f.labels_of("m", "send_mail");
        assert_eq!(f.decide(&trail(&[]), &sink, None), FlowDecision::Pass);
        assert_eq!(
            f.decide(&trail(&["untrusted_content"]), &sink, None),
            FlowDecision::Pass
        );
        assert_eq!(
            f.decide(&trail(&["private_data"]), &sink, None),
            FlowDecision::Ask("Private data was read.".into(), None)
        );
        let denied = FlowDecision::Deny("This session has already used tools labelled 'private_data' and 'untrusted_content', and this tool is labelled 'external_sink': together they could send what was read out of the session.".into());
        assert_eq!(
            f.decide(&trail(&["private_data", "untrusted_content"]), &sink, None),
            denied
        );
        assert_eq!(
            f.decide(&trail(&["untrusted_content", "private_data"]), &sink, None),
            denied
        );
        // Fetching a page after reading private data completes the trifecta by itself.
        assert_eq!(
            f.decide(&trail(&["private_data"]), &f.labels_of("w", "fetch"), None),
            denied
        );
    }

    #[test]
    fn stateless_contexts_are_sealed_per_caller_and_remembered() {
        let f = flows();
        let key = StateKey::random();
        let sealed = f.remember_stateless(&key, "alice", &trail(&["private_data"]));
        let fresh = Flows::new(
            Vec::new(),
            Labels::default(),
            (Duration::from_secs(60), Duration::from_secs(600)),
            None,
        );
        // Another replica with the same key reads the context.
        let v = Value::String(sealed.clone());
        assert_eq!(
            fresh.stateless_trail(&key, "alice", Some(&v)),
            trail(&["private_data"])
        );
        // Not for another caller, not with another key, not altered.
        assert!(fresh.stateless_trail(&key, "bob", Some(&v)).is_empty());
        assert!(fresh
            .stateless_trail(&StateKey::random(), "alice", Some(&v))
            .is_empty());
        let altered = Value::String(format!("x{sealed}"));
        assert!(fresh
            .stateless_trail(&key, "alice", Some(&altered))
            .is_empty());
        // The gateway that saw the call remembers it without the context.
        assert_eq!(
            f.stateless_trail(&key, "alice", None),
            trail(&["private_data"])
        );
    }

    #[test]
    fn a_shadow_flow_rule_is_noted_and_never_stops_a_call() {
        let c = Config::parse(
            "[[upstream]]\nname = \"m\"\ncommand = [\"x\"]\nlabels = { \"send*\" = [\"external_sink\"] }\n\
             [[flow]]\ntouched = [\"private_data\"]\ncalling = \"external_sink\"\neffect = \"ask\"\nmode = \"shadow\"\n\
             [[flow]]\ntouched = [\"private_data\"]\ncalling = \"external_sink\"\neffect = \"deny\"\nmode = \"shadow\"\nwhen_cel = \"args.to != 'me'\"\n",
            "w.toml",
        )
        .unwrap();
        let f = Flows::new(
            c.limits.flows,
            c.limits.labels,
            (Duration::from_secs(60), Duration::from_secs(600)),
            None,
        );
        let (caller, scope) = (
            warden_core::Caller::new("a"),
            warden_core::CallScope::default(),
        );
        let args = |v: Value| v.as_object().cloned().unwrap();
        let (them, me, none) = (
            args(json!({"to": "x"})),
            args(json!({"to": "me"})),
            args(json!({})),
        );
        let call = |args| warden_core::CelInput {
            caller: &caller,
            tool: "m.send",
            upstream: "m",
            args,
            scope: &scope,
        };
        let sink = f.labels_of("m", "send");
        let read = trail(&["private_data"]);
        let note = |a| {
            f.shadow_verdict(&read, &sink, Some(&call(a)))
                .map(|s| s.to_string())
        };
        for a in [&them, &me, &none] {
            assert_eq!(f.decide(&read, &sink, Some(&call(a))), FlowDecision::Pass);
        }
        assert_eq!(note(&them).as_deref(), Some("would_deny by flow[1]"));
        assert_eq!(note(&me).as_deref(), Some("would_ask by flow[0]"));
        // The expression fails: enforced, it would refuse the call closed.
        assert_eq!(note(&none).as_deref(), Some("would_deny by flow[1]"));
        assert_eq!(
            f.shadow_verdict(&trail(&[]), &sink, Some(&call(&them))),
            None
        );
    }
}
