//! An upstream's life behind the real binary: a crash answered and restarted, a
//! stuck one (alive, not answering) restarted after timeouts confirmed by a ping or
//! after a missed liveness ping, a live but slow one left alone, one restart loop
//! at a time, and no call before a restarted upstream's handshake.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[test]
fn a_crashed_upstream_answers_e2_and_is_restarted() {
    let mut w = Warden::start("crash", &fixture_config("", ""));
    let slow = w.send_request(
        "tools/call",
        json!({"name": "fx.slow", "arguments": {"ms": 10000}}),
    );
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    assert_eq!(
        w.call_text("fx.crash", json!({})),
        "Error: An internal error occurred while executing the tool."
    );
    // The call in flight when the child died is answered too, promptly.
    let r = w.response(&json!(slow));
    assert_eq!(
        r["result"]["content"][0]["text"],
        "Error: An internal error occurred while executing the tool."
    );
    assert!(t.elapsed() < Duration::from_secs(3));
    // Restarted with backoff; clients hear the catalogue changed.
    w.wait_for("list_changed after restart", |m| {
        m["method"] == "notifications/tools/list_changed"
    });
    assert_eq!(
        w.call_text("fx.echo", json!({"text": "back"})),
        r#"{"text":"back"}"#
    );
}

/// A fixture upstream with a 300 ms timeout and `restart` settings, its freeze
/// tool on, and metrics on a port of their own (returned).
fn stuck_config(restart: &str) -> (u16, String) {
    let port = free_port();
    let upstream = format!("timeout_ms = 300\n{restart}\nenv = {{ FIXTURE_FREEZE_TOOL = \"1\" }}");
    let metrics = format!("[metrics]\nlisten = \"127.0.0.1:{port}\"");
    (port, fixture_config(&upstream, &metrics))
}

#[test]
fn an_upstream_that_stops_answering_is_restarted_after_timeouts_in_a_row() {
    // Alive but stuck: every call times out. After two in a row the gateway ends it
    // and starts it again, as after a crash; the next call works.
    let (port, toml) = stuck_config("restart_after_timeouts = 2\nping_interval_ms = 0");
    let mut w = Warden::start("stuck-timeouts", &toml);
    let internal = "Error: An internal error occurred while executing the tool.";
    assert_eq!(w.call_text("fx.freeze", json!({})), internal);
    assert_eq!(w.call_text("fx.echo", json!({"text": "1"})), internal);
    w.wait_for("list_changed after the restart", |m| {
        m["method"] == "notifications/tools/list_changed"
    });
    assert_eq!(
        w.call_text("fx.echo", json!({"text": "back"})),
        r#"{"text":"back"}"#
    );
    let metrics = metrics_text(port);
    assert!(
        metrics.contains("warden_upstream_restarts_total{upstream=\"fx\",reason=\"stuck\"} 1"),
        "{metrics}"
    );
}

#[test]
fn slow_calls_side_by_side_do_not_make_a_live_upstream_stuck() {
    // Three slow calls time out together on a server that still answers: the ping
    // that confirms a suspicion is answered, so nothing is restarted.
    let (port, toml) = stuck_config("restart_after_timeouts = 2\nping_interval_ms = 0");
    let mut w = Warden::start("slow-not-stuck", &toml);
    let ids: Vec<i64> = (0..3)
        .map(|_| {
            w.send_request(
                "tools/call",
                json!({"name": "fx.slow", "arguments": {"ms": 1500}}),
            )
        })
        .collect();
    let internal = "Error: An internal error occurred while executing the tool.";
    for id in ids {
        let r = w.response(&json!(id));
        assert_eq!(r["result"]["content"][0]["text"], internal, "{r}");
    }
    assert_eq!(
        w.call_text("fx.echo", json!({"text": "still here"})),
        r#"{"text":"still here"}"#
    );
    std::thread::sleep(Duration::from_millis(500));
    let metrics = metrics_text(port);
    assert!(
        !metrics.contains("warden_upstream_restarts_total{upstream=\"fx\""),
        "a live upstream was restarted: {metrics}"
    );
    assert!(
        w.backlog
            .iter()
            .all(|m| m["method"] != "notifications/tools/list_changed"),
        "{:?}",
        w.backlog
    );
}

