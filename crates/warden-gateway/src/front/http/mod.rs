//! The Streamable HTTP front: one endpoint, `/mcp`, for POST, GET and DELETE.
//!
//! Every request is checked in this order: Host and Origin (403, DNS rebinding),
//! credentials (401 with `WWW-Authenticate`, G1), HTTP method, session
//! (`Mcp-Session-Id`: missing 400, unknown 404, another caller's 404), protocol
//! version header (400), content type (415), Accept (406), body size (413), JSON.
//!
//! A session is a [`ClientSession`] of the gateway plus a router that sorts what the
//! gateway sends the client onto streams: the answer to a POSTed request, and what
//! belongs to it (progress for its token, the requests and log messages an upstream
//! sends while it runs), go to that POST's stream; everything else goes to the GET
//! stream. A POST whose first message is its answer is answered as plain JSON; one
//! that has something to say first becomes an SSE stream. Every SSE event carries
//! an id (`stream-seq`); a client that lost a stream resumes it with a GET and
//! `Last-Event-ID`. A client that goes away mid-call and does not come back within
//! a few seconds gets its call cancelled upstream.

use crate::auth::{Auth, Refused};
use crate::gateway::{ClientSession, Gateway};
use crate::jsonrpc::{self, Kind};
use crate::modern;
use crate::upstream::SUPPORTED_VERSIONS;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use warden_core::answer;

/// The endpoint's path.
pub const ENDPOINT: &str = "/mcp";
const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";
/// Events kept per stream for resumption.
const HISTORY: usize = 256;
/// Events queued for a connected stream before its client counts as not reading.
const SINK_CAPACITY: usize = 256;
/// Finished streams kept (for late resumption) per session.
const DONE_KEPT: usize = 32;
/// How long a call whose SSE stream dropped waits for the client to resume it.
const RESUME_GRACE: Duration = Duration::from_secs(5);
/// Open sessions at most; an initialize beyond it gets 503 until some end.
const MAX_SESSIONS: usize = 10_000;
/// What SSE clients are told to wait before reconnecting, in milliseconds.
const RETRY_MS: u64 = 1000;
/// How long a POST waits for its first message before answering with a stream.
const JSON_WAIT: Duration = Duration::from_secs(2);
/// An SSE stream with nothing to say sends a comment this often, so a client that
/// went away is noticed (the write fails) even while a call runs for long.
const HEARTBEAT: Duration = Duration::from_secs(5);

type Sessions = Mutex<HashMap<String, Arc<HttpSession>>>;

/// The HTTP front: settings, credentials, and its sessions.
pub struct Front {
    gateway: Arc<Gateway>,
    auth: Auth,
    sessions: Sessions,
    hosts: Vec<String>,
    any_host: bool,
    origins: Vec<String>,
    max_body: usize,
    idle: Duration,
}

/// One client session over HTTP.
struct HttpSession {
    id: String,
    /// A 2026-07-28 request's own session: nothing can resume its stream.
    stateless: bool,
    caller: String,
    gateway: Arc<Gateway>,
    client: Arc<ClientSession>,
    router: Mutex<Router>,
    last_used: Mutex<Instant>,
}

/// One event on a stream: its sequence number and the JSON-RPC message.
#[derive(Clone)]
struct Event {
    seq: u64,
    data: Bytes,
    /// The answer that ends a POST's stream.
    last: bool,
}

#[derive(Default)]
struct Stream {
    sink: Option<mpsc::Sender<Event>>,
    history: VecDeque<Event>,
    next_seq: u64,
    /// The highest sequence number a connected client was handed.
    delivered: u64,
    /// The POSTed request this stream answers (id key, id); none for the GET stream.
    request: Option<(String, Value)>,
    token: Option<String>,
    done: bool,
}

/// Sorts a session's outgoing messages onto its streams. Stream 0 is the GET stream.
struct Router {
    streams: HashMap<u64, Stream>,
    by_request: HashMap<String, u64>,
    by_token: HashMap<String, u64>,
    next: u64,
    done: VecDeque<u64>,
}

