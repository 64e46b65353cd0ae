//! Health probes and the graceful drain on SIGTERM, through the real binary.
//!
//! The calls in flight here run `fx.gate`, which answers once a file exists: the
//! test decides when they finish, so nothing depends on timing.

mod common;

use common::http::{open, open_path, request_path, HttpWarden, Reply, POST};
use common::{cli, free_port, PgDb, Warden, PATIENCE};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// A gateway with an anonymous caller, a SQLite audit trail, the admin listener,
/// and the fixture upstream with `gate`, counting its executions.
fn draining_warden(name: &str, drain_timeout: &str) -> HttpWarden {
    HttpWarden::start(
        name,
        &format!(
            "[gateway]\nanonymous_caller = \"dev\"\ndrain_timeout = \"{drain_timeout}\"\n\
             [store]\nurl = \"sqlite://{{dir}}/audit.db\"\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n\
             [[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n\
             env = {{ FIXTURE_GATE = \"1\", FIXTURE_COUNT_FILE = \"{{dir}}/count\" }}\n"
        ),
        &[],
    )
}

fn get(addr: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    request_path(addr, "GET", path, headers, "")
}

/// Asks `addr`'s `/readyz` until it answers `status` (the upstreams start with
/// the first probe); the last answer.
fn readyz_until(addr: &str, status: u16) -> Reply {
    let started = Instant::now();
    loop {
        let r = get(addr, "/readyz", &[]);
        if r.status == status {
            return r;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "/readyz never answered {status}; last: {} {:?}",
            r.status,
            r.body
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Lines of the fixture's execution log equal to `what`.
fn count(dir: &Path, what: &str) -> usize {
    std::fs::read_to_string(dir.join("count"))
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == what)
        .count()
}

fn wait_for_count(dir: &Path, what: &str, n: usize) {
    let started = Instant::now();
    while count(dir, what) < n {
        assert!(
            started.elapsed() < PATIENCE,
            "only {} of {n} '{what}' reached the upstream",
            count(dir, what)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The audit trail's records, as `mcp-warden audit --json` prints them.
fn audit(w: &HttpWarden) -> Vec<Value> {
    audit_in(&w.dir)
}

/// [`audit`] of the gateway whose config is in `dir`.
fn audit_in(dir: &Path) -> Vec<Value> {
    let config = dir.join("warden.toml");
    let (code, out, err) = cli(&[
        "audit",
        "--config",
        config.to_str().unwrap(),
        "--json",
        "--limit",
        "0",
    ]);
    assert_eq!(code, 0, "{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn gate_call(id: i64, file: &Path) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "fx.gate", "arguments": {"file": file.to_str().unwrap()}}})
}

#[test]
fn probes_need_no_credentials_and_no_listed_host() {
    // A caller with a key, no anonymous caller: the MCP endpoint wants credentials.
    let w = HttpWarden::start(
        "health-probes",
        "[[caller]]\nname = \"alice\"\napi_key_env = \"DRAIN_TEST_KEY\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [[upstream]]\nname = \"fx\"\ncommand = [\"{fixture}\"]\n",
        &[("DRAIN_TEST_KEY", "k-123456")],
    );
    // The kubelet probes the pod's IP: a Host header no config lists.
    let pod = [("Host", "10.1.2.3:8931")];
    let alive = get(&w.addr, "/healthz", &pod);
    assert_eq!((alive.status, alive.body.as_str()), (200, "ok\n"));
    assert_eq!(
        alive.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(alive.header("cache-control"), Some("no-store"));
    // Nothing has started the upstream yet: the first probe does, and says so.
    let first = get(&w.addr, "/readyz", &pod);
    assert_eq!(
        (first.status, first.body.as_str()),
        (503, "not ready: upstreams not listed (1 of 1)\n")
    );
    let ready = readyz_until(&w.addr, 200);
    assert_eq!(ready.body, "ready\n");
    let head = open_path(&w.addr, "HEAD", "/readyz", &pod, "");
    assert_eq!(head.status, 200);
    let post = request_path(&w.addr, "POST", "/healthz", &pod, "");
    assert_eq!(
        (post.status, post.body.as_str()),
        (405, "Method not allowed: use GET or HEAD.\n")
    );
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
    // The MCP endpoint keeps its checks: that Host is refused, as before.
    let mut headers = POST.to_vec();
    headers.push(("Host", "10.1.2.3:8931"));
    let mcp = open(
        &w.addr,
        "POST",
        &headers,
        &common::http::initialize().to_string(),
    )
    .finish();
    assert_eq!(mcp.status, 403);
    // The admin listener answers the same, to anyone who can reach it.
    let admin = w.admin.as_deref().expect("the admin listener's address");
    let alive = get(admin, "/healthz", &[]);
    assert_eq!((alive.status, alive.body.as_str()), (200, "ok\n"));
    let ready = get(admin, "/readyz", &[]);
    assert_eq!((ready.status, ready.body.as_str()), (200, "ready\n"));
    let put = request_path(admin, "PUT", "/readyz", &[], "");
    assert_eq!(put.status, 405);
}

/// Issue 15: a replica whose PostgreSQL store is gone is taken out of the load
/// balancer (`/readyz` says which check failed, in generic words) and is not
/// restarted (`/healthz` stays alive).
#[test]
fn readyz_says_the_store_is_unreachable_once_its_database_is_gone() {
    let db = PgDb::create("readyz");
    let w = HttpWarden::start(
        "health-store",
        &format!(
            "[store]\nurl = \"{}\"\n[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n",
            db.url()
        ),
        &[],
    );
    let ready = readyz_until(&w.addr, 200);
    assert_eq!(ready.body, "ready\n");
    db.lose();
    let lost = get(&w.addr, "/readyz", &[]);
    assert_eq!(
        (lost.status, lost.body.as_str()),
        (503, "not ready: store unreachable\n")
    );
    let alive = get(&w.addr, "/healthz", &[]);
    assert_eq!((alive.status, alive.body.as_str()), (200, "ok\n"));
}

#[test]
fn sigterm_under_load_answers_every_call_once_and_audits_each() {
    const CALLS: i64 = 24;
    let mut w = draining_warden("drain-load", "60s");
    let admin = w.admin.clone().expect("admin listener");
    readyz_until(&admin, 200);
    let gate = w.dir.join("gate-open");
    let sessions = [w.session(&[]), w.session(&[])];
    // A GET stream on the first session: it must end when the drain begins.
    let mut stream = open(
        &w.addr,
        "GET",
        &[
            ("Accept", "text/event-stream"),
            ("Mcp-Session-Id", &sessions[0]),
        ],
        "",
    );
    assert_eq!(stream.status, 200);
    let calls: Vec<_> = (1..=CALLS)
        .map(|id| {
            let (addr, sid) = (w.addr.clone(), sessions[id as usize % 2].clone());
            let body = gate_call(id, &gate).to_string();
            std::thread::spawn(move || {
                let mut headers = POST.to_vec();
                headers.push(("Mcp-Session-Id", &sid));
                (id, open(&addr, "POST", &headers, &body).finish())
            })
        })
        .collect();
    wait_for_count(&w.dir, "gate", CALLS as usize);

    // A POST whose head is in and whose body is not yet: in flight at SIGTERM.
    let late = gate_call(999, &gate).to_string();
    let mut early = TcpStream::connect(&w.addr).unwrap();
    early.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        early,
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Session-Id: {}\r\n\
         Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        w.addr,
        sessions[1],
        late.len()
    )
    .unwrap();
    let mut early = BufReader::new(early);
    let mut line = String::new();
    early.read_line(&mut line).unwrap();
    assert_eq!(line, "HTTP/1.1 100 Continue\r\n");
    early.read_line(&mut line).unwrap();

    w.terminate();
    let draining = readyz_until(&admin, 503);
    assert_eq!(draining.body, "not ready: draining\n");
    // The listener is closed: a new connection is refused by the OS.
    assert!(TcpStream::connect(&w.addr).is_err());
    // The GET stream ends (after its priming event, if any).
    while let Some((id, data)) = stream.next_event() {
        assert!(data.is_empty(), "an event on the GET stream: {id} {data}");
    }
    // The request that came in during the drain is refused unrun, with its id.
    early.get_mut().write_all(late.as_bytes()).unwrap();
    let mut head = String::new();
    loop {
        let mut l = String::new();
        early.read_line(&mut l).unwrap();
        if l == "\r\n" {
            break;
        }
        head.push_str(&l);
    }
    assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(str::to_owned)
        })
        .and_then(|v| v.trim().parse().ok())
        .expect("a Content-Length");
    let mut body = vec![0; length];
    std::io::Read::read_exact(&mut early, &mut body).unwrap();
    assert_eq!(
        String::from_utf8(body).unwrap(),
        json!({"jsonrpc": "2.0", "id": 999, "error": {"code": -32603, "message":
            "Service unavailable: this gateway is shutting down and takes no new requests; nothing was run, so retry (another instance will answer)."}})
        .to_string()
    );

    // Open the gate: every call in flight finishes and is answered, once.
    std::fs::write(&gate, "").unwrap();
    let mut answered = HashSet::new();
    for call in calls {
        let (id, reply) = call.join().unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        let messages = reply.messages();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert_eq!(messages[0]["id"], json!(id));
        assert_eq!(
            messages[0]["result"]["content"][0]["text"],
            "the gate opened"
        );
        answered.insert(id);
    }
    assert_eq!(answered.len(), CALLS as usize);
    assert!(w.wait_exit().success(), "the gateway exits 0 once drained");
    let records = audit(&w);
    assert_eq!(
        records.len(),
        CALLS as usize,
        "one audit record per answered call"
    );
    assert!(records
        .iter()
        .all(|r| r["tool"] == "fx.gate" && r["outcome"] == "ok"));
    // The refused request never reached the upstream.
    assert_eq!(count(&w.dir, "gate"), CALLS as usize);
}

#[test]
fn calls_past_the_drain_deadline_get_a_clear_error_and_are_cancelled() {
    let mut w = draining_warden("drain-deadline", "1s");
    let admin = w.admin.clone().expect("admin listener");
    readyz_until(&admin, 200);
    let never = w.dir.join("never-opened");
    let sid = w.session(&[]);
    let mut calls: Vec<_> = (1..=3)
        .map(|id| {
            let (addr, sid) = (w.addr.clone(), sid.clone());
            let body = gate_call(id, &never).to_string();
            std::thread::spawn(move || {
                let mut headers = POST.to_vec();
                headers.push(("Mcp-Session-Id", &sid));
                (json!(id), open(&addr, "POST", &headers, &body).finish())
            })
        })
        .collect();
    // And a 2026-07-28 call, which has a session of its own.
    let modern = {
        let addr = w.addr.clone();
        let mut msg = gate_call(0, &never);
        msg["id"] = json!("modern-1");
        msg["params"]["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}});
        std::thread::spawn(move || {
            let mut headers = POST.to_vec();
            headers.extend([
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "fx.gate"),
            ]);
            (
                json!("modern-1"),
                open(&addr, "POST", &headers, &msg.to_string()).finish(),
            )
        })
    };
    calls.push(modern);
    wait_for_count(&w.dir, "gate", 4);
    w.terminate();
    let text = "Internal error: the gateway shut down before this call finished, and cancelled it; the tool may or may not have run. Retry it (with an idempotency key a retry is safe).";
    for call in calls {
        let (id, reply) = call.join().unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        let messages = reply.messages();
        assert_eq!(
            messages,
            vec![json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": text}})]
        );
    }
    assert!(w.wait_exit().success());
    // Each call has its record: cancelled, as the gateway cancelled it upstream.
    let records = audit(&w);
    assert_eq!(records.len(), 4, "{records:?}");
    assert!(
        records.iter().all(|r| r["outcome"] == "cancelled"),
        "{records:?}"
    );
}

/// A stdio gateway like [`draining_warden`]'s, with its admin listener on `port`.
fn draining_stdio(name: &str, drain_timeout: &str, port: u16) -> Warden {
    draining_stdio_with(name, drain_timeout, port, "")
}

/// [`draining_stdio`] with more TOML before its `[store]` (rules, say).
fn draining_stdio_with(name: &str, drain_timeout: &str, port: u16, more: &str) -> Warden {
    Warden::start(
        name,
        &format!(
            "[gateway]\ndrain_timeout = \"{drain_timeout}\"\n{more}\
             [store]\nurl = \"sqlite://{{dir}}/audit.db\"\n\
             [admin]\nlisten = \"127.0.0.1:{port}\"\n\
             [[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n\
             env = {{ FIXTURE_GATE = \"1\", FIXTURE_COUNT_FILE = \"{{dir}}/count\" }}\n"
        ),
    )
}

fn terminate(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn over_stdio_sigterm_lets_a_call_in_flight_finish_and_answer() {
    let port = free_port();
    let mut w = draining_stdio("drain-stdio", "30s", port);
    let admin = format!("127.0.0.1:{port}");
    let gate = w.dir.join("gate");
    let id = w.send_request(
        "tools/call",
        json!({"name": "fx.gate", "arguments": {"file": gate.to_str().unwrap()}}),
    );
    wait_for_count(&w.dir, "gate", 1);
    terminate(w.pid());
    assert_eq!(readyz_until(&admin, 503).body, "not ready: draining\n");
    std::fs::write(&gate, "").unwrap();
    let r = w.response(&json!(id));
    assert_eq!(r["result"]["content"][0]["text"], "the gate opened", "{r}");
    assert!(w.wait_exit().success());
    let records = audit_in(&w.dir);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["outcome"], "ok", "{records:?}");
}

#[test]
fn over_stdio_a_call_past_the_drain_deadline_is_answered_once_and_cancelled() {
    let port = free_port();
    let mut w = draining_stdio("drain-stdio-deadline", "1s", port);
    let never = w.dir.join("never-opened");
    let id = w.send_request(
        "tools/call",
        json!({"name": "fx.gate", "arguments": {"file": never.to_str().unwrap()}}),
    );
    wait_for_count(&w.dir, "gate", 1);
    terminate(w.pid());
    let (line, _) = w.response_line(&json!(id));
    assert_eq!(
        line,
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32603,"message":"Internal error: the gateway shut down before this call finished, and cancelled it; the tool may or may not have run. Retry it (with an idempotency key a retry is safe)."}}}}"#
        )
    );
    // No second answer follows before the exit.
    assert!(w.wait_exit().success());
    assert_eq!(w.rest_of_output(), Vec::<String>::new(), "after the answer");
    let records = audit_in(&w.dir);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["outcome"], "cancelled", "{records:?}");
}

#[test]
fn over_stdio_a_call_waiting_for_approval_at_the_deadline_is_answered_and_cancelled() {
    let port = free_port();
    let ask = "[access]\napproval_timeout_ms = 60000\n\
               [[rule]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\neffect = \"ask\"\n";
    let mut w = draining_stdio_with("drain-stdio-approval", "1s", port, ask);
    let id = w.send_request(
        "tools/call",
        json!({"name": "fx.echo", "arguments": {"n": 1}}),
    );
    w.wait_for("elicitation", |m| m["method"] == "elicitation/create");
    terminate(w.pid());
    let (line, _) = w.response_line(&json!(id));
    assert!(
        line.contains("the gateway shut down before this call finished"),
        "{line}"
    );
    assert!(w.wait_exit().success());
    let records = audit_in(&w.dir);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["outcome"], "cancelled", "{records:?}");
    assert_eq!(count(&w.dir, "echo"), 0, "the tool never ran");
}
