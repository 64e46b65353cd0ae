//! HTTP sessions: a [`ClientSession`] of the gateway plus the streams its messages
//! go out on, and the table of open sessions.
//!
//! Every message the gateway sends a session names the request it belongs to
//! ([`Outgoing`]), so sorting it is a lookup: the stream of the POST that carried
//! that request, or the GET stream. Every stream keeps its last events, so a
//! client that lost one resumes it with `Last-Event-ID`; a call whose stream is
//! gone for longer than [`RESUME_GRACE`] is cancelled upstream.

use super::sealed::{random_hex, SessionToken};
use super::streams::{Event, Streams};
use crate::gateway::rev2026::unix_now;
use crate::gateway::{negotiated_version, ClientSession, Gateway, Out, Outgoing};
use crate::jsonrpc;
use crate::logged::logged;
use bytes::Bytes;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use warden_core::Caller;

/// Events queued for a connected stream before its client counts as not reading.
pub(super) const SINK_CAPACITY: usize = 256;
/// How long a call whose SSE stream dropped waits for the client to resume it.
const RESUME_GRACE: Duration = Duration::from_secs(5);
/// Open sessions at most; an initialize beyond it gets 503 until some end.
pub(super) const MAX_SESSIONS: usize = 10_000;
/// How often a replica asks the shared store again whether a session it holds
/// was ended (DELETE) at another replica.
const RECHECK_ENDED: Duration = Duration::from_secs(10);
/// The longest request id an event id carries (base64url of its JSON), so that a
/// stream resumed at another replica can still be answered.
const EVENT_ID_REQUEST_MAX: usize = 96;

/// One client session over HTTP.
pub(super) struct HttpSession {
    /// The `Mcp-Session-Id`: the session sealed ([`SessionToken`]).
    pub(super) id: String,
    /// Its short id, in logs and audit records (`http:<sid>`).
    pub(super) sid: String,
    /// This replica's copy of the session, in its event ids: a stream resumed
    /// under another tag was carried by another copy.
    pub(super) tag: String,
    /// Unix seconds after which the id is refused.
    until: u64,
    /// When the shared store was last asked whether the session was ended.
    checked: Mutex<Instant>,
    /// A 2026-07-28 request's own session: nothing can resume its stream.
    pub(super) stateless: bool,
    pub(super) caller: String,
    /// Whose cap it counts against.
    holder: Holder,
    gateway: Arc<Gateway>,
    pub(super) client: Arc<ClientSession>,
    streams: Mutex<Streams>,
    last_used: Mutex<Instant>,
}

impl HttpSession {
    pub(super) fn streams(&self) -> std::sync::MutexGuard<'_, Streams> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// What follows `stream-seq` in the ids of a stream's events: this copy's tag
    /// and, for a POST's stream, the request it answers (so that another replica
    /// can answer a resumption it cannot serve).
    pub(super) fn event_suffix(&self, request: Option<&Value>) -> String {
        use base64::Engine;
        let rid = request.map(|id| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.to_string().as_bytes())
        });
        match rid {
            Some(r) if r.len() <= EVENT_ID_REQUEST_MAX => format!(".{}.{r}", self.tag),
            _ => format!(".{}", self.tag),
        }
    }

    pub(super) fn primes(&self) -> bool {
        // Priming events (an id and no data) came with 2025-11-25.
        self.client.version().is_some_and(|v| v >= "2025-11-25")
    }

    /// Cancels a request upstream as if the client had sent `notifications/cancelled`.
    fn cancel(self: &Arc<Self>, id: Value, reason: &str) {
        let me = self.clone();
        let note = jsonrpc::notification(
            "notifications/cancelled",
            Some(json!({"requestId": id, "reason": reason})),
        );
        tokio::spawn(async move {
            if let Some(w) = me.gateway.handle(&me.client, note).await {
                w.await;
            }
        });
    }
}

/// Puts one of a session's outgoing messages on its stream, in the sender's task.
fn place(session: &Weak<HttpSession>, out: Outgoing) {
    let Some(s) = session.upgrade() else { return };
    // Serialised before the streams are locked: the lock is for sorting only.
    let data = match &out.raw {
        Some(bytes) => bytes.clone(),
        None => Bytes::from(serde_json::to_vec(&out.msg).unwrap_or_default()),
    };
    let mut streams = s.streams();
    match streams.target(&out) {
        Some((n, last)) => streams.push(n, data, last),
        None => tracing::debug!("an answer for a request no longer waiting was dropped"),
    }
}

