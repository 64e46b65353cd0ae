//! The Streamable HTTP front: one endpoint, `/mcp`, for POST, GET and DELETE.
//!
//! A connection over `gateway.max_connections` or `max_connections_per_client`
//! never becomes a request: it is answered 503 at accept ([`super::reply::connection_refusal`]).
//!
//! `/healthz` and `/readyz` are answered first of all, without credentials and
//! whatever the Host header (see [`Front::handle`]).
//!
//! With `[oauth]`, a GET of the protected resource metadata
//! (`/.well-known/oauth-protected-resource`, and its form for the resource's
//! path) is answered without credentials.
//!
//! Every request is checked in this order: Host and Origin (403, DNS rebinding),
//! credentials (401 with `WWW-Authenticate`, G1), the scopes an `[oauth]` token
//! must carry (403 `insufficient_scope`), the caller's request budget (429 with
//! `Retry-After`, `gateway.http_caller_rate`), HTTP method, session
//! (`Mcp-Session-Id`: missing 400, unknown 404, another caller's 404), protocol
//! version header (400), content type (415), Accept (406), body size (413), JSON.
//! An initialize beyond the session caps gets 503 (the gateway's) or 429 with
//! `Retry-After` (the caller's, `gateway.max_sessions_per_caller`), and so does
//! a request whose session id would be taken up here past them (not a DELETE). A
//! `tools/call` of a tool `oauth.tool_scopes` guards, with a token that lacks the
//! scope, gets 403 `insufficient_scope` naming it (step-up). While the gateway
//! drains (SIGTERM), a request or a new GET stream gets 503 ([`super::drain`]).
//! A refusal given before the request's body was read says `Connection: close`
//! (see `Front::handle`).
//! A 2026-07-28 request (its envelope or, without a session, its version header
//! says so) needs no session; its envelope and headers are checked at the edge
//! instead, and its errors carry its id and the revision's status: 400 for what
//! it cannot be served as sent, 404 for a method the gateway does not implement.
//!
//! Sessions and their streams are in [`super::http_session`], response bodies in
//! [`super::sse`]; every refusal is built here, from the typed reasons they give.
//! The answer to a POSTed request, and what belongs to it (its progress, the
//! requests and log messages an upstream sends while it runs), go to that POST's
//! stream; everything else goes to the GET stream. A POST whose first message is its answer is answered as plain JSON; one
//! that has something to say first becomes an SSE stream. Every SSE event carries
//! an id (`stream-seq`); a client that lost a stream resumes it with a GET and
//! `Last-Event-ID`. A client that goes away mid-call and does not come back within
//! a few seconds gets its call cancelled upstream.

mod body;
mod get_stream;
mod stateless;

use super::drain::Drain;
use super::hosts::HostCheck;
use super::http_session::{
    Full, Holder, HttpSession, Missing, SessionTable, StreamRefused, Watch, MAX_SESSIONS,
};
use super::reply::{
    check_version, header_str, health_reply, insufficient_scope, json_reply, message_reply, refuse,
    reply, sse_reply, too_many_requests, too_many_sessions, unauthorized, Reply, VERSION_HEADER,
};
use super::sse::{frame, priming, SseBody};
use super::streams::Event;
use crate::front::auth::{Auth, Identity};
use crate::gateway::quota::RequestBudget;
use crate::gateway::{rev2026, Early, Gateway};
use crate::jsonrpc::{self, Kind};
use crate::texts as answer;
use bytes::Bytes;
use hyper::body::{Body, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, StatusCode};
use serde_json::Value;
use stateless::{carries_envelope, stateless_status};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The endpoint's path.
pub const ENDPOINT: &str = "/mcp";

/// The virtual server a request's path names (V1; `None`: the whole catalogue).
#[derive(Clone, Debug)]
pub(super) struct OnServer(pub Option<String>);
const SESSION_HEADER: &str = "mcp-session-id";
/// How long a POST waits for its first message before answering with a stream.
const JSON_WAIT: Duration = Duration::from_secs(2);

