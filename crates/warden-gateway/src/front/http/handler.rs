//! The Streamable HTTP front: one endpoint, `/mcp`, for POST, GET and DELETE.
//!
//! A connection over `gateway.max_connections` or `max_connections_per_client`
//! never becomes a request: it is answered 503 at accept ([`connection_refusal`]).
//!
//! Every request is checked in this order: Host and Origin (403, DNS rebinding),
//! credentials (401 with `WWW-Authenticate`, G1), HTTP method, session
//! (`Mcp-Session-Id`: missing 400, unknown 404, another caller's 404), protocol
//! version header (400), content type (415), Accept (406), body size (413), JSON.
//! An initialize beyond the session caps gets 503 (the gateway's) or 429 with
//! `Retry-After` (the caller's, `gateway.max_sessions_per_caller`).
//!
//! Sessions and their streams are in [`super::session`], response bodies in
//! [`super::sse`]; every refusal is built here, from the typed reasons they give.
//! The answer to a POSTed request, and what belongs to it (its progress, the
//! requests and log messages an upstream sends while it runs), go to that POST's
//! stream; everything else goes to the GET stream. A POST whose first message is its answer is answered as plain JSON; one
//! that has something to say first becomes an SSE stream. Every SSE event carries
//! an id (`stream-seq`); a client that lost a stream resumes it with a GET and
//! `Last-Event-ID`. A client that goes away mid-call and does not come back within
//! a few seconds gets its call cancelled upstream.

use super::conn::OverCap;
use super::session::{
    Attached, Event, Full, HttpSession, SessionTable, StreamRefused, Watch, MAX_SESSIONS,
    SINK_CAPACITY,
};
use super::sse::{frame, priming, OutBody, SseBody};
use crate::front::auth::{Auth, Refused};
use crate::gateway::{rev2026, Gateway};
use crate::jsonrpc::{self, Kind};
use crate::texts as answer;
use crate::upstream::SUPPORTED_VERSIONS;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The endpoint's path.
pub const ENDPOINT: &str = "/mcp";
const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
/// How long a POST waits for its first message before answering with a stream.
const JSON_WAIT: Duration = Duration::from_secs(2);

/// The HTTP front: settings, credentials, and its sessions.
pub struct Front {
    pub(super) gateway: Arc<Gateway>,
    auth: Auth,
    pub(super) sessions: SessionTable,
    hosts: Vec<String>,
    any_host: bool,
    origins: Vec<String>,
    max_body: usize,
}

type Reply = Response<OutBody>;

fn reply(status: StatusCode, body: Option<Bytes>, content_type: Option<&'static str>) -> Reply {
    let mut r = Response::new(OutBody::Full(body));
    *r.status_mut() = status;
    if let Some(ct) = content_type {
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    }
    r
}

/// A JSON-RPC message as an HTTP reply.
fn message_reply(status: StatusCode, msg: &Value) -> Reply {
    reply(
        status,
        Some(Bytes::from(serde_json::to_vec(msg).unwrap_or_default())),
        Some("application/json"),
    )
}

/// An HTTP error with a JSON-RPC error body naming what is wrong.
fn refuse(status: StatusCode, code: i64, message: &str) -> Reply {
    message_reply(status, &jsonrpc::error(Value::Null, code, message))
}

