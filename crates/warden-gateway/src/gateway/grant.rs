//! Who may see and call what (G1-G4): the configured rules, overridden per tool
//! by the grant webhook when one is configured.
//!
//! A listing and a call take the same decision (G2). When the webhook fails, a
//! listing degrades to the rules (at worst a caller sees a tool it cannot use)
//! while a call fails closed: the pipeline answers it as unverifiable (G4).

use super::webhooks;
use crate::logged::logged;
use crate::net::target::HttpTarget;
use crate::otel::{Kind, Span};
use std::collections::HashMap;
use std::sync::Arc;
use warden_core::{
    ArgDecision, CallScope, Caller, Catalogue, Grant, GrantDecision, Pipeline, Rules, ToolEntry,
};

/// The grant decision's sources.
pub struct GrantSource {
    pub rules: Arc<Rules>,
    webhook: Option<HttpTarget>,
}

/// A grant decided by the webhook for some names, the rules for the rest.
struct Decided<'r> {
    decisions: HashMap<String, GrantDecision>,
    base: &'r Rules,
}

impl Grant for Decided<'_> {
    fn decide(&self, caller: &Caller, name: &str, tool: Option<&ToolEntry>) -> GrantDecision {
        match self.decisions.get(name) {
            Some(d) => *d,
            None => self.base.decide(caller, name, tool),
        }
    }

    fn decide_arguments(
        &self,
        caller: &Caller,
        tool: &ToolEntry,
        args: &serde_json::Map<String, serde_json::Value>,
    ) -> Option<ArgDecision> {
        // The webhook decides names only; where it decided, its decision stands.
        match self.decisions.get(&tool.name) {
            Some(_) => None,
            None => self.base.decide_arguments(caller, tool, args),
        }
    }

    fn decide_in_scope(
        &self,
        caller: &Caller,
        tool: &ToolEntry,
        args: &serde_json::Map<String, serde_json::Value>,
        scope: &CallScope,
    ) -> Option<ArgDecision> {
        match self.decisions.get(&tool.name) {
            Some(_) => None,
            None => self.base.decide_in_scope(caller, tool, args, scope),
        }
    }
}

/// The grant source failed: every call is refused as unverifiable (G4).
struct CannotDecide;

impl Grant for CannotDecide {
    fn decide(&self, _: &Caller, _: &str, _: Option<&ToolEntry>) -> GrantDecision {
        GrantDecision::Unavailable
    }
}

impl GrantSource {
    pub fn new(rules: Arc<Rules>, webhook: Option<HttpTarget>) -> GrantSource {
        GrantSource { rules, webhook }
    }

    /// Whether a webhook decides grants (a listing may differ each time).
    pub fn has_webhook(&self) -> bool {
        self.webhook.is_some()
    }

    /// The tools `caller` sees, in catalogue order.
    pub async fn list<'c>(
        &self,
        pipeline: &Pipeline,
        catalogue: &'c Catalogue,
        caller: Option<&Caller>,
    ) -> Vec<&'c Arc<warden_core::ToolEntry>> {
        let (Some(hook), Some(caller)) = (&self.webhook, caller) else {
            return pipeline.list(catalogue, caller);
        };
        let names: Vec<&str> = catalogue.tools().iter().map(|t| t.name.as_str()).collect();
        match webhooks::grant_decisions(hook, caller, &names).await {
            Ok(decisions) => {
                let grant = Decided {
                    decisions,
                    base: &self.rules,
                };
                pipeline.list_with(&grant, catalogue, Some(caller))
            }
            Err(e) => {
                // G4: a listing degrades to the configured rules.
                tracing::warn!(url = %hook.url(), "grant webhook failed; listing by the rules: {}", logged(&e));
                pipeline.list(catalogue, Some(caller))
            }
        }
    }

    /// The grant for one call: the webhook's decision over the rules, or, when the
    /// webhook fails, a source that says it cannot decide (G4: fail closed).
    /// `None`: the rules alone decide (the pipeline's own grant).
    pub async fn for_call(
        &self,
        caller: Option<&Caller>,
        name: Option<&str>,
        span: Option<&Span>,
    ) -> Option<Box<dyn Grant + '_>> {
        let (hook, caller, name) = (self.webhook.as_ref()?, caller?, name?);
        let mut span = span.map(|s| s.child("warden.grant_webhook", Kind::Client));
        let decided = webhooks::grant_decisions(hook, caller, &[name]).await;
        if let (Some(s), Err(_)) = (&mut span, &decided) {
            s.fail("the grant webhook failed (G4)");
        }
        drop(span);
        Some(match decided {
            Ok(decisions) => Box::new(Decided {
                decisions,
                base: &self.rules,
            }),
            Err(e) => {
                tracing::error!(url = %hook.url(), tool = %logged(name), "grant webhook failed; the call is refused: {}", logged(&e));
                Box::new(CannotDecide)
            }
        })
    }
}