/// Set once a POST's body has been read whole (a request extension).
#[derive(Clone, Default)]
struct BodyRead(Arc<AtomicBool>);

/// The HTTP front: settings, credentials, and its sessions.
pub struct Front {
    pub(super) gateway: Arc<Gateway>,
    auth: Auth,
    pub(super) sessions: SessionTable,
    /// Host and Origin (DNS rebinding).
    hosts: HostCheck,
    max_body: usize,
    /// `gateway.http_body_timeout`: how long a body may take to come whole.
    body_timeout: Duration,
    /// Where the protected resource metadata is served, under `[oauth]`.
    metadata_paths: Vec<String>,
    /// Requests per caller, counted before any work (Q5).
    budget: Option<RequestBudget>,
    /// What is in flight, and whether the front drains (SIGTERM).
    pub(super) drain: Drain,
}

impl Front {
    /// Builds the front for a gateway; fails when credentials cannot be loaded.
    /// `url` is the front's own URL (`http[s]://host:port/mcp`).
    pub fn new(gateway: Arc<Gateway>, listen: &str, url: &str) -> Result<Arc<Front>, String> {
        let config = &gateway.config;
        let auth = Auth::from_config(config, url)?;
        if let Some(rs) = auth.oauth() {
            // Token exchange for upstream credentials happens at this issuer.
            gateway.set_exchanger(rs.clone());
        }
        let metadata_paths = auth
            .oauth()
            .map(|o| crate::front::auth::oauth::metadata_paths(o.resource()).to_vec())
            .unwrap_or_default();
        if let Some(anon) = auth.anonymous() {
            tracing::warn!(caller = %anon.name, "AUTHENTICATION IS OFF for requests without credentials: they act as '{}' (gateway.anonymous_caller); use this for development and test suites only", anon.name);
        }
        let idle = crate::config::parse_duration(&config.gateway.session_idle)?;
        let drain_timeout = crate::config::parse_duration(&config.gateway.drain_timeout)
            .map_err(|m| format!("gateway.drain_timeout: {m}"))?;
        let body_timeout = crate::config::parse_duration(&config.gateway.http_body_timeout)
            .map_err(|m| format!("gateway.http_body_timeout: {m}"))?
            .max(Duration::from_secs(1));
        Ok(Arc::new(Front {
            auth,
            sessions: SessionTable::new(
                gateway.clone(),
                idle,
                config.gateway.max_sessions_per_caller.max(1),
            ),
            hosts: HostCheck::new(&config.gateway, listen),
            max_body: config.gateway.max_message_bytes,
            body_timeout,
            metadata_paths,
            budget: config.limits.http_caller_rate.map(RequestBudget::new),
            drain: Drain::new(drain_timeout),
            gateway,
        }))
    }

    /// The credentials this front accepts (the `[oauth]` resource server among them).
    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    /// DNS rebinding protection: the Host header and any Origin must be allowed.
    fn check_origin(&self, headers: &HeaderMap) -> Result<(), Box<Reply>> {
        match self.hosts.refusal(headers) {
            None => Ok(()),
            Some(text) => Err(Box::new(refuse(
                StatusCode::FORBIDDEN,
                jsonrpc::INVALID_REQUEST,
                text,
            ))),
        }
    }

