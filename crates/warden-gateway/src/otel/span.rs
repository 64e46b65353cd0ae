//! One span: its W3C trace context, its attributes, and its end, which hands it
//! to the exporter's queue without waiting (a full queue drops it and counts it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// OTLP span kinds the gateway uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Str(String),
    Bool(bool),
    Int(i64),
    Strs(Vec<String>),
}

impl From<&str> for Attr {
    fn from(s: &str) -> Attr {
        Attr::Str(s.to_owned())
    }
}
impl From<String> for Attr {
    fn from(s: String) -> Attr {
        Attr::Str(s)
    }
}
impl From<bool> for Attr {
    fn from(b: bool) -> Attr {
        Attr::Bool(b)
    }
}
impl From<i64> for Attr {
    fn from(n: i64) -> Attr {
        Attr::Int(n)
    }
}
impl From<Vec<String>> for Attr {
    fn from(v: Vec<String>) -> Attr {
        Attr::Strs(v)
    }
}

/// W3C trace context: which trace, which span in it, and whether it is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl SpanContext {
    /// Reads a `traceparent` value (`00-<32 hex>-<16 hex>-<2 hex>`). A value that is
    /// not one, or has an all-zero id, is `None` (the W3C rule: start a new trace).
    /// Later versions may append fields after the flags; only version `ff` is invalid.
    pub fn parse(traceparent: &str) -> Option<SpanContext> {
        let s = traceparent.trim();
        let b = s.as_bytes();
        if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        let version = hex_byte(&b[0..2])?;
        if version == 0xff || (version == 0 && b.len() != 55) || (b.len() > 55 && b[55] != b'-') {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, out) in trace_id.iter_mut().enumerate() {
            *out = hex_byte(&b[3 + 2 * i..5 + 2 * i])?;
        }
        let mut span_id = [0u8; 8];
        for (i, out) in span_id.iter_mut().enumerate() {
            *out = hex_byte(&b[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&b[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(SpanContext {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The `traceparent` value naming this span as the parent.
    pub fn traceparent(&self) -> String {
        let mut s = String::with_capacity(55);
        s.push_str("00-");
        push_hex(&mut s, &self.trace_id);
        s.push('-');
        push_hex(&mut s, &self.span_id);
        s.push_str(if self.sampled { "-01" } else { "-00" });
        s
    }
}

fn hex_byte(two: &[u8]) -> Option<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(digit(two[0])? << 4 | digit(two[1])?)
}

pub(crate) fn push_hex(s: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
}

/// A finished span, as the exporter encodes it.
#[derive(Debug)]
pub struct SpanData {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub kind: Kind,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
    pub attrs: Vec<(&'static str, Attr)>,
    /// Set when the span's operation failed (OTLP status ERROR, with this message).
    pub error: Option<String>,
}

/// Where finished spans go: the exporter's bounded queue, and its counters.
pub struct Sink {
    pub(crate) tx: mpsc::Sender<SpanData>,
    /// Spans dropped because the queue was full (or the exporter gone).
    pub dropped: Arc<AtomicU64>,
    ids: AtomicU64,
    seed: u64,
}

impl Sink {
    pub fn new(tx: mpsc::Sender<SpanData>, dropped: Arc<AtomicU64>) -> Sink {
        let mut seed = [0u8; 8];
        // A failing OS random source still leaves distinct ids from the clock.
        let _ = getrandom::fill(&mut seed);
        let clock = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Sink {
            tx,
            dropped,
            ids: AtomicU64::new(0),
            seed: u64::from_le_bytes(seed) ^ clock,
        }
    }

    /// A fresh, non-zero 64-bit id (splitmix64 over a counter from a random seed).
    fn next_id(&self) -> u64 {
        let n = self.ids.fetch_add(1, Ordering::Relaxed);
        let mut z = self
            .seed
            .wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)).max(1)
    }

    pub fn span_id(&self) -> [u8; 8] {
        self.next_id().to_be_bytes()
    }

    pub fn trace_id(&self) -> [u8; 16] {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.next_id().to_be_bytes());
        id[8..].copy_from_slice(&self.next_id().to_be_bytes());
        id
    }

    fn send(&self, span: SpanData) {
        if self.tx.try_send(span).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A recorded span: ends (and goes to the exporter) when dropped.
pub struct Span {
    sink: Arc<Sink>,
    data: Option<SpanData>,
    started: Instant,
}

pub(crate) fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl Span {
    pub(crate) fn start(
        sink: Arc<Sink>,
        name: String,
        kind: Kind,
        trace_id: [u8; 16],
        parent: Option<[u8; 8]>,
    ) -> Span {
        let span_id = sink.span_id();
        Span {
            sink,
            data: Some(SpanData {
                trace_id,
                span_id,
                parent,
                name,
                kind,
                start_unix_nanos: unix_nanos(),
                end_unix_nanos: 0,
                attrs: Vec::new(),
                error: None,
            }),
            started: Instant::now(),
        }
    }

    /// A span under this one.
    pub fn child(&self, name: impl Into<String>, kind: Kind) -> Span {
        let ctx = self.context();
        Span::start(
            self.sink.clone(),
            name.into(),
            kind,
            ctx.trace_id,
            Some(ctx.span_id),
        )
    }

    /// What starts spans under this one after it may have ended (work that goes
    /// on past the answer, such as after hooks, or runs in a task of its own).
    pub fn parent(&self) -> Parent {
        Parent {
            sink: self.sink.clone(),
            ctx: self.context(),
        }
    }

    /// This span's context, as its children and the next hop see it.
    pub fn context(&self) -> SpanContext {
        let d = self.data.as_ref().expect("a span's data until it ends");
        SpanContext {
            trace_id: d.trace_id,
            span_id: d.span_id,
            sampled: true,
        }
    }

    /// Sets an attribute (a later value for the same key replaces the earlier one).
    pub fn set(&mut self, key: &'static str, value: impl Into<Attr>) {
        if let Some(d) = &mut self.data {
            let value = value.into();
            match d.attrs.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = value,
                None => d.attrs.push((key, value)),
            }
        }
    }

    /// Marks the span failed, with a message for the trace viewer.
    pub fn fail(&mut self, message: impl Into<String>) {
        if let Some(d) = &mut self.data {
            d.error = Some(message.into());
        }
    }

    /// Starts the clock again: the span covers only what happens from now on.
    pub fn restart(&mut self) {
        if let Some(d) = &mut self.data {
            d.start_unix_nanos = unix_nanos();
            self.started = Instant::now();
        }
    }
}

/// A span's place in its trace, to start children under it from anywhere.
#[derive(Clone)]
pub struct Parent {
    sink: Arc<Sink>,
    ctx: SpanContext,
}

impl Parent {
    /// A span under the one this was taken from.
    pub fn child(&self, name: impl Into<String>, kind: Kind) -> Span {
        Span::start(
            self.sink.clone(),
            name.into(),
            kind,
            self.ctx.trace_id,
            Some(self.ctx.span_id),
        )
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some(mut d) = self.data.take() {
            d.end_unix_nanos = d.start_unix_nanos + self.started.elapsed().as_nanos() as u64;
            self.sink.send(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_round_trip_and_bad_ones_are_refused() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ctx = SpanContext::parse(tp).unwrap();
        assert!(ctx.sampled);
        assert_eq!(
            ctx.span_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert_eq!(ctx.traceparent(), tp);
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert!(!SpanContext::parse(unsampled).unwrap().sampled);
        // A later version may carry more after the flags.
        assert!(SpanContext::parse(&format!("01{}-xyz", &tp[2..])).is_some());
        for bad in [
            "",
            "00-abc",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(SpanContext::parse(bad).is_none(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_span_ends_when_dropped_and_a_full_queue_counts_the_loss() {
        let (tx, mut rx) = mpsc::channel(1);
        let dropped = Arc::new(AtomicU64::new(0));
        let sink = Arc::new(Sink::new(tx, dropped.clone()));
        let trace = sink.trace_id();
        let mut root = Span::start(sink.clone(), "root".into(), Kind::Server, trace, None);
        root.set("k", "v");
        root.set("k", 2i64);
        let child = root.child("child", Kind::Internal);
        let (root_id, child_id) = (root.context().span_id, child.context().span_id);
        assert_ne!(root_id, child_id);
        let parent = root.parent();
        drop(child);
        drop(root);
        let late = parent.child("late", Kind::Internal);
        assert_eq!(late.context().trace_id, trace);
        let child = rx.recv().await.unwrap();
        assert_eq!(
            (child.parent, child.trace_id, child.name.as_str()),
            (Some(root_id), trace, "child")
        );
        assert!(child.end_unix_nanos >= child.start_unix_nanos);
        assert_eq!(
            dropped.load(Ordering::Relaxed),
            1,
            "the root found the queue full"
        );
        // A child started from the parent's place after the parent ended.
        drop(late);
        let late = rx.recv().await.unwrap();
        assert_eq!(
            (late.parent, late.trace_id, late.name.as_str()),
            (Some(root_id), trace, "late")
        );
    }
}
