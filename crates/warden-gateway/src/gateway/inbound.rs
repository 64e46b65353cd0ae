//! What upstreams send on their own, on its way to clients: their requests
//! (sampling, elicitation, roots), progress, log messages, cancellations and
//! list-changed notifications; and what happens when an upstream stops.
//!
//! A request or log message goes only to the client whose call it belongs to,
//! tagged with that call; when that cannot be told, to no one (one caller never
//! sees another's traffic).

use super::client_session::{lock, ListChange, Sessions};
use super::relay::refuse_upstream;
use super::rev2026;
use super::upstream_set::Upstreams;
use crate::jsonrpc;
use crate::logged::logged;
use crate::metrics::Metrics;
use crate::texts;
use crate::upstream::{BoxedSend, Conn, Exit, Inbound};
use serde_json::{json, Value};
use std::sync::{Arc, Weak};

/// Routes upstream messages to client sessions.
pub struct FromUpstreams {
    upstreams: Arc<Upstreams>,
    sessions: Arc<Sessions>,
    metrics: Arc<Metrics>,
    me: Weak<FromUpstreams>,
}

impl FromUpstreams {
    pub fn new(
        upstreams: Arc<Upstreams>,
        sessions: Arc<Sessions>,
        metrics: Arc<Metrics>,
    ) -> Arc<FromUpstreams> {
        Arc::new_cyclic(|me| FromUpstreams {
            upstreams,
            sessions,
            metrics,
            me: me.clone(),
        })
    }

    async fn deliver(
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
        // What a 2026-07-28 upstream sends on the gateway's subscription stream is
        // tagged with that subscription: the clients get the notification without it.
        let msg = if conn.revision().listens() && method.ends_with("/list_changed") {
            clean(&method)
        } else {
            msg
        };
        match (msg.get("id").cloned(), method.as_str()) {
            (Some(id), "ping") => conn.send(jsonrpc::response(id, json!({}))).await,
            (Some(their_id), _) => self.request(index, conn, msg, their_id, related).await,
            (None, "notifications/progress") => self.sessions.relay_progress(msg).await,
            (None, "notifications/cancelled") => self.withdrawn(conn, msg).await,
            (None, "notifications/tools/list_changed") => {
                // Re-listing needs this connection's reader, which is running us: not inline.
                tokio::spawn(async move {
                    let before = self.upstreams.catalogue();
                    if self.upstreams.refresh(index).await {
                        self.sessions.changed(ListChange::Tools(before));
                        self.sessions.broadcast(msg).await;
                    }
                });
            }
            (None, "notifications/prompts/list_changed") => {
                self.sessions.changed(ListChange::Prompts);
                self.sessions.broadcast(msg).await;
            }
            (None, "notifications/resources/list_changed") => {
                self.sessions.changed(ListChange::Resources);
                self.sessions.broadcast(msg).await;
            }
            // The upstream took the gateway's own subscription: nothing for clients.
            (None, "notifications/subscriptions/acknowledged") => {}
            (None, "notifications/message") => self.log_message(index, conn, msg, related).await,
            (None, _) => self.sessions.broadcast(msg).await,
        }
    }

