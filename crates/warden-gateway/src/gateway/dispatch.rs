//! Each message a client sends, dispatched by method: the methods the gateway
//! governs answered here or by [`super::call`], the request's revision made at
//! the edge ([`Revision`]) and its results stamped on the way out, and
//! everything else relayed to the upstream that serves it.

use super::call::{self, Begun};
use super::client_session::{self, ClientSession, Outgoing};
use super::rev2026::input;
use super::rev2026::{Binding, Revision};
use super::settle::Body;
use super::upstream_set::negotiated_version;
use super::{listing, relay, Gateway, Waiting};
use crate::jsonrpc::{self, Kind};
use crate::logged::logged;
use crate::otel::{self, Span, SpanContext};
use crate::texts;
use serde_json::{json, Value};
use std::sync::Arc;

impl Gateway {
    /// Handles one message from a client. What must keep arrival order (the pipeline,
    /// queueing upstream, the gateway's own answers) happens before this returns;
    /// waiting for an upstream's answer is the returned future, for the front to run.
    pub async fn handle(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        msg: Value,
    ) -> Option<Waiting> {
        self.handle_traced(session, msg, None).await
    }

    /// [`Gateway::handle`] for a message that came with a `traceparent` HTTP header:
    /// a request continues that trace unless its `_meta` names a parent itself.
    pub async fn handle_traced(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        mut msg: Value,
        traceparent: Option<&str>,
    ) -> Option<Waiting> {
        match jsonrpc::classify(&msg) {
            Kind::Request { id, method } => {
                let (id, method) = (id.clone(), method.to_owned());
                // Moved out, not copied: the arguments may be large.
                let mut params = msg.get_mut("params").map(Value::take);
                // The client's revision, made here at the edge: its 2026-07-28
                // envelope taken off, its result stamped on the way out.
                let revision = match Revision::take(&mut params) {
                    Ok(r) => r,
                    Err(error) => {
                        let body =
                            self.calls
                                .envelope_refused(session, &method, params.as_ref(), error);
                        respond(session, id, body.await, (&Revision::older(), &method)).await;
                        return None;
                    }
                };
                let span = if self.tracer.is_on() {
                    self.request_span(session, &id, &method, params.as_ref(), traceparent)
                } else {
                    None
                };
                let begun = self
                    .request(
                        session,
                        &id,
                        &method,
                        params,
                        revision.clone(),
                        span.as_ref(),
                    )
                    .await;
                match begun {
                    Begun::Done(body) => {
                        end_request_span(span, body.as_ref());
                        respond(session, id, body, (&revision, &method)).await;
                        None
                    }
                    Begun::Then(answering) => {
                        let session = session.clone();
                        Some(Box::pin(async move {
                            let body = answering.await;
                            end_request_span(span, body.as_ref());
                            respond(&session, id, body, (&revision, &method)).await;
                        }))
                    }
                }
            }
            Kind::Notification { method } => {
                let method = method.to_owned();
                self.notification(session, &method, msg).await;
                None
            }
            Kind::Response { id } => {
                let key = jsonrpc::id_key(id);
                let Err(msg) = session.answer_own(&key, msg) else {
                    return None;
                };
                let target = client_session::lock(&session.server_requests).remove(&key);
                match target.and_then(|(conn, their_id)| Some((conn.upgrade()?, their_id))) {
                    Some((conn, their_id)) => {
                        let mut msg = msg;
                        msg["id"] = their_id;
                        conn.send(msg).await;
                    }
                    None => {
                        tracing::debug!(id = %logged(&key), "a client response to no pending request was ignored")
                    }
                }
                None
            }
            Kind::Invalid(why) => {
                let id = jsonrpc::usable_id(&msg);
                let text = texts::invalid_request(why);
                session
                    .send_raw(jsonrpc::error(id, jsonrpc::INVALID_REQUEST, &text))
                    .await;
                None
            }
        }
    }

