//! Client sessions: one [`ClientSession`] per client connection (a stdio front
//! has exactly one; the HTTP front one per `Mcp-Session-Id`, or one per request at
//! 2026-07-28), and [`Sessions`], the registry of live ones with the progress
//! tokens handed upstream on their behalf.
//!
//! Everything the gateway sends a client is an [`Outgoing`]: the message and the
//! client request it belongs to, so a front never has to work out again which
//! call a message is about.

use crate::jsonrpc;
use crate::logged::logged;
use crate::upstream::Conn;
use bytes::Bytes;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot, Notify};
use warden_core::{Caller, Catalogue, UnknownKeyWarning};

/// A client request, as a map key: its JSON-RPC id ([`jsonrpc::id_key`]).
pub type CallKey = String;

/// A message for a client and the request of its it belongs to.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The client request this message is about: its answer, its progress, or an
    /// upstream's request or log message made while it ran. `None`: the session as
    /// a whole (a list-changed notification, an error about an unreadable message).
    pub call: Option<CallKey>,
    /// The message is the answer to `call`, which ends it.
    pub ends_call: bool,
    pub msg: Value,
    /// The message as the bytes to write, when the gateway has them already (a
    /// cached listing): `msg` then holds only its envelope, for routing.
    pub raw: Option<Bytes>,
}

impl Outgoing {
    /// A message about the session as a whole.
    pub fn session(msg: Value) -> Outgoing {
        Outgoing {
            call: None,
            ends_call: false,
            msg,
            raw: None,
        }
    }
}

/// Log levels, least severe first (RFC 5424 order).
const LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The severity rank of a log level (RFC 5424 order, debug lowest).
pub fn log_rank(level: &str) -> Option<u8> {
    LEVELS.iter().position(|l| *l == level).map(|i| i as u8)
}

/// The log level of a severity rank ([`log_rank`] backwards).
pub fn log_level_name(rank: u8) -> Option<&'static str> {
    LEVELS.get(rank as usize).copied()
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A call held in the gateway (for an approval, or before hooks): a
/// `notifications/cancelled` for it wakes `cancelled`. Dropped, it is no longer held.
pub(crate) struct Held<'a> {
    session: &'a ClientSession,
    key: Option<CallKey>,
    pub(crate) cancelled: Arc<Notify>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some(key) = &self.key {
            lock(&self.session.held).remove(key);
        }
    }
}

impl ClientSession {
    /// Holds call `key` (none: a call no client can cancel) until the guard drops.
    pub(crate) fn hold(&self, key: Option<&CallKey>) -> Held<'_> {
        let cancelled = Arc::new(Notify::new());
        if let Some(key) = key {
            lock(&self.held).insert(key.clone(), cancelled.clone());
        }
        Held {
            session: self,
            key: key.cloned(),
            cancelled,
        }
    }
}

/// One client connection.
/// Where a session's messages go.
pub enum Out {
    /// A channel the front's writer reads (stdio: one writer owns stdout).
    Channel(mpsc::Sender<Outgoing>),
    /// A function that places each message at once, in the sender's task (the
    /// HTTP front sorts it onto its stream under a lock): no hop to another task.
    Direct(Box<dyn Fn(Outgoing) + Send + Sync>),
}

