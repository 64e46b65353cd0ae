//! One live connection to an upstream, whatever carries it: requests with their
//! pending answers, the writer queue, cancellation, and the watch for an
//! upstream that stopped answering. Transports feed it through [`deliver`].

use super::members::{self, Members};
use super::{CallError, Exit, Inbound, Reply, UpstreamRevision};
use crate::jsonrpc::{self, Kind};
use crate::logged::logged;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};

/// One live child process.
pub struct Conn {
    pub upstream: usize,
    pub generation: u64,
    pub(super) name: String,
    pub(super) tx: mpsc::Sender<Vec<u8>>,
    pub(super) pending: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
    /// The pending requests whose answer is read as its members' text
    /// ([`Conn::request_members`]), and whether there are any (read for every
    /// message, so the others pay nothing for it).
    pub(super) by_members: Mutex<HashSet<u64>>,
    pub(super) any_by_members: AtomicBool,
    /// Requests that go with a caller's credential rather than the upstream's own
    /// (HTTP upstreams read it when they send the request).
    pub(super) credentials: Mutex<HashMap<u64, Arc<str>>>,
    pub(super) next_id: AtomicU64,
    pub(super) closed: AtomicBool,
    pub(super) child: Mutex<Option<Child>>,
    /// Tells the writer task to close the child's stdin.
    pub(super) stop_writer: Mutex<Option<oneshot::Sender<()>>>,
    /// Requests in a row that timed out; any answer resets it.
    pub(super) timeouts: AtomicU32,
    /// Timeouts in a row after which the upstream is suspected stuck (0: never).
    pub(super) restart_after: u32,
    /// How long the ping that confirms a suspicion waits.
    pub(super) confirm_ms: u64,
    /// A confirming ping is under way.
    pub(super) confirming: AtomicBool,
    pub(super) me: Weak<Conn>,
    /// The gateway gave up on this connection as stuck.
    pub(super) stuck: AtomicBool,
    /// Its start finished (initialize answered, `notifications/initialized` sent,
    /// tools listed): only now does it take traffic other than the start's own.
    pub(super) ready: AtomicBool,
    /// The upstream speaks the stateless 2026-07-28 revision: every request
    /// carries the envelope, and there is no `ping`.
    pub(super) stateless: AtomicBool,
    pub(super) inbound: Weak<dyn Inbound>,
}

impl Conn {
    /// Sends a request; returns its upstream id and the receiver of its response.
    pub async fn start(
        &self,
        method: &str,
        params: Option<Value>,
        timeout_ms: u64,
    ) -> Result<(u64, PendingReply), CallError> {
        self.start_as(method, params, timeout_ms, None).await
    }

    /// [`Conn::start`], presenting `credential` (a bearer token) instead of the
    /// upstream's own, on transports that carry one.
    pub async fn start_as(
        &self,
        method: &str,
        params: Option<Value>,
        timeout_ms: u64,
        credential: Option<Arc<str>>,
    ) -> Result<(u64, PendingReply), CallError> {
        self.send_request(method, params, timeout_ms, credential, false)
            .await
    }

