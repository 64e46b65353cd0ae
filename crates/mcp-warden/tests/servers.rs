//! Virtual servers and tool search (V1-V7) through the real binary: a server's
//! listing (renamed, described), calls under a new name, search that never
//! reveals a hidden tool (G2), bad input, and `run --server` over stdio.

mod common;

use common::http::{call, request_path, HttpWarden, POST};
use common::*;
use serde_json::{json, Value};

/// A server of two tools, one renamed, one described, with its own instructions.
const TINY: &str = "[[server]]\nname = \"tiny\"\ntools = [\"fx.echo\", \"fx.fail\"]\n\
    rename = { \"fx.echo\" = \"repeat\" }\ndescribe = { \"fx.fail\" = \"Always fails.\" }\n\
    instructions = \"Two tools only.\"\n";

/// Every tool of the fixture, found by search.
const FIND: &str = "[[server]]\nname = \"find\"\ntools = [\"fx.*\"]\ndiscovery = \"search\"\n";

/// The fixture's tools `FIXTURE_RUG_PULL=1` adds, hidden from the caller.
const HIDE_RUG: &str = "[[rule]]\ncallers = [\"*\"]\n\
    tools = [\"fx.lookup\", \"fx.stamp\", \"fx.old_name\", \"fx.rug_pull\", \"fx.rug_back\"]\neffect = \"deny\"\n";

fn config(upstream_extra: &str, rest: &str) -> String {
    format!(
        "[gateway]\nanonymous_caller = \"dev\"\n[audit]\njsonl = \"{{dir}}/audit.jsonl\"\n{}",
        fixture_config(upstream_extra, rest)
    )
}

fn post_at(w: &HttpWarden, path: &str, sid: Option<&str>, msg: &Value) -> common::http::Reply {
    let mut headers = POST.to_vec();
    if let Some(s) = sid {
        headers.push(("Mcp-Session-Id", s));
    }
    request_path(&w.addr, "POST", path, &headers, &msg.to_string())
}