    /// An upstream's request to a client: to the session whose call it came with,
    /// under an id of the gateway's (2025-11-25), or as an input request of that
    /// call's result (2026-07-28).
    async fn request(
        &self,
        index: usize,
        conn: Arc<Conn>,
        mut msg: Value,
        their_id: Value,
        related: Option<u64>,
    ) {
        let method = msg
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(session) = self.sessions.session_for(&conn, related) else {
            let text = if self.sessions.live().is_empty() {
                texts::NO_CLIENT
            } else {
                tracing::warn!(upstream = %self.upstreams.name_of(index), method = %logged(method), "an upstream request could not be tied to one client; refused");
                texts::UNTIED_REQUEST
            };
            return refuse_upstream(&conn, their_id, text).await;
        };
        let call = session.call_on(&conn, related);
        if !session.takes_requests_for(call.as_ref()) {
            // A 2026-07-28 client takes requests only as input requests of the
            // call they belong to.
            if rev2026::input_capability(method).is_some() {
                let interrupt = call.and_then(|k| lock(&session.interrupts).get(&k).cloned());
                if let Some(tx) = interrupt {
                    if let Some(o) = msg.as_object_mut() {
                        o.shift_remove("id");
                    }
                    if tx.send((their_id.clone(), msg)).await.is_ok() {
                        return;
                    }
                }
            }
            return refuse_upstream(&conn, their_id, texts::CLIENT_TAKES_NO_REQUESTS).await;
        }
        if let Some(capability) = rev2026::input_capability(method) {
            if !session.client_can(capability) {
                // The client never said it can answer this: the upstream hears so at
                // once instead of waiting out its timeout.
                tracing::info!(upstream = %self.upstreams.name_of(index), method = %logged(method), "an upstream request needs a capability the client did not declare; refused");
                return refuse_upstream(&conn, their_id, texts::CLIENT_LACKS_CAPABILITY).await;
            }
        }
        let ours = self.sessions.next_request_id();
        lock(&session.server_requests)
            .insert(jsonrpc::id_key(&ours), (Arc::downgrade(&conn), their_id));
        msg["id"] = ours;
        session.send_for(call, msg).await;
    }

    /// The upstream withdrew one of its own requests: tell the client that got it,
    /// under the id the gateway gave it.
    async fn withdrawn(&self, conn: Arc<Conn>, msg: Value) {
        let Some(their_id) = msg.pointer("/params/requestId").cloned() else {
            return;
        };
        for session in self.sessions.live() {
            let ours = lock(&session.server_requests)
                .iter()
                .find(|(_, (c, id))| {
                    *id == their_id && c.upgrade().is_some_and(|c| Arc::ptr_eq(&c, &conn))
                })
                .map(|(k, _)| k.clone());
            if let Some(ours) = ours {
                lock(&session.server_requests).remove(&ours);
                let mut msg = msg.clone();
                msg["params"]["requestId"] = serde_json::from_str(&ours).unwrap_or(Value::Null);
                session.send_raw(msg).await;
            }
        }
    }

    /// Log messages may carry a caller's data: only to the session they belong to,
    /// and at 2026-07-28 only for a call that opted in, at or above its level.
    async fn log_message(&self, index: usize, conn: Arc<Conn>, msg: Value, related: Option<u64>) {
        let Some(s) = self.sessions.session_for(&conn, related) else {
            tracing::debug!(upstream = %self.upstreams.name_of(index), "an upstream log message tied to no one client was not relayed");
            return;
        };
        let call = s.call_on(&conn, related);
        if s.is_stateless() {
            let wanted = call
                .as_ref()
                .and_then(|k| lock(&s.log_levels).get(k).copied());
            let level = msg
                .pointer("/params/level")
                .and_then(Value::as_str)
                .and_then(rev2026::log_rank);
            if !matches!((wanted, level), (Some(w), Some(l)) if l >= w) {
                return;
            }
        }
        s.send_for(call, msg).await;
    }
}

impl Inbound for FromUpstreams {
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
                me.deliver(upstream, conn, msg, related).await;
            }
        })
    }

    fn on_exit(&self, upstream: usize, generation: u64, exit: Exit) {
        if !self.upstreams.needs_restart(upstream, generation) {
            return;
        }
        let name = self.upstreams.name_of(upstream);
        tracing::warn!(upstream = %name, reason = exit.as_str(), "upstream ended; it will be restarted");
        self.metrics.upstream_restarted(&name, exit.as_str());
        let Some(me) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            let before = me.upstreams.catalogue();
            if me.upstreams.restart(upstream).await {
                me.sessions.changed(ListChange::Tools(before));
                me.sessions
                    .broadcast(clean("notifications/tools/list_changed"))
                    .await;
            }
        });
    }
}

/// A list-changed notification as the gateway sends it: its own, without what an
/// upstream put in it (a 2026-07-28 upstream tags it with the gateway's subscription).
fn clean(method: &str) -> Value {
    jsonrpc::notification(method, None)
}
