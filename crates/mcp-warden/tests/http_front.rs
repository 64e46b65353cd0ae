//! The Streamable HTTP front through the real binary over real sockets: sessions,
//! JSON and SSE answers, resumption, cancellation on disconnect, DNS-rebinding
//! protection, authentication (G1), and bad input of every kind.

mod common;

use common::http::{open, request, HttpWarden, POST};
use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn anonymous(extra: &str) -> String {
    format!(
        "[gateway]\nanonymous_caller = \"dev\"\nmax_message_bytes = 4096\n{extra}\n{}",
        fixture_config("", "")
    )
}

fn error_body(message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": message}}).to_string()
}

fn call(id: i64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}})
}

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
    assert_eq!(sid.len(), 32);
    assert!(sid.bytes().all(|b| b.is_ascii_hexdigit()));
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
        events[0].1.is_empty() && events[0].0.ends_with("-0"),
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
    assert!(priming.ends_with("-0"));
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
fn callers_are_identified_by_api_key_or_jwt() {
    let secret = "jwt-test-secret";
    let toml = format!(
        "[[caller]]\nname = \"alice\"\napi_key_env = \"WARDEN_TEST_ALICE_KEY\"\n[auth]\njwt_secret_env = \"WARDEN_TEST_JWT\"\naudience = \"mcp-warden\"\nissuer = \"https://id.test\"\n[[rule]]\ncallers = [\"bob\"]\ntools = [\"fx.crash\"]\neffect = \"deny\"\n{}",
        fixture_config("", "")
    );
    let w = HttpWarden::start(
        "http-auth",
        &toml,
        &[
            ("WARDEN_TEST_ALICE_KEY", "alice-key-1"),
            ("WARDEN_TEST_JWT", secret),
        ],
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});

    let r = w.post(&[], &init);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"mcp-warden\"")
    );
    assert_eq!(
        r.body,
        error_body("Unauthorized: send 'Authorization: Bearer <API key or token>'.")
    );

    let r = w.post(&[("Authorization", "Bearer alice-key-2")], &init);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"mcp-warden\", error=\"invalid_token\", error_description=\"Unauthorized: the credential was not accepted\"")
    );
    let r = w.post(&[("Authorization", "Basic YWxpY2U6eA==")], &init);
    assert_eq!(r.status, 401);
    assert_eq!(r.body, error_body("Unauthorized: use the Bearer scheme."));

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = |claims: Value| {
        format!(
            "Bearer {}",
            jsonwebtoken::encode(
                &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
                &claims,
                &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
            )
            .unwrap()
        )
    };
    let good =
        json!({"sub": "bob", "aud": "mcp-warden", "iss": "https://id.test", "exp": now + 300});
    let mut expired = good.clone();
    expired["exp"] = json!(now - 300);
    let r = w.post(&[("Authorization", &token(expired))], &init);
    assert_eq!(r.status, 401);
    assert_eq!(r.body, error_body("Unauthorized: the token has expired."));
    let mut other = good.clone();
    other["aud"] = json!("another-service");
    let r = w.post(&[("Authorization", &token(other))], &init);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.body,
        error_body("Unauthorized: the token is meant for another audience.")
    );

    // Alice by key, Bob by token: each sees what their grants allow.
    let alice = w.session(&[("Authorization", "Bearer alice-key-1")]);
    let bob_token = token(good);
    let bob = w.session(&[("Authorization", &bob_token)]);
    let list = |auth: &str, sid: &str| -> Vec<String> {
        let r = w.post(
            &[("Authorization", auth), ("Mcp-Session-Id", sid)],
            &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        );
        r.json()["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(list("Bearer alice-key-1", &alice).contains(&"fx.crash".to_owned()));
    assert!(!list(&bob_token, &bob).contains(&"fx.crash".to_owned()));
    // A session belongs to the caller who opened it.
    let r = w.post(
        &[("Authorization", &bob_token), ("Mcp-Session-Id", &alice)],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
    );
    assert_eq!(r.status, 404);
    // A valid session without credentials is still refused: sessions are not authentication.
    let r = w.post(
        &[("Mcp-Session-Id", &alice)],
        &json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}),
    );
    assert_eq!(r.status, 401);
}

/// A gateway that takes HS256 tokens for audience `mcp-warden` from issuer
/// `https://id.test`, and a signer for such tokens.
fn jwt_warden(name: &str) -> (HttpWarden, impl Fn(&Value) -> String) {
    let secret = "jwt-claims-secret";
    let toml = format!(
        "[auth]\njwt_secret_env = \"WARDEN_TEST_JWT\"\naudience = \"mcp-warden\"\nissuer = \"https://id.test\"\n{}",
        fixture_config("", "")
    );
    let w = HttpWarden::start(name, &toml, &[("WARDEN_TEST_JWT", secret)]);
    let sign = move |claims: &Value| {
        format!(
            "Bearer {}",
            jsonwebtoken::encode(
                &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
                claims,
                &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
            )
            .unwrap()
        )
    };
    (w, sign)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
}