/// The 503 for a connection over a cap, as the bytes of a whole HTTP/1.1
/// response: it is written straight to the socket at accept, before hyper reads
/// anything, and the connection is closed after it.
pub(super) fn connection_refusal(over: OverCap) -> Vec<u8> {
    let text = match over {
        OverCap::Total => answer::HTTP_TOO_MANY_CONNECTIONS,
        OverCap::PerClient => answer::HTTP_TOO_MANY_CLIENT_CONNECTIONS,
    };
    let r = refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        jsonrpc::INTERNAL_ERROR,
        text,
    );
    let body = match r.body() {
        OutBody::Full(Some(b)) => b.clone(),
        _ => Bytes::new(),
    };
    let status = r.status();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_str(),
        status.canonical_reason().unwrap_or_default()
    )
    .into_bytes();
    for (name, value) in r.headers() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(
        format!(
            "content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(&body);
    out
}

fn json_reply(data: Bytes) -> Reply {
    reply(StatusCode::OK, Some(data), Some("application/json"))
}

fn sse_reply(body: SseBody) -> Reply {
    let mut r = Response::new(OutBody::Sse(body));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether an Accept header lists a media type (or a wildcard covering it).
fn accepts(headers: &HeaderMap, media: &str) -> bool {
    let (kind, _) = media.split_once('/').unwrap_or((media, ""));
    headers.get_all(header::ACCEPT).iter().any(|v| {
        v.to_str().unwrap_or_default().split(',').any(|part| {
            let t = part.split(';').next().unwrap_or_default().trim();
            t.eq_ignore_ascii_case(media)
                || t == "*/*"
                || t.eq_ignore_ascii_case(&format!("{kind}/*"))
        })
    })
}

fn is_loopback_name(host: &str) -> bool {
    let h = host.to_ascii_lowercase();
    h == "localhost" || h == "127.0.0.1" || h == "[::1]" || h == "::1"
}

/// The host part of `host[:port]` (brackets kept for IPv6).
fn host_part(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.find(']').map_or(authority, |i| &authority[..=i]);
    }
    authority.split(':').next().unwrap_or(authority)
}

impl Front {
    /// Builds the front for a gateway; fails when credentials cannot be loaded.
    pub fn new(gateway: Arc<Gateway>, listen: &str) -> Result<Arc<Front>, String> {
        let config = &gateway.config;
        let auth = Auth::from_config(config)?;
        if let Some(anon) = auth.anonymous() {
            tracing::warn!(caller = %anon.name, "AUTHENTICATION IS OFF for requests without credentials: they act as '{}' (gateway.anonymous_caller); use this for development and test suites only", anon.name);
        }
        let mut hosts: Vec<String> = config
            .gateway
            .allowed_hosts
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect();
        let listen_host = host_part(listen).to_ascii_lowercase();
        let any_host = hosts.iter().any(|h| h == "*");
        if !listen_host.is_empty() && !matches!(listen_host.as_str(), "0.0.0.0" | "[::]") {
            hosts.push(listen_host);
        }
        let idle = crate::config::parse_duration(&config.gateway.session_idle)?;
        Ok(Arc::new(Front {
            auth,
            sessions: SessionTable::new(
                gateway.clone(),
                idle,
                config.gateway.max_sessions_per_caller.max(1),
            ),
            hosts,
            any_host,
            origins: config
                .gateway
                .allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            max_body: config.gateway.max_message_bytes,
            gateway,
        }))
    }

    /// DNS rebinding protection: the Host header and any Origin must be allowed.
    fn check_origin(&self, headers: &HeaderMap) -> Result<(), Box<Reply>> {
        let forbidden = |m: &str| {
            Err(Box::new(refuse(
                StatusCode::FORBIDDEN,
                jsonrpc::INVALID_REQUEST,
                m,
            )))
        };
        if !self.any_host {
            let host = header_str(headers, header::HOST).unwrap_or_default();
            let name = host_part(host).to_ascii_lowercase();
            let ok = is_loopback_name(&name)
                || self
                    .hosts
                    .iter()
                    .any(|h| *h == name || *h == host.to_ascii_lowercase());
            if !ok {
                return forbidden(answer::HTTP_BAD_HOST);
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default().to_ascii_lowercase();
            let authority = origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"));
            let loopback = authority.is_some_and(|a| is_loopback_name(host_part(a)));
            if !loopback && !self.origins.contains(&origin) {
                return forbidden(answer::HTTP_BAD_ORIGIN);
            }
        }
        Ok(())
    }

    pub(super) async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Reply {
        let metrics = self.gateway.metrics.clone();
        let reply = self.answer(req).await;
        let status = reply.status();
        if status.is_client_error() || status.is_server_error() {
            metrics.http_refused(status.as_u16());
        }
        reply
    }

    async fn answer(self: Arc<Self>, req: Request<Incoming>) -> Reply {
        if req.uri().path() != ENDPOINT {
            return refuse(
                StatusCode::NOT_FOUND,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_NOT_ENDPOINT,
            );
        }
        if let Err(r) = self.check_origin(req.headers()) {
            return *r;
        }
        let caller = match self.auth.identify(
            req.headers()
                .get(header::AUTHORIZATION)
                .map(HeaderValue::as_bytes),
            &self.gateway.config,
        ) {
            Ok(c) => c,
            Err(why) => return unauthorized(why),
        };
        let stateless = header_str(req.headers(), VERSION_HEADER) == Some(rev2026::VERSION);
        match *req.method() {
            Method::POST => self.post(req, caller).await,
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
            Method::GET => self.get(req, &caller.name),
            Method::DELETE => self.delete(req, &caller.name),
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

    /// The session a request names, checked against its caller and version header.
    fn session_of(
        &self,
        headers: &HeaderMap,
        caller: &str,
    ) -> Result<Arc<HttpSession>, Box<Reply>> {
        let Some(id) = header_str(headers, SESSION_HEADER) else {
            return Err(Box::new(refuse(
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_NO_SESSION,
            )));
        };
        let Some(session) = self.sessions.find(id, caller) else {
            return Err(Box::new(refuse(
                StatusCode::NOT_FOUND,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_UNKNOWN_SESSION,
            )));
        };
        check_version(headers)?;
        session.touch();
        Ok(session)
    }

    async fn post(self: Arc<Self>, req: Request<Incoming>, caller: warden_core::Caller) -> Reply {
        let (parts, incoming) = req.into_parts();
        let headers = parts.headers;
        let json_body = header_str(&headers, header::CONTENT_TYPE).is_some_and(|ct| {
            ct.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        });
        if !json_body {
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_CONTENT_TYPE,
            );
        }
        if !(accepts(&headers, "application/json") && accepts(&headers, "text/event-stream")) {
            return refuse(
                StatusCode::NOT_ACCEPTABLE,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_ACCEPT_POST,
            );
        }
        let too_large = || {
            refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                jsonrpc::INVALID_REQUEST,
                &answer::http_too_large(self.max_body),
            )
        };
        if incoming
            .size_hint()
            .exact()
            .is_some_and(|n| n > self.max_body as u64)
        {
            return too_large();
        }
        let body = match http_body_util::Limited::new(incoming, self.max_body)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
            Err(e) => {
                tracing::debug!("reading a request body failed: {e}");
                return refuse(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::INVALID_REQUEST,
                    &answer::invalid_request("the request body could not be read"),
                );
            }
        };
        let msg: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::PARSE_ERROR,
                    &answer::parse_error(&e.to_string()),
                )
            }
        };
        if msg.is_array() {
            return refuse(
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_REQUEST,
                &answer::invalid_request(answer::HTTP_BATCH),
            );
        }
        if let Some(version) = modern_version(&msg) {
            return self.stateless(&headers, version, msg, caller).await;
        }
        if header_str(&headers, VERSION_HEADER) == Some(rev2026::VERSION)
            && header_str(&headers, SESSION_HEADER).is_none()
            && msg.get("id").is_none()
        {
            // A 2026-07-28 notification: there is no session it could be about (a
            // request is cancelled by closing its stream), so it is taken and dropped.
            tracing::debug!("a 2026-07-28 notification over HTTP was accepted and ignored");
            return reply(StatusCode::ACCEPTED, None, None);
        }
        let (session, new) = match &msg {
            Value::Object(o) if o.get("method").and_then(Value::as_str) == Some("initialize") => {
                let name = caller.name.clone();
                match self.sessions.open(caller) {
                    Ok(session) => (session, true),
                    Err(Full::Gateway) => {
                        tracing::warn!(
                            "{MAX_SESSIONS} HTTP sessions are open; a new one is refused"
                        );
                        return refuse(
                            StatusCode::SERVICE_UNAVAILABLE,
                            jsonrpc::INTERNAL_ERROR,
                            answer::HTTP_TOO_MANY_SESSIONS,
                        );
                    }
                    Err(Full::Caller { open, retry_after }) => {
                        tracing::info!(caller = %name, "the caller holds {open} HTTP sessions (gateway.max_sessions_per_caller); a new one is refused");
                        return too_many_sessions(open, retry_after);
                    }
                }
            }
            _ => match self.session_of(&headers, &caller.name) {
                Ok(s) => (s, false),
                Err(r) => return *r,
            },
        };
        let mut r = match jsonrpc::classify(&msg) {
            Kind::Request { id, .. } => {
                let id = id.clone();
                self.request(&session, id, msg).await
            }
            Kind::Invalid(why) => {
                let id = jsonrpc::usable_id(&msg);
                let body =
                    jsonrpc::error(id, jsonrpc::INVALID_REQUEST, &answer::invalid_request(why));
                message_reply(StatusCode::BAD_REQUEST, &body)
            }
            _ => {
                if let Some(w) = self.gateway.handle(&session.client, msg).await {
                    tokio::spawn(w);
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

    /// A 2026-07-28 request: checked against its headers, then served on a
    /// session of its own that ends with it (no Mcp-Session-Id, no GET stream).
    async fn stateless(
        &self,
        headers: &HeaderMap,
        version: String,
        msg: Value,
        caller: warden_core::Caller,
    ) -> Reply {
        let method = msg
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mismatch = |header: &str| {
            let body = jsonrpc::error(
                msg.get("id").cloned().unwrap_or(Value::Null),
                rev2026::HEADER_MISMATCH,
                &answer::header_mismatch(header),
            );
            message_reply(StatusCode::BAD_REQUEST, &body)
        };
        if header_str(headers, VERSION_HEADER) != Some(version.as_str()) {
            return mismatch("MCP-Protocol-Version");
        }
        if header_str(headers, "mcp-method") != Some(method) {
            return mismatch("Mcp-Method");
        }
        let named = match method {
            "tools/call" | "prompts/get" => msg.pointer("/params/name"),
            "resources/read" => msg.pointer("/params/uri"),
            _ => None,
        };
        if let Some(Value::String(name)) = named {
            if header_str(headers, "mcp-name")
                .and_then(decode_header_value)
                .as_deref()
                != Some(name.as_str())
            {
                return mismatch("Mcp-Name");
            }
        }
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let session = self.sessions.open_stateless(caller);
        self.request(&session, id, msg).await
    }

    async fn request(&self, session: &Arc<HttpSession>, id: Value, msg: Value) -> Reply {
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
        if let Some(w) = self.gateway.handle(&session.client, msg).await {
            tokio::spawn(w);
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
                json_reply(event.data)
            }
            Some(event) => {
                // Closing a 2026-07-28 stream cancels at once: there is no resuming it.
                watch.resumable = !session.stateless;
                let mut pre = VecDeque::new();
                if session.primes() {
                    pre.push_back(priming(stream));
                }
                if event.seq > 0 {
                    pre.push_back(frame(stream, &event));
                } else if pre.is_empty() {
                    pre.push_back(Bytes::from_static(b": waiting for the answer\n\n"));
                }
                sse_reply(SseBody::new(stream, pre, rx, Some(watch), false))
            }
            None => {
                // The router let go of the stream: the client stalled or the session ended.
                watch.armed = false;
                refuse(
                    StatusCode::NOT_FOUND,
                    jsonrpc::INVALID_REQUEST,
                    answer::HTTP_UNKNOWN_SESSION,
                )
            }
        }
    }

    /// GET: the session's stream for server-initiated messages, or the resumption
    /// of any of its streams after `Last-Event-ID`.
    fn get(&self, req: Request<Incoming>, caller: &str) -> Reply {
        let headers = req.headers();
        if !accepts(headers, "text/event-stream") {
            return refuse(
                StatusCode::NOT_ACCEPTABLE,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_ACCEPT_GET,
            );
        }
        let session = match self.session_of(headers, caller) {
            Ok(s) => s,
            Err(r) => return *r,
        };
        let last_event_id = header_str(headers, "last-event-id");
        let (tx, rx) = mpsc::channel(SINK_CAPACITY);
        let Attached {
            stream: n,
            sink_gen,
            replay,
            ended,
        } = match session.attach(last_event_id, tx) {
            Ok(a) => a,
            Err(StreamRefused::GetStreamOpen) => {
                return refuse(
                    StatusCode::CONFLICT,
                    jsonrpc::INVALID_REQUEST,
                    answer::HTTP_STREAM_OPEN,
                )
            }
            Err(_) => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::INVALID_REQUEST,
                    answer::HTTP_BAD_EVENT_ID,
                )
            }
        };
        let mut pre = VecDeque::new();
        if session.primes() && last_event_id.is_none() {
            pre.push_back(priming(n));
        }
        pre.extend(replay.iter().map(|e| frame(n, e)));
        let resumable = n != 0 && !ended;
        let watch = resumable.then(|| Watch {
            session: session.clone(),
            stream: n,
            sink_gen,
            resumable: true,
            armed: true,
        });
        sse_reply(SseBody::new(n, pre, rx, watch, ended))
    }

    /// DELETE: ends the session; its running calls are cancelled.
    fn delete(&self, req: Request<Incoming>, caller: &str) -> Reply {
        let session = match self.session_of(req.headers(), caller) {
            Ok(s) => s,
            Err(r) => return *r,
        };
        self.sessions.end(&session, "the client ended the session");
        reply(StatusCode::OK, None, None)
    }

    /// How many sessions are open (for tests and logs).
    pub fn session_count(&self) -> usize {
        self.sessions.count()
    }
}