    /// A request from `client` (its address, as `conn::client_of` gives it).
    pub(super) async fn handle(
        self: Arc<Self>,
        mut req: Request<Incoming>,
        client: IpAddr,
    ) -> Reply {
        // Health probes come from kubelets and load balancers over the pod's own
        // address, with no credentials and a Host header nobody lists: they are
        // answered before the Host/Origin and credential checks, which guard the
        // MCP endpoint. They say only "ok", "ready" or which check failed in
        // generic words, and change nothing.
        if let Some(probe) = self.gateway.probe(req.uri().path()).await {
            return health_reply(req.method(), probe);
        }
        let metrics = self.gateway.metrics.clone();
        // A request refused before its body was read leaves the body on the
        // connection: hyper then closes it unless the rest had already arrived,
        // and without a word a client may send its next request on it (an OAuth
        // client retrying with its token after the 401) and find it closed. The
        // refusal says the connection closes, so the client opens another.
        let unread = !req.body().is_end_stream();
        let read = BodyRead::default();
        req.extensions_mut().insert(read.clone());
        let mut reply = self.answer(req, client).await;
        if unread && !read.0.load(Ordering::Relaxed) {
            reply
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        let status = reply.status();
        if status.is_client_error() || status.is_server_error() {
            metrics.http_refused(status.as_u16());
        }
        reply
    }

    async fn answer(self: Arc<Self>, mut req: Request<Incoming>, client: IpAddr) -> Reply {
        if self.metadata_paths.iter().any(|p| p == req.uri().path()) {
            if let Err(r) = self.check_origin(req.headers()) {
                return *r;
            }
            return self.metadata(req.method());
        }
        let Some(on) = self.on_server(req.uri().path()) else {
            return refuse(
                StatusCode::NOT_FOUND,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_NOT_ENDPOINT,
            );
        };
        req.extensions_mut().insert(on);
        if let Err(r) = self.check_origin(req.headers()) {
            return *r;
        }
        let who = match self
            .auth
            .identify(
                req.headers()
                    .get(header::AUTHORIZATION)
                    .map(HeaderValue::as_bytes),
                &self.gateway.current_config(),
            )
            .await
        {
            Ok(who) => who,
            Err(why) => return unauthorized(why, self.auth.challenge().as_ref()),
        };
        if let Err(r) = self.check_scopes(&who, None, Value::Null) {
            return *r;
        }
        let caller = who.caller.clone();
        let holder = Holder::of(&who, client);
        if let Some(Err(wait_ms)) = self.budget.as_ref().map(|b| b.take(&holder.key())) {
            return too_many_requests(wait_ms);
        }
        let stateless = header_str(req.headers(), VERSION_HEADER) == Some(rev2026::VERSION);
        match *req.method() {
            Method::POST => self.post(req, who, holder).await,
            Method::GET | Method::DELETE if stateless => {
                let mut r = refuse(
                    StatusCode::METHOD_NOT_ALLOWED,
                    jsonrpc::INVALID_REQUEST,
                    answer::HTTP_STATELESS_POST_ONLY,
                );
                r.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("POST"));
                r
            }
            Method::GET => self.get(req, &caller.name, &holder).await,
            Method::DELETE => self.delete(req, &caller.name, &holder).await,
            _ => {
                let mut r = refuse(
                    StatusCode::METHOD_NOT_ALLOWED,
                    jsonrpc::INVALID_REQUEST,
                    answer::HTTP_METHOD,
                );
                r.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
                r
            }
        }
    }

    /// What a path serves: `/mcp` the whole catalogue, `/mcp/<name>` the
    /// virtual server `name` when one is configured (V1); `None`: nothing.
    fn on_server(&self, path: &str) -> Option<OnServer> {
        let rest = path.strip_prefix(ENDPOINT)?;
        if rest.is_empty() {
            return Some(OnServer(None));
        }
        let name = rest.strip_prefix('/')?;
        let config = self.gateway.current_config();
        config.server(name)?;
        Some(OnServer(Some(name.to_owned())))
    }

    /// The tool a `tools/call` runs, by its catalogue name, for its scopes (G7):
    /// on a virtual server the real tool behind a new name or `call_tool` (V2).
    fn scoped_tool(&self, on: &OnServer, msg: &Value) -> Option<String> {
        let params = msg.get("params")?;
        let Some(server) = &on.0 else {
            return params.get("name")?.as_str().map(str::to_owned);
        };
        self.gateway.current_config().server(server)?.called(params)
    }

    /// GET of the protected resource metadata (RFC 9728 §3).
    fn metadata(&self, method: &Method) -> Reply {
        let Some(rs) = self.auth.oauth() else {
            return refuse(
                StatusCode::NOT_FOUND,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_NOT_ENDPOINT,
            );
        };
        if method != Method::GET {
            let mut r = refuse(
                StatusCode::METHOD_NOT_ALLOWED,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_METHOD,
            );
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET"));
            return r;
        }
        message_reply(StatusCode::OK, &rs.metadata())
    }

