//! How the audit writer spreads a replica's batches over its PostgreSQL lanes
//! (T1), on a real server: a batch that finds a commit running waits for it to
//! end, up to the spread time, and only then takes a lane beside it. A second
//! connection holds a lock on the trail, so the first batch's INSERT waits for
//! as long as the test says.

use super::tests::{record_for_chain, TestDb};
use super::*;
use crate::{AuditWriter, Store};
use std::time::Instant;

fn record(tool: &str) -> AuditRecord {
    let mut r = record_for_chain();
    r.tool = tool.to_owned();
    r
}

/// Polls `done` every 5 ms for up to 10 s.
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done().await {
        assert!(Instant::now() < deadline, "waited 10 s for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn client(db: &TestDb) -> Client {
    let (client, conn) = tokio_postgres::connect(&db.url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

/// A trail, a writer with `spread`, a connection holding the trail locked and
/// one to watch from.
async fn locked(tag: &str, spread: Duration) -> (TestDb, Store, AuditWriter, Client, Client) {
    let db = TestDb::create(tag).await;
    let store = Store::Postgres(Postgres::connect(&db.url()).await.unwrap());
    assert!(
        store.audit_lanes() > 1,
        "the test needs lanes beside the first"
    );
    let writer = AuditWriter::start_spread(store.clone(), spread);
    let locker = client(&db).await;
    locker
        .batch_execute("BEGIN; LOCK TABLE warden_audit IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let watch = client(&db).await;
    (db, store, writer, locker, watch)
}

/// Appends `tool`'s record in a task of its own, once the writer has taken
/// every record queued before it (so it starts a batch of its own).
async fn append(writer: &AuditWriter, tool: &str) -> tokio::task::JoinHandle<()> {
    until("the writer to take the queue", async || {
        writer.queued() == 0
    })
    .await;
    let (w, r) = (writer.clone(), record(tool));
    tokio::spawn(async move { w.append(r).await.unwrap() })
}

/// Appends `tool`'s record while the writer holds the one before it: it stays
/// queued.
async fn append_behind(writer: &AuditWriter, tool: &str) -> tokio::task::JoinHandle<()> {
    until("the writer to take the queue", async || {
        writer.queued() == 0
    })
    .await;
    let (w, r) = (writer.clone(), record(tool));
    let task = tokio::spawn(async move { w.append(r).await.unwrap() });
    until("the record to queue", async || writer.queued() == 1).await;
    task
}

/// How many INSERTs wait for the lock, asked on a connection of its own (one
/// inside a transaction sees the activity of its first look throughout).
async fn waiting(watch: &Client) -> i64 {
    watch
        .query_one(
            "SELECT COUNT(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE a.datname = current_database() AND NOT l.granted
               AND a.query LIKE 'INSERT INTO warden_audit%'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Each chain of the trail and how many records it holds.
async fn chains(store: &Store) -> Vec<(String, u64)> {
    let report = store.verify_chains().await.unwrap();
    assert!(report.intact(), "{report:?}");
    let mut out: Vec<_> = report
        .verdicts
        .iter()
        .map(|v| (v.chain.clone(), v.records))
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_behind_a_commit_that_ends_within_the_spread_follow_it_in_one_batch() {
    let (db, store, writer, locker, watch) = locked("lanes_follow", Duration::from_secs(60)).await;
    let first = append(&writer, "a").await;
    until("the first INSERT to wait", async || {
        waiting(&watch).await == 1
    })
    .await;
    let second = append(&writer, "b").await;
    // `b` waits for the running commit, so `c` queues behind it.
    let third = append_behind(&writer, "c").await;
    assert_eq!(waiting(&watch).await, 1, "no batch beside the first");
    let released = Instant::now();
    locker.batch_execute("COMMIT").await.unwrap();
    for task in [first, second, third] {
        task.await.unwrap();
    }
    // Woken by the commit's end, not by the 60 s spread.
    assert!(released.elapsed() < Duration::from_secs(30));
    let owner = store.owner().to_owned();
    assert_eq!(chains(&store).await, vec![(owner, 3)]);
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_still_running_after_the_spread_gets_a_batch_beside_it() {
    let spread = Duration::from_millis(300);
    let (db, store, writer, locker, watch) = locked("lanes_beside", spread).await;
    let first = append(&writer, "a").await;
    until("the first INSERT to wait", async || {
        waiting(&watch).await == 1
    })
    .await;
    let sent = Instant::now();
    let second = append(&writer, "b").await;
    until("a second INSERT beside it", async || {
        waiting(&watch).await == 2
    })
    .await;
    // Not before the spread: the batch waited for the first commit that long.
    assert!(sent.elapsed() >= spread, "{:?}", sent.elapsed());
    locker.batch_execute("COMMIT").await.unwrap();
    for task in [first, second] {
        task.await.unwrap();
    }
    let owner = store.owner().to_owned();
    assert_eq!(
        chains(&store).await,
        vec![(owner.clone(), 1), (format!("{owner}-1"), 1)]
    );
    db.drop_db().await;
}
