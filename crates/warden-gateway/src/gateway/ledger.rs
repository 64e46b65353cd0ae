//! The idempotency ledger (I1, I2): a call carrying a key in `_meta` claims it
//! (scoped by caller) before it runs; a completed key answers with the stored
//! result, a running one is refused, a key reused for another call is rejected.
//! The store decides atomically, so one key runs once across replicas.

use crate::config::{parse_duration, IdempotencyConfig};
use crate::logged::logged;
use serde_json::Value;
use std::time::Duration;
use warden_core::Meta;
use warden_store::{Claim, Finish, Store, StoreError};

/// (scope, key): the caller the key is scoped to, and the key.
pub type LedgerKey = (String, String);

pub struct Ledger {
    store: Option<Store>,
    meta_key: String,
    retention: Duration,
}

impl Ledger {
    pub fn new(store: Option<Store>, config: &IdempotencyConfig) -> Ledger {
        Ledger {
            store,
            meta_key: config.meta_key.clone(),
            retention: parse_duration(&config.retention).unwrap_or(Duration::from_secs(86_400)),
        }
    }

    /// The call's ledger key, when the ledger is on and `_meta` carries a non-empty
    /// string under the configured key (other types are ignored).
    pub fn key_of(&self, caller: &str, meta: &Meta) -> Option<LedgerKey> {
        self.store.as_ref()?;
        meta.get_str(&self.meta_key)
            .filter(|k| !k.is_empty())
            .map(|k| (caller.to_owned(), k.to_owned()))
    }

    /// I1: claims the key for this call.
    pub async fn claim(
        &self,
        key: &LedgerKey,
        tool: &str,
        args: &Value,
    ) -> Result<Claim, StoreError> {
        let store = self
            .store
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("no store".into()))?;
        store
            .claim(&key.0, &key.1, &fingerprint(tool, args), self.retention)
            .await
    }

    /// Records how a claimed call ended; a failure here is logged (the key then
    /// stays "running" until it expires, so a retry is refused rather than run twice).
    pub async fn settle(&self, key: &LedgerKey, finish: Finish) {
        if let Some(store) = &self.store {
            if let Err(e) = store.finish(&key.0, &key.1, finish).await {
                tracing::error!(scope = %logged(&key.0), key = %logged(&key.1), "the ledger could not record a call's end: {}", logged(&e));
            }
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
}
