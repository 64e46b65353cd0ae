use super::*;
use crate::sqlite::MIGRATIONS;
use rusqlite::{params, Connection};
use serde_json::json;

/// A fresh directory for a test's database files.
fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("warden-store-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const DAY: Duration = Duration::from_secs(86_400);

#[tokio::test]
async fn an_ended_session_stays_ended_until_its_time_and_is_then_forgotten() {
    let s = Store::in_memory().unwrap();
    assert!(!s.session_ended("a").await.unwrap());
    s.end_session("a", now_ms() + 60_000).await.unwrap();
    s.end_session("a", now_ms() + 1_000).await.unwrap(); // never shortened
    s.end_session("old", now_ms() - 1).await.unwrap();
    assert!(s.session_ended("a").await.unwrap());
    // The next end clears what expired.
    s.end_session("b", now_ms() + 60_000).await.unwrap();
    assert!(!s.session_ended("old").await.unwrap());
    assert!(s.session_ended("a").await.unwrap() && s.session_ended("b").await.unwrap());
}

#[tokio::test]
async fn an_open_sqlite_store_answers_a_ping() {
    Store::in_memory().unwrap().ping().await.unwrap();
}

#[tokio::test]
async fn claim_run_finish_replay() {
    let s = Store::in_memory().unwrap();
    assert_eq!(s.claim("alice", "k", "f1", DAY).await.unwrap(), Claim::Run);
    assert_eq!(
        s.claim("alice", "k", "f1", DAY).await.unwrap(),
        Claim::Running
    );
    assert_eq!(
        s.claim("alice", "k", "f2", DAY).await.unwrap(),
        Claim::Mismatch
    );
    // Scoped by caller: bob's key of the same name is his own.
    assert_eq!(s.claim("bob", "k", "f1", DAY).await.unwrap(), Claim::Run);
    s.finish(
        "alice",
        "k",
        Finish::Completed(json!({"content": [{"type": "text", "text": "done"}]})),
    )
    .await
    .unwrap();
    assert_eq!(
        s.claim("alice", "k", "f1", DAY).await.unwrap(),
        Claim::Replay(json!({"content": [{"type": "text", "text": "done"}]}))
    );
    assert_eq!(
        s.claim("alice", "k", "f2", DAY).await.unwrap(),
        Claim::Mismatch
    );
}

#[tokio::test]
async fn failed_calls_may_be_retried_and_entries_expire() {
    let s = Store::in_memory().unwrap();
    assert_eq!(s.claim("a", "k", "f", DAY).await.unwrap(), Claim::Run);
    s.finish("a", "k", Finish::Failed("upstream crashed".into()))
        .await
        .unwrap();
    assert_eq!(s.claim("a", "k", "f", DAY).await.unwrap(), Claim::Run);
    s.finish("a", "k", Finish::Completed(json!({})))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    // With a retention shorter than the entry's age, the key is fresh again.
    assert_eq!(
        s.claim("a", "k", "other", Duration::from_millis(5))
            .await
            .unwrap(),
        Claim::Run
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_many_concurrent_claims_runs() {
    let dir = std::env::temp_dir().join(format!("warden-store-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ledger.db");
    let _ = std::fs::remove_file(&path);
    // Two stores on one file, as two gateway processes would have.
    let (a, b) = (Store::open(&path).unwrap(), Store::open(&path).unwrap());
    assert_eq!(concurrent_runs(&a, &b).await, 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_run_out_are_taken_over_and_renewed_ones_hold() {
    let dir = scratch("lease");
    let path = dir.join("ledger.db");
    let (a, b) = (Store::open(&path).unwrap(), Store::open(&path).unwrap());
    lease_semantics(&a, &b).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_many_concurrent_claims_takes_over_an_expired_lease() {
    let dir = scratch("takeover");
    let path = dir.join("ledger.db");
    let (a, b) = (Store::open(&path).unwrap(), Store::open(&path).unwrap());
    assert_eq!(concurrent_takeovers(&a, &b, OnAbandoned::Rerun).await, 1);
    assert_eq!(concurrent_takeovers(&a, &b, OnAbandoned::Keep).await, 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_whose_lease_ran_out_is_abandoned_for_good_unless_it_may_rerun() {
    let dir = scratch("abandon");
    let path = dir.join("ledger.db");
    let (a, b) = (Store::open(&path).unwrap(), Store::open(&path).unwrap());
    abandon_semantics(&a, &b).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_database_of_the_previous_version_is_migrated_and_keeps_its_keys() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(MIGRATIONS[0]).unwrap();
    conn.execute_batch(
            "CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (1);",
        )
        .unwrap();
    let (now, hour) = (now_ms(), Duration::from_secs(3600));
    conn.execute(
        "INSERT INTO ledger (scope, key, fingerprint, state, result, created_ms) VALUES
               ('a', 'running', 'f', 'running', NULL, ?1),
               ('a', 'stale', 'f', 'running', NULL, ?2),
               ('a', 'done', 'f', 'completed', '{\"x\":1}', ?1),
               ('a', 'failed', 'f', 'failed', NULL, ?1)",
        params![now, now - 2 * 3_600_000],
    )
    .unwrap();
    let sqlite = Sqlite::init(conn).unwrap();
    let version: i64 = sqlite
        .with(|c| c.query_row("SELECT version FROM schema_version", [], |r| r.get(0)))
        .await
        .unwrap();
    assert_eq!(version as usize, MIGRATIONS.len(), "migrated to the newest");
    let s = Store::Sqlite(sqlite);
    let short = Duration::from_millis(1);
    tokio::time::sleep(Duration::from_millis(5)).await;
    // A running row without a lease is never taken over: it lasts its retention, as before.
    assert_eq!(
        s.claim_leased("a", "running", "f", hour, short, OnAbandoned::Keep)
            .await
            .unwrap(),
        Claim::Running
    );
    assert_eq!(
        s.claim_leased("a", "stale", "f", hour, short, OnAbandoned::Keep)
            .await
            .unwrap(),
        Claim::Run
    );
    assert_eq!(
        s.claim_leased("a", "done", "f", hour, short, OnAbandoned::Keep)
            .await
            .unwrap(),
        Claim::Replay(json!({"x": 1}))
    );
    assert_eq!(
        s.claim_leased("a", "failed", "f", hour, short, OnAbandoned::Keep)
            .await
            .unwrap(),
        Claim::Run
    );
}

#[test]
fn a_drift_record_says_what_changed_and_older_records_read_without_one() {
    let drift = |change: &str, fields: &[&str], from: Option<&str>| ToolDrift {
        change: change.into(),
        fields: fields.iter().map(|f| f.to_string()).collect(),
        renamed_from: from.map(str::to_owned),
        diff: String::new(),
    };
    assert_eq!(
        drift("changed", &["description", "inputSchema"], None).summary(),
        "changed: description, inputSchema"
    );
    assert_eq!(
        drift("renamed", &[], Some("fx.old_name")).summary(),
        "renamed from fx.old_name"
    );
    assert_eq!(drift("restored", &[], None).summary(), "restored");
    let text = serde_json::to_string(&drift("added", &[], None)).unwrap();
    assert_eq!(text, r#"{"change":"added"}"#);
    let old = r#"{"time":"t","session":"s","caller":null,"tool":"x","upstream":null,"arguments":{},"reason":null,"unknown_keys":[],"unknown_mode":null,"decision":"allowed","outcome":"ok","duration_ms":1.0,"idempotency_key":null,"replayed":false}"#;
    let read: AuditRecord = serde_json::from_str(old).unwrap();
    assert_eq!(read.drift, None);
    assert!(!serde_json::to_string(&read).unwrap().contains("drift"));
}

#[tokio::test]
async fn audit_records_are_queried_by_filter() {
    let s = Store::in_memory().unwrap();
    let rec = |caller: &str, tool: &str, outcome: &str| AuditRecord {
        time: "2026-11-30T00:00:00.000Z".into(),
        session: "stdio".into(),
        caller: Some(caller.into()),
        tool: tool.into(),
        upstream: Some("notes".into()),
        server: None,
        arguments: json!({"a": 1}),
        reason: None,
        unknown_keys: vec![],
        unknown_mode: None,
        decision: "allowed".into(),
        outcome: outcome.into(),
        duration_ms: 1.5,
        idempotency_key: None,
        replayed: false,
        error: None,
        credential: None,
        labels: Vec::new(),
        touched: Vec::new(),
        drift: None,
        findings: Vec::new(),
        approver: None,
        approval_note: None,
        shadow: None,
    };
    s.record(&rec("alice", "notes.create_note", "ok"))
        .await
        .unwrap();
    s.record(&rec("bob", "notes.create_note", "tool_error"))
        .await
        .unwrap();
    s.record(&rec("alice", "notes.list_notes", "ok"))
        .await
        .unwrap();
    let all = s.query(AuditFilter::default()).await.unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0], rec("alice", "notes.create_note", "ok"));
    let alice = s
        .query(AuditFilter {
            caller: Some("alice".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(alice.len(), 2);
    let errors = s
        .query(AuditFilter {
            outcome: Some("tool_error".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(errors[0].caller.as_deref(), Some("bob"));
    let later = s
        .query(AuditFilter {
            since_ms: Some(now_ms() + 60_000),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(later.is_empty());
    // Newest first, with ids that find each record again.
    let recent = s
        .recent(AuditFilter {
            caller: Some("alice".into()),
            limit: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(recent.len(), 1);
    assert_eq!(recent[0].1, rec("alice", "notes.list_notes", "ok"));
    // The next page starts below the last id shown, with the same filters.
    let alice = AuditFilter {
        caller: Some("alice".into()),
        limit: 1,
        ..Default::default()
    };
    let next = s
        .recent_before(alice.clone(), Some(recent[0].0))
        .await
        .unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].1, rec("alice", "notes.create_note", "ok"));
    assert!(next[0].0 < recent[0].0);
    let past_the_end = s.recent_before(alice, Some(next[0].0)).await.unwrap();
    assert!(past_the_end.is_empty());
    let again = s.audit_record(recent[0].0).await.unwrap();
    assert_eq!(again, Some(recent[0].1.clone()));
    assert_eq!(s.audit_record(recent[0].0 + 100).await.unwrap(), None);
    let counts = s.counts_per_minute(0).await.unwrap();
    let minute = now_ms() / 60_000;
    assert!(counts
        .iter()
        .all(|c| c.minute >= minute - 1 && c.minute <= minute));
    let total = |d: &str, o: &str| -> u64 {
        counts
            .iter()
            .filter(|c| c.decision == d && c.outcome == o)
            .map(|c| c.calls)
            .sum()
    };
    assert_eq!(
        (total("allowed", "ok"), total("allowed", "tool_error")),
        (2, 1)
    );
    assert!(s
        .counts_per_minute(now_ms() + 60_000)
        .await
        .unwrap()
        .is_empty());
}

#[test]
fn a_newer_schema_is_refused_with_a_fix() {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (99);")
            .unwrap();
    let e = Sqlite::init(conn).err().unwrap();
    assert!(e
        .to_string()
        .contains("schema version 99, newer than this mcp-warden knows (7); upgrade mcp-warden"));
}

#[test]
fn an_unwritable_path_is_a_clear_error() {
    let e = Store::open(Path::new("/nonexistent-dir/warden.db"))
        .err()
        .unwrap();
    assert!(
        e.to_string()
            .starts_with("the store is unavailable: cannot open /nonexistent-dir/warden.db"),
        "{e}"
    );
}

/// Opens `path` from `n` threads at the same instant (each its own connection,
/// as separate processes would); every open must succeed.
fn open_together(path: &std::path::Path, n: usize) -> Vec<Result<Sqlite, StoreError>> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (barrier, path) = (barrier.clone(), path.to_owned());
            std::thread::spawn(move || {
                barrier.wait();
                Sqlite::open(&path)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

fn schema_version(path: &std::path::Path) -> i64 {
    let conn = Connection::open(path).unwrap();
    conn.query_row("SELECT version FROM schema_version", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn eight_stores_opening_one_fresh_file_at_once_all_open_and_migrate_it_once() {
    let dir = scratch("open-race-fresh");
    for round in 0..20 {
        let path = dir.join(format!("fresh-{round}.db"));
        for opened in open_together(&path, 8) {
            opened.unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
        assert_eq!(schema_version(&path) as usize, MIGRATIONS.len());
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn eight_stores_opening_one_old_file_at_once_all_open_and_migrate_it_once() {
    let dir = scratch("open-race-old");
    for round in 0..20 {
        let path = dir.join(format!("old-{round}.db"));
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_version (version INTEGER NOT NULL); INSERT INTO schema_version VALUES (1);
             INSERT INTO ledger (scope, key, fingerprint, state, result, created_ms) VALUES ('a', 'k', 'f', 'completed', '{}', 0);",
        )
        .unwrap();
        drop(conn);
        for opened in open_together(&path, 8) {
            opened.unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
        assert_eq!(schema_version(&path) as usize, MIGRATIONS.len());
        let kept: i64 = Connection::open(&path)
            .unwrap()
            .query_row("SELECT COUNT(*) FROM ledger WHERE owner IS NULL", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(kept, 1, "round {round}: the old row survives the migration");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_file_locked_past_the_wait_names_itself_and_its_holder() {
    let err = crate::sqlite::stayed_locked(Some(std::path::Path::new("/data/shared.db")));
    assert_eq!(
        err.to_string(),
        "the store is unavailable: the SQLite file /data/shared.db stayed locked for 10 s: another process holds its write lock. \
         Wait for it to finish, stop it, or give this gateway a file of its own ([store] url)"
    );
}

/// For the stores' tests: five records, then three; the first five pruned in
/// batches of two; the chain still verifies from its first record left.
pub(crate) async fn prune_keeps_the_chain_verifiable(s: &Store) {
    let record = |tool: &str| -> AuditRecord {
        serde_json::from_value(json!({
            "time": "2026-12-03T00:00:00.000Z", "session": "stdio", "caller": "alice",
            "tool": tool, "upstream": null, "arguments": {}, "reason": null,
            "unknown_keys": [], "unknown_mode": null, "decision": "allowed",
            "outcome": "ok", "duration_ms": 1.0, "idempotency_key": null, "replayed": false
        }))
        .unwrap()
    };
    let old: Vec<_> = (0..5).map(|i| record(&format!("old{i}"))).collect();
    s.record_batch(&old).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let cutoff = now_ms();
    tokio::time::sleep(Duration::from_millis(5)).await;
    for i in 0..3 {
        s.record(&record(&format!("new{i}"))).await.unwrap();
    }
    assert_eq!(s.prune_audit(cutoff, 2).await.unwrap(), 5);
    assert_eq!(
        s.prune_audit(cutoff, 2).await.unwrap(),
        0,
        "nothing older is left"
    );
    let left: Vec<_> = s.query(AuditFilter::default()).await.unwrap();
    let tools: Vec<_> = left.iter().map(|r| r.tool.as_str()).collect();
    assert_eq!(tools, ["new0", "new1", "new2"]);
    let report = s.verify_chains().await.unwrap();
    assert_eq!(report.verdicts.len(), 1);
    assert_eq!(
        report.verdicts[0].to_string(),
        format!("chain {}: 3 record(s), intact", s.owner())
    );
    // Pruning everything leaves the anchor and no rows: nothing to break.
    assert_eq!(s.prune_audit(now_ms() + 1, 2).await.unwrap(), 3);
    assert!(s.verify_chains().await.unwrap().verdicts.is_empty());
    s.record(&record("after")).await.unwrap();
    assert!(s.verify_chains().await.unwrap().intact());
}

#[tokio::test]
async fn sqlite_prunes_old_records_in_batches_and_the_chain_still_verifies() {
    prune_keeps_the_chain_verifiable(&Store::in_memory().unwrap()).await;
}

#[tokio::test]
async fn chart_facts_come_from_the_columns_and_from_older_rows_json() {
    let sqlite = Sqlite::init(Connection::open_in_memory().unwrap()).unwrap();
    let finding = GuardFinding {
        guard: "leaks".into(),
        detector: "secrets".into(),
        kind: "aws_key".into(),
        path: "/content/0/text".into(),
        count: 2,
        action: "redact".into(),
    };
    let rec = |decision: &str, outcome: &str, upstream: Option<&str>, ms: f64| AuditRecord {
        time: "2026-11-30T00:00:00.000Z".into(),
        session: "s".into(),
        caller: Some("alice".into()),
        tool: "up.t".into(),
        upstream: upstream.map(str::to_owned),
        server: None,
        arguments: json!({}),
        reason: None,
        unknown_keys: vec![],
        unknown_mode: None,
        decision: decision.into(),
        outcome: outcome.into(),
        duration_ms: ms,
        idempotency_key: None,
        replayed: false,
        error: None,
        credential: None,
        labels: Vec::new(),
        touched: Vec::new(),
        drift: None,
        findings: Vec::new(),
        approver: None,
        approval_note: None,
        shadow: None,
    };
    let found = AuditRecord {
        findings: vec![finding.clone()],
        ..rec("allowed", "ok", Some("up"), 12.5)
    };
    let refused = rec("unknown_tool", "refused", None, 0.25);
    let s = Store::Sqlite(sqlite.clone());
    s.record_batch(&[found, refused]).await.unwrap();
    // A row as a gateway wrote it before the columns: only its JSON says.
    let old = serde_json::to_string(&rec("rate_limited", "refused", Some("up"), 3.0)).unwrap();
    let now = now_ms();
    sqlite
        .with(move |c| {
            c.execute(
                "INSERT INTO audit (time_ms, caller, tool, outcome, record) VALUES (?1, 'alice', 'up.t', 'refused', ?2)",
                params![now, old],
            )
        })
        .await
        .unwrap();
    let mut facts = s.audit_facts(0).await.unwrap();
    facts.sort_by(|a, b| a.decision.cmp(&b.decision));
    let minute = now / 60_000;
    assert!(facts
        .iter()
        .all(|f| (minute - 1..=minute).contains(&f.minute)));
    let got: Vec<_> = facts
        .iter()
        .map(|f| {
            (
                f.decision.as_str(),
                f.outcome.as_str(),
                f.upstream.as_deref(),
                f.duration_ms,
                f.findings.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("allowed", "ok", Some("up"), 12.5, vec![finding]),
            ("rate_limited", "refused", Some("up"), 3.0, vec![]),
            ("unknown_tool", "refused", None, 0.25, vec![]),
        ]
    );
    assert!(s.audit_facts(now + 60_000).await.unwrap().is_empty());
    // The per-minute counts read the column too, and the old row's JSON.
    let counts = s.counts_per_minute(0).await.unwrap();
    let mut decisions: Vec<_> = counts.iter().map(|c| c.decision.as_str()).collect();
    decisions.sort();
    assert_eq!(decisions, ["allowed", "rate_limited", "unknown_tool"]);
}