fn check_version(headers: &HeaderMap) -> Result<(), Box<Reply>> {
    match headers.get(VERSION_HEADER) {
        None => Ok(()),
        Some(v) => {
            let v = v.to_str().unwrap_or("?");
            if SUPPORTED_VERSIONS.contains(&v) {
                Ok(())
            } else {
                Err(Box::new(refuse(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::INVALID_REQUEST,
                    &answer::http_bad_version(v, &SUPPORTED_VERSIONS[..3]),
                )))
            }
        }
    }
}

/// The protocol version of a 2026-07-28 request (from its `_meta` envelope).
fn modern_version(msg: &Value) -> Option<String> {
    msg.get("id")?;
    msg.get("method")?;
    let v = msg
        .get("params")?
        .get("_meta")?
        .get(rev2026::PROTOCOL_VERSION_KEY)?;
    Some(v.as_str().unwrap_or_default().to_owned())
}

/// An `Mcp-Name` header value: verbatim, or `=?base64?…?=` for names HTTP cannot carry.
fn decode_header_value(v: &str) -> Option<String> {
    use base64::Engine;
    match v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        None => Some(v.to_owned()),
        Some(payload) => base64::engine::general_purpose::STANDARD
            .decode(payload)
            .ok()
            .and_then(|b| String::from_utf8(b).ok()),
    }
}

