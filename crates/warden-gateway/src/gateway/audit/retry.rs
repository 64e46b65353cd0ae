//! Audit records the store did not take (it is down, its disk is full): retried
//! in the background a bounded number of times, then written to the log whole
//! and counted, never dropped silently (H4). A stopping gateway waits for them a
//! while, then logs what is left.

use super::lock;
use crate::logged::{logged, logged_whole};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_store::{AuditRecord, Store};

/// Retries for a record the store refused, before it is logged as lost.
const RECORD_RETRIES: u32 = 5;

/// The records being retried, and the counters metrics read.
pub(super) struct Retries {
    store: Store,
    /// Records that could not be stored (counted for metrics).
    pub(super) lost: Arc<AtomicU64>,
    /// Records waiting for a retry.
    pub(super) backlog: Arc<AtomicU64>,
    /// The records being retried, so that a gateway stopping before they are
    /// stored can still write them to the log.
    pending: Mutex<HashMap<u64, AuditRecord>>,
    next: AtomicU64,
}

impl Retries {
    pub(super) fn new(store: Store, lost: Arc<AtomicU64>, backlog: Arc<AtomicU64>) -> Retries {
        Retries {
            store,
            lost,
            backlog,
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        }
    }

    /// Retries `record` in the background, with a growing pause.
    pub(super) fn later(self: &Arc<Self>, record: AuditRecord) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        // Counted before it can be found: whoever takes it out counts it down.
        self.backlog.fetch_add(1, Ordering::Relaxed);
        lock(&self.pending).insert(id, record.clone());
        let me = self.clone();
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(100);
            for _ in 0..RECORD_RETRIES {
                tokio::time::sleep(delay).await;
                if me.store.record(&record).await.is_ok() {
                    if lock(&me.pending).remove(&id).is_some() {
                        me.backlog.fetch_sub(1, Ordering::Relaxed);
                    } else {
                        // The stopping gateway had given up on it and logged it.
                        tracing::info!(time = %record.time, tool = %logged(&record.tool), "an audit record logged as lost at the stop was stored after all");
                    }
                    return;
                }
                delay *= 2;
            }
            // Taken already when the gateway stopped, and logged then.
            if lock(&me.pending).remove(&id).is_none() {
                return;
            }
            me.backlog.fetch_sub(1, Ordering::Relaxed);
            me.lost.fetch_add(1, Ordering::Relaxed);
            let line = serde_json::to_string(&record).unwrap_or_default();
            tracing::error!(record = %logged_whole(&line), "audit record lost: the store refused it {RECORD_RETRIES} times");
        });
    }

    /// Waits until `deadline` for the backlog to empty; what is left then goes
    /// to the log whole, as one whose retries ran out does. False: some did.
    pub(super) async fn drained(&self, deadline: tokio::time::Instant) -> bool {
        while self.backlog.load(Ordering::SeqCst) > 0 {
            if tokio::time::Instant::now() >= deadline {
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
}
