//! The Streamable HTTP front through the real binary over real sockets: sessions,
//! JSON and SSE answers, resumption, cancellation on disconnect, DNS-rebinding
//! protection, authentication (G1), and bad input of every kind.

mod common;

use common::http::{anonymous, call, error_body, open, request, HttpWarden, POST};
use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Waits until the audit trail in `dir` records the call to `tool` as cancelled.
fn wait_until_cancelled(dir: &std::path::Path, tool: &str, limit: Duration) {
    let started = Instant::now();
    let audit = dir.join("audit.jsonl");
    loop {
        let text = std::fs::read_to_string(&audit).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains(tool)) {
            let record: Value = serde_json::from_str(line).unwrap();
            assert_eq!(record["outcome"], "cancelled", "{record}");
            return;
        }
        assert!(
            started.elapsed() < limit,
            "the call was not cancelled: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_session_lives_from_initialize_to_delete() {
    let w = HttpWarden::start("http-session", &anonymous(""), &[]);
    let sid = w.session(&[]);
    // The session sealed (docs/fleet.md): visible ASCII, unguessable, and another
    // session's is another id.
    assert!(sid.len() > 100, "{sid}");
    assert!(sid
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    assert_ne!(sid, w.session(&[]));
    let with = [("Mcp-Session-Id", sid.as_str())];

    let r = w.post(
        &with,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let names: Vec<String> = r.json()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.contains(&"fx.echo".to_owned()), "{names:?}");

    // A governed call: the pipeline runs for HTTP callers too.
    let r = w.post(
        &with,
        &call(2, "fx.echo", json!({"text": "hi", "colour": "red"})),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["result"]["structuredContent"],
        json!({"text": "hi", "colour": "red"})
    );

    // Unknown, missing and foreign sessions.
    let r = w.post(
        &[("Mcp-Session-Id", "0123")],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
    );
    assert_eq!(r.status, 404);
    assert_eq!(
        r.body,
        error_body("Session not found: it ended or expired. Start a new one with initialize.")
    );
    let r = w.post(&[], &json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}));
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        error_body("Bad request: send the Mcp-Session-Id header the initialize response returned.")
    );

    // Protocol version header.
    let mut bad = with.to_vec();
    bad.push(("MCP-Protocol-Version", "1999-01-01"));
    let r = w.post(&bad, &json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}));
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        error_body("Bad request: unsupported MCP-Protocol-Version '1999-01-01'; this gateway speaks 2025-11-25, 2025-06-18, 2025-03-26.")
    );
    let mut good = with.to_vec();
    good.push(("MCP-Protocol-Version", "2025-11-25"));
    let r = w.post(&good, &json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}));
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"jsonrpc": "2.0", "id": 5, "result": {}}));

    // DELETE ends it.
    let r = request(&w.addr, "DELETE", &with, "");
    assert_eq!(r.status, 200);
    let r = w.post(&with, &json!({"jsonrpc": "2.0", "id": 6, "method": "ping"}));
    assert_eq!(r.status, 404);
}

