//! The gateway as users meet it: the real binary over stdio, real upstream children.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[test]
fn demo_config_rejects_aliases_and_pins() {
    let mut w = Warden::start("demo", DEMO);
    assert_eq!(
        w.call_text(
            "notes.create_note",
            json!({"title": "Plan", "body": "Ship it"})
        ),
        "Created note 1 'Plan' (private)."
    );
    assert_eq!(
        w.call_text("notes.create_note", json!({"title": "Investigate the", "nvestigate": "…", "the rest": "…"})),
        "Error: Unknown parameters for tool 'notes.create_note':\n  'nvestigate'\n  'the rest'\nAllowed parameters: title, text."
    );
    assert_eq!(
        w.call_text("notes.create_note", json!({"title": "t", "txt": "x"})),
        "Error: Unknown parameter 'txt' for tool 'notes.create_note'.\nDid you mean: text?\nAllowed parameters: title, text."
    );
    assert_eq!(
        w.call_text("notes.create_note", json!({"title": "Leak", "text": "x", "is_public": true})),
        "Error: Argument 'is_public' of tool 'notes.create_note' is fixed by configuration and cannot be set by the caller."
    );
    assert_eq!(
        w.call_text("notes.publish_note", json!({"id": "one"})),
        "Error: Invalid value for argument 'id': expected integer at least 1."
    );
    assert_eq!(
        w.call_text("notes.create_note", json!({})),
        "Error: Missing required argument 'title'.\nError: Missing required argument 'text'."
    );
    let r = w.call("notes.create_note", json!({"title": "x", "txt": "y"}));
    assert_eq!(r["result"]["isError"], json!(true));
    // Nothing refused reached the server: only the first note exists, and it is private.
    assert_eq!(
        w.call_text("notes.list_notes", json!({})),
        "1. Plan [private] Ship it"
    );

    let list = w.request("tools/list", json!({}));
    let create = &list["result"]["tools"][0];
    assert_eq!(create["name"], "notes.create_note");
    assert_eq!(
        create["inputSchema"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["title", "text"]
    );
}

#[test]
fn unknown_tool_and_malformed_calls_are_answered_exactly() {
    let mut w = Warden::start("unknown", DEMO);
    let mut exchange = |params: Value| {
        let raw = serde_json::to_string(
            &json!({"jsonrpc": "2.0", "id": "x", "method": "tools/call", "params": params}),
        )
        .unwrap();
        w.send_raw(format!("{raw}\n").as_bytes());
        w.response_line(&json!("x")).0
    };
    assert_eq!(
        exchange(json!({"name": "notes.nope", "arguments": [1, 2]})),
        r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"Unknown tool 'notes.nope'."}}"#
    );
    assert_eq!(
        exchange(json!({"arguments": {}})),
        r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"Tool name is required."}}"#
    );
    assert_eq!(
        exchange(json!({"name": "notes.list_notes", "arguments": "x"})),
        r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"Invalid arguments for tool 'notes.list_notes': arguments must be a JSON object."}}"#
    );
    // A name with control characters is echoed escaped, never raw.
    assert_eq!(
        exchange(json!({"name": "a\nb"})),
        r#"{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"Unknown tool 'a\\u{a}b'."}}"#
    );
}

#[test]
fn warn_mode_forwards_arguments_byte_for_byte() {
    let mut w = Warden::start("warn", &fixture_config("", ""));
    let raw = r#"{"jsonrpc":"2.0","id":"w1","method":"tools/call","params":{"name":"fx.echo","arguments":{"zeta":1.0,"text":"a","big":123456789012345678901234567890,"n":1e-7,"extra":{"b":1,"a":[true,null]}}}}"#;
    w.send_raw(format!("{raw}\n").as_bytes());
    let (_, r) = w.response_line(&json!("w1"));
    let echoed = r
        .pointer("/result/content/0/text")
        .and_then(Value::as_str)
        .unwrap();
    assert_eq!(
        echoed,
        r#"{"zeta":1.0,"text":"a","big":123456789012345678901234567890,"n":1e-7,"extra":{"b":1,"a":[true,null]}}"#
    );
}

#[test]
fn strip_mode_removes_undeclared_keys() {
    let mut w = Warden::start(
        "strip",
        &fixture_config("unknown_arguments = \"strip\"", ""),
    );
    assert_eq!(
        w.call_text("fx.echo", json!({"text": "a", "junk": 1, "n": 2})),
        r#"{"text":"a","n":2}"#
    );
}