pub struct ClientSession {
    out: Out,
    /// Who the session acts for. Over HTTP each request names its caller again;
    /// an OAuth token's scopes (and so the groups they map to) can change within
    /// a session (a step-up, a refresh), and the session follows them.
    caller: RwLock<Option<Arc<Caller>>>,
    /// The `[oauth]` token of the latest request, for token exchange on the
    /// caller's behalf (it is never sent upstream).
    subject: RwLock<Option<Arc<str>>>,
    /// The verified token's claims of the latest request (`caller.claims`,
    /// X1); `None` without a token (stdio, API keys).
    claims: RwLock<Option<Arc<Map<String, Value>>>>,
    /// How audit records name the session: "stdio", or "http:" and the session id.
    pub label: String,
    pub(crate) warn: warden_core::Session,
    /// Client request → (upstream connection, upstream request id, whether the
    /// request is of a revision before 2026-07-28), for cancellation, for telling
    /// which call an upstream's message belongs to and how the client takes an
    /// upstream's request for it ([`ClientSession::takes_requests_for`]).
    pub(crate) inflight: Mutex<HashMap<CallKey, Inflight>>,
    /// Id we gave the client for an upstream's request → (connection, the upstream's own id).
    pub(crate) server_requests: Mutex<HashMap<String, (Weak<Conn>, Value)>>,
    /// Requests the gateway itself sent the client (approval) → their waiters.
    own_requests: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// 2026-07-28 calls waiting upstream → where an upstream's request for that
    /// call goes, to be put to the client as an input request.
    pub(crate) interrupts: Mutex<HashMap<CallKey, mpsc::Sender<(Value, Value)>>>,
    /// 2026-07-28 calls that opted in to log messages → least severe level wanted.
    pub(crate) log_levels: Mutex<HashMap<CallKey, u8>>,
    /// The level an older client set with `logging/setLevel`, which 2026-07-28
    /// upstreams hear on each of its requests instead.
    pub(crate) log_level: Mutex<Option<Value>>,
    /// Open `subscriptions/listen` streams → what ends them (a cancellation).
    pub(crate) listening: Mutex<HashMap<CallKey, Arc<Notify>>>,
    /// Calls held in the gateway itself (waiting for a human's approval or a
    /// before hook) → what cancels them.
    pub(crate) held: Mutex<HashMap<CallKey, Arc<Notify>>>,
    /// What the client declared in `initialize`: its capabilities and the version agreed.
    client: RwLock<Option<(Value, &'static str)>>,
    /// The client speaks the stateless 2026-07-28 revision: no requests to it, and
    /// no notifications but the progress of its own requests.
    stateless: AtomicBool,
    /// The flow labels of the calls this session was let through (F1-F4).
    pub(crate) flow: Mutex<std::collections::BTreeSet<String>>,
    /// `tools/call` requests the session made so far (`session.calls` of C1).
    pub(crate) calls: std::sync::atomic::AtomicU64,
    /// The virtual server the session was opened on (V1), if any.
    server: std::sync::OnceLock<String>,
    /// The tools `search_tools` found on a growing server (V6), by their
    /// catalogue names: they join the session's listing.
    pub(crate) found: Mutex<std::collections::BTreeSet<String>>,
}

impl ClientSession {
    pub fn new(caller: Option<Caller>, out: mpsc::Sender<Outgoing>) -> Arc<Self> {
        Self::labelled(caller, Out::Channel(out), "stdio".into())
    }

