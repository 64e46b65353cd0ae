//! T6 for the 2026-07-28 revision: a `tools/call` refused for the state or
//! envelope it brought (stdio), or at the HTTP front's edge, is answered with the
//! same bytes as before and leaves one audit record.

mod common;

use common::http::HttpWarden;
use common::rev2026::{ask_config, envelope, error_answer, post_2026, with_envelope, V};
use common::*;
use serde_json::{json, Value};

/// The one record of `records` whose `error` is `why`.
fn refused_with<'a>(records: &'a [Value], why: &str) -> &'a Value {
    let found: Vec<&Value> = records.iter().filter(|r| r["error"] == why).collect();
    assert_eq!(found.len(), 1, "{why}: {records:?}");
    found[0]
}

/// T6 over stdio: a retry whose requestState was not sealed for it, one whose
/// parked call is gone, and a call whose envelope is faulty are answered as
/// before, byte for byte, and each leaves one audit record (denied, refused)
/// naming the caller, the tool, its arguments and why.
#[test]
fn calls_refused_for_their_2026_state_or_envelope_are_audited() {
    let audit = "[audit]\njsonl = \"{dir}/audit.jsonl\"\n";
    let mut w = Warden::spawn("modern-edge-audit", &format!("{}{audit}", ask_config()));
    let caps = json!({"elicitation": {}, "sampling": {}});
    let call = |tool: &str, args: Value, extra: Value| {
        let mut p = json!({"name": tool, "arguments": args});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        with_envelope(p, caps.clone())
    };
    let r = w.request(
        "tools/call",
        call("fx.echo", json!({"text": "a"}), json!({})),
    );
    let state = r["result"]["requestState"].clone();
    assert!(state.is_string(), "{r}");
    let yes = json!({"warden/approval": {"action": "accept", "content": {"approve": true}}});

    // A state sealed for other arguments.
    let retry = json!({"inputResponses": yes, "requestState": state});
    let id = w.send_request("tools/call", call("fx.echo", json!({"text": "b"}), retry));
    let (line, _) = w.response_line(&json!(id));
    assert_eq!(
        line,
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-32602,\"message\":\"Invalid params: requestState was not issued by this gateway for this caller and request, or it expired. Send the request again without requestState and inputResponses.\"}}}}")
    );

    // A parked call's round spent: its state again finds the call gone.
    let r = w.request(
        "tools/call",
        call("fx.sample", json!({"prompt": "hi"}), json!({})),
    );
    let state = r["result"]["requestState"].clone();
    let answer = json!({"warden/upstream": {"role": "assistant",
        "content": {"type": "text", "text": "hi!"}, "model": "m"}});
    let retry = json!({"inputResponses": answer, "requestState": state});
    let r = w.request(
        "tools/call",
        call("fx.sample", json!({"prompt": "hi"}), retry.clone()),
    );
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    let id = w.send_request(
        "tools/call",
        call("fx.sample", json!({"prompt": "hi"}), retry),
    );
    let (line, _) = w.response_line(&json!(id));
    assert_eq!(
        line,
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"Error: This call waited too long for its input and was ended. Call the tool again.\"}}],\"isError\":true,\"resultType\":\"complete\"}}}}")
    );

    // An envelope naming a version the gateway does not speak.
    let mut params = call("fx.echo", json!({"text": "c"}), json!({}));
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let id = w.send_request("tools/call", params);
    let (line, _) = w.response_line(&json!(id));
    let unsupported = "Unsupported protocol version 'v999.0.0'; this gateway speaks 2026-07-28 (or the initialize handshake for 2025-11-25 and earlier).";
    assert_eq!(
        line,
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-32022,\"message\":\"{unsupported}\",\"data\":{{\"supported\":[\"{V}\"],\"requested\":\"v999.0.0\"}}}}}}")
    );

    let records = audit_records(&w.dir);
    let expected = [
        (
            "the requestState was not sealed by this gateway for this call",
            "fx.echo",
            json!({"text": "b"}),
        ),
        (
            "the parked call this requestState names is gone",
            "fx.sample",
            json!({"prompt": "hi"}),
        ),
        (unsupported, "fx.echo", json!({"text": "c"})),
    ];
    for (why, tool, arguments) in expected {
        let record = refused_with(&records, why);
        assert_eq!(record["session"], "stdio", "{why}");
        assert_eq!(record["caller"], "local", "{why}");
        assert_eq!(record["tool"], tool, "{why}");
        assert_eq!(record["arguments"], arguments, "{why}");
        assert_eq!(record["decision"], "denied", "{why}");
        assert_eq!(record["outcome"], "refused", "{why}");
    }
}