#[test]
fn upstream_results_errors_and_capabilities_pass_through() {
    // The operator opted in to passing upstream error data (see the next test for
    // what clients get by default).
    let mut w = Warden::spawn(
        "passthrough",
        &fixture_config("", "[gateway]\nupstream_error_data = \"pass\""),
    );
    let init = w.request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}));
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(
        init["result"]["capabilities"]["x-fixture"],
        json!({"custom": [1, 2.0]})
    );
    assert_eq!(init["result"]["capabilities"]["logging"], json!({}));
    w.notify("notifications/initialized", None);
    // An upstream tool error and an upstream JSON-RPC error pass unchanged (E3).
    let fail = w.call("fx.fail", json!({}));
    assert_eq!(
        fail["result"],
        json!({"content": [{"type": "text", "text": "boom"}], "isError": true})
    );
    let id = w.send_request(
        "tools/call",
        json!({"name": "fx.rpc_error", "arguments": {}}),
    );
    let (line, _) = w.response_line(&json!(id));
    assert_eq!(
        line,
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32000,"message":"upstream says no","data":{{"why":[1,2]}}}}}}"#
        )
    );
    // A method the gateway does not govern goes to the (only) upstream.
    let unknown = w.request("custom/method", json!({}));
    assert_eq!(unknown["error"]["code"], -32601);
    assert_eq!(w.request("ping", json!({}))["result"], json!({}));
    // Upstream garbage on stdout is skipped; the answer still arrives.
    assert_eq!(w.call_text("fx.garbage", json!({})), "after garbage");
    assert!(w.close().success());
}

