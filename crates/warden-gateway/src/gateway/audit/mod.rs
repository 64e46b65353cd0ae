//! The audit trail (H4, T1): one record per tool call, to the store and to the
//! optional JSON-lines streams (a file, stdout) and OTLP log export (T5).
//!
//! With no `[store]` and no `[audit] jsonl`, nothing here costs anything: no
//! record is built. Records reach the store through one group-committing writer
//! ([`AuditWriter`]): with `durability = "sync"` a call's answer waits until its
//! record is committed, with `"async"` it only queues it, and a record the full
//! queue refuses is written whole to the log and counted. When the store cannot
//! take a record, it is retried in the background ([`retry`]).

use crate::config::{AuditConfig, Config, Durability};
use crate::logged::logged_whole;
use crate::otel::logs::{LogExport, LogItem, LogSettings};
use crate::otel::{Attr, SpanContext};
use serde_json::{Map, Value};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use warden_core::{CallReport, Caller};
use warden_store::{AuditRecord, AuditWriter, Store, ToolDrift};

mod retention;
mod retry;
use retry::Retries;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How long a stopping gateway waits for queued records and records still
/// being retried.
pub const FLUSH_AT_EXIT: Duration = Duration::from_secs(10);

pub struct AuditTrail {
    store: Option<Store>,
    /// The store's writer and the retries of what it could not write.
    writer: Option<(AuditWriter, Arc<Retries>)>,
    durability: Durability,
    jsonl: Option<Mutex<std::fs::File>>,
    redact: Vec<String>,
    /// Records that could not be stored (counted for metrics).
    pub lost: Arc<AtomicU64>,
    /// Records waiting for a retry.
    pub backlog: Arc<AtomicU64>,
    /// Records the full queue refused (`durability = "async"`), logged whole.
    pub dropped: Arc<AtomicU64>,
    /// `[audit] stdout`, once the HTTP front serves (T4): never over stdio,
    /// nor for commands that print their own output there.
    stdout: std::sync::atomic::AtomicBool,
    /// Each record as an OpenTelemetry log record (T5).
    otlp: Option<LogExport>,
    /// Records the OTLP export dropped (a full queue, a collector that refused).
    pub otlp_dropped: Arc<AtomicU64>,
}

impl AuditTrail {
    /// Opens the JSON-lines file beside the store.
    pub fn open(
        store: Option<Store>,
        audit: &AuditConfig,
        config: &Config,
    ) -> Result<AuditTrail, String> {
        let jsonl = match &audit.jsonl {
            Some(p) => {
                let path = config.resolve_path(p);
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(|e| format!("audit.jsonl: cannot open {}: {e}", path.display()))?;
                Some(Mutex::new(file))
            }
            None => None,
        };
        let keep = audit.retention.as_deref().and_then(|r| {
            let d = crate::config::parse_duration(r).ok()?;
            Some((d, r.to_owned()))
        });
        if let (Some(store), Some((keep, text))) = (&store, keep) {
            retention::start(store.clone(), keep, text);
        }
        let otlp_dropped = Arc::new(AtomicU64::new(0));
        let otlp = Self::otlp(audit, config, otlp_dropped.clone())?;
        let (lost, backlog) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let writer = store.as_ref().map(|store| {
            let retries = Arc::new(Retries::new(store.clone(), lost.clone(), backlog.clone()));
            let again = retries.clone();
            let unstored: warden_store::Unstored = Arc::new(move |records, e| {
                tracing::warn!(
                    "{} audit record(s) not stored yet ({e}); retrying in the background",
                    records.len()
                );
                records.into_iter().for_each(|r| again.later(r));
            });
            (AuditWriter::start(store.clone(), unstored), retries)
        });
        Ok(AuditTrail {
            store,
            writer,
            durability: audit.durability,
            jsonl,
            redact: audit.redact.clone(),
            lost,
            backlog,
            dropped: Arc::new(AtomicU64::new(0)),
            stdout: std::sync::atomic::AtomicBool::new(false),
            otlp,
            otlp_dropped,
        })
    }

    /// Starts the OTLP export of records when the config or the environment
    /// asks for it (T5).
    fn otlp(
        audit: &AuditConfig,
        config: &Config,
        dropped: Arc<AtomicU64>,
    ) -> Result<Option<LogExport>, String> {
        let service = config.traces.service_name.as_deref();
        let env = |k: &str| std::env::var(k).ok();
        let Some(settings) = LogSettings::resolve(audit.otlp.as_deref(), service, env) else {
            return Ok(None);
        };
        let export = LogExport::start(&settings, dropped)?;
        tracing::info!(url = %settings.url, "audit records are exported over OTLP/HTTP as log records");
        Ok(Some(export))
    }