    /// Who the session acts for now.
    pub fn caller(&self) -> Option<Arc<Caller>> {
        self.caller
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The caller of the latest request, when its groups changed (the name of a
    /// session's caller never does: the HTTP front checks that first), and the
    /// OAuth token it showed.
    pub fn update_caller(&self, caller: &Caller, token: Option<Arc<str>>) {
        let now = self.caller();
        if now.as_deref() != Some(caller) {
            *self.caller.write().unwrap_or_else(|e| e.into_inner()) =
                Some(Arc::new(caller.clone()));
        }
        let mut subject = self.subject.write().unwrap_or_else(|e| e.into_inner());
        if subject.as_deref() != token.as_deref() {
            *subject = token;
        }
    }

    /// The claims of the token the caller's latest request showed.
    pub fn set_claims(&self, claims: Option<Arc<Map<String, Value>>>) {
        let mut now = self.claims.write().unwrap_or_else(|e| e.into_inner());
        if *now != claims {
            *now = claims;
        }
    }

    /// `caller.claims` (X1): the verified token's claims, empty without one.
    pub fn claims(&self) -> Map<String, Value> {
        let now = self.claims.read().unwrap_or_else(|e| e.into_inner());
        now.as_deref().cloned().unwrap_or_default()
    }

    /// The `[oauth]` token of the caller's latest request.
    pub fn subject_token(&self) -> Option<Arc<str>> {
        self.subject
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A session whose audit records carry `label`.
    pub fn labelled(caller: Option<Caller>, out: Out, label: String) -> Arc<Self> {
        Arc::new(Self {
            out,
            caller: RwLock::new(caller.map(Arc::new)),
            subject: RwLock::new(None),
            claims: RwLock::new(None),
            label,
            warn: warden_core::Session::new(Arc::new(|w: &UnknownKeyWarning| {
                // The keys are the caller's, the tool and its declared keys the
                // upstream's: none of them is written raw.
                tracing::warn!(
                    tool = %logged(&w.tool),
                    unknown = %logged(w.unknown_keys.join(", ")),
                    declared = %logged(w.declared_keys.join(", ")),
                    "a call carried argument(s) the tool does not declare; forwarded unchanged (warn mode)"
                );
            })),
            inflight: Mutex::new(HashMap::new()),
            server_requests: Mutex::new(HashMap::new()),
            own_requests: Mutex::new(HashMap::new()),
            interrupts: Mutex::new(HashMap::new()),
            log_levels: Mutex::new(HashMap::new()),
            listening: Mutex::new(HashMap::new()),
            held: Mutex::new(HashMap::new()),
            log_level: Mutex::new(None),
            client: RwLock::new(None),
            stateless: AtomicBool::new(false),
            flow: Mutex::new(Default::default()),
            calls: Default::default(),
            server: std::sync::OnceLock::new(),
            found: Mutex::new(Default::default()),
        })
    }

    /// Binds the session to the virtual server `name` (V1); set once, at its start.
    pub fn serve(&self, name: &str) {
        let _ = self.server.set(name.to_owned());
    }

    /// The virtual server the session serves, if any (`None`: the whole catalogue).
    pub fn server(&self) -> Option<&str> {
        self.server.get().map(String::as_str)
    }

    /// Remembers what the client declared in `initialize`.
    pub(crate) fn initialized(&self, capabilities: Value, version: &'static str) {
        *self.client.write().unwrap_or_else(|e| e.into_inner()) = Some((capabilities, version));
    }

    /// The capabilities the client declared in `initialize`, once it ran.
    pub(crate) fn capabilities(&self) -> Option<Value> {
        let client = self.client.read().unwrap_or_else(|e| e.into_inner());
        client.as_ref().map(|(caps, _)| caps.clone())
    }

    /// Whether the client declared a capability in `initialize`.
    pub(crate) fn client_can(&self, capability: &str) -> bool {
        let client = self.client.read().unwrap_or_else(|e| e.into_inner());
        client
            .as_ref()
            .is_some_and(|(caps, _)| caps.get(capability).is_some_and(Value::is_object))
    }

    /// The protocol version agreed in `initialize`, once it ran.
    pub fn version(&self) -> Option<&'static str> {
        self.client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(_, v)| *v)
    }

    pub(crate) fn mark_stateless(&self) {
        self.stateless.store(true, Ordering::Relaxed);
    }

    /// Whether the client speaks the stateless 2026-07-28 revision.
    pub fn is_stateless(&self) -> bool {
        self.stateless.load(Ordering::Relaxed)
    }

    /// Sends the client a request of the gateway's own, for the call `call`, and
    /// waits for its answer (`None` when it does not come in time or the client is gone).
    pub(crate) async fn ask(
        &self,
        call: Option<CallKey>,
        id: Value,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Option<Value> {
        /// Forgets the request when the wait ends, also when the waiting call
        /// is dropped mid-way (it was cancelled).
        struct Forget<'a>(&'a Mutex<HashMap<String, oneshot::Sender<Value>>>, String);
        impl Drop for Forget<'_> {
            fn drop(&mut self) {
                lock(self.0).remove(&self.1);
            }
        }
        let (tx, rx) = oneshot::channel();
        let key = jsonrpc::id_key(&id);
        lock(&self.own_requests).insert(key.clone(), tx);
        let _forget = Forget(&self.own_requests, key);
        self.send_for(call, jsonrpc::request(id, method, Some(params)))
            .await;
        tokio::time::timeout(timeout, rx)
            .await
            .ok()
            .and_then(Result::ok)
    }