/// T6 over HTTP: a 2026-07-28 `tools/call` the front refuses at its edge (a
/// header that disagrees with the body, a version it does not speak) gets the
/// same bytes as before and leaves one audit record naming its tool; a
/// request that is no call leaves none.
#[test]
fn calls_refused_at_the_2026_edge_over_http_are_audited() {
    let conformance = env!("CARGO_BIN_EXE_warden-conformance-upstream");
    let w = HttpWarden::start(
        "modern-http-edge-audit",
        &format!(
            "[gateway]\nanonymous_caller = \"dev\"\n[audit]\njsonl = \"{{dir}}/audit.jsonl\"\n{}\n[[upstream]]\nname = \"cf\"\ncommand = [\"{conformance}\"]\n",
            fixture_config("", "")
        ),
        &[],
    );
    let params = with_envelope(
        json!({"name": "fx.echo", "arguments": {"text": "x"}}),
        json!({}),
    );
    let msg = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": params});
    let headers = [
        ("MCP-Protocol-Version", V),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "fx.other"),
    ];
    let r = w.post(&headers, &msg);
    assert_eq!(r.status, 400);
    let mismatch = "Bad request: the Mcp-Name header does not match the request body.";
    assert_eq!(
        r.body,
        error_answer(json!(41), json!({"code": -32020, "message": mismatch}))
    );

    let mut params = with_envelope(
        json!({"name": "fx.echo", "arguments": {"text": "y"}}),
        json!({}),
    );
    params["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let msg = json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": params});
    let headers = [
        ("MCP-Protocol-Version", "v999.0.0"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "fx.echo"),
    ];
    let r = w.post(&headers, &msg);
    assert_eq!(r.status, 400);
    let unsupported = "Unsupported protocol version 'v999.0.0'; this gateway speaks 2026-07-28 (or the initialize handshake for 2025-11-25 and earlier).";
    assert_eq!(
        r.body,
        error_answer(
            json!(42),
            json!({"code": -32022, "message": unsupported,
                   "data": {"supported": [V], "requested": "v999.0.0"}})
        )
    );
    // An argument its schema puts in a header (x-mcp-header), sent otherwise
    // there (once the upstreams are connected, so the front knows the schema).
    let listed = post_2026(
        &w,
        V,
        json!(40),
        "tools/list",
        Some(json!({"_meta": envelope(json!({}))})),
    );
    assert_eq!(listed.status, 200, "{}", listed.body);
    let tool = "cf.test_header_param";
    let params = with_envelope(
        json!({"name": tool, "arguments": {"region": "eu"}}),
        json!({}),
    );
    let msg = json!({"jsonrpc": "2.0", "id": 44, "method": "tools/call", "params": params});
    let headers = [
        ("MCP-Protocol-Version", V),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", tool),
        ("Mcp-Param-Region", "us"),
    ];
    let r = w.post(&headers, &msg);
    assert_eq!(r.status, 400);
    let param = "Bad request: the Mcp-Param-Region header does not match the request body.";
    assert_eq!(
        r.body,
        error_answer(json!(44), json!({"code": -32020, "message": param}))
    );
    // Not a call: refused as before, and not audited.
    let r = post_2026(&w, V, json!(43), "tools/list", None);
    assert_eq!(r.status, 400);

    let records = audit_records(&w.dir);
    assert_eq!(records.len(), 3, "{records:?}");
    let refused = [
        (mismatch, "fx.echo", json!({"text": "x"})),
        (unsupported, "fx.echo", json!({"text": "y"})),
        (param, tool, json!({"region": "eu"})),
    ];
    for (why, tool, arguments) in refused {
        let record = refused_with(&records, why);
        assert_eq!(record["session"], "http:stateless");
        assert_eq!(record["caller"], "dev");
        assert_eq!(record["tool"], tool);
        assert_eq!(record["arguments"], arguments);
        assert_eq!(record["decision"], "denied");
        assert_eq!(record["outcome"], "refused");
    }
}
