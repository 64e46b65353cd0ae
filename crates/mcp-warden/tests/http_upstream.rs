//! Upstreams over Streamable HTTP (`url = …`): the conformance fixture's own HTTP
//! front as a real server process on a real socket, with the gateway's stdio front
//! before it.

mod common;

use common::*;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONFORMANCE: &str = env!("CARGO_BIN_EXE_warden-conformance-upstream");

/// The fixture's HTTP front on `addr` (port 0 picks one); returns it and its address.
fn http_server(addr: &str, token: Option<&str>) -> (Child, String) {
    serve(addr, token, false)
}

/// The test certificate material (tests/tls).
fn tls_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/tls")
}

fn serve(addr: &str, token: Option<&str>, tls: bool) -> (Child, String) {
    let mut cmd = Command::new(CONFORMANCE);
    cmd.args(["--http", addr]);
    if tls {
        cmd.arg("--tls")
            .arg(tls_dir().join("server.pem"))
            .arg(tls_dir().join("server-key.pem"));
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(t) = token {
        cmd.env("CONFORMANCE_TOKEN", t);
    }
    let mut child = cmd.spawn().expect("start the HTTP fixture");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = lines.next().expect("a banner").expect("a line");
    let addr = line
        .strip_prefix("warden-conformance-upstream: listening on http://")
        .or_else(|| line.strip_prefix("warden-conformance-upstream: listening on https://"))
        .expect("the banner")
        .trim_end_matches("/mcp")
        .to_owned();
    (child, addr)
}

fn upstream(addr: &str, extra: &str) -> String {
    format!(
        "[[upstream]]\nname = \"cf\"\nurl = \"http://{addr}/mcp\"\ntimeout_ms = 5000\n{extra}\n"
    )
}

#[test]
fn an_http_upstream_is_relayed_like_a_child_process() {
    let (mut server, addr) = http_server("127.0.0.1:0", None);
    let mut w = Warden::start("http-upstream", &upstream(&addr, ""));
    let names = w.tool_names();
    assert!(
        names.contains(&"cf.test_simple_text".to_owned()),
        "{names:?}"
    );
    assert_eq!(
        w.call_text("cf.test_simple_text", json!({})),
        "This is a simple text response for testing."
    );

    // Progress over the upstream's SSE answer, mapped back to the client's token.
    let id = w.send_request(
        "tools/call",
        json!({"name": "cf.test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": "tok"}}),
    );
    let r = w.response(&json!(id));
    assert_eq!(r["result"]["content"][0]["text"], "Progress reported.");
    let progress: Vec<_> = w
        .backlog
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| {
            (
                m["params"]["progressToken"].clone(),
                m["params"]["progress"].clone(),
            )
        })
        .collect();
    assert_eq!(
        progress,
        vec![
            (json!("tok"), json!(0)),
            (json!("tok"), json!(50)),
            (json!("tok"), json!(100))
        ]
    );

    // A sampling request the upstream sends on its SSE answer reaches the client, and the answer goes back.
    let id = w.send_request(
        "tools/call",
        json!({"name": "cf.test_sampling", "arguments": {"prompt": "say hi"}}),
    );
    let req = w.wait_for("sampling request", |m| {
        m["method"] == "sampling/createMessage"
    });
    assert_eq!(req["params"]["messages"][0]["content"]["text"], "say hi");
    w.send(
        &json!({"jsonrpc": "2.0", "id": req["id"], "result": {"role": "assistant",
        "content": {"type": "text", "text": "hi!"}, "model": "m"}}),
    );
    let r = w.response(&json!(id));
    assert_eq!(r["result"]["content"][0]["text"], "LLM response: hi!");

    // Governance applies: an unknown key in reject mode never reaches the server.
    let r = w.request("resources/read", json!({"uri": "test://static-text"}));
    assert_eq!(
        r["result"]["contents"][0]["text"],
        "This is the content of a static text resource."
    );

    // SEP-1699: the server ends the call's stream after a priming event and serves
    // the answer to a GET with Last-Event-ID; the gateway comes back for it.
    assert_eq!(
        w.call_text("cf.test_reconnection", json!({})),
        "Reconnection test completed."
    );

    // An answer that is not JSON fails the call at once (not at its 5 s timeout).
    let started = Instant::now();
    let r = w.call("cf.garbage_answer", json!({}));
    assert_eq!(
        r["result"]["content"][0]["text"],
        "Error: An internal error occurred while executing the tool."
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // The server goes away: a call fails promptly with E2; it comes back: calls work again.
    server.kill().unwrap();
    server.wait().unwrap();
    let started = Instant::now();
    let r = w.call("cf.test_simple_text", json!({}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(
        r["result"]["content"][0]["text"],
        "Error: An internal error occurred while executing the tool."
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let (mut server, _) = http_server(&addr, None);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = w.call("cf.test_simple_text", json!({}));
        if r["result"]["isError"] != true {
            assert_eq!(
                r["result"]["content"][0]["text"],
                "This is a simple text response for testing."
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not reconnect: {r}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let _ = server.kill();
}

#[test]
fn the_gateway_presents_its_own_token_upstream() {
    let (mut server, addr) = http_server("127.0.0.1:0", Some("upstream-secret"));
    // Without the token the upstream refuses, and listing says so instead of shrinking.
    let mut w = Warden::start("http-upstream-no-token", &upstream(&addr, ""));
    let r = w.request("tools/list", json!({}));
    assert_eq!(
        r["error"]["message"],
        "Listing failed: upstream 'cf' is not available, so the list would be incomplete. Retry shortly."
    );
    drop(w);
    std::env::set_var("WARDEN_TEST_UPSTREAM_TOKEN", "upstream-secret");
    let mut w = Warden::start(
        "http-upstream-token",
        &upstream(&addr, "bearer_token_env = \"WARDEN_TEST_UPSTREAM_TOKEN\""),
    );
    assert_eq!(
        w.call_text("cf.test_simple_text", json!({})),
        "This is a simple text response for testing."
    );
    let _ = server.kill();
}

#[test]
fn a_host_stacks_layers_over_an_http_mcp_client() {
    use std::sync::Arc;
    use warden_core::provider::{no_warnings, StageLayer, ToolCall, ToolProvider};
    use warden_core::UnknownMode;
    use warden_gateway::client::McpClient;

    let (mut server, addr) = http_server("127.0.0.1:0", Some("host-token"));
    let url = format!("http://{addr}/mcp");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let refused = McpClient::connect_http("cf", &url, Some("wrong".into())).await;
        assert!(refused.is_err(), "a wrong token must not connect");
        let client = Arc::new(
            McpClient::connect_http("cf", &url, Some("host-token".into()))
                .await
                .expect("connect over HTTP"),
        );
        let stack = StageLayer::unknown_keys(
            StageLayer::schema(client.clone()),
            UnknownMode::Reject,
            no_warnings(),
        );
        let tools = stack.tools_for_llm().await.unwrap();
        assert!(tools
            .iter()
            .any(|t| t["name"] == "json_schema_2020_12_tool"));
        let call = |id: &str, name: &str, arguments| ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
        };
        let results = stack
            .execute_tool_calls(vec![
                call("1", "test_simple_text", json!({})),
                call("2", "test_elicitation", json!({"mesage": "hi"})),
                call("3", "json_schema_2020_12_tool", json!({"name": 5})),
            ])
            .await
            .unwrap();
        let ids: Vec<&str> = results.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["1", "2", "3"]);
        assert_eq!(
            results[0].text(),
            "This is a simple text response for testing."
        );
        assert!(results[1].is_error());
        assert!(
            results[1].text().contains("'mesage'"),
            "{}",
            results[1].text()
        );
        assert!(results[2].is_error());
        assert!(results[2].text().contains("name"), "{}", results[2].text());
        client.shutdown().await;
    });
    let _ = server.kill();
}

#[test]
fn an_http_upstream_says_which_call_its_request_is_for() {
    use common::http::{open, request, HttpWarden, POST};
    // Over HTTP the upstream's request arrives on the answer stream of one call, so
    // it goes to that caller even while another caller's call waits on the same server.
    let (mut server, addr) = http_server("127.0.0.1:0", None);
    let w = HttpWarden::start(
        "http-upstream-tied",
        &format!(
            "[gateway]\nanonymous_caller = \"dev\"\n{}",
            upstream(&addr, "")
        ),
        &[],
    );
    // Both clients declare sampling: an upstream's request reaches only a client
    // that said it can answer it.
    let a = w.session_with(&[], json!({"sampling": {}}));
    let b = w.session_with(&[], json!({"sampling": {}}));
    let call = |id: i64, tool: &str, args: serde_json::Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}})
            .to_string()
    };
    let (gw, a2) = (w.addr.clone(), a.clone());
    let sleeper = std::thread::spawn(move || {
        let mut headers = POST.to_vec();
        headers.push(("Mcp-Session-Id", &a2));
        request(
            &gw,
            "POST",
            &headers,
            &call(1, "cf.sleep", json!({"ms": 1500})),
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    let mut headers = POST.to_vec();
    headers.push(("Mcp-Session-Id", &b));
    let mut stream = open(
        &w.addr,
        "POST",
        &headers,
        &call(2, "cf.test_sampling", json!({"prompt": "for b"})),
    );
    let asked = loop {
        let (_, data) = stream
            .next_event()
            .expect("the sampling request on b's stream");
        if data.is_empty() {
            continue;
        }
        let msg: serde_json::Value = serde_json::from_str(&data).unwrap();
        if msg["method"] == "sampling/createMessage" {
            break msg;
        }
    };
    assert_eq!(asked["params"]["messages"][0]["content"]["text"], "for b");
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"role": "assistant",
        "content": {"type": "text", "text": "answer for b"}, "model": "m"}});
    let r = w.post(&[("Mcp-Session-Id", &b)], &answer);
    assert_eq!(r.status, 202);
    let rest = stream.finish();
    let result = rest.messages().pop().expect("b's result");
    assert_eq!(
        result["result"]["content"][0]["text"],
        "LLM response: answer for b"
    );
    let a_reply = sleeper.join().unwrap();
    let messages = a_reply.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0]["result"]["content"][0]["text"], "slept 1500 ms");
    let _ = server.kill();
}

