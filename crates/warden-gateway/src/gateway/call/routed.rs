//! A `tools/call` on a virtual server (V2-V4): where its name leads, and the
//! pipeline's verdict for it, with a hidden tool answered as an absent one.

use super::super::descriptions;
use super::super::policy::Policy;
use super::super::servers::{self, Route};
use super::super::session::ClientSession;
use super::Calls;
use crate::otel::Span;
use serde_json::{Map, Value};
use warden_core::{Catalogue, Refusal, Verdict};

impl Calls {
    /// How a call on the virtual server `name` goes (V2-V4); a server a reload
    /// took away has no tools.
    pub(super) async fn route(
        &self,
        policy: &Policy,
        catalogue: &Catalogue,
        session: &ClientSession,
        name: &str,
        params: &mut Value,
    ) -> Route {
        let Some(server) = policy.server(name) else {
            return Route::Absent;
        };
        let listed = if server.discovery == crate::config::Discovery::Search {
            let caller = session.caller();
            let listed = policy
                .grant
                .list(&policy.pipeline, catalogue, caller.as_deref())
                .await;
            // S7: search and `call_tool` never reach a tool a guard hides.
            descriptions::unblocked(&policy.guards, caller.as_deref(), listed).0
        } else {
            Vec::new()
        };
        servers::route(server, params, &listed)
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
    ) -> Verdict {
        let absent = Catalogue::default();
        // S7: a tool whose definition a `block` guard flags for this caller is
        // absent for it: the pipeline decides it over an empty catalogue.
        let name = check.get("name").and_then(Value::as_str);
        let caller = session.caller();
        let hidden = name.and_then(|n| catalogue.get(n)).is_some_and(|t| {
            policy
                .guards
                .blocks_definition(caller.as_deref(), &t.name, &t.published)
        });
        let catalogue = if hidden { &absent } else { catalogue };
        match routed {
            None => self.check((policy, catalogue), session, check, span).await,
            Some(None) => self.check((policy, &absent), session, check, span).await,
            Some(Some(shown)) => {
                let mut again = check.clone();
                again.insert("name".into(), Value::String(shown.clone()));
                let verdict = self.check((policy, catalogue), session, check, span).await;
                match verdict.outcome {
                    warden_core::Outcome::Answer {
                        refusal: Refusal::UnknownTool,
                        ..
                    } => self.check((policy, &absent), session, again, span).await,
                    _ => verdict,
                }
            }
        }
    }
}