#[test]
fn bad_requests_get_clear_http_errors() {
    let w = HttpWarden::start("http-bad", &anonymous(""), &[]);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    .to_string();
    let accept = ("Accept", "application/json, text/event-stream");

    let r = request(
        &w.addr,
        "POST",
        &[("Content-Type", "text/plain"), accept],
        &init,
    );
    assert_eq!(r.status, 415);
    assert_eq!(
        r.body,
        error_body("Unsupported media type: send the message as application/json.")
    );

    let r = request(
        &w.addr,
        "POST",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
        ],
        &init,
    );
    assert_eq!(r.status, 406);
    assert_eq!(
        r.body,
        error_body(
            "Not acceptable: the Accept header must list application/json and text/event-stream."
        )
    );

    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"pad\":\"{}\"}}",
        "x".repeat(5000)
    );
    let r = request(&w.addr, "POST", &POST, &big);
    assert_eq!(r.status, 413);
    assert_eq!(r.body, error_body("Request too large: the gateway accepts bodies of at most 4096 bytes (gateway.max_message_bytes)."));

    let r = request(&w.addr, "POST", &POST, "{\"jsonrpc\": \"2.0\", \"id\": 1,");
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], -32700);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("Parse error: "));

    let r = request(&w.addr, "POST", &POST, "[]");
    assert_eq!(r.status, 400);
    assert_eq!(r.body, error_body("Invalid request: JSON-RPC batches are not supported by MCP; send one message per request."));

    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let r = request(&w.addr, "POST", &POST, &deep[..4000]);
    assert_eq!(r.status, 400, "{}", r.body);

    let r = request(&w.addr, "PUT", &POST, &init);
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET, POST, DELETE"));
    assert_eq!(
        r.body,
        error_body("Method not allowed: use POST, GET or DELETE.")
    );

    let r = request(&w.addr, "GET", &[("Accept", "application/json")], "");
    assert_eq!(r.status, 406);
    assert_eq!(
        r.body,
        error_body("Not acceptable: the Accept header must list text/event-stream.")
    );
    let r = request(&w.addr, "GET", &[("Accept", "text/event-stream")], "");
    assert_eq!(r.status, 400);

    // DNS rebinding protection: a foreign Host or Origin is refused, loopback ones are not.
    let mut evil = POST.to_vec();
    evil.push(("Host", "evil.example:8931"));
    let r = request(&w.addr, "POST", &evil, &init);
    assert_eq!(r.status, 403);
    assert_eq!(
        r.body,
        error_body("Forbidden: this host name is not allowed.")
    );
    let mut evil = POST.to_vec();
    evil.push(("Origin", "http://evil.example"));
    let r = request(&w.addr, "POST", &evil, &init);
    assert_eq!(r.status, 403);
    assert_eq!(r.body, error_body("Forbidden: this origin is not allowed."));
    let mut local = POST.to_vec();
    local.push(("Origin", "http://localhost:3000"));
    assert_eq!(request(&w.addr, "POST", &local, &init).status, 200);

    // The gateway still serves after all of that.
    let sid = w.session(&[]);
    let r = w.post(
        &[("Mcp-Session-Id", &sid)],
        &call(9, "fx.echo", json!({"text": "still here"})),
    );
    assert_eq!(
        r.json()["result"]["structuredContent"]["text"],
        "still here"
    );
}

#[test]
fn progress_makes_an_sse_answer_that_a_client_can_resume() {
    let w = HttpWarden::start("http-sse", &anonymous(""), &[]);
    let sid = w.session(&[]);
    let with = [("Mcp-Session-Id", sid.as_str())];

    // Progress first, then the answer: an SSE stream with ids, priming event first.
    let msg = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "fx.progress", "arguments": {"steps": 3}, "_meta": {"progressToken": "p-7"}}});
    let r = w.post(&with, &msg);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = common::http::parse_events(&r.body);
    assert!(
        events[0].1.is_empty() && events[0].0.split('.').next().unwrap().ends_with("-0"),
        "{events:?}"
    );
    let messages = r.messages();
    assert_eq!(messages.len(), 4, "{messages:?}");
    for (i, m) in messages[..3].iter().enumerate() {
        assert_eq!(m["method"], "notifications/progress");
        assert_eq!(m["params"]["progressToken"], "p-7");
        assert_eq!(m["params"]["progress"], i as u64 + 1);
    }
    assert_eq!(messages[3]["id"], 7);
    assert_eq!(messages[3]["result"]["content"][0]["text"], "3 steps done");

    // Walk away after the first progress event, then resume with Last-Event-ID.
    let msg = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "fx.progress", "arguments": {"steps": 2, "pause_ms": 600}, "_meta": {"progressToken": "p-8"}}});
    let mut headers = POST.to_vec();
    headers.extend_from_slice(&with);
    let mut stream = open(&w.addr, "POST", &headers, &msg.to_string());
    let (priming, _) = stream.next_event().expect("priming event");
    assert!(
        priming.split('.').next().unwrap().ends_with("-0"),
        "{priming}"
    );
    let (first, data) = stream.next_event().expect("first progress");
    assert!(data.contains("notifications/progress"), "{data}");
    drop(stream);
    let mut headers = vec![
        ("Accept", "text/event-stream"),
        ("Last-Event-ID", first.as_str()),
    ];
    headers.extend_from_slice(&with);
    let resumed = request(&w.addr, "GET", &headers, "");
    assert_eq!(resumed.status, 200);
    let rest = resumed.messages();
    assert_eq!(rest.len(), 2, "{rest:?}");
    assert_eq!(rest[0]["params"]["progress"], 2);
    assert_eq!(rest[1]["id"], 8);
    assert_eq!(rest[1]["result"]["content"][0]["text"], "2 steps done");

    // An id this session never issued.
    let mut headers = vec![("Accept", "text/event-stream"), ("Last-Event-ID", "999-1")];
    headers.extend_from_slice(&with);
    let r = request(&w.addr, "GET", &headers, "");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        error_body("Bad request: Last-Event-ID names no stream of this session.")
    );
}

