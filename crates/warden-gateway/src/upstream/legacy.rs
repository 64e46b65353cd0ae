//! The older revision's session beside a 2026-07-28 HTTP upstream.
//!
//! A Streamable HTTP server may speak both revisions: stateless requests for
//! 2026-07-28 clients, an `initialize` session for older ones (the conformance
//! suite's reference server does). What such a server offers an older client
//! over its session does not always exist in 2026-07-28: it asks for sampling or
//! elicitation with a request on the session's stream, where its stateless side
//! has nobody to ask. So when an HTTP upstream offers 2026-07-28 and also
//! answers `initialize`, the gateway holds that session too, and an older
//! client's requests go over it, exactly as to a server of the client's own
//! revision; 2026-07-28 clients and the gateway's own requests stay stateless.
//! A server that refuses `initialize` has only its stateless side, and older
//! clients are bridged to it (input rounds, the gateway's `logging/setLevel`).
//!
//! The session is of the same generation as the stateless connection: when it
//! ends, the upstream is started again, both sides.

use super::{Conn, Inbound, ServerInfo, Upstream, UpstreamRevision};
use serde_json::Value;
use std::sync::{Arc, RwLock, Weak};

/// The older revision's session with an upstream, while it has one.
#[derive(Default)]
pub(super) struct Legacy {
    side: RwLock<Option<(Arc<Conn>, ServerInfo)>>,
}

impl Legacy {
    /// The session's connection, if it is alive.
    pub(super) fn conn(&self) -> Option<Arc<Conn>> {
        self.read()
            .map(|(c, _)| c)
            .filter(|c| !c.is_closed() && c.ready.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// What the upstream said of itself in the session's `initialize` answer.
    pub(super) fn info(&self) -> Option<ServerInfo> {
        self.read().map(|(_, i)| i)
    }

    fn read(&self) -> Option<(Arc<Conn>, ServerInfo)> {
        self.side.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Ends the session, if there is one.
    pub(super) async fn stop(&self) {
        let side = self.side.write().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((conn, _)) = side {
            conn.shutdown().await;
        }
    }
}

impl Upstream {
    /// Opens the older revision's session beside the stateless connection of
    /// `generation`, when the upstream is an HTTP server that answers
    /// `initialize`; otherwise leaves none. Waits at most the upstream's timeout.
    pub(super) async fn open_legacy(
        &self,
        generation: u64,
        inbound: Weak<dyn Inbound>,
        init: &Value,
    ) {
        let conn = match super::http::open(self, generation, inbound) {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(upstream = %self.name, "no older-revision session: {e}");
                return;
            }
        };
        let patience = self.start_patience(super::HANDSHAKE_TIMEOUT);
        match self.handshake_within(&conn, init, patience).await {
            Ok(info) if info.protocol_version != super::STATELESS_VERSION => {
                tracing::info!(upstream = %self.name, version = %crate::logged::logged(&info.protocol_version), "the upstream also speaks an older revision: older clients are served over a session of their own");
                conn.ready.store(true, std::sync::atomic::Ordering::SeqCst);
                self.keep_pinging(&conn);
                *self.legacy.side.write().unwrap_or_else(|e| e.into_inner()) = Some((conn, info));
            }
            outcome => {
                if let Err(e) = outcome {
                    tracing::debug!(upstream = %self.name, "no older-revision session: {e}");
                }
                conn.shutdown().await;
            }
        }
    }

    /// The connection a client's request goes over: for a client of a revision
    /// before 2026-07-28 (`older`), the older revision's session when the
    /// upstream has one, else the upstream's connection.
    pub fn conn_for(&self, older: bool) -> Option<Arc<Conn>> {
        match older.then(|| self.legacy.conn()).flatten() {
            Some(conn) => Some(conn),
            None => self.conn(),
        }
    }

    /// The revision a client's request is spoken to the upstream in (`older`:
    /// the client's is before 2026-07-28): 2026-07-28 when the upstream speaks
    /// it, and the client does too or no older-revision session is there for
    /// it; else the session's.
    pub fn revision_for(&self, older: bool) -> UpstreamRevision {
        match self.revision() {
            UpstreamRevision::Stateless if older && self.legacy.conn().is_some() => {
                UpstreamRevision::Session
            }
            revision => revision,
        }
    }

    /// What the upstream offers a client (`older`: of a revision before
    /// 2026-07-28): its session's `initialize` answer where it has one.
    pub fn info_for(&self, older: bool) -> Option<ServerInfo> {
        match older.then(|| self.legacy.info()).flatten() {
            Some(info) if self.legacy.conn().is_some() => Some(info),
            _ => self.info(),
        }
    }
}
