//! The stateless 2026-07-28 revision through the real binary: server/discover,
//! the per-request envelope, stamped results, removed methods, and an approval
//! asked through an InputRequiredResult whose requestState is sealed; and over
//! the HTTP front, the status, code and id of each error the revision defines.

mod common;

use common::http::HttpWarden;
use common::rev2026::{ask_config, envelope, error_answer, post_2026, with_envelope, V};
use common::*;
use serde_json::{json, Value};

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

    // The state is bound to the arguments: under others it is refused (-32602).
    let refused = json!({"code": -32602, "message": "Invalid params: requestState was not issued by this gateway for this caller and request, or it expired. Send the request again without requestState and inputResponses."});
    let r = w.request(
        "tools/call",
        call(
            json!({"text": "something else"}),
            json!({"inputResponses": yes, "requestState": state}),
        ),
    );
    assert_eq!(r["error"], refused, "{r}");
    // A forged state is refused too.
    let r = w.request(
        "tools/call",
        call(
            json!({"text": "rm -rf"}),
            json!({"inputResponses": yes, "requestState": format!("x{state}")}),
        ),
    );
    assert_eq!(r["error"], refused, "{r}");
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

/// How many log messages a 2026-07-28 client gets for one call of the conformance
/// fixture's logging tool at `level` (none: no opt-in), with the fixture spoken to
/// in `protocol`.
fn logs_for(w: &mut Warden, level: Option<&str>) -> usize {
    let mut params = with_envelope(
        json!({"name": "cf.test_tool_with_logging", "arguments": {}}),
        json!({}),
    );
    if let Some(l) = level {
        params["_meta"]["io.modelcontextprotocol/logLevel"] = json!(l);
    }
    let r = w.request("tools/call", params);
    assert!(r["result"]["content"][0]["text"].is_string(), "{r}");
    let n = w
        .backlog
        .iter()
        .filter(|m| m["method"] == "notifications/message")
        .count();
    w.backlog.clear();
    n
}

fn logging_warden(name: &str, protocol: &str) -> Warden {
    let conformance = env!("CARGO_BIN_EXE_warden-conformance-upstream");
    Warden::spawn(
        name,
        &format!(
            "[[upstream]]\nname = \"cf\"\ncommand = [\"{conformance}\"]\nprotocol = \"{protocol}\"\n"
        ),
    )
}

#[test]
fn log_messages_reach_a_modern_client_only_for_calls_that_opt_in() {
    // The upstream logs whatever it is asked (2025-11-25): the gateway filters.
    let mut w = logging_warden("modern-logs", "2025-11-25");
    assert_eq!(logs_for(&mut w, None), 0, "no opt-in, no log messages");
    assert_eq!(logs_for(&mut w, Some("info")), 3);
    assert_eq!(
        logs_for(&mut w, Some("error")),
        0,
        "all three are info, below error"
    );
    assert_eq!(logs_for(&mut w, Some("debug")), 3);
}

#[test]
fn a_2026_upstream_hears_the_log_level_the_client_asked_for() {
    // The upstream speaks 2026-07-28 and logs only what the envelope asks for:
    // the client's level reaches it.
    let mut w = logging_warden("modern-logs-2026", "2026-07-28");
    assert_eq!(logs_for(&mut w, None), 0, "no opt-in, no log messages");
    assert_eq!(logs_for(&mut w, Some("info")), 3);
    assert_eq!(logs_for(&mut w, Some("error")), 0);
    assert_eq!(logs_for(&mut w, Some("debug")), 3);
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
    // A gateway with its own key does not take the state: it refuses it.
    let r = stranger.request("tools/call", retry);
    assert_eq!(r["error"]["code"], -32602, "{r}");
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

fn http_warden(name: &str) -> HttpWarden {
    HttpWarden::start(
        name,
        &format!(
            "[gateway]\nanonymous_caller = \"dev\"\n{}",
            fixture_config("", "")
        ),
        &[],
    )
}

#[test]
fn envelope_errors_over_http_are_400_invalid_params_with_the_requests_id() {
    let w = http_warden("modern-http-envelope");
    let invalid = |message: &str| json!({"code": -32602, "message": message});
    let no_meta = "Invalid params: a 2026-07-28 request carries _meta with \"io.modelcontextprotocol/protocolVersion\" and \"io.modelcontextprotocol/clientCapabilities\"; this one has no _meta object.";

    // The header says 2026-07-28; the body has no envelope at all.
    let r = post_2026(&w, V, json!(101), "server/discover", Some(json!({})));
    assert_eq!(r.status, 400);
    assert_eq!(r.body, error_answer(json!(101), invalid(no_meta)));
    let r = post_2026(&w, V, json!(7), "tools/list", None);
    assert_eq!(r.status, 400);
    assert_eq!(r.body, error_answer(json!(7), invalid(no_meta)));
    let r = post_2026(&w, V, json!(8), "tools/list", Some(json!({"_meta": "x"})));
    assert_eq!(r.status, 400);
    assert_eq!(r.body, error_answer(json!(8), invalid(no_meta)));

    // An envelope without its version; a string id is echoed as it came.
    let r = post_2026(
        &w,
        V,
        json!("req-102"),
        "server/discover",
        Some(json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}})),
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        error_answer(
            json!("req-102"),
            invalid("Invalid params: _meta is missing \"io.modelcontextprotocol/protocolVersion\"; a 2026-07-28 request names its protocol version.")
        )
    );

    // A version that is not a string.
    let r = post_2026(
        &w,
        V,
        json!(103),
        "tools/list",
        Some(
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": 2026,
                              "io.modelcontextprotocol/clientCapabilities": {}}}),
        ),
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        error_answer(
            json!(103),
            invalid("Invalid params: _meta[\"io.modelcontextprotocol/protocolVersion\"] must be a string.")
        )
    );

    // The client's capabilities missing, or not an object.
    let r = post_2026(
        &w,
        V,
        json!(104),
        "server/discover",
        Some(json!({"_meta": {"io.modelcontextprotocol/protocolVersion": V}})),
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        error_answer(
            json!(104),
            invalid("Invalid params: _meta is missing \"io.modelcontextprotocol/clientCapabilities\"; a 2026-07-28 request carries the client's capabilities.")
        )
    );
    let r = post_2026(
        &w,
        V,
        json!(105),
        "server/discover",
        Some(
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": V,
                              "io.modelcontextprotocol/clientCapabilities": ["sampling"]}}),
        ),
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        error_answer(
            json!(105),
            invalid("Invalid params: _meta[\"io.modelcontextprotocol/clientCapabilities\"] must be an object.")
        )
    );

    // clientInfo is optional: served.
    let r = post_2026(
        &w,
        V,
        json!(106),
        "server/discover",
        Some(
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": V,
                              "io.modelcontextprotocol/clientCapabilities": {}}}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["id"], 106);
    assert_eq!(r.json()["result"]["supportedVersions"], json!([V]));
}