    /// The span of one MCP request: under the client's context (`_meta.traceparent`,
    /// else the HTTP header), else a new trace.
    pub(super) fn request_span(
        &self,
        session: &ClientSession,
        id: &Value,
        method: &str,
        params: Option<&Value>,
        header: Option<&str>,
    ) -> Option<Span> {
        let parent = otel::traceparent_in(params)
            .and_then(SpanContext::parse)
            .or_else(|| header.and_then(SpanContext::parse));
        let target = match method {
            "tools/call" | "prompts/get" => params.and_then(|p| p.get("name")),
            "resources/read" => params.and_then(|p| p.get("uri")),
            _ => None,
        }
        .and_then(Value::as_str);
        let name = || match target {
            Some(t) => format!("{method} {}", otel::bounded(t)),
            None => otel::bounded(method),
        };
        let mut span = self.tracer.root(name, otel::Kind::Server, parent)?;
        span.set("mcp.method.name", otel::bounded(method));
        span.set("jsonrpc.request.id", otel::bounded(&jsonrpc::id_key(id)));
        if let Some(c) = &session.caller() {
            span.set("warden.caller", otel::bounded(&c.name));
        }
        Some(span)
    }

    /// Dispatches a request by method.
    pub(super) async fn request(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        id: &Value,
        method: &str,
        params: Option<Value>,
        revision: Revision,
        span: Option<&Span>,
    ) -> Begun {
        let err = |code: i64, message: &str| {
            Begun::Done(Some(Err(json!({"code": code, "message": message}))))
        };
        // What only the 2026-07-28 revision has (rev2026/requests.rs).
        if let Some(e) = revision.envelope() {
            let asked = (id, method, params.as_ref());
            if let Some(begun) = self.request_2026(session, e, asked).await {
                return begun;
            }
        }
        match method {
            "initialize" => {
                let caps = params
                    .as_ref()
                    .and_then(|p| p.get("capabilities"))
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                session.initialized(caps, negotiated_version(params.as_ref()));
                let mut result = self.initialize(params.as_ref()).await;
                if session.server().is_some() {
                    match self.calls.server_instructions(session) {
                        Some(i) => result["instructions"] = Value::String(i),
                        None => {
                            if let Some(r) = result.as_object_mut() {
                                r.shift_remove("instructions");
                            }
                        }
                    }
                }
                Begun::Done(Some(Ok(result)))
            }
            "ping" => Begun::Done(Some(Ok(json!({})))),
            "tools/list" => match self.list_tools_raw(session, id, &revision).await {
                // Answered already, as bytes.
                Ok(()) => Begun::Done(None),
                Err(message) => err(jsonrpc::INTERNAL_ERROR, &message),
            },
            "tools/call" => {
                self.connect(None).await;
                let params = params.unwrap_or(Value::Null);
                self.calls
                    .begin(session, Some(id), params, revision, span)
                    .await
            }
            "logging/setLevel" if !revision.is_2026() => {
                self.connect(None).await;
                match self.set_log_level(session, params.as_ref()).await {
                    Some(done) => Begun::Done(Some(done)),
                    None => err(jsonrpc::METHOD_NOT_FOUND, &texts::method_not_found(method)),
                }
            }
            _ => {
                self.relay_other(session, id, method, params, revision, span)
                    .await
            }
        }
    }

    /// A request the gateway does not govern itself: a list merged across
    /// upstreams, or relayed to the upstream serving it ([`Gateway::forward`]).
    async fn relay_other(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        id: &Value,
        method: &str,
        params: Option<Value>,
        revision: Revision,
        span: Option<&Span>,
    ) -> Begun {
        let err = |code: i64, message: &str| {
            Begun::Done(Some(Err(json!({"code": code, "message": message}))))
        };
        self.connect(None).await;
        if let Some((field, ups)) = self.upstreams.merging(method) {
            let (upstreams, method) = (self.upstreams.clone(), method.to_owned());
            let trace = span.map(Span::parent);
            return Begun::Then(Box::pin(async move {
                Some(
                    upstreams
                        .merged_list(&method, field, ups, trace.as_ref())
                        .await,
                )
            }));
        }
        let Some(up) = self.upstreams.serving(method, params.as_ref()) else {
            return err(jsonrpc::METHOD_NOT_FOUND, &texts::method_not_found(method));
        };
        if let Some(done) = revision
            .removed_upstream(&up, method, params.as_ref())
            .await
        {
            return Begun::Done(Some(done));
        }
        let params = params.unwrap_or_else(|| json!({}));
        self.forward(session, (id, method, params), up, revision, span)
            .await
    }