#[test]
fn a_client_that_disconnects_mid_call_gets_the_call_cancelled() {
    let w = HttpWarden::start(
        "http-disconnect",
        &anonymous("[audit]\njsonl = \"{dir}/audit.jsonl\"\n"),
        &[],
    );
    let sid = w.session(&[]);
    let mut headers = POST.to_vec();
    headers.push(("Mcp-Session-Id", &sid));
    let stream = open(
        &w.addr,
        "POST",
        &headers,
        &call(1, "fx.slow", json!({"ms": 10000})).to_string(),
    );
    std::thread::sleep(Duration::from_millis(300));
    drop(stream);
    // Well before the call's own end (10 s).
    wait_until_cancelled(&w.dir, "fx.slow", Duration::from_secs(8));
    // Other sessions are unaffected.
    let sid = w.session(&[]);
    let r = w.post(
        &[("Mcp-Session-Id", &sid)],
        &call(2, "fx.echo", json!({"text": "ok"})),
    );
    assert_eq!(r.json()["result"]["structuredContent"]["text"], "ok");
}

#[test]
fn stateless_2026_requests_need_no_session_and_matching_headers() {
    let w = HttpWarden::start("http-stateless", &anonymous(""), &[]);
    let env = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                     "io.modelcontextprotocol/clientCapabilities": {}});
    let msg = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "fx.echo", "arguments": {"text": "no session"}, "_meta": env}});
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "fx.echo"),
    ];
    let r = w.post(&headers, &msg);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("mcp-session-id"), None);
    assert_eq!(r.json()["result"]["resultType"], "complete");
    assert_eq!(
        r.json()["result"]["structuredContent"]["text"],
        "no session"
    );

    // A name carried base64-encoded matches too.
    let r = w.post(
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "=?base64?ZnguZWNobw==?="),
        ],
        &msg,
    );
    assert_eq!(r.status, 200, "{}", r.body);

    for (bad, header) in [
        (
            [
                ("MCP-Protocol-Version", "2025-11-25"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "fx.echo"),
            ],
            "MCP-Protocol-Version",
        ),
        (
            [
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/list"),
                ("Mcp-Name", "fx.echo"),
            ],
            "Mcp-Method",
        ),
        (
            [
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "fx.other"),
            ],
            "Mcp-Name",
        ),
    ] {
        let r = w.post(&bad, &msg);
        assert_eq!(r.status, 400);
        assert_eq!(
            r.json(),
            json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32020,
                "message": format!("Bad request: the {header} header does not match the request body.")}})
        );
    }

    let r = request(
        &w.addr,
        "GET",
        &[
            ("Accept", "text/event-stream"),
            ("MCP-Protocol-Version", "2026-07-28"),
        ],
        "",
    );
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST"));
    assert_eq!(
        r.body,
        error_body(
            "Method not allowed: MCP 2026-07-28 uses POST only (no sessions, no GET stream)."
        )
    );

    // A 2026-07-28 notification has no session to be about: accepted, and nothing happens.
    let note =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}});
    let r = w.post(&[("MCP-Protocol-Version", "2026-07-28")], &note);
    assert_eq!(r.status, 202);

    // server/discover over HTTP.
    let discover =
        json!({"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": env}});
    let r = w.post(
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "server/discover"),
        ],
        &discover,
    );
    assert_eq!(
        r.json()["result"]["supportedVersions"],
        json!(["2026-07-28"])
    );
}

