//! OTLP/HTTP export: finished spans (and audit records, [`super::logs`]) are
//! batched off the call path and POSTed as protobuf, spans as an
//! `ExportTraceServiceRequest` to `<endpoint>/v1/traces` (encoded with
//! [`super::proto`]).

use super::proto::{
    bytes_field, key_value, message, resource, scope, tag, varint, FIXED64, VARINT,
};
use super::span::SpanData;
use crate::net::target::HttpTarget;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Spans sent in one request at most.
pub const MAX_BATCH: usize = 512;
/// How long a span may wait for others to fill its batch, unless
/// `OTEL_BSP_SCHEDULE_DELAY` says otherwise.
pub const BATCH_DELAY: Duration = Duration::from_millis(500);

/// `Span`: trace_id = 1, span_id = 2, parent_span_id = 4, name = 5, kind = 6,
/// start = 7, end = 8 (fixed64), attributes = 9, status = 15.
fn span(out: &mut Vec<u8>, s: &SpanData) {
    bytes_field(out, 1, &s.trace_id);
    bytes_field(out, 2, &s.span_id);
    if let Some(p) = &s.parent {
        bytes_field(out, 4, p);
    }
    bytes_field(out, 5, s.name.as_bytes());
    tag(out, 6, VARINT);
    varint(out, s.kind as u64);
    tag(out, 7, FIXED64);
    out.extend_from_slice(&s.start_unix_nanos.to_le_bytes());
    tag(out, 8, FIXED64);
    out.extend_from_slice(&s.end_unix_nanos.to_le_bytes());
    for (k, v) in &s.attrs {
        key_value(out, 9, k, v);
    }
    // Status { string message = 2; StatusCode code = 3 } (ERROR = 2); unset otherwise.
    if let Some(m) = &s.error {
        message(out, 15, |st| {
            bytes_field(st, 2, m.as_bytes());
            tag(st, 3, VARINT);
            varint(st, 2);
        });
    }
}

/// `ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1 }` with
/// one resource (this gateway) and one scope.
pub fn encode(service_name: &str, spans: &[SpanData]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 * spans.len() + 128);
    message(&mut out, 1, |rs| {
        // ResourceSpans.resource = 1
        message(rs, 1, |r| resource(r, service_name));
        // ResourceSpans.scope_spans = 2: ScopeSpans { scope = 1; repeated Span spans = 2 }
        message(rs, 2, |ss| {
            message(ss, 1, scope);
            for s in spans {
                message(ss, 2, |m| span(m, s));
            }
        });
    });
    out
}

/// How a batch of items is encoded for the collector.
pub type Encode<T> = Box<dyn Fn(&[T]) -> Vec<u8> + Send>;

/// What one exporter sends: its items' name in the log (`spans`), and how a
/// batch of them is encoded.
pub struct Signal<T> {
    pub what: &'static str,
    pub encode: Encode<T>,
}

/// Sends batches until every sender is gone. A batch waits at most `delay` for
/// others to fill it; a flush request (`flushes`) sends whatever is queued at
/// once and is answered when that is done. A batch the collector does not take is
/// dropped (counted, logged once per run of failures): items never pile up.
pub async fn export<T: Send>(
    mut rx: mpsc::Receiver<T>,
    mut flushes: mpsc::Receiver<oneshot::Sender<()>>,
    target: HttpTarget,
    signal: Signal<T>,
    delay: Duration,
    dropped: Arc<AtomicU64>,
) {
    let mut failing = false;
    loop {
        let mut batch = Vec::new();
        let mut flush = None;
        let mut open = true;
        tokio::select! {
            s = rx.recv() => match s {
                Some(s) => batch.push(s),
                None => return,
            },
            Some(f) = flushes.recv() => flush = Some(f),
        }
        if flush.is_none() {
            let deadline = tokio::time::sleep(delay);
            tokio::pin!(deadline);
            while batch.len() < MAX_BATCH {
                tokio::select! {
                    s = rx.recv() => match s {
                        Some(s) => batch.push(s),
                        None => {
                            open = false;
                            break;
                        }
                    },
                    Some(f) = flushes.recv() => {
                        flush = Some(f);
                        break;
                    }
                    _ = &mut deadline => break,
                }
            }
        }
        loop {
            if flush.is_some() {
                // Everything queued by now goes, in batches of at most MAX_BATCH.
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(s) => batch.push(s),
                        Err(_) => break,
                    }
                }
            }
            if batch.is_empty() {
                break;
            }
            let body = (signal.encode)(&batch);
            match target.send("application/x-protobuf", body).await {
                Ok(()) => {
                    if failing {
                        tracing::info!(url = %target.url(), "the collector takes {} again", signal.what);
                    }
                    failing = false;
                }
                Err(e) => {
                    dropped.fetch_add(batch.len() as u64, Ordering::Relaxed);
                    if !failing {
                        tracing::warn!(url = %target.url(), "{} could not be exported and are dropped: {e}", signal.what);
                    }
                    failing = true;
                }
            }
            batch.clear();
            if flush.is_none() {
                break;
            }
        }
        if let Some(f) = flush {
            let _ = f.send(());
        }
        if !open {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otel::span::{Attr, Kind};

    #[test]
    fn a_span_encodes_as_the_proto_says() {
        let s = SpanData {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent: None,
            name: "n".into(),
            kind: Kind::Server,
            start_unix_nanos: 5,
            end_unix_nanos: 6,
            attrs: vec![("b", Attr::Bool(true))],
            error: None,
        };
        let mut out = Vec::new();
        span(&mut out, &s);
        let mut want = vec![0x0a, 16];
        want.extend([1; 16]);
        want.extend([0x12, 8]);
        want.extend([2; 8]);
        want.extend([0x2a, 1, b'n', 0x30, 2, 0x39]);
        want.extend(5u64.to_le_bytes());
        want.push(0x41);
        want.extend(6u64.to_le_bytes());
        // attributes: KeyValue { key "b", value { bool_value true } }
        want.extend([0x4a, 7, 0x0a, 1, b'b', 0x12, 2, 0x10, 1]);
        assert_eq!(out, want);
    }
}