#[test]
fn an_upstream_error_reaches_the_client_bounded_and_without_its_data() {
    // E3: code and message, the message bounded and escaped; data (a path, a token)
    // only to the log and the audit trail.
    let mut w = Warden::start(
        "error-data",
        &fixture_config("", "[store]\nurl = \"sqlite://warden.db\""),
    );
    let id = w.send_request(
        "tools/call",
        json!({"name": "fx.rpc_error", "arguments": {}}),
    );
    let (line, _) = w.response_line(&json!(id));
    assert_eq!(
        line,
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32000,"message":"upstream says no"}}}}"#
        )
    );
    let config = w.dir.join("warden.toml");
    let (code, out, err) = cli(&["audit", "--config", config.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let record: Value = serde_json::from_str(out.lines().next().expect("a record")).unwrap();
    assert_eq!(record["outcome"], "upstream_error");
    assert_eq!(
        record["error"],
        r#"{"code":-32000,"message":"upstream says no","data":{"why":[1,2]}}"#
    );
}

#[test]
fn progress_is_relayed_in_order_before_the_answer() {
    let mut w = Warden::start("progress", &fixture_config("", ""));
    let id = w.send_request("tools/call", json!({"name": "fx.progress", "arguments": {"steps": 20}, "_meta": {"progressToken": "tok-1"}}));
    let mut seen = Vec::new();
    loop {
        let m = w.recv();
        if m.get("id") == Some(&json!(id)) {
            assert_eq!(m["result"]["content"][0]["text"], "20 steps done");
            break;
        }
        assert_eq!(m["method"], "notifications/progress");
        assert_eq!(
            m["params"]["progressToken"], "tok-1",
            "the client's own token comes back"
        );
        seen.push(m["params"]["progress"].as_u64().unwrap());
    }
    assert_eq!(seen, (1..=20).collect::<Vec<_>>());
    // A numeric token keeps its type.
    let id = w.send_request(
        "tools/call",
        json!({"name": "fx.progress", "arguments": {"steps": 1}, "_meta": {"progressToken": 7}}),
    );
    let p = w.wait_for("progress", |m| m["method"] == "notifications/progress");
    assert_eq!(p["params"]["progressToken"], json!(7));
    w.response(&json!(id));
}

#[test]
fn cancellation_reaches_the_upstream_and_no_answer_follows() {
    let mut w = Warden::start("cancel", &fixture_config("", ""));
    let id = w.send_request(
        "tools/call",
        json!({"name": "fx.slow", "arguments": {"ms": 3000}}),
    );
    std::thread::sleep(Duration::from_millis(100));
    w.notify(
        "notifications/cancelled",
        Some(json!({"requestId": id, "reason": "user hit stop"})),
    );
    // Other requests go on being served; the cancelled one gets no answer.
    assert_eq!(
        w.call_text("fx.echo", json!({"text": "still here"})),
        r#"{"text":"still here"}"#
    );
    w.expect_silence(Duration::from_millis(3500));
    assert!(w.backlog.iter().all(|m| m.get("id") != Some(&json!(id))));
}

#[test]
fn a_timeout_answers_e2_and_cancels_upstream() {
    let mut w = Warden::start("timeout", &fixture_config("timeout_ms = 300", ""));
    let t = Instant::now();
    assert_eq!(
        w.call_text("fx.slow", json!({"ms": 5000})),
        "Error: An internal error occurred while executing the tool."
    );
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "answered after {:?}",
        t.elapsed()
    );
    // The upstream stopped working on it, so it never answers late; the next call works.
    assert_eq!(w.call_text("fx.echo", json!({"n": 1})), r#"{"n":1}"#);
}

#[test]
fn sampling_round_trip_through_the_gateway() {
    let mut w = Warden::start("sampling", &fixture_config("", ""));
    let id = w.send_request(
        "tools/call",
        json!({"name": "fx.sample", "arguments": {"prompt": "say hi"}}),
    );
    let req = w.wait_for("sampling request", |m| {
        m["method"] == "sampling/createMessage"
    });
    assert_eq!(req["params"]["messages"][0]["content"]["text"], "say hi");
    let rid = req["id"].clone();
    w.send(&json!({"jsonrpc": "2.0", "id": rid, "result": {"role": "assistant", "content": {"type": "text", "text": "hi!"}, "model": "m"}}));
    let r = w.response(&json!(id));
    assert_eq!(r["result"]["content"][0]["text"], "model said: hi!");
}

#[test]
fn an_upstream_request_the_client_cannot_take_is_refused_at_once() {
    // The client declares no sampling: the upstream's sampling request is answered
    // with an error by the gateway at once (the fixture would wait 30 s for an answer
    // that never comes, beyond this harness's patience), and never reaches the client.
    let mut w = Warden::spawn("sampling-undeclared", &fixture_config("", ""));
    let init = w.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"roots": {}},
               "clientInfo": {"name": "no-sampling", "version": "1"}}),
    );
    assert!(init.get("result").is_some(), "{init}");
    w.notify("notifications/initialized", None);
    let r = w.call("fx.sample", json!({"prompt": "say hi"}));
    assert_eq!(
        r["result"]["content"][0]["text"], "model said: <no answer>",
        "{r}"
    );
    assert!(
        w.backlog
            .iter()
            .all(|m| m["method"] != "sampling/createMessage"),
        "the client was sent a request it did not declare it can take: {:?}",
        w.backlog
    );
}

#[test]
fn list_changed_refreshes_the_catalogue() {
    let mut w = Warden::start("listchanged", &fixture_config("", ""));
    let names = |w: &mut Warden| w.tool_names();
    assert!(!names(&mut w).contains(&"fx.late_tool".to_owned()));
    assert_eq!(w.call_text("fx.add_tool", json!({})), "added");
    w.wait_for("list_changed", |m| {
        m["method"] == "notifications/tools/list_changed"
    });
    assert!(names(&mut w).contains(&"fx.late_tool".to_owned()));
    assert_eq!(w.call_text("fx.late_tool", json!({"x": "y"})), "late");
}

#[test]
fn paginated_listings_are_followed() {
    let mut w = Warden::start(
        "pages",
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{fixture}\"]\nenv = { FIXTURE_PAGE = \"2\", FIXTURE_EXTRA_TOOLS = \"5\" }\n",
    );
    let l = w.request("tools/list", json!({}));
    assert_eq!(l["result"]["tools"].as_array().unwrap().len(), 14);
}

