//! The audit trail's hash chains through the binary (T2): `mcp-warden audit
//! verify` on a trail a gateway wrote, then with rows edited, deleted and
//! reordered by hand, on SQLite and on PostgreSQL.

mod common;

use common::*;
use rusqlite::Connection;
use serde_json::json;
use std::path::{Path, PathBuf};

/// A gateway on `store` makes `n` calls, then stops (its records are flushed).
fn calls(store: &str, n: usize) {
    let toml = format!("[store]\nurl = \"{store}\"\n{}", fixture_config("", ""));
    let mut w = Warden::start("chain", &toml);
    for i in 0..n {
        let answer = w.call("fx.echo", json!({ "n": i }));
        assert!(answer["result"]["content"].is_array(), "{answer}");
    }
    assert!(w.close().success());
}

/// A config naming `store`, in a folder of its own (kept: the test reads it).
fn config_for(store: &str) -> PathBuf {
    let dir = scratch("verify");
    write_config(
        &dir,
        &format!("[store]\nurl = \"{store}\"\n{}", fixture_config("", "")),
    )
}

fn verify(config: &Path) -> (i32, String) {
    let (code, out, err) = cli(&["audit", "verify", "--config", &config.display().to_string()]);
    assert!(err.is_empty(), "{err}");
    (code, out)
}

fn intact(chain: &str, n: usize) -> String {
    format!("chain {chain}: {n} record(s), intact\nevery chain holds: 1 chain(s), {n} record(s)\n")
}

fn broken(chain: &str, id: i64, seq: i64, how: &str) -> String {
    format!(
        "chain {chain}: broken at record {id} (seq {seq}): {how}\n\
         1 of 1 chain(s) broken: records were edited, deleted or reordered after they were written\n"
    )
}

const EDITED: &str = "its content does not match its hash: it was edited";
const DELETED: &str = "the record with seq 2 before it is missing: deleted";
const REORDERED: &str = "it stands before the record it follows in the trail: rows were reordered";

/// A copy of the SQLite trail at `db`, changed by `sql`, and its config.
fn tampered(db: &Path, name: &str, sql: &str) -> PathBuf {
    let copy = db.with_file_name(format!("{name}.db"));
    std::fs::copy(db, &copy).unwrap();
    Connection::open(&copy).unwrap().execute_batch(sql).unwrap();
    config_for(&format!("sqlite://{}", copy.display()))
}

