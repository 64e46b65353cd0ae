//! Response bodies of the HTTP front: a whole JSON document, or a server-sent
//! event stream. Every event carries an id (`stream-seq`) a client can resume
//! from; a stream with nothing to say sends a comment every [`HEARTBEAT`], so a
//! client that went away is noticed (the write fails) even while a call runs long.

use super::http_session::Watch;
use super::streams::Event;
use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

/// What SSE clients are told to wait before reconnecting, in milliseconds.
const RETRY_MS: u64 = 1000;
/// How often a quiet stream sends a comment.
const HEARTBEAT: Duration = Duration::from_secs(5);

pub enum OutBody {
    Full(Option<Bytes>),
    Sse(SseBody),
}

pub struct SseBody {
    stream: u64,
    /// What follows `stream-seq` in each event id ([`super::http_session::HttpSession::event_suffix`]).
    suffix: String,
    pre: VecDeque<Bytes>,
    rx: mpsc::Receiver<Event>,
    watch: Option<Watch>,
    ended: bool,
    heartbeat: Pin<Box<tokio::time::Sleep>>,
}

impl SseBody {
    pub(super) fn new(
        (stream, suffix): (u64, String),
        pre: VecDeque<Bytes>,
        rx: mpsc::Receiver<Event>,
        watch: Option<Watch>,
        ended: bool,
    ) -> Self {
        SseBody {
            stream,
            suffix,
            pre,
            rx,
            watch,
            ended,
            heartbeat: Box::pin(tokio::time::sleep(HEARTBEAT)),
        }
    }
}

pub(super) fn frame(stream: u64, suffix: &str, event: &Event) -> Bytes {
    let mut out = Vec::with_capacity(event.data.len() + 32 + suffix.len());
    out.extend_from_slice(format!("id: {stream}-{}{suffix}\ndata: ", event.seq).as_bytes());
    out.extend_from_slice(&event.data);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

pub(super) fn priming(stream: u64, suffix: &str) -> Bytes {
    Bytes::from(format!(
        "id: {stream}-0{suffix}\nretry: {RETRY_MS}\ndata: \n\n"
    ))
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
                        Poll::Ready(Some(Ok(Frame::data(frame(s.stream, &s.suffix, &event)))))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_framed_with_stream_ids() {
        let e = Event {
            seq: 3,
            data: Bytes::from_static(b"{\"a\":1}"),
            last: false,
        };
        assert_eq!(
            &frame(7, ".ab12.MQ", &e)[..],
            b"id: 7-3.ab12.MQ\ndata: {\"a\":1}\n\n"
        );
        assert_eq!(
            &priming(7, ".ab12")[..],
            b"id: 7-0.ab12\nretry: 1000\ndata: \n\n"
        );
    }
}