/// Watches a POST's answer: if the client goes away before it, the call is
/// cancelled (at once for a JSON answer, after [`RESUME_GRACE`] for a stream the
/// client may resume).
pub(super) struct Watch {
    pub(super) session: Arc<HttpSession>,
    pub(super) stream: u64,
    /// The sink this watch's response reads from ([`Stream::sink_gen`]).
    pub(super) sink_gen: u64,
    pub(super) resumable: bool,
    pub(super) armed: bool,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if !self.armed || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        {
            let mut r = self.session.streams();
            if !r.let_go(self.stream, self.sink_gen) {
                return;
            }
        }
        let (session, n) = (self.session.clone(), self.stream);
        let grace = if self.resumable {
            RESUME_GRACE
        } else {
            Duration::ZERO
        };
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let id = {
                let mut r = session.streams();
                match r.streams.get(&n) {
                    Some(s) if !s.done && s.sink.is_none() => r.close(n),
                    _ => None,
                }
            };
            if let Some(id) = id {
                tracing::info!(session = %session.sid, "the HTTP client went away mid-call; the call is cancelled");
                session.cancel(id, "the HTTP client disconnected");
            }
        });
    }
}

/// Why a request could not get a stream.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum StreamRefused {
    /// A request with this id still runs in the session.
    IdInUse,
    /// `Last-Event-ID` names no stream of the session.
    UnknownEvent,
    /// The session's GET stream is already open.
    GetStreamOpen,
    /// `Last-Event-ID` names a stream another replica carried; for a POST's
    /// stream, the request it answered.
    Elsewhere(Option<Value>),
}

/// A stream handed to a client: its number, the events to send first (a
/// resumption replays what the client missed), and whether it already ended.
pub(super) struct Attached {
    pub(super) stream: u64,
    /// The generation of the sink it was given.
    pub(super) sink_gen: u64,
    pub(super) replay: Vec<Event>,
    pub(super) ended: bool,
}

impl HttpSession {
    /// Opens the stream a POSTed request is answered on.
    pub(super) fn open_stream(
        &self,
        id: &Value,
    ) -> Result<(u64, u64, mpsc::Receiver<Event>), StreamRefused> {
        let key = jsonrpc::id_key(id);
        let (tx, rx) = mpsc::channel(SINK_CAPACITY);
        let mut s = self.streams();
        if s.by_request.contains_key(&key) {
            return Err(StreamRefused::IdInUse);
        }
        let n = s.open(key, id.clone(), tx);
        Ok((n, s.streams[&n].sink_gen, rx))
    }

    /// GET: the session's own stream, or (with `Last-Event-ID`) any of its streams
    /// again from after the last event the client saw.
    pub(super) fn attach(
        &self,
        last_event_id: Option<&str>,
        sink: mpsc::Sender<Event>,
    ) -> Result<Attached, StreamRefused> {
        let mut resume = None;
        if let Some(v) = last_event_id {
            let mut parts = v.trim().splitn(3, '.');
            let (s, q) = parts
                .next()
                .unwrap_or_default()
                .split_once('-')
                .unwrap_or(("", ""));
            match parts.next() {
                Some(tag) if tag != self.tag => {
                    use base64::Engine;
                    let request = parts.next().and_then(|r| {
                        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
                            .decode(r)
                            .ok()?;
                        serde_json::from_slice::<Value>(&json)
                            .ok()
                            .filter(|id| id.is_string() || id.is_number())
                    });
                    // The GET stream carried nothing a client waits for: it is
                    // simply opened again here.
                    if request.is_some() || s != "0" {
                        return Err(StreamRefused::Elsewhere(request));
                    }
                }
                _ => resume = Some((s.parse::<u64>(), q.parse::<u64>())),
            }
        }
        let mut r = self.streams();
        let (n, after) = match resume {
            Some((Ok(n), Ok(seq))) if r.streams.contains_key(&n) => (n, seq),
            Some(_) => return Err(StreamRefused::UnknownEvent),
            None => match r.streams.get(&0) {
                Some(s) if s.sink.as_ref().is_some_and(|k| !k.is_closed()) => {
                    return Err(StreamRefused::GetStreamOpen)
                }
                Some(s) => (0, s.delivered),
                None => (0, 0),
            },
        };
        let s = r.streams.get_mut(&n).ok_or(StreamRefused::UnknownEvent)?;
        let mut replay = Vec::new();
        let mut ended = false;
        for e in s.history.iter().filter(|e| e.seq > after) {
            replay.push(e.clone());
            s.delivered = e.seq;
            ended |= e.last;
        }
        ended |= s.done && n != 0;
        if !ended {
            s.sink = Some(sink);
            s.sink_gen += 1;
        }
        Ok(Attached {
            stream: n,
            sink_gen: s.sink_gen,
            replay,
            ended,
        })
    }
}