    /// Sends a request on to `up`, the upstream serving it: a 2026-07-28
    /// client's state reopened, the upstream's span begun; its answer is
    /// awaited in [`Gateway::forwarded`].
    async fn forward(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        (id, method, mut params): (&Value, &str, Value),
        up: Arc<crate::upstream::Upstream>,
        revision: Revision,
        span: Option<&Span>,
    ) -> Begun {
        let call = jsonrpc::id_key(id);
        // A 2026-07-28 client's state is bound to the request as it sent it.
        let binding = revision
            .is_2026()
            .then(|| Binding::of_request(session.caller().as_deref(), method, &params));
        let mut sealed = None;
        if let Some(b) = &binding {
            match revision.open_state(self.calls.state_key(), b) {
                Ok(s) => sealed = s,
                Err(error) => return Begun::Done(Some(Err(error))),
            }
        }
        let stateless = revision.speaks_2026_to(&up);
        revision.for_upstream(&up, &mut params, sealed.as_ref());
        let capabilities = revision.capabilities(session);
        // The upstream round trip's span; the upstream continues the trace
        // under it (`_meta`, and the header for an HTTP upstream).
        let mut round_trip = span.map(|s| round_trip_span(&s.parent(), method, &up.name));
        if let Some(s) = &round_trip {
            otel::set_traceparent(&mut params, &s.context());
        }
        let kept = revision.bridges(&up).then(|| params.clone());
        // S8: guards on results look at a resource's contents and a prompt too.
        let read = call::Read::of(method, &params, &call, &revision);
        let from = relay::FromClient {
            older: !revision.is_2026(),
            log_level: None,
            capabilities: capabilities.as_ref(),
        };
        let begun = relay::begin_forward(&up, session, call, method, params, from);
        match begun.await {
            Ok(pending) => {
                let rounds = stateless.then_some((kept, capabilities, binding));
                let answering = self.forwarded(session, (up, pending), rounds, read, round_trip);
                Begun::Then(answering)
            }
            Err(body) => {
                if let Some(s) = &mut round_trip {
                    s.fail("not sent to the upstream");
                }
                Begun::Done(body)
            }
        }
    }

    /// Waits for a forwarded request's answer: through its input rounds when
    /// its upstream speaks 2026-07-28 (`rounds`: the params kept to send again,
    /// the client's capabilities, the binding), then the guards on what it read.
    fn forwarded(
        self: &Arc<Self>,
        session: &Arc<ClientSession>,
        (up, mut pending): (Arc<crate::upstream::Upstream>, relay::Pending),
        rounds: Option<ForwardRounds>,
        read: Option<call::Read>,
        mut round_trip: Option<Span>,
    ) -> call::Answering {
        let (me, session) = (self.clone(), session.clone());
        let started = std::time::Instant::now();
        Box::pin(async move {
            let mut result = relay::wait(&session, &mut pending).await;
            if let Some((kept, capabilities, binding)) = rounds {
                let rounds = input::Rounds {
                    up: &up,
                    session: &session,
                    sessions: &me.sessions,
                    call: pending.call.clone(),
                    method: &pending.method,
                    params: kept,
                    capabilities,
                    binding: binding.as_ref(),
                    key: me.calls.state_key(),
                    approved: false,
                    timeout: me.calls.approval_timeout(),
                };
                result = rounds.finish(result).await;
            }
            let mut body = relay::forwarded(&pending, result, started, me.upstreams.error_data);
            if let Some(read) = read {
                body = me.calls.govern_read(&session, read, body).await;
            }
            if let (Some(s), Some(Err(_))) = (&mut round_trip, &body) {
                s.fail("answered with a JSON-RPC error");
            }
            body
        })
    }

