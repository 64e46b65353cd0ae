//! The audit trail's daily partitions on PostgreSQL (schema version 10): one
//! per UTC day, named `warden_audit_YYYYMMDD`, each with the parent's indexes.
//!
//! The store makes today's and the next [`PARTITION_DAYS_AHEAD`] days' when it
//! connects and every hour after, so a day's partition exists before its first
//! record. A record for a day that has none yet (a replica whose maintenance
//! could not run for days, a clock far off) is still written: it lands in the
//! default partition, and the next maintenance makes that day's partition and
//! moves it there. Replicas take turns under an advisory lock; a step that cannot
//! get its locks within [`LOCK_TIMEOUT`] gives up and is tried again next time,
//! so writers never queue long behind it.
//!
//! Retention drops whole partitions: a day's once all of it is older than the
//! retention, so a record is kept at least the retention and at most a day more.
//! Before a partition goes, each chain's anchor moves to its last record there,
//! as row-by-row pruning does, so what is left still verifies.

use super::{unavailable, Pool, Postgres};
use crate::time::{civil_from_days, days_from_civil};
use crate::{now_ms, StoreError};
use std::collections::BTreeSet;
use std::sync::Weak;
use std::time::Duration;
use tokio_postgres::Client;

/// How many days after today have their partition made ahead.
pub const PARTITION_DAYS_AHEAD: i64 = 3;
const DAY_MS: i64 = 86_400_000;
/// An arbitrary constant: the advisory lock of partition maintenance.
const PARTITION_LOCK: i64 = 0x5741_5244_5054;
/// How long a maintenance step waits for a table lock before it gives up.
const LOCK_TIMEOUT: &str = "2s";
/// How often a connected store makes the partitions ahead.
const MAINTENANCE_EVERY: Duration = Duration::from_secs(3600);

/// The partition of `day` (days since the epoch, UTC).
pub(crate) fn partition_name(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("warden_audit_{y:04}{m:02}{d:02}")
}

/// The day a partition holds, from its name (`None`: the default partition).
fn day_of(name: &str) -> Option<i64> {
    let date = name.strip_prefix("warden_audit_")?;
    if date.len() != 8 || !date.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (y, m, d) = (&date[..4], &date[4..6], &date[6..]);
    Some(days_from_civil(
        y.parse().ok()?,
        m.parse().ok()?,
        d.parse().ok()?,
    ))
}

/// The names of the trail's partitions now.
async fn partitions(client: &Client) -> Result<Vec<String>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT c.relname::TEXT FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'warden_audit'::regclass",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Opens a transaction holding the maintenance lock, its table locks bounded by
/// [`LOCK_TIMEOUT`]; `None` when `name` is already (`exists`) or no longer there.
async fn locked<'a>(
    client: &'a mut Client,
    name: &str,
    exists: bool,
) -> Result<Option<tokio_postgres::Transaction<'a>>, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.batch_execute(&format!(
        "SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'; SELECT pg_advisory_xact_lock({PARTITION_LOCK})"
    ))
    .await?;
    let there: bool = tx
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .await?
        .get(0);
    Ok((there != exists).then_some(tx))
}

/// Makes `day`'s partition, moving into it the rows the default partition holds
/// for that day (locked meanwhile, so none slips in between).
async fn make_partition(client: &mut Client, day: i64) -> Result<(), tokio_postgres::Error> {
    let name = partition_name(day);
    let Some(tx) = locked(client, &name, true).await? else {
        return Ok(());
    };
    let (from, to) = (day * DAY_MS, (day + 1) * DAY_MS);
    tx.batch_execute(&format!(
        "CREATE TABLE {name} (LIKE warden_audit INCLUDING DEFAULTS);
         LOCK TABLE warden_audit_default IN ACCESS EXCLUSIVE MODE;
         WITH moved AS (
             DELETE FROM warden_audit_default WHERE time_ms >= {from} AND time_ms < {to} RETURNING *
         ) INSERT INTO {name} SELECT * FROM moved;
         ALTER TABLE warden_audit ATTACH PARTITION {name} FOR VALUES FROM ({from}) TO ({to});"
    ))
    .await?;
    tx.commit().await
}

