//! The gateway proper: one catalogue over several upstreams, client sessions, and
//! the routing of every message between them.
//!
//! Only `initialize`, `ping`, `tools/list` and `tools/call` are governed here; every
//! other message is relayed as the `serde_json::Value` it arrived as, with ids and
//! progress tokens mapped both ways so several upstreams (and later several
//! clients) can share the gateway without their numbering colliding.

use crate::config::{Config, Phase};
use crate::jsonrpc::{self, Kind};
use crate::metrics::Metrics;
use crate::modern::{self, Envelope};
use crate::trail::{AuditBase, Trail};
use crate::upstream::{
    futures_lite::BoxedSend, CallError, Conn, Inbound, PendingReply, Upstream, SUPPORTED_VERSIONS,
};
use crate::webhook::{self, AfterWebhook, BeforeWebhook, Webhook};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use warden_core::hooks::{self, AfterHook, BeforeHook, BeforeOutcome, CallContext, CallEnd};
use warden_core::{
    answer, Answer, Caller, Catalogue, Grant, GrantDecision, LayeredPolicy, Outcome, Pipeline,
    Refusal, Rules, UnknownKeyWarning,
};
use warden_store::{Claim, Finish};

/// One client connection (a stdio front has exactly one).
pub struct ClientSession {
    out: mpsc::Sender<Value>,
    pub caller: Option<Caller>,
    /// How audit records name the session: "stdio", or "http:" and the session id.
    pub label: String,
    warn: warden_core::Session,
    /// Client request id → (upstream connection, upstream request id), for cancellation.
    inflight: Mutex<HashMap<String, (Weak<Conn>, u64)>>,
    /// Id we gave the client for an upstream's request → (connection, the upstream's own id).
    server_requests: Mutex<HashMap<String, (Weak<Conn>, Value)>>,
    /// Requests the gateway itself sent the client (approval) → their waiters.
    own_requests: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// 2026-07-28 calls waiting upstream (client request id) → where an upstream's
    /// request for that call goes, to be put to the client as an input request.
    interrupts: Mutex<HashMap<String, mpsc::Sender<(Value, Value)>>>,
    /// 2026-07-28 calls that opted in to log messages (client request id → least
    /// severe level wanted).
    log_levels: Mutex<HashMap<String, u8>>,
    /// What the client declared in `initialize`: its capabilities and the version agreed.
    client: RwLock<Option<(Value, &'static str)>>,
    /// The client speaks the stateless 2026-07-28 revision: no requests to it, and
    /// no notifications but the progress of its own requests.
    modern: AtomicBool,
}

impl ClientSession {
    pub fn new(caller: Option<Caller>, out: mpsc::Sender<Value>) -> Arc<Self> {
        Self::labelled(caller, out, "stdio".into())
    }

    /// A session whose audit records carry `label`.
    pub fn labelled(caller: Option<Caller>, out: mpsc::Sender<Value>, label: String) -> Arc<Self> {
        Arc::new(Self {
            out,
            caller,
            label,
            warn: warden_core::Session::new(Arc::new(|w: &UnknownKeyWarning| {
                tracing::warn!(
                    tool = %w.tool,
                    unknown = %w.unknown_keys.join(", "),
                    declared = %w.declared_keys.join(", "),
                    "a call carried argument(s) the tool does not declare; forwarded unchanged (warn mode)"
                );
            })),
            inflight: Mutex::new(HashMap::new()),
            server_requests: Mutex::new(HashMap::new()),
            own_requests: Mutex::new(HashMap::new()),
            interrupts: Mutex::new(HashMap::new()),
            log_levels: Mutex::new(HashMap::new()),
            client: RwLock::new(None),
            modern: AtomicBool::new(false),
        })
    }

    /// Whether the client declared a capability in `initialize`.
    fn client_can(&self, capability: &str) -> bool {
        let client = self.client.read().unwrap_or_else(|e| e.into_inner());
        client
            .as_ref()
            .is_some_and(|(caps, _)| caps.get(capability).is_some_and(Value::is_object))
    }

    /// The protocol version agreed in `initialize`, once it ran.
    pub fn version(&self) -> Option<&'static str> {
        self.client_version()
    }

    fn client_version(&self) -> Option<&'static str> {
        self.client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(_, v)| *v)
    }

    /// Sends the client a request of the gateway's own and waits for its answer
    /// (`None` when it does not come in time or the client is gone).
    async fn ask(
        &self,
        id: Value,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Option<Value> {
        let (tx, rx) = oneshot::channel();
        let key = jsonrpc::id_key(&id);
        lock(&self.own_requests).insert(key.clone(), tx);
        self.send(jsonrpc::request(id, method, Some(params))).await;
        let answer = tokio::time::timeout(timeout, rx)
            .await
            .ok()
            .and_then(Result::ok);
        lock(&self.own_requests).remove(&key);
        answer
    }

    async fn send(&self, msg: Value) {
        // A closed channel means the client is gone; nothing is left to tell it.
        let _ = self.out.send(msg).await;
    }

    /// Sends a message the front wrote itself (a parse error, say).
    pub async fn send_raw(&self, msg: Value) {
        self.send(msg).await
    }

    fn uses(&self, conn: &Arc<Conn>) -> bool {
        self.latest_on(conn).is_some()
    }

    /// The client request id of this session's call that is `upstream_id` on `conn`.
    fn call_for(&self, conn: &Arc<Conn>, upstream_id: u64) -> Option<String> {
        lock(&self.inflight)
            .iter()
            .find(|(_, (c, id))| {
                *id == upstream_id && c.upgrade().is_some_and(|c| Arc::ptr_eq(&c, conn))
            })
            .map(|(k, _)| k.clone())
    }

    /// The client request id of this session's most recent call waiting on `conn`.
    fn latest_on(&self, conn: &Arc<Conn>) -> Option<String> {
        lock(&self.inflight)
            .iter()
            .filter(|(_, (c, _))| c.upgrade().is_some_and(|c| Arc::ptr_eq(&c, conn)))
            .max_by_key(|(_, (_, upstream_id))| *upstream_id)
            .map(|(k, _)| k.clone())
    }
}

/// A grant decided by a webhook for some names, the rules for the rest.
struct Decided<'r> {
    decisions: HashMap<String, GrantDecision>,
    base: &'r Rules,
}

impl Grant for Decided<'_> {
    fn decide(
        &self,
        caller: &Caller,
        name: &str,
        tool: Option<&warden_core::ToolEntry>,
    ) -> GrantDecision {
        match self.decisions.get(name) {
            Some(d) => *d,
            None => self.base.decide(caller, name, tool),
        }
    }
}

/// The grant source failed: every call is refused as unverifiable (G4).
struct CannotDecide;

impl Grant for CannotDecide {
    fn decide(&self, _: &Caller, _: &str, _: Option<&warden_core::ToolEntry>) -> GrantDecision {
        GrantDecision::Unavailable
    }
}

/// The second phase of a request: waiting for the upstream and answering.
pub type Waiting = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// A JSON-RPC response body: the result, or the error object.
pub type Body = Result<Value, Value>;

/// How far a request got in its first, in-order phase.
enum Begun {
    /// Answered (or, `None`, nothing is due).
    Done(Option<Body>),
    /// Queued upstream; the answer is awaited in [`Gateway::finish`].
    Waiting(Pending),
    /// Not queued yet: approval or before hooks come first, off the read loop.
    Later(std::pin::Pin<Box<dyn std::future::Future<Output = Option<Body>> + Send>>),
}

/// A call whose upstream asked something of a 2026-07-28 client: the client got
/// an `InputRequiredResult`; its retry brings the answer and resumes the wait.
struct Parked {
    pending: Pending,
    /// The upstream's id for its request.
    asked: Value,
}