#[test]
fn an_https_upstream_is_trusted_only_through_its_ca() {
    let (mut server, addr) = serve("127.0.0.1:0", None, true);
    let port = addr.rsplit(':').next().unwrap().to_owned();
    let ca = tls_dir().join("ca.pem");
    for host in ["localhost", "127.0.0.1"] {
        let mut w = Warden::start(
            "https-upstream",
            &format!(
                "[[upstream]]\nname = \"cf\"\nurl = \"https://{host}:{port}/mcp\"\ntls_ca_file = \"{}\"\n",
                ca.display()
            ),
        );
        assert_eq!(
            w.call_text("cf.test_simple_text", json!({})),
            "This is a simple text response for testing."
        );
    }
    // Without the private CA the certificate is not trusted: nothing is listed, loudly.
    let mut w = Warden::start(
        "https-untrusted",
        &format!("[[upstream]]\nname = \"cf\"\nurl = \"https://localhost:{port}/mcp\"\n"),
    );
    let r = w.request("tools/list", json!({}));
    assert_eq!(
        r["error"]["message"],
        "Listing failed: upstream 'cf' is not available, so the list would be incomplete. Retry shortly."
    );
    let _ = server.kill();
}

/// An older request after a 2026-07-28 one on the same stdio session, to an HTTP
/// upstream that also keeps an older-revision session: the request goes over
/// that older-revision session (`relay::FromClient::older`, as
/// `Revision::bridges` reckons), and the upstream's sampling request for it
/// reaches the client as a request (`ClientSession::takes_requests_for`), as on
/// a session that never spoke 2026-07-28 (the first test). Before, the
/// connection followed the session's flag: the call went the 2026-07-28 way
/// unbridged and failed with "the upstream asked for input the client cannot be
/// asked for".
#[test]
fn an_older_call_after_a_2026_one_still_reaches_the_client() {
    let (mut server, addr) = http_server("127.0.0.1:0", None);
    let mut w = Warden::start("http-upstream-mixed", &upstream(&addr, ""));
    assert!(w.tool_names().contains(&"cf.test_sampling".to_owned()));
    let params = rev2026::with_envelope(
        json!({"name": "cf.test_simple_text", "arguments": {}}),
        json!({"sampling": {}}),
    );
    let id = w.send_request("tools/call", params);
    let r = w.response(&json!(id));
    assert_eq!(
        r["result"]["content"][0]["text"], "This is a simple text response for testing.",
        "{r}"
    );
    let id = w.send_request(
        "tools/call",
        json!({"name": "cf.test_sampling", "arguments": {"prompt": "say hi"}}),
    );
    let first = w.wait_for("the sampling request or the answer", |m| {
        m["method"] == "sampling/createMessage" || m["id"] == json!(id)
    });
    assert_eq!(first["method"], "sampling/createMessage", "{first}");
    let _ = server.kill();
}