#[test]
fn an_upstream_that_cannot_list_fails_the_listing_loudly() {
    let mut w = Warden::start(
        "faillist",
        "[[upstream]]\nname = \"good\"\ncommand = [\"{fixture}\"]\n[[upstream]]\nname = \"bad\"\ncommand = [\"{fixture}\"]\nenv = { FIXTURE_FAIL_LIST = \"1\" }\n",
    );
    let id = w.send_request("tools/list", json!({}));
    let (line, _) = w.response_line(&json!(id));
    assert_eq!(
        line,
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32603,"message":"Listing failed: upstream 'bad' is not available, so the list would be incomplete. Retry shortly."}}}}"#
        )
    );
    // Tools of the healthy upstream can still be called.
    assert_eq!(w.call_text("good.echo", json!({"n": 1})), r#"{"n":1}"#);
}

#[test]
fn several_upstreams_are_prefixed_and_routed() {
    let mut w = Warden::start(
        "multi",
        "[[upstream]]\nname = \"a\"\ncommand = [\"{fixture}\"]\n[[upstream]]\nname = \"b\"\ncommand = [\"{notes}\"]\n",
    );
    let l = w.request("tools/list", json!({}));
    let names: Vec<&str> = l["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"a.echo") && names.contains(&"b.create_note"),
        "{names:?}"
    );
    assert!(names.iter().all(|n| n.len() <= 64
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))));
    assert_eq!(w.call_text("a.echo", json!({"n": 2})), r#"{"n":2}"#);
    assert_eq!(w.call_text("b.list_notes", json!({})), "No notes yet.");
}

#[test]
fn bad_input_gets_clear_errors_and_the_gateway_keeps_serving() {
    let mut w = Warden::start(
        "badinput",
        &fixture_config("", "[gateway]\nmax_message_bytes = 65536\n"),
    );
    w.send_raw(b"{not json\n");
    assert_eq!(w.recv()["error"]["code"], -32700);
    w.send_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]\n");
    let batch = w.recv();
    assert_eq!(batch["error"]["code"], -32600);
    assert_eq!(
        batch["error"]["message"],
        "Invalid request: JSON-RPC batches are not supported by MCP; send one message per line."
    );
    w.send_raw(
        b"{\"jsonrpc\":\"2.0\",\"id\":\"u\",\"method\":\"ping\",\"params\":{\"s\":\"\xff\xfe\"}}\n",
    );
    assert_eq!(w.recv()["error"]["code"], -32700);
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    w.send_raw(
        format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":\"d\",\"method\":\"tools/call\",\"params\":{deep}}}\n"
        )
        .as_bytes(),
    );
    assert_eq!(w.recv()["error"]["code"], -32700);
    let huge = format!("{{\"jsonrpc\":\"2.0\",\"id\":\"h\",\"method\":\"tools/call\",\"params\":{{\"name\":\"fx.echo\",\"arguments\":{{\"text\":\"{}\"}}}}}}\n", "x".repeat(50 * 1024 * 1024));
    w.send_raw(huge.as_bytes());
    let too_big = w.recv();
    assert_eq!(too_big["error"]["code"], -32600);
    assert_eq!(
        too_big["error"]["message"],
        format!("Request too large: {} bytes; the gateway accepts at most 65536 (gateway.max_message_bytes).", huge.len() - 1)
    );
    w.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":999,\"result\":{}}\n"); // a response to nothing
    w.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}\n");
    assert_eq!(w.recv()["error"]["code"], -32600);
    w.send_raw(b"\n   \n");
    assert_eq!(
        w.call_text("fx.echo", json!({"text": "alive"})),
        r#"{"text":"alive"}"#
    );
    assert!(w.close().success());
}

#[test]
fn end_of_input_finishes_calls_in_flight_then_exits() {
    let mut w = Warden::start("eof", &fixture_config("", ""));
    let id = w.send_request(
        "tools/call",
        json!({"name": "fx.slow", "arguments": {"ms": 300}}),
    );
    w.close_stdin();
    let r = w.response(&json!(id));
    assert_eq!(r["result"]["content"][0]["text"], "slept 300 ms");
    assert!(w.close().success());
}