    /// Answers a `tools/list` request with the listing's bytes (issue 25); at
    /// 2026-07-28 with the shortest lifetime an upstream gave its tools and the
    /// revision's stamp after them.
    async fn list_tools_raw(
        &self,
        session: &ClientSession,
        id: &Value,
        revision: &Revision,
    ) -> Result<(), String> {
        self.connect(None).await;
        let caller = session.caller();
        let found = client_session::lock(&session.found).clone();
        let tools = self
            .listed_bytes(session.server(), caller.as_deref(), &found)
            .await?;
        let mut rest = json!({});
        if revision.is_2026() {
            let ttl = self
                .upstreams
                .list()
                .iter()
                .filter_map(|u| u.tools_ttl())
                .min();
            if let Some(t) = ttl {
                rest["ttlMs"] = json!(t);
            }
            revision.stamp("tools/list", &mut rest);
        }
        let rest = rest.as_object().cloned().unwrap_or_default();
        session
            .send(Outgoing {
                call: Some(jsonrpc::id_key(id)),
                ends_call: true,
                msg: listing::envelope(id.clone()),
                raw: Some(listing::answer(id, &tools, &rest)),
            })
            .await;
        Ok(())
    }

    pub(super) async fn initialize(&self, params: Option<&Value>) -> Value {
        self.connect(params).await;
        let version = negotiated_version(params);
        let (capabilities, instructions) = self.upstreams.offered(true);
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": capabilities,
            "serverInfo": {"name": "mcp-warden", "version": env!("CARGO_PKG_VERSION")},
        });
        if let Some(i) = instructions {
            result["instructions"] = Value::String(i);
        }
        result
    }

    /// A client's notification: a cancellation is the session's to act on,
    /// anything else goes to every upstream.
    pub(super) async fn notification(
        &self,
        session: &Arc<ClientSession>,
        method: &str,
        msg: Value,
    ) {
        match method {
            // The gateway initialised each upstream itself.
            "notifications/initialized" => {}
            "notifications/cancelled" => session.cancelled(&msg),
            _ => self.upstreams.notify_all(&msg).await,
        }
    }
}

/// What a forwarded request to a 2026-07-28 upstream needs for its input
/// rounds: the params as sent (for an older client, who sends them again), the
/// client's capabilities, and what its state is bound to.
type ForwardRounds = (Option<Value>, Option<Value>, Option<Binding>);

/// The span of a request's round trip to the upstream that serves it, under the
/// request's span.
pub(crate) fn round_trip_span(request: &otel::Parent, method: &str, upstream: &str) -> Span {
    let mut s = request.child(otel::bounded(method), otel::Kind::Client);
    s.set("mcp.method.name", otel::bounded(method));
    s.set("warden.upstream", upstream.to_owned());
    s
}

/// Ends a request's span, marked failed when it is answered with a JSON-RPC error.
fn end_request_span(span: Option<Span>, body: Option<&Body>) {
    if let (Some(mut s), Some(Err(e))) = (span, body) {
        if let Some(code) = e.get("code").and_then(Value::as_i64) {
            s.set("rpc.jsonrpc.error_code", code);
        }
        s.fail("answered with a JSON-RPC error");
    }
}

/// Sends a request's answer, stamped by its revision for its method.
async fn respond(
    session: &ClientSession,
    id: Value,
    body: Option<Body>,
    (revision, method): (&Revision, &str),
) {
    let call = jsonrpc::id_key(&id);
    let msg = match body {
        Some(Ok(mut result)) => {
            revision.stamp(method, &mut result);
            jsonrpc::response(id, result)
        }
        Some(Err(error)) => jsonrpc::error_response(id, error),
        None => return,
    };
    session
        .send(Outgoing {
            call: Some(call),
            ends_call: true,
            msg,
            raw: None,
        })
        .await;
}