    /// An `[oauth]` token must carry the required scopes, and for a `tools/call`
    /// those of the tool: otherwise 403 with the scopes to ask for (step-up).
    /// Keys, `[auth]` JWTs and the anonymous caller carry no scopes and pass.
    fn check_scopes(
        &self,
        who: &Identity,
        tool: Option<&str>,
        id: Value,
    ) -> Result<(), Box<Reply>> {
        let (Some(rs), Some(held)) = (self.auth.oauth(), &who.scopes) else {
            return Ok(());
        };
        match rs.missing_scopes(held, tool) {
            None => Ok(()),
            Some(scope) => {
                tracing::info!(caller = %crate::logged::logged(&who.caller.name), scope = %scope, "a token lacks scopes this request needs (403 insufficient_scope)");
                Err(Box::new(insufficient_scope(&rs.challenge(), &scope, id)))
            }
        }
    }

    /// The session a request names, checked against its caller and version
    /// header. `ending`: the request ends it (DELETE), which no cap refuses.
    async fn session_of(
        &self,
        headers: &HeaderMap,
        on: &OnServer,
        caller: &str,
        holder: &Holder,
        ending: bool,
    ) -> Result<Arc<HttpSession>, Box<Reply>> {
        let Some(id) = header_str(headers, SESSION_HEADER) else {
            return Err(Box::new(refuse(
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_NO_SESSION,
            )));
        };
        let session = match self.sessions.find(id, caller, holder, ending).await {
            Ok(session) => session,
            Err(Missing::NotFound) => {
                return Err(Box::new(refuse(
                    StatusCode::NOT_FOUND,
                    jsonrpc::INVALID_REQUEST,
                    answer::HTTP_UNKNOWN_SESSION,
                )))
            }
            Err(Missing::Full(full)) => return Err(Box::new(session_refused(full, holder))),
        };
        // A session is served at the path it was opened on, and only there (V1).
        if session.client.server() != on.0.as_deref() {
            return Err(Box::new(refuse(
                StatusCode::NOT_FOUND,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_UNKNOWN_SESSION,
            )));
        }
        check_version(headers)?;
        session.touch();
        Ok(session)
    }

    async fn post(self: Arc<Self>, req: Request<Incoming>, who: Identity, holder: Holder) -> Reply {
        let (parts, incoming) = req.into_parts();
        let headers = parts.headers;
        let on = parts
            .extensions
            .get::<OnServer>()
            .cloned()
            .unwrap_or(OnServer(None));
        if let Err(r) = body::check_post_headers(&headers) {
            return *r;
        }
        let body = match self.read_body(incoming, &parts.extensions).await {
            Ok(body) => body,
            Err(r) => return *r,
        };
        let msg = match self.message_of(&body) {
            Ok(msg) => msg,
            Err(r) => return *r,
        };
        if msg.get("method").and_then(Value::as_str) == Some("tools/call") {
            if let Some(tool) = self.scoped_tool(&on, &msg) {
                let id = jsonrpc::usable_id(&msg);
                if let Err(r) = self.check_scopes(&who, Some(&tool), id) {
                    // T6: refused before its session is looked up, and audited.
                    let call = Early {
                        label: "http",
                        caller: Some(&who.caller),
                        server: on.0.as_deref(),
                        tool: &tool,
                        arguments: msg.pointer("/params/arguments"),
                    };
                    let why = "insufficient_scope".to_owned();
                    // Boxed: a refusal's audit would set the size of every request's future.
                    Box::pin(self.gateway.refused_at_front(call, why)).await;
                    return *r;
                }
            }
        }
        let sent_as_2026 = header_str(&headers, VERSION_HEADER) == Some(rev2026::VERSION)
            && header_str(&headers, SESSION_HEADER).is_none();
        // A request its header sends as 2026-07-28 is one even when its envelope is
        // missing: it is told what is wrong with it rather than asked for a
        // session it never meant to have. `initialize` without an envelope stays
        // the handshake of the older revisions.
        if carries_envelope(&msg) || sent_as_2026 {
            // Outside a session, as inside one: a message that is no JSON-RPC
            // request (a wrong `jsonrpc`, an id that is null, an object, an array or
            // a boolean) is answered 400 at once, never served as a stream that waits.
            if let Kind::Invalid(why) = jsonrpc::classify(&msg) {
                return invalid_message(&msg, why);
            }
        }
        let stateless_request = carries_envelope(&msg)
            || (sent_as_2026
                && matches!(jsonrpc::classify(&msg),
                    Kind::Request { method, .. } if method != "initialize"));
        if stateless_request {
            let token = (who.token, who.claims);
            return self.stateless(&headers, msg, who.caller, token, &on).await;
        }
        if sent_as_2026 && msg.get("id").is_none() {
            // A 2026-07-28 notification: there is no session it could be about (a
            // request is cancelled by closing its stream), so it is taken and dropped.
            tracing::debug!("a 2026-07-28 notification over HTTP was accepted and ignored");
            return reply(StatusCode::ACCEPTED, None, None);
        }
        self.in_session(&headers, msg, who, &holder, &on).await
    }