#[test]
fn an_idle_session_ends_and_a_busy_one_does_not() {
    let w = HttpWarden::start("http-idle", &anonymous("session_idle = \"1s\""), &[]);
    let idle = w.session(&[]);
    let busy = w.session(&[]);
    let ping = |sid: &str| {
        w.post(
            &[("Mcp-Session-Id", sid)],
            &json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        )
        .status
    };
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(ping(&busy), 200);
    }
    assert_eq!(ping(&idle), 404);
}

#[test]
fn the_get_stream_carries_what_belongs_to_no_request() {
    let w = HttpWarden::start("http-get", &anonymous(""), &[]);
    let sid = w.session(&[]);
    let mut headers = vec![
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", sid.as_str()),
    ];
    let mut stream = open(&w.addr, "GET", &headers, "");
    assert_eq!(stream.status, 200);
    let (priming, data) = stream.next_event().expect("a priming event");
    assert!(
        priming.starts_with("0-") && data.is_empty(),
        "{priming:?} {data:?}"
    );
    // One GET stream per session.
    let second = request(&w.addr, "GET", &headers, "");
    assert_eq!(second.status, 409);
    assert_eq!(
        second.body,
        error_body("Conflict: this session already has a GET stream open.")
    );
    // A tool list change upstream reaches the client on the GET stream.
    let r = w.post(
        &[("Mcp-Session-Id", &sid)],
        &call(1, "fx.add_tool", json!({})),
    );
    assert_eq!(r.json()["result"]["content"][0]["text"], "added");
    let (id, data) = stream.next_event().expect("list_changed");
    assert!(id.starts_with("0-"));
    let msg: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(msg["method"], "notifications/tools/list_changed");
    drop(stream);
    // Once it is gone another may open.
    std::thread::sleep(Duration::from_millis(100));
    headers.push(("X-Again", "1"));
    let mut again = open(&w.addr, "GET", &headers, "");
    assert_eq!(again.status, 200);
    assert!(again.next_event().is_some());
}

#[test]
fn a_client_gone_without_keep_alive_is_noticed_by_the_heartbeat() {
    // With `Connection: close` the server never reads the socket again, so only a
    // failed write shows the client left: the long call's stream sends heartbeats.
    let w = HttpWarden::start(
        "http-heartbeat",
        &anonymous("[audit]\njsonl = \"{dir}/audit.jsonl\"\n"),
        &[],
    );
    let sid = w.session(&[]);
    let mut headers = POST.to_vec();
    headers.push(("Mcp-Session-Id", &sid));
    headers.push(("Connection", "close"));
    let stream = open(
        &w.addr,
        "POST",
        &headers,
        &call(1, "fx.slow", json!({"ms": 30000})).to_string(),
    );
    std::thread::sleep(Duration::from_millis(300));
    drop(stream);
    wait_until_cancelled(&w.dir, "fx.slow", Duration::from_secs(25));
}

