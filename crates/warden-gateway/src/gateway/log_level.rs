//! An older client's `logging/setLevel`, for every upstream behind the gateway.
//!
//! Up to 2025-11-25 the client sets one level for the server it talks to; behind
//! the gateway that is every upstream. The level is kept for the client's
//! session, where it rides the client's requests to 2026-07-28 upstreams in the
//! envelope (`io.modelcontextprotocol/logLevel`), and it is sent to each upstream
//! spoken to in an older revision that offers `logging`. Sent to one upstream
//! only (as a method the gateway does not govern), the others never heard it.

use super::client_session::{self, ClientSession};
use super::settle::Body;
use super::{rev2026, Gateway};
use crate::jsonrpc;
use crate::logged::logged;
use crate::texts;
use serde_json::{json, Value};

impl Gateway {
    /// `None`: no upstream takes a log level (the method is not found, as before).
    pub(super) async fn set_log_level(
        &self,
        session: &ClientSession,
        params: Option<&Value>,
    ) -> Option<Body> {
        let ups = self.upstreams.list();
        let rides = ups.iter().any(|u| u.revision_for(true).log_level_rides());
        let logging: Vec<_> = ups
            .iter()
            .filter(|u| {
                !u.revision_for(true).log_level_rides()
                    && u.info_for(true)
                        .is_some_and(|i| i.capabilities.contains_key("logging"))
            })
            .cloned()
            .collect();
        if !rides && logging.is_empty() {
            return None;
        }
        let level = params.and_then(|p| p.get("level"));
        if level
            .and_then(Value::as_str)
            .and_then(rev2026::log_rank)
            .is_none()
        {
            let message = texts::invalid_param("level");
            return Some(Err(
                json!({"code": jsonrpc::INVALID_PARAMS, "message": message}),
            ));
        }
        *client_session::lock(&session.log_level) = level.cloned();
        for up in logging {
            let Some(conn) = up.conn_for(true) else {
                continue;
            };
            let answer = conn
                .request(
                    "logging/setLevel",
                    Some(json!({"level": level})),
                    up.timeout_ms(),
                )
                .await;
            let refused = match &answer {
                Ok(a) => a.get("error").map(Value::to_string),
                Err(e) => Some(e.to_string()),
            };
            if let Some(e) = refused {
                tracing::info!(upstream = %up.name, error = %logged(&e), "an upstream did not take the client's log level");
            }
        }
        Some(Ok(json!({})))
    }
}
