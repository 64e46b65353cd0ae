//! HTTP sessions any replica serves: replicas sharing `gateway.state_secret_env`
//! (and a PostgreSQL store) take up each other's `Mcp-Session-Id`s, a stream
//! resumed at the wrong replica gets a clean error for the request it carried,
//! and a DELETE at one replica ends the session at all of them.

mod common;

use common::http::{anonymous, call, error_body, open, request, HttpWarden, POST};
use common::*;
use serde_json::{json, Value};

const SECRET: (&str, &str) = ("WARDEN_FLEET_TEST_SECRET", "sixteen or more characters");

fn fleet_config(db: &PgDb) -> String {
    format!(
        "[gateway]\nanonymous_caller = \"dev\"\nstate_secret_env = \"{}\"\n[store]\nurl = \"{}\"\n{}",
        SECRET.0,
        db.url(),
        fixture_config("", "")
    )
}

fn text_of(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"].as_str().unwrap_or("")
}

/// The answer to a request naming a session that ended or expired.
fn session_not_found() -> String {
    error_body("Session not found: it ended or expired. Start a new one with initialize.")
}

/// Calls `fx.echo` in session `sid` at `w` every `every` until it is refused as
/// not found (asserting that answer), at most for `within`; each call before is
/// answered. Returns the next unused request id.
fn call_until_not_found(
    w: &HttpWarden,
    sid: &str,
    mut id: i64,
    within: std::time::Duration,
    every: std::time::Duration,
) -> i64 {
    let deadline = std::time::Instant::now() + within;
    loop {
        let r = w.post(
            &[("Mcp-Session-Id", sid)],
            &call(id, "fx.echo", json!({"text": "still?"})),
        );
        id += 1;
        if r.status == 404 {
            assert_eq!(r.body, session_not_found());
            return id;
        }
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(
            std::time::Instant::now() < deadline,
            "the session was still served after {within:?}"
        );
        std::thread::sleep(every);
    }
}