/// A 401 for a token the front would not take: the exact body, and a challenge
/// whose description is the text without its final period.
fn assert_invalid_token(r: &common::http::Reply, text: &str) {
    assert_eq!(r.status, 401);
    assert_eq!(r.body, error_body(text));
    let challenge = format!(
        "Bearer realm=\"mcp-warden\", error=\"invalid_token\", error_description=\"{}\"",
        text.trim_end_matches('.')
    );
    assert_eq!(r.header("www-authenticate"), Some(challenge.as_str()));
}

#[test]
fn a_jwt_that_is_not_valid_yet_is_refused() {
    let (w, sign) = jwt_warden("http-jwt-times");
    let now = unix_now();
    let good = json!({"sub": "bob", "aud": "mcp-warden", "iss": "https://id.test",
        "exp": now + 2 * 86_400, "nbf": now - 60, "iat": now - 60});

    // Signed correctly, but only valid from tomorrow.
    let mut tomorrow = good.clone();
    tomorrow["nbf"] = json!(now + 86_400);
    let r = w.post(&[("Authorization", &sign(&tomorrow))], &initialize());
    assert_invalid_token(&r, "Unauthorized: the token is not valid yet.");

    // Dated as issued tomorrow.
    let mut issued_later = good.clone();
    issued_later["iat"] = json!(now + 86_400);
    let r = w.post(&[("Authorization", &sign(&issued_later))], &initialize());
    assert_invalid_token(
        &r,
        "Unauthorized: the token says it was issued in the future.",
    );

    // Valid since a minute ago: in.
    let r = w.post(&[("Authorization", &sign(&good))], &initialize());
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("mcp-session-id").is_some());
}

#[test]
fn a_jwt_without_the_configured_audience_or_issuer_is_refused() {
    let (w, sign) = jwt_warden("http-jwt-claims");
    let good = json!({"sub": "bob", "aud": "mcp-warden", "iss": "https://id.test", "exp": unix_now() + 300});

    let mut no_aud = good.clone();
    no_aud.as_object_mut().unwrap().remove("aud");
    let r = w.post(&[("Authorization", &sign(&no_aud))], &initialize());
    assert_invalid_token(&r, "Unauthorized: the token does not name an audience.");

    let mut no_iss = good.clone();
    no_iss.as_object_mut().unwrap().remove("iss");
    let r = w.post(&[("Authorization", &sign(&no_iss))], &initialize());
    assert_invalid_token(&r, "Unauthorized: the token does not name an issuer.");

    let r = w.post(&[("Authorization", &sign(&good))], &initialize());
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("mcp-session-id").is_some());
}

#[test]
fn check_is_loud_about_anonymous_http_callers() {
    let dir = scratch("http-check");
    let config = write_config(
        &dir,
        "[gateway]\nfront = \"http\"\nanonymous_caller = \"dev\"\n",
    );
    let (code, out, _) = cli(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("warning: gateway.anonymous_caller = 'dev': HTTP requests without credentials act as 'dev' (authentication is off for them; development and test suites only)"), "{out}");
    let config = write_config(&dir, "[gateway]\nfront = \"http\"\n");
    let (_, out, _) = cli(&["check", "--config", config.to_str().unwrap()]);
    assert!(out.contains("every request will get 401"), "{out}");
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

// Connections and sessions one client can hold (finding 4: slow and idle
// connections exhausting file descriptors; finding 5: one caller taking every session).

use common::http::{exchange, try_exchange, wait_closed};
use std::io::Write as _;
use std::net::TcpStream;

fn scrape(port: u16) -> String {
    use std::io::Read;
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The whole answer to a connection over a cap, as it comes off the socket.
fn service_unavailable(message: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32603, "message": message}})
        .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A connection the front admitted, with a session opened and used on it. A