/// How an approval question ended.
enum Approval {
    Approved,
    Refused(&'static str),
    /// A 2026-07-28 client is asked through the call's result; it retries.
    InputRequired(Value),
}

/// What a relayed request carries besides its message, for logs and after hooks.
#[derive(Clone)]
struct CallMeta {
    /// The tool as the caller named it, for `tools/call`.
    tool: Option<String>,
    token: Option<String>,
    started: Instant,
    /// For `tools/call` with after hooks: what they will see.
    ctx: Option<Arc<CallContext>>,
    /// For `tools/call` when calls are audited: what every record of it shares.
    audit: Option<Arc<AuditBase>>,
    /// (scope, key) when the call holds an idempotency key in the ledger.
    ledger: Option<(String, String)>,
    /// The 2026-07-28 envelope of the call, when the client speaks that revision.
    envelope: Option<Arc<Envelope>>,
    /// What a sealed requestState of this call is bound to (2026-07-28 calls).
    binding: Option<Arc<modern::Binding>>,
}

/// A request relayed upstream whose answer is awaited.
struct Pending {
    conn: Arc<Conn>,
    id: u64,
    reply: PendingReply,
    timeout_ms: u64,
    upstream: String,
    method: String,
    client_key: Option<String>,
    meta: CallMeta,
}

/// [`respond`], with a result stamped for the 2026-07-28 revision when `stamp`
/// names the method of a request that speaks it.
async fn respond_as(session: &ClientSession, id: Value, body: Option<Body>, stamp: Option<&str>) {
    let body = match (body, stamp) {
        (Some(Ok(mut result)), Some(method)) => {
            modern::stamp_result(method, &mut result);
            Some(Ok(result))
        }
        (body, _) => body,
    };
    respond(session, id, body).await
}

async fn respond(session: &ClientSession, id: Value, body: Option<Body>) {
    let reply = match body {
        Some(Ok(result)) => jsonrpc::response(id, result),
        Some(Err(error)) => jsonrpc::error_response(id, error),
        None => return,
    };
    session.send(reply).await;
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The gateway: configuration, upstreams, the catalogue, and the sessions it serves.
pub struct Gateway {
    pub config: Config,
    pipeline: Pipeline,
    policy: LayeredPolicy,
    rules: Arc<Rules>,
    grant_webhook: Option<Webhook>,
    /// The ledger and the audit trail.
    pub trail: Trail,
    pub metrics: Arc<Metrics>,
    before_hooks: Vec<Arc<dyn BeforeHook>>,
    after_hooks: Arc<[Arc<dyn AfterHook>]>,
    pub upstreams: Vec<Arc<Upstream>>,
    /// Per upstream, its last successful tool listing (`None` until one succeeded).
    listings: RwLock<Vec<Option<Vec<Value>>>>,
    catalogue: RwLock<Arc<Catalogue>>,
    sessions: Mutex<Vec<Weak<ClientSession>>>,
    /// A resource URI (`uri:…`) or prompt name (`prompt:…`) → the upstream that listed it.
    routes: Mutex<HashMap<String, usize>>,
    /// Token sent upstream → (session, the client's own token).
    progress: Mutex<HashMap<String, (Weak<ClientSession>, Value)>>,
    next_token: AtomicU64,
    next_server_request: AtomicU64,
    /// Seals the requestState of 2026-07-28 approval questions.
    state_key: modern::StateKey,
    /// 2026-07-28 calls set aside while their client answers an upstream's request.
    parked: Mutex<HashMap<String, Parked>>,
    /// The initialize params sent to upstreams (replayed on restart).
    upstream_init: RwLock<Option<Value>>,
    connected: tokio::sync::OnceCell<()>,
    shutting_down: AtomicBool,
    me: Weak<Gateway>,
}

impl Gateway {
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
        mut before: Vec<Arc<dyn BeforeHook>>,
        mut after: Vec<Arc<dyn AfterHook>>,
    ) -> Result<Arc<Gateway>, String> {
        let trail = Trail::open(&config).await?;
        let policy = config.policy();
        let rules = Arc::new(config.rules());
        for h in &config.hook {
            match h.phase {
                Phase::Before => before.push(Arc::new(BeforeWebhook(h.webhook.clone()))),
                Phase::After => after.push(AfterWebhook::start(h.webhook.clone())),
            }
        }
        let grant_webhook = config.access.webhook.clone();
        let state_key = match &config.gateway.state_secret_env {
            None => modern::StateKey::random(),
            Some(var) => match std::env::var(var) {
                Ok(secret) if secret.len() >= 16 => modern::StateKey::from_secret(secret.as_bytes()),
                _ => {
                    return Err(format!(
                        "gateway.state_secret_env: the environment variable '{var}' must hold a secret of at least 16 characters"
                    ))
                }
            },
        };
        let upstreams = config
            .upstream
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let mut up = u.clone();
                up.tls_ca_file = up
                    .tls_ca_file
                    .map(|p| config.resolve_path(&p.to_string_lossy()));
                Arc::new(Upstream::new(
                    i,
                    up,
                    config.program(u),
                    config.gateway.max_message_bytes,
                ))
            })
            .collect::<Vec<_>>();
        let n = upstreams.len();
        let metrics = Arc::new(Metrics::new(trail.backlog.clone(), trail.lost.clone()));
        Ok(Arc::new_cyclic(|me| Gateway {
            config,
            trail,
            metrics,
            pipeline: Pipeline::new().with_grant(rules.clone(), rules.clone()),
            policy,
            rules,
            grant_webhook,
            before_hooks: before,
            after_hooks: after.into(),
            upstreams,
            listings: RwLock::new(vec![None; n]),
            catalogue: RwLock::new(Arc::new(Catalogue::default())),
            sessions: Mutex::new(Vec::new()),
            progress: Mutex::new(HashMap::new()),
            routes: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(1),
            next_server_request: AtomicU64::new(1),
            state_key,
            parked: Mutex::new(HashMap::new()),
            upstream_init: RwLock::new(None),
            connected: tokio::sync::OnceCell::new(),
            shutting_down: AtomicBool::new(false),
            me: me.clone(),
        }))
    }

    pub fn catalogue(&self) -> Arc<Catalogue> {
        self.catalogue
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    pub fn add_session(&self, session: &Arc<ClientSession>) {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|s| s.strong_count() > 0);
        sessions.push(Arc::downgrade(session));
    }

    fn live_sessions(&self) -> Vec<Arc<ClientSession>> {
        lock(&self.sessions)
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Starts every upstream once (later calls wait for the first). `client_init` is
    /// the client's initialize params, whose version, capabilities and clientInfo the
    /// upstreams are offered; without one the gateway introduces itself.
    pub async fn connect(&self, client_init: Option<&Value>) {
        self.connected
            .get_or_init(|| async {
                let init = upstream_init(client_init);
                *self
                    .upstream_init
                    .write()
                    .unwrap_or_else(|e| e.into_inner()) = Some(init.clone());
                let inbound = self.inbound();
                let tasks = self.upstreams.iter().map(|up| {
                    let (up, inbound, init) = (up.clone(), inbound.clone(), init.clone());
                    async move { (up.index, up.connect(inbound, &init).await) }
                });
                for (index, result) in join_all(tasks).await {
                    self.record_listing(index, result);
                }
                self.rebuild_catalogue();
            })
            .await;
    }

    fn inbound(&self) -> Weak<dyn Inbound> {
        let me: Weak<Gateway> = self.me.clone();
        me
    }

    fn record_listing(&self, index: usize, result: Result<Vec<Value>, String>) -> bool {
        let name = &self.upstreams[index].name;
        match result {
            Ok(tools) => {
                tracing::info!(upstream = %name, tools = tools.len(), "upstream ready");
                self.listings.write().unwrap_or_else(|e| e.into_inner())[index] = Some(tools);
                true
            }
            Err(e) => {
                // The cached listing stays: it is replaced only by a successful one.
                tracing::error!(upstream = %name, "upstream could not be started or listed: {e}");
                false
            }
        }
    }

    fn rebuild_catalogue(&self) {
        let listings = self
            .listings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut builder = Catalogue::builder(&self.policy);
        for (up, tools) in self.upstreams.iter().zip(&listings) {
            if let Some(tools) = tools {
                builder.add_upstream(&up.name, up.config.prefix, tools);
            }
        }
        let (catalogue, problems) = builder.build();
        for p in problems {
            tracing::warn!(upstream = %p.upstream, tool = %p.tool, dropped = p.dropped, "{}", p.problem);
        }
        *self.catalogue.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(catalogue);
    }

    /// Upstreams that have no listing to offer, or are not running now.
    fn unavailable(&self) -> Vec<String> {
        let listings = self.listings.read().unwrap_or_else(|e| e.into_inner());
        self.upstreams
            .iter()
            .zip(listings.iter())
            .filter(|(up, l)| l.is_none() || up.conn().is_none())
            .map(|(up, _)| up.name.clone())
            .collect()
    }

    /// The `tools/list` result for a caller, or the reason listing fails.
    pub async fn list_tools(&self, caller: Option<&Caller>) -> Result<Value, String> {
        let down = self.unavailable();
        if !down.is_empty() {
            return Err(answer::listing_failed(&down));
        }
        let catalogue = self.catalogue();
        let listed = match (&self.grant_webhook, caller) {
            (Some(hook), Some(caller)) => {
                let names: Vec<&str> = catalogue.tools().iter().map(|t| t.name.as_str()).collect();
                match webhook::grant_decisions(hook, caller, &names).await {
                    Ok(decisions) => {
                        let grant = Decided {
                            decisions,
                            base: &self.rules,
                        };
                        self.pipeline.list_with(&grant, &catalogue, Some(caller))
                    }
                    Err(e) => {
                        // G4: a listing degrades to the configured rules.
                        tracing::warn!(url = %hook.url(), "grant webhook failed; listing by the rules: {e}");
                        self.pipeline.list(&catalogue, Some(caller))
                    }
                }
            }
            _ => self.pipeline.list(&catalogue, caller),
        };
        let tools: Vec<Value> = listed.into_iter().cloned().collect();
        Ok(jsonrpc::object([("tools", Value::Array(tools))]))
    }

    /// The grant for one call: the webhook's decision over the rules, or, when the
    /// webhook fails, a source that says it cannot decide (G4: fail closed).
    async fn call_grant(
        &self,
        caller: Option<&Caller>,
        name: Option<&str>,
    ) -> Option<Box<dyn Grant + '_>> {
        let (hook, caller, name) = (self.grant_webhook.as_ref()?, caller?, name?);
        Some(
            match webhook::grant_decisions(hook, caller, &[name]).await {
                Ok(decisions) => Box::new(Decided {
                    decisions,
                    base: &self.rules,
                }),
                Err(e) => {
                    tracing::error!(url = %hook.url(), tool = %answer::shown(name), "grant webhook failed; the call is refused: {e}");
                    Box::new(CannotDecide)
                }
            },
        )
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
        match self.begin_call(session, client_id, params, None).await {
            Begun::Done(body) => body,
            Begun::Waiting(pending) => self.finish(session, pending).await,
            Begun::Later(run) => run.await,
        }
    }

    /// The part of a call that must happen in arrival order: the pipeline, and
    /// handing the call to the upstream's queue. Waiting for the answer is [`Gateway::finish`].
    async fn begin_call(
        &self,
        session: &Arc<ClientSession>,
        client_id: Option<&Value>,
        mut params: Value,
        envelope: Option<Arc<Envelope>>,
    ) -> Begun {
        let started = Instant::now();
        let catalogue = self.catalogue();
        // Move the arguments out (no copy); a placeholder keeps their position.
        let arguments = params.get_mut("arguments").map(Value::take);
        let had_arguments = params.get("arguments").is_some();
        // Refused calls are audited with the arguments they carried: kept only when audited.
        let sent_arguments = self.trail.audits().then(|| {
            arguments
                .clone()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({}))
        });
        let mut check = Map::new();
        check.insert(
            "name".into(),
            params.get("name").cloned().unwrap_or(Value::Null),
        );
        if let Some(args) = arguments {
            check.insert("arguments".into(), args);
        }
        if let Some(meta) = params.get("_meta") {
            check.insert("_meta".into(), meta.clone());
        }
        let name = check.get("name").and_then(Value::as_str);
        let binding = envelope.as_ref().map(|_| {
            Arc::new(call_binding(
                session,
                name.unwrap_or_default(),
                check.get("arguments"),
            ))
        });
        let grant = self.call_grant(session.caller.as_ref(), name).await;
        let verdict = match &grant {
            Some(grant) => self.pipeline.check_with(
                &**grant,
                &catalogue,
                &session.warn,
                session.caller.as_ref(),
                Value::Object(check),
            ),
            None => self.pipeline.check(
                &catalogue,
                &session.warn,
                session.caller.as_ref(),
                Value::Object(check),
            ),
        };
        let forward = match verdict.outcome {
            Outcome::Answer { answer, refusal } => {
                tracing::info!(caller = ?session.caller.as_ref().map(|c| &c.name), ?refusal, unknown = ?verdict.report.unknown_keys, answer = %answer.text(), "call answered by the gateway");
                let body = answer_body(answer);
                let decision = match refusal {
                    Refusal::NoToolName | Refusal::InvalidArguments => "invalid_arguments",
                    Refusal::UnknownTool => "unknown_tool",
                    Refusal::GrantFailure => "grant_failure",
                };
                self.metrics.observe(decision, "refused", ms_since(started));
                self.metrics
                    .unknown_keys
                    .fetch_add(verdict.report.unknown_keys.len() as u64, Ordering::Relaxed);
                if let Some(args) = sent_arguments {
                    let name = params
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let args = args.as_object().cloned().unwrap_or_default();
                    let base = AuditBase::new(
                        &self.trail,
                        (&session.label, session.caller.as_ref()),
                        name,
                        None,
                        &args,
                        &verdict.report,
                        None,
                    );
                    self.trail
                        .record(&base, decision, "refused", ms_since(started), false)
                        .await;
                }
                if refusal == Refusal::GrantFailure {
                    // G4: no before hooks ran, but the after hooks hear of the refusal once.
                    let ctx = CallContext {
                        caller: session.caller.clone(),
                        tool: params
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        upstream: String::new(),
                        arguments: Map::new(),
                        meta: Default::default(),
                        reason: None,
                    };
                    self.after(
                        Arc::new(ctx),
                        None,
                        Some("the grant source failed".into()),
                        started,
                    );
                }
                return Begun::Done(Some(body));
            }
            Outcome::Forward(f) => f,
        };
        let tool = forward.tool.clone();
        self.metrics
            .unknown_keys
            .fetch_add(verdict.report.unknown_keys.len() as u64, Ordering::Relaxed);
        if !verdict.report.unknown_keys.is_empty() {
            tracing::info!(tool = %tool.name, mode = ?verdict.report.unknown_mode, keys = ?verdict.report.unknown_keys, "undeclared argument keys");
        }
        let (Some(up), Some(obj)) = (
            self.upstreams.iter().find(|u| u.name == tool.upstream),
            params.as_object_mut(),
        ) else {
            return Begun::Done(Some(answer_body(Answer::ToolError(
                answer::INTERNAL_ERROR.into(),
            ))));
        };
        let ledger = self.trail.idempotency_key(&forward.meta).map(|key| {
            (
                session
                    .caller
                    .as_ref()
                    .map(|c| c.name.clone())
                    .unwrap_or_default(),
                key,
            )
        });
        let audit = self.trail.audits().then(|| {
            Arc::new(AuditBase::new(
                &self.trail,
                (&session.label, session.caller.as_ref()),
                &tool.name,
                Some(&tool.upstream),
                &forward.arguments,
                &verdict.report,
                ledger.as_ref().map(|(_, k)| k.clone()),
            ))
        });
        let guarded = forward.needs_approval || !self.before_hooks.is_empty() || ledger.is_some();
        // Hooks see the call as it goes upstream; built only when someone will look.
        let ctx = (guarded || !self.after_hooks.is_empty()).then(|| {
            Arc::new(CallContext {
                caller: session.caller.clone(),
                tool: tool.name.clone(),
                upstream: tool.upstream.clone(),
                arguments: forward.arguments.clone(),
                meta: forward.meta.clone(),
                reason: verdict.report.reason.clone(),
            })
        });
        obj.insert("name".into(), Value::String(tool.upstream_name.clone()));
        if had_arguments || forward.rewritten {
            obj.insert("arguments".into(), Value::Object(forward.arguments));
        }
        let token = self.map_progress_token(session, obj);
        let params = Value::Object(std::mem::take(obj));
        let meta = CallMeta {
            tool: Some(tool.name.clone()),
            token,
            started,
            ctx,
            audit,
            ledger,
            envelope: envelope.clone(),
            binding,
        };
        if guarded {
            let (Some(me), session, client_id, up) = (
                self.me.upgrade(),
                session.clone(),
                client_id.cloned(),
                up.clone(),
            ) else {
                return Begun::Done(Some(answer_body(Answer::ToolError(
                    answer::INTERNAL_ERROR.into(),
                ))));
            };
            let approval = forward.needs_approval;
            return Begun::Later(Box::pin(async move {
                me.guarded_call(&session, client_id.as_ref(), &up, params, meta, approval)
                    .await
            }));
        }
        match self
            .begin_relay(up, session, client_id, "tools/call", params, meta)
            .await
        {
            Ok(pending) => Begun::Waiting(pending),
            Err(body) => Begun::Done(body),
        }
    }

    /// A call that needs approval or has before hooks: ask, run the hooks, and
    /// only then go upstream (H1-H5).
    async fn guarded_call(
        &self,
        session: &Arc<ClientSession>,
        client_id: Option<&Value>,
        up: &Upstream,
        params: Value,
        meta: CallMeta,
        approval: bool,
    ) -> Option<Body> {
        let Some(ctx) = meta.ctx.clone() else {
            return Some(answer_body(Answer::ToolError(
                answer::INTERNAL_ERROR.into(),
            )));
        };
        // Answers the call here: after hooks and the audit trail hear of it once.
        let settle = |result: Option<Value>,
                      failure: Option<String>,
                      decision: &'static str,
                      outcome: &'static str| {
            let ctx = ctx.clone();
            let meta = &meta;
            async move {
                self.after(ctx, result.clone(), failure, meta.started);
                self.audit(meta, decision, outcome, false).await;
                Some(match result {
                    Some(r) => Ok(r),
                    None => answer_body(Answer::ToolError(answer::INTERNAL_ERROR.into())),
                })
            }
        };
        let refusal = |text: &str| Answer::ToolError(text.to_owned()).to_tool_result();
        if approval {
            match self.approve(session, &ctx, meta.envelope.as_deref()).await {
                Approval::Approved => {}
                Approval::Refused(text) => {
                    return settle(refusal(text), None, "denied", "refused").await
                }
                Approval::InputRequired(result) => {
                    // Not over: the client asks its user and retries the call.
                    self.audit(&meta, "approval_requested", "input_required", false)
                        .await;
                    return Some(Ok(result));
                }
            }
        }
        match hooks::run_before(&self.before_hooks, &ctx).await {
            BeforeOutcome::Pass => {}
            BeforeOutcome::Deny(reason) => {
                return settle(refusal(reason.as_str()), None, "denied", "refused").await
            }
            BeforeOutcome::Answer(result) => {
                return settle(Some(result), None, "answered_by_hook", "ok").await
            }
            BeforeOutcome::Failed(e) => {
                tracing::error!(tool = %ctx.tool, "a before hook failed; the tool is not run: {e}");
                return settle(
                    None,
                    Some(format!("before hook failed: {e}")),
                    "denied",
                    "failed",
                )
                .await;
            }
        }
        // The ledger last: only a call that will run claims its key (I1).
        if let Some((scope, key)) = &meta.ledger {
            let args = Value::Object(ctx.arguments.clone());
            match self.trail.claim(scope, key, &ctx.tool, &args).await {
                Ok(Claim::Run) => {}
                Ok(Claim::Replay(result)) => {
                    self.after(ctx.clone(), Some(result.clone()), None, meta.started);
                    self.audit(&meta, "allowed", "ok", true).await;
                    return Some(Ok(result));
                }
                Ok(Claim::Running) => {
                    return settle(refusal(answer::ALREADY_RUNNING), None, "denied", "refused")
                        .await
                }
                Ok(Claim::Mismatch) => {
                    return settle(
                        refusal(&answer::idempotency_mismatch(key)),
                        None,
                        "denied",
                        "refused",
                    )
                    .await
                }
                Err(e) => {
                    // A call that needs the ledger fails closed when the store is unavailable.
                    tracing::error!(tool = %ctx.tool, "the ledger is unavailable; the call is refused: {e}");
                    return settle(None, Some(e.to_string()), "allowed", "failed").await;
                }
            }
        }
        match self
            .begin_relay(up, session, client_id, "tools/call", params, meta)
            .await
        {
            Ok(pending) => self.finish(session, pending).await,
            Err(body) => body,
        }
    }

    /// Writes the call's audit record (when calls are audited), before its answer.
    async fn audit(&self, meta: &CallMeta, decision: &str, outcome: &str, replayed: bool) {
        if meta.tool.is_some() {
            self.metrics
                .observe(decision, outcome, ms_since(meta.started));
        }
        if let Some(base) = &meta.audit {
            self.trail
                .record(base, decision, outcome, ms_since(meta.started), replayed)
                .await;
        }
    }

    /// H5 `ask`: puts the call to the human through MCP elicitation: a request to
    /// the client, or, for a 2026-07-28 client, an `InputRequiredResult` whose
    /// answer comes back with the retried call.
    async fn approve(
        &self,
        session: &ClientSession,
        ctx: &CallContext,
        envelope: Option<&Envelope>,
    ) -> Approval {
        let can = match envelope {
            Some(e) => e.can("elicitation"),
            None => session.client_can("elicitation"),
        };
        if !can {
            tracing::info!(tool = %ctx.tool, "approval needed but the client cannot elicit; denied");
            return Approval::Refused(answer::APPROVAL_UNAVAILABLE);
        }
        let args = serde_json::to_string(&ctx.arguments).unwrap_or_default();
        let shown: String = args.chars().take(2000).collect();
        let mut params = json!({
            "message": answer::approval_question(&ctx.tool, &shown),
            "requestedSchema": {
                "type": "object",
                "properties": {"approve": {"type": "boolean", "title": "Approve this call", "default": false}},
                "required": ["approve"]
            }
        });
        if let Some(e) = envelope {
            let caller = ctx
                .caller
                .as_ref()
                .map(|c| c.name.as_str())
                .unwrap_or_default();
            let binding = modern::Binding::new(caller, &ctx.tool, &ctx.arguments);
            let now = modern::unix_now();
            let answered = e
                .request_state
                .as_deref()
                .filter(|t| self.state_key.opens(t, &binding, now))
                .and(e.input_responses.as_ref())
                .and_then(|r| r.get(modern::APPROVAL_KEY));
            if let Some(answer) = answered {
                let approved = answer.get("action").and_then(Value::as_str) == Some("accept")
                    && answer.pointer("/content/approve") == Some(&Value::Bool(true));
                tracing::info!(tool = %ctx.tool, approved, "approval answered");
                return if approved {
                    Approval::Approved
                } else {
                    Approval::Refused(answer::APPROVAL_REFUSED)
                };
            }
            params["mode"] = json!("form");
            return Approval::InputRequired(json!({
                "resultType": "input_required",
                "inputRequests": {modern::APPROVAL_KEY: {"method": "elicitation/create", "params": params}},
                "requestState": self.state_key.seal(&binding, now),
            }));
        }
        if session.client_version() == Some(SUPPORTED_VERSIONS[0]) {
            params["mode"] = json!("form");
        }
        let id = json!(format!(
            "warden-{}",
            self.next_server_request.fetch_add(1, Ordering::Relaxed)
        ));
        let timeout = Duration::from_millis(self.config.access.approval_timeout_ms);
        let answer = session.ask(id, "elicitation/create", params, timeout).await;
        let approved = answer.as_ref().is_some_and(|a| {
            a.pointer("/result/action").and_then(Value::as_str) == Some("accept")
                && a.pointer("/result/content/approve") == Some(&Value::Bool(true))
        });
        tracing::info!(tool = %ctx.tool, approved, "approval answered");
        if approved {
            Approval::Approved
        } else {
            Approval::Refused(answer::APPROVAL_REFUSED)
        }
    }

    /// H4: runs the after hooks once, without delaying the answer.
    fn after(
        &self,
        ctx: Arc<CallContext>,
        result: Option<Value>,
        failure: Option<String>,
        started: Instant,
    ) {
        if self.after_hooks.is_empty() {
            return;
        }
        let hooks = self.after_hooks.clone();
        let end = CallEnd {
            result,
            failure,
            duration_ms: started.elapsed().as_secs_f64() * 1e3,
        };
        tokio::spawn(async move {
            for e in hooks::run_after(&hooks, &ctx, &end).await {
                tracing::warn!(tool = %ctx.tool, "an after hook failed (ignored): {e}");
            }
        });
    }

    /// Replaces the caller's progress token with one unique across sessions and
    /// remembers the way back. Returns the token sent upstream.
    fn map_progress_token(
        &self,
        session: &Arc<ClientSession>,
        params: &mut Map<String, Value>,
    ) -> Option<String> {
        let meta = params.get_mut("_meta")?.as_object_mut()?;
        let theirs = meta.get("progressToken")?.clone();
        let ours = format!("warden-{}", self.next_token.fetch_add(1, Ordering::Relaxed));
        meta.insert("progressToken".into(), Value::String(ours.clone()));
        lock(&self.progress).insert(ours.clone(), (Arc::downgrade(session), theirs));
        Some(ours)
    }

    /// Queues a request to an upstream on behalf of a client request, keeping the
    /// id mapping for cancellation while it runs.
    #[allow(clippy::too_many_arguments)]
    async fn begin_relay(
        &self,
        up: &Upstream,
        session: &ClientSession,
        client_id: Option<&Value>,
        method: &str,
        params: Value,
        meta: CallMeta,
    ) -> Result<Pending, Option<Body>> {
        let pending = |conn, id, reply, meta| Pending {
            conn,
            id,
            reply,
            timeout_ms: up.timeout_ms(),
            upstream: up.name.clone(),
            method: method.to_owned(),
            client_key: client_id.map(jsonrpc::id_key),
            meta,
        };
        let started_call = match up.conn() {
            Some(conn) => conn
                .start(method, Some(params), up.timeout_ms())
                .await
                .map(|(id, reply)| (conn, id, reply)),
            None => Err(CallError::Gone),
        };
        match started_call {
            Ok((conn, id, reply)) => {
                let p = pending(conn, id, reply, meta);
                if let Some(k) = &p.client_key {
                    lock(&session.inflight).insert(k.clone(), (Arc::downgrade(&p.conn), id));
                    if let Some(level) = p.meta.envelope.as_ref().and_then(|e| e.log_level) {
                        lock(&session.log_levels).insert(k.clone(), level);
                    }
                }
                Ok(p)
            }
            Err(e) => Err(self.failed(&meta, &up.name, method, e).await),
        }
    }

    /// Waits for a relayed request's answer and turns it into the client's response body.
    async fn finish(&self, session: &ClientSession, mut p: Pending) -> Option<Body> {
        let bridged = p.meta.binding.is_some() && p.meta.tool.is_some();
        let result = match (&p.client_key, bridged) {
            (Some(key), true) => {
                // A 2026-07-28 call: an upstream's request for it interrupts the wait.
                let (tx, mut rx) = mpsc::channel(1);
                lock(&session.interrupts).insert(key.clone(), tx);
                let envelope = p.meta.envelope.clone();
                let outcome = loop {
                    tokio::select! {
                        r = p.conn.wait(p.id, &mut p.reply, p.timeout_ms) => break Ok(r),
                        Some((their_id, request)) = rx.recv() => {
                            let method = request.get("method").and_then(Value::as_str).unwrap_or_default();
                            let can = modern::input_capability(method)
                                .is_some_and(|c| envelope.as_ref().is_some_and(|e| e.can(c)));
                            if can {
                                break Err((their_id, request));
                            }
                            // The client did not declare it can answer this: the upstream hears so now.
                            refuse_upstream(&p.conn, their_id, answer::CLIENT_LACKS_CAPABILITY).await;
                        }
                    }
                };
                lock(&session.interrupts).remove(key);
                match outcome {
                    Ok(r) => r,
                    Err((their_id, request)) => {
                        return self.park(session, p, their_id, request).await
                    }
                }
            }
            _ => p.conn.wait(p.id, &mut p.reply, p.timeout_ms).await,
        };
        if let Some(k) = &p.client_key {
            lock(&session.inflight).remove(k);
            lock(&session.log_levels).remove(k);
        }
        match result {
            Ok(response) => {
                if let Some(t) = &p.meta.token {
                    lock(&self.progress).remove(t);
                }
                tracing::debug!(method = %p.method, tool = ?p.meta.tool, ms = p.meta.started.elapsed().as_millis() as u64, "relayed");
                let body = response_body(response);
                if let Some(ctx) = p.meta.ctx.clone() {
                    match &body {
                        Ok(result) => self.after(ctx, Some(result.clone()), None, p.meta.started),
                        Err(error) => self.after(
                            ctx,
                            None,
                            Some(format!("upstream error: {error}")),
                            p.meta.started,
                        ),
                    }
                }
                if p.meta.tool.is_some() {
                    let outcome = match &body {
                        Ok(r) if r.get("isError") == Some(&Value::Bool(true)) => "tool_error",
                        Ok(_) => "ok",
                        Err(_) => "upstream_error",
                    };
                    if let Some((scope, key)) = &p.meta.ledger {
                        let finish = match &body {
                            Ok(result) => Finish::Completed(result.clone()),
                            Err(error) => Finish::Failed(error.to_string()),
                        };
                        self.trail.finish(scope, key, finish).await;
                    }
                    self.audit(&p.meta, "allowed", outcome, false).await;
                }
                Some(body)
            }
            Err(e) => self.failed(&p.meta, &p.upstream, &p.method, e).await,
        }
    }

    /// Sets a 2026-07-28 call aside and puts its upstream's request to the client as
    /// an `InputRequiredResult`; the client's retry resumes it ([`Gateway::resume`]).
    /// A call nobody comes back for is cancelled upstream after its timeout.
    async fn park(
        &self,
        session: &ClientSession,
        p: Pending,
        their_id: Value,
        request: Value,
    ) -> Option<Body> {
        if let Some(k) = &p.client_key {
            lock(&session.inflight).remove(k);
            lock(&session.log_levels).remove(k);
        }
        let Some(binding) = p.meta.binding.clone() else {
            return Some(answer_body(Answer::ToolError(
                answer::INTERNAL_ERROR.into(),
            )));
        };
        let mut park_id = [0u8; 16];
        if getrandom::fill(&mut park_id).is_err() {
            return Some(answer_body(Answer::ToolError(
                answer::INTERNAL_ERROR.into(),
            )));
        }
        let park_id: String = park_id.iter().map(|b| format!("{b:02x}")).collect();
        let state = self
            .state_key
            .seal_parked(&binding, modern::unix_now(), Some(&park_id));
        self.audit(&p.meta, "input_requested", "input_required", false)
            .await;
        let timeout = Duration::from_millis(p.timeout_ms);
        lock(&self.parked).insert(
            park_id.clone(),
            Parked {
                pending: p,
                asked: their_id,
            },
        );
        if let Some(me) = self.me.upgrade() {
            tokio::spawn(async move {
                tokio::time::sleep(timeout).await;
                let gone = lock(&me.parked).remove(&park_id);
                if let Some(parked) = gone {
                    tracing::info!(tool = ?parked.pending.meta.tool, "a parked call's client did not come back; cancelled");
                    let conn = parked.pending.conn.clone();
                    refuse_upstream(&conn, parked.asked, answer::CLIENT_DID_NOT_ANSWER).await;
                    conn.cancel(parked.pending.id, "the client did not come back");
                    let p = parked.pending;
                    me.failed(
                        &p.meta,
                        &p.upstream,
                        &p.method,
                        CallError::Timeout(p.timeout_ms),
                    )
                    .await;
                }
            });
        }
        let method = request.get("method").cloned().unwrap_or(Value::Null);
        let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
        Some(Ok(json!({
            "resultType": "input_required",
            "inputRequests": {modern::UPSTREAM_KEY: {"method": method, "params": params}},
            "requestState": state,
        })))
    }

    /// A retried 2026-07-28 call whose requestState names a parked call: the
    /// client's answer goes to the upstream's request and the wait goes on.
    /// `None` when the call names no parked call (it then runs as a new one).
    async fn resume(
        &self,
        session: &Arc<ClientSession>,
        id: &Value,
        params: Option<&Value>,
        envelope: &Envelope,
    ) -> Option<Begun> {
        let token = envelope.request_state.as_deref()?;
        let name = params?.get("name")?.as_str()?;
        let binding = call_binding(session, name, params?.get("arguments"));
        let park_id = self.state_key.open(token, &binding, modern::unix_now())??;
        let Some(parked) = lock(&self.parked).remove(&park_id) else {
            return Some(Begun::Done(Some(answer_body(Answer::ToolError(
                answer::INPUT_ROUND_EXPIRED.into(),
            )))));
        };
        let reply = match envelope
            .input_responses
            .as_ref()
            .and_then(|r| r.get(modern::UPSTREAM_KEY))
        {
            Some(result) => jsonrpc::response(parked.asked, result.clone()),
            None => jsonrpc::error(
                parked.asked,
                jsonrpc::INTERNAL_ERROR,
                answer::CLIENT_DID_NOT_ANSWER,
            ),
        };
        let mut pending = parked.pending;
        pending.conn.send(reply).await;
        let key = jsonrpc::id_key(id);
        lock(&session.inflight).insert(key.clone(), (Arc::downgrade(&pending.conn), pending.id));
        if let Some(level) =
            envelope
                .log_level
                .or(pending.meta.envelope.as_ref().and_then(|e| e.log_level))
        {
            lock(&session.log_levels).insert(key.clone(), level);
        }
        pending.client_key = Some(key);
        Some(Begun::Waiting(pending))
    }

    /// E2: a relayed request that failed. Details go to the log, never to the caller.
    async fn failed(
        &self,
        meta: &CallMeta,
        upstream: &str,
        method: &str,
        e: CallError,
    ) -> Option<Body> {
        if let Some(t) = &meta.token {
            lock(&self.progress).remove(t);
        }
        if let Some(ctx) = &meta.ctx {
            self.after(ctx.clone(), None, Some(e.to_string()), meta.started);
        }
        if let Some((scope, key)) = &meta.ledger {
            self.trail
                .finish(scope, key, Finish::Failed(e.to_string()))
                .await;
        }
        let outcome = if e == CallError::Cancelled {
            "cancelled"
        } else {
            "failed"
        };
        self.audit(meta, "allowed", outcome, false).await;
        if e == CallError::Cancelled {
            return None;
        }
        let ms = meta.started.elapsed().as_millis() as u64;
        tracing::error!(%upstream, %method, tool = ?meta.tool, ms, "request failed: {e}");
        Some(match meta.tool {
            Some(_) => answer_body(Answer::ToolError(answer::INTERNAL_ERROR.into())),
            None => {
                Err(json!({"code": jsonrpc::INTERNAL_ERROR, "message": answer::UPSTREAM_NO_ANSWER}))
            }
        })
    }

    /// Handles one message from a client. What must keep arrival order (the pipeline,
    /// queueing upstream, the gateway's own answers) happens before this returns;
    /// waiting for an upstream's answer is the returned future, for the front to run.
    pub async fn handle(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        mut msg: Value,
    ) -> Option<Waiting> {
        match jsonrpc::classify(&msg) {
            Kind::Request { id, method } => {
                let id = id.clone();
                let method = method.to_owned();
                // Moved out, not copied: the arguments may be large.
                let mut params = msg.get_mut("params").map(Value::take);
                let envelope = match modern::take_envelope(&mut params) {
                    Ok(e) => e.map(Arc::new),
                    Err(error) => {
                        respond(session, id, Some(Err(error))).await;
                        return None;
                    }
                };
                // A 2026-07-28 request: its result is stamped for that revision.
                let stamp = envelope.as_ref().map(|_| method.clone());
                if let Some(e) = &envelope {
                    session.modern.store(true, Ordering::Relaxed);
                    // The first client's capabilities are what upstreams are offered
                    // (built only while nothing is connected yet).
                    if !self.connected.initialized() {
                        self.connect(Some(&e.upstream_init(SUPPORTED_VERSIONS[0])))
                            .await;
                    }
                    if method == "server/discover" {
                        self.connect(None).await;
                        let (capabilities, instructions) = self.offered();
                        let body = modern::discover(capabilities, instructions);
                        respond(session, id, Some(Ok(body))).await;
                        return None;
                    }
                    if modern::REMOVED.contains(&method.as_str())
                        || method == "subscriptions/listen"
                    {
                        let error = json!({"code": jsonrpc::METHOD_NOT_FOUND, "message": answer::method_not_found(&method)});
                        respond(session, id, Some(Err(error))).await;
                        return None;
                    }
                }
                if let Some(field) = merged_field(&method) {
                    let ups = self.capable(capability_of(&method).unwrap_or_default());
                    if ups.len() > 1 {
                        let (me, session) = (self.clone(), session.clone());
                        return Some(Box::pin(async move {
                            let body = me.merged_list(&method, field, ups).await;
                            respond_as(&session, id, Some(body), stamp.as_deref()).await;
                        }));
                    }
                }
                match self
                    .handle_request(session, &id, &method, params, envelope)
                    .await
                {
                    Begun::Done(body) => {
                        respond_as(session, id, body, stamp.as_deref()).await;
                        None
                    }
                    Begun::Waiting(pending) => {
                        let (me, session) = (self.clone(), session.clone());
                        Some(Box::pin(async move {
                            let body = me.finish(&session, pending).await;
                            respond_as(&session, id, body, stamp.as_deref()).await;
                        }))
                    }
                    Begun::Later(run) => {
                        let session = session.clone();
                        Some(Box::pin(async move {
                            let body = run.await;
                            respond_as(&session, id, body, stamp.as_deref()).await;
                        }))
                    }
                }
            }
            Kind::Notification { method } => {
                let method = method.to_owned();
                self.handle_notification(session, &method, msg).await;
                None
            }
            Kind::Response { id } => {
                let key = jsonrpc::id_key(id);
                let own = lock(&session.own_requests).remove(&key);
                if let Some(waiter) = own {
                    let _ = waiter.send(msg);
                    return None;
                }
                let target = lock(&session.server_requests).remove(&key);
                match target.and_then(|(conn, their_id)| Some((conn.upgrade()?, their_id))) {
                    Some((conn, their_id)) => {
                        let mut msg = msg;
                        msg["id"] = their_id;
                        conn.send(msg).await;
                    }
                    None => {
                        tracing::debug!(id = %key, "a client response to no pending request was ignored")
                    }
                }
                None
            }
            Kind::Invalid(why) => {
                let id = jsonrpc::usable_id(&msg);
                session
                    .send(jsonrpc::error(
                        id,
                        jsonrpc::INVALID_REQUEST,
                        &answer::invalid_request(why),
                    ))
                    .await;
                None
            }
        }
    }

    async fn handle_request(
        &self,
        session: &Arc<ClientSession>,
        id: &Value,
        method: &str,
        params: Option<Value>,
        envelope: Option<Arc<Envelope>>,
    ) -> Begun {
        let err = |code: i64, message: &str| {
            Begun::Done(Some(Err(json!({"code": code, "message": message}))))
        };
        match method {
            "initialize" => {
                let caps = params
                    .as_ref()
                    .and_then(|p| p.get("capabilities"))
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                *session.client.write().unwrap_or_else(|e| e.into_inner()) =
                    Some((caps, negotiated_version(params.as_ref())));
                Begun::Done(Some(Ok(self.initialize(params.as_ref()).await)))
            }
            "ping" => Begun::Done(Some(Ok(json!({})))),
            "tools/list" => {
                self.connect(None).await;
                match self.list_tools(session.caller.as_ref()).await {
                    Ok(result) => Begun::Done(Some(Ok(result))),
                    Err(message) => err(jsonrpc::INTERNAL_ERROR, &message),
                }
            }
            "tools/call" => {
                self.connect(None).await;
                if let Some(e) = &envelope {
                    if let Some(resumed) = self.resume(session, id, params.as_ref(), e).await {
                        return resumed;
                    }
                }
                self.begin_call(session, Some(id), params.unwrap_or(Value::Null), envelope)
                    .await
            }
            _ => {
                self.connect(None).await;
                let Some(up) = self.route(method, params.as_ref()) else {
                    return err(jsonrpc::METHOD_NOT_FOUND, &answer::method_not_found(method));
                };
                let params = params.unwrap_or_else(|| json!({}));
                let meta = CallMeta {
                    tool: None,
                    token: None,
                    started: Instant::now(),
                    ctx: None,
                    audit: None,
                    ledger: None,
                    envelope: None,
                    binding: None,
                };
                match self
                    .begin_relay(&up, session, Some(id), method, params, meta)
                    .await
                {
                    Ok(pending) => Begun::Waiting(pending),
                    Err(body) => Begun::Done(body),
                }
            }
        }
    }

    /// Which upstream serves a method the gateway does not govern: the one upstream
    /// that declared the capability it belongs to (the first such, with several).
    fn route(&self, method: &str, params: Option<&Value>) -> Option<Arc<Upstream>> {
        let Some(capability) = capability_of(method) else {
            // Not tied to a capability: only unambiguous with a single upstream.
            return match self.upstreams.as_slice() {
                [only] if only.conn().is_some() => Some(only.clone()),
                _ => None,
            };
        };
        // A resource or prompt seen in a merged listing goes to the upstream that listed it.
        if let Some(key) = params.and_then(route_key) {
            let routed = lock(&self.routes).get(&key).copied();
            if let Some(up) = routed
                .and_then(|i| self.upstreams.get(i))
                .filter(|u| u.conn().is_some())
            {
                return Some(up.clone());
            }
        }
        self.capable(capability).into_iter().next()
    }

    /// Running upstreams that declared `capability`, in config order.
    fn capable(&self, capability: &str) -> Vec<Arc<Upstream>> {
        self.upstreams
            .iter()
            .filter(|u| {
                u.conn().is_some()
                    && u.info()
                        .is_some_and(|i| i.capabilities.contains_key(capability))
            })
            .cloned()
            .collect()
    }

    /// `resources/list`, `resources/templates/list` or `prompts/list` over several
    /// upstreams: every page of each, concatenated in config order, remembering which
    /// upstream offers which URI or prompt. One failing upstream fails the listing.
    async fn merged_list(&self, method: &str, field: &str, ups: Vec<Arc<Upstream>>) -> Body {
        let mut items = Vec::new();
        for up in ups {
            let conn = up.conn().ok_or_else(|| listing_failed(&up.name))?;
            let mut cursor: Option<Value> = None;
            loop {
                let params = match cursor.take() {
                    Some(c) => json!({"cursor": c}),
                    None => json!({}),
                };
                let response = conn
                    .request(method, Some(params), up.timeout_ms())
                    .await
                    .map_err(|e| {
                        tracing::error!(upstream = %up.name, %method, "listing failed: {e}");
                        listing_failed(&up.name)
                    })?;
                let result = response_body(response)?;
                let page = result
                    .get(field)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                {
                    let mut routes = lock(&self.routes);
                    for item in &page {
                        if let Some(key) = item_route_key(field, item) {
                            routes.entry(key).or_insert(up.index);
                        }
                    }
                }
                items.extend(page);
                match result.get("nextCursor") {
                    Some(c) if !c.is_null() => cursor = Some(c.clone()),
                    _ => break,
                }
            }
        }
        let mut result = Map::new();
        result.insert(field.to_owned(), Value::Array(items));
        Ok(Value::Object(result))
    }

    async fn initialize(&self, params: Option<&Value>) -> Value {
        self.connect(params).await;
        let version = negotiated_version(params);
        let (capabilities, instructions) = self.offered();
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": {"name": "mcp-warden", "version": env!("CARGO_PKG_VERSION")},
        });
        if let Some(i) = instructions {
            result["instructions"] = Value::String(i);
        }
        result
    }

    /// The capabilities the gateway offers (its upstreams' merged, tools always)
    /// and their instructions.
    fn offered(&self) -> (Map<String, Value>, Option<String>) {
        let mut capabilities = Map::new();
        let mut instructions = Vec::new();
        for up in &self.upstreams {
            if let Some(info) = up.info() {
                merge_capabilities(&mut capabilities, &info.capabilities);
                if let Some(i) = info.instructions {
                    instructions.push(i);
                }
            }
        }
        capabilities.insert("tools".into(), json!({"listChanged": true}));
        let instructions = (!instructions.is_empty()).then(|| instructions.join("\n\n"));
        (capabilities, instructions)
    }

    async fn handle_notification(&self, session: &Arc<ClientSession>, method: &str, msg: Value) {
        match method {
            // The gateway initialised each upstream itself.
            "notifications/initialized" => {}
            "notifications/cancelled" => {
                let Some(request_id) = msg.pointer("/params/requestId") else {
                    return;
                };
                let target = lock(&session.inflight)
                    .get(&jsonrpc::id_key(request_id))
                    .cloned();
                if let Some((conn, upstream_id)) = target {
                    if let Some(conn) = conn.upgrade() {
                        let reason = msg
                            .pointer("/params/reason")
                            .and_then(Value::as_str)
                            .unwrap_or("cancelled by the client");
                        conn.cancel(upstream_id, reason);
                    }
                }
            }
            _ => {
                for up in &self.upstreams {
                    if let Some(conn) = up.conn() {
                        conn.send(msg.clone()).await;
                    }
                }
            }
        }
    }

    /// Re-lists one upstream's tools after `list_changed` or a restart; the cached
    /// listing is replaced only when this succeeds.
    async fn refresh(&self, index: usize) -> bool {
        let result = self.upstreams[index].list_tools().await;
        let ok = self.record_listing(index, result);
        if ok {
            self.rebuild_catalogue();
        }
        ok
    }

    async fn broadcast(&self, msg: Value) {
        // 2026-07-28 clients get such notifications only on subscriptions/listen streams.
        for s in self
            .live_sessions()
            .into_iter()
            .filter(|s| !s.modern.load(Ordering::Relaxed))
        {
            s.send(msg.clone()).await;
        }
    }

    /// The session an upstream's request or log message is for: the one whose call
    /// it came with (an HTTP upstream says which), else the only session with a call
    /// on that connection, else the only session there is. Several candidates and
    /// nothing to tell them apart: none, so one caller never sees another's traffic.
    fn session_for(&self, conn: &Arc<Conn>, related: Option<u64>) -> Option<Arc<ClientSession>> {
        let sessions = self.live_sessions();
        if let Some(upstream_id) = related {
            let owner = sessions.iter().find(|s| {
                lock(&s.inflight).values().any(|(c, id)| {
                    *id == upstream_id && c.upgrade().is_some_and(|c| Arc::ptr_eq(&c, conn))
                })
            });
            if let Some(owner) = owner {
                return Some(owner.clone());
            }
        }
        let mut using = sessions.iter().filter(|s| s.uses(conn));
        match (using.next(), using.next()) {
            (Some(only), None) => return Some(only.clone()),
            (Some(_), Some(_)) => return None,
            (None, _) => {}
        }
        match sessions.as_slice() {
            [only] => Some(only.clone()),
            _ => None,
        }
    }

    async fn route_from_upstream(
        self: Arc<Self>,
        index: usize,
        conn: Arc<Conn>,
        msg: Value,
        related: Option<u64>,
    ) {
        let method = msg
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let id = msg.get("id").cloned();
        match (id, method.as_str()) {
            (Some(id), "ping") => conn.send(jsonrpc::response(id, json!({}))).await,
            (Some(their_id), _) => {
                let Some(session) = self.session_for(&conn, related) else {
                    let text = if self.live_sessions().is_empty() {
                        answer::NO_CLIENT
                    } else {
                        tracing::warn!(upstream = %self.upstreams[index].name, %method, "an upstream request could not be tied to one client; refused");
                        answer::UNTIED_REQUEST
                    };
                    return refuse_upstream(&conn, their_id, text).await;
                };
                if session.modern.load(Ordering::Relaxed) {
                    // A 2026-07-28 client takes requests only as input requests of the
                    // call they belong to (its latest call on this connection).
                    if modern::input_capability(&method).is_some() {
                        let call = related
                            .and_then(|r| session.call_for(&conn, r))
                            .or_else(|| session.latest_on(&conn));
                        let interrupt =
                            call.and_then(|k| lock(&session.interrupts).get(&k).cloned());
                        if let Some(tx) = interrupt {
                            let mut request = msg;
                            if let Some(o) = request.as_object_mut() {
                                o.shift_remove("id");
                            }
                            if tx.send((their_id.clone(), request)).await.is_ok() {
                                return;
                            }
                        }
                    }
                    return refuse_upstream(&conn, their_id, answer::CLIENT_TAKES_NO_REQUESTS)
                        .await;
                }
                let ours = json!(format!(
                    "warden-{}",
                    self.next_server_request.fetch_add(1, Ordering::Relaxed)
                ));
                lock(&session.server_requests)
                    .insert(jsonrpc::id_key(&ours), (Arc::downgrade(&conn), their_id));
                let mut msg = msg;
                msg["id"] = ours;
                session.send(msg).await;
            }
            (None, "notifications/progress") => {
                let token = msg
                    .pointer("/params/progressToken")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let target = token.and_then(|t| lock(&self.progress).get(&t).cloned());
                if let Some((session, theirs)) = target {
                    if let Some(session) = session.upgrade() {
                        let mut msg = msg;
                        msg["params"]["progressToken"] = theirs;
                        session.send(msg).await;
                    }
                }
            }
            (None, "notifications/cancelled") => {
                // The upstream withdrew one of its own requests: find what we called it.
                let Some(their_id) = msg.pointer("/params/requestId").cloned() else {
                    return;
                };
                for session in self.live_sessions() {
                    let ours = lock(&session.server_requests)
                        .iter()
                        .find(|(_, (c, id))| {
                            *id == their_id && c.upgrade().is_some_and(|c| Arc::ptr_eq(&c, &conn))
                        })
                        .map(|(k, _)| k.clone());
                    if let Some(ours) = ours {
                        lock(&session.server_requests).remove(&ours);
                        let mut msg = msg.clone();
                        msg["params"]["requestId"] =
                            serde_json::from_str(&ours).unwrap_or(Value::Null);
                        session.send(msg).await;
                    }
                }
            }
            (None, "notifications/tools/list_changed") => {
                // Re-listing needs this connection's reader, which is running us: not inline.
                let me = self.clone();
                tokio::spawn(async move {
                    if me.refresh(index).await {
                        me.broadcast(msg).await;
                    }
                });
            }
            (None, "notifications/message") => {
                // Log messages may carry a caller's data: only to the session they belong to.
                match self.session_for(&conn, related) {
                    Some(s) if !s.modern.load(Ordering::Relaxed) => s.send(msg).await,
                    Some(s) => {
                        // 2026-07-28: only for a call that opted in, at or above its level.
                        let call = related
                            .and_then(|r| s.call_for(&conn, r))
                            .or_else(|| s.latest_on(&conn));
                        let wanted = call.and_then(|k| lock(&s.log_levels).get(&k).copied());
                        let level = msg
                            .pointer("/params/level")
                            .and_then(Value::as_str)
                            .and_then(modern::log_rank);
                        if wanted.is_some_and(|w| level.is_some_and(|l| l >= w)) {
                            s.send(msg).await;
                        }
                    }
                    None => {
                        tracing::debug!(upstream = %self.upstreams[index].name, "an upstream log message tied to no one client was not relayed")
                    }
                }
            }
            (None, _) => self.broadcast(msg).await,
        }
    }

    fn restart_later(self: Arc<Self>, index: usize) {
        tokio::spawn(async move {
            let up = self.upstreams[index].clone();
            let mut delay = Duration::from_millis(100);
            loop {
                tokio::time::sleep(delay).await;
                if self.shutting_down.load(Ordering::SeqCst) {
                    return;
                }
                let init = self
                    .upstream_init
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                let init = init.unwrap_or_else(|| upstream_init(None));
                tracing::info!(upstream = %up.name, "restarting upstream");
                match up.connect(self.inbound(), &init).await {
                    Ok(tools) => {
                        self.record_listing(index, Ok(tools));
                        self.rebuild_catalogue();
                        self.broadcast(jsonrpc::notification(
                            "notifications/tools/list_changed",
                            None,
                        ))
                        .await;
                        return;
                    }
                    Err(e) => {
                        tracing::error!(upstream = %up.name, "restart failed: {e}; next try in {:?}", delay * 2);
                        delay = (delay * 2).min(Duration::from_secs(10));
                    }
                }
            }
        });
    }

    /// Stops every upstream; no restarts after this.
    pub async fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        join_all(
            self.upstreams
                .iter()
                .cloned()
                .map(|u| async move { u.shutdown().await }),
        )
        .await;
    }
}

