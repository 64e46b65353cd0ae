//! A small Streamable HTTP front: every request is answered on its own SSE stream
//! (which also carries the requests and notifications a tool sends while it runs);
//! notifications and responses get 202. No GET stream (405), no resumption, and no
//! Host/Origin checks for the older revisions: it stands for a plain upstream server.
//! A 2026-07-28 request (see `rev2026::speaks`) has its headers checked against its
//! body and a loopback Host/Origin required; it is answered with JSON when its
//! answer is at hand (an error with the revision's HTTP status), on an SSE stream
//! when the call sends notifications first, and a `subscriptions/listen` stream
//! stays open until the client leaves.

use super::{handle, rev2026, Next, Sink, Waiting};
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::Value;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

struct Stream {
    tx: mpsc::UnboundedSender<Value>,
}

impl Sink for Stream {
    fn send(&self, msg: &Value) {
        let _ = self.tx.send(msg.clone());
    }
    fn open(&self) -> bool {
        !self.tx.is_closed()
    }
}

/// SSE events until the answer to `id`.
struct Sse {
    id: Value,
    rx: mpsc::UnboundedReceiver<Value>,
    done: bool,
    /// Event ids (`stream-seq`) for a resumed stream.
    ids: Option<(String, u64)>,
}

/// Streams `test_reconnection` left before their answer, by stream name, for a
/// GET with Last-Event-ID to pick up (SEP-1699 polling).
type Parked =
    std::sync::Mutex<std::collections::HashMap<String, (Value, mpsc::UnboundedReceiver<Value>)>>;

fn parked() -> &'static Parked {
    static PARKED: std::sync::OnceLock<Parked> = std::sync::OnceLock::new();
    PARKED.get_or_init(Default::default)
}

impl hyper::body::Body for Sse {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(msg)) => {
                if msg.get("method").is_none() && msg.get("id") == Some(&self.id) {
                    self.done = true;
                }
                let id = match &mut self.ids {
                    Some((stream, seq)) => {
                        *seq += 1;
                        format!("id: {stream}-{seq}\n")
                    }
                    None => String::new(),
                };
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(format!(
                    "{id}event: message\ndata: {msg}\n\n"
                ))))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

enum Body {
    Empty,
    Bytes(Option<Bytes>),
    Sse(Sse),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Empty => Poll::Ready(None),
            Body::Bytes(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Sse(s) => Pin::new(s).poll_frame(cx),
        }
    }
}

fn status(code: StatusCode) -> Response<Body> {
    let mut r = Response::new(Body::Empty);
    *r.status_mut() = code;
    r
}

