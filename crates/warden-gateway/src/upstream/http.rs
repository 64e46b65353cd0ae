//! An upstream over Streamable HTTP (`url = "http://…/mcp"`).
//!
//! The connection's writer hands every message to a task of its own that POSTs it
//! (so a long call never holds up the next message) on a pooled keep-alive
//! connection, with the session id the server issued, the negotiated protocol
//! version and the gateway's own bearer token (a client's credential is never
//! forwarded). A JSON answer or the events of an SSE answer are delivered exactly
//! as a stdio child's lines are. Once initialised, a GET stream carries what the
//! server sends on its own (a server without one answers 405 and is left alone).
//! A server that cannot be reached, or that forgot the session (404), ends the
//! connection: waiting calls fail at once and the gateway reconnects with backoff.

mod headers;

use super::{deliver, header_text, members, Conn, HeaderParams, Inbound, Upstream};
use crate::net::target::HttpTarget;
use bytes::Bytes;
use headers::*;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

const SESSION: &str = "mcp-session-id";
const VERSION: &str = "mcp-protocol-version";
/// Idle keep-alive connections kept per upstream.
const POOL: usize = 32;
/// Tries at resuming a stream that ended before its answer, and the pause before each.
const RESUME_ATTEMPTS: usize = 5;
const RESUME_PAUSE: Duration = Duration::from_millis(100);
/// The longest wait before resuming that a server's `retry:` advice is followed for.
const RESUME_PAUSE_MAX: Duration = Duration::from_secs(30);

type Sender = SendRequest<Full<Bytes>>;

struct Http {
    target: HttpTarget,
    /// For `https://` upstreams: the public roots plus `tls_ca_file`.
    tls: Option<tokio_rustls::TlsConnector>,
    token: Option<String>,
    session: Mutex<Option<String>>,
    version: Mutex<Option<String>>,
    idle: Mutex<Vec<Sender>>,
    max: usize,
    conn: Weak<Conn>,
    inbound: Weak<dyn Inbound>,
    listening: AtomicBool,
    /// The reconnection time the server last advised on a stream (SSE `retry:`),
    /// in ms: a stream ended early is resumed after it (SEP-1699).
    retry_ms: AtomicU64,
    /// Which tools' arguments also travel in `Mcp-Param-*` headers.
    header_params: HeaderParams,
}