impl Inbound for Gateway {
    fn on_message(
        &self,
        upstream: usize,
        conn: &Arc<Conn>,
        msg: Value,
        related: Option<u64>,
    ) -> BoxedSend {
        let me = self.me.upgrade();
        let conn = conn.clone();
        Box::pin(async move {
            if let Some(me) = me {
                me.route_from_upstream(upstream, conn, msg, related).await;
            }
        })
    }

    fn on_exit(&self, upstream: usize, generation: u64) {
        if self.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        let current = self.upstreams[upstream].conn().map(|c| c.generation);
        if current.is_some_and(|g| g != generation) {
            return; // an older child; a newer one already runs
        }
        tracing::warn!(upstream = %self.upstreams[upstream].name, "upstream stopped; it will be restarted");
        if let Some(me) = self.me.upgrade() {
            me.restart_later(upstream);
        }
    }
}

/// The capability a method belongs to, for the methods the gateway relays.
fn capability_of(method: &str) -> Option<&'static str> {
    match method.split('/').next()? {
        "resources" => Some("resources"),
        "prompts" => Some("prompts"),
        "completion" => Some("completions"),
        "logging" => Some("logging"),
        _ => None,
    }
}

/// The result field of the list methods merged across upstreams.
fn merged_field(method: &str) -> Option<&'static str> {
    match method {
        "resources/list" => Some("resources"),
        "resources/templates/list" => Some("resourceTemplates"),
        "prompts/list" => Some("prompts"),
        _ => None,
    }
}