/// Drops partition `name`, first moving each chain's anchor to its last record
/// there. How many records went.
async fn drop_partition(client: &mut Client, name: &str) -> Result<u64, tokio_postgres::Error> {
    let Some(tx) = locked(client, name, false).await? else {
        return Ok(0);
    };
    let count: i64 = tx
        .query_one(&format!("SELECT COUNT(*) FROM {name}"), &[])
        .await?
        .get(0);
    tx.batch_execute(&format!(
        "INSERT INTO warden_audit_anchor (chain, seq, hash)
         SELECT DISTINCT ON (chain) chain, seq, hash FROM {name}
         WHERE chain IS NOT NULL ORDER BY chain, seq DESC
         ON CONFLICT (chain) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash
           WHERE EXCLUDED.seq > warden_audit_anchor.seq;
         DROP TABLE {name};"
    ))
    .await?;
    tx.commit().await?;
    Ok(count as u64)
}

impl Pool {
    /// Makes the partitions of today and the days ahead, and of every day the
    /// default partition holds rows for (moving them there). How many were made.
    pub(super) async fn maintain_partitions(&self, now_ms: i64) -> Result<usize, StoreError> {
        let mut client = self.client().await?;
        let existing = partitions(&client).await.map_err(unavailable)?;
        let strays = client
            .query(
                "SELECT DISTINCT floor(time_ms / 86400000.0)::BIGINT FROM warden_audit_default",
                &[],
            )
            .await
            .map_err(unavailable)?;
        let today = now_ms.div_euclid(DAY_MS);
        let mut days: BTreeSet<i64> = (today..=today + PARTITION_DAYS_AHEAD).collect();
        days.extend(strays.iter().map(|r| r.get::<_, i64>(0)));
        days.retain(|d| !existing.contains(&partition_name(*d)));
        for &day in &days {
            make_partition(&mut client, day)
                .await
                .map_err(unavailable)?;
        }
        Ok(days.len())
    }
}

/// Makes the partitions ahead every [`MAINTENANCE_EVERY`], for as long as the
/// store's connections are in use.
pub(super) fn keep_up(pool: Weak<Pool>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(MAINTENANCE_EVERY).await;
            let Some(pool) = pool.upgrade() else { return };
            if let Err(e) = pool.maintain_partitions(now_ms()).await {
                tracing::warn!("audit partitions: not made ahead ({e}); records go to the default partition until the next try");
            }
        }
    });
}

impl Postgres {
    /// Retention: drops every partition whose whole day is older than
    /// `before_ms` (after moving strays out of the default partition). How many
    /// records went.
    pub async fn drop_partitions_before(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.pool.maintain_partitions(now_ms()).await?;
        let mut client = self.client().await?;
        let mut old: Vec<(i64, String)> = partitions(&client)
            .await
            .map_err(unavailable)?
            .into_iter()
            .filter_map(|name| Some((day_of(&name)?, name)))
            .filter(|(day, _)| (day + 1) * DAY_MS <= before_ms)
            .collect();
        old.sort();
        let mut gone = 0;
        for (_, name) in old {
            gone += drop_partition(&mut client, &name)
                .await
                .map_err(unavailable)?;
        }
        Ok(gone)
    }

    /// The trail's partitions now, by name, sorted.
    pub async fn audit_partitions(&self) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        let mut names = partitions(&client).await.map_err(unavailable)?;
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_named_by_their_utc_day_and_read_back() {
        // 2026-12-04 is day 20,791 since the epoch.
        assert_eq!(partition_name(20_791), "warden_audit_20261204");
        assert_eq!(day_of("warden_audit_20261204"), Some(20_791));
        assert_eq!(partition_name(0), "warden_audit_19700101");
        assert_eq!(day_of("warden_audit_default"), None);
        assert_eq!(day_of("warden_audit_2026120"), None);
    }
}
