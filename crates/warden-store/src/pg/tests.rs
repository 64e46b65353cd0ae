use super::*;
use serde_json::json;

const DAY: Duration = Duration::from_secs(86_400);
/// The server the tests make their databases on: `WARDEN_TEST_PG_URL`
/// (`postgres://USER@HOST:PORT`, no database; scripts/test sets it to a
/// throwaway cluster when the machine has no server), else the machine's.
fn server() -> String {
    std::env::var("WARDEN_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432".to_owned())
        .trim_end_matches('/')
        .to_owned()
}

fn admin() -> String {
    format!("{}/postgres", server())
}

/// A fresh database for one test, dropped at the end.
pub(super) struct TestDb {
    pub(super) name: String,
}

impl TestDb {
    pub(super) async fn create(tag: &str) -> TestDb {
        let name = format!("warden_test_{tag}_{}", std::process::id());
        let (admin, conn) = tokio_postgres::connect(&admin(), NoTls)
            .await
            .expect("PostgreSQL must run on WARDEN_TEST_PG_URL (else 127.0.0.1:5432) with trust auth for these tests");
        tokio::spawn(conn);
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
            .await
            .unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        TestDb { name }
    }

    pub(super) fn url(&self) -> String {
        format!("{}/{}", server(), self.name)
    }

