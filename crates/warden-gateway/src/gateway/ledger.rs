//! The idempotency ledger (I1, I2): a call carrying a key in `_meta` claims it
//! (scoped by caller) before it runs; a completed key answers with the stored
//! result, a running one is refused, a key reused for another call is rejected.
//! The store decides atomically, so one key runs once across replicas.
//!
//! A claim is held under a lease that this gateway renews while the call runs
//! ([`Held`]). Should the gateway die mid-call, the renewals stop, and once the
//! lease has run out the attempt is abandoned: nobody knows whether it took
//! effect, so the key answers that its outcome is unknown and never runs again,
//! unless its tool is declared safe to repeat (`rerun_abandoned`): then the next
//! claim takes the key over and runs the call.

use crate::config::{parse_duration, IdempotencyConfig};
use crate::logged::logged;
use serde_json::Value;
use std::time::Duration;
use tokio::task::AbortHandle;
use warden_core::Meta;
use warden_store::{Claim, Finish, OnAbandoned, Store, StoreError};

/// (scope, key): the caller the key is scoped to, and the key.
pub type LedgerKey = (String, String);

/// The most a lease adds to the call's timeout.
const LEASE_MARGIN: Duration = Duration::from_secs(30);

/// How long a claim of a call to an upstream with this timeout holds its key
/// without renewal: the timeout, plus as much again up to [`LEASE_MARGIN`]. A call
/// may wait its timeout to be queued upstream and again for its answer; the
/// margin also absorbs the store's latency. Renewal covers calls that pause for
/// longer (a 2026-07-28 input round), so this bounds how long a key stays blocked
/// after its gateway died.
pub fn lease_for(timeout_ms: u64) -> Duration {
    let timeout = Duration::from_millis(timeout_ms);
    timeout + timeout.min(LEASE_MARGIN)
}

/// A key this gateway holds for a call in flight. Its lease is renewed in the
/// background every third of the lease until the call settles, or until this is
/// dropped should the call never settle (then the lease runs out and the key
/// becomes retryable).
pub struct Held {
    key: LedgerKey,
    renewal: Option<AbortHandle>,
}

impl Held {
    fn stop_renewal(&self) {
        if let Some(r) = &self.renewal {
            r.abort();
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.stop_renewal();
    }
}

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

    /// I1: claims the key for this call, under a lease of `lease` (see [`lease_for`]);
    /// `abandoned` says what becomes of a key whose attempt was abandoned.
    pub async fn claim(
        &self,
        key: &LedgerKey,
        (tool, args): (&str, &Value),
        lease: Duration,
        abandoned: OnAbandoned,
    ) -> Result<Claim, StoreError> {
        let store = self
            .store
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("no store".into()))?;
        let fingerprint = fingerprint(tool, args);
        store
            .claim_leased(
                &key.0,
                &key.1,
                &fingerprint,
                self.retention,
                lease,
                abandoned,
            )
            .await
    }

    /// Holds a key this gateway claimed: renews its lease every third of it until
    /// the call settles ([`Ledger::settle`]) or the [`Held`] is dropped.
    pub fn hold(&self, key: LedgerKey, lease: Duration) -> Held {
        let renewal = self.store.clone().map(|store| {
            let (scope, k) = key.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(lease / 3).await;
                    match store.renew(&scope, &k, lease).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(scope = %logged(&scope), key = %logged(&k), "a running call lost its idempotency key: its lease ran out, and a later claim found the call abandoned");
                            return;
                        }
                        // The next renewal may get through before the lease runs out.
                        Err(e) => {
                            tracing::warn!(scope = %logged(&scope), key = %logged(&k), "a running call's lease could not be renewed: {e}")
                        }
                    }
                }
            })
            .abort_handle()
        });
        Held { key, renewal }
    }

    /// Records how a claimed call ended, and stops renewing its lease. A failure
    /// to record it is logged: the key then stays "running" until its lease runs
    /// out, after which it answers that the outcome is unknown (or, for a tool
    /// declared safe to repeat, a retry runs the call again).
    pub async fn settle(&self, held: &Held, finish: Finish) {
        held.stop_renewal();
        let Some(store) = &self.store else { return };
        let (scope, key) = &held.key;
        match store.finish(scope, key, finish).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(scope = %logged(scope), key = %logged(key), "a call's end is not recorded in the ledger: its lease ran out, and a later claim found the call abandoned")
            }
            Err(e) => {
                tracing::error!(scope = %logged(scope), key = %logged(key), "the ledger could not record a call's end: {e}")
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
    fn a_lease_is_the_timeout_and_a_margin_of_at_most_30_s() {
        assert_eq!(lease_for(1_000), Duration::from_secs(2));
        assert_eq!(lease_for(60_000), Duration::from_secs(90));
        assert_eq!(lease_for(600_000), Duration::from_secs(630));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_held_key_is_renewed_until_it_settles_or_is_dropped() {
        let dir = std::env::temp_dir().join(format!("warden-ledger-hold-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ledger.db");
        // This gateway's ledger, and another gateway's store on the same file.
        let config = IdempotencyConfig::default();
        let mine = Ledger::new(Some(Store::open(&path).unwrap()), &config);
        let other = Store::open(&path).unwrap();
        let (lease, day) = (Duration::from_millis(300), Duration::from_secs(86_400));
        let fp = fingerprint("t", &json!({}));
        let rerun = OnAbandoned::Rerun;
        let theirs = |key: &'static str| other.claim_leased("alice", key, &fp, day, lease, rerun);

        let key = ("alice".to_owned(), "settled".to_owned());
        let claim = mine
            .claim(&key, ("t", &json!({})), lease, rerun)
            .await
            .unwrap();
        assert_eq!(claim, Claim::Run);
        let held = mine.hold(key, lease);
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert_eq!(
            theirs("settled").await.unwrap(),
            Claim::Running,
            "renewed past its first lease"
        );
        mine.settle(&held, Finish::Completed(json!("done"))).await;
        assert_eq!(
            theirs("settled").await.unwrap(),
            Claim::Replay(json!("done"))
        );

        let key = ("alice".to_owned(), "dropped".to_owned());
        let claim = mine
            .claim(&key, ("t", &json!({})), lease, rerun)
            .await
            .unwrap();
        assert_eq!(claim, Claim::Run);
        let held = mine.hold(key, lease);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(theirs("dropped").await.unwrap(), Claim::Running);
        drop(held);
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(
            theirs("dropped").await.unwrap(),
            Claim::TakenOver,
            "no longer renewed"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

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
