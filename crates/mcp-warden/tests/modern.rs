//! The stateless 2026-07-28 revision through the real binary: server/discover,
//! the per-request envelope, stamped results, removed methods, and an approval
//! asked through an InputRequiredResult whose requestState is sealed.

mod common;

use common::*;
use serde_json::{json, Value};

const V: &str = "2026-07-28";

fn envelope(caps: Value) -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": V,
           "io.modelcontextprotocol/clientCapabilities": caps,
           "io.modelcontextprotocol/clientInfo": {"name": "modern-test", "version": "1"}})
}

fn with_envelope(mut params: Value, caps: Value) -> Value {
    let meta = params
        .as_object_mut()
        .unwrap()
        .entry("_meta")
        .or_insert(json!({}));
    for (k, v) in envelope(caps).as_object().unwrap() {
        meta[k] = v.clone();
    }
    params
}

#[test]
fn discover_then_list_and_call_without_initialize() {
    let mut w = Warden::spawn("modern-basic", &fixture_config("", ""));
    let r = w.request("server/discover", with_envelope(json!({}), json!({})));
    let result = &r["result"];
    assert_eq!(result["supportedVersions"], json!([V]));
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["cacheScope"], "public");
    assert!(result["capabilities"]["tools"].is_object(), "{r}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-warden"
    );

    let r = w.request("tools/list", with_envelope(json!({}), json!({})));
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["ttlMs"], 30000);
    assert_eq!(r["result"]["cacheScope"], "private");
    assert!(r["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "fx.echo"));

    // Other _meta keys ride along with the envelope.
    let r = w.request(
        "tools/call",
        with_envelope(
            json!({"name": "fx.echo", "arguments": {"text": "hi"}, "_meta": {"trace": "t-1"}}),
            json!({}),
        ),
    );
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(r["result"]["structuredContent"], json!({"text": "hi"}));

    // Removed methods, and versions the gateway does not speak.
    let r = w.request("ping", with_envelope(json!({}), json!({})));
    assert_eq!(
        r["error"],
        json!({"code": -32601, "message": "Method not found: ping"})
    );
    let r = w.request(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
                         "io.modelcontextprotocol/clientCapabilities": {}}}),
    );
    assert_eq!(
        r["error"],
        json!({"code": -32022, "message": "Unsupported protocol version '2099-01-01'; this gateway speaks 2026-07-28 (or the initialize handshake for 2025-11-25 and earlier).",
               "data": {"supported": [V], "requested": "2099-01-01"}})
    );
    let r = w.request(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": V}}),
    );
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(
        r["error"]["message"],
        "Invalid params: _meta is missing \"io.modelcontextprotocol/clientCapabilities\"; a 2026-07-28 request carries the client's capabilities."
    );
}

fn ask_config() -> String {
    fixture_config(
        "",
        "[[rule]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\neffect = \"ask\"\n",
    )
}

#[test]
fn an_approval_is_asked_with_an_input_required_result_and_a_sealed_state() {
    let mut w = Warden::spawn("modern-ask", &ask_config());
    let caps = json!({"elicitation": {}});
    let call = |args: Value, extra: Value| {
        let mut p = json!({"name": "fx.echo", "arguments": args});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        with_envelope(p, caps.clone())
    };
    let r = w.request("tools/call", call(json!({"text": "rm -rf"}), json!({})));
    let first = &r["result"];
    assert_eq!(first["resultType"], "input_required", "{r}");
    let question = &first["inputRequests"]["warden/approval"];
    assert_eq!(question["method"], "elicitation/create");
    assert_eq!(question["params"]["mode"], "form");
    assert_eq!(
        question["params"]["requestedSchema"]["properties"]["approve"]["type"],
        "boolean"
    );
    let state = first["requestState"].as_str().unwrap().to_owned();
    let yes = json!({"warden/approval": {"action": "accept", "content": {"approve": true}}});

    // The state is bound to the arguments: changing them asks again.
    let r = w.request(
        "tools/call",
        call(
            json!({"text": "something else"}),
            json!({"inputResponses": yes, "requestState": state}),
        ),
    );
    assert_eq!(r["result"]["resultType"], "input_required");
    // A forged state asks again too.
    let r = w.request(
        "tools/call",
        call(
            json!({"text": "rm -rf"}),
            json!({"inputResponses": yes, "requestState": format!("x{state}")}),
        ),
    );
    assert_eq!(r["result"]["resultType"], "input_required");
    // Declined.
    let no = json!({"warden/approval": {"action": "decline"}});
    let r = w.request(
        "tools/call",
        call(
            json!({"text": "rm -rf"}),
            json!({"inputResponses": no, "requestState": state}),
        ),
    );
    assert_eq!(r["result"]["isError"], true);
    assert_eq!(
        r["result"]["content"][0]["text"],
        "Error: This call needs approval, and approval was refused."
    );
    // Approved: the call runs, and the upstream never sees the envelope or the answers.
    let r = w.request(
        "tools/call",
        call(
            json!({"text": "rm -rf"}),
            json!({"inputResponses": yes, "requestState": state}),
        ),
    );
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(r["result"]["structuredContent"], json!({"text": "rm -rf"}));

    // A client that cannot elicit is told so.
    let r = w.request(
        "tools/call",
        with_envelope(
            json!({"name": "fx.echo", "arguments": {"text": "x"}}),
            json!({}),
        ),
    );
    assert_eq!(
        r["result"]["content"][0]["text"],
        "Error: This call needs approval, and the client cannot ask for it. Ask for the tool to be allowed instead."
    );
}

