//! Issue 24, item 12: one idempotency key, two executions across a dying
//! replica. A keyed call runs at replica A, and A is killed (SIGKILL) mid-call.
//! Its attempt is abandoned: nobody knows whether it took effect. Through two
//! real replicas sharing PostgreSQL, the key then answers "already running"
//! while A's lease holds and, once it ran out, that the outcome is unknown, at
//! every later use, and never runs the call again (I1). The audit trail records
//! the abandoned attempt once. A tool declared safe to repeat
//! (`rerun_abandoned`) is run again instead: see store.rs.

mod common;

use common::http::{call, request, HttpWarden, POST};
use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const SECRET: (&str, &str) = ("WARDEN_ABANDONED_SECRET", "sixteen or more characters");
const RUNNING: &str = "This call is already running. Retry once it finished.";
const UNKNOWN: &str = "Error: The outcome of this call is unknown: it may have run, but the gateway running it stopped before recording how it ended. Check whether it took effect, or send it with a new idempotency key.";

/// A keyed `fx.slow` of 1500 ms.
fn slow(id: i64, key: &str) -> Value {
    let mut msg = call(id, "fx.slow", json!({"ms": 1500}));
    msg["params"]["_meta"] = json!({"warden/idempotencyKey": key});
    msg
}

/// The tool result's text and whether it is an error.
fn answer(w: &HttpWarden, sid: &str, msg: &Value) -> (String, bool) {
    let r = w.post(&[("Mcp-Session-Id", sid)], msg);
    assert_eq!(r.status, 200, "{}", r.body);
    let messages = r.messages();
    let result = &messages.last().unwrap()["result"];
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    (text.to_owned(), result["isError"] == true)
}

fn executions(count: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(count).unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}

#[test]
fn a_key_whose_replica_died_mid_call_answers_outcome_unknown_and_never_runs_again() {
    let db = PgDb::create("abandoned");
    let dir = scratch("abandoned-count");
    let count = dir.join("count.txt");
    let config = format!(
        "[gateway]\nanonymous_caller = \"dev\"\nstate_secret_env = \"{}\"\n[store]\nurl = \"{}\"\n{}",
        SECRET.0,
        db.url(),
        fixture_config(
            &format!(
                "timeout_ms = 2000\nenv = {{ FIXTURE_COUNT_FILE = \"{}\" }}",
                count.display()
            ),
            ""
        )
    );
    let mut a = HttpWarden::start("abandoned-a", &config, &[SECRET]);
    let b = HttpWarden::start("abandoned-b", &config, &[SECRET]);
    let sid = a.session(&[]);
    // The call at A, on a connection of its own: it never gets an answer.
    let (addr, msg) = (a.addr.clone(), slow(2, "crash").to_string());
    let mut headers: Vec<(String, String)> = POST
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    headers.push(("Mcp-Session-Id".into(), sid.clone()));
    let at_a = std::thread::spawn(move || {
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let _ = request(&addr, "POST", &headers, &msg);
    });
    let sent = Instant::now();
    while executions(&count).is_empty() {
        assert!(
            sent.elapsed() < PATIENCE,
            "the call never reached A's upstream"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    a.kill();
    let _ = at_a.join();

    // At B (taking the session up): running while A's lease (2 s timeout + 2 s)
    // holds, then unknown, and unknown again.
    let mut id = 3;
    let first = loop {
        let got = answer(&b, &sid, &slow(id, "crash"));
        id += 1;
        if got != (RUNNING.to_owned(), true) {
            break got;
        }
        assert!(sent.elapsed() < PATIENCE, "the key stayed running");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(first, (UNKNOWN.to_owned(), true));
    assert!(
        sent.elapsed() >= Duration::from_secs(4),
        "only once the lease ran out"
    );
    assert_eq!(
        answer(&b, &sid, &slow(id, "crash")),
        (UNKNOWN.to_owned(), true)
    );
    // At a replica started later, too.
    let c = HttpWarden::start("abandoned-c", &config, &[SECRET]);
    assert_eq!(
        answer(&c, &sid, &slow(id + 1, "crash")),
        (UNKNOWN.to_owned(), true)
    );
    assert_eq!(executions(&count), ["slow"], "run once: at A");
    // With a new key, the call runs.
    let fresh = answer(&c, &sid, &slow(id + 2, "checked"));
    assert_eq!(fresh, ("slept 1500 ms".to_owned(), false));
    assert_eq!(executions(&count), ["slow", "slow"]);

    // The trail: A's attempt once, as abandoned; each unknown answer refused.
    let config_path = c.dir.join("warden.toml");
    let (code, out, err) = cli(&[
        "audit",
        "--config",
        config_path.to_str().unwrap(),
        "--json",
        "--tool",
        "fx.slow",
        "--limit",
        "0",
    ]);
    assert_eq!(code, 0, "{err}");
    let ends: Vec<(String, String, String)> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            (s("idempotency_key"), s("decision"), s("outcome"))
        })
        .filter(|(key, _, _)| key == "crash")
        .filter(|(_, d, o)| !(d == "denied" && o == "refused"))
        .collect();
    let abandoned = ("crash".into(), "allowed".into(), "abandoned".into());
    assert_eq!(ends, [abandoned], "{out}");
    let _ = std::fs::remove_dir_all(dir);
}