/// The routing key a request names: a resource URI or a prompt name.
fn route_key(params: &Value) -> Option<String> {
    if let Some(uri) = params.get("uri").and_then(Value::as_str) {
        return Some(format!("uri:{uri}"));
    }
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        return Some(format!("prompt:{name}"));
    }
    let r = params.get("ref")?;
    match r.get("type").and_then(Value::as_str)? {
        "ref/prompt" => Some(format!("prompt:{}", r.get("name")?.as_str()?)),
        "ref/resource" => Some(format!("uri:{}", r.get("uri")?.as_str()?)),
        _ => None,
    }
}

fn item_route_key(field: &str, item: &Value) -> Option<String> {
    match field {
        "resources" => Some(format!("uri:{}", item.get("uri")?.as_str()?)),
        "resourceTemplates" => Some(format!("uri:{}", item.get("uriTemplate")?.as_str()?)),
        "prompts" => Some(format!("prompt:{}", item.get("name")?.as_str()?)),
        _ => None,
    }
}

fn listing_failed(upstream: &str) -> Value {
    json!({"code": jsonrpc::INTERNAL_ERROR, "message": answer::listing_failed(&[upstream.to_owned()])})
}

/// Answers an upstream's request with an error: nobody can answer it.
async fn refuse_upstream(conn: &Conn, id: Value, text: &str) {
    conn.send(jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, text))
        .await;
}

