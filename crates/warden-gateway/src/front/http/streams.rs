//! A session's streams: the GET stream and one per POSTed request, each with the
//! events it carried (kept for resumption) and the sink its connected client
//! reads. Sorting a message onto its stream is a lookup of the request it names.

use crate::gateway::Outgoing;
use bytes::Bytes;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use tokio::sync::mpsc;

/// Events kept per stream for resumption.
const HISTORY: usize = 256;
/// Finished streams kept (for late resumption) per session.
const DONE_KEPT: usize = 32;
/// One event on a stream: its sequence number and the JSON-RPC message.
#[derive(Clone)]
pub(super) struct Event {
    pub(super) seq: u64,
    pub(super) data: Bytes,
    /// The answer that ends a POST's stream.
    pub(super) last: bool,
}

#[derive(Default)]
pub(super) struct Stream {
    pub(super) sink: Option<mpsc::Sender<Event>>,
    /// Counts the sinks the stream was given: a client that resumed it holds a
    /// newer one than the response it left behind.
    pub(super) sink_gen: u64,
    pub(super) history: VecDeque<Event>,
    pub(super) next_seq: u64,
    /// The highest sequence number a connected client was handed.
    pub(super) delivered: u64,
    /// The POSTed request this stream answers (id key, id); none for the GET stream.
    pub(super) request: Option<(String, Value)>,
    pub(super) done: bool,
}

/// A session's streams, and which POST's stream answers which request. Stream 0
/// is the GET stream.
pub(super) struct Streams {
    pub(super) streams: HashMap<u64, Stream>,
    pub(super) by_request: HashMap<String, u64>,
    pub(super) next: u64,
    pub(super) done: VecDeque<u64>,
}

impl Streams {
    pub(super) fn new() -> Self {
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
            next: 1,
            done: VecDeque::new(),
        }
    }

    /// Opens the stream a POSTed request is answered on.
    pub(super) fn open(&mut self, key: String, id: Value, sink: mpsc::Sender<Event>) -> u64 {
        let n = self.next;
        self.next += 1;
        self.by_request.insert(key.clone(), n);
        self.streams.insert(
            n,
            Stream {
                sink: Some(sink),
                sink_gen: 1,
                next_seq: 1,
                request: Some((key, id)),
                ..Stream::default()
            },
        );
        n
    }

    /// Which stream a message from the gateway goes to, and whether it ends it:
    /// the stream of the POST whose request it belongs to, else the GET stream.
    /// `None`: an answer for a request no longer waiting.
    pub(super) fn target(&self, out: &Outgoing) -> Option<(u64, bool)> {
        let stream = out
            .call
            .as_ref()
            .and_then(|k| self.by_request.get(k).copied());
        match (stream, out.ends_call) {
            (Some(n), last) => Some((n, last)),
            (None, true) => None,
            (None, false) => Some((0, false)),
        }
    }

    pub(super) fn push(&mut self, n: u64, data: Bytes, last: bool) {
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
            self.close(n);
        }
    }

    /// Marks a POST stream answered: its request and token no longer route here.
    pub(super) fn close(&mut self, n: u64) -> Option<Value> {
        let s = self.streams.get_mut(&n)?;
        if s.done {
            return None;
        }
        s.done = true;
        let (key, id) = s.request.clone()?;
        self.by_request.remove(&key);
        self.done.push_back(n);
        while self.done.len() > DONE_KEPT {
            if let Some(old) = self.done.pop_front() {
                self.streams.remove(&old);
            }
        }
        Some(id)
    }

    /// A response that read stream `n` through sink generation `gen` is gone: the
    /// stream lets go of that sink. False when there is nothing to let go: the
    /// stream ended, or a client resumed it with a newer sink (it keeps receiving,
    /// and its call keeps running).
    pub(super) fn let_go(&mut self, n: u64, gen: u64) -> bool {
        match self.streams.get_mut(&n) {
            Some(s) if !s.done && s.sink_gen == gen => {
                s.sink = None;
                true
            }
            _ => false,
        }
    }

    /// The requests still waiting for their answers.
    pub(super) fn running(&self) -> Vec<Value> {
        self.streams
            .values()
            .filter(|s| !s.done)
            .filter_map(|s| s.request.as_ref().map(|(_, id)| id.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_router_sends_answers_to_their_streams_and_the_rest_to_get() {
        let mut r = Streams::new();
        let (tx, mut rx) = mpsc::channel(4);
        let n = r.open("1".into(), json!(1), tx);
        let for_call = |msg: Value, ends_call: bool| Outgoing {
            call: Some("1".into()),
            ends_call,
            msg,
            raw: None,
        };
        let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 1}});
        assert_eq!(
            r.target(&for_call(progress.clone(), false)),
            Some((n, false))
        );
        let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
        assert_eq!(r.target(&Outgoing::session(changed)), Some((0, false)));
        let sampling = json!({"jsonrpc": "2.0", "id": "warden-1", "method": "sampling/createMessage", "params": {}});
        assert_eq!(r.target(&for_call(sampling, false)), Some((n, false)));
        let answer = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
        assert_eq!(r.target(&for_call(answer.clone(), true)), Some((n, true)));
        r.push(n, Bytes::from_static(b"{}"), true);
        assert!(rx.try_recv().unwrap().last);
        assert_eq!(r.target(&for_call(answer, true)), None);
        assert_eq!(r.target(&for_call(progress, false)), Some((0, false)));
        assert!(r.running().is_empty());
    }

    #[test]
    fn a_client_that_does_not_read_is_let_go() {
        let mut r = Streams::new();
        let (tx, _rx) = mpsc::channel(1);
        let n = r.open("1".into(), json!(1), tx);
        r.push(n, Bytes::from_static(b"{}"), false);
        r.push(n, Bytes::from_static(b"{}"), false);
        assert!(r.streams[&n].sink.is_none());
        assert_eq!(r.streams[&n].history.len(), 2);
        assert_eq!(r.running(), vec![json!(1)]);
    }

    #[test]
    fn a_response_left_behind_does_not_take_a_resumed_streams_sink() {
        let mut r = Streams::new();
        let (tx, _rx) = mpsc::channel(4);
        let n = r.open("1".into(), json!(1), tx);
        let first = r.streams[&n].sink_gen;
        // The client resumed the stream (GET with Last-Event-ID) on a new sink …
        let (tx2, mut rx2) = mpsc::channel(4);
        let s = r.streams.get_mut(&n).unwrap();
        s.sink = Some(tx2);
        s.sink_gen += 1;
        // … then the first response's body is dropped: the new sink stays.
        assert!(!r.let_go(n, first));
        r.push(n, Bytes::from_static(b"{}"), true);
        assert!(rx2.try_recv().unwrap().last);
        // Its own sink, on a stream still running, is let go.
        let (tx3, _rx3) = mpsc::channel(4);
        let m = r.open("2".into(), json!(2), tx3);
        let gen = r.streams[&m].sink_gen;
        assert!(r.let_go(m, gen));
        assert!(r.streams[&m].sink.is_none());
    }
}