    /// A message of a 2025 session: `initialize` opens one (its id goes back in
    /// the header of a 200), anything else needs the session it names.
    async fn in_session(
        &self,
        headers: &HeaderMap,
        msg: Value,
        who: Identity,
        holder: &Holder,
        on: &OnServer,
    ) -> Reply {
        let (caller, token) = (who.caller, (who.token, who.claims));
        let (session, new) = match &msg {
            Value::Object(o) if o.get("method").and_then(Value::as_str) == Some("initialize") => {
                let who = caller.clone();
                match self
                    .sessions
                    .open(caller, holder, o.get("params"), on.0.clone())
                {
                    Ok(session) => {
                        session.client.update_caller(&who, token.0);
                        session.client.set_claims(token.1);
                        (session, true)
                    }
                    Err(full) => return session_refused(full, holder),
                }
            }
            _ => match self
                .session_of(headers, on, &caller.name, holder, false)
                .await
            {
                Ok(s) => {
                    s.client.update_caller(&caller, token.0);
                    s.client.set_claims(token.1);
                    (s, false)
                }
                Err(r) => return *r,
            },
        };
        let mut r = match jsonrpc::classify(&msg) {
            Kind::Request { id, .. } => {
                let id = id.clone();
                self.request(&session, id, msg, header_str(headers, "traceparent"))
                    .await
            }
            Kind::Invalid(why) => invalid_message(&msg, why),
            _ => {
                // Boxed: see `request` below.
                let handled = Box::pin(self.gateway.handle(&session.client, msg));
                if let Some(w) = handled.await {
                    self.drain.spawn(w);
                }
                reply(StatusCode::ACCEPTED, None, None)
            }
        };
        if new {
            if r.status() == StatusCode::OK {
                if let Ok(v) = HeaderValue::from_str(&session.id) {
                    r.headers_mut().insert(SESSION_HEADER, v);
                }
            } else {
                self.sessions.remove(&session.id);
            }
        }
        r
    }

