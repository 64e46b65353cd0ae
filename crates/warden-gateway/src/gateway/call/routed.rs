//! A `tools/call` on a virtual server (V2-V4): where its name leads, and the
//! pipeline's verdict for it, with a hidden tool answered as an absent one.

use super::super::policy::Policy;
use super::super::servers::{self, Route};
use super::super::session::ClientSession;
use super::Calls;
use crate::otel::Span;
use serde_json::{Map, Value};
use std::sync::Arc;
use warden_core::{Catalogue, Refusal, Verdict};

impl Calls {
    /// How a call on the virtual server `name` goes (V2-V4); a server a reload
    /// took away has no tools.
    pub(super) async fn route(
        &self,
        policy: &Policy,
        catalogue: &Arc<Catalogue>,
        session: &ClientSession,
        name: &str,
        params: &mut Value,
    ) -> Route {
        let Some(server) = policy.server(name) else {
            return Route::Absent;
        };
        let listed = if server.discovery == crate::config::Discovery::Search {
            let caller = session.caller();
            policy
                .grant
                .list(&policy.pipeline, catalogue, caller.as_deref())
                .await
        } else {
            Vec::new()
        };
        let view = || policy.views.get(server, catalogue);
        servers::route(server, params, &listed, &view)
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