/// The open sessions, by id, and how many each holder has.
pub(super) struct SessionTable {
    gateway: Arc<Gateway>,
    open: Mutex<Open>,
    /// A session unused this long ends.
    pub(super) idle: Duration,
    /// Sessions one caller may hold at once (`gateway.max_sessions_per_caller`), so
    /// that one caller cannot take the whole [`MAX_SESSIONS`] from everyone else.
    per_caller: usize,
    /// How long a session id stays usable (`gateway.session_lifetime`).
    lifetime: Duration,
    /// Replicas share the sealing secret (`gateway.state_secret_env`): a session
    /// this process does not hold is taken up from its id. Without it, ids are
    /// sealed with a key of this process alone and a session lives and dies here.
    shared: bool,
    /// Sessions their clients ended here → when their ids expire (the shared
    /// store, when there is one, tells the other replicas).
    ended: Mutex<HashMap<String, u64>>,
}

/// The addressable sessions. Both maps change together, under one lock, so a
/// caller's count is always the number of its sessions in `by_id`.
#[derive(Default)]
struct Open {
    by_id: HashMap<String, Arc<HttpSession>>,
    /// Holders of no session have no entry.
    by_holder: HashMap<Holder, usize>,
}

impl Open {
    fn insert(&mut self, session: Arc<HttpSession>) {
        *self.by_holder.entry(session.holder.clone()).or_default() += 1;
        self.by_id.insert(session.id.clone(), session);
    }

    fn remove(&mut self, id: &str) {
        let Some(session) = self.by_id.remove(id) else {
            return; // ended twice (a DELETE racing the idle sweep, say): counted once
        };
        match self.by_holder.get_mut(&session.holder) {
            Some(n) if *n > 1 => *n -= 1,
            _ => {
                self.by_holder.remove(&session.holder);
            }
        }
    }
}

/// Why an initialize, or a session id not held here, got no session.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Full {
    /// The gateway holds [`MAX_SESSIONS`].
    Gateway,
    /// The caller holds `open` sessions, its cap; the one it used longest ago can
    /// idle out in `retry_after` (a hint: one kept busy never does).
    Caller { open: usize, retry_after: Duration },
}

/// Why a request's `Mcp-Session-Id` found no session to serve it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Missing {
    /// Not the caller's, ended, expired, or never issued (404).
    NotFound,
    /// Taking the session up here would put the gateway or the caller over its cap.
    Full(Full),
}