    pub(super) async fn drop_db(self) {
        let (admin, conn) = tokio_postgres::connect(&admin(), NoTls).await.unwrap();
        tokio::spawn(conn);
        let _ = admin
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_semantics_and_one_winner_across_two_connections() {
    let db = TestDb::create("ledger").await;
    let (a, b) = (
        Postgres::connect(&db.url()).await.unwrap(),
        Postgres::connect(&db.url()).await.unwrap(),
    );
    assert_eq!(a.claim("alice", "k", "f", DAY).await.unwrap(), Claim::Run);
    assert_eq!(
        b.claim("alice", "k", "f", DAY).await.unwrap(),
        Claim::Running
    );
    assert_eq!(
        b.claim("alice", "k", "g", DAY).await.unwrap(),
        Claim::Mismatch
    );
    a.finish("alice", "k", Finish::Completed(json!({"content": []})))
        .await
        .unwrap();
    assert_eq!(
        b.claim("alice", "k", "f", DAY).await.unwrap(),
        Claim::Replay(json!({"content": []}))
    );
    assert_eq!(a.claim("bob", "k", "f", DAY).await.unwrap(), Claim::Run);
    a.finish("bob", "k", Finish::Failed("crash".into()))
        .await
        .unwrap();
    assert_eq!(b.claim("bob", "k", "f", DAY).await.unwrap(), Claim::Run);

    let (sa, sb) = (
        crate::Store::Postgres(a.clone()),
        crate::Store::Postgres(b.clone()),
    );
    assert_eq!(crate::concurrent_runs(&sa, &sb).await, 1);
    drop((sa, sb));
    drop((a, b));
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_one_takeover_across_two_connections() {
    let db = TestDb::create("lease").await;
    let (a, b) = (
        crate::Store::Postgres(Postgres::connect(&db.url()).await.unwrap()),
        crate::Store::Postgres(Postgres::connect(&db.url()).await.unwrap()),
    );
    crate::lease_semantics(&a, &b).await;
    crate::abandon_semantics(&a, &b).await;
    let (rerun, keep) = (crate::OnAbandoned::Rerun, crate::OnAbandoned::Keep);
    assert_eq!(crate::concurrent_takeovers(&a, &b, rerun).await, 1);
    assert_eq!(crate::concurrent_takeovers(&a, &b, keep).await, 1);
    drop((a, b));
    db.drop_db().await;
}

#[tokio::test]
async fn ping_answers_while_the_database_is_there_and_fails_once_it_is_gone() {
    let db = TestDb::create("ping").await;
    let store = crate::Store::Postgres(Postgres::connect(&db.url()).await.unwrap());
    store.ping().await.unwrap();
    store.ping().await.unwrap(); // on the kept probe connection
    let name = db.name.clone();
    db.drop_db().await;
    // The connection was ended with the database; reconnecting finds none.
    let e = store.ping().await.unwrap_err();
    assert!(e.to_string().contains(&name), "{e}");
}

#[tokio::test]
async fn a_database_of_the_previous_version_is_migrated_and_keeps_its_keys() {
    let db = TestDb::create("v1").await;
    let (old, conn) = tokio_postgres::connect(&db.url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    old.batch_execute(MIGRATIONS[0]).await.unwrap();
    old.batch_execute(
        "CREATE TABLE warden_schema_version (version INTEGER NOT NULL);
             INSERT INTO warden_schema_version VALUES (1);",
    )
    .await
    .unwrap();
    let now = now_ms();
    old.execute(
        "INSERT INTO warden_ledger (scope, key, fingerprint, state, result, created_ms) VALUES
               ('a', 'running', 'f', 'running', NULL, $1),
               ('a', 'stale', 'f', 'running', NULL, $2),
               ('a', 'done', 'f', 'completed', '{\"x\":1}', $1),
               ('a', 'failed', 'f', 'failed', NULL, $1)",
        &[&now, &(now - 2 * 3_600_000)],
    )
    .await
    .unwrap();
    let s = Postgres::connect(&db.url()).await.unwrap();
    let version: i32 = old
        .query_one("SELECT version FROM warden_schema_version", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(version as usize, MIGRATIONS.len(), "migrated to the newest");
    let (hour, short) = (Duration::from_secs(3600), Duration::from_millis(1));
    tokio::time::sleep(Duration::from_millis(5)).await;
    // A running row without a lease is never taken over: it lasts its retention, as before.
    let claim =
        |key: &'static str| s.claim_leased("a", key, "f", hour, short, crate::OnAbandoned::Keep);
    assert_eq!(claim("running").await.unwrap(), Claim::Running);
    assert_eq!(claim("stale").await.unwrap(), Claim::Run);
    assert_eq!(claim("done").await.unwrap(), Claim::Replay(json!({"x": 1})));
    assert_eq!(claim("failed").await.unwrap(), Claim::Run);
    drop((s, old));
    db.drop_db().await;
}

#[tokio::test]
async fn an_ended_session_is_seen_by_every_replica() {
    let db = TestDb::create("session_end").await;
    let (a, b) = (
        Postgres::connect(&db.url()).await.unwrap(),
        Postgres::connect(&db.url()).await.unwrap(),
    );
    assert!(!b.session_ended("s1").await.unwrap());
    a.end_session("s1", crate::now_ms() + 60_000).await.unwrap();
    a.end_session("gone", crate::now_ms() - 1).await.unwrap();
    assert!(b.session_ended("s1").await.unwrap());
    b.end_session("s2", crate::now_ms() + 60_000).await.unwrap();
    assert!(!a.session_ended("gone").await.unwrap());
    drop((a, b));
    db.drop_db().await;
}

#[tokio::test]
async fn quota_buckets_take_a_call_from_all_or_none() {
    let db = TestDb::create("quota").await;
    let s = Postgres::connect(&db.url()).await.unwrap();
    // "wide": 1 call per hour, a burst of 2; "narrow": 1 per hour, no burst.
    let wide = ("wide".to_owned(), 3_600_000.0, 3_600_000.0);
    let narrow = ("narrow".to_owned(), 3_600_000.0, 0.0);
    let take = |rates: Vec<(String, f64, f64)>| {
        let s = s.clone();
        async move { s.take_quota(&rates, &[], DAY).await.unwrap() }
    };
    assert_eq!(
        take(vec![wide.clone(), narrow.clone()]).await,
        QuotaTake::Admitted(vec![])
    );
    // The narrow bucket is empty: it refuses, and the wide one keeps its call.
    let QuotaTake::Wait(i, wait) = take(vec![wide.clone(), narrow.clone()]).await else {
        panic!("admitted over the limit")
    };
    assert_eq!(i, 1);
    assert!(wait > 3_590_000.0 && wait <= 3_600_000.0, "{wait}");
    assert_eq!(take(vec![wide.clone()]).await, QuotaTake::Admitted(vec![]));
    assert!(matches!(take(vec![wide]).await, QuotaTake::Wait(0, _)));
    drop(s);
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_are_shared_leased_and_freed() {
    let db = TestDb::create("slots").await;
    let (a, b) = (
        Postgres::connect(&db.url()).await.unwrap(),
        Postgres::connect(&db.url()).await.unwrap(),
    );
    let two = [("c".to_owned(), 2)];
    let rate = [("r".to_owned(), 1.0, 0.0)];
    let QuotaTake::Admitted(first) = a.take_quota(&[], &two, DAY).await.unwrap() else {
        panic!("no slot")
    };
    assert_eq!(first.len(), 1);
    let short = Duration::from_millis(300);
    let QuotaTake::Admitted(second) = b.take_quota(&[], &two, short).await.unwrap() else {
        panic!("no second slot")
    };
    // Full across both connections: and a full bucket takes no rate either.
    assert_eq!(
        a.take_quota(&rate, &two, DAY).await.unwrap(),
        QuotaTake::Full(0)
    );
    assert!(matches!(
        a.take_quota(&rate, &[], DAY).await.unwrap(),
        QuotaTake::Admitted(_)
    ));
    // A renewed lease holds; one no longer renewed frees its slot.
    assert_eq!(b.renew_slots(&second, short).await.unwrap(), 1);
    assert_eq!(
        a.take_quota(&[], &two, DAY).await.unwrap(),
        QuotaTake::Full(0)
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let QuotaTake::Admitted(third) = a.take_quota(&[], &two, DAY).await.unwrap() else {
        panic!("an expired slot was not freed")
    };
    assert_eq!(b.renew_slots(&second, short).await.unwrap(), 0, "gone");
    // Released slots are free at once.
    a.release_slots(&first).await.unwrap();
    a.release_slots(&third).await.unwrap();
    let QuotaTake::Admitted(_) = b.take_quota(&[], &two, DAY).await.unwrap() else {
        panic!("a released slot was not freed")
    };
    drop((a, b));
    db.drop_db().await;
}

#[tokio::test]
async fn credits_redeem_once_and_trails_grow_until_they_expire() {
    let db = TestDb::create("credit").await;
    let (a, b) = (
        Postgres::connect(&db.url()).await.unwrap(),
        Postgres::connect(&db.url()).await.unwrap(),
    );
    a.issue_credit("q1", DAY).await.unwrap();
    assert!(b.redeem_credit("q1").await.unwrap());
    assert!(!a.redeem_credit("q1").await.unwrap(), "only once");
    assert!(!a.redeem_credit("never").await.unwrap());
    a.issue_credit("q2", Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!b.redeem_credit("q2").await.unwrap(), "expired");

    assert!(a.flow_trail("caller:alice").await.unwrap().is_empty());
    let labels = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        a.touch_flow(
            "caller:alice",
            &labels(&["private_data", "private_data"]),
            DAY
        )
        .await
        .unwrap(),
        labels(&["private_data"])
    );
    assert_eq!(
        b.touch_flow("caller:alice", &labels(&["untrusted_content"]), DAY)
            .await
            .unwrap(),
        labels(&["private_data", "untrusted_content"])
    );
    assert_eq!(
        a.flow_trail("caller:alice").await.unwrap(),
        labels(&["private_data", "untrusted_content"])
    );
    assert!(b.flow_trail("caller:bob").await.unwrap().is_empty());
    // An expired trail is forgotten, and starts afresh.
    b.touch_flow("caller:bob", &labels(&["x"]), Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(a.flow_trail("caller:bob").await.unwrap().is_empty());
    assert_eq!(
        a.touch_flow("caller:bob", &labels(&["y"]), DAY)
            .await
            .unwrap(),
        labels(&["y"])
    );
    drop((a, b));
    db.drop_db().await;
}

#[tokio::test]
async fn audit_records_round_trip() {
    let db = TestDb::create("audit").await;
    let s = Postgres::connect(&db.url()).await.unwrap();
    let rec = AuditRecord {
        time: "2026-11-30T00:00:00.000Z".into(),
        session: "stdio".into(),
        caller: Some("alice".into()),
        tool: "notes.create_note".into(),
        upstream: Some("notes".into()),
        server: None,
        arguments: json!({"title": "t"}),
        reason: Some("asked".into()),
        unknown_keys: vec!["x".into()],
        unknown_mode: Some("warn".into()),
        decision: "allowed".into(),
        outcome: "ok".into(),
        duration_ms: 2.5,
        idempotency_key: Some("k".into()),
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
    s.record_batch(std::slice::from_ref(&rec)).await.unwrap();
    let got = s
        .query(AuditFilter {
            caller: Some("alice".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(got, vec![rec.clone()]);
    assert!(s
        .query(AuditFilter {
            outcome: Some("failed".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .is_empty());
    let recent = s.recent(AuditFilter::default(), None).await.unwrap();
    assert_eq!(recent.len(), 1);
    // The page below the only record is empty; below the next id, it is there.
    let below = |id| s.recent(AuditFilter::default(), Some(id));
    assert!(below(recent[0].0).await.unwrap().is_empty());
    assert_eq!(below(recent[0].0 + 1).await.unwrap(), recent);
    assert_eq!(
        s.audit_record(recent[0].0).await.unwrap(),
        Some(rec.clone())
    );
    assert_eq!(s.audit_record(recent[0].0 + 1).await.unwrap(), None);
    let counts = s.counts_per_minute(0).await.unwrap();
    assert_eq!(
        counts
            .iter()
            .map(|c| (c.decision.as_str(), c.outcome.as_str(), c.calls))
            .collect::<Vec<_>>(),
        [("allowed", "ok", 1)]
    );
    // The chart figures, from their columns.
    let facts = s.audit_facts(0).await.unwrap();
    let got: Vec<_> = facts
        .into_iter()
        .map(crate::FactsRow::into_facts)
        .map(|f| (f.decision, f.outcome, f.upstream, f.duration_ms))
        .collect();
    assert_eq!(
        got,
        [(
            "allowed".to_owned(),
            "ok".to_owned(),
            Some("notes".to_owned()),
            2.5
        )]
    );
    // Reconnecting does not migrate again.
    drop(s);
    let again = Postgres::connect(&db.url()).await.unwrap();
    assert_eq!(again.query(AuditFilter::default()).await.unwrap().len(), 1);
    drop(again);
    db.drop_db().await;
}

#[tokio::test]
async fn a_lost_connection_fails_then_recovers() {
    let db = TestDb::create("reconnect").await;
    let s = Postgres::connect(&db.url()).await.unwrap();
    assert_eq!(s.claim("a", "k1", "f", DAY).await.unwrap(), Claim::Run);
    let (admin, conn) = tokio_postgres::connect(&admin(), NoTls).await.unwrap();
    tokio::spawn(conn);
    admin
            .execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", &[&db.name])
            .await
            .unwrap();
    // The call that meets the dead connection may fail (callers fail closed);
    // a later one reconnects.
    let _ = s.claim("a", "k2", "f", DAY).await;
    let mut recovered = false;
    for _ in 0..20 {
        if s.claim("a", "k3", "f", DAY).await.is_ok() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(recovered, "the store reconnected");
    assert_eq!(
        s.claim("a", "k1", "f", DAY).await.unwrap(),
        Claim::Running,
        "state survived"
    );
    drop(s);
    db.drop_db().await;
}

#[tokio::test]
async fn a_busy_connection_makes_the_pool_open_another_up_to_its_size() {
    let db = TestDb::create("pool").await;
    let s = Postgres::connect_pool(&db.url(), 2).await.unwrap();
    assert_eq!(s.open_connections().await, 1, "one connection at start");
    // A transaction holds the open connection: a statement beside it does
    // not wait for it, it gets a second connection.
    let first = s.client().await.unwrap();
    let beside = tokio::time::timeout(Duration::from_secs(10), s.session_ended("x"))
        .await
        .expect("a statement beside a busy connection waits for none");
    assert!(!beside.unwrap());
    let second = s.client().await.unwrap();
    // Both are busy and the pool is full: the next statement waits its turn.
    let third = tokio::spawn({
        let s = s.clone();
        async move { s.session_ended("y").await }
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(200), async {
            while !third.is_finished() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .is_err(),
        "a third statement waits while two connections are busy"
    );
    drop((first, second));
    assert!(!third.await.unwrap().unwrap());
    assert_eq!(s.open_connections().await, 2, "never more than its size");
    drop(s);
    db.drop_db().await;
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error() {
    let e = Postgres::connect("postgres://warden:secret@127.0.0.1:1/x")
        .await
        .err()
        .unwrap();
    let text = e.to_string();
    assert!(text.starts_with("the store is unavailable: cannot connect to PostgreSQL at postgres://warden@127.0.0.1:1/x"), "{text}");
    assert!(!text.contains("secret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_batch_into_one_chain_per_replica_that_verify_checks() {
    let db = TestDb::create("chain").await;
    let (a, b) = (
        crate::Store::Postgres(Postgres::connect(&db.url()).await.unwrap()),
        crate::Store::Postgres(Postgres::connect(&db.url()).await.unwrap()),
    );
    let nowhere: crate::Unstored = Arc::new(|_, _| {});
    let writers = [
        crate::AuditWriter::start(a.clone(), nowhere.clone()),
        crate::AuditWriter::start(b.clone(), nowhere),
    ];
    let tasks: Vec<_> = (0..300)
        .map(|i| {
            let w = writers[i % 2].clone();
            let mut r = record_for_chain();
            r.tool = format!("t{i}");
            tokio::spawn(async move { w.append(r).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let report = a.verify_chains().await.unwrap();
    assert!(report.intact(), "{report:?}");
    assert_eq!(report.verdicts.iter().map(|v| v.records).sum::<u64>(), 300);
    // Each replica's lanes: its owner id, then `-1` … for the batches written beside.
    for owner in [a.owner(), b.owner()] {
        let lanes: Vec<_> = report
            .verdicts
            .iter()
            .filter(|v| v.chain.starts_with(owner))
            .map(|v| v.chain.clone())
            .collect();
        assert!(lanes.contains(&owner.to_owned()), "{lanes:?}");
        assert!(lanes.len() <= crate::AUDIT_LANES, "{lanes:?}");
        for lane in &lanes[..] {
            let rest = &lane[owner.len()..];
            assert!(
                rest.is_empty() || ["-1", "-2", "-3"].contains(&rest),
                "{lane}"
            );
        }
    }
    // An edit breaks the chain it is in, and only that one.
    let (admin, conn) = tokio_postgres::connect(&db.url(), NoTls).await.unwrap();
    tokio::spawn(conn);
    admin
        .batch_execute("UPDATE warden_audit SET outcome = 'ok2' WHERE tool = 't7'")
        .await
        .unwrap();
    let report = b.verify_chains().await.unwrap();
    let broken: Vec<_> = report
        .verdicts
        .iter()
        .filter_map(|v| v.broken.clone())
        .collect();
    assert_eq!(broken.len(), 1);
    assert_eq!(broken[0].2, crate::Break::Edited);
    drop((a, b, writers));
    db.drop_db().await;
}

pub(super) fn record_for_chain() -> AuditRecord {
    serde_json::from_value(json!({
        "time": "2026-12-03T00:00:00.000Z", "session": "stdio", "caller": "alice",
        "tool": "t", "upstream": null, "arguments": {}, "reason": null,
        "unknown_keys": [], "unknown_mode": null, "decision": "allowed",
        "outcome": "ok", "duration_ms": 1.0, "idempotency_key": null, "replayed": false
    }))
    .unwrap()
}

#[tokio::test]
async fn a_waiting_approval_is_listed_to_every_replica_and_answered_once() {
    let db = TestDb::create("approval").await;
    let (a, b) = (
        Postgres::connect(&db.url()).await.unwrap(),
        Postgres::connect(&db.url()).await.unwrap(),
    );
    a.approval_wait("a-1", r#"{"tool":"up.risky"}"#, 60_000)
        .await
        .unwrap();
    a.approval_wait("a-2", r#"{"tool":"up.other"}"#, -1)
        .await
        .unwrap(); // expired at once: never listed, never answered
    let listed = b.approvals_waiting().await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|w| (w.id.as_str(), w.waiting.as_str()))
            .collect::<Vec<_>>(),
        [("a-1", r#"{"tool":"up.risky"}"#)]
    );
    assert!(listed[0].waited_ms >= 0);
    assert_eq!(a.approval_verdict("a-1").await.unwrap(), None);
    // Two replicas answer at once: one wins, and the holder reads that one.
    let (x, y) = tokio::join!(
        b.approval_decide("a-1", "yes"),
        a.approval_decide("a-1", "no")
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    assert!(x ^ y, "exactly one answer is taken");
    let won = if x { "yes" } else { "no" };
    assert_eq!(
        a.approval_verdict("a-1").await.unwrap().as_deref(),
        Some(won)
    );
    assert!(
        b.approvals_waiting().await.unwrap().is_empty(),
        "answered: no longer waiting"
    );
    assert!(!b.approval_decide("a-2", "yes").await.unwrap());
    a.approval_end("a-1").await.unwrap();
    assert_eq!(a.approval_verdict("a-1").await.unwrap(), None);
    drop((a, b));
    db.drop_db().await;
}
