//! HTTP sessions: a [`ClientSession`] of the gateway plus the streams its messages
//! go out on, and the table of open sessions.
//!
//! Every message the gateway sends a session names the request it belongs to
//! ([`Outgoing`]), so sorting it is a lookup: the stream of the POST that carried
//! that request, or the GET stream. Every stream keeps its last events, so a
//! client that lost one resumes it with `Last-Event-ID`; a call whose stream is
//! gone for longer than [`RESUME_GRACE`] is cancelled upstream.

use super::streams::{Event, Streams};
use crate::gateway::{ClientSession, Gateway, Outgoing};
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

/// One client session over HTTP.
pub(super) struct HttpSession {
    pub(super) id: String,
    /// A 2026-07-28 request's own session: nothing can resume its stream.
    pub(super) stateless: bool,
    pub(super) caller: String,
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

/// Moves a session's outgoing messages onto its streams until the session ends.
async fn sort(session: Weak<HttpSession>, mut rx: mpsc::Receiver<Outgoing>) {
    while let Some(out) = rx.recv().await {
        let Some(s) = session.upgrade() else { break };
        // Serialised before the streams are locked: the lock is for sorting only.
        let data = Bytes::from(serde_json::to_vec(&out.msg).unwrap_or_default());
        let mut streams = s.streams();
        match streams.target(&out) {
            Some((n, last)) => streams.push(n, data, last),
            None => tracing::debug!("an answer for a request no longer waiting was dropped"),
        }
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
                tracing::info!(session = %session.id, "the HTTP client went away mid-call; the call is cancelled");
                session.cancel(id, "the HTTP client disconnected");
            }
        });
    }
}