    /// How many of the gateway's own requests to the client await an answer.
    #[cfg(test)]
    pub(crate) fn own_requests_waiting(&self) -> usize {
        lock(&self.own_requests).len()
    }

    /// Hands a client's response to the gateway's own request that waits for it.
    /// Gives the response back when no such request waits.
    pub(crate) fn answer_own(&self, key: &str, msg: Value) -> Result<(), Value> {
        match lock(&self.own_requests).remove(key) {
            Some(waiter) => {
                let _ = waiter.send(msg);
                Ok(())
            }
            None => Err(msg),
        }
    }

    pub(crate) async fn send(&self, out: Outgoing) {
        match &self.out {
            // A closed channel means the client is gone; nothing is left to tell it.
            Out::Channel(tx) => {
                let _ = tx.send(out).await;
            }
            Out::Direct(place) => place(out),
        }
    }

    /// Sends a message that belongs to the call `call` without ending it.
    pub(crate) async fn send_for(&self, call: Option<CallKey>, msg: Value) {
        self.send(Outgoing {
            call,
            ends_call: false,
            msg,
            raw: None,
        })
        .await
    }

    /// Sends a message the front wrote itself (a parse error, say).
    pub async fn send_raw(&self, msg: Value) {
        self.send(Outgoing::session(msg)).await
    }

    /// Remembers that client request `key` runs as `upstream_id` on `conn`
    /// (`older`: the request is of a revision before 2026-07-28).
    pub(crate) fn track(
        &self,
        key: &CallKey,
        conn: &Arc<Conn>,
        upstream_id: u64,
        older: bool,
        log: Option<u8>,
    ) {
        let entry = Inflight {
            conn: Arc::downgrade(conn),
            upstream_id,
            older,
        };
        lock(&self.inflight).insert(key.clone(), entry);
        if let Some(level) = log {
            lock(&self.log_levels).insert(key.clone(), level);
        }
    }

    /// Forgets a client request that no longer waits upstream.
    pub(crate) fn untrack(&self, key: &CallKey) {
        lock(&self.inflight).remove(key);
        lock(&self.log_levels).remove(key);
    }

    /// The client cancelled a request (`notifications/cancelled`): a listen
    /// stream ends, a call still in the gateway's own hands (an approval, a
    /// hook) stops waiting, and one waiting upstream is cancelled there.
    pub(crate) fn cancelled(&self, msg: &Value) {
        let Some(request_id) = msg.pointer("/params/requestId") else {
            return;
        };
        let key = jsonrpc::id_key(request_id);
        if let Some(ended) = lock(&self.listening).remove(&key) {
            ended.notify_one();
            return;
        }
        if let Some(held) = lock(&self.held).get(&key).cloned() {
            held.notify_one();
            return;
        }
        if let Some((conn, upstream_id)) = self.upstream_of(&key) {
            let reason = msg
                .pointer("/params/reason")
                .and_then(Value::as_str)
                .unwrap_or("cancelled by the client");
            conn.cancel(upstream_id, reason);
        }
    }

    /// The upstream request client request `key` waits on, if it still waits.
    pub(crate) fn upstream_of(&self, key: &str) -> Option<(Arc<Conn>, u64)> {
        let inflight = lock(&self.inflight);
        let i = inflight.get(key)?;
        Some((i.conn.upgrade()?, i.upstream_id))
    }

