//! A `tools/call` on a virtual server (V2-V6): where its name leads, and the
//! pipeline's verdict for it, with a hidden tool answered as an absent one.

use super::super::client_session::{self, ClientSession};
use super::super::descriptions;
use super::super::policy::Policy;
use super::super::servers::{self, Against, Route};
use super::Calls;
use crate::config::Discovery;
use crate::jsonrpc;
use crate::otel::Span;
use serde_json::{Map, Value};
use std::sync::Arc;
use warden_core::{CallScope, Catalogue, Refusal, Verdict};

impl Calls {
    /// How a call on the virtual server `name` goes (V2-V6); a server a reload
    /// took away has no tools. `id`: the call's request id, when it has one.
    pub(super) async fn route(
        &self,
        (policy, catalogue): (&Policy, &Arc<Catalogue>),
        session: &ClientSession,
        name: &str,
        id: Option<&Value>,
        params: &mut Value,
    ) -> Route {
        let Some(server) = policy.server(name) else {
            return Route::Absent;
        };
        let caller = session.caller();
        let listed = if server.discovery.searches() || server.sets_args() {
            let listed = policy
                .grant
                .list(&policy.pipeline, catalogue, caller.as_deref())
                .await;
            // S7: search and `call_tool` never reach a tool a guard hides.
            descriptions::unblocked(&policy.guards, caller.as_deref(), listed).0
        } else {
            Vec::new()
        };
        let found = client_session::lock(&session.found).clone();
        let routed = {
            let view = || policy.views.get(server, catalogue);
            let on = Against {
                listed: &listed,
                view: &view,
                found: &found,
            };
            servers::route(server, params, &on)
        };
        match routed {
            Route::Found(mut answer, reals) => {
                govern_found(policy, caller.as_deref(), &mut answer, &self.settle.metrics);
                if server.discovery == Discovery::Grow {
                    grow(session, reals, id).await;
                }
                Route::Answer(answer)
            }
            route => route,
        }
    }

    /// [`Calls::check`] for a routed call (`routed`: `None`, not on a virtual
    /// server; `Some(None)`, no tool by that name there; `Some(Some(shown))`, the
    /// real tool the server shows as `shown`). A tool the server does not show,
    /// and a renamed one the caller may not see, get the answer of an absent
    /// tool by the name the caller used, byte for byte (G2, V2).
    pub(super) async fn routed_check(
        &self,
        (policy, catalogue): (&Policy, &Catalogue),
        session: &ClientSession,
        check: Map<String, Value>,
        span: Option<&Span>,
        routed: &Option<Option<String>>,
    ) -> (Verdict, CallScope) {
        let absent = Catalogue::default();
        // S7: a tool whose definition a `block` guard flags for this caller is
        // absent for it: the pipeline decides it over an empty catalogue.
        let name = check.get("name").and_then(Value::as_str);
        let caller = session.caller();
        // The declaration is read only where a guard looks at definitions.
        let hidden = policy.guards.over_descriptions()
            && name.and_then(|n| catalogue.get(n)).is_some_and(|t| {
                let published = t.published_value();
                policy
                    .guards
                    .blocks_definition(caller.as_deref(), &t.name, &published)
            });
        let catalogue = if hidden { &absent } else { catalogue };
        match routed {
            None => self.check((policy, catalogue), session, check, span).await,
            Some(None) => self.check((policy, &absent), session, check, span).await,
            Some(Some(shown)) => {
                let mut again = check.clone();
                again.insert("name".into(), Value::String(shown.clone()));
                let (verdict, scope) = self.check((policy, catalogue), session, check, span).await;
                match verdict.outcome {
                    warden_core::Outcome::Answer {
                        refusal: Refusal::UnknownTool,
                        ..
                    } => self.check((policy, &absent), session, again, span).await,
                    _ => (verdict, scope),
                }
            }
        }
    }
}

/// Adds what a search found to the session's listing on a growing server, and
/// tells the client its list changed, on the search's own stream (V6). A
/// stateless 2026-07-28 client has no session to grow: it searches as on a
/// `search` server.
async fn grow(session: &ClientSession, found: Vec<String>, id: Option<&Value>) {
    if session.is_stateless() {
        return;
    }
    let added = {
        let mut grown = client_session::lock(&session.found);
        found
            .into_iter()
            .filter(|r| grown.insert(r.clone()))
            .count()
    };
    if added > 0 {
        let changed = jsonrpc::notification("notifications/tools/list_changed", None);
        session.send_for(id.map(jsonrpc::id_key), changed).await;
    }
}

/// Description guards over the tools a search returns (S7), as over a listing:
/// the structured tools, and the text that repeats them.
fn govern_found(
    policy: &Policy,
    caller: Option<&warden_core::Caller>,
    answer: &mut Value,
    metrics: &crate::metrics::Metrics,
) {
    let Some(Value::Array(tools)) = answer.pointer_mut("/structuredContent/tools") else {
        return;
    };
    if descriptions::govern_listing(&policy.guards, caller, tools, metrics).is_empty() {
        return;
    }
    let text = answer["structuredContent"].to_string();
    if let Some(slot) = answer.pointer_mut("/content/0/text") {
        *slot = Value::String(text);
    }
}