enum Failure {
    /// Connection refused, reset, or no answer: the upstream is gone.
    Unreachable(String),
    /// 404 for our session: the server forgot it; start over.
    SessionGone,
    /// Any other non-success status.
    Refused(StatusCode),
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn open(
    up: &Upstream,
    generation: u64,
    inbound: Weak<dyn Inbound>,
) -> Result<Arc<Conn>, String> {
    let url = up.config.url.as_deref().unwrap_or_default();
    let target = HttpTarget::parse(url, up.timeout_ms()).map_err(|e| format!("url: {e}"))?;
    let tls = if target.is_tls() {
        Some(crate::net::tls_with(up.config.tls_ca_file.as_deref())?)
    } else {
        None
    };
    let token = up
        .config
        .bearer_token
        .clone()
        .or_else(|| {
            let var = up.config.bearer_token_env.as_ref()?;
            std::env::var(var).ok()
        })
        .filter(|t| !t.is_empty());
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(1024);
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let conn = up.new_conn(generation, tx, stop_tx, None, inbound.clone());
    let http = Arc::new(Http {
        target,
        tls,
        token,
        session: Mutex::new(None),
        version: Mutex::new(None),
        idle: Mutex::new(Vec::new()),
        max: up.max_message,
        conn: Arc::downgrade(&conn),
        inbound,
        listening: AtomicBool::new(false),
        retry_ms: AtomicU64::new(0),
        header_params: up.header_params.clone(),
    });
    tokio::spawn(async move {
        loop {
            let line = tokio::select! {
                line = rx.recv() => line,
                _ = &mut stop_rx => None,
            };
            let Some(line) = line else { break };
            tokio::spawn(http.clone().post(line));
        }
        http.end_session().await;
    });
    Ok(conn)
}

impl Http {
    async fn post(self: Arc<Self>, line: Vec<u8>) {
        let Some(conn) = self.conn.upgrade() else {
            return;
        };
        // A request that gets no JSON-RPC answer is answered here, so its caller learns at once.
        // Only the head is read (no tree is built): this runs for every message.
        let head = serde_json::from_slice::<Head>(&line)
            .ok()
            .filter(|h| h.method.is_some());
        let pending_id = head.as_ref().and_then(|h| h.id);
        let trace = head
            .and_then(|h| h.params)
            .map(|p| p.trace_headers())
            .unwrap_or_default();
        // A caller's own credential for this request, when one is configured.
        let credential = pending_id.and_then(|n| conn.take_credential(n));
        match self
            .exchange(&conn, line, pending_id, &trace, credential.clone())
            .await
        {
            Ok(last) => {
                // A stream that ended early with an event id: come back for the rest.
                if let (Some(n), Some(last)) = (pending_id, last) {
                    if conn.is_pending(n) && lock(&self.session).is_some() {
                        // The rest of the answer is the caller's as much as its
                        // start: it is asked for with the same credential.
                        self.resume(&conn, n, last, credential.as_deref()).await;
                    }
                }
                // The answer is over and held no response to this request (garbage, or
                // a stream that closed early): the caller hears now, not at its timeout.
                if let Some(n) = pending_id.filter(|n| conn.is_pending(*n)) {
                    tracing::warn!(upstream = %conn.name, "the HTTP upstream's answer carried no response to the request");
                    conn.no_response(n);
                }
            }
            Err(Failure::Refused(status)) => {
                tracing::warn!(upstream = %conn.name, %status, "the HTTP upstream refused a message");
                if let Some(n) = pending_id {
                    conn.no_response(n);
                }
            }
            Err(Failure::SessionGone) => {
                tracing::warn!(upstream = %conn.name, "the HTTP upstream forgot the session; reconnecting");
                self.lost(&conn);
            }
            Err(Failure::Unreachable(e)) => {
                tracing::warn!(upstream = %conn.name, "the HTTP upstream cannot be reached: {e}");
                self.lost(&conn);
            }
        }
    }

    fn lost(&self, conn: &Arc<Conn>) {
        if conn.close_once() {
            if let Some(router) = self.inbound.upgrade() {
                router.on_exit(conn.upstream, conn.generation, conn.exit());
            }
        }
    }

    /// The `Mcp-Param-*` headers of a 2026-07-28 call to a tool that declares
    /// some: each such argument's value (the arguments are read only then).
    fn param_headers(&self, line: &[u8]) -> Vec<(String, String)> {
        #[derive(serde::Deserialize)]
        struct Call {
            params: CallParams,
        }
        #[derive(serde::Deserialize)]
        struct CallParams {
            arguments: Option<serde_json::Map<String, Value>>,
        }
        let Ok(Routing {
            method: Some(m),
            params: Some(p),
        }) = serde_json::from_slice::<Routing>(line)
        else {
            return Vec::new();
        };
        let Some(Value::String(name)) = p.name.filter(|_| m == "tools/call") else {
            return Vec::new();
        };
        let wanted = self
            .header_params
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&name)
            .cloned();
        let Some(wanted) = wanted else {
            return Vec::new();
        };
        let Ok(call) = serde_json::from_slice::<Call>(line) else {
            return Vec::new();
        };
        let args = call.params.arguments.unwrap_or_default();
        wanted
            .iter()
            .filter_map(|(arg, suffix)| {
                let text = header_text(args.get(arg))?;
                let name = format!("mcp-param-{}", suffix.to_ascii_lowercase());
                Some((name, header_value(&text)))
            })
            .collect()
    }

    fn request<B>(&self, method: &str, body: B, accept: &'static str) -> Request<B> {
        self.request_as(method, body, accept, None)
    }

