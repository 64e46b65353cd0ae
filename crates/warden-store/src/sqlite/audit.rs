//! Writing audit records to the SQLite file in batches, each in its place in
//! this store's hash chain, and reading the chains back to verify them.

use super::Sqlite;
use crate::chain::{ChainRow, Linked};
use crate::{AuditRecord, StoreError};
use rusqlite::params;
use std::collections::HashMap;

impl Sqlite {
    /// Appends `records` to the trail in one transaction, chained in order; they
    /// are on disk (in the WAL: a process crash loses none) when this returns.
    pub async fn record_batch(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        self.chain
            .append(records, |rows| self.write_linked(rows))
            .await
    }

    /// [`Sqlite::record_batch`] on the calling thread, which it blocks (the
    /// audit writer's own thread, [`crate::AuditWriter`]).
    pub(crate) fn record_batch_blocking(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        self.chain
            .append_blocking(records, crate::now_ms(), |rows| {
                // A panic fails the batch, as it failed a blocking-pool task:
                // the chain starts a new segment and the records go back.
                let write =
                    std::panic::AssertUnwindSafe(|| self.blocking(|conn| commit_rows(conn, &rows)));
                std::panic::catch_unwind(write).unwrap_or_else(|_| {
                    Err(StoreError::Unavailable(
                        "store task failed: it panicked".into(),
                    ))
                })
            })
    }

    async fn write_linked(&self, rows: Vec<Linked>) -> Result<(), StoreError> {
        self.with(move |conn| commit_rows(conn, &rows)).await
    }

    /// Up to `limit` chained rows after `after` (chain, seq, id), in that order.
    pub(crate) async fn chain_page(
        &self,
        after: (String, i64, i64),
        limit: i64,
    ) -> Result<Vec<ChainRow>, StoreError> {
        self.with(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, chain, seq, prev_hash, hash, time_ms, caller, tool, outcome, record
                 FROM audit WHERE chain IS NOT NULL AND (chain, seq, id) > (?1, ?2, ?3)
                 ORDER BY chain, seq, id LIMIT ?4",
            )?;
            let rows = stmt.query_map(params![after.0, after.1, after.2, limit], |r| {
                Ok(ChainRow {
                    id: r.get(0)?,
                    linked: Linked {
                        chain: r.get(1)?,
                        seq: r.get::<_, Option<i64>>(2)?.unwrap_or(-1),
                        prev: r.get::<_, Option<String>>(3)?.unwrap_or_default(),
                        hash: r.get::<_, Option<String>>(4)?.unwrap_or_default(),
                        time_ms: r.get(5)?,
                        caller: r.get(6)?,
                        tool: r.get(7)?,
                        outcome: r.get(8)?,
                        json: r.get(9)?,
                        facts: Default::default(),
                    },
                })
            })?;
            rows.collect()
        })
        .await
    }

    /// Where retention cut each chain: its last deleted row's seq and hash.
    pub(crate) async fn anchors(&self) -> Result<HashMap<String, (i64, String)>, StoreError> {
        self.with(|conn| {
            let mut stmt = conn.prepare("SELECT chain, seq, hash FROM audit_anchor")?;
            let rows = stmt.query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))?;
            rows.collect()
        })
        .await
    }

    /// How many records carry no chain (written before chains existed).
    pub(crate) async fn unchained(&self) -> Result<u64, StoreError> {
        self.with(|conn| {
            conn.query_row("SELECT COUNT(*) FROM audit WHERE chain IS NULL", [], |r| {
                r.get::<_, i64>(0)
            })
        })
        .await
        .map(|n| n as u64)
    }
}

/// `rows` written in one transaction of their own.
fn commit_rows(conn: &mut rusqlite::Connection, rows: &[Linked]) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    insert_rows(&tx, rows)?;
    tx.commit()
}

/// Each of `rows` as an audit row, inside the writer's transaction.
pub(crate) fn insert_rows(tx: &rusqlite::Transaction, rows: &[Linked]) -> rusqlite::Result<()> {
    let mut insert = tx.prepare_cached(
        "INSERT INTO audit (time_ms, caller, tool, outcome, record, chain, seq, prev_hash, hash,
                            decision, upstream, duration_ms, findings)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?;
    for r in rows {
        let f = &r.facts;
        insert.execute(params![
            r.time_ms,
            r.caller,
            r.tool,
            r.outcome,
            r.json,
            r.chain,
            r.seq,
            r.prev,
            r.hash,
            f.decision,
            f.upstream,
            f.duration_ms,
            f.findings
        ])?;
    }
    Ok(())
}

impl Sqlite {
    /// Deletes up to `batch` records older than `before_ms` (oldest first), in one
    /// short transaction, and moves each chain's anchor to the last record of it
    /// deleted, so the rest of the chain still verifies. How many went.
    pub async fn prune_batch(&self, before_ms: i64, batch: usize) -> Result<u64, StoreError> {
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            // The same rows twice: nobody else writes inside this transaction.
            let doomed = "SELECT id FROM audit WHERE time_ms < ?1 ORDER BY id LIMIT ?2";
            let limit = batch as i64;
            tx.execute(
                &format!(
                    "INSERT INTO audit_anchor (chain, seq, hash)
                     SELECT chain, MAX(seq), hash FROM audit WHERE id IN ({doomed})
                       AND chain IS NOT NULL GROUP BY chain
                     ON CONFLICT (chain) DO UPDATE SET seq = excluded.seq, hash = excluded.hash
                       WHERE excluded.seq > audit_anchor.seq"
                ),
                params![before_ms, limit],
            )?;
            let gone = tx.execute(
                &format!("DELETE FROM audit WHERE id IN ({doomed})"),
                params![before_ms, limit],
            )?;
            tx.commit()?;
            Ok(gone as u64)
        })
        .await
    }
}