/// What a 2026-07-28 call's sealed state is bound to: the caller, the tool as the
/// caller named it, and the arguments as the caller sent them.
fn call_binding(session: &ClientSession, tool: &str, arguments: Option<&Value>) -> modern::Binding {
    let caller = session
        .caller
        .as_ref()
        .map(|c| c.name.as_str())
        .unwrap_or_default();
    let empty = Map::new();
    let args = arguments.and_then(Value::as_object).unwrap_or(&empty);
    modern::Binding::new(caller, tool, args)
}

/// The protocol version to answer an `initialize` with: the one asked for when
/// the gateway speaks it, else the newest it speaks.
fn negotiated_version(params: Option<&Value>) -> &'static str {
    let requested = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str);
    SUPPORTED_VERSIONS
        .iter()
        .find(|v| Some(**v) == requested)
        .copied()
        .unwrap_or(SUPPORTED_VERSIONS[0])
}

/// The initialize params sent upstream: the client's own where there is one.
fn upstream_init(client: Option<&Value>) -> Value {
    let version = negotiated_version(client);
    let capabilities = client
        .and_then(|p| p.get("capabilities"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let info = client
        .and_then(|p| p.get("clientInfo"))
        .cloned()
        .unwrap_or_else(|| json!({"name": "mcp-warden", "version": env!("CARGO_PKG_VERSION")}));
    json!({"protocolVersion": version, "capabilities": capabilities, "clientInfo": info})
}

/// Merges one upstream's capabilities into the set the gateway offers: objects are
/// merged key by key, a `true` flag wins, anything else keeps the first value.
fn merge_capabilities(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (k, v) in from {
        match (into.get_mut(k), v) {
            (None, v) => {
                into.insert(k.clone(), v.clone());
            }
            (Some(Value::Object(a)), Value::Object(b)) => merge_capabilities(a, b),
            (Some(a @ Value::Bool(false)), Value::Bool(true)) => *a = Value::Bool(true),
            _ => {}
        }
    }
}

fn ms_since(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e3
}

/// The JSON-RPC body of a gateway answer.
fn answer_body(answer: Answer) -> Body {
    match answer {
        Answer::ToolError(_) => Ok(answer.to_tool_result().unwrap_or(Value::Null)),
        Answer::RpcError { code, message } => Err(json!({"code": code, "message": message})),
    }
}

/// The body of an upstream's response, passed through unchanged (E3).
fn response_body(mut response: Value) -> Body {
    if let Some(result) = response.get_mut("result") {
        return Ok(result.take());
    }
    match response.get_mut("error") {
        Some(error) => Err(error.take()),
        None => {
            Err(json!({"code": jsonrpc::INTERNAL_ERROR, "message": answer::UPSTREAM_EMPTY_ANSWER}))
        }
    }
}

/// Runs futures concurrently on the runtime and collects their outputs in order.
async fn join_all<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        match h.await {
            Ok(v) => out.push(v),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_merge() {
        let mut a = json!({"resources": {"subscribe": false}, "x-custom": {"a": 1}})
            .as_object()
            .unwrap()
            .clone();
        let b = json!({"resources": {"subscribe": true, "listChanged": true}, "logging": {}})
            .as_object()
            .unwrap()
            .clone();
        merge_capabilities(&mut a, &b);
        assert_eq!(
            Value::Object(a),
            json!({"resources": {"subscribe": true, "listChanged": true}, "x-custom": {"a": 1}, "logging": {}})
        );
    }

    #[test]
    fn upstream_init_offers_the_clients_terms() {
        let client = json!({"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}}, "clientInfo": {"name": "c"}});
        assert_eq!(
            upstream_init(Some(&client)),
            json!({"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}}, "clientInfo": {"name": "c"}})
        );
        assert_eq!(upstream_init(None)["protocolVersion"], "2025-11-25");
        let odd = json!({"protocolVersion": "1999-01-01"});
        assert_eq!(upstream_init(Some(&odd))["protocolVersion"], "2025-11-25");
    }

    #[test]
    fn upstream_bodies_pass_through() {
        assert_eq!(
            response_body(json!({"id": 1, "result": {"a": 1}})),
            Ok(json!({"a": 1}))
        );
        assert_eq!(
            response_body(json!({"id": 1, "error": {"code": -32000, "message": "m", "data": [1]}})),
            Err(json!({"code": -32000, "message": "m", "data": [1]}))
        );
    }

    #[tokio::test]
    async fn join_all_keeps_order() {
        let out = join_all((0..5u64).map(|i| async move {
            tokio::time::sleep(Duration::from_millis(50 - i * 10)).await;
            i
        }))
        .await;
        assert_eq!(out, [0, 1, 2, 3, 4]);
    }
}