impl Router {
    fn new() -> Self {
        let mut streams = HashMap::new();
        streams.insert(
            0,
            Stream {
                next_seq: 1,
                ..Stream::default()
            },
        );
        Self {
            streams,
            by_request: HashMap::new(),
            by_token: HashMap::new(),
            next: 1,
            done: VecDeque::new(),
        }
    }

    /// Opens the stream a POSTed request is answered on.
    fn open(
        &mut self,
        key: String,
        id: Value,
        token: Option<String>,
        sink: mpsc::Sender<Event>,
    ) -> u64 {
        let n = self.next;
        self.next += 1;
        self.by_request.insert(key.clone(), n);
        if let Some(t) = &token {
            self.by_token.insert(t.clone(), n);
        }
        self.streams.insert(
            n,
            Stream {
                sink: Some(sink),
                next_seq: 1,
                request: Some((key, id)),
                token,
                ..Stream::default()
            },
        );
        n
    }

    /// Which stream a message from the gateway goes to, and whether it ends it.
    fn target(&self, msg: &Value) -> Option<(u64, bool)> {
        match jsonrpc::classify(msg) {
            Kind::Response { id } => {
                let n = *self.by_request.get(&jsonrpc::id_key(id))?;
                Some((n, true))
            }
            Kind::Notification {
                method: "notifications/progress",
            } => {
                let token = msg.pointer("/params/progressToken").map(jsonrpc::id_key);
                Some((
                    token
                        .and_then(|t| self.by_token.get(&t).copied())
                        .unwrap_or(0),
                    false,
                ))
            }
            Kind::Notification { method } if method != "notifications/message" => Some((0, false)),
            // An upstream's request or log message while calls run: the latest call's stream.
            _ => Some((self.by_request.values().max().copied().unwrap_or(0), false)),
        }
    }

    fn push(&mut self, n: u64, data: Bytes, last: bool) {
        let Some(s) = self.streams.get_mut(&n) else {
            return;
        };
        let event = Event {
            seq: s.next_seq,
            data,
            last,
        };
        s.next_seq += 1;
        s.history.push_back(event.clone());
        if s.history.len() > HISTORY {
            s.history.pop_front();
        }
        if let Some(sink) = &s.sink {
            let seq = event.seq;
            match sink.try_send(event) {
                Ok(()) => s.delivered = seq,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    tracing::warn!(stream = n, "an SSE client is not reading its stream; it is disconnected (it may resume with Last-Event-ID)");
                    s.sink = None;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => s.sink = None,
            }
        }
        if last {
            self.finish(n);
        }
    }

    /// Marks a POST stream answered: its request and token no longer route here.
    fn finish(&mut self, n: u64) -> Option<Value> {
        let s = self.streams.get_mut(&n)?;
        if s.done {
            return None;
        }
        s.done = true;
        let (key, id) = s.request.clone()?;
        self.by_request.remove(&key);
        if let Some(t) = &s.token {
            self.by_token.remove(t);
        }
        self.done.push_back(n);
        while self.done.len() > DONE_KEPT {
            if let Some(old) = self.done.pop_front() {
                self.streams.remove(&old);
            }
        }
        Some(id)
    }

    /// The requests still waiting for their answers.
    fn running(&self) -> Vec<Value> {
        self.streams
            .values()
            .filter(|s| !s.done)
            .filter_map(|s| s.request.as_ref().map(|(_, id)| id.clone()))
            .collect()
    }
}

impl HttpSession {
    fn router(&self) -> std::sync::MutexGuard<'_, Router> {
        self.router.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn primes(&self) -> bool {
        // Priming events (an id and no data) came with 2025-11-25.
        self.client.version().is_some_and(|v| v >= "2025-11-25")
    }

    /// Cancels a request upstream as if the client had sent `notifications/cancelled`.
    fn cancel(self: &Arc<Self>, id: Value, reason: &str) {
        let me = self.clone();
        let note = jsonrpc::notification(
            "notifications/cancelled",
            Some(json!({"requestId": id, "reason": reason})),
        );
        tokio::spawn(async move {
            if let Some(w) = me.gateway.handle(&me.client, note).await {
                w.await;
            }
        });
    }
}