/// 429 for a caller at `gateway.max_sessions_per_caller`; Retry-After says when its
/// longest-unused session would idle out (ending one with DELETE is sooner).
fn too_many_sessions(open: usize, retry_after: Duration) -> Reply {
    let mut r = refuse(
        StatusCode::TOO_MANY_REQUESTS,
        jsonrpc::INVALID_REQUEST,
        &answer::http_caller_sessions(open),
    );
    let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    r
}

fn unauthorized(why: Refused) -> Reply {
    let mut r = refuse(
        StatusCode::UNAUTHORIZED,
        jsonrpc::INVALID_REQUEST,
        why.text(),
    );
    if let Ok(v) = HeaderValue::from_str(&why.challenge()) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_and_hosts() {
        let mut h = HeaderMap::new();
        h.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream;q=0.9"),
        );
        assert!(accepts(&h, "application/json") && accepts(&h, "text/event-stream"));
        h.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        assert!(!accepts(&h, "text/event-stream"));
        h.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert!(accepts(&h, "text/event-stream"));
        assert_eq!(host_part("[::1]:8931"), "[::1]");
        assert_eq!(host_part("localhost:8931"), "localhost");
        assert!(is_loopback_name("LOCALHOST"));
        assert!(!is_loopback_name("evil.example"));
    }

    #[test]
    fn a_connection_over_a_cap_gets_a_whole_503() {
        let raw = String::from_utf8(connection_refusal(OverCap::Total)).unwrap();
        let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Service unavailable: too many open connections; retry later."}}"#;
        assert_eq!(
            raw,
            format!("HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
        );
        let raw = String::from_utf8(connection_refusal(OverCap::PerClient)).unwrap();
        assert!(raw.ends_with(r#""message":"Service unavailable: too many open connections from this address; close idle ones or retry later."}}"#), "{raw}");
    }

    #[test]
    fn a_caller_at_its_session_cap_hears_when_to_retry() {
        let r = too_many_sessions(2, Duration::from_millis(1500));
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        let r = too_many_sessions(2, Duration::ZERO);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }
}