impl SessionTable {
    pub(super) fn new(gateway: Arc<Gateway>, idle: Duration, per_caller: usize) -> SessionTable {
        let g = &gateway.config.gateway;
        let lifetime = crate::config::parse_duration(&g.session_lifetime)
            .unwrap_or(Duration::from_secs(86_400));
        let shared = g.state_secret_env.is_some();
        SessionTable {
            gateway,
            open: Mutex::new(Open::default()),
            idle,
            per_caller,
            lifetime,
            shared,
            ended: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn count(&self) -> usize {
        self.lock().by_id.len()
    }

    /// How many sessions `holder` holds.
    #[cfg(test)]
    fn held_by(&self, holder: &Holder) -> usize {
        self.lock().by_holder.get(holder).copied().unwrap_or(0)
    }

    /// Why `holder` may not hold one more session here, if it may not: the
    /// gateway holds [`MAX_SESSIONS`], or the holder its cap. The same caps for
    /// a session opened by `initialize` and one taken up from its id.
    fn full(&self, open: &Open, holder: &Holder) -> Option<Full> {
        if open.by_id.len() >= MAX_SESSIONS {
            return Some(Full::Gateway);
        }
        let held = open.by_holder.get(holder).copied().unwrap_or(0);
        if held < self.per_caller {
            return None;
        }
        let retry_after = open
            .by_id
            .values()
            .filter(|s| &s.holder == holder)
            .map(|s| {
                let used = *s.last_used.lock().unwrap_or_else(|e| e.into_inner());
                self.idle.saturating_sub(used.elapsed())
            })
            .min()
            .unwrap_or(self.idle);
        Some(Full::Caller {
            open: held,
            retry_after,
        })
    }

    /// A new session for `caller`, unless the gateway or `holder` already
    /// holds as many as it may. The caps are checked and the session added under
    /// one lock: parallel initializes cannot overshoot them.
    pub(super) fn open(
        &self,
        caller: Caller,
        holder: &Holder,
        init: Option<&Value>,
        server: Option<String>,
    ) -> Result<Arc<HttpSession>, Full> {
        let mut open = self.lock();
        if let Some(full) = self.full(&open, holder) {
            return Err(full);
        }
        let token = SessionToken {
            sid: random_hex(16),
            caller: caller.name.clone(),
            version: negotiated_version(init).to_owned(),
            capabilities: init
                .and_then(|p| p.get("capabilities"))
                .cloned()
                .unwrap_or_else(|| json!({})),
            until: unix_now().saturating_add(self.lifetime.as_secs()),
            server,
        };
        let session = self.build(caller, holder, Some((token, None)));
        open.insert(session.clone());
        self.publish(&open);
        drop(open);
        tracing::info!(session = %session.sid, caller = %logged(&session.caller), "HTTP session opened");
        Ok(session)
    }

    /// A 2026-07-28 request's own session: not kept, it ends with its request.
    pub(super) fn open_stateless(&self, caller: Caller) -> Arc<HttpSession> {
        let holder = Holder::caller(&caller.name);
        self.build(caller, &holder, None)
    }

    /// A session for `caller`: addressable by the id its token seals (or, taken
    /// up from an id a client sent, by that id), or (without a token) a
    /// 2026-07-28 request's own.
    fn build(
        &self,
        caller: Caller,
        holder: &Holder,
        token: Option<(SessionToken, Option<&str>)>,
    ) -> Arc<HttpSession> {
        let name = caller.name.clone();
        let (id, sid, label, until) = match &token {
            Some((t, held)) => (
                held.map_or_else(|| t.seal(self.gateway.state_key()), str::to_owned),
                t.sid.clone(),
                format!("http:{}", t.sid),
                t.until,
            ),
            None => (String::new(), String::new(), "http:stateless".into(), 0),
        };
        let token = token.map(|(t, _)| t);
        let out = |me: &Weak<HttpSession>| {
            let me = me.clone();
            Out::Direct(Box::new(move |out| place(&me, out)))
        };
        let session = Arc::new_cyclic(|me| {
            let client = ClientSession::labelled(Some(caller), out(me), label);
            if let Some(name) = token.as_ref().and_then(|t| t.server.as_deref()) {
                client.serve(name);
            }
            if let Some(t) = token {
                let version = negotiated_version(Some(&json!({"protocolVersion": t.version})));
                client.initialized(t.capabilities, version);
            }
            HttpSession {
                id,
                sid,
                tag: random_hex(4),
                until,
                checked: Mutex::new(Instant::now()),
                stateless: until == 0,
                caller: name,
                holder: holder.clone(),
                gateway: self.gateway.clone(),
                client,
                streams: Mutex::new(Streams::new()),
                last_used: Mutex::new(Instant::now()),
            }
        });
        self.gateway.add_session(&session.client);
        session
    }

    /// The session `id`, when it is `caller`'s and neither ended nor expired: held
    /// here, or (replicas sharing the secret) taken up from its id. A session
    /// taken up counts against the caps as one opened by `initialize` does
    /// ([`SessionTable::full`], for `holder`), except for a request that ends
    /// it (`ending`: a DELETE), so a caller at its cap can always end sessions.
    pub(super) async fn find(
        &self,
        id: &str,
        caller: &str,
        holder: &Holder,
        ending: bool,
    ) -> Result<Arc<HttpSession>, Missing> {
        let held = self.lock().by_id.get(id).cloned();
        if let Some(s) = held {
            if s.caller != caller || s.until < unix_now() {
                return Err(Missing::NotFound);
            }
            let recheck = self.shared && {
                let mut checked = s.checked.lock().unwrap_or_else(|e| e.into_inner());
                let due = checked.elapsed() >= RECHECK_ENDED;
                if due {
                    *checked = Instant::now();
                }
                due
            };
            if recheck && self.ended_elsewhere(&s.sid).await {
                self.end(&s, "the client ended it at another replica", false)
                    .await;
                return Err(Missing::NotFound);
            }
            return Ok(s);
        }
        // Without a store every replica reads trails from, a session taken up
        // would go on without the flow trail it had: its id ends with the copy
        // held (F3), and the client starts a new session.
        if !self.shared || self.gateway.trails_stay_here() {
            return Err(Missing::NotFound);
        }
        let token = SessionToken::open(self.gateway.state_key(), id).ok_or(Missing::NotFound)?;
        if token.caller != caller || token.until < unix_now() {
            return Err(Missing::NotFound);
        }
        if self.ended_here(&token.sid) || self.ended_elsewhere(&token.sid).await {
            return Err(Missing::NotFound);
        }
        let sid = token.sid.clone();
        let session = {
            let mut open = self.lock();
            if let Some(s) = open.by_id.get(id) {
                return Ok(s.clone()); // taken up by a request beside this one
            }
            if let Some(full) = self.full(&open, holder).filter(|_| !ending) {
                return Err(Missing::Full(full));
            }
            // Kept under the id the client holds (sealing again would give
            // another id, and every request would take the session up anew).
            let session = self.build(Caller::new(caller), holder, Some((token, Some(id))));
            open.insert(session.clone());
            self.publish(&open);
            session
        };
        tracing::info!(session = %sid, caller = %logged(caller), "HTTP session taken up from its id (opened at another replica or before a restart)");
        Ok(session)
    }

    fn ended_here(&self, sid: &str) -> bool {
        let mut ended = self.ended.lock().unwrap_or_else(|e| e.into_inner());
        let now = unix_now();
        ended.retain(|_, until| *until >= now);
        ended.contains_key(sid)
    }

    /// Whether the shared store says the session was ended. A store that cannot
    /// answer counts as "not ended": the id is still sealed, bound to its caller
    /// and bounded by its lifetime, and the outage is logged.
    async fn ended_elsewhere(&self, sid: &str) -> bool {
        let Some(store) = self.gateway.audit_store() else {
            return false;
        };
        match store.session_ended(sid).await {
            Ok(ended) => ended,
            Err(e) => {
                tracing::warn!("could not ask the store whether HTTP session {sid} was ended: {e}");
                false
            }
        }
    }

    /// Forgets a session: its id no longer finds it, and its caller's count drops.
    pub(super) fn remove(&self, id: &str) {
        let mut open = self.lock();
        open.remove(id);
        self.publish(&open);
    }

    /// Keeps the sessions gauge true.
    fn publish(&self, open: &Open) {
        self.gateway.metrics.http_sessions.store(
            open.by_id.len() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Ends a session here: its streams close and its running calls are cancelled.
    /// `for_good` (the client's DELETE): no replica takes it up again.
    pub(super) async fn end(&self, session: &Arc<HttpSession>, why: &str, for_good: bool) {
        self.forget(session, why);
        if for_good && !session.stateless {
            self.ended
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(session.sid.clone(), session.until);
            if let Some(store) = self.gateway.audit_store() {
                let until_ms = (session.until as i64).saturating_mul(1000);
                if let Err(e) = store.end_session(&session.sid, until_ms).await {
                    tracing::warn!(session = %session.sid, "could not record in the store that the HTTP session ended; other replicas may take it up until it expires: {e}");
                }
            }
        }
    }

    /// Ends a session in this process only (its streams close, its running calls
    /// are cancelled); with a shared secret another replica may take it up.
    fn forget(&self, session: &Arc<HttpSession>, why: &str) {
        self.remove(&session.id);
        let running = {
            let mut r = session.streams();
            let running = r.running();
            for s in r.streams.values_mut() {
                s.sink = None;
                s.done = true;
            }
            r.by_request.clear();
            running
        };
        for id in running {
            session.cancel(id, why);
        }
        tracing::info!(session = %session.sid, "HTTP session ended: {why}");
    }

    /// Every session this process holds (the drain walks them).
    pub(super) fn all(&self) -> Vec<Arc<HttpSession>> {
        self.lock().by_id.values().cloned().collect()
    }

    /// Ends every session here (the gateway is stopping): replicas sharing the
    /// secret take them up.
    pub(super) fn end_all(&self, why: &str) {
        for s in self.all() {
            self.forget(&s, why);
        }
    }

    /// Ends sessions unused for longer than `gateway.session_idle`.
    pub(super) fn sweep(&self) {
        let idle: Vec<Arc<HttpSession>> = self
            .lock()
            .by_id
            .values()
            .filter(|s| {
                let used = *s.last_used.lock().unwrap_or_else(|e| e.into_inner());
                let r = s.streams();
                used.elapsed() > self.idle
                    && r.by_request.is_empty()
                    && r.streams
                        .values()
                        .all(|st| st.sink.as_ref().is_none_or(|k| k.is_closed()))
            })
            .cloned()
            .collect();
        // Idle here is not ended everywhere: a client may be busy at another
        // replica. Without a shared secret, or with flow trails kept only here,
        // nothing takes it up again.
        for s in idle {
            self.forget(&s, "idle for longer than gateway.session_idle");
        }
    }
}

mod holder;
#[cfg(test)]
mod tests;

pub(super) use holder::Holder;