#[test]
fn requests_reach_the_upstream_in_arrival_order() {
    let dir = scratch("order-count");
    let count = dir.join("count.txt");
    let toml = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\nenv = {{ FIXTURE_COUNT_FILE = \"{}\" }}\n",
        count.display()
    );
    let mut w = Warden::start("order", &toml);
    let tools = ["echo", "fail", "garbage", "echo", "fail"];
    let ids: Vec<i64> = tools
        .iter()
        .map(|t| w.send_request("tools/call", json!({"name": format!("fx.{t}")})))
        .collect();
    for id in ids {
        w.response(&json!(id));
    }
    let seen = std::fs::read_to_string(&count).unwrap();
    assert_eq!(seen.lines().collect::<Vec<_>>(), tools);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn resources_and_prompts_are_merged_and_routed_across_upstreams() {
    let mut w = Warden::start(
        "resources",
        "[[upstream]]\nname = \"a\"\ncommand = [\"{fixture}\"]\nenv = { FIXTURE_RESOURCES = \"alpha\" }\n\
         [[upstream]]\nname = \"b\"\ncommand = [\"{fixture}\"]\nenv = { FIXTURE_RESOURCES = \"beta\" }\n",
    );
    let list = w.request("resources/list", json!({}));
    assert_eq!(
        list["result"],
        json!({"resources": [
            {"uri": "fx://alpha/r1", "name": "r1", "x-extra": {"kept": true}},
            {"uri": "fx://beta/r1", "name": "r1", "x-extra": {"kept": true}}]})
    );
    let read = w.request("resources/read", json!({"uri": "fx://beta/r1"}));
    assert_eq!(read["result"]["contents"][0]["text"], "from beta");
    let read = w.request("resources/read", json!({"uri": "fx://alpha/r1"}));
    assert_eq!(read["result"]["contents"][0]["text"], "from alpha");
    let prompts = w.request("prompts/list", json!({}));
    assert_eq!(
        prompts["result"],
        json!({"prompts": [{"name": "alpha_prompt"}, {"name": "beta_prompt"}]})
    );
    let got = w.request("prompts/get", json!({"name": "beta_prompt"}));
    assert_eq!(
        got["result"]["messages"][0]["content"]["text"],
        "prompt of beta"
    );
    // Capabilities the upstreams declared are offered; methods of none are refused.
    let unknown = w.request("custom/method", json!({}));
    assert_eq!(unknown["error"]["code"], -32601);
}

#[test]
fn sigterm_ends_the_gateway_and_its_children() {
    let mut w = Warden::start("sigterm", &fixture_config("", ""));
    assert_eq!(w.call_text("fx.echo", json!({"n": 1})), r#"{"n":1}"#);
    let status = std::process::Command::new("kill")
        .args(["-TERM", &w.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(w.wait_exit().success());
}

#[test]
fn caller_strings_cannot_forge_log_lines() {
    // A key that, written raw, would end the warning's line, start a fake ERROR
    // line of its own and colour the terminal.
    let forged = "x\n2026-01-01T00:00:00Z ERROR fake\u{1b}[31m";
    let mut w = Warden::start_capturing_stderr("logsafe", &fixture_config("", ""), "debug");
    // Warn mode: the undeclared key is forwarded as it came, and logged.
    let r = w.call("fx.echo", json!({"text": "a", forged: 1}));
    assert_eq!(r["result"]["structuredContent"][forged], json!(1));
    // The same text as a tool name and as a method name.
    let r = w.call(forged, json!({}));
    assert_eq!(r["error"]["code"], -32602);
    let r = w.request(forged, json!({}));
    assert!(r.get("error").is_some(), "{r}");
    let log = w.stderr_after_exit();
    assert!(!log.contains('\u{1b}'), "an ESC reached the log:\n{log:?}");
    let escaped = r"x\u{a}2026-01-01T00:00:00Z ERROR fake\u{1b}[31m";
    assert!(
        log.lines()
            .any(|l| l.contains("does not declare") && l.contains(escaped)),
        "the warn-mode warning names the key, escaped:\n{log}"
    );
    for line in log.lines().filter(|l| l.contains("ERROR fake")) {
        assert!(
            line.contains(r"\u{a}2026-01-01T00:00:00Z ERROR fake"),
            "a forged line reached the log: {line}"
        );
    }
}

#[test]
fn a_tools_call_result_that_is_no_object_fails_like_the_upstream_failed() {
    let toml = "[[upstream]]\nname = \"fx\"\ncommand = [\"{fixture}\"]\n\
                env = { FIXTURE_MALFORMED = \"1\", FIXTURE_COUNT_FILE = \"{dir}/count.txt\" }\n\
                [store]\nurl = \"sqlite://{dir}/warden.db\"\n\
                [audit]\njsonl = \"{dir}/audit.jsonl\"\n";
    let mut w = Warden::start("malformed", toml);
    for (result, key) in [(json!(null), "m-null"), (json!("a string"), "m-string")] {
        // Twice with one idempotency key: a call recorded as failed runs again
        // (one recorded as completed would be replayed without running).
        for _ in 0..2 {
            let id = w.send_request(
                "tools/call",
                json!({"name": "fx.malformed", "arguments": {"result": result},
                       "_meta": {"warden/idempotencyKey": key}}),
            );
            let (line, _) = w.response_line(&json!(id));
            assert_eq!(
                line,
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"Error: An internal error occurred while executing the tool."}}],"isError":true}}}}"#
                )
            );
        }
    }
    let runs = std::fs::read_to_string(w.dir.join("count.txt")).unwrap();
    assert_eq!(runs.lines().collect::<Vec<_>>(), ["malformed"; 4]);
    // The audit record is written before the answer goes out.
    let audit = std::fs::read_to_string(w.dir.join("audit.jsonl")).unwrap();
    let records: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 4, "{audit}");
    for r in &records {
        assert_eq!(r["tool"], "fx.malformed");
        assert_eq!(r["decision"], "allowed");
        assert_eq!(r["outcome"], "failed");
    }
    // A well-formed result still passes through.
    assert_eq!(w.call_text("fx.echo", json!({"n": 1})), r#"{"n":1}"#);
}

