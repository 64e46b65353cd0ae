//! `[audit] retention` (T3): records older than the retention are deleted (in
//! small batches on SQLite, a whole day's partition at a time on PostgreSQL),
//! at start and then every tenth of the retention (at least every second, at
//! most every hour), so the trail stops growing and no step holds the store long.

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use warden_store::Store;

/// Records deleted per transaction on SQLite.
pub const PRUNE_BATCH: usize = 500;

/// How often a trail kept for `keep` is pruned.
pub fn interval(keep: Duration) -> Duration {
    (keep / 10).clamp(Duration::from_secs(1), Duration::from_secs(3600))
}

/// Prunes `store` in the background for as long as the process runs.
pub fn start(store: Store, keep: Duration, keep_text: String) {
    tokio::spawn(async move {
        loop {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let before = now.saturating_sub(keep).as_millis() as i64;
            match store.prune_audit(before, PRUNE_BATCH).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(records = n, "audit retention: deleted the records older than {keep_text}"),
                Err(e) => tracing::warn!("audit retention: the store did not delete old records ({e}); trying again in {:?}", interval(keep)),
            }
            tokio::time::sleep(interval(keep)).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_a_tenth_of_the_retention_within_a_second_and_an_hour() {
        let d = |s| Duration::from_secs(s);
        assert_eq!(interval(d(90 * 86_400)), d(3600));
        assert_eq!(interval(d(600)), d(60));
        assert_eq!(interval(d(2)), d(1));
    }
}
