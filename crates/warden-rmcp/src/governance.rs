//! What the gateway's configuration decides about one rmcp server's tools, with
//! no rmcp type in sight: the argument policy (unknown keys, aliases, pins,
//! schema, reasons), the access rules, the caller and how tool names are shown.
//!
//! [`Governance::from_config`] reads them out of a checked `warden.toml` with the
//! gateway's own loader, so a server governed in process answers exactly as the
//! gateway would in front of it; [`Governance::new`] and its `with_*` methods
//! build the same values in code.

use serde_json::Value;
use std::sync::Arc;
use warden_core::answer;
use warden_core::provider::Approve;
use warden_core::{
    Caller, Catalogue, Forward, LayeredPolicy, Pipeline, Rules, Session, UnknownKeyWarning,
    Verdict, WarnSink,
};

/// The governance of one server, shared by every connection to it.
#[derive(Clone)]
pub struct Governance {
    /// The server's name, as an `[[upstream]]` of a warden.toml names it.
    upstream: String,
    /// Tools appear as `upstream.tool` (true) or under their own names (false).
    prefix: bool,
    policy: LayeredPolicy,
    /// Kept besides the pipeline's grant, to report what they name that the tools do not declare.
    rules: Arc<Rules>,
    pipeline: Pipeline,
    caller: Caller,
    on_warn: Arc<dyn WarnSink>,
    /// Who approves an `ask` call; without one such calls are refused (H5).
    approve: Option<Approve>,
}

impl std::fmt::Debug for Governance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Governance")
            .field("upstream", &self.upstream)
            .field("prefix", &self.prefix)
            .field("caller", &self.caller)
            .finish_non_exhaustive()
    }
}

/// The configuration names no `[[upstream]]` of that name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the configuration has no [[upstream]] named '{0}'")]
pub struct NoSuchUpstream(pub String);

/// A sink that logs each undeclared key once per connection, as the gateway does.
fn log_warnings() -> Arc<dyn WarnSink> {
    Arc::new(|w: &UnknownKeyWarning| {
        tracing::info!(tool = %logged(&w.tool), keys = %logged(&w.unknown_keys.join(", ")), "undeclared argument keys");
    })
}

/// A server's or a caller's text as it goes into the log: escaped, bounded.
fn logged(text: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut w = answer::Escaping::new(&mut out, 1024);
    let _ = w.write_str(text).and_then(|()| w.finish());
    out
}

impl Governance {
    /// `upstream` names the server; its tools keep their own names, every
    /// caller may call every tool, and undeclared keys are only reported (`warn`):
    /// the built-in defaults of a warden.toml.
    pub fn new(upstream: impl Into<String>) -> Self {
        Governance {
            upstream: upstream.into(),
            prefix: false,
            policy: LayeredPolicy::default(),
            rules: Arc::new(Rules::default()),
            pipeline: Pipeline::new(),
            caller: Caller::new("local"),
            on_warn: log_warnings(),
            approve: None,
        }
    }

    /// The settings `config` gives the `[[upstream]]` named `upstream`: its
    /// `prefix`, `[defaults]` and its own argument settings, the `[[rule]]`s and
    /// `[access] default`, and the stdio caller (`gateway.stdio_caller`, with its
    /// `[[caller]]` groups), as the gateway's stdio front uses them.
    #[cfg(feature = "config")]
    pub fn from_config(
        config: &warden_gateway::config::Config,
        upstream: &str,
    ) -> Result<Self, NoSuchUpstream> {
        let up = config
            .upstream
            .iter()
            .find(|u| u.name == upstream)
            .ok_or_else(|| NoSuchUpstream(upstream.to_owned()))?;
        let name = config.gateway.stdio_caller.clone();
        let caller = Caller {
            groups: config.groups_of(&name),
            name,
        };
        Ok(Governance::new(upstream)
            .with_prefix(up.prefix)
            .with_policy(config.policy())
            .with_rules(config.rules())
            .with_caller(caller))
    }

    /// Tools appear as `upstream.tool` (true) or under their own names (false).
    pub fn with_prefix(mut self, prefix: bool) -> Self {
        self.prefix = prefix;
        self
    }

