//! The gateway's durable side: the idempotency ledger (I1, I2) and the audit
//! trail (H4), over [`warden_store`], plus the optional JSON-lines stream.
//!
//! With no `[store]` and no `[audit] jsonl`, nothing here costs anything: no
//! record is built. A record is written before the answer goes out; when the
//! store cannot take it, it is retried in the background a bounded number of
//! times and, failing that, written whole to the log and counted, never dropped
//! silently.

use crate::config::{parse_duration, Config};
use serde_json::{Map, Value};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use warden_core::{CallReport, Caller, Meta};
use warden_store::{AuditRecord, Claim, Finish, Store, StoreError};

/// Retries for a record the store refused, before it is logged as lost.
const RECORD_RETRIES: u32 = 5;

pub struct Trail {
    store: Option<Store>,
    jsonl: Option<Mutex<std::fs::File>>,
    redact: Vec<String>,
    meta_key: String,
    retention: Duration,
    /// Audit records that could not be stored (counted for metrics).
    pub lost: Arc<AtomicU64>,
    /// Audit records waiting for a retry.
    pub backlog: Arc<AtomicU64>,
}

/// What every audit record of one call shares.
#[derive(Debug, Clone)]
pub struct AuditBase {
    pub session: String,
    pub caller: Option<String>,
    pub tool: String,
    pub upstream: Option<String>,
    pub arguments: Value,
    pub reason: Option<String>,
    pub unknown_keys: Vec<String>,
    pub unknown_mode: Option<String>,
    pub idempotency_key: Option<String>,
}

impl AuditBase {
    /// The shared part of a call's records: the arguments as sent (redacted), and
    /// what the argument stages noticed.
    /// `who` is the session's label and the caller it acts for.
    pub fn new(
        trail: &Trail,
        who: (&str, Option<&Caller>),
        tool: &str,
        upstream: Option<&str>,
        arguments: &Map<String, Value>,
        report: &CallReport,
        idempotency_key: Option<String>,
    ) -> Self {
        AuditBase {
            session: who.0.to_owned(),
            caller: who.1.map(|c| c.name.clone()),
            tool: tool.to_owned(),
            upstream: upstream.map(str::to_owned),
            arguments: trail.redacted(arguments),
            reason: report.reason.clone(),
            unknown_keys: report.unknown_keys.clone(),
            unknown_mode: report.unknown_mode.map(|m| m.to_string()),
            idempotency_key,
        }
    }
}

