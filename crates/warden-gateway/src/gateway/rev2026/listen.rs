//! `subscriptions/listen` (2026-07-28): a client's request whose answer is a
//! stream of the list-changed notifications it asked for.
//!
//! The stream opens with `notifications/subscriptions/acknowledged`, naming what
//! the gateway honours of the client's filter; every notification on it carries
//! the subscription id (the listen request's own id) in
//! `_meta["io.modelcontextprotocol/subscriptionId"]`. It ends when the client
//! cancels the request or goes away; it never gets a response.
//!
//! A tool list change reaches a stream only when the tools its caller sees
//! changed: a tool hidden from the caller never causes a notification it can
//! observe. Prompt and resource lists are the upstreams' own and are not filtered
//! by caller, so their changes pass as they come. Resource subscriptions
//! (`resources/updated` for chosen URIs) are not honoured, and the gateway does
//! not offer them.

use crate::gateway::call::Begun;
use crate::gateway::client_session::{self, ClientSession};
use crate::gateway::Gateway;
use crate::jsonrpc;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use warden_core::Caller;

/// Where every listen-stream notification says which subscription it belongs to.
pub const SUBSCRIPTION_ID_KEY: &str = "io.modelcontextprotocol/subscriptionId";

/// What a stream delivers: the part of the client's filter the gateway honours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filter {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
}

impl Filter {
    /// The client's `notifications` filter, cut to what the gateway offers: tool
    /// list changes always, prompt and resource list changes where an upstream
    /// announces them (`listChanged` in the offered capabilities).
    pub fn honoured(requested: Option<&Value>, offered: &Map<String, Value>) -> Filter {
        let asked = |key: &str| {
            requested
                .and_then(|r| r.get(key))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let announced = |capability: &str| {
            offered
                .get(capability)
                .and_then(|c| c.get("listChanged"))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        Filter {
            tools: asked("toolsListChanged"),
            prompts: asked("promptsListChanged") && announced("prompts"),
            resources: asked("resourcesListChanged") && announced("resources"),
        }
    }

    /// The acknowledgement: the first message of the stream.
    pub fn acknowledgement(&self, id: &Value) -> Value {
        let mut honoured = Map::new();
        for (on, key) in [
            (self.tools, "toolsListChanged"),
            (self.prompts, "promptsListChanged"),
            (self.resources, "resourcesListChanged"),
        ] {
            if on {
                honoured.insert(key.into(), Value::Bool(true));
            }
        }
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {SUBSCRIPTION_ID_KEY: id}, "notifications": honoured}})
    }
}

/// A list-changed notification for the stream with subscription id `id`.
pub fn notification(method: &str, id: &Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": {"_meta": {SUBSCRIPTION_ID_KEY: id}}})
}

impl Gateway {
    /// A `subscriptions/listen` stream: acknowledged at once, then
    /// the list changes it asked for, until the client cancels it or goes away.
    pub(in crate::gateway) fn listen(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        id: &Value,
        params: Option<&Value>,
    ) -> Begun {
        let (offered, _) = self.upstreams.offered(false);
        let filter = Filter::honoured(params.and_then(|p| p.get("notifications")), &offered);
        let key = jsonrpc::id_key(id);
        let ended = Arc::new(tokio::sync::Notify::new());
        client_session::lock(&session.listening).insert(key.clone(), ended.clone());
        let mut changes = self.sessions.changes();
        let (me, session, id) = (self.clone(), session.clone(), id.clone());
        Begun::Then(Box::pin(async move {
            session
                .send_for(Some(key.clone()), filter.acknowledgement(&id))
                .await;
            let caller = session.caller().map(|c| Caller::clone(&c));
            // What the caller's view was last compared under: a reload changes
            // the policy as well as (or instead of) the catalogue.
            let mut seen = me.calls.policy();
            loop {
                let change = tokio::select! {
                    _ = ended.notified() => break,
                    c = changes.recv() => c,
                };
                let method = match change {
                    Ok(client_session::ListChange::Tools(before)) if filter.tools => {
                        let after = me.catalogue();
                        let policy = me.calls.policy();
                        let was = seen
                            .grant
                            .list(&seen.pipeline, &before, caller.as_ref())
                            .await;
                        let now = policy
                            .grant
                            .list(&policy.pipeline, &after, caller.as_ref())
                            .await;
                        let same = warden_core::catalogue::same_listing(&was, &now);
                        seen = policy;
                        if same {
                            continue;
                        }
                        "notifications/tools/list_changed"
                    }
                    Ok(client_session::ListChange::Prompts) if filter.prompts => {
                        "notifications/prompts/list_changed"
                    }
                    Ok(client_session::ListChange::Resources) if filter.resources => {
                        "notifications/resources/list_changed"
                    }
                    Ok(_) => continue,
                    // Changes were missed: the client is told to look again.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) if filter.tools => {
                        "notifications/tools/list_changed"
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                };
                session
                    .send_for(Some(key.clone()), notification(method, &id))
                    .await;
            }
            client_session::lock(&session.listening).remove(&key);
            // A listen stream gets no response.
            None
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_is_what_was_asked_and_is_offered() {
        let offered = json!({"tools": {"listChanged": true}, "prompts": {"listChanged": true},
            "resources": {"subscribe": true}})
        .as_object()
        .cloned()
        .unwrap();
        let asked = json!({"toolsListChanged": true, "promptsListChanged": true,
            "resourcesListChanged": true, "resourceSubscriptions": ["file:///a"]});
        let f = Filter::honoured(Some(&asked), &offered);
        assert_eq!(
            f,
            Filter {
                tools: true,
                prompts: true,
                resources: false
            }
        );
        assert_eq!(
            f.acknowledgement(&json!(7)),
            json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": 7},
                    "notifications": {"toolsListChanged": true, "promptsListChanged": true}}})
        );
        let narrow = Filter::honoured(Some(&json!({"promptsListChanged": true})), &offered);
        assert!(!narrow.tools && narrow.prompts);
        assert_eq!(Filter::honoured(None, &offered), Filter::default());
        assert_eq!(
            notification("notifications/tools/list_changed", &json!("s")),
            json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "s"}}})
        );
    }
}
