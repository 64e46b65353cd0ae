//! Audit records as OpenTelemetry log records (T5), for the log pipeline a
//! team already runs: each record goes, off the call path, as a protobuf
//! `ExportLogsServiceRequest` to `<endpoint>/v1/logs`.
//!
//! Where they go: `[audit] otlp` in the config (a base URL), else
//! `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` (the full URL, used as it is). Unlike
//! spans, records do not follow `OTEL_EXPORTER_OTLP_ENDPOINT` alone: they hold
//! callers' arguments, and a collector set up for traces does not get them
//! unasked. `OTEL_SDK_DISABLED=true` or `OTEL_LOGS_EXPORTER=none` turn the
//! export off. Headers come from `OTEL_EXPORTER_OTLP_LOGS_HEADERS`, else
//! `OTEL_EXPORTER_OTLP_HEADERS`; the service is named as for traces. Records
//! wait at most `OTEL_BLRP_SCHEDULE_DELAY` milliseconds (1000 unless set) for
//! others to fill a batch.
//!
//! The store stays the record of truth: a full queue or a collector that does
//! not take a batch drops records and counts them
//! (`warden_audit_otlp_dropped_total`), never waits.

use super::otlp::{self, Signal};
use super::proto::{
    bytes_field, key_value, message, resource, scope, tag, varint, FIXED64, VARINT,
};
use super::span::Attr;
use super::{export_headers, schedule_delay, ExportHeaders};
use crate::net::target::HttpTarget;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Records waiting for export at most; more are dropped.
pub const QUEUE: usize = 8192;
/// How long one export request may take.
const EXPORT_TIMEOUT_MS: u64 = 10_000;
/// How long a record may wait for others to fill its batch, unless
/// `OTEL_BLRP_SCHEDULE_DELAY` says otherwise (the conventions' default).
pub const BATCH_DELAY: Duration = Duration::from_millis(1000);
/// `SeverityNumber` INFO.
const INFO: u64 = 9;

/// Where audit records go, resolved from the config and the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct LogSettings {
    /// The full URL records are POSTed to.
    pub url: String,
    pub service_name: String,
    pub delay: Duration,
    pub headers: ExportHeaders,
}

impl LogSettings {
    /// `None`: no export. `endpoint`: `[audit] otlp`; `service_name`:
    /// `[traces] service_name`; `env` reads an environment variable.
    pub fn resolve(
        endpoint: Option<&str>,
        service_name: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Option<LogSettings> {
        let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
            || set("OTEL_LOGS_EXPORTER").is_some_and(|v| v.trim() == "none")
        {
            return None;
        }
        let url = match endpoint {
            Some(base) => logs_url(base),
            None => set("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")?.trim().to_owned(),
        };
        let delay = schedule_delay(&set, "OTEL_BLRP_SCHEDULE_DELAY", BATCH_DELAY);
        let headers = export_headers(&set, "OTEL_EXPORTER_OTLP_LOGS_HEADERS");
        Some(LogSettings {
            url,
            service_name: service_name
                .map(str::to_owned)
                .or_else(|| set("OTEL_SERVICE_NAME"))
                .unwrap_or_else(|| "mcp-warden".to_owned()),
            delay,
            headers,
        })
    }
}

/// A base endpoint's logs URL: `<base>/v1/logs` (the OTLP/HTTP convention).
pub fn logs_url(base: &str) -> String {
    format!("{}/v1/logs", base.trim().trim_end_matches('/'))
}

/// One audit record as a log record.
#[derive(Debug, Clone)]
pub struct LogItem {
    pub time_unix_nanos: u64,
    /// The record as its JSON line.
    pub body: String,
    /// The fields a pipeline filters on, as attributes too.
    pub attrs: Vec<(&'static str, Attr)>,
    /// The call's trace and span, when it was traced.
    pub trace: Option<([u8; 16], [u8; 8])>,
}

/// `LogRecord`: time_unix_nano = 1 and observed_time_unix_nano = 11 (fixed64),
/// severity_number = 2, severity_text = 3, body = 5, attributes = 6,
/// trace_id = 9, span_id = 10, event_name = 12.
fn log_record(out: &mut Vec<u8>, item: &LogItem) {
    tag(out, 1, FIXED64);
    out.extend_from_slice(&item.time_unix_nanos.to_le_bytes());
    tag(out, 2, VARINT);
    varint(out, INFO);
    bytes_field(out, 3, b"INFO");
    message(out, 5, |v| bytes_field(v, 1, item.body.as_bytes()));
    for (k, v) in &item.attrs {
        key_value(out, 6, k, v);
    }
    if let Some((trace_id, span_id)) = &item.trace {
        bytes_field(out, 9, trace_id);
        bytes_field(out, 10, span_id);
    }
    tag(out, 11, FIXED64);
    out.extend_from_slice(&item.time_unix_nanos.to_le_bytes());
    bytes_field(out, 12, b"mcp_warden.audit");
}

/// `ExportLogsServiceRequest { repeated ResourceLogs resource_logs = 1 }` with
/// one resource (this gateway) and one scope.
pub fn encode(service_name: &str, items: &[LogItem]) -> Vec<u8> {
    let mut out = Vec::with_capacity(items.iter().map(|i| i.body.len() + 160).sum());
    message(&mut out, 1, |rl| {
        // ResourceLogs.resource = 1
        message(rl, 1, |r| resource(r, service_name));
        // ResourceLogs.scope_logs = 2: ScopeLogs { scope = 1; repeated LogRecord log_records = 2 }
        message(rl, 2, |sl| {
            message(sl, 1, scope);
            for item in items {
                message(sl, 2, |m| log_record(m, item));
            }
        });
    });
    out
}

/// The running export: records are offered, never waited for.
pub struct LogExport {
    tx: mpsc::Sender<LogItem>,
    flushes: mpsc::Sender<oneshot::Sender<()>>,
    /// Records dropped: the queue was full or the collector did not take them.
    pub dropped: Arc<AtomicU64>,
}

impl LogExport {
    /// Starts exporting to `settings` (inside a Tokio runtime).
    pub fn start(settings: &LogSettings, dropped: Arc<AtomicU64>) -> Result<LogExport, String> {
        let target = HttpTarget::parse(&settings.url, EXPORT_TIMEOUT_MS)
            .map_err(|e| format!("audit.otlp: the OTLP endpoint {e}"))?
            .with_headers(&settings.headers.0);
        let (tx, rx) = mpsc::channel(QUEUE);
        let (flushes, flush_rx) = mpsc::channel(4);
        let service_name = settings.service_name.clone();
        let signal = Signal {
            what: "audit records",
            encode: Box::new(move |items: &[LogItem]| encode(&service_name, items)),
        };
        let delay = settings.delay;
        tokio::spawn(otlp::export(
            rx,
            flush_rx,
            target,
            signal,
            delay,
            dropped.clone(),
        ));
        Ok(LogExport {
            tx,
            flushes,
            dropped,
        })
    }