    /// Sends a request; `by_members`: its answer is to be read as its members' text.
    async fn send_request(
        &self,
        method: &str,
        params: Option<Value>,
        timeout_ms: u64,
        credential: Option<Arc<str>>,
        by_members: bool,
    ) -> Result<(u64, PendingReply), CallError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if by_members {
            self.mark_by_members(id, true);
        }
        if let Some(c) = credential {
            self.credentials
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, c);
        }
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        if self.closed.load(Ordering::SeqCst) {
            self.forget(id);
            return Err(CallError::Gone);
        }
        let line = jsonrpc::to_line(&jsonrpc::request(json!(id), method, params));
        match tokio::time::timeout(Duration::from_millis(timeout_ms), self.tx.send(line)).await {
            Ok(Ok(())) => Ok((id, PendingReply(rx))),
            Ok(Err(_)) => {
                self.forget(id);
                Err(CallError::Gone)
            }
            Err(_) => {
                self.forget(id);
                Err(CallError::Timeout(timeout_ms))
            }
        }
    }

    /// Waits for the response to `id`; on timeout, cancels it upstream. The
    /// receiver is borrowed, so a wait can be set aside (a call parked while its
    /// client is asked something) and resumed.
    pub async fn wait(
        &self,
        id: u64,
        reply: &mut PendingReply,
        timeout_ms: u64,
    ) -> Result<Value, CallError> {
        match self.answer(id, reply, timeout_ms).await? {
            Answer::Tree(v) => Ok(v),
            Answer::Members(m) => Ok(members::to_value(&m)),
        }
    }

    /// One request whose answer is read as its members' text, never as a tree
    /// of the whole message (a `tools/list` page of thousands of tools is
    /// megabytes; issue 25).
    pub async fn request_members(
        &self,
        method: &str,
        params: Option<Value>,
        timeout_ms: u64,
    ) -> Result<Members, CallError> {
        let (id, mut reply) = self
            .send_request(method, params, timeout_ms, None, true)
            .await?;
        // Unmarked however the wait ends, even when it is dropped.
        let _unmark = Unmark(self, id);
        match self.answer(id, &mut reply, timeout_ms).await? {
            Answer::Members(m) => Ok(m),
            Answer::Tree(v) => Ok(members::of_value(v)),
        }
    }

    /// Marks request `id` as read by its members (`on`) or not any more.
    fn mark_by_members(&self, id: u64, on: bool) {
        let mut ids = self.by_members.lock().unwrap_or_else(|e| e.into_inner());
        if on {
            ids.insert(id);
        } else {
            ids.remove(&id);
        }
        self.any_by_members.store(!ids.is_empty(), Ordering::SeqCst);
    }

    /// Hands `bytes` to the waiter of a request read by its members, when they
    /// are its answer; false when they are anything else.
    fn resolve_by_members(&self, bytes: &[u8]) -> bool {
        let Some(read) = members::read(bytes) else {
            return false;
        };
        let id = members::response_id(&read);
        let wanted = id.is_some_and(|id| {
            let ids = self.by_members.lock().unwrap_or_else(|e| e.into_inner());
            ids.contains(&id)
        });
        match id.filter(|_| wanted).and_then(|id| self.take_waiter(id)) {
            Some(w) => {
                let _ = w.send(Reply::Members(members::owned(read)));
                true
            }
            None => false,
        }
    }

    /// The answer to `id` within `timeout_ms`: a response, or members.
    async fn answer(
        &self,
        id: u64,
        reply: &mut PendingReply,
        timeout_ms: u64,
    ) -> Result<Answer, CallError> {
        let answer =
            match tokio::time::timeout(Duration::from_millis(timeout_ms), &mut reply.0).await {
                Ok(Ok(Reply::Response(v))) => Answer::Tree(v),
                Ok(Ok(Reply::Members(m))) => Answer::Members(m),
                Ok(Ok(Reply::Cancelled)) => return Err(CallError::Cancelled),
                Ok(Ok(Reply::NoResponse)) => return Err(CallError::NoResponse),
                Ok(Err(_)) => return Err(CallError::Gone),
                Err(_) => {
                    self.cancel(id, "timed out at the gateway");
                    let run = self.timeouts.fetch_add(1, Ordering::Relaxed) + 1;
                    if self.restart_after > 0 && run >= self.restart_after {
                        self.confirm_stuck(run);
                    }
                    return Err(CallError::Timeout(timeout_ms));
                }
            };
        self.timeouts.store(0, Ordering::Relaxed);
        Ok(answer)
    }

    /// Timeouts in a row may be slow calls that ran side by side on a live server:
    /// a ping decides. Unanswered, the upstream is stuck; answered, the count starts
    /// over.
    pub(super) fn confirm_stuck(&self, run: u32) {
        let Some(me) = self.me.upgrade() else { return };
        if self.confirming.swap(true, Ordering::SeqCst) {
            return;
        }
        tokio::spawn(async move {
            let (method, params) = me.revision().liveness();
            match me.request(method, params, me.confirm_ms).await {
                Err(CallError::Timeout(_)) => me.abandon(&format!(
                    "{run} requests in a row timed out, and so did a ping"
                )),
                // Any answer, even "method not found", shows it is alive.
                Ok(_) => me.timeouts.store(0, Ordering::Relaxed),
                Err(_) => {}
            }
            me.confirming.store(false, Ordering::SeqCst);
        });
    }

    /// The revision spoken over this connection, which decides what the
    /// upstream is sent ([`UpstreamRevision`]).
    pub fn revision(&self) -> UpstreamRevision {
        UpstreamRevision::of(self.stateless.load(Ordering::Relaxed))
    }

    /// Gives up on an upstream that is alive but does not answer: it is ended, and
    /// the router hears of it as stuck (and starts it again, as after a crash).
    pub fn abandon(&self, why: &str) {
        if self.stuck.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::warn!(upstream = %self.name, "the upstream is stuck ({why}); it is restarted");
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        match child.as_mut() {
            // The reader task sees the child's end and tells the router.
            Some(c) => {
                let _ = c.start_kill();
            }
            None => {
                drop(child);
                if self.close_once() {
                    if let Some(router) = self.inbound.upgrade() {
                        router.on_exit(self.upstream, self.generation, Exit::Stuck);
                    }
                }
            }
        }
    }

    /// How the connection ended, for the router.
    pub(crate) fn exit(&self) -> Exit {
        if self.stuck.load(Ordering::SeqCst) {
            Exit::Stuck
        } else {
            Exit::Stopped
        }
    }

    /// One request, start to finish.
    pub async fn request(
        &self,
        method: &str,
        params: Option<Value>,
        timeout_ms: u64,
    ) -> Result<Value, CallError> {
        let (id, mut reply) = self.start(method, params, timeout_ms).await?;
        self.wait(id, &mut reply, timeout_ms).await
    }

    /// Cancels a pending request: its waiter gets [`CallError::Cancelled`] and the
    /// upstream a `notifications/cancelled`; a late response is dropped.
    pub fn cancel(&self, id: u64, reason: &str) {
        if let Some(w) = self.take_waiter(id) {
            let _ = w.send(Reply::Cancelled);
            self.notify(jsonrpc::notification(
                "notifications/cancelled",
                Some(json!({"requestId": id, "reason": reason})),
            ));
        }
    }

    pub(super) fn forget(&self, id: u64) {
        if self.any_by_members.load(Ordering::SeqCst) {
            self.mark_by_members(id, false);
        }
        self.take_waiter(id);
        self.take_credential(id);
    }

    /// The credential request `id` goes with, if not the upstream's own.
    pub(crate) fn take_credential(&self, id: u64) -> Option<Arc<str>> {
        self.credentials
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
    }

    /// Takes the waiter of a pending request, if it still waits.
    pub(super) fn take_waiter(&self, id: u64) -> Option<oneshot::Sender<Reply>> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
    }

    /// Sends a notification or a response; dropped (and logged) if the child is gone or stalled.
    pub fn notify(&self, msg: Value) {
        if self.tx.try_send(jsonrpc::to_line(&msg)).is_err() {
            tracing::warn!(upstream = %self.name, "a message to the upstream was dropped: it is gone or not reading");
        }
    }

    /// Sends a message, waiting for room in the queue (bounded by the child reading).
    pub async fn send(&self, msg: Value) {
        if self.tx.send(jsonrpc::to_line(&msg)).await.is_err() {
            tracing::warn!(upstream = %self.name, "a message to the upstream was dropped: it is gone");
        }
    }

    /// Fails a request whose answer came and held no response (its waiter learns
    /// at once; the caller gets the internal-error answer).
    pub fn no_response(&self, id: u64) {
        if let Some(w) = self.take_waiter(id) {
            let _ = w.send(Reply::NoResponse);
        }
    }

    /// Whether a request still waits for its response.
    pub fn is_pending(&self, id: u64) -> bool {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&id)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Requests sent on this connection that still wait for their response.
    pub fn in_flight(&self) -> usize {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub(super) fn resolve(&self, id: &Value, msg: Value) {
        let waiter = id.as_u64().and_then(|id| self.take_waiter(id));
        match waiter {
            Some(w) => {
                let _ = w.send(Reply::Response(msg));
            }
            None => {
                tracing::debug!(upstream = %self.name, id = %logged(&id), "response to an unknown or finished request ignored")
            }
        }
    }

    /// Closes the connection; true for the call that closed it.
    pub(super) fn close_once(&self) -> bool {
        let first = !self.closed.swap(true, Ordering::SeqCst);
        self.close();
        first
    }

    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(stop) = self
            .stop_writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = stop.send(());
        }
        // Dropping every waiter tells each one the upstream is gone.
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Ends the child: closes its stdin, waits briefly, then kills it.
    pub async fn shutdown(&self) {
        self.close();
        let child = self.child.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut child) = child {
            if tokio::time::timeout(Duration::from_secs(2), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
    }
}

