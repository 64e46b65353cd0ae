//! The audit trail (H4): one record per tool call, written before its answer goes
//! out, to the store and to the optional JSON-lines stream.
//!
//! With no `[store]` and no `[audit] jsonl`, nothing here costs anything: no
//! record is built. When the store cannot take a record, it is retried in the
//! background a bounded number of times and, failing that, written whole to the
//! log and counted, never dropped silently.

use crate::config::{AuditConfig, Config};
use crate::logged::logged_whole;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
use warden_core::{CallReport, Caller};
use warden_store::{AuditRecord, Store, ToolDrift};

/// Retries for a record the store refused, before it is logged as lost.
const RECORD_RETRIES: u32 = 5;
/// How long a stopping gateway waits for records still being retried.
pub const FLUSH_AT_EXIT: Duration = Duration::from_secs(10);

pub struct AuditTrail {
    store: Option<Store>,
    jsonl: Option<Mutex<std::fs::File>>,
    redact: Vec<String>,
    /// Records that could not be stored (counted for metrics).
    pub lost: Arc<AtomicU64>,
    /// Records waiting for a retry.
    pub backlog: Arc<AtomicU64>,
    /// The records being retried, so that a gateway stopping before they are
    /// stored can still write them to the log.
    pending: Arc<Mutex<HashMap<u64, AuditRecord>>>,
    next: AtomicU64,
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
        Ok(AuditTrail {
            store,
            jsonl,
            redact: audit.redact.clone(),
            lost: Arc::new(AtomicU64::new(0)),
            backlog: Arc::new(AtomicU64::new(0)),
            pending: Arc::new(Mutex::new(HashMap::new())),
            next: AtomicU64::new(0),
        })
    }

    /// The store records go to, when there is one (the operator console reads it).
    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// Whether calls leave audit records (a store or a JSON-lines file is configured).
    pub fn on(&self) -> bool {
        self.store.is_some() || self.jsonl.is_some()
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

    /// Waits, at most `within`, until no record waits for a retry (the gateway
    /// is stopping: a record still in the backlog would be lost with the process).
    pub async fn flushed(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while self.backlog.load(Ordering::SeqCst) > 0 {
            if tokio::time::Instant::now() >= deadline {
                // The process ends before their retries: each goes to the log
                // whole, as one whose retries ran out does.
                let left: Vec<AuditRecord> = lock(&self.pending).drain().map(|(_, r)| r).collect();
                for record in left {
                    self.backlog.fetch_sub(1, Ordering::Relaxed);
                    self.lost.fetch_add(1, Ordering::Relaxed);
                    let line = serde_json::to_string(&record).unwrap_or_default();
                    tracing::error!(record = %logged_whole(&line), "audit record lost: the store had not taken it when the gateway stopped");
                }
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// Writes one record (stamped with the time now): to the store (before the
    /// answer), to the JSON-lines file.
    pub async fn record(&self, mut record: AuditRecord) {
        record.time = warden_store::format_rfc3339(SystemTime::now());
        if let Some(file) = &self.jsonl {
            let line = serde_json::to_string(&record).unwrap_or_default();
            let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = writeln!(f, "{line}").and_then(|_| f.flush()) {
                tracing::error!("audit.jsonl write failed: {e}");
            }
        }
        let Some(store) = &self.store else { return };
        if let Err(e) = store.record(&record).await {
            tracing::warn!("audit record not stored yet ({e}); retrying in the background");
            let (store, lost, backlog) = (store.clone(), self.lost.clone(), self.backlog.clone());
            let pending = self.pending.clone();
            let id = self.next.fetch_add(1, Ordering::Relaxed);
            // Counted before it can be found: whoever takes it out counts it down.
            backlog.fetch_add(1, Ordering::Relaxed);
            lock(&pending).insert(id, record.clone());
            tokio::spawn(async move {
                let mut delay = Duration::from_millis(100);
                for _ in 0..RECORD_RETRIES {
                    tokio::time::sleep(delay).await;
                    if store.record(&record).await.is_ok() {
                        if lock(&pending).remove(&id).is_some() {
                            backlog.fetch_sub(1, Ordering::Relaxed);
                        } else {
                            // The stopping gateway had given up on it and logged it.
                            tracing::info!(time = %record.time, tool = %crate::logged::logged(&record.tool), "an audit record logged as lost at the stop was stored after all");
                        }
                        return;
                    }
                    delay *= 2;
                }
                // Taken already when the gateway stopped, and logged then.
                if lock(&pending).remove(&id).is_none() {
                    return;
                }
                backlog.fetch_sub(1, Ordering::Relaxed);
                lost.fetch_add(1, Ordering::Relaxed);
                let line = serde_json::to_string(&record).unwrap_or_default();
                tracing::error!(record = %logged_whole(&line), "audit record lost: the store refused it {RECORD_RETRIES} times");
            });
        }
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
