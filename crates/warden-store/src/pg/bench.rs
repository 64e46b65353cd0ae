//! What one audit batch costs on PostgreSQL, part by part (issue 28): see
//! [`crate::bench`]. Needs the test server (`WARDEN_TEST_PG_URL`).

use super::partitions::partition_name;
use super::tests::TestDb;
use super::Postgres;
use crate::bench::{bench_batch, print_cost, timed, BATCH, ROUNDS};
use crate::chain::{Lanes, Linked};
use crate::now_ms;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls, Statement};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: prints costs, asserts nothing"]
async fn bench_postgres_batch_parts() {
    let db = TestDb::create("bench").await;
    let batch = bench_batch();
    println!("PostgreSQL, {BATCH} records per batch, {ROUNDS} batches per line, one database");
    let pg = Postgres::connect(&db.url()).await.unwrap();
    let (probe, conn) = tokio_postgres::connect(&db.url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    let wal = || async {
        let row = probe
            .query_one("SELECT pg_current_wal_insert_lsn()::TEXT", &[])
            .await
            .unwrap();
        let lsn: String = row.get(0);
        let (hi, lo) = lsn.split_once('/').unwrap();
        u64::from_str_radix(hi, 16).unwrap() << 32 | u64::from_str_radix(lo, 16).unwrap()
    };
    let before = wal().await;
    timed("record_batch, one at a time", ROUNDS, || async {
        pg.record_batch(&batch).await.unwrap()
    })
    .await;
    let bytes = (wal().await - before) / ROUNDS as u64;
    println!("  WAL per batch: {bytes} bytes");
    let per_lane = ROUNDS / 4;
    let start = Instant::now();
    let lanes: Vec<_> = (0..4)
        .map(|_| {
            let (pg, batch) = (pg.clone(), batch.clone());
            tokio::spawn(async move {
                for _ in 0..per_lane {
                    pg.record_batch(&batch).await.unwrap();
                }
            })
        })
        .collect();
    for lane in lanes {
        lane.await.unwrap();
    }
    print_cost(
        "record_batch, 4 at once (the gateway's lanes), per batch",
        start.elapsed() / (4 * per_lane) as u32,
    );
    by_hand(&db.url(), &batch).await;
    db.drop_db().await;
}

/// The batch's statement on a connection of the bench's own: into the
/// partitioned parent, straight into today's partition, and by COPY.
async fn by_hand(url: &str, batch: &[crate::AuditRecord]) {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(conn);
    let lanes = Lanes::new("8d1f0c6a2b9e4e57a3c1f6d2e0b94a7c", 1);
    let mut rows = Vec::new();
    lanes
        .append(batch, |linked| {
            rows = linked;
            async { Ok(()) }
        })
        .await
        .unwrap();
    let rows = Arc::new(rows);
    let today = partition_name(now_ms() / 86_400_000);
    let parent = prepare(&client, "warden_audit").await;
    let part = prepare(&client, &today).await;
    timed(
        "INSERT … unnest into the parent (by hand)",
        ROUNDS,
        || insert(&client, &parent, &rows),
    )
    .await;
    timed(&format!("INSERT … unnest into {today}"), ROUNDS, || {
        insert(&client, &part, &rows)
    })
    .await;
    let row = || async {
        let start = Instant::now();
        client.execute("SELECT 1", &[]).await.unwrap();
        start.elapsed()
    };
    let mut trip = Duration::ZERO;
    for _ in 0..ROUNDS {
        trip += row().await;
    }
    print_cost("one round trip (SELECT 1)", trip / ROUNDS as u32);
    client
        .batch_execute("SET synchronous_commit = off")
        .await
        .unwrap();
    // The server's own work, without the WAL flush: parent and partition in
    // turn, twice, so that drift hits both.
    for _ in 0..2 {
        timed(
            "INSERT into the parent, synchronous_commit off (measure only)",
            ROUNDS,
            || insert(&client, &parent, &rows),
        )
        .await;
        timed(
            "INSERT into the partition, synchronous_commit off (measure only)",
            ROUNDS,
            || insert(&client, &part, &rows),
        )
        .await;
    }
}

/// The store's batch INSERT, into `table`.
async fn prepare(client: &Client, table: &str) -> Statement {
    let sql = format!(
        "INSERT INTO {table} (time_ms, caller, tool, outcome, record, chain, seq, prev_hash, hash,
                              decision, upstream, duration_ms, findings)
         SELECT * FROM unnest($1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[],
                              $6::TEXT[], $7::BIGINT[], $8::TEXT[], $9::TEXT[],
                              $10::TEXT[], $11::TEXT[], $12::FLOAT8[], $13::TEXT[])"
    );
    let (t, i) = (Type::TEXT_ARRAY, Type::INT8_ARRAY);
    let types = [
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
    ];
    client.prepare_typed(&sql, &types).await.unwrap()
}

async fn insert(client: &Client, statement: &Statement, rows: &[Linked]) {
    let time: Vec<i64> = rows.iter().map(|r| r.time_ms).collect();
    let caller: Vec<Option<&str>> = rows.iter().map(|r| r.caller.as_deref()).collect();
    let text = |f: fn(&Linked) -> &str| rows.iter().map(f).collect::<Vec<&str>>();
    let (tool, outcome, json) = (text(|r| &r.tool), text(|r| &r.outcome), text(|r| &r.json));
    let (chain, prev, hash) = (text(|r| &r.chain), text(|r| &r.prev), text(|r| &r.hash));
    let seq: Vec<i64> = rows.iter().map(|r| r.seq).collect();
    let decision = text(|r| &r.facts.decision);
    let upstream: Vec<Option<&str>> = rows.iter().map(|r| r.facts.upstream.as_deref()).collect();
    let duration: Vec<f64> = rows.iter().map(|r| r.facts.duration_ms).collect();
    let findings: Vec<Option<&str>> = rows.iter().map(|r| r.facts.findings.as_deref()).collect();
    let values: [&(dyn ToSql + Sync); 13] = [
        &time, &caller, &tool, &outcome, &json, &chain, &seq, &prev, &hash, &decision, &upstream,
        &duration, &findings,
    ];
    client.execute(statement, &values).await.unwrap();
}