/// closed connection's place is freed when the front notices the close, a moment
/// later: until then a new one is refused (503, or closed before it could say so).
fn served_once_admitted(w: &HttpWarden) {
    let started = Instant::now();
    let (mut conn, sid) = loop {
        let mut conn = TcpStream::connect(&w.addr).unwrap();
        match try_exchange(&mut conn, "POST", &POST, &initialize().to_string()) {
            Ok(r) if r.status == 200 => {
                let sid = r.header("mcp-session-id").expect("a session id").to_owned();
                break (conn, sid);
            }
            Ok(r) => assert_eq!(r.status, 503, "{}", r.body),
            Err(_) => {}
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the front never took a connection again"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut headers = POST.to_vec();
    headers.push(("Mcp-Session-Id", &sid));
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let r = exchange(&mut conn, "POST", &headers, &note.to_string());
    assert_eq!(r.status, 202);
    let r = exchange(
        &mut conn,
        "POST",
        &headers,
        &call(1, "fx.echo", json!({"text": "in"})).to_string(),
    );
    assert_eq!(r.json()["result"]["structuredContent"]["text"], "in");
}

#[test]
fn a_stalled_request_head_is_cut_off_while_others_are_served() {
    let w = HttpWarden::start(
        "http-head-timeout",
        &anonymous("http_head_timeout = \"1s\""),
        &[],
    );
    let started = Instant::now();
    let mut half = TcpStream::connect(&w.addr).unwrap();
    half.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        .unwrap();
    let mut silent = TcpStream::connect(&w.addr).unwrap();
    // Served once, then half of a second head: the head timeout applies there too,
    // long before the idle timeout (60 s).
    let mut kept = TcpStream::connect(&w.addr).unwrap();
    let r = exchange(&mut kept, "GET", &[("Accept", "text/event-stream")], "");
    assert_eq!(r.status, 400, "{}", r.body);
    let restarted = Instant::now();
    kept.write_all(b"POST /mcp HTTP/1.1\r\nHo").unwrap();

    // Meanwhile a normal client is served.
    let sid = w.session(&[]);
    let r = w.post(
        &[("Mcp-Session-Id", &sid)],
        &call(1, "fx.echo", json!({"text": "served"})),
    );
    assert_eq!(r.json()["result"]["structuredContent"]["text"], "served");

    for (name, socket, since) in [
        ("half a head", &mut half, started),
        ("nothing", &mut silent, started),
        ("half a second head", &mut kept, restarted),
    ] {
        let (_, said) = wait_closed(socket, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("a connection that sent {name} was still open after 5 s"));
        assert_eq!(said, "", "{name}");
        let took = since.elapsed();
        assert!(
            took >= Duration::from_millis(900),
            "a connection that sent {name} was closed after {took:?}, before the head timeout"
        );
    }
}

#[test]
fn connections_over_the_cap_get_503_and_a_freed_place_is_taken_again() {
    let port = free_port();
    let toml = anonymous(&format!(
        "max_connections = 3\nhttp_head_timeout = \"60s\"\n[metrics]\nlisten = \"127.0.0.1:{port}\""
    ));
    let w = HttpWarden::start("http-max-connections", &toml, &[]);
    let mut idle: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(&w.addr).unwrap())
        .collect();
    let mut fourth = TcpStream::connect(&w.addr).unwrap();
    let (_, said) = wait_closed(&mut fourth, Duration::from_secs(5))
        .expect("the connection over the cap was not closed");
    assert_eq!(
        said,
        service_unavailable("Service unavailable: too many open connections; retry later.")
    );
    let metrics = scrape(port);
    assert!(
        metrics.contains("warden_http_connections_refused_total{limit=\"max_connections\"} 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("\nwarden_http_connections 3\n"),
        "{metrics}"
    );
    // The three keep their places; once one goes, a new client is served.
    assert!(wait_closed(&mut idle[0], Duration::from_millis(200)).is_none());
    drop(idle.remove(0));
    served_once_admitted(&w);
}

#[test]
fn one_address_holds_at_most_its_share_of_connections() {
    let w = HttpWarden::start(
        "http-max-per-client",
        &anonymous("max_connections_per_client = 2\nhttp_head_timeout = \"60s\""),
        &[],
    );
    let mut held = vec![
        TcpStream::connect(&w.addr).unwrap(),
        TcpStream::connect(&w.addr).unwrap(),
    ];
    let mut third = TcpStream::connect(&w.addr).unwrap();
    let (_, said) = wait_closed(&mut third, Duration::from_secs(5))
        .expect("the connection over the cap was not closed");
    assert_eq!(
        said,
        service_unavailable("Service unavailable: too many open connections from this address; close idle ones or retry later.")
    );
    assert!(wait_closed(&mut held[0], Duration::from_millis(200)).is_none());
    drop(held.remove(0));
    served_once_admitted(&w);
}

#[test]
fn an_idle_connection_is_closed_but_streams_and_long_calls_are_not() {
    let w = HttpWarden::start(
        "http-idle-timeout",
        // A short head timeout too: a connection being closed gets no longer than
        // that to finish, so a stream wrongly taken for idle would not outlive it.
        &anonymous("http_idle_timeout = \"1s\"\nhttp_head_timeout = \"1s\""),
        &[],
    );
    let sid = w.session(&[]);
    let with = [("Mcp-Session-Id", sid.as_str())];

    // Used, kept alive between uses, then quiet: closed after the idle timeout.
    let mut kept = TcpStream::connect(&w.addr).unwrap();
    let mut headers = POST.to_vec();
    headers.extend_from_slice(&with);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    assert_eq!(exchange(&mut kept, "POST", &headers, &ping).status, 200);
    std::thread::sleep(Duration::from_millis(500));
    // The idle time runs from the answer, which comes after this.
    let asked = Instant::now();
    assert_eq!(exchange(&mut kept, "POST", &headers, &ping).status, 200);
    let (_, said) = wait_closed(&mut kept, Duration::from_secs(5))
        .expect("an idle connection was still open 5 s after its last answer");
    assert_eq!(said, "");
    let took = asked.elapsed();
    assert!(took >= Duration::from_secs(1), "closed after {took:?}");

    // A GET stream held open for several idle timeouts still delivers.
    let get = [
        ("Accept", "text/event-stream"),
        ("Mcp-Session-Id", sid.as_str()),
    ];
    let mut stream = open(&w.addr, "GET", &get, "");
    assert_eq!(stream.status, 200);
    stream.next_event().expect("a priming event");
    // A call longer than the idle timeout is answered on its connection.
    let r = w.post(&with, &call(2, "fx.slow", json!({"ms": 3000})));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.messages().last().unwrap()["result"]["content"][0]["text"],
        "slept 3000 ms"
    );
    let r = w.post(&with, &call(3, "fx.add_tool", json!({})));
    assert_eq!(r.json()["result"]["content"][0]["text"], "added");
    let (_, data) = stream
        .next_event()
        .expect("the GET stream was closed while open");
    assert!(data.contains("notifications/tools/list_changed"), "{data}");
}

#[test]
fn one_caller_cannot_take_every_session() {
    let toml = anonymous(
        "max_sessions_per_caller = 2\n[[caller]]\nname = \"alice\"\napi_key_env = \"WARDEN_TEST_SESSIONS_KEY\"",
    );
    let w = HttpWarden::start(
        "http-sessions-per-caller",
        &toml,
        &[("WARDEN_TEST_SESSIONS_KEY", "alice-key")],
    );
    let first = w.session(&[]);
    let _second = w.session(&[]);
    let r = w.post(&[], &initialize());
    assert_eq!(r.status, 429);
    assert_eq!(
        r.body,
        error_body("Too many requests: this caller already has 2 open sessions; end unused ones with DELETE or let them expire.")
    );
    let retry: u64 = r
        .header("retry-after")
        .expect("a Retry-After header")
        .parse()
        .expect("Retry-After in seconds");
    assert!((1..=1800).contains(&retry), "Retry-After: {retry}");

    // Another caller still gets a session.
    let alice = w.session(&[("Authorization", "Bearer alice-key")]);
    assert_eq!(alice.len(), 32);

    // Once the first caller ends one, it may open one again, and no more.
    let r = request(&w.addr, "DELETE", &[("Mcp-Session-Id", &first)], "");
    assert_eq!(r.status, 200);
    w.session(&[]);
    assert_eq!(w.post(&[], &initialize()).status, 429);
}

#[test]
fn check_refuses_nonsense_connection_limits() {
    let dir = scratch("http-check-limits");
    for (gateway, error) in [
        (
            "max_connections = 0",
            "gateway.max_connections: must be at least 1: 0 would refuse everyone",
        ),
        (
            "max_connections_per_client = 0",
            "gateway.max_connections_per_client: must be at least 1: 0 would refuse everyone",
        ),
        (
            "max_sessions_per_caller = 0",
            "gateway.max_sessions_per_caller: must be at least 1: 0 would refuse everyone",
        ),
        (
            "http_head_timeout = \"ten seconds\"",
            "gateway.http_head_timeout: 'ten seconds' is not a duration; write a number and a unit: 90s, 15m, 24h, 7d",
        ),
        (
            "http_idle_timeout = \"0s\"",
            "gateway.http_idle_timeout: must be at least 1s: a zero timeout would close every connection at once",
        ),
    ] {
        let config = write_config(&dir, &format!("[gateway]\n{gateway}\n"));
        let (code, out, err) = cli(&["check", "--config", config.to_str().unwrap()]);
        assert_eq!((code, out.as_str()), (1, ""), "{gateway}");
        assert_eq!(err, format!("error: {}: {error}\n", config.display()));
    }
    let config = write_config(
        &dir,
        &format!(
            "[gateway]\nhttp_head_timeout = \"5s\"\nhttp_idle_timeout = \"2m\"\nmax_connections = 3\nmax_connections_per_client = 1\nmax_sessions_per_caller = 1\n{}",
            fixture_config("", "")
        ),
    );
    let (code, _, err) = cli(&["check", "--config", config.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
}