    /// A request on `session`; `traceparent` is the W3C header, continued by the
    /// request's span when traces are on.
    async fn request(
        &self,
        session: &Arc<HttpSession>,
        id: Value,
        msg: Value,
        traceparent: Option<&str>,
    ) -> Reply {
        let (stream, sink_gen, mut rx) = match session.open_stream(&id) {
            Ok(opened) => opened,
            Err(why) => {
                let text = answer::invalid_request(answer::ID_IN_USE);
                debug_assert_eq!(why, StreamRefused::IdInUse);
                return message_reply(
                    StatusCode::BAD_REQUEST,
                    &jsonrpc::error(id, jsonrpc::INVALID_REQUEST, &text),
                );
            }
        };
        let mut watch = Watch {
            session: session.clone(),
            stream,
            sink_gen,
            resumable: false,
            armed: true,
        };
        // Boxed: the gateway's half of a request is most of its state (10.6 of
        // 13.9 KB, `-Zprint-type-sizes`), and the HTTP front's future is moved
        // whole on its way into hyper, once or twice per request; boxed, the
        // front moves 3 KB and the gateway's half stays where it was made.
        let handled = Box::pin(
            self.gateway
                .handle_traced(&session.client, msg, traceparent),
        )
        .await;
        if let Some(w) = handled {
            self.drain.spawn(w);
        }
        // Plain JSON when the answer comes first and soon; a stream otherwise (it
        // carries what comes before the answer, and its heartbeat notices a client
        // that left during a long call).
        let first = match tokio::time::timeout(JSON_WAIT, rx.recv()).await {
            Ok(first) => first,
            // Nothing yet: go on as a stream, with no event to send first.
            Err(_) => Some(Event {
                seq: 0,
                data: Bytes::new(),
                last: false,
            }),
        };
        match first {
            Some(event) if event.last => {
                watch.armed = false;
                let status = if session.stateless {
                    stateless_status(&event.data)
                } else {
                    StatusCode::OK
                };
                json_reply(status, event.data)
            }
            Some(event) => {
                // Closing a 2026-07-28 stream cancels at once: there is no resuming it.
                watch.resumable = !session.stateless;
                let mut pre = VecDeque::new();
                let suffix = session.event_suffix(Some(&id));
                if session.primes() {
                    pre.push_back(priming(stream, &suffix));
                }
                if event.seq > 0 {
                    pre.push_back(frame(stream, &suffix, &event));
                } else if pre.is_empty() {
                    pre.push_back(Bytes::from_static(b": waiting for the answer\n\n"));
                }
                sse_reply(SseBody::new((stream, suffix), pre, rx, Some(watch), false))
            }
            None => {
                // The router let go of the stream: the client stalled or the session ended.
                watch.armed = false;
                // A 2026-07-28 request had no session to name, only its id.
                let id = if session.stateless { id } else { Value::Null };
                message_reply(
                    StatusCode::NOT_FOUND,
                    &jsonrpc::error(id, jsonrpc::INVALID_REQUEST, answer::HTTP_UNKNOWN_SESSION),
                )
            }
        }
    }

    /// DELETE: ends the session; its running calls are cancelled.
    async fn delete(&self, req: Request<Incoming>, caller: &str, holder: &Holder) -> Reply {
        let on = req
            .extensions()
            .get::<OnServer>()
            .cloned()
            .unwrap_or(OnServer(None));
        let session = match self
            .session_of(req.headers(), &on, caller, holder, true)
            .await
        {
            Ok(s) => s,
            Err(r) => return *r,
        };
        self.sessions
            .end(&session, "the client ended the session", true)
            .await;
        reply(StatusCode::OK, None, None)
    }

    /// How many sessions are open (for tests and logs).
    pub fn session_count(&self) -> usize {
        self.sessions.count()
    }
}

/// The answer to a request that would open a session, or take one up from its
/// id, past a cap: 503 when the gateway holds [`MAX_SESSIONS`], 429 with
/// Retry-After when the caller (the anonymous caller: its client) holds
/// `gateway.max_sessions_per_caller`.
fn session_refused(full: Full, holder: &Holder) -> Reply {
    match full {
        Full::Gateway => {
            tracing::warn!("{MAX_SESSIONS} HTTP sessions are open; another one is refused");
            refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                jsonrpc::INTERNAL_ERROR,
                answer::HTTP_TOO_MANY_SESSIONS,
            )
        }
        Full::Caller { open, retry_after } => {
            tracing::info!(caller = %crate::logged::logged(&holder.key()), "the caller holds {open} HTTP sessions (gateway.max_sessions_per_caller); another one is refused");
            too_many_sessions(open, retry_after)
        }
    }
}

/// 400 / -32600 for a message that is no valid JSON-RPC message, with its id
/// when that is usable (else null).
fn invalid_message(msg: &Value, why: &str) -> Reply {
    let id = jsonrpc::usable_id(msg);
    let body = jsonrpc::error(id, jsonrpc::INVALID_REQUEST, &answer::invalid_request(why));
    message_reply(StatusCode::BAD_REQUEST, &body)
}
