//! What a 2026-07-28 request meets at dispatch before the methods every
//! revision has: the first such client's capabilities offered upstream, the
//! methods the revision removed, `server/discover`, and `subscriptions/listen`.

use super::envelope::Envelope;
use super::results::discover;
use super::wire::REMOVED;
use crate::gateway::call::Begun;
use crate::gateway::client_session::ClientSession;
use crate::gateway::Gateway;
use crate::jsonrpc;
use crate::texts;
use serde_json::{json, Value};
use std::sync::Arc;

impl Gateway {
    /// Answers what only a 2026-07-28 request (its `envelope`) can ask; `None`:
    /// the request goes on to the methods every revision has.
    pub(in crate::gateway) async fn request_2026(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        envelope: &Envelope,
        (id, method, params): (&Value, &str, Option<&Value>),
    ) -> Option<Begun> {
        session.mark_stateless();
        // The first client's capabilities are what upstreams are offered
        // (built only while nothing is connected yet).
        if !self.upstreams.started() {
            let init = envelope.upstream_init(crate::upstream::SUPPORTED_VERSIONS[0]);
            self.connect(Some(&init)).await;
        }
        if REMOVED.contains(&method) {
            let error = json!({"code": jsonrpc::METHOD_NOT_FOUND,
                "message": texts::method_not_found(method)});
            return Some(Begun::Done(Some(Err(error))));
        }
        match method {
            "server/discover" => Some(Begun::Done(Some(Ok(self.discover(session))))),
            "subscriptions/listen" => Some(self.listen(session, id, params)),
            _ => None,
        }
    }

    /// The answer to `server/discover`: what the upstreams offer, as the
    /// gateway honours it, and the instructions the client's server gives.
    fn discover(&self, session: &ClientSession) -> Value {
        let (mut capabilities, instructions) = self.upstreams.offered(false);
        // Resource subscriptions are not honoured on listen streams.
        if let Some(r) = capabilities
            .get_mut("resources")
            .and_then(Value::as_object_mut)
        {
            r.shift_remove("subscribe");
        }
        let instructions = match session.server() {
            None => instructions,
            Some(_) => self.calls.server_instructions(session),
        };
        discover(capabilities, instructions)
    }
}