    /// The argument policy, keyed by this server's `upstream` name.
    pub fn with_policy(mut self, policy: LayeredPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The access rules (G1-G3, G6), over the names callers see.
    pub fn with_rules(mut self, rules: Rules) -> Self {
        let rules = Arc::new(rules);
        self.pipeline = Pipeline::new().with_grant(rules.clone(), rules.clone());
        self.rules = rules;
        self
    }

    /// Who the calls are made by, for the rules.
    pub fn with_caller(mut self, caller: Caller) -> Self {
        self.caller = caller;
        self
    }

    /// Where `warn` reports of undeclared keys go (default: the log).
    pub fn on_unknown_keys(mut self, sink: Arc<dyn WarnSink>) -> Self {
        self.on_warn = sink;
        self
    }

    /// Who approves a call a rule marks `ask`: (caller, tool, arguments) → approved?
    pub fn with_approval(mut self, approve: Approve) -> Self {
        self.approve = Some(approve);
        self
    }

    /// The caller every request is made by, unless the server asks each request
    /// ([`crate::Governed::with_caller_of`]).
    pub fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The state one connection keeps: which undeclared keys it was warned about.
    pub fn session(&self) -> Session {
        Session::new(self.on_warn.clone())
    }

    /// The catalogue of the server's listing, as the gateway builds it from an
    /// upstream's; declarations it cannot use are left out and logged.
    pub fn catalogue(&self, tools: &[Value]) -> Catalogue {
        let mut builder = Catalogue::builder(&self.policy);
        builder.add_upstream(&self.upstream, self.prefix, tools);
        let (catalogue, problems) = builder.build();
        for p in problems {
            // Tool names and what is wrong with them come from the server's listing.
            tracing::warn!(upstream = %self.upstream, tool = %logged(&p.tool), dropped = p.dropped, "{}", logged(&p.problem));
        }
        for p in self.rules.problems(&catalogue) {
            // A rule's condition on an argument the tool does not declare, as the gateway warns.
            tracing::warn!("config: {}", logged(&p.to_string()));
        }
        catalogue
    }

    /// `tools/list`: the declarations `caller` sees, as published (none without a caller).
    pub fn listing(&self, catalogue: &Catalogue, caller: Option<&Caller>) -> Vec<Value> {
        self.pipeline
            .list(catalogue, caller)
            .iter()
            .map(|t| t.published_value())
            .collect()
    }

    /// `tools/call`: the pipeline's verdict on a call's `params` by `caller`
    /// (without one every tool is unknown, G1).
    pub fn check(
        &self,
        catalogue: &Catalogue,
        session: &Session,
        caller: Option<&Caller>,
        params: Value,
    ) -> Verdict {
        self.pipeline.check(catalogue, session, caller, params)
    }

    /// H5: `None` when `caller`'s call may run; otherwise the text it is refused with.
    pub async fn approval(&self, caller: &Caller, forward: &Forward) -> Option<&'static str> {
        if !forward.needs_approval {
            return None;
        }
        let Some(approve) = &self.approve else {
            // As the gateway answers a client that cannot be asked.
            return Some(answer::APPROVAL_UNAVAILABLE);
        };
        let args = Value::Object(forward.arguments.clone());
        match approve(caller, &forward.tool.name, &args).await {
            true => None,
            false => Some(answer::APPROVAL_REFUSED),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use warden_core::{Effect, Outcome, Overrides, Rule, UnknownMode};

    fn notes() -> Vec<Value> {
        vec![
            json!({"name": "create_note", "inputSchema": {"type": "object",
            "properties": {"title": {"type": "string"}, "text": {"type": "string"},
            "is_public": {"type": "boolean"}}, "required": ["title", "text"]}}),
        ]
    }

    fn strict() -> LayeredPolicy {
        let mut policy = LayeredPolicy::default();
        policy.upstreams.insert(
            "notes".into(),
            Overrides {
                unknown: Some(UnknownMode::Reject),
                ..Default::default()
            },
        );
        policy
    }

    #[test]
    fn what_the_log_gets_is_escaped_and_bounded() {
        assert_eq!(logged("tool\nforged line"), "tool\\u{a}forged line");
        let long = logged(&"x".repeat(5000));
        assert_eq!(long.chars().count(), 1024);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn names_are_prefixed_only_when_asked() {
        let plain = Governance::new("notes");
        let listed = plain.listing(&plain.catalogue(&notes()), Some(plain.caller()));
        assert_eq!(listed[0]["name"], "create_note");
        let prefixed = Governance::new("notes").with_prefix(true);
        let listed = prefixed.listing(&prefixed.catalogue(&notes()), Some(prefixed.caller()));
        assert_eq!(listed[0]["name"], "notes.create_note");
    }

    #[test]
    fn the_policy_is_read_under_the_servers_name() {
        let g = Governance::new("notes").with_policy(strict());
        let c = g.catalogue(&notes());
        let v = g.check(
            &c,
            &g.session(),
            Some(g.caller()),
            json!({"name": "create_note", "arguments": {"title": "t", "txt": "x"}}),
        );
        let Outcome::Answer { answer, .. } = v.outcome else {
            panic!("forwarded")
        };
        assert_eq!(
            answer.text(),
            "Error: Unknown parameter 'txt' for tool 'create_note'.\nDid you mean: text?\nAllowed parameters: title, text, is_public."
        );
        // Another server's name does not pick up the notes settings.
        let other = Governance::new("other").with_policy(strict());
        let c = other.catalogue(&notes());
        let v = other.check(
            &c,
            &other.session(),
            Some(other.caller()),
            json!({"name": "create_note", "arguments": {"title": "t", "text": "x", "txt": "x"}}),
        );
        assert!(matches!(v.outcome, Outcome::Forward(_)));
    }

    #[test]
    fn rules_hide_and_refuse_like_an_absent_tool() {
        let deny = Rule::new(&["*".into()], &["create_note".into()], Effect::Deny).unwrap();
        let g = Governance::new("notes").with_rules(Rules {
            rules: vec![deny],
            default: Effect::Allow,
        });
        let c = g.catalogue(&notes());
        assert!(g.listing(&c, Some(g.caller())).is_empty());
        let v = g.check(
            &c,
            &g.session(),
            Some(g.caller()),
            json!({"name": "create_note"}),
        );
        let Outcome::Answer { answer, .. } = v.outcome else {
            panic!("forwarded")
        };
        assert_eq!(answer.text(), "Unknown tool 'create_note'.");
    }

    #[tokio::test]
    async fn an_ask_call_without_an_approver_is_refused_as_the_gateway_refuses_it() {
        let ask = Rule::new(&["*".into()], &["create_note".into()], Effect::Ask).unwrap();
        let rules = Rules {
            rules: vec![ask],
            default: Effect::Allow,
        };
        let g = Governance::new("notes").with_rules(rules.clone());
        let c = g.catalogue(&notes());
        let call = json!({"name": "create_note", "arguments": {"title": "t", "text": "x"}});
        let me = Caller::new("local");
        let Outcome::Forward(f) = g.check(&c, &g.session(), Some(&me), call).outcome else {
            panic!("refused")
        };
        assert_eq!(
            g.approval(&me, &f).await,
            Some("Error: This call needs approval, and the client cannot ask for it. Ask for the tool to be allowed instead.")
        );
        let no: Approve = Arc::new(|_: &Caller, _: &str, _: &Value| Box::pin(async { false }));
        let g = g.with_approval(no);
        assert_eq!(
            g.approval(&me, &f).await,
            Some("Error: This call needs approval, and approval was refused.")
        );
        let seen = Arc::new(std::sync::Mutex::new(String::new()));
        let kept = seen.clone();
        let yes: Approve = Arc::new(move |c: &Caller, tool: &str, args: &Value| {
            *kept.lock().unwrap() = format!("{} {tool} {args}", c.name);
            Box::pin(async { true })
        });
        let g = g.with_approval(yes);
        assert_eq!(g.approval(&me, &f).await, None);
        assert_eq!(
            *seen.lock().unwrap(),
            r#"local create_note {"title":"t","text":"x"}"#
        );
    }
}
