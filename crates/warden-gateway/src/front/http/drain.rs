//! Graceful drain of the HTTP front, on SIGTERM.
//!
//! 1. `/readyz` answers 503 at once (the gateway's [`Health`](crate::gateway::Health)),
//!    the listener is closed (a new connection is refused by the OS, which load
//!    balancers retry elsewhere), and every connection is told to close once its
//!    request in flight is answered (idle kept-alive ones close now).
//! 2. On connections still open, a new JSON-RPC request (an `initialize`, a call,
//!    a 2026-07-28 request) or a new GET stream gets 503 [`texts::HTTP_DRAINING`]:
//!    it did not run, so a client may retry it elsewhere. Responses and
//!    notifications are still taken: a call in flight may be waiting for the
//!    client's answer to a sampling or elicitation request, or be cancelled.
//! 3. Every session's GET stream ends, so its client reconnects elsewhere. A
//!    POST's stream ends as always, right after its answer.
//! 4. Calls in flight finish, for at most `gateway.drain_timeout`. What still
//!    runs then is answered with [`texts::DRAIN_DEADLINE`] and cancelled
//!    upstream (its audit record says `cancelled`). Each stream takes one last
//!    event, under its lock: a late answer from the upstream is dropped, so
//!    nothing is answered twice.
//! 5. The audit trail's retry backlog is flushed, the upstreams are stopped, and
//!    the process exits 0.
//!
//! "In flight" is counted here ([`Drain::hold`]): every open connection (its
//! answer is not yet written) and every call's waiting half the front spawned
//! (which also covers a call whose client went away and may resume it).

use super::http_session::{HttpSession, SessionTable};
use crate::gateway::Gateway;
use crate::jsonrpc;
use crate::texts;
use bytes::Bytes;
use serde_json::{json, Value};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// After the deadline, how long the answers it forced may take to be written and
/// the cancelled calls to settle (their audit records), before the process exits
/// regardless.
pub(super) const AFTER_DEADLINE: Duration = Duration::from_secs(5);

/// The front's drain state: whether it began, and what is in flight.
pub(super) struct Drain {
    stop: watch::Sender<bool>,
    work: Arc<Work>,
    /// 2026-07-28 requests' own sessions, which no table holds, for the deadline.
    stateless: Mutex<Vec<Weak<HttpSession>>>,
    /// `gateway.drain_timeout`.
    pub(super) timeout: Duration,
}

#[derive(Default)]
struct Work {
    n: AtomicUsize,
    idle: Notify,
}

/// One thing in flight; dropping it ends it.
pub(super) struct Held(Arc<Work>);

impl Drop for Held {
    fn drop(&mut self) {
        if self.0.n.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Drain {
    pub(super) fn new(timeout: Duration) -> Drain {
        Drain {
            stop: watch::channel(false).0,
            work: Arc::default(),
            stateless: Mutex::new(Vec::new()),
            timeout,
        }
    }

    /// Tells its holder when the drain begins (connections close when idle).
    pub(super) fn subscribe(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Counts something in flight until the returned guard drops.
    pub(super) fn hold(&self) -> Held {
        self.work.n.fetch_add(1, Ordering::SeqCst);
        Held(self.work.clone())
    }

    /// Runs a call's waiting half, counted as in flight.
    pub(super) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        let held = self.hold();
        tokio::spawn(async move {
            work.await;
            drop(held);
        });
    }

    /// Remembers a 2026-07-28 request's session until it ends.
    pub(super) fn track_stateless(&self, session: &Arc<HttpSession>) {
        let mut all = self.stateless.lock().unwrap_or_else(|e| e.into_inner());
        if all.len() >= 64 && all.len().is_power_of_two() {
            all.retain(|w| w.strong_count() > 0);
        }
        all.push(Arc::downgrade(session));
    }

    fn stateless_sessions(&self) -> Vec<Arc<HttpSession>> {
        let all = self.stateless.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().filter_map(Weak::upgrade).collect()
    }

    /// Things in flight now.
    pub(super) fn in_flight(&self) -> usize {
        self.work.n.load(Ordering::SeqCst)
    }

    /// Resolves once nothing is in flight.
    pub(super) async fn settled(&self) {
        loop {
            let idle = self.work.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            idle.await;
        }
    }
}

impl Drain {
    /// Step 1 and 3: readiness off, connections told to close when idle, GET
    /// streams ended. (The listener is the server's to close.)
    pub(super) fn begin(&self, gateway: &Gateway, sessions: &SessionTable) {
        gateway.health.start_draining();
        self.stop.send_replace(true);
        for session in sessions.all() {
            if let Some(get) = session.streams().streams.get_mut(&0) {
                // Dropping the sink ends the GET response's body.
                get.sink = None;
            }
        }
    }

    /// Step 4, at the deadline: every call still waiting for its answer is
    /// answered with [`texts::DRAIN_DEADLINE`] and cancelled upstream. Returns
    /// how many.
    pub(super) fn answer_the_rest(&self, gateway: &Arc<Gateway>, sessions: &SessionTable) -> usize {
        let mut sessions = sessions.all();
        sessions.extend(self.stateless_sessions());
        let mut answered = 0;
        for session in sessions {
            let ids = {
                let mut streams = session.streams();
                let running: Vec<(u64, Value)> = streams
                    .streams
                    .iter()
                    .filter(|(_, s)| !s.done)
                    .filter_map(|(n, s)| s.request.as_ref().map(|(_, id)| (*n, id.clone())))
                    .collect();
                for (n, id) in &running {
                    let error =
                        jsonrpc::error(id.clone(), jsonrpc::INTERNAL_ERROR, texts::DRAIN_DEADLINE);
                    let data = Bytes::from(serde_json::to_vec(&error).unwrap_or_default());
                    // The last event closes the stream: a late answer finds no
                    // request waiting and is dropped.
                    streams.push(*n, data, true);
                }
                running
            };
            for (_, id) in ids {
                answered += 1;
                let note = jsonrpc::notification(
                    "notifications/cancelled",
                    Some(json!({"requestId": id, "reason": "the gateway is shutting down"})),
                );
                let (gateway, client) = (gateway.clone(), session.client.clone());
                self.spawn(async move {
                    if let Some(w) = gateway.handle(&client, note).await {
                        w.await;
                    }
                });
            }
        }
        answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn settled_waits_for_every_holder() {
        let drain = Arc::new(Drain::new(Duration::from_secs(1)));
        drain.settled().await;
        let a = drain.hold();
        let b = drain.hold();
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let waiter = {
            let drain = drain.clone();
            tokio::spawn(async move {
                drain.settled().await;
                let _ = tx.send(());
            })
        };
        drop(a);
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err(), "one holder is left");
        drop(b);
        waiter.await.unwrap();
        assert_eq!(drain.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_spawned_call_is_in_flight_until_it_ends() {
        let drain = Drain::new(Duration::from_secs(1));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        drain.spawn(async move {
            let _ = rx.await;
        });
        assert_eq!(drain.in_flight(), 1);
        let mut stop = drain.subscribe();
        assert!(!*stop.borrow_and_update());
        drain.stop.send_replace(true);
        assert!(stop.has_changed().unwrap());
        tx.send(()).unwrap();
        drain.settled().await;
    }
}
