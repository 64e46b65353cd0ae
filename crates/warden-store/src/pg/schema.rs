//! The PostgreSQL schema: its migrations, in order, and how a database is
//! brought up to date (under an advisory lock, so replicas starting together
//! migrate once).

use super::unavailable;
use crate::StoreError;
use tokio_postgres::Client;

/// The version from which the audit trail is partitioned by day.
pub(super) const PARTITIONED: usize = 10;

/// An arbitrary constant: the advisory lock replicas take while migrating.
const MIGRATION_LOCK: i64 = 0x5741_5244_454e;

/// Schema migrations, in order; the index + 1 is the version.
pub(super) const MIGRATIONS: &[&str] = &[
    "CREATE TABLE warden_ledger (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('running', 'completed', 'failed')),
        result TEXT,
        created_ms BIGINT NOT NULL,
        PRIMARY KEY (scope, key)
    );
    CREATE TABLE warden_audit (
        id BIGSERIAL PRIMARY KEY,
        time_ms BIGINT NOT NULL,
        caller TEXT,
        tool TEXT NOT NULL,
        outcome TEXT NOT NULL,
        record TEXT NOT NULL
    );
    CREATE INDEX warden_audit_time ON warden_audit (time_ms);",
    // 2: a running claim's owner and lease (ms since the epoch, server clock). Rows
    // written before have neither: a running one is never taken over and is
    // forgotten with its retention, as before.
    "ALTER TABLE warden_ledger ADD COLUMN owner TEXT;
    ALTER TABLE warden_ledger ADD COLUMN lease_until_ms BIGINT;",
    // 3: quota buckets shared by replicas: per bucket, the theoretical arrival
    // time of its next call (ms since the epoch, server clock; GCRA).
    "CREATE TABLE warden_quota (
        key TEXT PRIMARY KEY,
        tat_ms DOUBLE PRECISION NOT NULL
    );",
    // 4: HTTP sessions a client ended (DELETE), until their ids would have expired,
    // so that no replica takes them up again.
    "CREATE TABLE warden_session_end (
        sid TEXT PRIMARY KEY,
        until_ms BIGINT NOT NULL
    );",
    // 5: calls in flight under a concurrency quota, each slot leased (server
    // clock) and renewed by the gateway that holds it, so a killed replica's slots
    // free themselves; quota credits, one per paused call that was counted, which
    // its retry redeems once; and the flow trails of sessions that can move
    // between replicas (2026-07-28 callers).
    "CREATE TABLE warden_quota_slot (
        id TEXT PRIMARY KEY,
        bucket TEXT NOT NULL,
        lease_until_ms BIGINT NOT NULL
    );
    CREATE INDEX warden_quota_slot_bucket ON warden_quota_slot (bucket);
    CREATE TABLE warden_quota_credit (
        id TEXT PRIMARY KEY,
        until_ms BIGINT NOT NULL
    );
    CREATE TABLE warden_flow_trail (
        scope TEXT PRIMARY KEY,
        labels TEXT[] NOT NULL,
        until_ms BIGINT NOT NULL
    );",
    // 6: each audit record's place in its replica's hash chain (tamper evidence);
    // rows written before have none and are reported as unchained. An anchor is
    // where retention cut a chain: the last deleted row's seq and hash.
    "ALTER TABLE warden_audit ADD COLUMN chain TEXT, ADD COLUMN seq BIGINT,
        ADD COLUMN prev_hash TEXT, ADD COLUMN hash TEXT;
    CREATE INDEX warden_audit_chain ON warden_audit (chain, seq, id) WHERE chain IS NOT NULL;
    CREATE TABLE warden_audit_anchor (
        chain TEXT PRIMARY KEY,
        seq BIGINT NOT NULL,
        hash TEXT NOT NULL
    );",
    // 7: copies of the fields the console charts (decision, upstream, duration,
    // guard findings), so its counts read columns instead of every record's JSON.
    // Rows written before have none; the console reads those from the JSON.
    "ALTER TABLE warden_audit ADD COLUMN decision TEXT, ADD COLUMN upstream TEXT,
        ADD COLUMN duration_ms DOUBLE PRECISION, ADD COLUMN findings TEXT;
    CREATE INDEX warden_audit_facts ON warden_audit (time_ms)
        INCLUDE (outcome, decision, upstream, duration_ms, findings);",
    // 8: calls waiting for an operator's approval, shared by the replicas (H6):
    // listed by the one holding the call, answered at any.
    "CREATE TABLE warden_approval (
        id TEXT PRIMARY KEY,
        waiting TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        until_ms BIGINT NOT NULL,
        verdict TEXT
    );",
    // 9: the console's and `audit`'s filters, newest first. Most records are
    // `ok`, which a search by id finds at once: only the others are indexed by
    // outcome, so the common write pays for two indexes, not three.
    "CREATE INDEX warden_audit_caller ON warden_audit (caller, id);
    CREATE INDEX warden_audit_tool ON warden_audit (tool, id);
    CREATE INDEX warden_audit_outcome ON warden_audit (outcome, id) WHERE outcome <> 'ok';",
    // 10: the trail in partitions of one UTC day each (declarative, by time_ms),
    // so that retention drops whole days instead of deleting rows one by one.
    // Every row moves, with its id; the ids go on from the same sequence. A
    // partition per day the rows span is made here, the days ahead by the
    // store's maintenance (pg/partitions.rs), and a row for a day with none lands
    // in the default partition, from which maintenance moves it out. The parent's
    // indexes are made on each partition. Time is indexed by block range (BRIN)
    // instead of the two B-trees before (`warden_audit_time` and the covering
    // `warden_audit_facts`): rows arrive in time order, so a few bytes per range
    // of pages find a time span, and a row written updates no B-tree for it. The
    // console's counts read the span's rows (fresh rows are read from the table
    // even through a covering index, which only pays once they are vacuumed).
    "ALTER SEQUENCE warden_audit_id_seq OWNED BY NONE;
    ALTER TABLE warden_audit RENAME TO warden_audit_unpartitioned;
    DROP INDEX warden_audit_time, warden_audit_chain, warden_audit_facts,
        warden_audit_caller, warden_audit_tool, warden_audit_outcome;
    CREATE TABLE warden_audit (
        id BIGINT NOT NULL DEFAULT nextval('warden_audit_id_seq'),
        time_ms BIGINT NOT NULL,
        caller TEXT,
        tool TEXT NOT NULL,
        outcome TEXT NOT NULL,
        record TEXT NOT NULL,
        chain TEXT, seq BIGINT, prev_hash TEXT, hash TEXT,
        decision TEXT, upstream TEXT, duration_ms DOUBLE PRECISION, findings TEXT,
        PRIMARY KEY (id, time_ms)
    ) PARTITION BY RANGE (time_ms);
    ALTER SEQUENCE warden_audit_id_seq OWNED BY warden_audit.id;
    CREATE TABLE warden_audit_default PARTITION OF warden_audit DEFAULT;
    DO $$
    DECLARE day BIGINT;
    BEGIN
        FOR day IN SELECT DISTINCT floor(time_ms / 86400000.0)::BIGINT FROM warden_audit_unpartitioned LOOP
            EXECUTE format('CREATE TABLE %I PARTITION OF warden_audit FOR VALUES FROM (%s) TO (%s)',
                'warden_audit_' || to_char(to_timestamp(day * 86400) AT TIME ZONE 'UTC', 'YYYYMMDD'),
                day * 86400000, (day + 1) * 86400000);
        END LOOP;
    END $$;
    INSERT INTO warden_audit (id, time_ms, caller, tool, outcome, record, chain, seq, prev_hash, hash,
                              decision, upstream, duration_ms, findings)
        SELECT id, time_ms, caller, tool, outcome, record, chain, seq, prev_hash, hash,
               decision, upstream, duration_ms, findings
        FROM warden_audit_unpartitioned;
    DROP TABLE warden_audit_unpartitioned;
    CREATE INDEX warden_audit_chain ON warden_audit (chain, seq, id) WHERE chain IS NOT NULL;
    CREATE INDEX warden_audit_time ON warden_audit USING brin (time_ms) WITH (autosummarize = on);
    CREATE INDEX warden_audit_caller ON warden_audit (caller, id);
    CREATE INDEX warden_audit_tool ON warden_audit (tool, id);
    CREATE INDEX warden_audit_outcome ON warden_audit (outcome, id) WHERE outcome <> 'ok';",
];