/// Moves a session's outgoing messages onto its streams until the session ends.
async fn route(session: Weak<HttpSession>, mut rx: mpsc::Receiver<Value>) {
    while let Some(msg) = rx.recv().await {
        let Some(s) = session.upgrade() else { break };
        // Serialised before the router is locked: the lock is for routing only.
        let data = Bytes::from(serde_json::to_vec(&msg).unwrap_or_default());
        let mut router = s.router();
        match router.target(&msg) {
            Some((n, last)) => router.push(n, data, last),
            None => tracing::debug!("an answer for a request no longer waiting was dropped"),
        }
    }
}

/// Watches a POST's answer: if the client goes away before it, the call is
/// cancelled (at once for a JSON answer, after [`RESUME_GRACE`] for a stream the
/// client may resume).
struct Watch {
    session: Arc<HttpSession>,
    stream: u64,
    resumable: bool,
    armed: bool,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if !self.armed || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        {
            let mut r = self.session.router();
            match r.streams.get_mut(&self.stream) {
                Some(s) if !s.done => s.sink = None,
                _ => return,
            }
        }
        let (session, n) = (self.session.clone(), self.stream);
        let grace = if self.resumable {
            RESUME_GRACE
        } else {
            Duration::ZERO
        };
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let id = {
                let mut r = session.router();
                match r.streams.get(&n) {
                    Some(s) if !s.done && s.sink.is_none() => r.finish(n),
                    _ => None,
                }
            };
            if let Some(id) = id {
                tracing::info!(session = %session.id, "the HTTP client went away mid-call; the call is cancelled");
                session.cancel(id, "the HTTP client disconnected");
            }
        });
    }
}

/// A response body: a whole JSON document, or an SSE stream.
pub enum OutBody {
    Full(Option<Bytes>),
    Sse(SseBody),
}

pub struct SseBody {
    stream: u64,
    pre: VecDeque<Bytes>,
    rx: mpsc::Receiver<Event>,
    watch: Option<Watch>,
    ended: bool,
    heartbeat: Pin<Box<tokio::time::Sleep>>,
}

impl SseBody {
    fn new(
        stream: u64,
        pre: VecDeque<Bytes>,
        rx: mpsc::Receiver<Event>,
        watch: Option<Watch>,
        ended: bool,
    ) -> Self {
        SseBody {
            stream,
            pre,
            rx,
            watch,
            ended,
            heartbeat: Box::pin(tokio::time::sleep(HEARTBEAT)),
        }
    }
}

