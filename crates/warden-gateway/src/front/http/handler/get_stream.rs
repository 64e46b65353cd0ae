//! GET: a session's stream of messages no request asked for, or a stream
//! resumed with `Last-Event-ID` (here, or, when another replica carried it, the
//! request it answered told that its answer is lost).

use super::{Front, OnServer};
use crate::front::http::http_session::{
    Attached, Holder, HttpSession, StreamRefused, Watch, SINK_CAPACITY,
};
use crate::front::http::reply::{accepts, header_str, refuse, sse_reply, Reply};
use crate::front::http::sse::{frame, priming, SseBody};
use crate::front::http::streams::Event;
use crate::jsonrpc;
use crate::texts as answer;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde_json::Value;
use std::collections::VecDeque;
use tokio::sync::mpsc;

impl Front {
    /// GET: the session's stream for server-initiated messages, or the resumption
    /// of any of its streams after `Last-Event-ID`.
    pub(super) async fn get(&self, req: Request<Incoming>, caller: &str, holder: &Holder) -> Reply {
        let headers = req.headers();
        if !accepts(headers, "text/event-stream") {
            return refuse(
                StatusCode::NOT_ACCEPTABLE,
                jsonrpc::INVALID_REQUEST,
                answer::HTTP_ACCEPT_GET,
            );
        }
        let on = req
            .extensions()
            .get::<OnServer>()
            .cloned()
            .unwrap_or(OnServer(None));
        let session = match self.session_of(headers, &on, caller, holder, false).await {
            Ok(s) => s,
            Err(r) => return *r,
        };
        let last_event_id = header_str(headers, "last-event-id");
        if last_event_id.is_none() && self.gateway.health.draining() {
            // A resumption may still fetch a call's answer; a new GET stream would
            // only be ended again.
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                jsonrpc::INTERNAL_ERROR,
                answer::HTTP_DRAINING,
            );
        }
        let (tx, rx) = mpsc::channel(SINK_CAPACITY);
        let Attached {
            stream: n,
            sink_gen,
            replay,
            ended,
        } = match session.attach(last_event_id, tx) {
            Ok(a) => a,
            Err(refused) => return stream_refused(&session, refused),
        };
        let mut pre = VecDeque::new();
        let suffix = stream_suffix(&session, n);
        if session.primes() && last_event_id.is_none() {
            pre.push_back(priming(n, &suffix));
        }
        pre.extend(replay.iter().map(|e| frame(n, &suffix, e)));
        let resumable = n != 0 && !ended;
        let watch = resumable.then(|| Watch {
            session: session.clone(),
            stream: n,
            sink_gen,
            resumable: true,
            armed: true,
        });
        sse_reply(SseBody::new((n, suffix), pre, rx, watch, ended))
    }
}

/// The answer to a GET whose stream the session would not attach.
fn stream_refused(session: &HttpSession, refused: StreamRefused) -> Reply {
    match refused {
        StreamRefused::GetStreamOpen => refuse(
            StatusCode::CONFLICT,
            jsonrpc::INVALID_REQUEST,
            answer::HTTP_STREAM_OPEN,
        ),
        StreamRefused::Elsewhere(Some(request)) => lost_elsewhere(session, request),
        _ => refuse(
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_REQUEST,
            answer::HTTP_BAD_EVENT_ID,
        ),
    }
}

/// The replica that carried `request`'s stream is gone, and its answer with it:
/// the client is told, on the stream it asked for, instead of waiting for an
/// answer that cannot come.
fn lost_elsewhere(session: &HttpSession, request: Value) -> Reply {
    tracing::info!(session = %session.sid, "a stream carried by another replica was resumed here; its request is answered with an error");
    let lost = jsonrpc::error(request, jsonrpc::INTERNAL_ERROR, answer::HTTP_STREAM_LOST);
    let event = Event {
        seq: 1,
        data: Bytes::from(serde_json::to_vec(&lost).unwrap_or_default()),
        last: true,
    };
    let (_tx, rx) = mpsc::channel(1);
    let suffix = session.event_suffix(None);
    let pre = VecDeque::from([frame(0, &suffix, &event)]);
    sse_reply(SseBody::new((0, suffix), pre, rx, None, true))
}

/// The suffix of stream `n`'s event ids: for a POST's stream, with the request
/// it answers.
fn stream_suffix(session: &HttpSession, n: u64) -> String {
    if n == 0 {
        return session.event_suffix(None);
    }
    let request = session
        .streams()
        .streams
        .get(&n)
        .and_then(|s| s.request.as_ref().map(|(_, id)| id.clone()));
    session.event_suffix(request.as_ref())
}