    /// Writes each record to stdout as well, from now on (T4): the HTTP front
    /// calls this when `[audit] stdout` is set.
    pub fn to_stdout(&self) {
        self.stdout.store(true, Ordering::Relaxed);
    }

    /// The store records go to, when there is one (the operator console reads it).
    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// Whether calls leave audit records (a store, a JSON-lines stream or an
    /// OTLP export is configured).
    pub fn on(&self) -> bool {
        self.store.is_some()
            || self.jsonl.is_some()
            || self.stdout.load(Ordering::Relaxed)
            || self.otlp.is_some()
    }

    /// What every record of one call shares: who, which tool, the arguments as
    /// sent (redacted) and what the argument stages noticed. Decision, outcome,
    /// time and duration are filled in when the call settles.
    #[allow(clippy::too_many_arguments)]
    pub fn template(
        &self,
        session: &str,
        caller: Option<&Caller>,
        tool: &str,
        upstream: Option<&str>,
        server: Option<&str>,
        arguments: &Map<String, Value>,
        report: &CallReport,
        idempotency_key: Option<String>,
    ) -> AuditRecord {
        AuditRecord {
            time: String::new(),
            session: session.to_owned(),
            caller: caller.map(|c| c.name.clone()),
            tool: tool.to_owned(),
            upstream: upstream.map(str::to_owned),
            server: server.map(str::to_owned),
            arguments: self.redacted(arguments),
            reason: report.reason.clone(),
            unknown_keys: report.unknown_keys.clone(),
            unknown_mode: report.unknown_mode.map(|m| m.to_string()),
            decision: String::new(),
            outcome: String::new(),
            duration_ms: 0.0,
            idempotency_key,
            replayed: false,
            error: None,
            credential: None,
            labels: Vec::new(),
            touched: Vec::new(),
            drift: None,
            findings: Vec::new(),
            approver: None,
            approval_note: None,
            shadow: report.shadow.map(|s| s.to_string()),
        }
    }

    /// The record of a tool definition that drifted from the pins lock, or that
    /// matches it again (P2). It is no call: no session, caller or arguments; the
    /// decision is `tool_drift` and the outcome the upstream's pins mode.
    pub fn drift(&self, upstream: &str, tool: &str, mode: &str, drift: ToolDrift) -> AuditRecord {
        AuditRecord {
            time: String::new(),
            session: String::new(),
            caller: None,
            tool: tool.to_owned(),
            upstream: Some(upstream.to_owned()),
            server: None,
            arguments: Value::Null,
            reason: None,
            unknown_keys: Vec::new(),
            unknown_mode: None,
            decision: "tool_drift".into(),
            outcome: mode.to_owned(),
            duration_ms: 0.0,
            idempotency_key: None,
            replayed: false,
            error: None,
            credential: None,
            labels: Vec::new(),
            touched: Vec::new(),
            drift: Some(drift),
            findings: Vec::new(),
            approver: None,
            approval_note: None,
            shadow: None,
        }
    }

    /// The arguments as recorded: configured keys redacted, at any depth.
    pub fn redacted(&self, args: &Map<String, Value>) -> Value {
        fn walk(v: &Value, redact: &[String]) -> Value {
            match v {
                Value::Object(m) => Value::Object(
                    m.iter()
                        .map(|(k, v)| {
                            let v = if redact.iter().any(|r| r == k) {
                                Value::String("[redacted]".into())
                            } else {
                                walk(v, redact)
                            };
                            (k.clone(), v)
                        })
                        .collect(),
                ),
                Value::Array(a) => Value::Array(a.iter().map(|v| walk(v, redact)).collect()),
                other => other.clone(),
            }
        }
        walk(&Value::Object(args.clone()), &self.redact)
    }