    fn uses(&self, conn: &Arc<Conn>) -> bool {
        self.latest_on(conn).is_some()
    }

    fn owns(&self, conn: &Arc<Conn>, upstream_id: u64) -> bool {
        self.call_for(conn, upstream_id).is_some()
    }

    /// The client request of this session that is `upstream_id` on `conn`.
    fn call_for(&self, conn: &Arc<Conn>, upstream_id: u64) -> Option<CallKey> {
        lock(&self.inflight)
            .iter()
            .find(|(_, i)| i.upstream_id == upstream_id && i.runs_on(conn))
            .map(|(k, _)| k.clone())
    }

    /// The client request of this session most recently sent to `conn`.
    fn latest_on(&self, conn: &Arc<Conn>) -> Option<CallKey> {
        lock(&self.inflight)
            .iter()
            .filter(|(_, i)| i.runs_on(conn))
            .max_by_key(|(_, i)| i.upstream_id)
            .map(|(k, _)| k.clone())
    }

    /// Whether the client takes an upstream's request for `call` as a request of
    /// its own: an older session does; one that spoke 2026-07-28 takes them only
    /// as input requests of a 2026-07-28 call, and as requests for an older call.
    pub(crate) fn takes_requests_for(&self, call: Option<&CallKey>) -> bool {
        !self.is_stateless()
            || call.is_some_and(|k| lock(&self.inflight).get(k).is_some_and(|i| i.older))
    }

    /// The call an upstream's message on `conn` belongs to: the one it came with
    /// (`related`, when the transport says), else this session's latest call there.
    pub(crate) fn call_on(&self, conn: &Arc<Conn>, related: Option<u64>) -> Option<CallKey> {
        related
            .and_then(|r| self.call_for(conn, r))
            .or_else(|| self.latest_on(conn))
    }
}

/// A client request waiting upstream ([`ClientSession::track`]).
pub(crate) struct Inflight {
    conn: Weak<Conn>,
    upstream_id: u64,
    /// The request is of a revision before 2026-07-28.
    older: bool,
}

impl Inflight {
    fn runs_on(&self, conn: &Arc<Conn>) -> bool {
        self.conn.upgrade().is_some_and(|c| Arc::ptr_eq(&c, conn))
    }
}

/// Where a progress token handed upstream leads back to.
struct ProgressRoute {
    session: Weak<ClientSession>,
    /// The client's own token.
    theirs: Value,
    /// The client request that carried it.
    call: Option<CallKey>,
}

/// A list that changed behind the gateway, for `subscriptions/listen` streams.
#[derive(Debug, Clone)]
pub enum ListChange {
    /// The catalogue changed; the one before, so each stream can tell whether
    /// what its caller sees changed.
    Tools(Arc<Catalogue>),
    Prompts,
    Resources,
}

/// The live client sessions, and the progress tokens sent upstream for them.
pub struct Sessions {
    live: Mutex<Vec<Weak<ClientSession>>>,
    /// Token sent upstream → the session and token it stands for.
    progress: Mutex<HashMap<String, ProgressRoute>>,
    next_token: AtomicU64,
    next_request: AtomicU64,
    /// Lists that changed, for the subscription streams listening.
    changes: broadcast::Sender<ListChange>,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            live: Mutex::default(),
            progress: Mutex::default(),
            next_token: AtomicU64::new(0),
            next_request: AtomicU64::new(0),
            changes: broadcast::channel(64).0,
        }
    }
}

impl Sessions {
    /// Tells the subscription streams that a list changed.
    pub fn changed(&self, change: ListChange) {
        // No stream listening is no error.
        let _ = self.changes.send(change);
    }

    /// Where a subscription stream hears of changed lists.
    pub fn changes(&self) -> broadcast::Receiver<ListChange> {
        self.changes.subscribe()
    }

