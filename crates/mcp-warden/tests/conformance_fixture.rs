//! The conformance fixture (warden-conformance-upstream) over stdio, where the
//! conformance suite cannot reach it (it tests HTTP only) but the gateway runs it as
//! a child: a 2026-07-28 client and a 2025-11-25 client on the same process, each
//! answered in its own revision.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

const CONFORMANCE: &str = env!("CARGO_BIN_EXE_warden-conformance-upstream");

struct Fixture {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Fixture {
    fn start() -> Fixture {
        let mut child = Command::new(CONFORMANCE)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the conformance fixture starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Fixture {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, msg: Value) {
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn recv(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(15))
            .expect("the fixture answers within 15 s");
        serde_json::from_str(&line).unwrap()
    }

    /// Sends a request and returns its answer.
    fn ask(&mut self, msg: Value) -> Value {
        self.send(msg);
        self.recv()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn envelope(capabilities: Value) -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities})
}

fn call(id: u64, name: &str, extra: Value) -> Value {
    let mut params =
        json!({"_meta": envelope(json!({"elicitation": {}})), "name": name, "arguments": {}});
    for (k, v) in extra.as_object().unwrap() {
        params[k] = v.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

#[test]
fn the_fixture_speaks_2026_07_28_over_stdio_beside_2025_11_25() {
    let mut f = Fixture::start();
    assert_eq!(
        f.ask(
            json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
            "params": {"_meta": envelope(json!({}))}})
        ),
        json!({"jsonrpc": "2.0", "id": 1, "result": {"supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {"listChanged": true}, "resources": {"listChanged": true},
                "prompts": {"listChanged": true}, "logging": {}, "completions": {}},
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "warden-conformance-upstream", "version": "0.1.0"}},
            "resultType": "complete", "ttlMs": 300000, "cacheScope": "public"}})
    );
    // Envelope errors and removed methods, with the request's id.
    assert_eq!(
        f.ask(json!({"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {}})),
        json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message":
            "The request has no _meta envelope: it needs io.modelcontextprotocol/protocolVersion and io.modelcontextprotocol/clientCapabilities."}})
    );
    assert_eq!(
        f.ask(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list",
            "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
                "io.modelcontextprotocol/clientCapabilities": {}}}})),
        json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32022,
            "message": "This server does not speak protocol version 2099-01-01.",
            "data": {"supported": ["2026-07-28"], "requested": "2099-01-01"}}})
    );
    assert_eq!(
        f.ask(json!({"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"_meta": envelope(json!({}))}})),
        json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -32601, "message": "Method not found: ping"}})
    );

    // An input-required round trip whose state is sealed: changed, it is refused.
    let first = f.ask(call(
        5,
        "test_input_required_result_tampered_state",
        json!({}),
    ));
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    assert_eq!(first["result"]["resultType"], "input_required");
    assert_eq!(
        first["result"]["inputRequests"],
        json!({"confirm": {"method": "elicitation/create", "params": {"message": "Please confirm",
            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}}})
    );
    let answers = json!({"confirm": {"action": "accept", "content": {"ok": true}}});
    assert_eq!(
        f.ask(call(
            6,
            "test_input_required_result_tampered_state",
            json!({"inputResponses": answers, "requestState": format!("{state}x")})
        )),
        json!({"jsonrpc": "2.0", "id": 6, "error": {"code": -32602, "message":
            "requestState failed its integrity check: it was changed, belongs to another request or expired."}})
    );
    assert_eq!(
        f.ask(call(
            7,
            "test_input_required_result_tampered_state",
            json!({"inputResponses": answers, "requestState": state})
        )),
        json!({"jsonrpc": "2.0", "id": 7, "result": {"resultType": "complete", "content": [{"type": "text",
            "text": "integrity-ok: the request state is the one this server sealed."}]}})
    );
    // A capability the client did not declare on the request.
    assert_eq!(
        f.ask(call(8, "test_missing_capability", json!({}))),
        json!({"jsonrpc": "2.0", "id": 8, "error": {"code": -32021,
            "message": "This request needs the client capabilities [\"sampling\"], which it did not declare.",
            "data": {"requiredCapabilities": {"sampling": {}}}}})
    );

    // A subscription gets the changes it asked for until it is cancelled.
    f.send(json!({"jsonrpc": "2.0", "id": "listen", "method": "subscriptions/listen",
        "params": {"_meta": envelope(json!({})), "notifications": {"toolsListChanged": true, "resourceSubscriptions": ["test://static-text"]}}}));
    assert_eq!(
        f.recv(),
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "listen"},
                "notifications": {"toolsListChanged": true}}})
    );
    f.send(call(9, "test_trigger_prompt_change", json!({})));
    f.send(call(10, "test_trigger_tool_change", json!({})));
    let said = |id: u64, kind: &str| {
        json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text",
        "text": format!("Notified the {kind} list change.")}], "resultType": "complete"}})
    };
    assert_eq!(f.recv(), said(9, "prompt"));
    assert_eq!(
        f.recv(),
        json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
            "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "listen"}}})
    );
    assert_eq!(f.recv(), said(10, "tool"));
    f.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "listen"}}));
    assert_eq!(
        f.ask(call(11, "test_trigger_tool_change", json!({}))),
        said(11, "tool")
    );

    // A 2025-11-25 client on the same process gets what it always got.
    assert_eq!(
        f.ask(json!({"jsonrpc": "2.0", "id": 12, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
            "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})),
        json!({"jsonrpc": "2.0", "id": 12, "result": {"protocolVersion": "2025-11-25",
            "capabilities": {"tools": {"listChanged": true}, "resources": {"subscribe": true, "listChanged": true},
                "prompts": {"listChanged": true}, "logging": {}, "completions": {}},
            "serverInfo": {"name": "warden-conformance-upstream", "version": "0.1.0"}}})
    );
    let tools = f.ask(json!({"jsonrpc": "2.0", "id": 13, "method": "tools/list"}));
    assert!(tools["result"].get("resultType").is_none());
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"test_elicitation"));
    assert!(!names.iter().any(|n| n.starts_with("test_input_required")));
    assert_eq!(
        f.ask(json!({"jsonrpc": "2.0", "id": 14, "method": "resources/read", "params": {"uri": "test://nowhere"}})),
        json!({"jsonrpc": "2.0", "id": 14, "error": {"code": -32002, "message": "Resource not found"}})
    );
}