impl Trail {
    /// Opens the configured store (creating and migrating it) and the JSON-lines file.
    pub async fn open(config: &Config) -> Result<Trail, String> {
        let store: Option<Store> = config.open_store().await?;
        let jsonl = match &config.audit.jsonl {
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
        Ok(Trail {
            store,
            jsonl,
            redact: config.audit.redact.clone(),
            meta_key: config.idempotency.meta_key.clone(),
            retention: parse_duration(&config.idempotency.retention)
                .unwrap_or(Duration::from_secs(86_400)),
            lost: Arc::new(AtomicU64::new(0)),
            backlog: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Whether calls leave audit records (a store or a JSON-lines file is configured).
    pub fn audits(&self) -> bool {
        self.store.is_some() || self.jsonl.is_some()
    }

    /// The call's idempotency key, when the ledger is on and `_meta` carries a
    /// non-empty string under the configured key (other types are ignored).
    pub fn idempotency_key(&self, meta: &Meta) -> Option<String> {
        self.store.as_ref()?;
        meta.get_str(&self.meta_key)
            .filter(|k| !k.is_empty())
            .map(str::to_owned)
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

    /// I1: claims the key for this call (scoped by caller).
    pub async fn claim(
        &self,
        scope: &str,
        key: &str,
        tool: &str,
        args: &Value,
    ) -> Result<Claim, StoreError> {
        let store = self
            .store
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("no store".into()))?;
        store
            .claim(scope, key, &fingerprint(tool, args), self.retention)
            .await
    }

    /// Records how a claimed call ended; a failure here is logged (the key then
    /// stays "running" until it expires, so a retry is refused rather than run twice).
    pub async fn finish(&self, scope: &str, key: &str, finish: Finish) {
        if let Some(store) = &self.store {
            if let Err(e) = store.finish(scope, key, finish).await {
                tracing::error!(%scope, %key, "the ledger could not record a call's end: {e}");
            }
        }
    }

    /// Writes one record: to the store (before the answer), to the JSON-lines file.
    pub async fn record(
        &self,
        base: &AuditBase,
        decision: &str,
        outcome: &str,
        duration_ms: f64,
        replayed: bool,
    ) {
        let record = AuditRecord {
            time: warden_store::format_rfc3339(SystemTime::now()),
            session: base.session.clone(),
            caller: base.caller.clone(),
            tool: base.tool.clone(),
            upstream: base.upstream.clone(),
            arguments: base.arguments.clone(),
            reason: base.reason.clone(),
            unknown_keys: base.unknown_keys.clone(),
            unknown_mode: base.unknown_mode.clone(),
            decision: decision.to_owned(),
            outcome: outcome.to_owned(),
            duration_ms,
            idempotency_key: base.idempotency_key.clone(),
            replayed,
        };
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
            backlog.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let mut delay = Duration::from_millis(100);
                for _ in 0..RECORD_RETRIES {
                    tokio::time::sleep(delay).await;
                    if store.record(&record).await.is_ok() {
                        backlog.fetch_sub(1, Ordering::Relaxed);
                        return;
                    }
                    delay *= 2;
                }
                backlog.fetch_sub(1, Ordering::Relaxed);
                lost.fetch_add(1, Ordering::Relaxed);
                let line = serde_json::to_string(&record).unwrap_or_default();
                tracing::error!(record = %line, "audit record lost: the store refused it {RECORD_RETRIES} times");
            });
        }
    }
}

/// Identifies a call for the ledger: the tool and its arguments, key order aside.
fn fingerprint(tool: &str, args: &Value) -> String {
    fn canonical(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    canonical(&m[k.as_str()], out);
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    canonical(v, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut text = String::new();
    canonical(args, &mut text);
    // Two independent 64-bit FNV-1a hashes (different offsets) of tool and arguments.
    let hash = |seed: u64| {
        tool.bytes()
            .chain([0u8])
            .chain(text.bytes())
            .fold(seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3))
    };
    format!(
        "{:016x}{:016x}",
        hash(0xcbf29ce484222325),
        hash(0x84222325cbf29ce4)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fingerprints_ignore_key_order_only() {
        let a = fingerprint("t", &json!({"a": 1, "b": [1, {"y": 2, "x": 1}]}));
        let b = fingerprint("t", &json!({"b": [1, {"x": 1, "y": 2}], "a": 1}));
        assert_eq!(a, b);
        assert_ne!(
            a,
            fingerprint("u", &json!({"a": 1, "b": [1, {"y": 2, "x": 1}]}))
        );
        assert_ne!(
            a,
            fingerprint("t", &json!({"a": 2, "b": [1, {"y": 2, "x": 1}]}))
        );
        assert_ne!(
            fingerprint("t", &json!({"a": [1, 2]})),
            fingerprint("t", &json!({"a": [2, 1]}))
        );
    }

    #[test]
    fn redaction_reaches_nested_keys() {
        let config = Config::parse("[audit]\nredact = [\"password\"]\n", "w.toml").unwrap();
        let trail = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(Trail::open(&config))
            .unwrap();
        let args = json!({"user": "a", "password": "p", "nested": {"password": "q", "ok": [{"password": 1}]}});
        assert_eq!(
            trail.redacted(args.as_object().unwrap()),
            json!({"user": "a", "password": "[redacted]", "nested": {"password": "[redacted]", "ok": [{"password": "[redacted]"}]}})
        );
    }
}