/// Opens a session at `path`; returns its id and the initialize result.
fn session_at(w: &HttpWarden, path: &str) -> (String, Value) {
    let r = post_at(
        w,
        path,
        None,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
    );
    assert_eq!(r.status, 200, "initialize: {}", r.body);
    let sid = r.header("mcp-session-id").expect("a session id").to_owned();
    let init = r.messages().remove(0);
    let n = post_at(
        w,
        path,
        Some(&sid),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(n.status, 202);
    (sid, init["result"].clone())
}

/// The response to one request, as its text on the wire.
fn answer(w: &HttpWarden, path: &str, sid: &str, msg: &Value) -> String {
    let r = post_at(w, path, Some(sid), msg);
    assert_eq!(r.status, 200, "{}", r.body);
    let found = r
        .messages()
        .into_iter()
        .find(|m| m.get("id").is_some())
        .expect("a response");
    found.to_string()
}

fn names(list: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(list).unwrap();
    v["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn list() -> Value {
    json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"})
}

fn search(id: i64, args: Value) -> Value {
    call(id, "search_tools", args)
}

/// The text of a tool result, and whether it is an error (a JSON-RPC error's
/// message, and true).
fn text_of(response: &str) -> (String, bool) {
    let v: Value = serde_json::from_str(response).unwrap();
    if let Some(m) = v.pointer("/error/message").and_then(Value::as_str) {
        return (m.to_owned(), true);
    }
    let r = &v["result"];
    (
        r["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        r["isError"] == true,
    )
}

#[test]
fn a_virtual_server_lists_renames_and_describes_its_tools() {
    let w = HttpWarden::start("servers-list", &config("", TINY), &[]);
    let (sid, init) = session_at(&w, "/mcp/tiny");
    assert_eq!(init["instructions"], "Two tools only.");
    let listed = answer(&w, "/mcp/tiny", &sid, &list());
    assert_eq!(names(&listed), ["repeat", "fx.fail"]);
    let v: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(v["result"]["tools"][1]["description"], "Always fails.");
    assert_eq!(
        v["result"]["tools"][0]["description"],
        "Echo the arguments back."
    );
    // The renamed tool runs the real one.
    let (said, err) = text_of(&answer(
        &w,
        "/mcp/tiny",
        &sid,
        &call(6, "repeat", json!({"x": 1})),
    ));
    assert!(!err && said.contains("\"x\":1"), "{said}");
    // Its catalogue name, and a tool the server does not show, are absent (G2).
    let (said, err) = text_of(&answer(
        &w,
        "/mcp/tiny",
        &sid,
        &call(7, "fx.echo", json!({})),
    ));
    assert_eq!((said.as_str(), err), ("Unknown tool 'fx.echo'.", true));
    let (said, _) = text_of(&answer(
        &w,
        "/mcp/tiny",
        &sid,
        &call(8, "fx.slow", json!({"ms": 1})),
    ));
    assert_eq!(said, "Unknown tool 'fx.slow'.");
    // The audit names the real tool, with the server beside it.
    let audit = std::fs::read_to_string(w.dir.join("audit.jsonl")).unwrap();
    let first: Value = serde_json::from_str(audit.lines().next().unwrap()).unwrap();
    assert_eq!(
        (first["tool"].as_str(), first["server"].as_str()),
        (Some("fx.echo"), Some("tiny"))
    );
    // The plain endpoint is the whole catalogue, and has no `server` in its records.
    let (whole, _) = session_at(&w, "/mcp");
    assert!(names(&answer(&w, "/mcp", &whole, &list())).contains(&"fx.slow".to_owned()));
    answer(&w, "/mcp", &whole, &call(9, "fx.echo", json!({})));
    let audit = std::fs::read_to_string(w.dir.join("audit.jsonl")).unwrap();
    let last: Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert!(last.get("server").is_none(), "{last}");
    // A session is served at its own path only; an unknown server is no endpoint.
    let r = post_at(&w, "/mcp", Some(&sid), &list());
    assert_eq!(
        (r.status, r.json()["error"]["message"].as_str()),
        (
            404,
            Some("Session not found: it ended or expired. Start a new one with initialize.")
        )
    );
    let r = post_at(&w, "/mcp/nope", None, &list());
    assert_eq!(
        (r.status, r.json()["error"]["message"].as_str()),
        (404, Some("Not found: the MCP endpoint is /mcp."))
    );
}

#[test]
fn a_hidden_renamed_tool_answers_as_an_absent_one_byte_for_byte() {
    let deny = "[[rule]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\neffect = \"deny\"\n";
    let hidden = HttpWarden::start("servers-hidden", &config("", &format!("{deny}{TINY}")), &[]);
    let absent_cfg = TINY.replace("\"fx.echo\", ", "");
    let absent = HttpWarden::start("servers-absent", &config("", &absent_cfg), &[]);
    let (a, _) = session_at(&hidden, "/mcp/tiny");
    let (b, _) = session_at(&absent, "/mcp/tiny");
    assert_eq!(
        names(&answer(&hidden, "/mcp/tiny", &a, &list())),
        ["fx.fail"]
    );
    for msg in [
        list(),
        call(3, "repeat", json!({"x": 1})),
        call(4, "fx.echo", json!({})),
    ] {
        let (x, y) = (
            answer(&hidden, "/mcp/tiny", &a, &msg),
            answer(&absent, "/mcp/tiny", &b, &msg),
        );
        assert_eq!(x, y);
    }
    let (said, _) = text_of(&answer(
        &hidden,
        "/mcp/tiny",
        &a,
        &call(3, "repeat", json!({})),
    ));
    assert_eq!(said, "Unknown tool 'repeat'.");
}

#[test]
fn search_never_reveals_a_hidden_tool() {
    let rug = "env = { FIXTURE_RUG_PULL = \"1\" }";
    let hidden = HttpWarden::start(
        "servers-search-hidden",
        &config(rug, &format!("{HIDE_RUG}{FIND}")),
        &[],
    );
    let absent = HttpWarden::start("servers-search-absent", &config("", FIND), &[]);
    let (a, _) = session_at(&hidden, "/mcp/find");
    let (b, _) = session_at(&absent, "/mcp/find");
    assert_eq!(
        names(&answer(&hidden, "/mcp/find", &a, &list())),
        ["search_tools", "call_tool"]
    );
    // "add error" and "a answer" rank the visible tools in another order when the
    // hidden tools' words count in the document frequencies: they must not.
    let queries = [
        "add error",
        "a answer",
        "change the tools above",
        "look a word up",
        "count words",
        "echo the arguments back",
        "answer error",
        "stamp",
    ];
    for (i, q) in queries.iter().enumerate() {
        let msg = search(10 + i as i64, json!({"query": q, "limit": 20}));
        let x = answer(&hidden, "/mcp/find", &a, &msg);
        assert_eq!(x, answer(&absent, "/mcp/find", &b, &msg), "query {q:?}");
        // The same query gives the same bytes again (prompt caches stay warm).
        assert_eq!(x, answer(&hidden, "/mcp/find", &a, &msg));
    }
    for name in ["fx.rug_pull", "fx.lookup", "fx.nothing"] {
        let msg = call(30, "call_tool", json!({"name": name, "arguments": {}}));
        let x = answer(&hidden, "/mcp/find", &a, &msg);
        assert_eq!(x, answer(&absent, "/mcp/find", &b, &msg));
        let expected = format!(
            "No tool '{name}' is available here; call search_tools to find the tools you can call."
        );
        assert_eq!(text_of(&x), (expected, true));
    }
    // What search finds is called through call_tool, under the real tool's rules.
    let found = answer(
        &hidden,
        "/mcp/find",
        &a,
        &search(40, json!({"query": "echo the arguments back", "limit": 1})),
    );
    let v: Value = serde_json::from_str(&found).unwrap();
    let tools = &v["result"]["structuredContent"]["tools"];
    assert_eq!(tools.as_array().unwrap().len(), 1);
    assert_eq!(tools[0]["name"], "fx.echo");
    assert_eq!(tools[0]["description"], "Echo the arguments back.");
    assert!(tools[0]["inputSchema"].is_object());
    assert_eq!(
        v["result"]["content"][0]["text"].as_str().unwrap(),
        v["result"]["structuredContent"].to_string()
    );
    let ran = answer(
        &hidden,
        "/mcp/find",
        &a,
        &call(
            41,
            "call_tool",
            json!({"name": "fx.echo", "arguments": {"y": 2}}),
        ),
    );
    let (said, err) = text_of(&ran);
    assert!(!err && said.contains("\"y\":2"), "{said}");
}

#[test]
fn bad_search_input_gets_tool_errors_a_model_can_act_on() {
    let w = HttpWarden::start("servers-search-bad", &config("", FIND), &[]);
    let (s, _) = session_at(&w, "/mcp/find");
    let ask = |args: Value| text_of(&answer(&w, "/mcp/find", &s, &search(2, args)));
    let no_query = "search_tools needs a query: say in a few words what the tool should do, as a string in 'query'.";
    assert_eq!(ask(json!({})), (no_query.to_owned(), true));
    assert_eq!(ask(json!({"query": "   "})), (no_query.to_owned(), true));
    let long = "Use at most".repeat(50);
    assert_eq!(
        ask(json!({"query": long})),
        (
            "The query is too long: use at most 500 characters, a few words about the task."
                .to_owned(),
            true
        )
    );
    let bad_limit = "'limit' must be a whole number from 1 to 20; leave it out for 5.";
    for limit in [json!(0), json!(21), json!("5"), json!(2.5)] {
        assert_eq!(
            ask(json!({"query": "echo", "limit": limit})),
            (bad_limit.to_owned(), true)
        );
    }
    let run = |args: Value| text_of(&answer(&w, "/mcp/find", &s, &call(3, "call_tool", args)));
    assert_eq!(
        run(json!({})),
        (
            "call_tool needs the name of a tool that search_tools returned, as a string in 'name'."
                .to_owned(),
            true
        )
    );
    assert_eq!(
        run(json!({"name": "fx.echo", "arguments": [1]})),
        (
            "call_tool's 'arguments' must be an object holding the tool's own arguments."
                .to_owned(),
            true
        )
    );
    // Wrong arguments for the tool get the pipeline's own answer, as a direct call would.
    let (whole, _) = session_at(&w, "/mcp");
    let direct = text_of(&answer(
        &w,
        "/mcp",
        &whole,
        &call(4, "fx.slow", json!({"ms": "soon"})),
    ));
    assert!(direct.1, "{direct:?}");
    assert_eq!(
        run(json!({"name": "fx.slow", "arguments": {"ms": "soon"}})),
        direct
    );
    // A tool that search mode does not list is absent, whatever the catalogue holds.
    let (said, _) = text_of(&answer(&w, "/mcp/find", &s, &call(5, "fx.echo", json!({}))));
    assert_eq!(said, "Unknown tool 'fx.echo'.");
}

#[test]
fn run_server_serves_a_virtual_server_over_stdio() {
    let mut w = Warden::start_with_args(
        "servers-stdio",
        &config("", TINY),
        "warn",
        &["--server", "tiny"],
    );
    assert_eq!(w.tool_names(), ["repeat", "fx.fail"]);
    let said = w.call_text("repeat", json!({"z": 3}));
    assert!(said.contains("\"z\":3"), "{said}");
    let (code, _, err) = cli(&[
        "run",
        "--server",
        "nope",
        "--config",
        w.dir.join("warden.toml").to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("--server nope: no [[server]] is named 'nope' in the config"),
        "{err}"
    );
}

#[test]
fn check_refuses_two_renames_to_one_name() {
    let dir = scratch("servers-check");
    let bad = "[[server]]\nname = \"r\"\ntools = [\"fx.*\"]\nrename = { \"fx.echo\" = \"same\", \"fx.fail\" = \"same\" }\n";
    let path = write_config(&dir, &config("", bad));
    let (code, out, err) = cli(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains("server[0].rename.\"fx.echo\"")
            || all.contains("server[0].rename.\"fx.fail\""),
        "{all}"
    );
    assert!(
        all.contains("are both renamed to 'same': each tool needs its own name"),
        "{all}"
    );
}

#[test]
fn check_warns_of_a_server_whose_globs_match_nothing_in_the_pins_lock() {
    let dir = scratch("servers-check-lock");
    let servers = "[[server]]\nname = \"ghost\"\ntools = [\"fx.nope*\"]\n\
        [[server]]\nname = \"tiny\"\ntools = [\"fx.echo\"]\n";
    let path = write_config(&dir, &fixture_config("", servers));
    let p = path.to_str().unwrap();
    // Without a lock nothing is known of the tools, and nothing is said.
    let (code, out, _) = cli(&["check", "--config", p]);
    assert_eq!(code, 0);
    assert!(!out.contains("ghost"), "{out}");
    assert_eq!(cli(&["pins", "lock", "--config", p]).0, 0);
    let (code, out, err) = cli(&["check", "--config", p]);
    assert_eq!(code, 0, "{err}");
    let lock = warden_gateway::pins::lock_path(&path);
    let expected = format!(
        "warning: server 'ghost': its tools (fx.nope*) match no tool in the pins lock ({}); it would serve no tool",
        lock.display()
    );
    assert!(out.lines().any(|l| l == expected), "{out}");
    assert!(!out.contains("server 'tiny'"), "{out}");
}

#[test]
fn a_reload_adds_and_changes_virtual_servers() {
    let w = HttpWarden::start("servers-reload", &config("", TINY), &[]);
    let (sid, _) = session_at(&w, "/mcp/tiny");
    assert_eq!(post_at(&w, "/mcp/more", None, &list()).status, 404);
    let changed = TINY.replace("\"repeat\"", "\"say_again\"");
    let more = "[[server]]\nname = \"more\"\ntools = [\"fx.slow\"]\n";
    let text =
        config("", &format!("{changed}{more}")).replace("{dir}", &w.dir.display().to_string());
    let text = text.replace("{fixture}", FIXTURE);
    std::fs::write(w.dir.join("warden.toml"), text).unwrap();
    w.hangup();
    // The reload is in force once the new server is served.
    let started = std::time::Instant::now();
    while post_at(&w, "/mcp/more", None, &list()).status == 404 {
        assert!(
            started.elapsed() < PATIENCE,
            "the reload did not add the server"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A session already open on a changed server sees it changed.
    assert_eq!(
        names(&answer(&w, "/mcp/tiny", &sid, &list())),
        ["say_again", "fx.fail"]
    );
    let (said, _) = text_of(&answer(
        &w,
        "/mcp/tiny",
        &sid,
        &call(2, "repeat", json!({})),
    ));
    assert_eq!(said, "Unknown tool 'repeat'.");
    let (m, _) = session_at(&w, "/mcp/more");
    assert_eq!(names(&answer(&w, "/mcp/more", &m, &list())), ["fx.slow"]);
}

#[test]
fn a_2026_client_uses_a_virtual_server_without_a_session() {
    let w = HttpWarden::start("servers-2026", &config("", TINY), &[]);
    let env = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                     "io.modelcontextprotocol/clientCapabilities": {}});
    let post = |method: &str, name: Option<&str>, params: Value| {
        let mut headers = POST.to_vec();
        headers.push(("MCP-Protocol-Version", "2026-07-28"));
        headers.push(("Mcp-Method", method));
        if let Some(n) = name {
            headers.push(("Mcp-Name", n));
        }
        let msg = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let r = request_path(&w.addr, "POST", "/mcp/tiny", &headers, &msg.to_string());
        assert_eq!(r.status, 200, "{}", r.body);
        r.json()["result"].clone()
    };
    let found = post("server/discover", None, json!({"_meta": env}));
    assert_eq!(found["instructions"], "Two tools only.");
    let listed = post("tools/list", None, json!({"_meta": env}));
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["repeat", "fx.fail"]);
    let ran = post(
        "tools/call",
        Some("repeat"),
        json!({"name": "repeat", "arguments": {"text": "hi"}, "_meta": env}),
    );
    assert_eq!(ran["structuredContent"]["text"], "hi", "{ran}");
}

/// Every tool of the fixture, found by search and then listed (V6).
const GROW: &str = "[[server]]\nname = \"grow\"\ntools = [\"fx.*\"]\ndiscovery = \"grow\"\n";

const LIST_CHANGED: &str = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;

/// A request's messages on the wire: the notifications before its response,
/// and the response.
fn exchange(w: &HttpWarden, path: &str, sid: &str, msg: &Value) -> (Vec<String>, String) {
    let r = post_at(w, path, Some(sid), msg);
    assert_eq!(r.status, 200, "{}", r.body);
    let mut all: Vec<String> = r.messages().iter().map(Value::to_string).collect();
    let response = all.pop().expect("a response");
    (all, response)
}

#[test]
fn a_growing_server_lists_what_search_found_and_says_so() {
    let rug = "env = { FIXTURE_RUG_PULL = \"1\" }";
    let hidden = HttpWarden::start(
        "servers-grow-hidden",
        &config(rug, &format!("{HIDE_RUG}{GROW}")),
        &[],
    );
    let absent = HttpWarden::start("servers-grow-absent", &config("", GROW), &[]);
    let (a, _) = session_at(&hidden, "/mcp/grow");
    let (b, _) = session_at(&absent, "/mcp/grow");
    let both = |msg: &Value| {
        let x = exchange(&hidden, "/mcp/grow", &a, msg);
        assert_eq!(x, exchange(&absent, "/mcp/grow", &b, msg), "{msg}");
        x
    };
    let (_, listed) = both(&list());
    assert_eq!(names(&listed), ["search_tools", "call_tool"]);
    // A tool not found yet is not called by name.
    let (_, said) = both(&call(2, "fx.echo", json!({})));
    assert_eq!(text_of(&said), ("Unknown tool 'fx.echo'.".to_owned(), true));
    // A search that finds a tool adds it and says so on its own stream.
    let find = search(3, json!({"query": "echo the arguments back", "limit": 1}));
    let (told, _) = both(&find);
    assert_eq!(told, [LIST_CHANGED]);
    let (_, listed) = both(&list());
    assert_eq!(names(&listed), ["search_tools", "call_tool", "fx.echo"]);
    let (_, ran) = both(&call(4, "fx.echo", json!({"k": 1})));
    assert!(text_of(&ran).0.contains("\"k\":1"), "{ran}");
    // Found again: nothing new, nothing said.
    assert_eq!(both(&find).0, Vec::<String>::new());
    // Searches that would match the hidden tools add only visible ones: the
    // listing stays that of a gateway without them (G2).
    for (i, q) in [
        "look a word up",
        "change the tools above",
        "stamp",
        "a answer",
    ]
    .iter()
    .enumerate()
    {
        both(&search(10 + i as i64, json!({"query": q, "limit": 20})));
    }
    let (_, listed) = both(&list());
    let shown = names(&listed);
    assert!(shown.len() > 3, "{shown:?}");
    for hidden_tool in ["fx.lookup", "fx.stamp", "fx.rug_pull"] {
        assert!(!shown.contains(&hidden_tool.to_owned()), "{shown:?}");
    }
    // Each session grows its own list.
    let (other, _) = session_at(&hidden, "/mcp/grow");
    assert_eq!(
        names(&answer(&hidden, "/mcp/grow", &other, &list())),
        ["search_tools", "call_tool"]
    );
}

#[test]
fn a_growing_server_over_stdio_announces_found_tools() {
    let mut w = Warden::start_with_args(
        "servers-grow-stdio",
        &config("", GROW),
        "warn",
        &["--server", "grow"],
    );
    assert_eq!(w.tool_names(), ["search_tools", "call_tool"]);
    w.call(
        "search_tools",
        json!({"query": "echo the arguments back", "limit": 1}),
    );
    let told = w.wait_for("list_changed", |m| {
        m.get("method").and_then(Value::as_str) == Some("notifications/tools/list_changed")
    });
    assert_eq!(told.to_string(), LIST_CHANGED);
    assert_eq!(w.tool_names(), ["search_tools", "call_tool", "fx.echo"]);
    let said = w.call_text("fx.echo", json!({"z": 3}));
    assert!(said.contains("\"z\":3"), "{said}");
}

/// A server that sets arguments (V7): a default, a pin and a hidden one.
const SET: &str = "[[server]]\nname = \"set\"\ntools = [\"fx.echo\", \"fx.slow\"]\n\
    args = { \"fx.echo\" = { defaults = { n = 7 }, pin = { flag = true }, hide = [\"text\"] }, \
    \"fx.slow\" = { defaults = { ms = 1 } } }\n";

#[test]
fn a_server_sets_defaults_pins_and_hides_arguments() {
    let w = HttpWarden::start("servers-args", &config("", SET), &[]);
    let (sid, _) = session_at(&w, "/mcp/set");
    let listed: Value = serde_json::from_str(&answer(&w, "/mcp/set", &sid, &list())).unwrap();
    let tools = &listed["result"]["tools"];
    assert_eq!(
        tools[0]["inputSchema"],
        json!({"type": "object", "properties": {"n": {"type": "number", "default": 7}}})
    );
    assert_eq!(
        tools[1]["inputSchema"],
        json!({"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0, "default": 1}}, "required": []})
    );
    let got = |id: i64, name: &str, args: Value| {
        let v: Value =
            serde_json::from_str(&answer(&w, "/mcp/set", &sid, &call(id, name, args))).unwrap();
        v["result"].clone()
    };
    // The pin is set and the default fills in; a value the caller gives stays.
    assert_eq!(
        got(2, "fx.echo", json!({}))["structuredContent"],
        json!({"flag": true, "n": 7})
    );
    assert_eq!(
        got(3, "fx.echo", json!({"n": 2}))["structuredContent"],
        json!({"n": 2, "flag": true})
    );
    assert_eq!(got(4, "fx.slow", json!({}))["isError"], Value::Null);
    // A pinned or hidden argument sent anyway is refused, as A7 refuses.
    for (id, arg) in [(5, "text"), (6, "flag")] {
        let r = got(id, "fx.echo", json!({arg: true}));
        assert_eq!(
            (r["content"][0]["text"].as_str(), &r["isError"]),
            (
                Some(format!("Error: Argument '{arg}' of tool 'fx.echo' is fixed by configuration and cannot be set by the caller.").as_str()),
                &json!(true)
            )
        );
    }
    // The whole catalogue is untouched.
    let (whole, _) = session_at(&w, "/mcp");
    let (said, _) = text_of(&answer(
        &w,
        "/mcp",
        &whole,
        &call(7, "fx.echo", json!({"text": "t"})),
    ));
    assert!(said.contains("\"text\":\"t\""), "{said}");
}

#[test]
fn a_hidden_tools_set_arguments_answer_as_an_absent_tool() {
    let deny = "[[rule]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\neffect = \"deny\"\n";
    let hidden = HttpWarden::start(
        "servers-args-hidden",
        &config("", &format!("{deny}{SET}")),
        &[],
    );
    let absent_cfg = "[[server]]\nname = \"set\"\ntools = [\"fx.slow\"]\n";
    let absent = HttpWarden::start("servers-args-absent", &config("", absent_cfg), &[]);
    let (a, _) = session_at(&hidden, "/mcp/set");
    let (b, _) = session_at(&absent, "/mcp/set");
    for msg in [
        call(2, "fx.echo", json!({"text": "x"})),
        call(3, "fx.echo", json!({})),
    ] {
        let x = answer(&hidden, "/mcp/set", &a, &msg);
        assert_eq!(x, answer(&absent, "/mcp/set", &b, &msg));
        assert_eq!(text_of(&x).0, "Unknown tool 'fx.echo'.");
    }
}

#[test]
fn check_refuses_arguments_of_a_tool_the_server_does_not_expose_and_warns_of_unknown_ones() {
    let dir = scratch("servers-check-args");
    let bad = "[[server]]\nname = \"s\"\ntools = [\"fx.echo\"]\nargs = { \"fx.slow\" = { hide = [\"ms\"] } }\n";
    let path = write_config(&dir, &config("", bad));
    let (code, out, err) = cli(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("server[0].args.\"fx.slow\": 'fx.slow' is not among the tools this server exposes (fx.echo): name a tool by its catalogue name"),
        "{out}{err}"
    );
    let twice = "[[server]]\nname = \"s\"\ntools = [\"fx.echo\"]\nargs = { \"fx.echo\" = { hide = [\"n\"], pin = { n = 1 } } }\n";
    let path = write_config(&dir, &config("", twice));
    let (code, out, err) = cli(&["check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("argument 'n' of 'fx.echo' is given more than one of defaults, pin and hide: choose one"),
        "{out}{err}"
    );
    // With a pins lock, an argument the tool does not declare is a warning.
    let unknown = "[[server]]\nname = \"s\"\ntools = [\"fx.echo\"]\nargs = { \"fx.echo\" = { hide = [\"nope\"] } }\n";
    let path = write_config(&dir, &fixture_config("", unknown));
    let p = path.to_str().unwrap();
    assert_eq!(cli(&["pins", "lock", "--config", p]).0, 0);
    let (code, out, err) = cli(&["check", "--config", p]);
    assert_eq!(code, 0, "{err}");
    let lock = warden_gateway::pins::lock_path(&path);
    let expected = format!(
        "warning: server 's': argument 'nope' of 'fx.echo' is not in its schema in the pins lock ({}); the setting does nothing",
        lock.display()
    );
    assert!(out.lines().any(|l| l == expected), "{out}");
}