/// Hands one message an upstream wrote to whoever waits for it: a response to its
/// pending request, anything else to the router, in order.
pub(crate) async fn deliver(
    conn: &Arc<Conn>,
    inbound: &Weak<dyn Inbound>,
    bytes: &[u8],
    related: Option<u64>,
) {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    if conn.any_by_members.load(Ordering::SeqCst) && conn.resolve_by_members(bytes) {
        return;
    }
    let msg: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(upstream = %conn.name, "skipped a message that is not JSON: {e}");
            return;
        }
    };
    match jsonrpc::classify(&msg) {
        Kind::Response { id } => {
            let id = id.clone();
            conn.resolve(&id, msg);
        }
        Kind::Request { .. } | Kind::Notification { .. } => {
            if let Some(router) = inbound.upgrade() {
                router.on_message(conn.upstream, conn, msg, related).await;
            }
        }
        Kind::Invalid(why) => {
            tracing::warn!(upstream = %conn.name, "skipped an invalid message: {why}");
        }
    }
}

/// Unmarks a request read by its members when its wait ends.
struct Unmark<'a>(&'a Conn, u64);

impl Drop for Unmark<'_> {
    fn drop(&mut self) {
        self.0.mark_by_members(self.1, false);
    }
}

/// An answer as it was read: the whole message, or its members' text.
enum Answer {
    Tree(Value),
    Members(Members),
}

/// A response receiver handed out by [`Conn::start`].
pub struct PendingReply(pub(super) oneshot::Receiver<Reply>);
