//! What one audit batch costs, part by part (issue 28): ignored tests that print
//! microseconds per batch of [`BATCH`] records and per record, no assertion on
//! time. Not CI; run them one at a time, release build:
//!
//! `cargo test --release -p warden-store bench_ -- --ignored --nocapture --test-threads 1`

use crate::chain::{Lanes, Linked};
use crate::sqlite::{insert_rows, Sqlite};
use crate::{AuditRecord, Store};
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Records per batch: what the HTTP bench's sync load gathers (23 measured).
pub(crate) const BATCH: usize = 23;
/// Batches per measurement (a fresh store each).
pub(crate) const ROUNDS: usize = 2000;

/// A record like the HTTP bench's: an anonymous caller's call of the Rust
/// backend's `test_simple_text`, no arguments, answered ok.
pub(crate) fn bench_record(i: usize) -> AuditRecord {
    serde_json::from_value(serde_json::json!({
        "time": "2026-12-05T00:13:15.123Z", "session": "8d1f0c6a2b9e4e57a3c1f6d2e0b94a7c",
        "caller": "bench", "tool": "conf.test_simple_text", "upstream": "conf",
        "arguments": {}, "reason": null, "unknown_keys": [], "unknown_mode": null,
        "decision": "allowed", "outcome": "ok", "duration_ms": 0.4 + (i % 7) as f64 / 10.0,
        "idempotency_key": null, "replayed": false
    }))
    .unwrap()
}

pub(crate) fn bench_batch() -> Vec<AuditRecord> {
    (0..BATCH).map(bench_record).collect()
}

/// `batch` linked into a chain of its own, as a store's writer gets it.
pub(crate) async fn linked(batch: &[AuditRecord]) -> Vec<Linked> {
    let lanes = Lanes::new("8d1f0c6a2b9e4e57a3c1f6d2e0b94a7c", 1);
    let mut rows = Vec::new();
    lanes
        .append(batch, |linked| {
            rows = linked;
            async { Ok(()) }
        })
        .await
        .unwrap();
    rows
}

/// Runs `op` `rounds` times and prints its cost per batch and per record.
pub(crate) async fn timed<F, Fut>(label: &str, rounds: usize, mut op: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let start = Instant::now();
    for _ in 0..rounds {
        op().await;
    }
    let per_batch = start.elapsed() / rounds as u32;
    print_cost(label, per_batch);
    per_batch
}

pub(crate) fn print_cost(label: &str, per_batch: Duration) {
    let us = per_batch.as_secs_f64() * 1e6;
    println!(
        "{label:<58} {us:>9.1} us/batch {:>7.2} us/record",
        us / BATCH as f64
    );
}

/// A fresh SQLite file, opened as the gateway opens it.
fn fresh_sqlite(tag: &str) -> (Sqlite, PathBuf) {
    let dir = std::env::temp_dir().join(format!("warden-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let s = Sqlite::open(&dir.join("w.db")).unwrap();
    (s, dir)
}

async fn sqlite_variant(tag: &str, label: &str, setup: &'static str) {
    let (s, dir) = fresh_sqlite(tag);
    s.with(move |c| c.execute_batch(setup)).await.unwrap();
    let batch = bench_batch();
    timed(label, ROUNDS, || async {
        s.record_batch(&batch).await.unwrap()
    })
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: prints costs, asserts nothing"]
async fn bench_sqlite_batch_parts() {
    let batch = bench_batch();
    println!("SQLite, {BATCH} records per batch, {ROUNDS} batches per line, fresh file each");
    let lanes = Lanes::new("8d1f0c6a2b9e4e57a3c1f6d2e0b94a7c", 1);
    timed("hash chain + JSON (link, no write)", ROUNDS, || async {
        lanes.append(&batch, |_| async { Ok(()) }).await.unwrap()
    })
    .await;
    timed("  of which JSON encoding", ROUNDS, || async {
        for r in &batch {
            std::hint::black_box(serde_json::to_string(r).unwrap());
        }
    })
    .await;
    let mut linked = Vec::new();
    lanes
        .append(&batch, |rows| {
            linked = rows;
            async { Ok(()) }
        })
        .await
        .unwrap();
    timed("  of which hashing (SHA-256, hex)", ROUNDS, || async {
        for r in &linked {
            std::hint::black_box(r.expected_hash());
        }
    })
    .await;
    let (s, dir) = fresh_sqlite("hop");
    timed("spawn_blocking hop (empty closure)", ROUNDS, || async {
        s.with(|_| Ok(())).await.unwrap()
    })
    .await;
    let _ = std::fs::remove_dir_all(dir);
    let mem = Store::in_memory().unwrap();
    timed("record_batch, in memory (no I/O)", ROUNDS, || async {
        mem.record_batch(&batch).await.unwrap()
    })
    .await;
    sqlite_variant("as-is", "record_batch, file, as opened", "").await;
    insert_then_commit(&batch).await;
    sqlite_variant(
        "nockpt",
        "record_batch, file, wal_autocheckpoint=0",
        "PRAGMA wal_autocheckpoint = 0;",
    )
    .await;
    sqlite_variant(
        "noidx",
        "record_batch, file, no secondary index",
        "DROP INDEX audit_chain; DROP INDEX audit_facts;
         DROP INDEX audit_caller; DROP INDEX audit_tool; DROP INDEX audit_outcome;",
    )
    .await;
    for index in [
        "audit_chain",
        "audit_facts",
        "audit_caller",
        "audit_tool",
        "audit_outcome",
    ] {
        let sql: &'static str = format!("DROP INDEX {index};").leak();
        sqlite_variant(index, &format!("record_batch, file, without {index}"), sql).await;
    }
}

/// The writer's transaction by hand on a fresh file: the INSERTs, then the
/// COMMIT (WAL write, and the auto-checkpoint when it falls due), timed apart.
async fn insert_then_commit(batch: &[AuditRecord]) {
    let (s, dir) = fresh_sqlite("split");
    let rows = std::sync::Arc::new(linked(batch).await);
    let (mut insert, mut commit, mut slowest) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut slow = 0;
    for _ in 0..ROUNDS {
        let rows = rows.clone();
        let (i, c) = s
            .with(move |conn| {
                let start = Instant::now();
                let tx =
                    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                insert_rows(&tx, &rows)?;
                let inserted = Instant::now();
                tx.commit()?;
                Ok((inserted - start, inserted.elapsed()))
            })
            .await
            .unwrap();
        insert += i;
        commit += c;
        slowest = slowest.max(c);
        slow += usize::from(c > Duration::from_millis(2));
    }
    print_cost(
        "  of which BEGIN + 23 INSERTs (by hand)",
        insert / ROUNDS as u32,
    );
    print_cost("  of which COMMIT (by hand)", commit / ROUNDS as u32);
    print_cost("  slowest COMMIT (by hand)", slowest);
    println!("  COMMITs over 2 ms: {slow} of {ROUNDS}");
    let wal = std::fs::metadata(dir.join("w.db-wal")).map_or(0, |m| m.len());
    println!("  WAL file at the end: {} KiB", wal / 1024);
    let _ = std::fs::remove_dir_all(dir);
}