    /// Queues one record; a full queue drops it (counted, and logged without
    /// its contents: the store holds it).
    pub fn offer(&self, item: LogItem) {
        if self.tx.try_send(item).is_err() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed);
            if n.is_power_of_two() || n == 0 {
                tracing::warn!(
                    dropped = n + 1,
                    "audit records dropped from the OTLP export: its queue ({QUEUE}) is full"
                );
            }
        }
    }

    /// Exports what is queued, waiting at most `within` for the collector.
    pub async fn flush(&self, within: Duration) -> bool {
        let (done, answered) = oneshot::channel();
        if self.flushes.send(done).await.is_err() {
            return false;
        }
        tokio::time::timeout(within, answered).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(endpoint: Option<&str>, vars: &[(&str, &str)]) -> Option<LogSettings> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LogSettings::resolve(endpoint, None, |k| vars.get(k).cloned())
    }

    #[test]
    fn records_go_where_the_config_or_the_logs_variable_says_and_nowhere_unasked() {
        let url = |s: Option<LogSettings>| s.map(|s| s.url);
        assert_eq!(
            url(resolve(Some("http://c:4318/"), &[])).as_deref(),
            Some("http://c:4318/v1/logs")
        );
        let full = [("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://l:1/custom")];
        assert_eq!(
            url(resolve(None, &full)).as_deref(),
            Some("http://l:1/custom")
        );
        // The base endpoint alone is for traces: records hold callers' arguments.
        assert_eq!(
            resolve(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]),
            None
        );
        assert_eq!(resolve(None, &[]), None);
        for off in [
            ("OTEL_SDK_DISABLED", "TRUE"),
            ("OTEL_LOGS_EXPORTER", "none"),
        ] {
            assert_eq!(resolve(Some("http://c:4318"), &[off]), None, "{off:?}");
        }
    }

    #[test]
    fn headers_delay_and_service_name_follow_the_conventions() {
        let s = resolve(
            Some("http://c:4318"),
            &[
                ("OTEL_EXPORTER_OTLP_HEADERS", "a=1"),
                ("OTEL_EXPORTER_OTLP_LOGS_HEADERS", "b=2"),
                ("OTEL_BLRP_SCHEDULE_DELAY", "50"),
                ("OTEL_SERVICE_NAME", "edge"),
            ],
        )
        .unwrap();
        assert_eq!(s.headers.0, vec![("b".to_owned(), "2".to_owned())]);
        assert_eq!(s.delay, Duration::from_millis(50));
        assert_eq!(s.service_name, "edge");
        let s = resolve(
            Some("http://c:4318"),
            &[("OTEL_EXPORTER_OTLP_HEADERS", "a=1")],
        )
        .unwrap();
        assert_eq!(s.headers.0, vec![("a".to_owned(), "1".to_owned())]);
        assert_eq!(
            (s.delay, s.service_name.as_str()),
            (BATCH_DELAY, "mcp-warden")
        );
    }

    #[test]
    fn a_record_encodes_as_the_proto_says() {
        let item = LogItem {
            time_unix_nanos: 7,
            body: "{}".into(),
            attrs: vec![("t", Attr::from("x"))],
            trace: Some(([1; 16], [2; 8])),
        };
        let mut out = Vec::new();
        log_record(&mut out, &item);
        let mut want = vec![0x09];
        want.extend(7u64.to_le_bytes());
        want.extend([0x10, 9, 0x1a, 4]);
        want.extend(b"INFO");
        // body: AnyValue { string_value "{}" }
        want.extend([0x2a, 4, 0x0a, 2, b'{', b'}']);
        // attributes: KeyValue { key "t", value { string_value "x" } }
        want.extend([0x32, 8, 0x0a, 1, b't', 0x12, 3, 0x0a, 1, b'x']);
        want.extend([0x4a, 16]);
        want.extend([1; 16]);
        want.extend([0x52, 8]);
        want.extend([2; 8]);
        want.push(0x59);
        want.extend(7u64.to_le_bytes());
        want.extend([0x62, 16]);
        want.extend(b"mcp_warden.audit");
        assert_eq!(out, want);
    }
}