#[test]
fn an_upstream_that_misses_a_liveness_ping_is_restarted() {
    // No call waits on it: the ping notices it is stuck.
    let (port, toml) = stuck_config("restart_after_timeouts = 0\nping_interval_ms = 200");
    let mut w = Warden::start("stuck-ping", &toml);
    let internal = "Error: An internal error occurred while executing the tool.";
    assert_eq!(w.call_text("fx.freeze", json!({})), internal);
    w.wait_for("list_changed after the restart", |m| {
        m["method"] == "notifications/tools/list_changed"
    });
    assert_eq!(
        w.call_text("fx.echo", json!({"text": "alive"})),
        r#"{"text":"alive"}"#
    );
    assert!(metrics_text(port)
        .contains("warden_upstream_restarts_total{upstream=\"fx\",reason=\"stuck\"} 1"));
}

/// How many of the gateway's child processes run (zombies aside).
fn live_children(gateway: u32) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // After the command name (in parentheses, anything inside): state, parent.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let mut fields = rest.split_whitespace();
            let state = fields.next();
            let parent = fields.next().and_then(|p| p.parse::<u32>().ok());
            parent == Some(gateway) && state != Some("Z")
        })
        .count()
}

#[test]
fn an_upstream_that_keeps_failing_to_start_is_retried_by_one_loop() {
    // Every start fails (its tools/list is refused), so one restart loop retries it
    // with a growing delay. A failed start inside that loop used to set off one
    // more loop beside it: attempts, and children alive at once, multiplied.
    let mut w = Warden::start_capturing_stderr(
        "retry-one-loop",
        "[[upstream]]\nname = \"bad\"\ncommand = [\"{fixture}\"]\nenv = { FIXTURE_FAIL_LIST = \"1\" }\n",
        "info",
    );
    let pid = w.pid();
    let mut most = 0;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        most = most.max(live_children(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = w.stderr_after_exit();
    // 100 ms, then twice as long each time: four or five attempts in 3 s.
    let attempts = log.matches("restarting upstream").count();
    assert!(attempts <= 8, "{attempts} restart attempts in 3 s");
    assert!(most <= 2, "{most} children at once");
}

#[test]
fn a_restarted_upstream_gets_no_call_before_its_start_finished() {
    // This upstream refuses requests that come before notifications/initialized,
    // as SDK-built servers do, and takes 300 ms to answer initialize. Calls made
    // while it restarts fail as while it is down; none reaches it early.
    let mut w = Warden::start(
        "restart-handshake",
        &fixture_config(
            "env = { FIXTURE_STRICT_INIT = \"1\", FIXTURE_INIT_DELAY_MS = \"300\" }",
            "",
        ),
    );
    let internal = "Error: An internal error occurred while executing the tool.";
    assert_eq!(w.call_text("fx.crash", json!({})), internal);
    // One call every 20 ms across the restart (100 ms backoff, 300 ms handshake).
    let ids: Vec<i64> = (0..40)
        .map(|n| {
            let id = w.send_request(
                "tools/call",
                json!({"name": "fx.echo", "arguments": {"n": n}}),
            );
            std::thread::sleep(Duration::from_millis(20));
            id
        })
        .collect();
    for (n, id) in ids.iter().enumerate() {
        let r = w.response(&json!(id));
        let text = r.pointer("/result/content/0/text").and_then(Value::as_str);
        let echoed = format!(r#"{{"n":{n}}}"#);
        assert!(
            text == Some(internal) || text == Some(echoed.as_str()),
            "call {n}: {r}"
        );
    }
    w.wait_for("list_changed after the restart", |m| {
        m["method"] == "notifications/tools/list_changed"
    });
    assert_eq!(w.call_text("fx.echo", json!({"n": 1})), r#"{"n":1}"#);
}

/// An HTTP server that accepts connections and never answers (a black hole).
fn black_hole() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    format!("http://{addr}/mcp")
}

#[test]
fn a_black_hole_upstream_is_given_up_within_its_timeout_and_delays_no_other() {
    let toml = format!(
        "[[upstream]]\nname = \"hole\"\nurl = \"{}\"\ntimeout_ms = 1000\n\n\
         [[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n",
        black_hole()
    );
    let mut w = Warden::spawn("black-hole", &toml);
    // server/discover and then initialize each wait at most the 1 s timeout (they
    // waited a fixed 10 s and 30 s): the handshake is answered well within the
    // harness's patience, and the healthy upstream serves at once.
    w.handshake();
    assert_eq!(
        w.call_text("fx.echo", json!({"text": "here"})),
        r#"{"text":"here"}"#
    );
    let listing = w.request("tools/list", json!({}));
    assert_eq!(
        listing["error"]["message"],
        "Listing failed: upstream 'hole' is not available, so the list would be incomplete. Retry shortly."
    );
}