async fn serve_one(
    req: Request<Incoming>,
    waiting: Waiting,
    next: Next,
    local: std::net::SocketAddr,
) -> Response<Body> {
    // CONFORMANCE_TOKEN=t: every request must carry `Authorization: Bearer t`.
    if let Ok(token) = std::env::var("CONFORMANCE_TOKEN") {
        let given = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if given != Some(format!("Bearer {token}").as_str()) {
            return status(StatusCode::UNAUTHORIZED);
        }
    }
    match *req.method() {
        Method::POST => {}
        Method::DELETE => return status(StatusCode::OK),
        Method::GET => {
            // Only the resumption of a stream test_reconnection left early.
            let last = req
                .headers()
                .get("last-event-id")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.rsplit_once('-'))
                .map(|(stream, _)| stream.to_owned());
            let Some((stream, (id, rx))) = last.and_then(|s| {
                let found = parked().lock().unwrap().remove(&s)?;
                Some((s, found))
            }) else {
                return status(StatusCode::METHOD_NOT_ALLOWED);
            };
            let mut r = Response::new(Body::Sse(Sse {
                id,
                rx,
                done: false,
                ids: Some((stream, 0)),
            }));
            r.headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            return r;
        }
        _ => return status(StatusCode::METHOD_NOT_ALLOWED),
    }
    let headers = req.headers().clone();
    let Ok(body) = req.into_body().collect().await else {
        return status(StatusCode::BAD_REQUEST);
    };
    let Ok(msg) = serde_json::from_slice::<Value>(&body.to_bytes()) else {
        return status(StatusCode::BAD_REQUEST);
    };
    let is_request = msg.get("method").is_some() && msg.get("id").is_some();
    if msg.pointer("/params/name").and_then(Value::as_str) == Some("garbage_answer") {
        let mut r = Response::new(Body::Bytes(Some(Bytes::from_static(b"this is not JSON"))));
        r.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        return r;
    }
    if rev2026::speaks(&msg, Some(&headers)) {
        return serve_2026(msg, &headers, &waiting, &next, &local);
    }
    let initialize = msg.get("method").and_then(Value::as_str) == Some("initialize");
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let (tx, rx) = mpsc::unbounded_channel();
    let out: super::Out = Arc::new(Stream { tx });
    let reconnection =
        msg.pointer("/params/name").and_then(Value::as_str) == Some("test_reconnection");
    handle(msg, &out, &waiting, &next);
    if !is_request {
        return status(StatusCode::ACCEPTED);
    }
    if reconnection {
        // Ends the stream after its priming event; the answer waits for a GET.
        let stream = format!(
            "r{}",
            next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let priming = Bytes::from(format!("id: {stream}-0\nretry: 100\ndata: \n\n"));
        parked().lock().unwrap().insert(stream, (id, rx));
        let mut r = Response::new(Body::Bytes(Some(priming)));
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        return r;
    }
    let mut r = Response::new(Body::Sse(Sse {
        id,
        rx,
        done: false,
        ids: None,
    }));
    r.headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    if initialize {
        let sid = format!(
            "fixture-{}",
            next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        r.headers_mut()
            .insert("mcp-session-id", sid.parse().unwrap());
    }
    r
}

fn json(code: u16, msg: &Value) -> Response<Body> {
    let mut r = Response::new(Body::Bytes(Some(Bytes::from(msg.to_string()))));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r
}

fn sse(id: Value, rx: mpsc::UnboundedReceiver<Value>) -> Response<Body> {
    let mut r = Response::new(Body::Sse(Sse {
        id,
        rx,
        done: false,
        ids: None,
    }));
    r.headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    r
}

/// A request of the 2026-07-28 revision.
fn serve_2026(
    msg: Value,
    headers: &hyper::HeaderMap,
    waiting: &Waiting,
    next: &Next,
    local: &std::net::SocketAddr,
) -> Response<Body> {
    if rev2026::foreign(headers, local) {
        let refused = serde_json::json!({"jsonrpc": "2.0", "id": msg.get("id").cloned().unwrap_or(Value::Null),
            "error": {"code": -32600, "message": "The Host or Origin header names neither this server nor a loopback address."}});
        return json(403, &refused);
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let out: super::Out = Arc::new(Stream { tx });
    let Some(id) = msg.get("id").cloned() else {
        rev2026::cancelled(&msg, &out);
        return status(StatusCode::ACCEPTED);
    };
    if let Err(answer) = rev2026::admit(&msg, Some(headers)) {
        return json(400, &answer);
    }
    match rev2026::serve(&msg, &out, waiting, next) {
        rev2026::Answer::Now(code, answer) => json(code, &answer),
        rev2026::Answer::Later => sse(id, rx),
        // The stream never carries an answer to the listen request: it stays open.
        rev2026::Answer::Listen => sse(Value::Null, rx),
    }
}

pub fn serve(addr: &str, tls: Option<(String, String)>, waiting: Waiting, next: Next) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .unwrap_or_else(|e| panic!("cannot listen on {addr}: {e}"));
        let local = listener.local_addr().expect("a bound address");
        let acceptor = tls.map(|(cert, key)| {
            warden_gateway::net::acceptor(cert.as_ref(), key.as_ref())
                .unwrap_or_else(|e| panic!("{e}"))
        });
        let scheme = if acceptor.is_some() { "https" } else { "http" };
        eprintln!("warden-conformance-upstream: listening on {scheme}://{local}/mcp");
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (waiting, next) = (waiting.clone(), next.clone());
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let (waiting, next) = (waiting.clone(), next.clone());
                    async move { Ok::<_, Infallible>(serve_one(req, waiting, next, local).await) }
                });
                let builder = hyper::server::conn::http1::Builder::new();
                match acceptor {
                    Some(a) => {
                        let Ok(stream) = a.accept(stream).await else {
                            return;
                        };
                        let _ = builder
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    }
                    None => {
                        let _ = builder
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    }
                }
            });
        }
    });
}
