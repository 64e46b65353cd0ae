//! The gateway proper: one catalogue over several upstreams, the client sessions
//! it serves, and every message between them.
//!
//! Only `initialize`, `ping`, `tools/list` and `tools/call` (and, at 2026-07-28,
//! `server/discover`) are governed here; every other message is relayed as the
//! `serde_json::Value` it arrived as, with ids and progress tokens mapped both
//! ways so several upstreams and several clients share the gateway without their
//! numbering colliding.
//!
//! The parts, each owning its own state and locks:
//! - [`dispatch`]: each client message, sorted by method;
//! - [`upstreams`]: the upstream servers, their listings and the catalogue;
//! - [`session`]: client sessions and what the gateway sends them ([`Outgoing`]);
//! - [`call`]: a `tools/call` from start to [`settle`], its one end, with
//!   [`grant`], [`approval`], the [`ledger`] and the [`audit`] trail;
//! - [`relay`]: requests passed upstream; [`inbound`]: what upstreams send back
//!   on their own;
//! - [`rev2026`]: the stateless 2026-07-28 revision, asked through each
//!   request's [`rev2026::Revision`];
//! - [`policy`]: what one configuration decides about calls, and [`reload`]:
//!   taking a new configuration while calls run.

mod approval;
pub mod audit;
mod call;
pub mod client_session;
mod descriptions;
mod dispatch;
mod flow;
mod grant;
mod health;
mod inbound;
pub mod inbox;
pub mod ledger;
mod listing;
mod log_level;
pub mod policy;
pub mod quota;
mod relay;
pub mod reload;
pub mod rev2026;
pub mod servers;
pub mod settle;
mod upstream_set;
pub mod webhooks;

pub use call::offline::{Judgement, Offline, OfflineCall};
pub use call::Early;
pub use client_session::{CallKey, ClientSession, Out, Outgoing};
pub use descriptions::DescriptionFinding;
pub use flow::Trail;
pub use health::{Health, Probe, HEALTHZ, READYZ};
pub use reload::Reloaded;
pub use settle::{Body, Decision, Outcome};
pub use upstream_set::{UpstreamChanges, UpstreamStatus};

use crate::config::Config;
use crate::jsonrpc;
use crate::logged::logged;
use crate::metrics::Metrics;
use crate::otel::{self, SpanContext, Tracer};
use crate::texts;
use crate::upstream::Inbound;
use call::{Begun, Calls};
use client_session::Sessions;
use policy::{InProcessHooks, Kept, Policy};
use rev2026::{ParkedCalls, StateKey};
use serde_json::Value;
use settle::Settle;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
pub use upstream_set::negotiated_version;
use upstream_set::Upstreams;
use warden_core::hooks::{AfterHook, BeforeHook};
use warden_core::{Caller, Catalogue};

