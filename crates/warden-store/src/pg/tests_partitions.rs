//! The audit trail's day partitions (schema version 10) on a real server: a
//! trail written at version 9 through the store moves into them with every row
//! and every chain; retention drops whole days; a record for a day with no
//! partition is still written, and maintenance moves it into one.

use super::partitions::partition_name;
use super::schema::{MIGRATIONS, PARTITIONED};
use super::tests::TestDb;
use super::*;
use crate::{ChainsReport, Store};
use serde_json::json;

const DAY_MS: i64 = 86_400_000;

fn record(tool: &str, caller: &str, outcome: &str) -> AuditRecord {
    serde_json::from_value(json!({
        "time": "2026-12-03T00:00:00.000Z", "session": "s", "caller": caller,
        "tool": tool, "upstream": "up", "arguments": {"q": tool}, "reason": null,
        "unknown_keys": [], "unknown_mode": null, "decision": "allowed",
        "outcome": outcome, "duration_ms": 2.5, "idempotency_key": null, "replayed": false
    }))
    .unwrap()
}

fn today() -> i64 {
    now_ms().div_euclid(DAY_MS)
}

/// Every column of every row, in id order.
async fn rows(db: &TestDb) -> Vec<String> {
    let (client, conn) = tokio_postgres::connect(&db.url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    let rows = client
        .query(
            "SELECT row_to_json(a)::TEXT FROM (
                 SELECT id, time_ms, caller, tool, outcome, record, chain, seq, prev_hash, hash,
                        decision, upstream, duration_ms, findings FROM warden_audit) a
             ORDER BY (a.id)",
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

async fn one(db: &TestDb, sql: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(&db.url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// Writes `n` batches of three records at `day` (+ an hour, + the batch's
/// minute), one in three by bob and failed.
async fn write_day(s: &Postgres, day: i64, n: i64) {
    for b in 0..n {
        let batch: Vec<_> = (0..3)
            .map(|i| match i {
                2 => record(&format!("d{day}b{b}"), "bob", "tool_error"),
                _ => record(&format!("d{day}b{b}r{i}"), "alice", "ok"),
            })
            .collect();
        let at = day * DAY_MS + 3_600_000 + b * 60_000;
        s.record_batch_at(&batch, at).await.unwrap();
    }
}

fn records(report: &ChainsReport) -> u64 {
    report.verdicts.iter().map(|v| v.records).sum()
}

fn filter(caller: Option<&str>, outcome: Option<&str>) -> AuditFilter {
    AuditFilter {
        caller: caller.map(str::to_owned),
        outcome: outcome.map(str::to_owned),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trail_of_version_9_moves_into_day_partitions_with_every_row_and_chain() {
    let db = TestDb::create("partition_move").await;
    let url = db.url();
    let old = || Postgres::connect_at(&url, 2, PARTITIONED - 1);
    let (a, b) = (old().await.unwrap(), old().await.unwrap());
    let today = today();
    for day in [today - 2, today - 1, today] {
        write_day(&a, day, 2).await;
        write_day(&b, day, 1).await;
    }
    a.record_batch(&[record("now", "carol", "ok")])
        .await
        .unwrap();
    let before = rows(&db).await;
    assert_eq!(before.len(), 3 * 9 + 1);
    let chains = Store::Postgres(a.clone()).verify_chains().await.unwrap();
    assert!(chains.intact() && chains.verdicts.len() == 2, "{chains:?}");
    drop((a, b));

    let s = Postgres::connect(&db.url()).await.unwrap();
    let version = one(&db, "SELECT version::BIGINT FROM warden_schema_version").await;
    assert_eq!(version as usize, MIGRATIONS.len());
    assert_eq!(rows(&db).await, before, "every row, as it was");
    let store = Store::Postgres(s.clone());
    assert_eq!(store.verify_chains().await.unwrap(), chains, "every chain");
    let mut expected: Vec<_> = (today - 2..=today + PARTITION_DAYS_AHEAD)
        .map(partition_name)
        .collect();
    expected.push("warden_audit_default".into());
    expected.sort();
    assert_eq!(s.audit_partitions().await.unwrap(), expected);
    let indexes = format!(
        "SELECT COUNT(*) FROM pg_indexes WHERE tablename = '{}'",
        partition_name(today - 2)
    );
    assert_eq!(
        one(&db, &indexes).await,
        6,
        "the parent's indexes, on each day"
    );
    let found = |f| async { store.query(f).await.unwrap().len() };
    assert_eq!(found(filter(Some("bob"), None)).await, 9);
    assert_eq!(found(filter(None, Some("tool_error"))).await, 9);
    assert_eq!(found(filter(Some("alice"), Some("ok"))).await, 18);
    let newest = store.recent(filter(None, None)).await.unwrap();
    assert_eq!(newest[0].1.tool, "now");
    // New records go on from the same ids, into today's partition.
    store.record(&record("after", "carol", "ok")).await.unwrap();
    let max_before = before.len() as i64;
    let after = one(&db, "SELECT MAX(id) FROM warden_audit WHERE tool = 'after'").await;
    assert!(after > max_before, "{after}");
    let in_today = format!(
        "SELECT COUNT(*) FROM {} WHERE tool = 'after'",
        partition_name(today)
    );
    assert_eq!(one(&db, &in_today).await, 1);
    assert!(store.verify_chains().await.unwrap().intact());
    drop((s, store));
    db.drop_db().await;
}

#[tokio::test]
async fn retention_drops_whole_days_and_what_is_left_still_verifies() {
    let db = TestDb::create("partition_drop").await;
    let s = Postgres::connect(&db.url()).await.unwrap();
    let today = today();
    for (day, batches) in [(today - 3, 1), (today - 2, 2), (today - 1, 1)] {
        write_day(&s, day, batches).await;
    }
    s.record_batch(&[record("now", "carol", "ok")])
        .await
        .unwrap();
    let store = Store::Postgres(s.clone());
    // The day before yesterday and older are wholly older than the cutoff;
    // yesterday's first records are older too, but its day is not over.
    let cutoff = (today - 1) * DAY_MS + 2 * 3_600_000;
    assert_eq!(store.prune_audit(cutoff, 500).await.unwrap(), 9);
    assert_eq!(store.prune_audit(cutoff, 500).await.unwrap(), 0);
    let names = s.audit_partitions().await.unwrap();
    assert!(!names.contains(&partition_name(today - 3)), "{names:?}");
    assert!(!names.contains(&partition_name(today - 2)), "{names:?}");
    assert!(names.contains(&partition_name(today - 1)), "{names:?}");
    let left = store.query(AuditFilter::default()).await.unwrap();
    let tools: Vec<_> = left.iter().map(|r| r.tool.as_str()).collect();
    let y = today - 1;
    let kept = [format!("d{y}b0r0"), format!("d{y}b0r1"), format!("d{y}b0")];
    assert_eq!(tools[..3], kept.each_ref().map(String::as_str));
    assert_eq!(tools[3..], ["now"]);
    let report = store.verify_chains().await.unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(records(&report), 4);
    let anchored = one(&db, "SELECT seq FROM warden_audit_anchor").await;
    assert_eq!(anchored, 8, "the chain's last dropped record");
    drop((s, store));
    db.drop_db().await;
}

#[tokio::test]
async fn a_record_for_a_day_without_a_partition_is_written_then_moved_into_one() {
    let db = TestDb::create("partition_default").await;
    let s = Postgres::connect(&db.url()).await.unwrap();
    let today = today();
    let (ahead, past) = (today + PARTITION_DAYS_AHEAD + 7, today - 30);
    write_day(&s, ahead, 1).await;
    write_day(&s, past, 1).await;
    write_day(&s, today, 1).await;
    let defaulted = "SELECT COUNT(*) FROM warden_audit_default";
    assert_eq!(
        one(&db, defaulted).await,
        6,
        "written, to the default partition"
    );
    let store = Store::Postgres(s.clone());
    assert!(store.verify_chains().await.unwrap().intact());
    assert_eq!(s.pool.maintain_partitions(now_ms()).await.unwrap(), 2);
    assert_eq!(one(&db, defaulted).await, 0);
    for day in [ahead, past] {
        let there = format!("SELECT COUNT(*) FROM {}", partition_name(day));
        assert_eq!(one(&db, &there).await, 3, "day {day}");
    }
    let report = store.verify_chains().await.unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(records(&report), 9);
    assert_eq!(s.pool.maintain_partitions(now_ms()).await.unwrap(), 0);
    drop((s, store));
    db.drop_db().await;
}