#[test]
fn a_session_opened_at_one_replica_goes_on_at_another() {
    let db = PgDb::create("fleet_sessions");
    let config = fleet_config(&db);
    let a = HttpWarden::start("fleet-a", &config, &[SECRET]);
    let b = HttpWarden::start("fleet-b", &config, &[SECRET]);
    let sid = a.session(&[]);
    let with = [("Mcp-Session-Id", sid.as_str())];

    // Listing and calling at B, which never saw the initialize.
    let r = b.post(
        &with,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let listed = r.json();
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"fx.echo"), "{names:?}");
    let r = b.post(&with, &call(2, "fx.echo", json!({"text": "at b"})));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["id"], 2);
    assert!(text_of(&r.json()).contains("at b"), "{}", r.body);

    // A stream A carried, resumed at B: the request it answered gets an error
    // there instead of an answer that cannot come.
    let msg = json!({"jsonrpc": "2.0", "id": "slow-1", "method": "tools/call", "params": {
        "name": "fx.progress", "arguments": {"steps": 3, "pause_ms": 500}, "_meta": {"progressToken": "p"}}});
    let mut headers = POST.to_vec();
    headers.extend_from_slice(&with);
    let mut stream = open(&a.addr, "POST", &headers, &msg.to_string());
    let (first, _) = stream.next_event().expect("priming event");
    drop(stream);
    let mut headers = vec![
        ("Accept", "text/event-stream"),
        ("Last-Event-ID", first.as_str()),
    ];
    headers.extend_from_slice(&with);
    let lost = request(&b.addr, "GET", &headers, "");
    assert_eq!(lost.status, 200, "{}", lost.body);
    assert_eq!(
        lost.messages(),
        vec![
            json!({"jsonrpc": "2.0", "id": "slow-1", "error": {"code": -32603,
            "message": "The gateway replica that was answering this request stopped before its answer was sent, so the answer is lost. The call may or may not have run. Sent again with the same idempotency key, it answers with its result if it finished, and otherwise says that its outcome is unknown instead of running twice."}})
        ]
    );
    // The same resumption at A, which carried it, goes on where it left off.
    let resumed = request(&a.addr, "GET", &headers, "");
    assert_eq!(resumed.status, 200);
    let rest = resumed.messages();
    assert_eq!(rest.last().unwrap()["id"], "slow-1", "{rest:?}");
    assert_eq!(text_of(rest.last().unwrap()), "3 steps done");

    // A DELETE at B ends the session at B, and at a replica started after it.
    let r = request(&b.addr, "DELETE", &with, "");
    assert_eq!(r.status, 200, "{}", r.body);
    let unknown = session_not_found();
    let r = b.post(&with, &call(3, "fx.echo", json!({"text": "x"})));
    assert_eq!((r.status, r.body.as_str()), (404, unknown.as_str()));
    let c = HttpWarden::start("fleet-c", &config, &[SECRET]);
    let r = c.post(&with, &call(4, "fx.echo", json!({"text": "x"})));
    assert_eq!((r.status, r.body.as_str()), (404, unknown.as_str()));

    // A new session goes on at a replica started later: a restart loses no session.
    let sid = a.session(&[]);
    drop(a);
    let r = c.post(
        &[("Mcp-Session-Id", sid.as_str())],
        &call(5, "fx.echo", json!({"text": "after a restart"})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(text_of(&r.json()).contains("after a restart"));
}

#[test]
fn without_the_shared_secret_a_session_stays_with_its_process() {
    let toml = anonymous("");
    let a = HttpWarden::start("fleet-alone-a", &toml, &[]);
    let b = HttpWarden::start("fleet-alone-b", &toml, &[]);
    let sid = a.session(&[]);
    let with = [("Mcp-Session-Id", sid.as_str())];
    let r = b.post(&with, &call(1, "fx.echo", json!({"text": "x"})));
    assert_eq!(r.status, 404, "{}", r.body);
    let r = a.post(&with, &call(1, "fx.echo", json!({"text": "x"})));
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn a_rotated_secret_keeps_sessions_going_through_the_rolling_restarts() {
    // docs/fleet.md, "Rotating the secret": old sessions open at a replica that
    // holds the old secret as its previous one; new ones are sealed with the new.
    let (old, new) = (
        "an old secret of sixteen chars",
        "a new secret of sixteen chars!",
    );
    let config = |previous: bool| {
        let previous = if previous {
            "state_secret_previous_env = \"WARDEN_PREVIOUS\"\n"
        } else {
            ""
        };
        format!(
            "[gateway]\nanonymous_caller = \"dev\"\nstate_secret_env = \"WARDEN_SECRET\"\n{previous}{}",
            fixture_config("", "")
        )
    };
    let before = HttpWarden::start("rotate-before", &config(false), &[("WARDEN_SECRET", old)]);
    let during = HttpWarden::start(
        "rotate-during",
        &config(true),
        &[("WARDEN_SECRET", new), ("WARDEN_PREVIOUS", old)],
    );
    let after = HttpWarden::start("rotate-after", &config(false), &[("WARDEN_SECRET", new)]);
    let sealed_old = before.session(&[]);
    let sealed_new = during.session(&[]);
    let works = |at: &HttpWarden, sid: &str| {
        at.post(
            &[("Mcp-Session-Id", sid)],
            &call(1, "fx.echo", json!({"text": "x"})),
        )
        .status
    };
    assert_eq!(
        works(&during, &sealed_old),
        200,
        "the previous secret still opens"
    );
    assert_eq!(
        works(&before, &sealed_new),
        404,
        "a replica not yet rotated cannot open the new"
    );
    assert_eq!(works(&after, &sealed_new), 200);
    assert_eq!(
        works(&after, &sealed_old),
        404,
        "the old secret dropped: its ids are gone"
    );
}

#[test]
fn a_session_expires_its_lifetime_after_it_opened_at_every_replica() {
    let config = format!(
        "[gateway]\nanonymous_caller = \"dev\"\nstate_secret_env = \"{}\"\nsession_lifetime = \"3s\"\n{}",
        SECRET.0,
        fixture_config("", "")
    );
    let a = HttpWarden::start("fleet-life-a", &config, &[SECRET]);
    let b = HttpWarden::start("fleet-life-b", &config, &[SECRET]);
    let sid = a.session(&[]);
    let with = [("Mcp-Session-Id", sid.as_str())];
    for (i, w) in [&a, &b].into_iter().enumerate() {
        let r = w.post(&with, &call(i as i64, "fx.echo", json!({"text": "alive"})));
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // Kept busy, it still ends: the lifetime counts from initialize, not from
    // the last request. Bounded polling, no fixed sleep.
    let second = std::time::Duration::from_secs(1);
    call_until_not_found(&a, &sid, 10, 10 * second, second / 10);
    let unknown = session_not_found();
    // The replica that took it up, and one that never saw it, refuse it alike.
    let c = HttpWarden::start("fleet-life-c", &config, &[SECRET]);
    for w in [&b, &c] {
        let r = w.post(&with, &call(99, "fx.echo", json!({"text": "late"})));
        assert_eq!((r.status, r.body.as_str()), (404, unknown.as_str()));
    }
    // A new session is as good as ever.
    let sid = b.session(&[]);
    let r = c.post(
        &[("Mcp-Session-Id", sid.as_str())],
        &call(100, "fx.echo", json!({"text": "new"})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn a_replica_holding_a_session_learns_within_seconds_that_another_ended_it() {
    let db = PgDb::create("fleet_recheck");
    let config = fleet_config(&db);
    let a = HttpWarden::start("fleet-recheck-a", &config, &[SECRET]);
    let b = HttpWarden::start("fleet-recheck-b", &config, &[SECRET]);
    let sid = a.session(&[]);
    let with = [("Mcp-Session-Id", sid.as_str())];
    // B takes the session up, and holds it from then on.
    let r = b.post(&with, &call(1, "fx.echo", json!({"text": "at b"})));
    assert_eq!(r.status, 200, "{}", r.body);
    let r = request(&a.addr, "DELETE", &with, "");
    assert_eq!(r.status, 200, "{}", r.body);
    // B asks the store about the sessions it holds every 10 s: it refuses the
    // ended session within that (and a margin), kept busy or not.
    let second = std::time::Duration::from_secs(1);
    let id = call_until_not_found(&b, &sid, 2, 20 * second, second / 4);
    // And stays refused.
    let r = b.post(&with, &call(id, "fx.echo", json!({"text": "again"})));
    assert_eq!((r.status, r.body), (404, session_not_found()));
}

#[test]
fn a_session_taken_up_is_held_once_however_many_requests_follow() {
    let db = PgDb::create("fleet_held");
    let port = free_port();
    let a = HttpWarden::start("fleet-held-a", &fleet_config(&db), &[SECRET]);
    let b_config = format!(
        "{}[admin]\nlisten = \"127.0.0.1:{port}\"\n",
        fleet_config(&db)
    );
    let b = HttpWarden::start("fleet-held-b", &b_config, &[SECRET]);
    let sid = a.session(&[]);
    let with = [("Mcp-Session-Id", sid.as_str())];
    // More requests at B than a caller may hold sessions (100 by default).
    for i in 0..120 {
        let r = b.post(&with, &call(i, "fx.echo", json!({"n": i})));
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
    }
    let metrics = metrics_text(port);
    assert!(
        metrics.lines().any(|l| l == "warden_http_sessions 1"),
        "B holds the one session once: {metrics}"
    );
    // The caller's count at B is that one session: it may open more there.
    let own = b.session(&[]);
    assert_ne!(own, sid);
}

/// A config for replicas sharing the secret and `db`, with more `[gateway]` settings.
fn capped_config(db: &PgDb, gateway: &str) -> String {
    format!(
        "[gateway]\nanonymous_caller = \"dev\"\nstate_secret_env = \"{}\"\n{gateway}\n[store]\nurl = \"{}\"\n{}",
        SECRET.0,
        db.url(),
        fixture_config("", "")
    )
}

/// Calls `fx.echo` in session `sid` at `w`: its status, and the body of a refusal.
fn echo_in(w: &HttpWarden, sid: &str, id: i64) -> (u16, String) {
    let r = w.post(
        &[("Mcp-Session-Id", sid)],
        &call(id, "fx.echo", json!({"text": "x"})),
    );
    let body = if r.status == 200 {
        String::new()
    } else {
        r.body
    };
    (r.status, body)
}

/// The 429 of a caller holding `open` sessions, `gateway.max_sessions_per_caller`.
fn over_cap(open: usize) -> (u16, String) {
    let text = format!("Too many requests: this caller already has {open} open sessions; end unused ones with DELETE or let them expire.");
    (429, error_body(&text))
}

/// Issue 24, item 7: `max_sessions_per_caller` held at `initialize` only, so one
/// replica took up as many of a caller's sessions as it presented ids for. A
/// session taken up from its id now counts against the cap the same way: the
/// ids a caller opened at B and C are refused at A past the cap (429, Retry-After),
/// a DELETE still ends one, and ending one makes room for the next.
#[test]
fn a_replica_takes_up_no_more_of_a_callers_sessions_than_its_cap() {
    let db = PgDb::create("fleet_cap");
    let config = capped_config(&db, "max_sessions_per_caller = 2");
    let a = HttpWarden::start("fleet-cap-a", &config, &[SECRET]);
    let b = HttpWarden::start("fleet-cap-b", &config, &[SECRET]);
    let at_a: Vec<String> = (0..2).map(|_| a.session(&[])).collect();
    let c = HttpWarden::start("fleet-cap-c", &config, &[SECRET]);
    let at_b = [b.session(&[]), b.session(&[]), c.session(&[])];
    assert_eq!(echo_in(&a, &at_a[0], 1).0, 200);
    let r = a.post(
        &[("Mcp-Session-Id", at_b[0].as_str())],
        &call(2, "fx.echo", json!({"text": "x"})),
    );
    assert_eq!((r.status, r.body.clone()), over_cap(2));
    assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
    assert_eq!(echo_in(&a, &at_b[1], 3), over_cap(2));
    // A DELETE of one of them is not refused: it ends it.
    let with = [("Mcp-Session-Id", at_b[1].as_str())];
    assert_eq!(request(&a.addr, "DELETE", &with, "").status, 200);
    assert_eq!(echo_in(&a, &at_b[1], 4), (404, session_not_found()));
    // Ending one of A's own makes room for one more.
    let with = [("Mcp-Session-Id", at_a[1].as_str())];
    assert_eq!(request(&a.addr, "DELETE", &with, "").status, 200);
    assert_eq!(echo_in(&a, &at_b[0], 5).0, 200);
    assert_eq!(echo_in(&a, &at_b[2], 6), over_cap(2));
}

/// Issue 24, item 7, after a restart: sessions opened one after another while
/// the earlier ones idled out (each `initialize` within the cap) are all still
/// valid ids. A restarted replica with the same secret takes up only as many of
/// them as the cap allows.
#[test]
fn a_restarted_replica_takes_up_no_more_of_a_callers_sessions_than_its_cap() {
    let db = PgDb::create("fleet_cap_restart");
    let config = capped_config(&db, "max_sessions_per_caller = 2\nsession_idle = \"1s\"");
    let a = HttpWarden::start("fleet-cap-restart-1", &config, &[SECRET]);
    let mut ids = vec![a.session(&[]), a.session(&[])];
    assert_eq!(a.post(&[], &common::http::initialize()).status, 429);
    // Idle, they are let go here (not ended): two more fit.
    let deadline = std::time::Instant::now() + PATIENCE;
    while a.post(&[], &common::http::initialize()).status == 429 {
        assert!(std::time::Instant::now() < deadline, "never idled out");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    ids.push(a.session(&[]));
    drop(a);
    let restarted = HttpWarden::start("fleet-cap-restart-2", &config, &[SECRET]);
    let answers: Vec<(u16, String)> = ids
        .iter()
        .enumerate()
        .map(|(i, sid)| echo_in(&restarted, sid, i as i64 + 1))
        .collect();
    assert_eq!(
        answers,
        [(200, String::new()), (200, String::new()), over_cap(2)],
        "the first two taken up, the third refused"
    );
}
