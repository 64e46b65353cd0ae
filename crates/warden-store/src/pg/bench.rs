//! What one audit batch costs on PostgreSQL, part by part (issue 28): see
//! [`crate::bench`]. Needs the test server (`WARDEN_TEST_PG_URL`).

use super::audit::{column_types, insert_into, Columns};
use super::partitions::partition_name;
use super::tests::TestDb;
use super::Postgres;
use crate::bench::{bench_batch, linked, print_cost, timed, BATCH, ROUNDS};
use crate::chain::Linked;
use crate::now_ms;
use std::sync::Arc;
use std::time::{Duration, Instant};
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
    let rows = Arc::new(linked(batch).await);
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
    client
        .prepare_typed(&insert_into(table), &column_types())
        .await
        .unwrap()
}

async fn insert(client: &Client, statement: &Statement, rows: &[Linked]) {
    let columns = Columns::of(rows);
    client.execute(statement, &columns.values()).await.unwrap();
}
