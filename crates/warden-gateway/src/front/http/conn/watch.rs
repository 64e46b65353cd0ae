//! The watch on one connection: the clock its timeouts run on (when the head
//! began, whether a request is in flight, when it went idle), and the body and
//! socket wrappers through which its reads and answers move that clock.

use super::Limits;
use hyper::body::{Body, Frame, SizeHint};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

/// What the watch knows of one connection: told by its reads and its requests.
pub(super) struct Clock {
    state: Mutex<ClockState>,
    /// Woken whenever a deadline may have moved.
    pub(super) changed: Notify,
}

pub(super) struct ClockState {
    accepted: Instant,
    /// Requests whose answers are not yet fully written.
    busy: usize,
    /// Whether a request head ever came whole.
    pub(super) served: bool,
    /// When the last answer was finished.
    idle_since: Instant,
    /// When the first byte of the next head came, while nothing was in flight.
    head_since: Option<Instant>,
}

/// Which timeout a deadline belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expiry {
    /// A head that did not come whole in time (or the first never came).
    Head,
    /// No request for `http_idle_timeout`.
    Idle,
    /// A graceful shutdown that did not finish in time.
    Closing,
}

impl ClockState {
    fn new(accepted: Instant) -> ClockState {
        ClockState {
            accepted,
            busy: 0,
            served: false,
            idle_since: accepted,
            head_since: None,
        }
    }

    /// When the connection is to close, and why; `None` while a request is in flight.
    pub(super) fn deadline(
        &self,
        limits: &Limits,
        closing: Option<Instant>,
    ) -> Option<(Instant, Expiry)> {
        if self.busy > 0 {
            return None;
        }
        Some(match (closing, self.served, self.head_since) {
            (Some(since), _, _) => (since + limits.head, Expiry::Closing),
            (None, false, _) => (self.accepted + limits.head, Expiry::Head),
            (None, true, Some(since)) => (since + limits.head, Expiry::Head),
            (None, true, None) => (self.idle_since + limits.idle, Expiry::Idle),
        })
    }
}

impl Clock {
    pub(super) fn new(accepted: Instant) -> Arc<Clock> {
        Arc::new(Clock {
            state: Mutex::new(ClockState::new(accepted)),
            changed: Notify::new(),
        })
    }

    pub(super) fn state(&self) -> std::sync::MutexGuard<'_, ClockState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request head came whole: the request is in flight until its answer is written.
    pub(super) fn busy(self: &Arc<Self>) -> Busy {
        let mut s = self.state();
        s.busy += 1;
        s.served = true;
        s.head_since = None;
        Busy(self.clone())
    }

    /// Bytes came in. With nothing in flight they begin the next head (a body is
    /// read only while its request is in flight).
    pub(super) fn read(&self) {
        let mut s = self.state();
        if s.busy == 0 && s.served && s.head_since.is_none() {
            s.head_since = Some(Instant::now());
            drop(s);
            self.changed.notify_one();
        }
    }
}

/// A request in flight, until its answer's body is written (or dropped).
pub(super) struct Busy(Arc<Clock>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut s = self.0.state();
        s.busy = s.busy.saturating_sub(1);
        if s.busy == 0 {
            s.idle_since = Instant::now();
            s.head_since = None;
        }
        drop(s);
        self.0.changed.notify_one();
    }
}

/// An answer's body carrying its request's [`Busy`]: hyper drops the body once it
/// is written, and that is when the request stops being in flight.
pub(super) struct Tracked<B> {
    pub(super) body: B,
    pub(super) _busy: Busy,
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection's socket, telling its [`Clock`] when bytes come in.
pub(super) struct Watched<S> {
    pub(super) io: S,
    pub(super) clock: Arc<Clock>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut me.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            me.clock.read();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::front::http::conn::Listener;
    use std::time::Duration;

    fn limits(max: usize, per_client: usize) -> Limits {
        Limits {
            head: Duration::from_secs(10),
            idle: Duration::from_secs(60),
            max,
            per_client,
            listener: Listener::Front,
        }
    }

    #[test]
    fn the_deadline_follows_the_connection() {
        let l = limits(1, 1);
        let t0 = Instant::now();
        let mut s = ClockState::new(t0);
        // Nothing yet: the first head is due within the head timeout of the accept.
        assert_eq!(s.deadline(&l, None), Some((t0 + l.head, Expiry::Head)));
        // A request in flight (a long call, an SSE stream): no deadline at all.
        s.busy = 1;
        s.served = true;
        assert_eq!(s.deadline(&l, None), None);
        // Answered: idle, then the next head's first byte starts the head timeout.
        let t1 = t0 + Duration::from_secs(3);
        s.busy = 0;
        s.idle_since = t1;
        assert_eq!(s.deadline(&l, None), Some((t1 + l.idle, Expiry::Idle)));
        let t2 = t1 + Duration::from_secs(30);
        s.head_since = Some(t2);
        assert_eq!(s.deadline(&l, None), Some((t2 + l.head, Expiry::Head)));
        // A graceful close gets the head timeout to finish.
        let t3 = t2 + Duration::from_secs(1);
        assert_eq!(
            s.deadline(&l, Some(t3)),
            Some((t3 + l.head, Expiry::Closing))
        );
    }

    #[tokio::test]
    async fn reads_start_a_head_only_between_requests() {
        let clock = Clock::new(Instant::now());
        // Before the first request the accept time rules; reads change nothing.
        clock.read();
        assert_eq!(clock.state().head_since, None);
        let busy = clock.busy();
        clock.read(); // the request's body
        assert_eq!(clock.state().head_since, None);
        drop(busy);
        assert_eq!(clock.state().busy, 0);
        clock.read(); // the next head
        assert!(clock.state().head_since.is_some());
        let _busy = clock.busy();
        assert_eq!(clock.state().head_since, None);
    }
}