/// A `tools/call` request with the id `id`.
fn call_with_id(id: &str, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": args}})
}

#[test]
fn a_request_whose_id_is_still_running_is_refused_unrun() {
    let dir = scratch("dupid-count");
    let count = dir.join("count.txt");
    let toml = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\nenv = {{ FIXTURE_COUNT_FILE = \"{}\" }}\n",
        count.display()
    );
    let mut w = Warden::start("dupid", &toml);
    w.send(&call_with_id("dup", "fx.slow", json!({"ms": 800})));
    w.send(&call_with_id("dup", "fx.echo", json!({"n": 2})));
    // The same id as a number is another id.
    w.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
    assert_eq!(w.response(&json!(1))["result"], json!({}));
    let answers = [
        w.response_line(&json!("dup")),
        w.response_line(&json!("dup")),
    ];
    let refusal = r#"{"jsonrpc":"2.0","id":"dup","error":{"code":-32600,"message":"Invalid request: a request with this id is still running in this session."}}"#;
    let refused: Vec<_> = answers.iter().filter(|(line, _)| line == refusal).collect();
    assert_eq!(refused.len(), 1, "{answers:?}");
    let ran: Vec<_> = answers.iter().filter(|(line, _)| line != refusal).collect();
    assert_eq!(ran.len(), 1, "{answers:?}");
    assert_eq!(ran[0].1["result"]["content"][0]["text"], "slept 800 ms");
    // Nothing more for that id, and only the first request reached the upstream.
    w.expect_silence(Duration::from_millis(300));
    assert!(w.backlog.iter().all(|m| m.get("id") != Some(&json!("dup"))));
    let runs = std::fs::read_to_string(&count).unwrap();
    assert_eq!(runs.lines().collect::<Vec<_>>(), ["slow"]);
    // Answered, the id is free again.
    w.send(&call_with_id("dup", "fx.echo", json!({"n": 3})));
    assert_eq!(
        w.response(&json!("dup"))["result"]["content"][0]["text"],
        r#"{"n":3}"#
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_cancelled_request_frees_its_id_without_an_answer() {
    let mut w = Warden::start("cancelid", &fixture_config("", ""));
    w.send(&call_with_id("c", "fx.slow", json!({"ms": 5000})));
    std::thread::sleep(Duration::from_millis(100));
    w.notify(
        "notifications/cancelled",
        Some(json!({"requestId": "c", "reason": "changed my mind"})),
    );
    // The cancelled call ends with no answer; its id is taken until it has ended.
    let deadline = Instant::now() + PATIENCE;
    loop {
        w.send(&call_with_id("c", "fx.echo", json!({"n": 4})));
        let r = w.response(&json!("c"));
        if r["error"]["code"] == -32600 {
            assert!(Instant::now() < deadline, "the id stayed taken");
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        assert_eq!(r["result"]["content"][0]["text"], r#"{"n":4}"#);
        break;
    }
}