    /// A request with `credential` as its bearer token instead of the gateway's own.
    fn request_as<B>(
        &self,
        method: &str,
        body: B,
        accept: &'static str,
        credential: Option<&str>,
    ) -> Request<B> {
        let (_, _, authority, path) = self.target.target();
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, authority)
            .header(ACCEPT, accept);
        if let Some(s) = lock(&self.session).as_deref() {
            req = req.header(SESSION, s);
        }
        if let Some(v) = lock(&self.version).as_deref() {
            req = req.header(VERSION, v);
        }
        if let Some(t) = credential.or(self.token.as_deref()) {
            req = req.header(AUTHORIZATION, format!("Bearer {t}"));
        }
        req.body(body).expect("a request from valid parts")
    }

    async fn connect(&self) -> Result<crate::net::Stream, String> {
        let (host, port, _, _) = self.target.target();
        crate::net::connect(host, port, self.tls.as_ref()).await
    }

    /// A ready keep-alive connection from the pool, or a new one.
    async fn sender(&self) -> Result<Sender, Failure> {
        loop {
            let Some(mut s) = lock(&self.idle).pop() else {
                break;
            };
            if !s.is_closed() && s.ready().await.is_ok() {
                return Ok(s);
            }
        }
        let stream = self.connect().await.map_err(Failure::Unreachable)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    fn give_back(&self, sender: Sender) {
        let mut idle = lock(&self.idle);
        if !sender.is_closed() && idle.len() < POOL {
            idle.push(sender);
        }
    }

    async fn exchange(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        line: Vec<u8>,
        related: Option<u64>,
        trace: &[(&'static str, String)],
        credential: Option<Arc<str>>,
    ) -> Result<Option<String>, Failure> {
        let mut sender = self.sender().await?;
        let mut stateless = stateless_headers(&line);
        if !stateless.is_empty() {
            stateless.extend(self.param_headers(&line));
        }
        let mut req = self.request_as(
            "POST",
            Full::new(Bytes::from(line)),
            "application/json, text/event-stream",
            credential.as_deref(),
        );
        let headers = req.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            "application/json".parse().expect("a header value"),
        );
        for (name, value) in stateless {
            let name = hyper::header::HeaderName::from_bytes(name.as_bytes());
            if let (Ok(n), Ok(v)) = (name, value.parse()) {
                headers.insert(n, v);
            }
        }
        for (name, value) in trace {
            // A value no header may carry stays in `_meta` only.
            if let Ok(v) = hyper::header::HeaderValue::from_str(value) {
                headers.insert(*name, v);
            }
        }
        let response = sender
            .send_request(req)
            .await
            .map_err(|e| Failure::Unreachable(e.to_string()))?;
        if let Some(sid) = response
            .headers()
            .get(SESSION)
            .and_then(|v| v.to_str().ok())
        {
            *lock(&self.session) = Some(sid.to_owned());
        }
        let status = response.status();
        if status == StatusCode::NOT_FOUND && lock(&self.session).is_some() {
            return Err(Failure::SessionGone);
        }
        if !status.is_success() {
            // A 2026-07-28 server answers a request it refuses with an error status
            // and the JSON-RPC error: that error is the answer.
            let json = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|c| c.starts_with("application/json"));
            if json && related.is_some() {
                let _ = self.read_answer(conn, response, related).await;
            }
            return Err(Failure::Refused(status));
        }
        let last = self.read_answer(conn, response, related).await?;
        self.give_back(sender);
        Ok(last)
    }

    /// Delivers a JSON answer, or every event of an SSE answer as it arrives.
    async fn read_answer(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        response: Response<Incoming>,
        related: Option<u64>,
    ) -> Result<Option<String>, Failure> {
        let sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let mut body = response.into_body();
        if !sse {
            // One JSON message, or (a stream some 2026-07-28 servers answer
            // `subscriptions/listen` with) one message per line, delivered as each
            // line completes.
            let mut buffer = Vec::new();
            let mut lines = true;
            while let Some(frame) = body.frame().await {
                let frame = frame
                    .map_err(|e| Failure::Unreachable(format!("reading an answer failed: {e}")))?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                buffer.extend_from_slice(&data);
                if buffer.len() > self.max {
                    return Err(Failure::Unreachable(
                        "an answer larger than gateway.max_message_bytes".into(),
                    ));
                }
                while lines {
                    let Some(end) = buffer.iter().position(|b| *b == b'\n') else {
                        break;
                    };
                    let line = &buffer[..end];
                    if line.iter().all(u8::is_ascii_whitespace) {
                        buffer.drain(..=end);
                        continue;
                    }
                    // A line that is no message of its own: the body is one
                    // message spread over lines, read whole at its end.
                    if serde_json::from_slice::<serde::de::IgnoredAny>(line).is_err() {
                        lines = false;
                        break;
                    }
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    self.take(conn, &line, related).await;
                }
            }
            if !buffer.iter().all(u8::is_ascii_whitespace) {
                self.take(conn, &buffer, related).await;
            }
            return Ok(None);
        }
        let mut buffer = Vec::new();
        let mut last_id = None;
        while let Some(frame) = body.frame().await {
            let frame =
                frame.map_err(|e| Failure::Unreachable(format!("an event stream broke: {e}")))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            buffer.extend_from_slice(&data);
            for event in take_events(&mut buffer) {
                if let Some(ms) = event.retry {
                    self.retry_ms.store(ms, Ordering::Relaxed);
                }
                if event.id.is_some() {
                    last_id = event.id;
                }
                if !event.data.iter().all(u8::is_ascii_whitespace) {
                    self.take(conn, &event.data, related).await;
                }
            }
            if buffer.len() > self.max {
                tracing::warn!(upstream = %conn.name, "an SSE event larger than gateway.max_message_bytes; the stream is dropped");
                return Ok(last_id);
            }
        }
        Ok(last_id)
    }

    /// SEP-1699: a server may end a request's stream before its answer and expect
    /// the client to come back with a GET and the last event id it saw. Tries a few
    /// times while the request still waits, presenting the credential the request
    /// was sent with (a caller's own, or the gateway's when `None`).
    async fn resume(
        self: &Arc<Self>,
        conn: &Arc<Conn>,
        id: u64,
        mut last: String,
        credential: Option<&str>,
    ) {
        for _ in 0..RESUME_ATTEMPTS {
            if !conn.is_pending(id) {
                return;
            }
            let advised = Duration::from_millis(self.retry_ms.load(Ordering::Relaxed));
            tokio::time::sleep(advised.clamp(RESUME_PAUSE, RESUME_PAUSE_MAX)).await;
            let Some(response) = self.open_stream(Some(&last), credential).await else {
                continue;
            };
            if !response.status().is_success() {
                tracing::debug!(upstream = %conn.name, status = %response.status(), "the HTTP upstream refused to resume a stream");
                return;
            }
            if let Ok(Some(newer)) = self.read_answer(conn, response, Some(id)).await {
                last = newer;
            }
        }
    }

    async fn take(self: &Arc<Self>, conn: &Arc<Conn>, message: &[u8], related: Option<u64>) {
        if lock(&self.version).is_none() {
            // The initialize answer: later requests name its version, and the GET stream can open.
            // Read by its members: a 2026-07-28 upstream has no such answer, so
            // every message it sends is read here.
            if let Some(version) = protocol_version(message) {
                *lock(&self.version) = Some(version);
                if !self.listening.swap(true, Ordering::SeqCst) {
                    tokio::spawn(self.clone().listen_boxed());
                }
            }
        }
        deliver(conn, &self.inbound, message, related).await;
    }

    /// [`Http::listen`] behind a box: it reads answers, which may start it.
    fn listen_boxed(
        self: Arc<Self>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(self.listen())
    }

    /// The GET stream for what the server sends unprompted, reopened while the
    /// connection lives; a server without one (405) is not asked again.
    async fn listen(self: Arc<Self>) {
        // The server learns the session is initialised from our next message; give it a moment.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut delay = Duration::from_secs(1);
        loop {
            let Some(conn) = self.conn.upgrade().filter(|c| !c.is_closed()) else {
                return;
            };
            if let Some(response) = self.open_stream(None, None).await {
                match response.status() {
                    StatusCode::METHOD_NOT_ALLOWED => return,
                    StatusCode::NOT_FOUND => {
                        self.lost(&conn);
                        return;
                    }
                    s if s.is_success() => {
                        delay = Duration::from_secs(1);
                        // The stream ends with the connection it serves.
                        let closed = async {
                            while !conn.is_closed() {
                                tokio::time::sleep(Duration::from_secs(1)).await;
                            }
                        };
                        tokio::select! {
                            _ = self.read_answer(&conn, response, None) => {}
                            _ = closed => return,
                        }
                    }
                    status => {
                        tracing::debug!(upstream = %conn.name, %status, "the HTTP upstream refused its GET stream; retrying");
                    }
                }
            }
            drop(conn);
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(30));
        }
    }

    /// A GET for the server's own stream, on a connection of its own (the stream
    /// holds it for as long as it lasts), with `credential` as its bearer token
    /// instead of the gateway's own when one is given.
    async fn open_stream(
        &self,
        last_event_id: Option<&str>,
        credential: Option<&str>,
    ) -> Option<Response<Incoming>> {
        let stream = self.connect().await.ok()?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
                .await
                .ok()?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut req = self.request_as("GET", Empty::new(), "text/event-stream", credential);
        if let Some(last) = last_event_id {
            if let Ok(v) = last.parse() {
                req.headers_mut().insert("last-event-id", v);
            }
        }
        sender.send_request(req).await.ok()
    }

    /// Tells the server the session is over (best effort).
    async fn end_session(&self) {
        if lock(&self.session).is_none() {
            return;
        }
        let req = self.request("DELETE", Full::new(Bytes::new()), "application/json");
        if let Ok(mut sender) = self.sender().await {
            let _ = tokio::time::timeout(Duration::from_secs(2), sender.send_request(req)).await;
        }
    }
}

