//! Writing audit records to PostgreSQL in batches (one multi-row INSERT, one
//! round trip), each in its place in this replica's hash chain, and reading the
//! chains back to verify them.

use super::{unavailable, Postgres};
use crate::chain::{ChainRow, Linked};
use crate::{AuditRecord, StoreError};
use std::collections::HashMap;
use tokio_postgres::types::{ToSql, Type};

/// One audit batch into `table` (the partitioned `warden_audit`, or one day's
/// partition): a row per element of the arrays, in [`Columns`]' order.
pub(crate) fn insert_into(table: &str) -> String {
    format!(
        "INSERT INTO {table} (time_ms, caller, tool, outcome, record, chain, seq, prev_hash, hash,
                               decision, upstream, duration_ms, findings)
         SELECT * FROM unnest($1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[],
                              $6::TEXT[], $7::BIGINT[], $8::TEXT[], $9::TEXT[],
                              $10::TEXT[], $11::TEXT[], $12::FLOAT8[], $13::TEXT[])"
    )
}

/// The types of the batch INSERT's parameters, in order.
pub(crate) fn column_types() -> [Type; 13] {
    let (t, i) = (Type::TEXT_ARRAY, Type::INT8_ARRAY);
    [
        i.clone(),
        t.clone(),
        t.clone(),
        t.clone(),
        t.clone(),
        t.clone(),
        i,
        t.clone(),
        t.clone(),
        t.clone(),
        t.clone(),
        Type::FLOAT8_ARRAY,
        t,
    ]
}

/// A batch's linked rows as the batch INSERT's thirteen arrays.
pub(crate) struct Columns<'r> {
    time: Vec<i64>,
    caller: Vec<Option<&'r str>>,
    tool: Vec<&'r str>,
    outcome: Vec<&'r str>,
    json: Vec<&'r str>,
    chain: Vec<&'r str>,
    seq: Vec<i64>,
    prev: Vec<&'r str>,
    hash: Vec<&'r str>,
    decision: Vec<&'r str>,
    upstream: Vec<Option<&'r str>>,
    duration: Vec<f64>,
    findings: Vec<Option<&'r str>>,
}

impl<'r> Columns<'r> {
    pub(crate) fn of(rows: &'r [Linked]) -> Columns<'r> {
        let text = |f: fn(&Linked) -> &str| rows.iter().map(f).collect::<Vec<&str>>();
        let maybe = |f: fn(&Linked) -> Option<&str>| rows.iter().map(f).collect::<Vec<_>>();
        Columns {
            time: rows.iter().map(|r| r.time_ms).collect(),
            caller: maybe(|r| r.caller.as_deref()),
            tool: text(|r| &r.tool),
            outcome: text(|r| &r.outcome),
            json: text(|r| &r.json),
            chain: text(|r| &r.chain),
            seq: rows.iter().map(|r| r.seq).collect(),
            prev: text(|r| &r.prev),
            hash: text(|r| &r.hash),
            decision: text(|r| &r.facts.decision),
            upstream: maybe(|r| r.facts.upstream.as_deref()),
            duration: rows.iter().map(|r| r.facts.duration_ms).collect(),
            findings: maybe(|r| r.facts.findings.as_deref()),
        }
    }

    /// The parameters, in [`column_types`]' order.
    pub(crate) fn values(&self) -> [&(dyn ToSql + Sync); 13] {
        [
            &self.time,
            &self.caller,
            &self.tool,
            &self.outcome,
            &self.json,
            &self.chain,
            &self.seq,
            &self.prev,
            &self.hash,
            &self.decision,
            &self.upstream,
            &self.duration,
            &self.findings,
        ]
    }
}

impl Postgres {
    /// Appends `records` to the trail in one statement, chained in order; they
    /// are committed when this returns.
    pub async fn record_batch(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        self.chain
            .append(records, |rows| self.write_linked(rows))
            .await
    }

    /// [`Postgres::record_batch`] stamped `time_ms` instead of now (tests write
    /// the records of other days with it).
    #[cfg(test)]
    pub(crate) async fn record_batch_at(
        &self,
        records: &[AuditRecord],
        time_ms: i64,
    ) -> Result<(), StoreError> {
        self.chain
            .append_at(records, time_ms, |rows| self.write_linked(rows))
            .await
    }

    async fn write_linked(&self, rows: Vec<Linked>) -> Result<(), StoreError> {
        let columns = Columns::of(&rows);
        let mut conn = self.pool.conn().await?;
        let insert = match &conn.audit_insert {
            Some(insert) => insert.clone(),
            None => {
                let insert = conn
                    .client
                    .prepare_typed(&insert_into("warden_audit"), &column_types())
                    .await
                    .map_err(unavailable)?;
                conn.audit_insert.insert(insert).clone()
            }
        };
        conn.client
            .execute(&insert, &columns.values())
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Up to `limit` chained rows after `after` (chain, seq, id), in that order.
    pub(crate) async fn chain_page(
        &self,
        after: (String, i64, i64),
        limit: i64,
    ) -> Result<Vec<ChainRow>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, chain, seq, prev_hash, hash, time_ms, caller, tool, outcome, record
                 FROM warden_audit WHERE chain IS NOT NULL AND (chain, seq, id) > ($1, $2, $3)
                 ORDER BY chain, seq, id LIMIT $4",
                &[&after.0, &after.1, &after.2, &limit],
            )
            .await
            .map_err(unavailable)?;
        Ok(rows
            .iter()
            .map(|r| ChainRow {
                id: r.get(0),
                linked: Linked {
                    chain: r.get(1),
                    seq: r.get::<_, Option<i64>>(2).unwrap_or(-1),
                    prev: r.get::<_, Option<String>>(3).unwrap_or_default(),
                    hash: r.get::<_, Option<String>>(4).unwrap_or_default(),
                    time_ms: r.get(5),
                    caller: r.get(6),
                    tool: r.get(7),
                    outcome: r.get(8),
                    json: r.get(9),
                    facts: Default::default(),
                },
            })
            .collect())
    }

    /// Where retention cut each chain: its last deleted row's seq and hash.
    pub(crate) async fn anchors(&self) -> Result<HashMap<String, (i64, String)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query("SELECT chain, seq, hash FROM warden_audit_anchor", &[])
            .await
            .map_err(unavailable)?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), (r.get(1), r.get(2))))
            .collect())
    }

    /// How many records carry no chain (written before chains existed).
    pub(crate) async fn unchained(&self) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT COUNT(*) FROM warden_audit WHERE chain IS NULL", &[])
            .await
            .map_err(unavailable)?;
        Ok(row.get::<_, i64>(0) as u64)
    }
}