    /// Waits, at most `within`, until every queued record is written and none
    /// waits for a retry (the gateway is stopping: a record still waiting would
    /// be lost with the process); then logs where this replica's chain ends.
    pub async fn flushed(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        if let Some(otlp) = &self.otlp {
            if !otlp.flush(within).await {
                tracing::warn!("audit records were still being exported over OTLP after {within:?}; the rest are dropped");
            }
        }
        let Some((writer, retries)) = &self.writer else {
            return true;
        };
        let queued = tokio::time::timeout_at(deadline, writer.flush())
            .await
            .is_ok();
        let drained = retries.drained(deadline).await;
        if let Some(store) = &self.store {
            let heads = store.chain_heads().await;
            for (chain, records, head) in heads.into_iter().filter(|h| h.1 > 0) {
                tracing::info!(chain = %chain, records, head = %head, "audit chain head: keep it to check later that no record was dropped from the chain's end");
            }
        }
        if !queued {
            tracing::error!(
                queued = writer.queued(),
                "audit records still queued for the store when the gateway stopped"
            );
        }
        queued && drained
    }

    /// Writes one record (stamped with the time now): to the JSON-lines
    /// streams and the OTLP export (with `trace`, the call's span, when it was
    /// traced), and to the store, before the answer unless durability is async.
    pub async fn record(&self, mut record: AuditRecord, trace: Option<SpanContext>) {
        let now = SystemTime::now();
        record.time = warden_store::format_rfc3339(now);
        let stdout = self.stdout.load(Ordering::Relaxed);
        if self.jsonl.is_some() || stdout || self.otlp.is_some() {
            let line = serde_json::to_string(&record).unwrap_or_default();
            if let Some(file) = &self.jsonl {
                let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
                if let Err(e) = writeln!(f, "{line}").and_then(|_| f.flush()) {
                    tracing::error!("audit.jsonl write failed: {e}");
                }
            }
            if stdout {
                // One write per line, under stdout's lock: lines never interleave.
                let mut out = std::io::stdout().lock();
                if let Err(e) = writeln!(out, "{line}").and_then(|_| out.flush()) {
                    tracing::error!("audit record to stdout failed: {e}");
                }
            }
            if let Some(otlp) = &self.otlp {
                otlp.offer(log_item(&record, line, now, trace));
            }
        }
        let Some((writer, retries)) = &self.writer else {
            return;
        };
        match self.durability {
            Durability::Sync => match writer.append(record).await {
                Ok(()) => {}
                Err(warden_store::Unwritten(e, Some(record))) => {
                    tracing::warn!("audit record not stored yet ({e}); retrying in the background");
                    retries.later(*record);
                }
                Err(warden_store::Unwritten(e, None)) => {
                    self.lost.fetch_add(1, Ordering::Relaxed);
                    tracing::error!("audit record lost: {e}");
                }
            },
            Durability::Async => {
                if let Err(record) = writer.offer(record) {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                    let line = serde_json::to_string(&record).unwrap_or_default();
                    tracing::error!(record = %logged_whole(&line), "audit record dropped: the queue to the store is full ({} records)", warden_store::QUEUE);
                }
            }
        }
    }
}

/// A record as an OTLP log record: its JSON line as the body, what a pipeline
/// filters on as attributes, and the call's trace (T5).
fn log_item(
    record: &AuditRecord,
    line: String,
    at: SystemTime,
    trace: Option<SpanContext>,
) -> LogItem {
    let mut attrs = vec![
        ("mcp.tool.name", Attr::from(record.tool.as_str())),
        ("warden.decision", Attr::from(record.decision.as_str())),
        ("warden.outcome", Attr::from(record.outcome.as_str())),
    ];
    if let Some(caller) = &record.caller {
        attrs.push(("warden.caller", Attr::from(caller.as_str())));
    }
    if let Some(upstream) = &record.upstream {
        attrs.push(("warden.upstream", Attr::from(upstream.as_str())));
    }
    let nanos = at.duration_since(SystemTime::UNIX_EPOCH);
    LogItem {
        time_unix_nanos: nanos.map_or(0, |d| d.as_nanos() as u64),
        body: line,
        attrs,
        trace: trace.map(|t| (t.trace_id, t.span_id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn redaction_reaches_nested_keys() {
        let config = Config::parse("[audit]\nredact = [\"password\"]\n", "w.toml").unwrap();
        let trail = AuditTrail::open(None, &config.audit, &config).unwrap();
        let args = json!({"user": "a", "password": "p", "nested": {"password": "q", "ok": [{"password": 1}]}});
        assert_eq!(
            trail.redacted(args.as_object().unwrap()),
            json!({"user": "a", "password": "[redacted]", "nested": {"password": "[redacted]", "ok": [{"password": "[redacted]"}]}})
        );
    }
}