/// One SSE event: its id, if it has one, and its data (empty for a priming event
/// or a comment).
struct SseEvent {
    id: Option<String>,
    data: Vec<u8>,
    /// The reconnection time it advises, in ms (`retry:`).
    retry: Option<u64>,
}

/// Removes every complete SSE event from `buffer` and returns them.
fn take_events(buffer: &mut Vec<u8>) -> Vec<SseEvent> {
    let mut out = Vec::new();
    loop {
        let end = buffer
            .windows(2)
            .position(|w| w == b"\n\n")
            .map(|i| (i, 2))
            .into_iter()
            .chain(
                buffer
                    .windows(4)
                    .position(|w| w == b"\r\n\r\n")
                    .map(|i| (i, 4)),
            )
            .min_by_key(|(i, _)| *i);
        let Some((at, len)) = end else { break };
        let event: Vec<u8> = buffer.drain(..at + len).collect();
        let mut data: Vec<u8> = Vec::new();
        let (mut id, mut retry) = (None, None);
        for line in event.split(|b| *b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(rest) = line.strip_prefix(b"data:") {
                if !data.is_empty() {
                    data.push(b'\n');
                }
                data.extend_from_slice(rest.strip_prefix(b" ").unwrap_or(rest));
            } else if let Some(rest) = line.strip_prefix(b"id:") {
                let rest = rest.strip_prefix(b" ").unwrap_or(rest);
                id = std::str::from_utf8(rest).ok().map(str::to_owned);
            } else if let Some(rest) = line.strip_prefix(b"retry:") {
                let rest = rest.strip_prefix(b" ").unwrap_or(rest);
                retry = std::str::from_utf8(rest).ok().and_then(|r| r.parse().ok());
            }
        }
        out.push(SseEvent { id, data, retry });
    }
    out
}

/// The `protocolVersion` string of a message's `result`, read without a tree of
/// the message.
fn protocol_version(message: &[u8]) -> Option<String> {
    let read = members::read(message)?;
    let result = members::object(read.get("result")?)?;
    match members::value(result.get("protocolVersion")?) {
        Value::String(version) => Some(version),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