/// 128 bits from the OS's random source, as 32 hex characters.
fn new_session_id() -> String {
    let mut bytes = [0u8; 16];
    if let Err(e) = getrandom::fill(&mut bytes) {
        // Without randomness a session id could be guessed; better to stop.
        panic!("the OS random source failed: {e}");
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
        let resume = last_event_id.map(|v| {
            let (s, q) = v.trim().split_once('-').unwrap_or(("", ""));
            (s.parse::<u64>(), q.parse::<u64>())
        });
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

/// The open sessions, by id, and how many each caller holds.
pub(super) struct SessionTable {
    gateway: Arc<Gateway>,
    open: Mutex<Open>,
    /// A session unused this long ends.
    pub(super) idle: Duration,
    /// Sessions one caller may hold at once (`gateway.max_sessions_per_caller`), so
    /// that one caller cannot take the whole [`MAX_SESSIONS`] from everyone else.
    per_caller: usize,
}

/// The addressable sessions. Both maps change together, under one lock, so a
/// caller's count is always the number of its sessions in `by_id`.
#[derive(Default)]
struct Open {
    by_id: HashMap<String, Arc<HttpSession>>,
    /// Callers holding no session have no entry.
    by_caller: HashMap<String, usize>,
}

impl Open {
    fn insert(&mut self, session: Arc<HttpSession>) {
        *self.by_caller.entry(session.caller.clone()).or_default() += 1;
        self.by_id.insert(session.id.clone(), session);
    }

    fn remove(&mut self, id: &str) {
        let Some(session) = self.by_id.remove(id) else {
            return; // ended twice (a DELETE racing the idle sweep, say): counted once
        };
        match self.by_caller.get_mut(&session.caller) {
            Some(n) if *n > 1 => *n -= 1,
            _ => {
                self.by_caller.remove(&session.caller);
            }
        }
    }
}

/// Why an initialize got no session.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Full {
    /// The gateway holds [`MAX_SESSIONS`].
    Gateway,
    /// The caller holds `open` sessions, its cap; the one it used longest ago can
    /// idle out in `retry_after` (a hint: one kept busy never does).
    Caller { open: usize, retry_after: Duration },
}

impl SessionTable {
    pub(super) fn new(gateway: Arc<Gateway>, idle: Duration, per_caller: usize) -> SessionTable {
        SessionTable {
            gateway,
            open: Mutex::new(Open::default()),
            idle,
            per_caller,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn count(&self) -> usize {
        self.lock().by_id.len()
    }

    /// How many sessions `caller` holds.
    #[cfg(test)]
    fn held_by(&self, caller: &str) -> usize {
        self.lock().by_caller.get(caller).copied().unwrap_or(0)
    }

    /// A session found again by its Mcp-Session-Id, unless the gateway or the
    /// caller already holds as many as it may. The caps are checked and the
    /// session added under one lock: parallel initializes cannot overshoot them.
    pub(super) fn open(&self, caller: Caller) -> Result<Arc<HttpSession>, Full> {
        let mut open = self.lock();
        if open.by_id.len() >= MAX_SESSIONS {
            return Err(Full::Gateway);
        }
        let held = open.by_caller.get(&caller.name).copied().unwrap_or(0);
        if held >= self.per_caller {
            let retry_after = open
                .by_id
                .values()
                .filter(|s| s.caller == caller.name)
                .map(|s| {
                    let used = *s.last_used.lock().unwrap_or_else(|e| e.into_inner());
                    self.idle.saturating_sub(used.elapsed())
                })
                .min()
                .unwrap_or(self.idle);
            return Err(Full::Caller {
                open: held,
                retry_after,
            });
        }
        let session = self.build(caller, true);
        open.insert(session.clone());
        self.publish(&open);
        drop(open);
        tracing::info!(session = %session.id, caller = %logged(&session.caller), "HTTP session opened");
        Ok(session)
    }

    /// A 2026-07-28 request's own session: not kept, it ends with its request.
    pub(super) fn open_stateless(&self, caller: Caller) -> Arc<HttpSession> {
        self.build(caller, false)
    }

    fn build(&self, caller: Caller, addressable: bool) -> Arc<HttpSession> {
        let (tx, rx) = mpsc::channel::<Outgoing>(1024);
        let name = caller.name.clone();
        let id = new_session_id();
        let label = if addressable {
            format!("http:{id}")
        } else {
            "http:stateless".to_owned()
        };
        let client = ClientSession::labelled(Some(caller), tx, label);
        self.gateway.add_session(&client);
        let session = Arc::new(HttpSession {
            id,
            stateless: !addressable,
            caller: name,
            gateway: self.gateway.clone(),
            client,
            streams: Mutex::new(Streams::new()),
            last_used: Mutex::new(Instant::now()),
        });
        tokio::spawn(sort(Arc::downgrade(&session), rx));
        session
    }

    /// The session `id`, when it is open and `caller`'s.
    pub(super) fn find(&self, id: &str, caller: &str) -> Option<Arc<HttpSession>> {
        self.lock()
            .by_id
            .get(id)
            .filter(|s| s.caller == caller)
            .cloned()
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

    /// Ends a session: its streams close and its running calls are cancelled.
    pub(super) fn end(&self, session: &Arc<HttpSession>, why: &str) {
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
        tracing::info!(session = %session.id, "HTTP session ended: {why}");
    }

    /// Ends every session (the gateway is stopping).
    pub(super) fn end_all(&self, why: &str) {
        let sessions: Vec<_> = self.lock().by_id.values().cloned().collect();
        for s in sessions {
            self.end(&s, why);
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
        for s in idle {
            self.end(&s, "idle for longer than gateway.session_idle");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_random_visible_ascii() {
        let a = new_session_id();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        assert_ne!(a, new_session_id());
    }

    async fn table(idle: Duration, per_caller: usize) -> SessionTable {
        let config = crate::config::Config::parse("", "w.toml").unwrap();
        let gateway = Gateway::new(config).await.unwrap();
        SessionTable::new(gateway, idle, per_caller)
    }

    #[tokio::test]
    async fn a_caller_holds_at_most_its_share_and_gets_it_back_as_sessions_end() {
        let table = table(Duration::from_secs(60), 2).await;
        let alice = || Caller::new("alice");
        let first = table.open(alice()).unwrap();
        table.open(alice()).unwrap();
        match table.open(alice()).err() {
            Some(Full::Caller { open, retry_after }) => {
                assert_eq!(open, 2);
                assert!(retry_after > Duration::from_secs(50), "{retry_after:?}");
            }
            other => panic!("a third session for alice: {other:?}"),
        }
        // Others are not held back by alice, and stateless sessions are not counted.
        table.open(Caller::new("bob")).unwrap();
        let _stateless = table.open_stateless(alice());
        assert_eq!((table.held_by("alice"), table.count()), (2, 3));
        // DELETE, even twice, frees one place.
        table.end(&first, "the client ended the session");
        table.end(&first, "the client ended the session");
        assert_eq!(table.held_by("alice"), 1);
        table.open(alice()).unwrap();
        // The gateway's end frees them all.
        table.end_all("the gateway is shutting down");
        assert_eq!(
            (table.count(), table.held_by("alice"), table.held_by("bob")),
            (0, 0, 0)
        );
    }

    #[tokio::test]
    async fn the_idle_sweep_gives_a_caller_its_sessions_back() {
        let table = table(Duration::from_millis(1), 1).await;
        table.open(Caller::new("alice")).unwrap();
        assert!(table.open(Caller::new("alice")).is_err());
        tokio::time::sleep(Duration::from_millis(20)).await;
        table.sweep();
        assert_eq!(table.held_by("alice"), 0);
        table.open(Caller::new("alice")).unwrap();
    }
}
