//! Several gateway processes on one SQLite file, as desktop clients start them:
//! one stdio gateway per window, often at the same instant. Every start succeeds,
//! on a fresh file and on one that needs migrating, and under load from several
//! processes no call fails for a moment's lock and each key runs once (I1).

mod common;

use common::*;
use rusqlite::Connection;
use serde_json::{json, Value};
use std::path::Path;

fn shared_store(db: &Path, extra_upstream: &str) -> String {
    format!(
        "[store]\nurl = \"sqlite://{}\"\n[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n{extra_upstream}\n",
        db.display()
    )
}

/// Starts `n` gateways on one config at once, then completes each handshake:
/// a start that failed (the process exited) fails the handshake.
fn start_together(name: &str, toml: &str, n: usize) -> Vec<Warden> {
    let mut all: Vec<Warden> = (0..n).map(|_| Warden::spawn(name, toml)).collect();
    for w in &mut all {
        w.handshake();
    }
    all
}

/// The database of the first release (schema version 1), with one completed key.
fn old_schema_file(db: &Path) {
    let conn = Connection::open(db).unwrap();
    conn.execute_batch(
        "CREATE TABLE ledger (scope TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL,
             state TEXT NOT NULL CHECK (state IN ('running', 'completed', 'failed')), result TEXT,
             created_ms INTEGER NOT NULL, PRIMARY KEY (scope, key));
         CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, time_ms INTEGER NOT NULL,
             caller TEXT, tool TEXT NOT NULL, outcome TEXT NOT NULL, record TEXT NOT NULL);
         CREATE INDEX audit_time ON audit (time_ms);
         CREATE TABLE schema_version (version INTEGER NOT NULL);
         INSERT INTO schema_version VALUES (1);",
    )
    .unwrap();
}

#[test]
fn eight_gateways_starting_at_once_on_one_fresh_file_all_start() {
    let dir = scratch("shared-fresh");
    for round in 0..20 {
        let db = dir.join(format!("fresh-{round}.db"));
        let all = start_together("shared-fresh", &shared_store(&db, ""), 8);
        for w in all {
            assert!(w.close().success(), "round {round}");
        }
    }
}

#[test]
fn eight_gateways_starting_at_once_on_one_old_file_all_start_and_it_migrates_once() {
    let dir = scratch("shared-old");
    for round in 0..20 {
        let db = dir.join(format!("old-{round}.db"));
        old_schema_file(&db);
        let all = start_together("shared-old", &shared_store(&db, ""), 8);
        for w in all {
            assert!(w.close().success(), "round {round}");
        }
        let conn = Connection::open(&db).unwrap();
        let versions: Vec<i64> = conn
            .prepare("SELECT version FROM schema_version")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            versions,
            vec![7],
            "round {round}: one version row, the newest"
        );
    }
}

const ALREADY_RUNNING: &str = "This call is already running. Retry once it finished.";

/// What a call answered, as text; panics on a JSON-RPC error.
fn answer_text(answer: &Value) -> String {
    let result = answer
        .get("result")
        .unwrap_or_else(|| panic!("a call failed: {answer}"));
    result["content"][0]["text"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

#[test]
fn four_gateways_writing_one_file_at_once_fail_no_call_and_run_each_key_once() {
    let dir = scratch("shared-load");
    let (db, count) = (dir.join("shared.db"), dir.join("count"));
    let extra = format!(
        "env = {{ FIXTURE_COUNT_FILE = \"{}\", FIXTURE_COUNT_ARG = \"text\" }}",
        count.display()
    );
    let toml = shared_store(&db, &extra);
    const CALLS: usize = 60;
    let threads: Vec<_> = start_together("shared-load", &toml, 4)
        .into_iter()
        .enumerate()
        .map(|(p, mut w)| {
            std::thread::spawn(move || {
                let mut busy = 0;
                for i in 0..CALLS {
                    let plain = w.call("fx.echo", json!({"text": format!("plain-{p}-{i}")}));
                    assert!(
                        answer_text(&plain).contains(&format!("plain-{p}-{i}")),
                        "{plain}"
                    );
                    for key in [format!("own-{p}-{i}"), format!("shared-{i}")] {
                        let keyed = w.request(
                            "tools/call",
                            json!({"name": "fx.echo", "arguments": {"text": key},
                                   "_meta": {"warden/idempotencyKey": key}}),
                        );
                        let text = answer_text(&keyed);
                        if text == ALREADY_RUNNING {
                            assert!(key.starts_with("shared-"), "{key}: {keyed}");
                            busy += 1;
                        } else {
                            assert!(text.contains(&key), "{key}: {keyed}");
                        }
                    }
                }
                assert!(w.close().success());
                busy
            })
        })
        .collect();
    let busy: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let lines = std::fs::read_to_string(&count).unwrap();
    let ran = |what: &str| {
        lines
            .lines()
            .filter(|l| *l == format!("echo {what}"))
            .count()
    };
    for i in 0..CALLS {
        assert_eq!(ran(&format!("shared-{i}")), 1, "shared key {i}");
        for p in 0..4 {
            assert_eq!(ran(&format!("own-{p}-{i}")), 1, "key own-{p}-{i}");
            assert_eq!(ran(&format!("plain-{p}-{i}")), 1, "plain call {p}-{i}");
        }
    }
    eprintln!("shared keys answered 'already running' while another process ran them: {busy}");
}

#[test]
fn a_file_another_process_keeps_locked_fails_the_start_naming_the_file_and_the_process() {
    let dir = scratch("shared-locked");
    let db = dir.join("held.db");
    // A process that takes the write lock of a file in WAL mode and keeps it.
    let script = format!(
        "import sqlite3, sys, time\n\
         c = sqlite3.connect({db:?}, isolation_level=None)\n\
         c.execute('PRAGMA journal_mode = WAL')\n\
         c.execute('CREATE TABLE t (x)')\n\
         c.execute('BEGIN EXCLUSIVE')\n\
         c.execute('INSERT INTO t VALUES (1)')\n\
         print('locked', flush=True)\n\
         sys.stdin.read()\n",
        db = db.display().to_string()
    );
    let mut holder = std::process::Command::new("python3")
        .args(["-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    let name = std::fs::read_to_string(format!("/proc/{}/comm", holder.id())).unwrap();
    let config = write_config(&dir, &shared_store(&db, ""));
    let (code, _, err) = cli(&["run", "--config", config.to_str().unwrap()]);
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "error: store.url: the store is unavailable: the SQLite file {} stayed locked for 10 s: \
             process {} ({}) holds its write lock. Wait for it to finish, stop it, or give \
             this gateway a file of its own ([store] url)",
            db.display(),
            holder.id(),
            name.trim()
        )
    );
}
