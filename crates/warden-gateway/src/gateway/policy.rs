//! What one configuration decides about tool calls: the pipeline with its
//! grant, the grant webhook, the before and after hooks, the approval timeout,
//! quotas and flow rules.
//!
//! A call reads the policy once, when it begins, and keeps that one to its end;
//! a reload swaps in a new one whole. So a call never runs half under the old
//! configuration and half under the new, and one in flight finishes under the
//! configuration it began with.

use super::flow::Flows;
use super::grant::GrantSource;
use super::quota::Quotas;
use super::webhooks;
use crate::config::guards::Guards;
use crate::config::Config;
use std::sync::Arc;
use std::time::Duration;
use warden_core::hooks::{AfterHook, BeforeHook};
use warden_core::Pipeline;
use warden_store::Postgres;

/// After hooks as a call carries them to its end.
pub type AfterHooks = Arc<[Arc<dyn AfterHook>]>;

/// The per-configuration part of the call path.
pub struct Policy {
    pub pipeline: Pipeline,
    pub grant: GrantSource,
    pub before_hooks: Vec<Arc<dyn BeforeHook>>,
    pub after_hooks: AfterHooks,
    /// How long a client has to answer the gateway's (or an upstream's) question.
    pub approval_timeout: Duration,
    /// Who answers an approval (H6).
    pub approver: crate::config::Approver,
    /// Per `[[rule]]`, in order: who answers its `ask`, when it says (H6).
    pub rule_approvers: Vec<Option<crate::config::Approver>>,
    pub quotas: Arc<Quotas>,
    pub flows: Arc<Flows>,
    /// Guards over tool results (S1-S5).
    pub guards: Guards,
    /// The virtual servers (V1-V7).
    pub servers: Vec<Arc<crate::config::servers::VirtualServer>>,
    /// What each makes of the catalogue (V2, V4), worked out once per catalogue.
    pub views: super::servers::Views,
    /// The listings made under this policy, as bytes (issue 25).
    pub listings: super::listing::Listings,
}

/// The hooks a library user put around every call: they outlive reloads.
#[derive(Clone, Default)]
pub struct InProcessHooks {
    pub before: Vec<Arc<dyn BeforeHook>>,
    pub after: Vec<Arc<dyn AfterHook>>,
}

/// What a new policy may take over from the one before it, because the
/// configuration that made it did not change.
#[derive(Default)]
pub struct Kept<'p> {
    /// The `[[hook]]` webhooks (their after-hook queues go on).
    pub webhooks: Option<&'p Policy>,
    /// The quotas, with their counts (`[[quota]]` unchanged).
    pub quotas: Option<&'p Policy>,
    /// The flow rules, with the 2026-07-28 trails they remember (`[[flow]]` and
    /// the upstreams' labels unchanged).
    pub flows: Option<&'p Policy>,
}

impl Policy {
    /// The policy `config` says; `shared` counts quota rates across replicas.
    /// Must be called inside a Tokio runtime (after webhooks start a worker).
    pub fn build(
        config: &Config,
        hooks: &InProcessHooks,
        shared: Option<Postgres>,
        kept: Kept<'_>,
    ) -> Policy {
        let (before_hooks, after_hooks) = match kept.webhooks {
            Some(p) => (p.before_hooks.clone(), p.after_hooks.clone()),
            None => {
                let (web_before, web_after) = webhooks::hooks(config);
                let mut before = hooks.before.clone();
                before.extend(web_before);
                let mut after = hooks.after.clone();
                after.extend(web_after);
                (before, after.into())
            }
        };
        let quotas = match kept.quotas {
            Some(p) => p.quotas.clone(),
            None => Arc::new(Quotas::new(config.limits.quotas.clone(), shared.clone())),
        };
        let flows = match kept.flows {
            Some(p) => p.flows.clone(),
            None => {
                let g = &config.gateway;
                let idle = crate::config::parse_duration(&g.session_idle)
                    .unwrap_or(Duration::from_secs(1800));
                let lifetime = crate::config::parse_duration(&g.session_lifetime)
                    .unwrap_or(Duration::from_secs(86_400));
                Arc::new(Flows::new(
                    config.limits.flows.clone(),
                    config.limits.labels.clone(),
                    (idle, lifetime),
                    shared,
                ))
            }
        };
        let rules = Arc::new(config.rules());
        Policy {
            pipeline: Pipeline::new().with_grant(rules.clone(), rules.clone()),
            grant: GrantSource::new(rules, config.access.webhook.clone()),
            before_hooks,
            after_hooks,
            approval_timeout: Duration::from_millis(config.access.approval_timeout_ms),
            approver: config.access.approver,
            rule_approvers: config.rule.iter().map(|r| r.approver).collect(),
            quotas,
            flows,
            guards: config.guards.clone(),
            servers: config.servers.clone(),
            views: Default::default(),
            listings: Default::default(),
        }
    }

    /// Whether a `when_cel` reads a call's scope beyond its caller, tool and
    /// arguments (X1, X8): a call builds it only then.
    pub fn reads_scope(&self) -> bool {
        self.grant.rules.reads_scope()
            || self.quotas.has_cel()
            || self.flows.has_cel()
            || self.guards.list.iter().any(|g| g.cel.is_some())
    }

    /// The virtual server `name`, when this policy has one.
    pub fn server(&self, name: &str) -> Option<&Arc<crate::config::servers::VirtualServer>> {
        self.servers.iter().find(|s| s.name == name)
    }
}