#[test]
fn an_upstreams_sampling_request_becomes_an_input_request_and_the_call_resumes() {
    let mut w = Warden::spawn("modern-sample", &fixture_config("", ""));
    let caps = json!({"sampling": {}});
    let call = |extra: Value| {
        let mut p = json!({"name": "fx.sample", "arguments": {"prompt": "say hi"}});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        with_envelope(p, caps.clone())
    };
    let r = w.request("tools/call", call(json!({})));
    let first = &r["result"];
    assert_eq!(first["resultType"], "input_required", "{r}");
    let asked = &first["inputRequests"]["warden/upstream"];
    assert_eq!(asked["method"], "sampling/createMessage");
    assert_eq!(asked["params"]["messages"][0]["content"]["text"], "say hi");
    assert!(asked.get("id").is_none());
    let state = first["requestState"].clone();
    assert!(
        w.backlog
            .iter()
            .all(|m| m["method"] != "sampling/createMessage"),
        "no request reaches a 2026-07-28 client: {:?}",
        w.backlog
    );

    // The retry carries the answer; the upstream's call, still running, finishes with it.
    let answer = json!({"warden/upstream": {"role": "assistant",
        "content": {"type": "text", "text": "hi!"}, "model": "m"}});
    let r = w.request(
        "tools/call",
        call(json!({"inputResponses": answer, "requestState": state})),
    );
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(r["result"]["content"][0]["text"], "model said: hi!");

    // The round is spent: the same state again is refused, it does not run twice.
    let r = w.request(
        "tools/call",
        call(json!({"inputResponses": answer, "requestState": state})),
    );
    assert_eq!(
        r["result"]["content"][0]["text"],
        "Error: This call waited too long for its input and was ended. Call the tool again."
    );
}

#[test]
fn a_client_without_the_capability_is_not_asked() {
    let mut w = Warden::spawn("modern-nocap", &fixture_config("", ""));
    let r = w.request(
        "tools/call",
        with_envelope(
            json!({"name": "fx.sample", "arguments": {"prompt": "hi"}}),
            json!({"elicitation": {}}),
        ),
    );
    // No sampling capability on this request: the upstream is told at once and finishes.
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    assert_eq!(r["result"]["content"][0]["text"], "model said: <no answer>");
}

#[test]
fn log_messages_reach_a_modern_client_only_for_calls_that_opt_in() {
    let conformance = env!("CARGO_BIN_EXE_warden-conformance-upstream");
    let mut w = Warden::spawn(
        "modern-logs",
        &format!("[[upstream]]\nname = \"cf\"\ncommand = [\"{conformance}\"]\n"),
    );
    let mut logs_for = |level: Option<&str>| -> usize {
        let mut params = with_envelope(
            json!({"name": "cf.test_tool_with_logging", "arguments": {}}),
            json!({}),
        );
        if let Some(l) = level {
            params["_meta"]["io.modelcontextprotocol/logLevel"] = json!(l);
        }
        let r = w.request("tools/call", params);
        assert_eq!(r["result"]["content"][0]["text"], "Logged three messages.");
        let n = w
            .backlog
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .count();
        w.backlog.clear();
        n
    };
    assert_eq!(logs_for(None), 0, "no opt-in, no log messages");
    assert_eq!(logs_for(Some("info")), 3);
    assert_eq!(
        logs_for(Some("error")),
        0,
        "all three are info, below error"
    );
    assert_eq!(logs_for(Some("debug")), 3);
}

#[test]
fn replicas_sharing_a_state_secret_accept_each_others_approvals() {
    std::env::set_var(
        "WARDEN_TEST_STATE_SECRET",
        "a shared secret of enough length",
    );
    let shared = format!(
        "[gateway]\nstate_secret_env = \"WARDEN_TEST_STATE_SECRET\"\n{}",
        ask_config()
    );
    let mut first = Warden::spawn("modern-replica-a", &shared);
    let mut second = Warden::spawn("modern-replica-b", &shared);
    let mut stranger = Warden::spawn("modern-replica-c", &ask_config());
    let caps = json!({"elicitation": {}});
    let call = |extra: Value| {
        let mut p = json!({"name": "fx.echo", "arguments": {"text": "deploy"}});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        with_envelope(p, caps.clone())
    };
    let r = first.request("tools/call", call(json!({})));
    let state = r["result"]["requestState"].clone();
    let yes = json!({"warden/approval": {"action": "accept", "content": {"approve": true}}});
    let retry = call(json!({"inputResponses": yes, "requestState": state}));
    let r = second.request("tools/call", retry.clone());
    assert_eq!(
        r["result"]["structuredContent"],
        json!({"text": "deploy"}),
        "{r}"
    );
    // A gateway with its own key does not take the state: it asks again.
    let r = stranger.request("tools/call", retry);
    assert_eq!(r["result"]["resultType"], "input_required");
}

#[test]
fn a_missing_state_secret_stops_the_gateway_with_a_clear_error() {
    let dir = scratch("modern-no-secret");
    let path = write_config(
        &dir,
        &format!(
            "[gateway]\nstate_secret_env = \"WARDEN_TEST_UNSET_SECRET\"\n{}",
            fixture_config("", "")
        ),
    );
    let (code, _, err) = cli(&["tools", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("gateway.state_secret_env: the environment variable 'WARDEN_TEST_UNSET_SECRET' must hold a secret of at least 16 characters"),
        "{err}"
    );
}
