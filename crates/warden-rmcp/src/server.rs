//! The pipeline in front of an rmcp [`ServerHandler`], in process (L1).
//!
//! [`Governed`] is a `ServerHandler` itself: `tools/list` and `tools/call` go
//! through the pipeline ([`Governance`]), every other request and notification
//! goes to the wrapped handler unchanged (`handler.rs` forwards them).
//!
//! A listing is the wrapped handler's, every page of it, as published: hidden
//! tools left out, pinned arguments removed from the schemas, names prefixed
//! when configured. A call is judged against the catalogue of the last listing
//! (the first call of a connection that never listed lists first); one the
//! pipeline answers never reaches the handler, one it lets through reaches it
//! under the handler's own tool name with the arguments as the stages left them.

use crate::governance::Governance;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
    ListToolsResult, PaginatedRequestParams, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use std::sync::{Arc, RwLock};
use warden_core::{Answer, Caller, Catalogue, Outcome, Session};

/// How long the gateway lets a client keep a tool list (2026-07-28 `ttlMs`).
const LIST_TTL_MS: u64 = 30_000;
/// Pages of one listing followed at most: a handler whose cursors never end
/// must not hold a request forever.
const MAX_PAGES: usize = 1000;

/// Who a request is made by, read from its context (an HTTP server's
/// authentication, say); `None`: nobody, to whom no tool is visible (G1).
pub type CallerOf = Arc<dyn Fn(&RequestContext<RoleServer>) -> Option<Caller> + Send + Sync>;

/// An rmcp server handler with the pipeline in front of its tools.
pub struct Governed<S> {
    pub(crate) inner: S,
    governance: Arc<Governance>,
    /// Asked per request; without it every request is the governance's caller's.
    caller_of: Option<CallerOf>,
    /// This connection's: which undeclared keys it was warned about.
    session: Session,
    /// Built from the last listing; replaced only by another.
    catalogue: RwLock<Option<Arc<Catalogue>>>,
}

impl<S: ServerHandler> Governed<S> {
    /// `inner` governed by `governance`. Make one per connection (rmcp's HTTP
    /// server asks a factory for each session); the governance is shared.
    pub fn new(inner: S, governance: Arc<Governance>) -> Self {
        Governed {
            session: governance.session(),
            inner,
            governance,
            caller_of: None,
            catalogue: RwLock::new(None),
        }
    }

    /// Reads the caller of each request from its context instead of using the
    /// governance's one caller.
    pub fn with_caller_of(mut self, caller_of: CallerOf) -> Self {
        self.caller_of = Some(caller_of);
        self
    }

    /// The caller of the request `context` belongs to.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Option<Caller> {
        match &self.caller_of {
            Some(caller_of) => caller_of(context),
            None => Some(self.governance.caller().clone()),
        }
    }

    /// The wrapped handler.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Lists every page of the wrapped handler's tools and builds the catalogue;
    /// also returns the shortest `ttlMs` a page gave.
    async fn relist(
        &self,
        request: Option<PaginatedRequestParams>,
        context: &RequestContext<RoleServer>,
    ) -> Result<(Arc<Catalogue>, Option<u64>), McpError> {
        let meta = request.and_then(|r| r.meta);
        let mut tools: Vec<Value> = Vec::new();
        let mut ttl: Option<u64> = None;
        let mut cursor = None;
        for _ in 0..MAX_PAGES {
            let mut page = PaginatedRequestParams::default().with_cursor(cursor);
            page.meta = meta.clone();
            let listed = self.inner.list_tools(Some(page), context.clone()).await?;
            ttl = match (ttl, listed.ttl_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            for tool in &listed.tools {
                tools.push(serde_json::to_value(tool).map_err(internal)?);
            }
            cursor = listed.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        let catalogue = Arc::new(self.governance.catalogue(&tools));
        *self.catalogue.write().unwrap_or_else(|e| e.into_inner()) = Some(catalogue.clone());
        Ok((catalogue, ttl))
    }

    /// The catalogue of the last listing, listing first when there was none.
    async fn current(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Arc<Catalogue>, McpError> {
        let last = self
            .catalogue
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match last {
            Some(catalogue) => Ok(catalogue),
            None => Ok(self.relist(None, context).await?.0),
        }
    }

    /// `tools/list`, governed: one page holding every tool this caller sees.
    pub(crate) async fn governed_list(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let (catalogue, ttl) = self.relist(request, &context).await?;
        let caller = self.caller(&context);
        let tools = self
            .governance
            .listing(&catalogue, caller.as_ref())
            .into_iter()
            .map(serde_json::from_value::<Tool>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(internal)?;
        // As the gateway says: never longer than the server said, and the
        // caller's own (the rules decide what each caller sees).
        Ok(ListToolsResult::with_all_items(tools)
            .with_ttl_ms(ttl.map_or(LIST_TTL_MS, |t| t.min(LIST_TTL_MS)))
            .with_cache_scope(CacheScope::Private))
    }

    /// `tools/call`, governed: answered here, or sent on as the stages left it.
    pub(crate) async fn governed_call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let catalogue = self.current(&context).await?;
        let params = serde_json::to_value(&request).map_err(internal)?;
        let caller = self.caller(&context);
        let verdict = self
            .governance
            .check(&catalogue, &self.session, caller.as_ref(), params);
        let (forward, caller) = match (verdict.outcome, &caller) {
            (Outcome::Forward(forward), Some(caller)) => (forward, caller),
            (Outcome::Answer { answer, .. }, _) => return answered(answer),
            // The pipeline forwards nothing without a caller; should it, nothing runs.
            (Outcome::Forward(_), None) => return Err(internal_error()),
        };
        if let Some(refused) = self.governance.approval(caller, &forward).await {
            return answered(Answer::ToolError(refused.to_owned()));
        }
        let mut upstream = request;
        upstream.name = forward.tool.upstream_name.clone().into();
        if forward.rewritten {
            upstream.arguments = Some(forward.arguments);
        }
        self.inner.call_tool(upstream, context).await
    }

    /// The declaration published under `name` from the last listing (no request
    /// context here: for the governance's caller, and only when no per-request
    /// caller is read, since then it would not be known who is asking).
    pub(crate) fn published(&self, name: &str) -> Option<Tool> {
        if self.caller_of.is_some() {
            return None;
        }
        let catalogue = self.catalogue.read().unwrap_or_else(|e| e.into_inner());
        let caller = Some(self.governance.caller());
        let listed = self.governance.listing(catalogue.as_ref()?, caller);
        let tool = listed.into_iter().find(|t| t["name"] == name)?;
        serde_json::from_value(tool).ok()
    }
}

/// A pipeline answer as rmcp sends it: a tool error, or a JSON-RPC error.
fn answered(answer: Answer) -> Result<CallToolResponse, McpError> {
    match answer {
        Answer::ToolError(text) => Ok(CallToolResult::error(vec![ContentBlock::text(text)]).into()),
        Answer::RpcError { code, message } => Err(McpError::new(
            ErrorCode(i32::try_from(code).unwrap_or(ErrorCode::INTERNAL_ERROR.0)),
            message,
            None,
        )),
    }
}

/// A declaration or call that would not convert: nothing of it is shown.
fn internal(e: serde_json::Error) -> McpError {
    tracing::warn!("a tool declaration or call did not convert: {e}");
    internal_error()
}

fn internal_error() -> McpError {
    McpError::internal_error(warden_core::answer::INTERNAL_ERROR, None)
}