#[test]
fn sqlite_verify_names_the_first_edited_deleted_or_reordered_record() {
    let dir = scratch("chain-sqlite");
    let db = dir.join("warden.db");
    calls(&format!("sqlite://{}", db.display()), 5);
    let conn = Connection::open(&db).unwrap();
    let chain: String = conn
        .query_row("SELECT DISTINCT chain FROM audit", [], |r| r.get(0))
        .unwrap();
    let id = |seq: i64| -> i64 {
        conn.query_row("SELECT id FROM audit WHERE seq = ?1", [seq], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(chain.len(), 32, "the gateway's owner id");
    assert_eq!(
        verify(&config_for(&format!("sqlite://{}", db.display()))),
        (0, intact(&chain, 5))
    );

    let edit = "UPDATE audit SET record = replace(record, '\"n\":2', '\"n\":20') WHERE seq = 2";
    let out = verify(&tampered(&db, "edited", edit));
    assert_eq!(out, (1, broken(&chain, id(2), 2, EDITED)));
    // A column the listing filters on is covered too.
    let out = verify(&tampered(
        &db,
        "recaller",
        "UPDATE audit SET caller = 'bob' WHERE seq = 3",
    ));
    assert_eq!(out, (1, broken(&chain, id(3), 3, EDITED)));

    let out = verify(&tampered(&db, "deleted", "DELETE FROM audit WHERE seq = 2"));
    assert_eq!(out, (1, broken(&chain, id(3), 3, DELETED)));

    let (a, b) = (id(1), id(2));
    let swap = format!(
        "UPDATE audit SET id = -1 WHERE id = {a}; UPDATE audit SET id = {a} WHERE id = {b};
         UPDATE audit SET id = {b} WHERE id = -1;"
    );
    let out = verify(&tampered(&db, "reordered", &swap));
    assert_eq!(out, (1, broken(&chain, a, 2, REORDERED)));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `sql` on the test database; what psql printed (unaligned, tuples only).
fn psql(db: &PgDb, sql: &str) -> String {
    let out = std::process::Command::new("psql")
        .args(["-d", &db.url(), "-tAq"])
        .args(["-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn postgres_verify_names_the_first_edited_deleted_or_reordered_record() {
    let db = PgDb::create("chain");
    calls(&db.url(), 5);
    let chain = psql(&db, "SELECT DISTINCT chain FROM warden_audit");
    let id = |seq: i64| -> i64 {
        psql(
            &db,
            &format!("SELECT id FROM warden_audit WHERE seq = {seq}"),
        )
        .parse()
        .unwrap()
    };
    let config = config_for(&db.url());
    assert_eq!(verify(&config), (0, intact(&chain, 5)));

    // Each change is undone before the next: the chain holds again each time.
    let original = psql(&db, "SELECT record FROM warden_audit WHERE seq = 2");
    psql(
        &db,
        "UPDATE warden_audit SET record = replace(record, '\"n\":2', '\"n\":20') WHERE seq = 2",
    );
    assert_eq!(verify(&config), (1, broken(&chain, id(2), 2, EDITED)));
    let restore = format!(
        "UPDATE warden_audit SET record = '{}' WHERE seq = 2",
        original.replace('\'', "''")
    );
    psql(&db, &restore);
    assert_eq!(verify(&config), (0, intact(&chain, 5)));

    let (a, b) = (id(1), id(2));
    let swap = format!(
        "BEGIN; UPDATE warden_audit SET id = -1 WHERE id = {a};
         UPDATE warden_audit SET id = {a} WHERE id = {b}; UPDATE warden_audit SET id = {b} WHERE id = -1; COMMIT;"
    );
    psql(&db, &swap);
    assert_eq!(verify(&config), (1, broken(&chain, a, 2, REORDERED)));
    psql(&db, &swap);
    assert_eq!(verify(&config), (0, intact(&chain, 5)));

    let third = id(3);
    psql(&db, "DELETE FROM warden_audit WHERE seq = 2");
    assert_eq!(verify(&config), (1, broken(&chain, third, 3, DELETED)));
}

/// The trail the previous release (before chains) wrote: four calls by alice,
/// the second under key `k-old`, dumped from the files it made (`tests/fixtures`).
const BEFORE_SQLITE: &str = include_str!("fixtures/trail-before-chains.sqlite.sql");
const BEFORE_PG: &str = "tests/fixtures/trail-before-chains.pg.sql";

/// A gateway of this version on a trail of the previous one: the key it
/// completed replays, and a new call is recorded, chained.
fn carry_on(store: &str) {
    let toml = format!(
        "[gateway]\nstdio_caller = \"alice\"\n[store]\nurl = \"{store}\"\n{}",
        fixture_config("", "")
    );
    let mut w = Warden::start("migrated", &toml);
    let replay = w.request(
        "tools/call",
        json!({"name": "fx.echo", "arguments": {"n": 2}, "_meta": {"warden/idempotencyKey": "k-old"}}),
    );
    assert_eq!(replay["result"]["content"][0]["text"], "{\"n\":2}");
    let fresh = w.call("fx.echo", json!({"n": 4}));
    assert_eq!(fresh["result"]["content"][0]["text"], "{\"n\":4}");
    assert!(w.close().success());
}

fn after_migration(chain: &str) -> String {
    format!(
        "chain {chain}: 2 record(s), intact\n\
         4 record(s) written before records were chained: they cannot be verified\n\
         every chain holds: 1 chain(s), 2 record(s)\n"
    )
}

#[test]
fn a_sqlite_trail_of_the_previous_release_migrates_with_nothing_lost() {
    let dir = scratch("migrate-sqlite");
    let db = dir.join("warden.db");
    let conn = Connection::open(&db).unwrap();
    conn.execute_batch(BEFORE_SQLITE).unwrap();
    let rows = |conn: &Connection| -> Vec<String> {
        let mut stmt = conn
            .prepare("SELECT id, time_ms, caller, tool, outcome, record FROM audit WHERE id <= 4 ORDER BY id")
            .unwrap();
        let rows = stmt.query_map([], |r| {
            Ok(format!(
                "{}|{}|{:?}|{}|{}|{}",
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?
            ))
        });
        rows.unwrap().map(Result::unwrap).collect()
    };
    let before = rows(&conn);
    assert_eq!(before.len(), 4);
    drop(conn);
    let store = format!("sqlite://{}", db.display());
    carry_on(&store);
    let conn = Connection::open(&db).unwrap();
    assert_eq!(rows(&conn), before, "the old records are as they were");
    let chain: String = conn
        .query_row("SELECT chain FROM audit WHERE id = 6", [], |r| r.get(0))
        .unwrap();
    let config = config_for(&store);
    assert_eq!(verify(&config), (0, after_migration(&chain)));
    let (code, listed, _) = cli(&["audit", "--config", &config.display().to_string(), "--json"]);
    assert_eq!((code, listed.lines().count()), (0, 6));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_postgres_trail_of_the_previous_release_migrates_with_nothing_lost() {
    let db = PgDb::create("migrate");
    let load = std::process::Command::new("psql")
        .args(["-d", &db.url(), "-q"])
        .args(["-v", "ON_ERROR_STOP=1", "-f", BEFORE_PG])
        .output()
        .unwrap();
    assert!(
        load.status.success(),
        "{}",
        String::from_utf8_lossy(&load.stderr)
    );
    let rows = "SELECT id, time_ms, caller, tool, outcome, record FROM warden_audit WHERE id <= 4 ORDER BY id";
    let before = psql(&db, rows);
    assert_eq!(before.lines().count(), 4);
    carry_on(&db.url());
    assert_eq!(psql(&db, rows), before, "the old records are as they were");
    let chain = psql(&db, "SELECT chain FROM warden_audit WHERE id = 6");
    let config = config_for(&db.url());
    assert_eq!(verify(&config), (0, after_migration(&chain)));
    let (code, listed, _) = cli(&["audit", "--config", &config.display().to_string(), "--json"]);
    assert_eq!((code, listed.lines().count()), (0, 6));
}

#[test]
fn retention_deletes_old_records_and_what_is_left_still_verifies() {
    let dir = scratch("retention");
    let db = dir.join("warden.db");
    let store = format!("sqlite://{}", db.display());
    let toml = format!(
        "[store]\nurl = \"{store}\"\n[audit]\nretention = \"2s\"\n{}",
        fixture_config("", "")
    );
    let mut w = Warden::start("retention", &toml);
    for n in 0..3 {
        w.call("fx.echo", json!({ "n": n }));
    }
    // Pruned every second: by now the first three are over 2 s old and gone.
    std::thread::sleep(std::time::Duration::from_millis(3500));
    for n in 3..5 {
        w.call("fx.echo", json!({ "n": n }));
    }
    assert!(w.close().success());
    let config = config_for(&store);
    let (code, listed, _) = cli(&["audit", "--config", &config.display().to_string(), "--json"]);
    let kept: Vec<_> = listed
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["arguments"]["n"].clone())
        .collect();
    assert_eq!((code, kept), (0, vec![json!(3), json!(4)]));
    let chain: String = Connection::open(&db)
        .unwrap()
        .query_row("SELECT chain FROM audit_anchor", [], |r| r.get(0))
        .unwrap();
    assert_eq!(verify(&config), (0, intact(&chain, 2)));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn postgres_retention_drops_the_days_older_than_it_and_what_is_left_still_verifies() {
    let db = PgDb::create("retention");
    calls(&db.url(), 5);
    let chain = psql(&db, "SELECT DISTINCT chain FROM warden_audit");
    // The first two records, moved five days back (their hashes no longer
    // hold, but they are about to go): no partition holds that day, so they
    // land in the default one.
    psql(
        &db,
        "UPDATE warden_audit SET time_ms = time_ms - 5 * 86400000 WHERE seq < 2",
    );
    let defaulted = "SELECT COUNT(*) FROM warden_audit_default";
    assert_eq!(psql(&db, defaulted), "2");
    let toml = format!(
        "[store]\nurl = \"{}\"\n[audit]\nretention = \"1d\"\n{}",
        db.url(),
        fixture_config("", "")
    );
    // Retention runs at start: the two move into their day's partition, which
    // is wholly older than a day and dropped.
    let w = Warden::start("pg-retention", &toml);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while psql(&db, "SELECT COUNT(*) FROM warden_audit").as_str() != "3" {
        assert!(std::time::Instant::now() < deadline, "not dropped in 10 s");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(w.close().success());
    assert_eq!(psql(&db, defaulted), "0");
    let anchor = psql(&db, "SELECT chain || ' ' || seq FROM warden_audit_anchor");
    assert_eq!(anchor, format!("{chain} 1"));
    let config = config_for(&db.url());
    assert_eq!(verify(&config), (0, intact(&chain, 3)));
}