#[test]
fn an_unsupported_version_over_http_is_400_with_the_requests_id() {
    let w = http_warden("modern-http-version");
    let r = post_2026(
        &w,
        "v999.0.0",
        json!(301),
        "server/discover",
        Some(
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "v999.0.0",
                              "io.modelcontextprotocol/clientCapabilities": {}}}),
        ),
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        error_answer(
            json!(301),
            json!({"code": -32022,
                   "message": "Unsupported protocol version 'v999.0.0'; this gateway speaks 2026-07-28 (or the initialize handshake for 2025-11-25 and earlier).",
                   "data": {"supported": [V], "requested": "v999.0.0"}})
        )
    );
    // A header that disagrees with the body's version is a mismatch first.
    let r = post_2026(
        &w,
        V,
        json!(302),
        "server/discover",
        Some(
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "v999.0.0",
                              "io.modelcontextprotocol/clientCapabilities": {}}}),
        ),
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        error_answer(
            json!(302),
            json!({"code": -32020,
                   "message": "Bad request: the MCP-Protocol-Version header does not match the request body."})
        )
    );
}

#[test]
fn removed_and_unknown_methods_over_http_are_404_method_not_found() {
    let w = http_warden("modern-http-404");
    let meta = json!({"_meta": envelope(json!({}))});
    // The revision's removed methods are refused by the gateway itself; a method
    // no one serves is relayed and refused by the upstream (the fixture's own
    // text): both are 404.
    for (n, (method, message)) in [
        ("initialize", "Method not found: initialize"),
        ("ping", "Method not found: ping"),
        ("logging/setLevel", "Method not found: logging/setLevel"),
        (
            "resources/subscribe",
            "Method not found: resources/subscribe",
        ),
        (
            "resources/unsubscribe",
            "Method not found: resources/unsubscribe",
        ),
        ("unknown/method", "Method not found"),
    ]
    .into_iter()
    .enumerate()
    {
        let id = json!(500 + n);
        let r = post_2026(&w, V, id.clone(), method, Some(meta.clone()));
        assert_eq!(r.status, 404, "{method}: {}", r.body);
        assert_eq!(
            r.body,
            error_answer(id, json!({"code": -32601, "message": message})),
            "{method}"
        );
        assert_eq!(r.header("mcp-session-id"), None);
    }
    // What the gateway serves is still 200.
    let r = post_2026(&w, V, json!(600), "tools/list", Some(meta));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["result"]["resultType"], "complete");
}

#[test]
fn clients_of_the_handshake_revisions_get_what_they_got_before() {
    let w = http_warden("modern-http-legacy");
    // An unknown method in a 2025-11-25 session: a JSON-RPC error on a 200.
    let sid = w.session(&[]);
    let r = w.post(
        &[
            ("Mcp-Session-Id", &sid),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        &json!({"jsonrpc": "2.0", "id": 3, "method": "unknown/method", "params": {}}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body,
        error_answer(
            json!(3),
            json!({"code": -32601, "message": "Method not found"})
        )
    );
    // A request without a session and without the 2026-07-28 header: asked for its session.
    let r = w.post(
        &[],
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}}),
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body,
        error_answer(
            Value::Null,
            json!({"code": -32600, "message": "Bad request: send the Mcp-Session-Id header the initialize response returned."})
        )
    );
    // initialize without an envelope is the handshake, whatever the header says.
    let r = post_2026(
        &w,
        V,
        json!(0),
        "initialize",
        Some(json!({"protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("mcp-session-id").is_some());
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25");
}