fn frame(stream: u64, event: &Event) -> Bytes {
    let mut out = Vec::with_capacity(event.data.len() + 32);
    out.extend_from_slice(format!("id: {stream}-{}\ndata: ", event.seq).as_bytes());
    out.extend_from_slice(&event.data);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

fn priming(stream: u64) -> Bytes {
    Bytes::from(format!("id: {stream}-0\nretry: {RETRY_MS}\ndata: \n\n"))
}

impl Body for OutBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            OutBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            OutBody::Sse(s) => {
                if let Some(b) = s.pre.pop_front() {
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                if s.ended {
                    return Poll::Ready(None);
                }
                match s.rx.poll_recv(cx) {
                    Poll::Ready(Some(event)) => {
                        s.heartbeat
                            .as_mut()
                            .reset(tokio::time::Instant::now() + HEARTBEAT);
                        if event.last {
                            s.ended = true;
                            if let Some(w) = s.watch.as_mut() {
                                w.armed = false;
                            }
                        }
                        Poll::Ready(Some(Ok(Frame::data(frame(s.stream, &event)))))
                    }
                    Poll::Ready(None) => {
                        s.ended = true;
                        Poll::Ready(None)
                    }
                    Poll::Pending => match s.heartbeat.as_mut().poll(cx) {
                        Poll::Ready(()) => {
                            s.heartbeat
                                .as_mut()
                                .reset(tokio::time::Instant::now() + HEARTBEAT);
                            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
                                b": keep-alive\n\n",
                            )))))
                        }
                        Poll::Pending => Poll::Pending,
                    },
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, OutBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            OutBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            OutBody::Full(None) => SizeHint::with_exact(0),
            OutBody::Sse(_) => SizeHint::default(),
        }
    }
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
            sessions: Mutex::new(HashMap::new()),
            hosts,
            any_host,
            origins: config
                .gateway
                .allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            max_body: config.gateway.max_message_bytes,
            idle,
            gateway,
        }))
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<HttpSession>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
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

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Reply {
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
        let stateless = header_str(req.headers(), VERSION_HEADER) == Some(modern::VERSION);
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
        let session = self
            .sessions()
            .get(id)
            .filter(|s| s.caller == caller)
            .cloned();
        let Some(session) = session else {
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
        if header_str(&headers, VERSION_HEADER) == Some(modern::VERSION)
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
                if self.sessions().len() >= MAX_SESSIONS {
                    tracing::warn!("{MAX_SESSIONS} HTTP sessions are open; a new one is refused");
                    return refuse(
                        StatusCode::SERVICE_UNAVAILABLE,
                        jsonrpc::INTERNAL_ERROR,
                        answer::HTTP_TOO_MANY_SESSIONS,
                    );
                }
                (self.open_session(caller), true)
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
                self.keep_session(None, &session.id);
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
                modern::HEADER_MISMATCH,
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
        let session = self.new_session(caller, false);
        self.request(&session, id, msg).await
    }

    fn open_session(&self, caller: warden_core::Caller) -> Arc<HttpSession> {
        self.new_session(caller, true)
    }

    /// A session; `addressable` ones are found again by their Mcp-Session-Id.
    fn new_session(&self, caller: warden_core::Caller, addressable: bool) -> Arc<HttpSession> {
        let (tx, rx) = mpsc::channel::<Value>(1024);
        let name = caller.name.clone();
        let id = new_session_id();
        let label = if addressable {
            format!("http:{id}")
        } else {
            "http:stateless".to_owned()
        };
        let client = ClientSession::labelled(Some(caller), tx, label);
        self.gateway.add_session(&client);
        let session = Arc::new(HttpSession {
            id,
            stateless: !addressable,
            caller: name,
            gateway: self.gateway.clone(),
            client,
            router: Mutex::new(Router::new()),
            last_used: Mutex::new(Instant::now()),
        });
        tokio::spawn(route(Arc::downgrade(&session), rx));
        if addressable {
            self.keep_session(Some(session.clone()), &session.id);
            tracing::info!(session = %session.id, caller = %session.caller, "HTTP session opened");
        }
        session
    }

    async fn request(&self, session: &Arc<HttpSession>, id: Value, msg: Value) -> Reply {
        let key = jsonrpc::id_key(&id);
        let token = msg
            .pointer("/params/_meta/progressToken")
            .map(jsonrpc::id_key);
        let (tx, mut rx) = mpsc::channel(SINK_CAPACITY);
        let stream = {
            let mut r = session.router();
            if r.by_request.contains_key(&key) {
                drop(r);
                let body = jsonrpc::error(
                    id,
                    jsonrpc::INVALID_REQUEST,
                    &answer::invalid_request(answer::HTTP_ID_IN_USE),
                );
                return message_reply(StatusCode::BAD_REQUEST, &body);
            }
            r.open(key, id, token, tx)
        };
        let mut watch = Watch {
            session: session.clone(),
            stream,
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
        let resume = header_str(headers, "last-event-id").map(|v| {
            let (s, q) = v.trim().split_once('-').unwrap_or(("", ""));
            (s.parse::<u64>(), q.parse::<u64>())
        });
        let (tx, rx) = mpsc::channel(SINK_CAPACITY);
        let mut pre = VecDeque::new();
        let mut r = session.router();
        let (n, after) = match resume {
            Some((Ok(n), Ok(seq))) if r.streams.contains_key(&n) => (n, seq),
            Some(_) => {
                drop(r);
                return refuse(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::INVALID_REQUEST,
                    answer::HTTP_BAD_EVENT_ID,
                );
            }
            None => {
                let s = r
                    .streams
                    .get(&0)
                    .map(|s| (s.sink.as_ref().is_some_and(|k| !k.is_closed()), s.delivered));
                match s {
                    Some((true, _)) => {
                        drop(r);
                        return refuse(
                            StatusCode::CONFLICT,
                            jsonrpc::INVALID_REQUEST,
                            answer::HTTP_STREAM_OPEN,
                        );
                    }
                    Some((false, delivered)) => (0, delivered),
                    None => (0, 0),
                }
            }
        };
        let primes = session.primes();
        let Some(s) = r.streams.get_mut(&n) else {
            return refuse(
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_BAD_EVENT_ID,
            );
        };
        if primes && resume.is_none() {
            pre.push_back(priming(n));
        }
        let mut ended = false;
        for e in s.history.iter().filter(|e| e.seq > after) {
            pre.push_back(frame(n, e));
            s.delivered = e.seq;
            ended |= e.last;
        }
        ended |= s.done && n != 0;
        if !ended {
            s.sink = Some(tx);
        }
        let resumable = n != 0 && !ended;
        drop(r);
        let watch = resumable.then(|| Watch {
            session: session.clone(),
            stream: n,
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
        self.end(&session, "the client ended the session");
        reply(StatusCode::OK, None, None)
    }

    /// Adds (`Some`) or removes (`None`) a session, keeping the sessions gauge true.
    fn keep_session(&self, session: Option<Arc<HttpSession>>, id: &str) {
        let mut sessions = self.sessions();
        match session {
            Some(s) => sessions.insert(id.to_owned(), s),
            None => sessions.remove(id),
        };
        self.gateway
            .metrics
            .http_sessions
            .store(sessions.len() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    fn end(&self, session: &Arc<HttpSession>, why: &str) {
        self.keep_session(None, &session.id);
        let running = {
            let mut r = session.router();
            let running = r.running();
            for s in r.streams.values_mut() {
                s.sink = None;
                s.done = true;
            }
            r.by_request.clear();
            r.by_token.clear();
            running
        };
        for id in running {
            session.cancel(id, why);
        }
        tracing::info!(session = %session.id, "HTTP session ended: {why}");
    }

    /// Ends sessions unused for longer than `gateway.session_idle`.
    fn sweep(&self) {
        let idle: Vec<Arc<HttpSession>> = self
            .sessions()
            .values()
            .filter(|s| {
                let used = *s.last_used.lock().unwrap_or_else(|e| e.into_inner());
                let r = s.router();
                used.elapsed() > self.idle
                    && r.by_request.is_empty()
                    && r.streams
                        .values()
                        .all(|st| st.sink.as_ref().is_none_or(|k| k.is_closed()))
            })
            .cloned()
            .collect();
        for s in idle {
            self.end(&s, "idle for longer than gateway.session_idle");
        }
    }

    /// How many sessions are open (for tests and logs).
    pub fn session_count(&self) -> usize {
        self.sessions().len()
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
        .get(modern::PROTOCOL_VERSION_KEY)?;
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

/// 128 bits from the OS's random source, as 32 hex characters.
fn new_session_id() -> String {
    let mut bytes = [0u8; 16];
    if let Err(e) = getrandom::fill(&mut bytes) {
        // Without randomness a session id could be guessed; better to stop.
        panic!("the OS random source failed: {e}");
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A bound HTTP front, ready to serve.
pub struct Server {
    listener: TcpListener,
    front: Arc<Front>,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Server {
    /// Binds `addr` (e.g. `127.0.0.1:8931`); errors say what to change.
    pub async fn bind(gateway: Arc<Gateway>, addr: &str) -> Result<Server, String> {
        let g = &gateway.config.gateway;
        let tls = match (&g.tls_cert, &g.tls_key) {
            (Some(cert), Some(key)) => Some(crate::net::acceptor(
                &gateway.config.resolve_path(&cert.to_string_lossy()),
                &gateway.config.resolve_path(&key.to_string_lossy()),
            )?),
            _ => None,
        };
        let front = Front::new(gateway, addr)?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}; pass --http with a free address or set gateway.listen"))?;
        Ok(Server {
            listener,
            front,
            tls,
        })
    }

    /// `https` when the front serves TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub fn front(&self) -> Arc<Front> {
        self.front.clone()
    }

    /// Serves until `stop` resolves, then ends every session and the upstreams.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        let front = self.front.clone();
        let sweeper = {
            let front = Arc::downgrade(&front);
            tokio::spawn(async move {
                let every = (front.upgrade().map_or(Duration::from_secs(30), |f| f.idle) / 2)
                    .clamp(Duration::from_millis(100), Duration::from_secs(15));
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    match front.upgrade() {
                        Some(f) => f.sweep(),
                        None => return,
                    }
                }
            })
        };
        tokio::pin!(stop);
        loop {
            let accepted = tokio::select! {
                a = self.listener.accept() => a,
                _ = &mut stop => break,
            };
            let (stream, _) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, say: wait a little instead of spinning.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let front = front.clone();
            let tls = self.tls.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let front = front.clone();
                    async move { Ok::<_, Infallible>(front.handle(req).await) }
                });
                let builder = hyper::server::conn::http1::Builder::new();
                let ended = match tls {
                    None => {
                        builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await
                    }
                    Some(tls) => {
                        let handshake =
                            tokio::time::timeout(crate::net::CONNECT_TIMEOUT, tls.accept(stream));
                        match handshake.await {
                            Ok(Ok(stream)) => {
                                builder
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await
                            }
                            Ok(Err(e)) => {
                                tracing::debug!("a TLS handshake failed: {e}");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!("a TLS handshake timed out");
                                return;
                            }
                        }
                    }
                };
                if let Err(e) = ended {
                    tracing::debug!("an HTTP connection ended with an error: {e}");
                }
            });
        }
        sweeper.abort();
        let sessions: Vec<_> = front.sessions().values().cloned().collect();
        for s in sessions {
            front.end(&s, "the gateway is shutting down");
        }
        front.gateway.shutdown().await;
    }
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
    fn session_ids_are_random_visible_ascii() {
        let a = new_session_id();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        assert_ne!(a, new_session_id());
    }

    #[test]
    fn events_are_framed_with_stream_ids() {
        let e = Event {
            seq: 3,
            data: Bytes::from_static(b"{\"a\":1}"),
            last: false,
        };
        assert_eq!(&frame(7, &e)[..], b"id: 7-3\ndata: {\"a\":1}\n\n");
        assert_eq!(&priming(7)[..], b"id: 7-0\nretry: 1000\ndata: \n\n");
    }

    #[test]
    fn the_router_sends_answers_to_their_streams_and_the_rest_to_get() {
        let mut r = Router::new();
        let (tx, mut rx) = mpsc::channel(4);
        let n = r.open("1".into(), json!(1), Some("\"t\"".into()), tx);
        let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 1}});
        assert_eq!(r.target(&progress), Some((n, false)));
        let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
        assert_eq!(r.target(&changed), Some((0, false)));
        let sampling = json!({"jsonrpc": "2.0", "id": "warden-1", "method": "sampling/createMessage", "params": {}});
        assert_eq!(r.target(&sampling), Some((n, false)));
        let answer = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
        assert_eq!(r.target(&answer), Some((n, true)));
        r.push(n, Bytes::from_static(b"{}"), true);
        assert!(rx.try_recv().unwrap().last);
        assert_eq!(r.target(&answer), None);
        assert_eq!(r.target(&progress), Some((0, false)));
        assert!(r.running().is_empty());
    }

    #[test]
    fn a_client_that_does_not_read_is_let_go() {
        let mut r = Router::new();
        let (tx, _rx) = mpsc::channel(1);
        let n = r.open("1".into(), json!(1), None, tx);
        r.push(n, Bytes::from_static(b"{}"), false);
        r.push(n, Bytes::from_static(b"{}"), false);
        assert!(r.streams[&n].sink.is_none());
        assert_eq!(r.streams[&n].history.len(), 2);
        assert_eq!(r.running(), vec![json!(1)]);
    }
}
