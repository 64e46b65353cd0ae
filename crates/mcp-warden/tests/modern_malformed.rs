//! Malformed 2026-07-28 requests over HTTP, outside any session: each is
//! answered at once, 400 with a JSON-RPC -32600, as inside a session; never with
//! a stream that only keeps alive.

mod common;

use common::http::{anonymous, HttpWarden, Reply, POST};
use serde_json::{json, Value};

const V: &str = "2026-07-28";

fn envelope() -> Value {
    json!({"_meta": {"io.modelcontextprotocol/protocolVersion": V,
                     "io.modelcontextprotocol/clientCapabilities": {}}})
}

/// POSTs `msg` as a 2026-07-28 client does: version and method in headers, no session.
///
/// The status must be `expected` as soon as the head comes: the test fails then,
/// not after a stream that only keeps alive.
fn post_2026(w: &HttpWarden, msg: &Value, expected: u16) -> Reply {
    let method = msg["method"].as_str().unwrap_or("tools/list");
    let mut headers = POST.to_vec();
    headers.extend([("MCP-Protocol-Version", V), ("Mcp-Method", method)]);
    let opened = common::http::open(&w.addr, "POST", &headers, &msg.to_string());
    assert_eq!(opened.status, expected, "{msg}");
    opened.finish()
}

fn invalid(id: Value, why: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32600, "message": format!("Invalid request: {why}.")}})
        .to_string()
}

const NO_VERSION: &str = "the message must carry \"jsonrpc\": \"2.0\"";
const BAD_ID: &str = "a request id must be a string or a number";

#[test]
fn malformed_requests_outside_a_session_are_answered_400_at_once() {
    let w = HttpWarden::start("modern-malformed", &anonymous(""), &[]);
    let with = |fields: Value, params: Option<Value>| {
        let mut msg = json!({"method": "tools/list"});
        for (k, v) in fields.as_object().unwrap() {
            msg[k] = v.clone();
        }
        if let Some(p) = params {
            msg["params"] = p;
        }
        msg
    };
    let cases = [
        // With the envelope: the request says it is 2026-07-28 in its body too.
        (
            with(json!({"jsonrpc": "1.0", "id": 5}), Some(envelope())),
            json!(5),
            NO_VERSION,
        ),
        (
            with(json!({"id": "a"}), Some(envelope())),
            json!("a"),
            NO_VERSION,
        ),
        (
            with(json!({"jsonrpc": "2.0", "id": null}), Some(envelope())),
            Value::Null,
            BAD_ID,
        ),
        (
            with(json!({"jsonrpc": "2.0", "id": {"n": 1}}), Some(envelope())),
            Value::Null,
            BAD_ID,
        ),
        (
            with(json!({"jsonrpc": "2.0", "id": [1]}), Some(envelope())),
            Value::Null,
            BAD_ID,
        ),
        (
            with(json!({"jsonrpc": "2.0", "id": true}), Some(envelope())),
            Value::Null,
            BAD_ID,
        ),
        // Only the headers say so.
        (
            with(json!({"jsonrpc": "2.0", "id": false}), None),
            Value::Null,
            BAD_ID,
        ),
        (
            with(json!({"jsonrpc": "1.0", "id": 6}), None),
            json!(6),
            NO_VERSION,
        ),
        (with(json!({}), None), Value::Null, NO_VERSION),
    ];
    for (msg, id, why) in cases {
        let r = post_2026(&w, &msg, 400);
        assert_eq!(r.header("content-type"), Some("application/json"), "{msg}");
        assert_eq!(r.body, invalid(id, why), "{msg}");
    }

    // Inside a session the same message gets the same answer.
    let sid = w.session(&[]);
    let msg = with(json!({"jsonrpc": "2.0", "id": true}), None);
    let mut headers = POST.to_vec();
    headers.push(("Mcp-Session-Id", &sid));
    let r = common::http::request(&w.addr, "POST", &headers, &msg.to_string());
    assert_eq!(r.status, 400);
    assert_eq!(r.body, invalid(Value::Null, BAD_ID));

    // A well-formed one is still served.
    let msg = with(json!({"jsonrpc": "2.0", "id": 9}), Some(envelope()));
    let r = post_2026(&w, &msg, 200);
    assert_eq!(r.json()["id"], 9);
}