/// The key that seals request states and session ids: random per process, or
/// derived from `gateway.state_secret_env` (and, while a secret is rotated out,
/// also opening what `gateway.state_secret_previous_env` sealed).
fn state_key(
    gateway: &crate::config::GatewayConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<StateKey, String> {
    let secret = |key: &str, var: &str| {
        match env(var) {
        Some(s) if s.len() >= 16 => Ok(s),
        _ => Err(format!(
            "gateway.{key}: the environment variable '{var}' must hold a secret of at least 16 characters"
        )),
    }
    };
    let Some(var) = &gateway.state_secret_env else {
        if gateway.state_secret_previous_env.is_some() {
            return Err("gateway.state_secret_previous_env needs gateway.state_secret_env: the previous secret only opens what it sealed, the current one seals".into());
        }
        return Ok(StateKey::random());
    };
    let mut key = StateKey::from_secret(secret("state_secret_env", var)?.as_bytes());
    if let Some(prev) = &gateway.state_secret_previous_env {
        key = key.also_opening(secret("state_secret_previous_env", prev)?.as_bytes());
    }
    Ok(key)
}

/// The second phase of a request: waiting for the upstream and answering.
pub type Waiting = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The gateway: configuration, upstreams, the catalogue, and the sessions it serves.
pub struct Gateway {
    /// The configuration the gateway started with. Settings a reload cannot
    /// change (the front, its address, the store …) are read from here.
    pub config: Config,
    /// The configuration in force: the last one loaded, at start or by a reload.
    live: RwLock<Arc<Config>>,
    /// Hooks the library user put around every call; a reload keeps them.
    hooks: InProcessHooks,
    /// The shared store quotas count rates in, when replicas share one.
    shared: Option<warden_store::Postgres>,
    /// One reload at a time.
    reloads: reload::Reloads,
    /// Where upstream credentials are exchanged (`[oauth]`), once the HTTP front
    /// set it: upstreams a reload starts get it too.
    exchanger: std::sync::OnceLock<Arc<dyn crate::upstream::credential::TokenExchange>>,
    pub metrics: Arc<Metrics>,
    upstreams: Arc<Upstreams>,
    sessions: Arc<Sessions>,
    calls: Arc<Calls>,
    /// Records spans when traces are on.
    pub tracer: Tracer,
    /// Draining or not, for `/readyz` ([`health`]).
    pub health: Health,
    // Upstreams hold only a weak reference to where their messages go.
    _inbound: Arc<dyn Inbound>,
}

impl Gateway {
    /// Records a `tools/call` the front refused before handing it to the
    /// gateway (T6): `Calls::refused_at_front` settles it.
    pub async fn refused_at_front(&self, call: Early<'_>, why: String) {
        self.calls.refused_at_front(call, why).await;
    }

    /// Each upstream's last successful listing as the upstream sent it, before any
    /// pinning (`mcp-warden pins`); upstreams without one are left out.
    pub fn upstream_listings(&self) -> Vec<(String, Vec<Value>)> {
        self.upstreams
            .listings()
            .into_iter()
            .filter_map(|(name, tools)| Some((name, tools?)))
            .collect()
    }

    /// The calls waiting for an operator's approval (H6).
    pub fn inbox(&self) -> &Arc<inbox::Inbox> {
        &self.calls.inbox
    }

    /// The pins lock was written by this process (the console approved a tool):
    /// the catalogue is built again under it at once, and every session is told
    /// its tools changed, as after a reload.
    pub async fn pins_changed(&self) {
        let before = self.upstreams.catalogue();
        self.upstreams.rebuild_catalogue().await;
        self.sessions
            .changed(client_session::ListChange::Tools(before));
        self.sessions
            .broadcast(jsonrpc::notification(
                "notifications/tools/list_changed",
                None,
            ))
            .await;
    }

    /// Keeps tool-definition drift (P2) out of the audit trail, for a gateway that
    /// only inspects the upstreams (`mcp-warden tools`, `mcp-warden pins`); it is
    /// still logged. Call before connecting.
    pub fn keep_drift_out_of_audit(&self) {
        self.upstreams.record_drifts_in(None);
    }

    /// A gateway for a checked config. Opens the configured store (creating and
    /// migrating it); the error says what could not be opened.
    pub async fn new(config: Config) -> Result<Arc<Gateway>, String> {
        Gateway::with_hooks(config, Vec::new(), Vec::new()).await
    }

    /// A gateway with in-process hooks (H1-H4) around every accepted call.
    ///
    /// Configured webhook hooks run after these, in config order. Must be called
    /// inside a Tokio runtime (after webhooks start a worker).
    pub async fn with_hooks(
        config: Config,
        before: Vec<Arc<dyn BeforeHook>>,
        after: Vec<Arc<dyn AfterHook>>,
    ) -> Result<Arc<Gateway>, String> {
        let store = config.open_store().await?;
        // Quotas are counted in the store only when replicas can share it.
        let shared = match &store {
            Some(warden_store::Store::Postgres(pg)) => Some(pg.clone()),
            _ => None,
        };
        let audit = audit::AuditTrail::open(store.clone(), &config.audit, &config)?;
        let ledger = ledger::Ledger::new(store, &config.idempotency);
        let state_key = state_key(&config.gateway, |v| std::env::var(v).ok())?;
        let hooks = InProcessHooks { before, after };
        let policy = Policy::build(&config, &hooks, shared.clone(), Kept::default());
        let upstreams = Arc::new(Upstreams::new(&config));
        let mut metrics = Metrics::new(audit.backlog.clone(), audit.lost.clone());
        metrics.tool_drift = upstreams.tool_drift.clone();
        metrics.audit_dropped = audit.dropped.clone();
        metrics.audit_otlp_dropped = audit.otlp_dropped.clone();
        let metrics = Arc::new(metrics);
        let tracer = match otel::Settings::resolve(&config.traces, |k| std::env::var(k).ok()) {
            None => Tracer::off(),
            Some(settings) => {
                let tracer = Tracer::start(&settings, metrics.trace_spans_dropped.clone())?;
                tracing::info!(url = %settings.url, service = %settings.service_name, ratio = settings.ratio, "traces are exported over OTLP/HTTP");
                tracer
            }
        };
        let sessions = Arc::new(Sessions::default());
        let inbound =
            inbound::FromUpstreams::new(upstreams.clone(), sessions.clone(), metrics.clone());
        let weak: std::sync::Weak<inbound::FromUpstreams> = Arc::downgrade(&inbound);
        upstreams.set_inbound(weak);
        let settle = Arc::new(Settle::new(
            audit,
            ledger,
            metrics.clone(),
            sessions.clone(),
        ));
        upstreams.record_drifts_in(Some(settle.clone()));
        let calls = Calls::new(
            policy,
            settle,
            upstreams.clone(),
            sessions.clone(),
            ParkedCalls::new(state_key),
            // Shared with the other replicas through the store, when there is one.
            match &shared {
                Some(pg) => inbox::Inbox::new(pg.owner(), Some(pg.clone())),
                None => inbox::Inbox::new("local", None),
            },
        );
        let gateway = Arc::new(Gateway {
            live: RwLock::new(Arc::new(config.clone())),
            reloads: reload::Reloads::default(),
            exchanger: std::sync::OnceLock::new(),
            config,
            hooks,
            shared,
            metrics,
            upstreams,
            sessions,
            calls: Arc::new(calls),
            tracer,
            health: Health::default(),
            _inbound: inbound,
        });
        gateway.loaded();
        Ok(gateway)
    }

    /// The key that seals request states and HTTP session ids.
    pub fn state_key(&self) -> &StateKey {
        self.calls.state_key()
    }

    /// The configured upstreams now (their per-caller credentials among them).
    pub fn upstreams(&self) -> Arc<[Arc<crate::upstream::Upstream>]> {
        self.upstreams.list()
    }

    /// Token exchange for upstream credentials happens here (`[oauth]`): set once
    /// by the HTTP front, for every upstream that exchanges, now or after a reload.
    pub fn set_exchanger(&self, x: Arc<dyn crate::upstream::credential::TokenExchange>) {
        let x = self.exchanger.get_or_init(|| x);
        for up in self.upstreams().iter() {
            if up.credentials.exchanges() {
                up.credentials.set_exchanger(x.clone());
            }
        }
    }

    /// The configuration in force: the one the gateway started with, or the
    /// last one a reload took.
    pub fn current_config(&self) -> Arc<Config> {
        self.live.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn catalogue(&self) -> Arc<Catalogue> {
        self.upstreams.catalogue()
    }

    /// The metrics in Prometheus' text format: the counters, and the gauges read
    /// off the upstreams now (their callers' own processes).
    pub fn metrics_text(&self) -> String {
        use std::fmt::Write;
        let mut out = self.metrics.render();
        let own: Vec<(String, usize)> = self
            .upstream_status()
            .into_iter()
            .filter_map(|u| Some((u.name, u.caller_processes?.0)))
            .collect();
        if !own.is_empty() {
            out.push_str("# HELP warden_upstream_caller_processes Child processes running for one caller each, per upstream with per-caller credentials.\n# TYPE warden_upstream_caller_processes gauge\n");
            for (upstream, n) in own {
                let _ = writeln!(
                    out,
                    "warden_upstream_caller_processes{{upstream=\"{upstream}\"}} {n}"
                );
            }
        }
        out
    }

    /// Each upstream's state (the operator console's overview).
    pub fn upstream_status(&self) -> Vec<UpstreamStatus> {
        self.upstreams.status()
    }

    /// The quotas' counts per caller as this process holds them, and whether
    /// rates are counted in the shared store instead (the operator console).
    pub fn quota_usage(&self) -> (Vec<quota::QuotaUse>, bool) {
        let q = self.calls.quotas();
        (q.usage(), q.shared())
    }

    /// The audit trail's store, when one is configured.
    pub fn audit_store(&self) -> Option<&warden_store::Store> {
        self.calls.settle.audit.store()
    }

    /// Flow rules are on and no shared store keeps HTTP sessions' trails: a
    /// session's trail lives only in the process that holds it, so a session
    /// cannot be taken up from its id (after idle, a restart, or at another
    /// replica) without losing it (F3).
    pub fn trails_stay_here(&self) -> bool {
        self.shared.is_none() && self.calls.snapshot().0.flows.on()
    }

    pub fn add_session(&self, session: &Arc<ClientSession>) {
        self.sessions.add(session);
    }

    /// Starts every upstream once (later calls wait for the first). `client_init` is
    /// the client's initialize params, whose version, capabilities and clientInfo the
    /// upstreams are offered; without one the gateway introduces itself.
    pub async fn connect(&self, client_init: Option<&Value>) {
        self.upstreams.connect(client_init).await
    }

    /// The `tools/list` result for a caller, or the reason listing fails.
    pub async fn list_tools(&self, caller: Option<&Caller>) -> Result<Value, String> {
        self.list_tools_on(None, caller, &Default::default()).await
    }

    /// The `tools/list` result for a caller on the virtual server `server` (V2,
    /// V4, V6; `None`: the whole catalogue), or the reason listing fails.
    /// `found`: the tools the session's searches found on a growing server.
    pub async fn list_tools_on(
        &self,
        server: Option<&str>,
        caller: Option<&Caller>,
        found: &std::collections::BTreeSet<String>,
    ) -> Result<Value, String> {
        self.listing(server, caller, found)
            .await
            .map(|(listed, _)| listed)
    }

    /// The `tools/list` result for a caller, with what description guards
    /// found in it, hidden tools' findings included (`mcp-warden tools`, S7).
    pub async fn list_tools_found(
        &self,
        caller: Option<&Caller>,
    ) -> Result<(Value, Vec<DescriptionFinding>), String> {
        self.listing(None, caller, &Default::default()).await
    }

    /// The `tools` array of the `tools/list` result for a caller, as bytes:
    /// kept from the last listing when nothing it depends on changed
    /// ([`listing`]), else made and kept.
    async fn listed_bytes(
        &self,
        server: Option<&str>,
        caller: Option<&Caller>,
        found: &std::collections::BTreeSet<String>,
    ) -> Result<bytes::Bytes, String> {
        let down = self.upstreams.unavailable();
        if !down.is_empty() {
            return Err(texts::listing_failed(&down));
        }
        let (policy, catalogue) = self.calls.snapshot();
        if policy.grant.has_webhook() || policy.guards.over_descriptions() {
            let (listed, _) = self
                .listing_of(&policy, &catalogue, server, caller, found)
                .await;
            return Ok(listing::serialise(
                listed["tools"].as_array().into_iter().flatten(),
            ));
        }
        let key = listing::ListingKey::new(caller, server, found);
        if let Some(kept) = policy.listings.get(&catalogue, &key) {
            return Ok(kept);
        }
        let listed = policy
            .grant
            .list(&policy.pipeline, &catalogue, caller)
            .await;
        let bytes = match server {
            None => listing::serialise(listed.iter().map(|t| t.published())),
            // A server a reload took away shows nothing.
            Some(name) => match policy.server(name) {
                Some(s) => listing::serialise(servers::listing(
                    s,
                    &listed,
                    &policy.views.get(s, &catalogue),
                    found,
                )),
                None => listing::serialise::<&Value>([]),
            },
        };
        policy.listings.put(&catalogue, key, bytes.clone());
        Ok(bytes)
    }

    async fn listing(
        &self,
        server: Option<&str>,
        caller: Option<&Caller>,
        found: &std::collections::BTreeSet<String>,
    ) -> Result<(Value, Vec<DescriptionFinding>), String> {
        let down = self.upstreams.unavailable();
        if !down.is_empty() {
            return Err(texts::listing_failed(&down));
        }
        let (policy, catalogue) = self.calls.snapshot();
        Ok(self
            .listing_of(&policy, &catalogue, server, caller, found)
            .await)
    }

    /// The listing under one policy and catalogue, made afresh.
    async fn listing_of(
        &self,
        policy: &policy::Policy,
        catalogue: &Arc<Catalogue>,
        server: Option<&str>,
        caller: Option<&Caller>,
        found: &std::collections::BTreeSet<String>,
    ) -> (Value, Vec<DescriptionFinding>) {
        let listed = policy.grant.list(&policy.pipeline, catalogue, caller).await;
        // S7: a tool a `block` guard flags is absent for the callers it applies to.
        let (listed, mut findings) = descriptions::unblocked(&policy.guards, caller, listed);
        for f in &findings {
            let metrics = &self.calls.settle.metrics;
            metrics.guard_found(&f.guard, &f.kind, f.action, f.count as u64);
            tracing::warn!(tool = %logged(&f.tool), guard = %logged(&f.guard), kind = %logged(&f.kind), path = %logged(&f.path), count = f.count, "a guard hides a tool whose definition it flags");
        }
        let mut tools: Vec<Value> = match server {
            None => listed.iter().map(|t| t.published_value()).collect(),
            // A server a reload took away shows nothing.
            Some(name) => match policy.server(name) {
                Some(s) => servers::listing(s, &listed, &policy.views.get(s, catalogue), found),
                None => Vec::new(),
            },
        };
        // S7: guards over tool definitions see the listing as this caller gets it.
        findings.extend(descriptions::govern_listing(
            &policy.guards,
            caller,
            &mut tools,
            &self.calls.settle.metrics,
        ));
        (jsonrpc::object([("tools", Value::Array(tools))]), findings)
    }

    /// Runs one `tools/call` through the pipeline and the upstream, start to finish.
    /// Returns the JSON-RPC response body (`Ok(result)` or `Err(error object)`), or
    /// `None` when the client cancelled the call (no response is due).
    pub async fn call_tool(
        &self,
        session: &Arc<ClientSession>,
        client_id: Option<&Value>,
        params: Value,
    ) -> Option<Body> {
        self.connect(None).await;
        let parent = otel::traceparent_in(Some(&params)).and_then(SpanContext::parse);
        let span = self
            .tracer
            .root(|| "tools/call".to_owned(), otel::Kind::Internal, parent);
        match self
            .calls
            .begin(
                session,
                client_id,
                params,
                rev2026::Revision::older(),
                span.as_ref(),
            )
            .await
        {
            Begun::Done(body) => body,
            Begun::Then(answering) => answering.await,
        }
    }

    /// Writes every audit record to stdout as well from now on (`[audit]
    /// stdout`, T4): for the HTTP front only, stdout being MCP's over stdio.
    pub fn audit_to_stdout(&self) {
        self.calls.settle.audit.to_stdout();
    }

    /// Waits, at most `within`, until no audit record waits for a retry; false
    /// when some still do (they are logged whole when their retries run out).
    pub async fn flush_audit(&self, within: std::time::Duration) -> bool {
        self.calls.settle.audit.flushed(within).await
    }

    /// Stops every upstream (no restarts after this), then exports the spans
    /// recorded so far.
    pub async fn shutdown(&self) {
        self.upstreams.shutdown().await;
        self.tracer.flush(otel::FLUSH_TIMEOUT).await;
    }
}
