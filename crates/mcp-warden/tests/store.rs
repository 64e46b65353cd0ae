//! The idempotency ledger and the audit trail on a real SQLite file (I1, I2, H4).

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

fn stored(dir: &std::path::Path, upstream: &str) -> String {
    format!(
        "[store]\nurl = \"sqlite://{}\"\n[audit]\njsonl = \"{}\"\nredact = [\"text\"]\n{upstream}",
        dir.join("warden.db").display(),
        dir.join("audit.jsonl").display()
    )
}

fn counted_fixture(count: &std::path::Path, extra: &str) -> String {
    format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\nenv = {{ FIXTURE_COUNT_FILE = \"{}\" }}\n{extra}\n",
        count.display()
    )
}

/// `mcp-warden audit --json` with more filters: its output lines.
fn audit_json(config: &str, filters: &[&str]) -> String {
    let mut args = vec!["audit", "--config", config, "--json"];
    args.extend_from_slice(filters);
    let (code, out, err) = cli(&args);
    assert_eq!(code, 0, "{err}");
    out
}

fn keyed(w: &mut Warden, tool: &str, args: Value, key: &str) -> Value {
    w.request(
        "tools/call",
        json!({"name": tool, "arguments": args, "_meta": {"warden/idempotencyKey": key}}),
    )
}

fn executions(count: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(count)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_completed_key_replays_and_a_reused_key_is_refused() {
    let dir = scratch("ledger");
    let mut w = Warden::start("ledger", &stored(&dir, DEMO));
    let first = keyed(
        &mut w,
        "notes.create_note",
        json!({"title": "once", "text": "t"}),
        "k-1",
    );
    assert_eq!(
        first["result"]["content"][0]["text"],
        "Created note 1 'once' (private)."
    );
    let again = keyed(
        &mut w,
        "notes.create_note",
        json!({"text": "t", "title": "once"}),
        "k-1",
    );
    assert_eq!(
        again["result"], first["result"],
        "the stored result is replayed"
    );
    let other = keyed(
        &mut w,
        "notes.create_note",
        json!({"title": "twice", "text": "t"}),
        "k-1",
    );
    assert_eq!(
        other["result"]["content"][0]["text"],
        "Error: The idempotency key 'k-1' was already used for a different call (another tool or other arguments). Use a new key for a new call."
    );
    // Keys are the caller's own namespace; another key runs normally; non-string keys are ignored.
    keyed(
        &mut w,
        "notes.create_note",
        json!({"title": "second", "text": "t"}),
        "k-2",
    );
    w.request("tools/call", json!({"name": "notes.create_note", "arguments": {"title": "third", "text": "t"}, "_meta": {"warden/idempotencyKey": 7}}));
    assert_eq!(
        w.call_text("notes.list_notes", json!({})),
        "1. once [private] t\n2. second [private] t\n3. third [private] t"
    );

    let out = audit_json(w.dir.join("warden.toml").to_str().unwrap(), &[]);
    let records: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 6);
    assert_eq!(
        records[0]["arguments"],
        json!({"title": "once", "text": "[redacted]", "is_public": false})
    );
    assert_eq!(records[0]["idempotency_key"], "k-1");
    assert_eq!(records[1]["replayed"], true);
    assert_eq!(records[2]["decision"], "denied");
    assert!(records
        .iter()
        .all(|r| r["caller"] == "local" && r["session"] == "stdio"));
    let jsonl = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap();
    assert_eq!(
        jsonl.lines().count(),
        6,
        "the JSON-lines stream carries the same records"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_running_key_is_refused_and_a_failed_one_may_be_retried() {
    let dir = scratch("ledger-running");
    let count = dir.join("count.txt");
    let mut w = Warden::start(
        "ledger-running",
        &stored(&dir, &counted_fixture(&count, "timeout_ms = 1500")),
    );
    let slow = json!({"name": "fx.slow", "arguments": {"ms": 800}, "_meta": {"warden/idempotencyKey": "s"}});
    let first = w.send_request("tools/call", slow.clone());
    std::thread::sleep(Duration::from_millis(200));
    let second = w.request("tools/call", slow.clone());
    assert_eq!(
        second["result"]["content"][0]["text"],
        "This call is already running. Retry once it finished."
    );
    assert_eq!(
        w.response(&json!(first))["result"]["content"][0]["text"],
        "slept 800 ms"
    );
    // A call that failed (timed out) is recorded as failed and may run again.
    let failing = json!({"ms": 5000});
    let r = keyed(&mut w, "fx.slow", failing.clone(), "f");
    assert_eq!(
        r["result"]["content"][0]["text"],
        "Error: An internal error occurred while executing the tool."
    );
    let r = w.send_request(
        "tools/call",
        json!({"name": "fx.slow", "arguments": failing, "_meta": {"warden/idempotencyKey": "f"}}),
    );
    let _ = w.response(&json!(r));
    assert_eq!(executions(&count), ["slow", "slow", "slow"]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn two_gateways_one_store_200_identical_calls_run_once() {
    let dir = scratch("ledger-two");
    let count = dir.join("count.txt");
    let config = stored(&dir, &counted_fixture(&count, ""));
    two_gateways_200_identical_calls(&config, &count);
    let _ = std::fs::remove_dir_all(dir);
}

/// Two gateway processes on one store, 100 identical keyed calls each, pipelined:
/// exactly one upstream execution, every other call replayed or told it is running.
/// Both gateways' records land in the shared trail.
fn two_gateways_200_identical_calls(config: &str, count: &std::path::Path) {
    let mut a = Warden::start("two-a", config);
    let mut b = Warden::start("two-b", config);
    let call = json!({"name": "fx.echo", "arguments": {"text": "once"}, "_meta": {"warden/idempotencyKey": "shared"}});
    let ids_a: Vec<i64> = (0..100)
        .map(|_| a.send_request("tools/call", call.clone()))
        .collect();
    let ids_b: Vec<i64> = (0..100)
        .map(|_| b.send_request("tools/call", call.clone()))
        .collect();
    let text = |w: &mut Warden, id: i64| {
        w.response(&json!(id))["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let mut texts: Vec<String> = ids_a.into_iter().map(|id| text(&mut a, id)).collect();
    texts.extend(ids_b.into_iter().map(|id| text(&mut b, id)));
    assert_eq!(
        executions(count),
        ["echo"],
        "exactly one upstream execution across both gateways"
    );
    assert!(
        texts.iter().all(|t| t == r#"{"text":"once"}"#
            || t == "This call is already running. Retry once it finished."),
        "{texts:?}"
    );
    assert!(texts.iter().any(|t| t == r#"{"text":"once"}"#));
    let out = audit_json(
        a.dir.join("warden.toml").to_str().unwrap(),
        &["--limit", "0"],
    );
    assert_eq!(
        out.lines().count(),
        200,
        "both gateways wrote their records to the shared trail"
    );
}

#[test]
fn every_answered_call_is_in_the_trail_after_a_kill_9() {
    let dir = scratch("audit-kill");
    let config = stored(&dir, &fixture_config("", ""));
    let mut w = Warden::start("audit-kill", &config);
    let ids: Vec<i64> = (0..300)
        .map(|i| {
            w.send_request(
                "tools/call",
                json!({"name": "fx.echo", "arguments": {"n": i}}),
            )
        })
        .collect();
    let mut answered = Vec::new();
    for id in ids.iter().take(150) {
        let r = w.response(&json!(id));
        answered.push(r["result"]["structuredContent"]["n"].as_i64().unwrap());
    }
    let status = std::process::Command::new("kill")
        .args(["-9", &w.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    w.wait_exit();
    let out = audit_json(
        w.dir.join("warden.toml").to_str().unwrap(),
        &["--tool", "fx.echo", "--outcome", "ok", "--limit", "0"],
    );
    let recorded: std::collections::HashSet<i64> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["arguments"]["n"]
                .as_i64()
                .unwrap()
        })
        .collect();
    for n in answered {
        assert!(
            recorded.contains(&n),
            "call {n} was answered but has no audit record"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn audit_filters_and_table() {
    let dir = scratch("audit-filter");
    let mut w = Warden::start("audit-filter", &stored(&dir, &fixture_config("", "")));
    w.call("fx.echo", json!({"n": 1}));
    w.call("fx.fail", json!({}));
    w.call("fx.nope", json!({}));
    let cfg = w.dir.join("warden.toml");
    let cfg = cfg.to_str().unwrap();
    let lines = |args: &[&str]| audit_json(cfg, args).lines().count();
    assert_eq!(lines(&[]), 3);
    assert_eq!(lines(&["--outcome", "tool_error"]), 1);
    assert_eq!(lines(&["--outcome", "refused", "--tool", "fx.nope"]), 1);
    assert_eq!(lines(&["--caller", "someone-else"]), 0);
    assert_eq!(lines(&["--since", "1h"]), 3);
    assert_eq!(lines(&["--since", "2099-01-01T00:00:00Z"]), 0);
    let (code, _, err) = cli(&["audit", "--config", cfg, "--since", "last tuesday"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--since: 'last tuesday' is not a time"),
        "{err}"
    );
    let (code, table, _) = cli(&["audit", "--config", cfg]);
    assert_eq!(code, 0);
    assert!(table.starts_with("TIME "), "{table}");
    assert!(
        table.contains("fx.nope")
            && table.contains("unknown_tool")
            && table.ends_with("(3 record(s))\n"),
        "{table}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs `mcp-warden run` on a config that must stop it; its stderr.
fn start_fails(path: &std::path::Path) -> String {
    let out = std::process::Command::new(WARDEN)
        .args(["run", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_store_that_cannot_be_opened_stops_the_start_with_a_clear_error() {
    let dir = scratch("store-bad");
    let path = write_config(
        &dir,
        &format!("[store]\nurl = \"sqlite:///nonexistent-dir/w.db\"\n{DEMO}"),
    );
    let err = start_fails(&path);
    assert!(
        err.contains("store.url: the store is unavailable: cannot open /nonexistent-dir/w.db"),
        "{err}"
    );
    let bad = write_config(&dir, &format!("[store]\nurl = \"mysql://x/db\"\n{DEMO}"));
    let (code, _, err) = cli(&["check", "--config", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("store.url: 'mysql://x/db' is not a store URL; use sqlite://FILE or postgres://USER@HOST/DB"), "{err}");
    // An unreachable PostgreSQL stops the start too, without echoing the password.
    let path = write_config(
        &dir,
        &format!("[store]\nurl = \"postgres://w:secret@127.0.0.1:1/db\"\n{DEMO}"),
    );
    let err = start_fails(&path);
    assert!(
        err.contains("cannot connect to PostgreSQL at postgres://w@127.0.0.1:1/db")
            && !err.contains("secret"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn metrics_count_calls_unknown_keys_and_latency() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let config = format!(
        "[metrics]\nlisten = \"127.0.0.1:{port}\"\n{}",
        fixture_config("", "")
    );
    let mut w = Warden::start("metrics", &config);
    w.call("fx.echo", json!({"n": 1, "junk": 2, "more": 3}));
    w.call("fx.fail", json!({}));
    w.call("fx.nope", json!({}));
    let scrape = |path: &str| -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics endpoint");
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let text = scrape("/metrics");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    for line in [
        "warden_calls_total{decision=\"allowed\",outcome=\"ok\"} 1\n",
        "warden_calls_total{decision=\"allowed\",outcome=\"tool_error\"} 1\n",
        "warden_calls_total{decision=\"unknown_tool\",outcome=\"refused\"} 1\n",
        "warden_call_duration_seconds_count 3\n",
        "warden_unknown_keys_total 2\n",
        "warden_audit_lost_total 0\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in {text}");
    }
    assert!(scrape("/other").starts_with("HTTP/1.1 404"));
}

#[test]
fn two_gateways_sharing_postgres_run_200_identical_calls_once() {
    let db = PgDb::create("two");
    let dir = scratch("pg-two");
    let count = dir.join("count.txt");
    let config = format!(
        "[store]\nurl = \"{}\"\n{}",
        db.url(),
        counted_fixture(&count, "")
    );
    two_gateways_200_identical_calls(&config, &count);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_store_lost_mid_run_fails_keyed_calls_closed_and_keeps_serving_the_rest() {
    let db = PgDb::create("lost");
    let mut w = Warden::start(
        "pg-lost",
        &format!(
            "[store]\nurl = \"{}\"\n{}",
            db.url(),
            fixture_config("", "")
        ),
    );
    let ok = keyed(&mut w, "fx.echo", json!({"n": 1}), "before");
    assert_eq!(ok["result"]["content"][0]["text"], r#"{"n":1}"#);
    // The database disappears under the running gateway.
    db.lose();
    for i in 0..3 {
        let r = keyed(&mut w, "fx.echo", json!({"n": 2}), &format!("after-{i}"));
        assert_eq!(
            (&r["result"]["content"][0]["text"], &r["result"]["_meta"]),
            (
                &json!("Error: Tool 'fx.echo' was not run: its idempotency key could not be recorded just now. Retry in 1 s; with the same key it still runs at most once."),
                &json!({"warden/retryAfterMs": 1000})
            ),
            "a call that needs the ledger fails closed, and says it did not run"
        );
    }
    // Calls without a key still run; their audit records are retried, then logged.
    assert_eq!(w.call_text("fx.echo", json!({"n": 3})), r#"{"n":3}"#);
}

/// The processes whose parent is `pid` that have not exited (zombies count as exited).
fn live_children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces, so read after its ')'.
        let mut fields = stat[stat.rfind(')').unwrap_or(0) + 1..].split_whitespace();
        let (state, ppid) = (fields.next(), fields.next());
        if ppid == Some(pid.to_string().as_str()) && state != Some("Z") {
            out.push(child);
        }
    }
    out
}

fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat[stat.rfind(')').unwrap_or(0) + 1..]
            .trim_start()
            .starts_with('Z'),
        Err(_) => true,
    }
}

/// Finding 6: a gateway killed mid-call left its idempotency key "running" until
/// the retention ended. Two gateways share a store; A is killed (-9) in the middle
/// of a keyed call of a tool declared safe to repeat (`rerun_abandoned`; without
/// it the key answers that its outcome is unknown, see abandoned.rs). B refuses
/// the key while A's lease holds, and runs the call once the lease ran out
/// (upstream timeout 2 s: a 4 s lease); the trail records A's attempt as
/// abandoned. The upstream ran twice, the second attempt only after the first
/// had ended.
fn a_killed_gateways_key_is_taken_over_once_its_lease_ran_out(
    config: &str,
    count: &std::path::Path,
) {
    const RUNNING: &str = "This call is already running. Retry once it finished.";
    let mut a = Warden::start("lease-a", config);
    let mut b = Warden::start("lease-b", config);
    let upstream_a = live_children(a.pid());
    assert_eq!(upstream_a.len(), 1, "gateway A runs one upstream child");
    let call = json!({"name": "fx.slow", "arguments": {"ms": 1500}, "_meta": {"warden/idempotencyKey": "crash"}});
    let sent = std::time::Instant::now();
    a.send_request("tools/call", call.clone());
    while executions(count).is_empty() {
        assert!(
            sent.elapsed() < PATIENCE,
            "the call never reached A's upstream"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = std::process::Command::new("kill")
        .args(["-9", &a.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    a.wait_exit();

    let text = |w: &mut Warden| {
        w.request("tools/call", call.clone())["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(text(&mut b), RUNNING, "A's lease still holds");
    // Without its gateway, A's upstream reads the end of its input and exits: the
    // first attempt is over before the lease, and with it the key, runs out.
    while !gone(upstream_a[0]) {
        assert!(
            sent.elapsed() < Duration::from_secs(4),
            "A's upstream outlived A's lease"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let answer = loop {
        let t = text(&mut b);
        if t != RUNNING {
            break t;
        }
        assert!(
            sent.elapsed() < PATIENCE,
            "the key stayed running after A's lease ran out"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(answer, "slept 1500 ms");
    assert!(
        sent.elapsed() >= Duration::from_secs(4),
        "taken over only once the lease (timeout + margin) ran out"
    );
    assert_eq!(text(&mut b), "slept 1500 ms", "now completed, it replays");
    assert_eq!(executions(count), ["slow", "slow"], "once per attempt");

    let out = audit_json(
        b.dir.join("warden.toml").to_str().unwrap(),
        &["--tool", "fx.slow", "--limit", "0"],
    );
    let records: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ends: Vec<(&str, &str, bool)> = records
        .iter()
        .filter(|r| r["outcome"] != "refused")
        .map(|r| {
            assert_eq!(r["idempotency_key"], "crash");
            assert_eq!(r["caller"], "local");
            (
                r["decision"].as_str().unwrap(),
                r["outcome"].as_str().unwrap(),
                r["replayed"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ends,
        [
            ("allowed", "abandoned", false),
            ("allowed", "ok", false),
            ("allowed", "ok", true)
        ],
        "A's attempt is recorded as abandoned before B's run: {out}"
    );
    assert!(records
        .iter()
        .filter(|r| r["outcome"] == "refused")
        .all(|r| r["decision"] == "denied"));
}

#[test]
fn a_killed_gateways_key_of_a_tool_safe_to_repeat_is_retryable_once_its_lease_ran_out() {
    let dir = scratch("lease-sqlite");
    let count = dir.join("count.txt");
    let safe = "timeout_ms = 2000\n[upstream.tools.slow]\nrerun_abandoned = true";
    let config = stored(&dir, &counted_fixture(&count, safe));
    a_killed_gateways_key_is_taken_over_once_its_lease_ran_out(&config, &count);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_killed_gateways_key_of_an_upstream_safe_to_repeat_is_retryable_on_postgres() {
    let db = PgDb::create("lease");
    let dir = scratch("pg-lease");
    let count = dir.join("count.txt");
    let config = format!(
        "[store]\nurl = \"{}\"\n{}",
        db.url(),
        counted_fixture(&count, "timeout_ms = 2000\nrerun_abandoned = true")
    );
    a_killed_gateways_key_is_taken_over_once_its_lease_ran_out(&config, &count);
    let _ = std::fs::remove_dir_all(dir);
}

/// A small tmpfs mounted for one test (the machine's root may mount), unmounted
/// when dropped, also when the test fails.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    /// `None` where this process may not mount (not root, or no capability).
    fn mount(dir: &std::path::Path, kib: u32) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| SmallDisk(dir.to_path_buf()))
    }

    /// Writes a file until the disk has no room left.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write as _;
        let filler = self.0.join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![b'x'; 4096];
        while f.write_all(&block).and_then(|()| f.sync_all()).is_ok() {}
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_full_disk_refuses_keyed_calls_clearly_serves_the_rest_and_records_again_once_there_is_room() {
    let dir = scratch("full-disk");
    let Some(disk) = SmallDisk::mount(&dir.join("disk"), 1024) else {
        // CI runs as root; a developer's unprivileged run cannot mount.
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    };
    let count = dir.join("count");
    let db = dir.join("disk").join("warden.db");
    // Four calls a minute: exactly the calls that run or replay below, so the
    // two the full disk refused must not have been counted.
    let toml = format!(
        "[store]\nurl = \"sqlite://{}\"\n{}[[quota]]\ncallers = [\"*\"]\ntools = [\"fx.*\"]\nrate = \"4/minute\"\n",
        db.display(),
        counted_fixture(&count, "")
    );
    let mut w = Warden::start_capturing_stderr("full-disk", &toml, "warn");
    let r = keyed(&mut w, "fx.echo", json!({"n": 1}), "before");
    assert_eq!(r["result"]["content"][0]["text"], r#"{"n":1}"#);
    let filler = disk.fill();
    // A keyed call cannot record its key: it does not run, and says so.
    let big = "y".repeat(64 * 1024);
    for key in ["full-1", "full-2"] {
        let r = keyed(&mut w, "fx.echo", json!({"text": big}), key);
        assert_eq!(
            (&r["result"]["content"][0]["text"], &r["result"]["isError"]),
            (
                &json!("Error: Tool 'fx.echo' was not run: its idempotency key could not be recorded just now. Retry in 1 s; with the same key it still runs at most once."),
                &json!(true)
            ),
            "{r}"
        );
    }
    // A call without a key runs; the gateway keeps serving.
    assert_eq!(w.call_text("fx.echo", json!({"n": 2})), r#"{"n":2}"#);
    assert_eq!(
        executions(&count),
        ["echo", "echo"],
        "the refused calls never ran"
    );
    // Room again: the refused key runs now, once, and replays after.
    std::fs::remove_file(filler).unwrap();
    for _ in 0..2 {
        let r = keyed(&mut w, "fx.echo", json!({"text": big}), "full-1");
        assert_eq!(
            r["result"]["structuredContent"]["text"]
                .as_str()
                .map(str::len),
            Some(big.len()),
            "{r}"
        );
    }
    assert_eq!(executions(&count), ["echo", "echo", "echo"]);
    let log = w.stderr_after_exit();
    assert!(log.contains("the ledger is unavailable; the call is refused"));
    assert!(!log.contains("panicked"));
    // What the full disk refused to keep is in the log whole, so nothing is
    // lost: each refused call's audit record, or it is in the trail.
    let config = w.dir.join("warden.toml");
    let records = audit_json(config.to_str().unwrap(), &["--limit", "0"]);
    for key in ["full-1", "full-2"] {
        let kept = |text: &str| {
            text.lines().any(|l| {
                l.contains(&format!("\"idempotency_key\":\"{key}\""))
                    && l.contains("\"outcome\":\"failed\"")
            })
        };
        assert!(
            kept(&records) || kept(&log),
            "the refused {key} is on no record"
        );
    }
    let replays = records
        .lines()
        .filter(|l| l.contains("\"replayed\":true"))
        .count();
    assert_eq!(replays, 1, "full-1 ran once, then replayed");
    drop(disk);
}
