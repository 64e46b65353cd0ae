//! Quotas through the real binary (Q1-Q5): bursts and windows, concurrency,
//! several quotas on one call, the refusal a model reads (byte for byte, with
//! when to retry in `_meta`), what a refused call leaves behind (an audit record
//! and a metric, no hook, no idempotency key), the HTTP front's per-caller
//! request budget, and two gateways sharing PostgreSQL staying within a limit
//! together, with the store lost in each mode.

mod common;

use common::http::HttpWarden;
use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// The fixture upstream `fx`, counting its executions in `count`, plus `rest`.
fn counted(count: &std::path::Path, rest: &str) -> String {
    format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\nenv = {{ FIXTURE_COUNT_FILE = \"{}\" }}\n{rest}\n",
        count.display()
    )
}

fn executions(count: &std::path::Path) -> usize {
    std::fs::read_to_string(count)
        .unwrap_or_default()
        .lines()
        .count()
}

fn text(r: &Value) -> &str {
    r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

fn retry_ms(r: &Value) -> u64 {
    r["result"]["_meta"]["warden/retryAfterMs"]
        .as_u64()
        .unwrap_or_else(|| panic!("no retry time in {r}"))
}

#[test]
fn a_burst_runs_then_the_model_is_told_when_to_retry_and_nothing_else_happens() {
    let dir = scratch("quota-burst");
    let count = dir.join("count.txt");
    let hook = HookServer::start(|_| Reply::Json(json!({"decision": "pass"})));
    let port = free_port();
    let config = counted(
        &count,
        &format!(
            "[[quota]]\ncallers = [\"local\"]\ntools = [\"fx.*\"]\nrate = \"60/minute\"\nburst = 2\n\
             [[hook]]\nphase = \"before\"\nurl = \"{}\"\n\
             [store]\nurl = \"sqlite://{}\"\n[audit]\njsonl = \"{}\"\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n",
            hook.url,
            dir.join("w.db").display(),
            dir.join("audit.jsonl").display()
        ),
    );
    let mut w = Warden::start("quota-burst", &config);
    for n in 0..2 {
        assert_eq!(
            w.call_text("fx.echo", json!({"n": n})),
            format!("{{\"n\":{n}}}")
        );
    }
    // The third call, with an idempotency key, is over the burst.
    let r = w.request(
        "tools/call",
        json!({"name": "fx.echo", "arguments": {"n": 2}, "_meta": {"warden/idempotencyKey": "k-1"}}),
    );
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(
        text(&r),
        "Error: Rate limit for tool 'fx.echo' reached (60 calls per minute for caller 'local'). Retry in 1 s."
    );
    let ms = retry_ms(&r);
    assert!(ms > 0 && ms <= 1000, "{ms}");
    assert_eq!(executions(&count), 2, "the refused call never ran");
    assert_eq!(hook.bodies().len(), 2, "no hook saw the refused call");
    // After the wait the window has room again, and the key was never claimed.
    std::thread::sleep(Duration::from_millis(ms + 50));
    let r = w.request(
        "tools/call",
        json!({"name": "fx.echo", "arguments": {"n": 2}, "_meta": {"warden/idempotencyKey": "k-1"}}),
    );
    assert_eq!(text(&r), r#"{"n":2}"#, "{r}");
    assert_eq!(executions(&count), 3);
    let metrics = metrics_text(port);
    assert!(
        metrics.contains("warden_calls_total{decision=\"rate_limited\",outcome=\"refused\"} 1\n"),
        "{metrics}"
    );
    w.close();
    let audit = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap();
    let limited: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["decision"] == "rate_limited")
        .collect();
    assert_eq!(limited.len(), 1, "{audit}");
    assert_eq!(limited[0]["outcome"], "refused");
    assert_eq!(limited[0]["caller"], "local");
    assert_eq!(limited[0]["tool"], "fx.echo");
}

#[test]
fn concurrency_counts_calls_in_flight() {
    let dir = scratch("quota-conc");
    let count = dir.join("count.txt");
    let config = counted(
        &count,
        "[[quota]]\ncallers = [\"*\"]\ntools = [\"fx.slow\"]\nconcurrency = 1\n",
    );
    let mut w = Warden::start("quota-conc", &config);
    let slow = w.send_request(
        "tools/call",
        json!({"name": "fx.slow", "arguments": {"ms": 1500}}),
    );
    std::thread::sleep(Duration::from_millis(300));
    let r = w.call("fx.slow", json!({"ms": 1}));
    assert_eq!(
        text(&r),
        "Error: Concurrency limit for tool 'fx.slow' reached (1 call at a time for caller 'local'). Retry in 1 s."
    );
    assert_eq!(retry_ms(&r), 1000);
    // Another tool is not limited meanwhile.
    assert_eq!(w.call_text("fx.echo", json!({"n": 1})), r#"{"n":1}"#);
    let first = w.response(&json!(slow));
    assert!(first["result"].is_object(), "{first}");
    // The slot freed when the first call ended.
    let r = w.call("fx.slow", json!({"ms": 1}));
    assert_ne!(r["result"]["isError"], true, "{r}");
    assert_eq!(executions(&count), 3);
}

#[test]
fn of_several_quotas_the_tightest_refuses_and_groups_count_each_caller() {
    let config = fixture_config(
        "",
        "[gateway]\nstdio_caller = \"alice\"\n[[caller]]\nname = \"alice\"\ngroups = [\"team\"]\n\
         [[quota]]\ncallers = [\"group:team\"]\ntools = [\"*\"]\nrate = \"100/hour\"\nburst = 1\n\
         [[quota]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\nrate = \"1/second\"\nburst = 1\n",
    );
    let mut w = Warden::start("quota-several", &config);
    assert_eq!(w.call_text("fx.echo", json!({})), "{}");
    let r = w.call("fx.echo", json!({}));
    assert_eq!(
        text(&r),
        "Error: Rate limit for tool 'fx.echo' reached (100 calls per hour for caller 'alice'). Retry in 36 s."
    );
    let ms = retry_ms(&r);
    assert!(ms > 35_000 && ms <= 36_000, "{ms}");
    // The hour quota covers every tool.
    let r = w.call("fx.fail", json!({}));
    assert!(
        text(&r).starts_with("Error: Rate limit for tool 'fx.fail' reached (100 calls per hour")
    );
}

#[test]
fn an_http_caller_over_its_request_budget_gets_429_with_retry_after() {
    let w = HttpWarden::start(
        "quota-http",
        &common::http::anonymous("http_caller_rate = \"2/minute\""),
        &[],
    );
    let sid = w.session(&[]);
    // initialize and initialized used the budget of 2.
    let r = w.post(
        &[("Mcp-Session-Id", &sid)],
        &common::http::call(2, "fx.echo", json!({})),
    );
    assert_eq!(r.status, 429, "{}", r.body);
    let after: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=30).contains(&after), "{after}");
    assert_eq!(
        r.body,
        common::http::error_body(&format!(
            "Too many requests: this caller is over its request rate (gateway.http_caller_rate); retry in {after} s."
        ))
    );
}

#[test]
fn a_bad_quota_is_named_with_how_to_fix_it() {
    let dir = scratch("quota-check");
    for (toml, expected) in [
        (
            "[[quota]]\ncallers = [\"*\"]\ntools = [\"*\"]\nrate = \"30 a minute\"\n",
            "quota[0]: '30 a minute' is not a rate; write calls per unit: 30/minute, 5/second, 1000/hour, 10000/day",
        ),
        (
            "[[quota]]\ncallers = [\"*\"]\ntools = [\"*\"]\n",
            "quota[0]: a quota needs a rate (\"30/minute\"), a concurrency, or both",
        ),
        (
            "[[quota]]\ncallers = [\"*\"]\ntools = [\"*\"]\nconcurrency = 0\n",
            "quota[0]: concurrency must be at least 1: 0 would refuse every call",
        ),
    ] {
        let path = write_config(&dir, toml);
        let (code, _, err) = cli(&["check", "--config", path.to_str().unwrap()]);
        assert_eq!(code, 1);
        assert!(err.contains(expected), "{err}");
    }
}

#[test]
fn two_gateways_sharing_postgres_stay_within_one_limit_together() {
    let db = PgDb::create("quota");
    let dir = scratch("quota-pg");
    let count = dir.join("count.txt");
    let config = counted(
        &count,
        &format!(
            "[store]\nurl = \"{}\"\n[[quota]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\nrate = \"10/hour\"\n",
            db.url()
        ),
    );
    let mut a = Warden::start("quota-pg-a", &config);
    let mut b = Warden::start("quota-pg-b", &config);
    // Both gateways fire 15 calls each, all at once.
    let ids_a: Vec<i64> = (0..15)
        .map(|n| {
            a.send_request(
                "tools/call",
                json!({"name": "fx.echo", "arguments": {"n": n}}),
            )
        })
        .collect();
    let ids_b: Vec<i64> = (0..15)
        .map(|n| {
            b.send_request(
                "tools/call",
                json!({"name": "fx.echo", "arguments": {"n": n}}),
            )
        })
        .collect();
    let mut refused = 0;
    for (w, ids) in [(&mut a, ids_a), (&mut b, ids_b)] {
        for id in ids {
            let r = w.response(&json!(id));
            if r["result"]["isError"] == true {
                assert!(text(&r).starts_with(
                    "Error: Rate limit for tool 'fx.echo' reached (10 calls per hour for caller 'local'). Retry in "
                ), "{r}");
                refused += 1;
            }
        }
    }
    assert_eq!(
        executions(&count),
        10,
        "the upstream ran the limit, not more"
    );
    assert_eq!(refused, 20);
}

#[test]
fn a_lost_store_lets_ordinary_quotas_through_and_refuses_strict_ones() {
    let db = PgDb::create("quotalost");
    let dir = scratch("quota-lost");
    let count = dir.join("count.txt");
    let config = counted(
        &count,
        &format!(
            "[store]\nurl = \"{}\"\n\
             [[quota]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\nrate = \"1/hour\"\n\
             [[quota]]\ncallers = [\"*\"]\ntools = [\"fx.fail\"]\nrate = \"1/hour\"\nstrict = true\n\
             [[quota]]\ncallers = [\"*\"]\ntools = [\"fx.slow\"]\nconcurrency = 1\nstrict = true\n",
            db.url()
        ),
    );
    let mut w = Warden::start("quota-lost", &config);
    assert_eq!(w.call_text("fx.echo", json!({"n": 1})), r#"{"n":1}"#);
    assert!(w
        .call_text("fx.echo", json!({"n": 2}))
        .starts_with("Error: Rate limit"));
    db.lose();
    // Fail open: the ordinary quota cannot be counted, the calls go through.
    for n in 3..5 {
        assert_eq!(
            w.call_text("fx.echo", json!({"n": n})),
            format!("{{\"n\":{n}}}")
        );
    }
    // Fail closed: the strict one refuses, and says when to retry.
    let r = w.call("fx.fail", json!({}));
    assert_eq!(
        text(&r),
        "Error: The rate limit for tool 'fx.fail' could not be checked. Retry in 1 s."
    );
    assert_eq!(retry_ms(&r), 1000);
    let r = w.call("fx.slow", json!({"ms": 1}));
    assert_eq!(
        text(&r),
        "Error: The concurrency limit for tool 'fx.slow' could not be checked. Retry in 1 s."
    );
    assert_eq!(executions(&count), 3);
}

/// Gap of the first build: concurrency was counted per process. Two gateways
/// share PostgreSQL and one slot: while A's call runs, B is refused; once it
/// ended, B runs. Then A is killed (-9) mid-call: its slot stays taken while its
/// lease holds (upstream timeout 4 s: an 8 s lease) and frees itself after, with
/// no gateway left to free it.
#[test]
fn concurrency_is_counted_across_gateways_and_a_killed_ones_slot_frees_itself() {
    const FULL: &str = "Error: Concurrency limit for tool 'fx.slow' reached (1 call at a time for caller 'local'). Retry in 1 s.";
    let db = PgDb::create("quotaconc");
    let dir = scratch("quota-pg-conc");
    let count = dir.join("count.txt");
    let config = counted(
        &count,
        &format!(
            "timeout_ms = 4000\n[store]\nurl = \"{}\"\n\
             [[quota]]\ncallers = [\"*\"]\ntools = [\"fx.slow\"]\nconcurrency = 1\n",
            db.url()
        ),
    );
    let mut a = Warden::start("quota-conc-a", &config);
    let mut b = Warden::start("quota-conc-b", &config);
    let wait_for_execution = |n: usize| {
        let sent = std::time::Instant::now();
        while executions(&count) < n {
            assert!(
                sent.elapsed() < PATIENCE,
                "the call never reached the upstream"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let slow = a.send_request(
        "tools/call",
        json!({"name": "fx.slow", "arguments": {"ms": 1000}}),
    );
    wait_for_execution(1);
    let r = b.call("fx.slow", json!({"ms": 1}));
    assert_eq!(text(&r), FULL);
    assert_eq!(retry_ms(&r), 1000);
    assert_eq!(
        a.response(&json!(slow))["result"]["content"][0]["text"],
        "slept 1000 ms"
    );
    // The slot was freed before A answered.
    assert_eq!(b.call_text("fx.slow", json!({"ms": 1})), "slept 1 ms");

    let sent = std::time::Instant::now();
    a.send_request(
        "tools/call",
        json!({"name": "fx.slow", "arguments": {"ms": 1000}}),
    );
    wait_for_execution(3);
    let status = std::process::Command::new("kill")
        .args(["-9", &a.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    a.wait_exit();
    assert_eq!(
        text(&b.call("fx.slow", json!({"ms": 1}))),
        FULL,
        "A's lease still holds"
    );
    let answer = loop {
        let r = b.call("fx.slow", json!({"ms": 1}));
        if text(&r) != FULL {
            break text(&r).to_owned();
        }
        assert!(
            sent.elapsed() < PATIENCE,
            "a dead gateway's slot never freed"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(answer, "slept 1 ms");
    assert!(
        sent.elapsed() >= Duration::from_secs(8),
        "freed only once the lease (timeout + margin) ran out"
    );
}

/// Gap of the first build: a 2026-07-28 call put to a human was counted when
/// asked and again when its approved retry came back. Two gateways share
/// PostgreSQL and the sealing secret; each call is asked on one and approved on
/// the other. With a rate of 2 per hour both calls run; a replay of an approved
/// state is a new call, and is counted: the third is over the rate.
#[test]
fn an_approved_retry_counts_once_across_replicas_and_a_replay_counts_again() {
    std::env::set_var(
        "WARDEN_QUOTA_TEST_SECRET",
        "a shared quota secret of length",
    );
    let db = PgDb::create("quotaretry");
    let dir = scratch("quota-retry");
    let count = dir.join("count.txt");
    let config = counted(
        &count,
        &format!(
            "[gateway]\nstate_secret_env = \"WARDEN_QUOTA_TEST_SECRET\"\n[store]\nurl = \"{}\"\n\
             [[rule]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\neffect = \"ask\"\n\
             [[quota]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\nrate = \"2/hour\"\n",
            db.url()
        ),
    );
    let mut a = Warden::spawn("quota-retry-a", &config);
    let mut b = Warden::spawn("quota-retry-b", &config);
    let call = |n: i64, retry: Option<&Value>| {
        let mut p = json!({"name": "fx.echo", "arguments": {"n": n},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
        if let Some(state) = retry {
            p["requestState"] = state.clone();
            p["inputResponses"] =
                json!({"warden/approval": {"action": "accept", "content": {"approve": true}}});
        }
        p
    };
    let mut states = Vec::new();
    for n in 1..=2 {
        let r = a.request("tools/call", call(n, None));
        assert_eq!(r["result"]["resultType"], "input_required", "{r}");
        let state = r["result"]["requestState"].clone();
        let r = b.request("tools/call", call(n, Some(&state)));
        assert_eq!(r["result"]["structuredContent"], json!({"n": n}), "{r}");
        states.push(state);
    }
    assert_eq!(executions(&count), 2);
    let r = a.request("tools/call", call(2, Some(&states[1])));
    assert_eq!(
        r["result"]["content"][0]["text"],
        "Error: Rate limit for tool 'fx.echo' reached (2 calls per hour for caller 'local'). Retry in 1800 s."
    );
    assert_eq!(executions(&count), 2);
}

/// The same for an upstream's own input round: a 2026-07-28 upstream answers
/// with an `InputRequiredResult`, the client answers and sends the call again;
/// it counts once. A replay of the answered state is a new call, counted.
#[test]
fn a_call_retried_after_an_upstreams_input_round_counts_once() {
    let conformance = env!("CARGO_BIN_EXE_warden-conformance-upstream");
    let mut w = Warden::spawn(
        "quota-input-round",
        &format!(
            "[[upstream]]\nname = \"cf\"\ncommand = [\"{conformance}\"]\nprotocol = \"2026-07-28\"\n\
             [[quota]]\ncallers = [\"*\"]\ntools = [\"cf.*\"]\nrate = \"1/hour\"\n"
        ),
    );
    let call = |retry: Option<&Value>| {
        let mut p = json!({"name": "cf.test_input_required_result_tampered_state", "arguments": {},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
        if let Some(state) = retry {
            p["requestState"] = state.clone();
            p["inputResponses"] = json!({"confirm": {"action": "accept", "content": {"ok": true}}});
        }
        p
    };
    let r = w.request("tools/call", call(None));
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    let state = r["result"]["requestState"].clone();
    let r = w.request("tools/call", call(Some(&state)));
    assert_eq!(
        text(&r),
        "integrity-ok: the request state is the one this server sealed.",
        "{r}"
    );
    let r = w.request("tools/call", call(Some(&state)));
    assert_eq!(
        text(&r),
        "Error: Rate limit for tool 'cf.test_input_required_result_tampered_state' reached (1 call per hour for caller 'local'). Retry in 3600 s."
    );
}