    pub fn add(&self, session: &Arc<ClientSession>) {
        let mut live = lock(&self.live);
        live.retain(|s| s.strong_count() > 0);
        live.push(Arc::downgrade(session));
    }

    pub fn live(&self) -> Vec<Arc<ClientSession>> {
        lock(&self.live).iter().filter_map(Weak::upgrade).collect()
    }

    /// A fresh id for a request the gateway sends a client (`warden-N`).
    pub fn next_request_id(&self) -> Value {
        let n = self.next_request.fetch_add(1, Ordering::Relaxed) + 1;
        Value::String(format!("warden-{n}"))
    }

    /// Replaces the caller's progress token with one unique across sessions and
    /// remembers the way back. Returns the token sent upstream.
    pub fn map_progress_token(
        &self,
        session: &Arc<ClientSession>,
        call: Option<&CallKey>,
        params: &mut Map<String, Value>,
    ) -> Option<String> {
        let meta = params.get_mut("_meta")?.as_object_mut()?;
        let theirs = meta.get("progressToken")?.clone();
        let n = self.next_token.fetch_add(1, Ordering::Relaxed) + 1;
        let ours = format!("warden-{n}");
        meta.insert("progressToken".into(), Value::String(ours.clone()));
        lock(&self.progress).insert(
            ours.clone(),
            ProgressRoute {
                session: Arc::downgrade(session),
                theirs,
                call: call.cloned(),
            },
        );
        Some(ours)
    }

    /// Forgets a token once its call is over.
    pub fn forget_token(&self, token: &str) {
        lock(&self.progress).remove(token);
    }

    /// Relays an upstream's progress notification to the client whose token it names.
    pub async fn relay_progress(&self, mut msg: Value) {
        let token = msg
            .pointer("/params/progressToken")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let target = token.and_then(|t| {
            let progress = lock(&self.progress);
            let r = progress.get(&t)?;
            Some((r.session.upgrade()?, r.theirs.clone(), r.call.clone()))
        });
        if let Some((session, theirs, call)) = target {
            msg["params"]["progressToken"] = theirs;
            session.send_for(call, msg).await;
        }
    }

    /// Sends a notification to every session that takes unsolicited ones (2026-07-28
    /// clients get them only on subscription streams).
    pub async fn broadcast(&self, msg: Value) {
        for s in self.live().into_iter().filter(|s| !s.is_stateless()) {
            s.send(Outgoing::session(msg.clone())).await;
        }
    }

    /// The session an upstream's request or log message is for: the one whose call
    /// it came with (an HTTP upstream says which), else the only session with a call
    /// on that connection, else the only session there is. Several candidates and
    /// nothing to tell them apart: none, so one caller never sees another's traffic.
    pub fn session_for(
        &self,
        conn: &Arc<Conn>,
        related: Option<u64>,
    ) -> Option<Arc<ClientSession>> {
        let sessions = self.live();
        if let Some(upstream_id) = related {
            if let Some(owner) = sessions.iter().find(|s| s.owns(conn, upstream_id)) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_request_of_the_gateways_own_is_forgotten_when_its_wait_is_dropped() {
        let (tx, mut rx) = mpsc::channel(8);
        let s = ClientSession::new(None, tx);
        // The waiting call goes away (cancelled) long before the answer's timeout.
        let asked = s.ask(
            None,
            json!("q1"),
            "ping",
            json!({}),
            Duration::from_secs(60),
        );
        let waited = tokio::time::timeout(Duration::from_millis(50), asked).await;
        assert!(waited.is_err(), "no answer came");
        assert_eq!(rx.recv().await.unwrap().msg["method"], "ping");
        assert_eq!(s.own_requests_waiting(), 0);
        // A late answer finds no one waiting and is handed back.
        let late = json!({"jsonrpc": "2.0", "id": "q1", "result": {}});
        assert_eq!(
            s.answer_own(&jsonrpc::id_key(&json!("q1")), late.clone()),
            Err(late)
        );
    }
}