/// Brings the schema of `client`'s database up to version `upto` (all of
/// [`MIGRATIONS`] but in tests, which make databases of earlier versions).
pub(super) async fn migrate(client: &mut Client, upto: usize) -> Result<(), StoreError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(unavailable)?;
    let migrated = async {
        client
            .batch_execute(
                "CREATE TABLE IF NOT EXISTS warden_schema_version (version INTEGER NOT NULL)",
            )
            .await?;
        let version: i32 = client
            .query_opt("SELECT version FROM warden_schema_version", &[])
            .await?
            .map(|r| r.get(0))
            .unwrap_or(0);
        Ok::<i32, tokio_postgres::Error>(version)
    }
    .await;
    let result = match migrated {
            Err(e) => Err(unavailable(e)),
            Ok(version) if version as usize > MIGRATIONS.len() => Err(StoreError::Unavailable(format!(
                "the database has schema version {version}, newer than this mcp-warden knows ({}); upgrade mcp-warden",
                MIGRATIONS.len()
            ))),
            Ok(version) => {
                let mut outcome = Ok(());
                for (i, sql) in MIGRATIONS.iter().enumerate().take(upto).skip(version as usize) {
                    let step = async {
                        let tx = client.transaction().await?;
                        tx.batch_execute(sql).await?;
                        tx.execute("DELETE FROM warden_schema_version", &[]).await?;
                        tx.execute("INSERT INTO warden_schema_version (version) VALUES ($1)", &[&(i as i32 + 1)]).await?;
                        tx.commit().await
                    }
                    .await;
                    if let Err(e) = step {
                        outcome = Err(unavailable(e));
                        break;
                    }
                }
                outcome
            }
        };
    let _ = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    result
}