#[test]
fn an_upstream_request_that_could_be_anyones_goes_to_no_one() {
    // Two callers' calls wait on one stdio upstream, which then asks for sampling:
    // stdio does not say for which call, so neither caller is sent the question.
    let w = HttpWarden::start("http-untied", &anonymous(""), &[]);
    let a = w.session(&[]);
    let b = w.session(&[]);
    let (addr, a2) = (w.addr.clone(), a.clone());
    let slow = std::thread::spawn(move || {
        let mut headers = POST.to_vec();
        headers.push(("Mcp-Session-Id", &a2));
        request(
            &addr,
            "POST",
            &headers,
            &call(1, "fx.slow", json!({"ms": 1500})).to_string(),
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    let r = w.post(
        &[("Mcp-Session-Id", &b)],
        &call(2, "fx.sample", json!({"prompt": "b's secret"})),
    );
    let messages = r.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(
        messages[0]["result"]["content"][0]["text"],
        "model said: <no answer>"
    );
    let a_reply = slow.join().unwrap();
    let messages = a_reply.messages();
    assert_eq!(
        messages.len(),
        1,
        "session a was shown another call's request: {messages:?}"
    );
    assert_eq!(messages[0]["result"]["content"][0]["text"], "slept 1500 ms");
}

#[test]
fn an_upstream_request_goes_only_to_a_client_that_declared_it() {
    // Same call, two sessions: one declared sampling and is asked; the other did not,
    // and its upstream hears "no" at once instead of waiting for its timeout.
    let w = HttpWarden::start("http-capability", &anonymous(""), &[]);
    let without = w.session(&[]);
    let r = w.post(
        &[("Mcp-Session-Id", &without)],
        &call(1, "fx.sample", json!({"prompt": "p"})),
    );
    let messages = r.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(
        messages[0]["result"]["content"][0]["text"],
        "model said: <no answer>"
    );
    let with = w.session_with(&[], json!({"sampling": {}}));
    let mut headers = POST.to_vec();
    headers.push(("Mcp-Session-Id", &with));
    let mut stream = open(
        &w.addr,
        "POST",
        &headers,
        &call(2, "fx.sample", json!({"prompt": "p"})).to_string(),
    );
    let asked = loop {
        let (_, data) = stream.next_event().expect("the sampling request");
        if data.contains("sampling/createMessage") {
            break serde_json::from_str::<Value>(&data).unwrap();
        }
    };
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"}});
    let r = w.post(&[("Mcp-Session-Id", &with)], &answer);
    assert_eq!(r.status, 202);
    let reply = stream.finish();
    let last = reply.messages().pop().expect("the answer");
    assert_eq!(last["result"]["content"][0]["text"], "model said: hi");
}

#[test]
fn metrics_count_refused_requests_and_open_sessions() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let toml = format!(
        "[metrics]\nlisten = \"127.0.0.1:{port}\"\n[[caller]]\nname = \"alice\"\napi_key_env = \"WARDEN_TEST_METRICS_KEY\"\n{}",
        fixture_config("", "")
    );
    let w = HttpWarden::start("http-metrics", &toml, &[("WARDEN_TEST_METRICS_KEY", "k-1")]);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(w.post(&[], &ping).status, 401);
    assert_eq!(
        w.post(&[("Authorization", "Bearer nope")], &ping).status,
        401
    );
    let sid = w.session(&[("Authorization", "Bearer k-1")]);
    let _other = w.session(&[("Authorization", "Bearer k-1")]);
    let r = request(
        &w.addr,
        "DELETE",
        &[("Authorization", "Bearer k-1"), ("Mcp-Session-Id", &sid)],
        "",
    );
    assert_eq!(r.status, 200);
    let metrics = request(&format!("127.0.0.1:{port}"), "GET", &[], "");
    assert_eq!(
        metrics.status, 404,
        "the metrics endpoint is /metrics, not /mcp"
    );
    let scrape = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(
        scrape.contains("warden_http_refused_total{status=\"401\"} 2\n"),
        "{scrape}"
    );
    assert!(scrape.contains("warden_http_sessions 1\n"), "{scrape}");
}
