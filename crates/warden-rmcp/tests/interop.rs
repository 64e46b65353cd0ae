//! warden-rmcp against rmcp's own client and server, over real transports:
//!
//! - an rmcp server governed in process, run as a child process and reached by
//!   rmcp's child-process client, answers every call byte for byte as the
//!   gateway answers in front of the same server (plain, as its upstream child)
//!   under the same warden.toml (L1);
//! - the provider stack over rmcp's client peer, talking to an rmcp server over
//!   a TCP socket (L2).

#[path = "../../../examples/rmcp/notes.rs"]
mod notes;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ServiceError, ServiceExt};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use warden_core::provider::{no_warnings, PolicyLayer, StageLayer, ToolCall, ToolProvider};
use warden_core::{Caller, Effect, Rule, Rules, UnknownMode};
use warden_rmcp::RmcpProvider;

const NOTES: &str = env!("CARGO_BIN_EXE_warden-rmcp-notes");
/// How long any one exchange may take before the test fails (never a hang).
const PATIENCE: Duration = Duration::from_secs(20);

type Client = RunningService<RoleClient, ()>;

/// The governance both sides get: reject mode, an alias, a pin, a rule on the
/// arguments (G6), an `ask` rule (H5) and a tool hidden by a rule (G2).
const CONFIG: &str = r#"
[[upstream]]
name = "notes"
command = ["{notes}"]
unknown_arguments = "reject"

[upstream.tools.create_note]
aliases = { body = "text" }
pin = { is_public = false }

[[rule]]
callers = ["*"]
tools = ["notes.create_note"]
effect = "deny"
when = [{ arg = "text", regex = "(?i)\\bdrop\\b" }]

[[rule]]
callers = ["*"]
tools = ["notes.publish_note"]
effect = "ask"

[[rule]]
callers = ["*"]
tools = ["notes.delete_note"]
effect = "deny"
"#;

/// Other settings: no prefix, `reason` on every tool, undeclared keys stripped,
/// one tool not validated.
const LENIENT: &str = r#"
[defaults]
reasons = true

[[upstream]]
name = "notes"
command = ["{notes}"]
prefix = false
unknown_arguments = "strip"

[upstream.tools.publish_note]
validate = false
"#;

/// Writes `config` to a fresh folder and returns its path.
fn config_file(name: &str, config: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("warden-rmcp-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("warden.toml");
    std::fs::write(&path, config.replace("{notes}", NOTES)).unwrap();
    path
}

/// The notes server governed in process by `config`, as a child process.
async fn governed(config: &Path) -> Client {
    let mut command = tokio::process::Command::new(NOTES);
    command
        .arg("--config")
        .arg(config)
        .args(["--upstream", "notes"]);
    let transport = TokioChildProcess::new(command).unwrap();
    tokio::time::timeout(PATIENCE, ().serve(transport))
        .await
        .expect("the governed server answers in time")
        .unwrap()
}

/// The gateway itself over `config` (its upstream: the plain notes server as a
/// child), reached through an in-memory pipe by rmcp's client.
async fn gateway(config: &Path) -> Client {
    let config = warden_gateway::config::Config::load(config).unwrap();
    let gateway = warden_gateway::gateway::Gateway::new(config).await.unwrap();
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (read, write) = tokio::io::split(theirs);
    tokio::spawn(async move {
        let input = tokio::io::BufReader::new(read);
        let _ =
            warden_gateway::front::stdio::serve_on(gateway, input, write, std::future::pending())
                .await;
    });
    tokio::time::timeout(PATIENCE, ().serve(ours))
        .await
        .expect("the gateway answers in time")
        .unwrap()
}

/// A call's answer as the client sees it: the result, or the JSON-RPC error.
async fn call(client: &Client, name: &str, arguments: Value) -> Result<CallToolResult, Value> {
    let mut params = CallToolRequestParams::new(name.to_owned());
    if let Value::Object(args) = arguments {
        params = params.with_arguments(args);
    }
    match tokio::time::timeout(PATIENCE, client.peer().call_tool(params))
        .await
        .expect("the call is answered in time")
    {
        Ok(result) => Ok(result),
        Err(ServiceError::McpError(e)) => Err(serde_json::to_value(e).unwrap()),
        Err(other) => panic!("{name}: {other}"),
    }
}

/// The text of a result, or the message of an error.
fn text(answer: &Result<CallToolResult, Value>) -> String {
    match answer {
        Ok(r) => serde_json::to_value(r).unwrap()["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        Err(e) => e["message"].as_str().unwrap_or_default().to_owned(),
    }
}

/// The listing and the answers to `calls`, in order, of the notes server governed
/// in process and of the gateway in front of it, both under `config`: they must
/// be identical, byte for byte. Returns the listing and the answers' texts.
async fn both(name: &str, config: &str, calls: &[(&str, Value)]) -> (Value, Vec<String>) {
    let path = config_file(name, config);
    let ours = governed(&path).await;
    let gw = gateway(&path).await;
    let listed = |tools: Vec<rmcp::model::Tool>| serde_json::to_value(tools).unwrap();
    let our_tools = listed(ours.peer().list_all_tools().await.unwrap());
    let gw_tools = listed(gw.peer().list_all_tools().await.unwrap());
    assert_eq!(
        serde_json::to_string(&our_tools).unwrap(),
        serde_json::to_string(&gw_tools).unwrap()
    );
    let mut texts = Vec::new();
    for (name, args) in calls {
        let mine = call(&ours, name, args.clone()).await;
        let theirs = call(&gw, name, args.clone()).await;
        let as_json = |a: &Result<CallToolResult, Value>| match a {
            Ok(r) => json!({"result": r}),
            Err(e) => json!({"error": e}),
        };
        assert_eq!(
            serde_json::to_string(&as_json(&mine)).unwrap(),
            serde_json::to_string(&as_json(&theirs)).unwrap(),
            "{name} {args}"
        );
        texts.push(text(&mine));
    }
    ours.cancel().await.unwrap();
    gw.cancel().await.unwrap();
    (our_tools, texts)
}

fn names(tools: &Value) -> Vec<&str> {
    tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_governed_rmcp_server_answers_byte_for_byte_as_the_gateway() {
    // Each call, in this order, through both.
    let calls = [
        ("notes.create_note", json!({"title": "t", "txt": "x"})),
        (
            "notes.create_note",
            json!({"title": "Plan", "body": "Ship it"}),
        ),
        (
            "notes.create_note",
            json!({"title": "Leak", "text": "x", "is_public": true}),
        ),
        (
            "notes.create_note",
            json!({"title": "Bad", "text": "then DROP it"}),
        ),
        ("notes.create_note", json!({})),
        ("notes.publish_note", json!({"id": 1})),
        ("notes.nope", json!({"a": 1})),
        ("notes.delete_note", json!({"id": 1})),
        ("notes.list_notes", json!({})),
    ];
    let (tools, texts) = both("same", CONFIG, &calls).await;
    // The listing: prefixed names, the hidden tool and the pin gone, every page.
    assert_eq!(
        names(&tools),
        [
            "notes.create_note",
            "notes.list_notes",
            "notes.publish_note"
        ]
    );
    assert!(tools[0]["inputSchema"]["properties"]
        .get("is_public")
        .is_none());
    // What the answers say, as docs/behaviour.md words them (A3, A2, A7, G6, A5, H5, G2).
    assert_eq!(
        texts,
        [
            "Error: Unknown parameter 'txt' for tool 'notes.create_note'.\nDid you mean: text?\nAllowed parameters: title, text.",
            "Created note 1 'Plan' (private).",
            "Error: Argument 'is_public' of tool 'notes.create_note' is fixed by configuration and cannot be set by the caller.",
            "Error: Argument 'text' of tool 'notes.create_note' must not match the pattern '(?i)\\bdrop\\b' for caller 'local'.",
            "Error: Missing required argument 'title'.\nError: Missing required argument 'text'.",
            "Error: This call needs approval, and the client cannot ask for it. Ask for the tool to be allowed instead.",
            "Unknown tool 'notes.nope'.",
            "Unknown tool 'notes.delete_note'.",
            "1. Plan [private] Ship it",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_settings_are_answered_alike_too() {
    let calls = [
        (
            "create_note",
            json!({"title": "Plan", "text": "Ship it", "reason": "asked to", "tags": ["x"]}),
        ),
        ("create_note", json!({"title": 5, "text": "x"})),
        ("publish_note", json!({"id": "one"})),
        ("list_notes", json!({})),
    ];
    let (tools, texts) = both("lenient", LENIENT, &calls).await;
    assert_eq!(
        names(&tools),
        ["create_note", "list_notes", "delete_note", "publish_note"]
    );
    // R1: every tool is offered the optional reason.
    assert!(tools[1]["inputSchema"]["properties"]
        .get("reason")
        .is_some());
    assert_eq!(
        texts,
        [
            // The reason and the undeclared key were taken out before the server saw the call.
            "Created note 1 'Plan' (private).",
            "Error: Invalid value for argument 'title': expected string of at most 200 characters.",
            // Not validated: the server gets the string and answers in its own words.
            "No note 0.",
            "1. Plan [private] Ship it",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_pipeline_does_not_govern_passes_through_the_governed_server() {
    let path = config_file("through", CONFIG);
    let ours = governed(&path).await;
    let prompts = ours.peer().list_all_prompts().await.unwrap();
    assert_eq!(
        serde_json::to_value(&prompts).unwrap(),
        json!([{"name": "summarise", "description": "Summarise every note."}])
    );
    // A call without `arguments` reaches the server without them, and is answered.
    let listed = call(&ours, "notes.list_notes", Value::Null).await;
    assert_eq!(text(&listed), "No notes yet.");
    ours.cancel().await.unwrap();
}

/// An rmcp server (the plain notes) on a TCP socket; its address.
async fn notes_on_tcp() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let server = notes::Notes::default().serve(stream).await.unwrap();
        let _ = server.waiting().await;
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_provider_stack_governs_an_rmcp_client_over_tcp() {
    let addr = notes_on_tcp().await;
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let client: Client = ().serve(stream).await.unwrap();
    let mut pins = Map::new();
    pins.insert("is_public".into(), json!(false));
    let deny = |tool: &str| Rule::new(&["*".into()], &[tool.into()], Effect::Deny).unwrap();
    let rules = Rules {
        rules: vec![deny("publish_note"), deny("delete_note")],
        default: Effect::Allow,
    };
    let stack = PolicyLayer::new(
        StageLayer::unknown_keys(
            StageLayer::pins(RmcpProvider::of(&client), pins),
            UnknownMode::Reject,
            no_warnings(),
        ),
        rules,
        Caller::new("host"),
        Arc::new(|_: &Caller, _: &str, _: &Value| Box::pin(async { false })),
    );
    let tools = stack.tools_for_llm().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["create_note", "list_notes"]);
    assert_eq!(
        tools[0]["inputSchema"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["title", "text"]
    );
    let c = |id: &str, name: &str, args: &str| ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: Value::String(args.into()),
    };
    let results = stack
        .execute_tool_calls(vec![
            c("1", "create_note", r#"{"title":"t","txt":"x"}"#),
            c("2", "create_note", r#"{"title":"Plan","text":"Ship it"}"#),
            c("3", "publish_note", r#"{"id":1}"#),
            c(
                "4",
                "create_note",
                r#"{"title":"L","text":"x","is_public":true}"#,
            ),
            c("5", "list_notes", ""),
        ])
        .await
        .unwrap();
    let got: Vec<(&str, bool, &str)> = results
        .iter()
        .map(|r| (r.id.as_str(), r.is_error(), r.text()))
        .collect();
    assert_eq!(
        got,
        [
            ("1", true, "Error: Unknown parameter 'txt' for tool 'create_note'.\nDid you mean: text?\nAllowed parameters: title, text."),
            ("2", false, "Created note 1 'Plan' (private)."),
            ("3", true, "Error: Unknown tool 'publish_note'."),
            // The outer layer was shown the schema without the pinned key: to it, an unknown key.
            ("4", true, "Error: Unknown parameter 'is_public' for tool 'create_note'.\nAllowed parameters: title, text."),
            // Nothing refused reached the server: one note, private.
            ("5", false, "1. Plan [private] Ship it"),
        ]
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_error_reaches_the_model_as_a_tool_error_without_its_data() {
    let addr = notes_on_tcp().await;
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let client: Client = ().serve(stream).await.unwrap();
    let provider = RmcpProvider::of(&client);
    let calls = vec![
        ToolCall {
            id: "a".into(),
            name: "missing".into(),
            arguments: json!({}),
        },
        ToolCall {
            id: "b".into(),
            name: "list_notes".into(),
            arguments: json!([1]),
        },
    ];
    let results = provider.execute_tool_calls(calls).await.unwrap();
    assert_eq!(results[0].text(), "no tool missing");
    assert!(results[0].is_error());
    assert_eq!(
        results[1].text(),
        "Invalid arguments for tool 'list_notes': arguments must be a JSON object."
    );
    client.cancel().await.unwrap();
}

/// A client calling itself `name`, to a notes server governed by `governance`
/// that reads the caller of each request from the client's declared name.
async fn named_client(
    name: &str,
    governance: Arc<warden_rmcp::Governance>,
) -> RunningService<RoleClient, rmcp::model::ClientConfig> {
    let (server_end, client_end) = tokio::io::duplex(1 << 16);
    let caller_of: warden_rmcp::CallerOf = Arc::new(|cx| {
        let info = cx.peer.peer_info()?;
        Some(Caller::new(info.client_info.name.clone()))
    });
    let server =
        warden_rmcp::Governed::new(notes::Notes::default(), governance).with_caller_of(caller_of);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_end).await {
            let _ = running.waiting().await;
        }
    });
    let mut config = rmcp::model::ClientConfig::default();
    config.client_info = rmcp::model::Implementation::new(name, "1");
    config.serve(client_end).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caller_may_be_read_from_each_request() {
    let alice = Rule::new(&["alice".into()], &["*".into()], Effect::Allow).unwrap();
    let governance = Arc::new(warden_rmcp::Governance::new("notes").with_rules(Rules {
        rules: vec![alice],
        default: Effect::Deny,
    }));
    let a = named_client("alice", governance.clone()).await;
    let b = named_client("bob", governance).await;
    let listed = |tools: Vec<rmcp::model::Tool>| tools.len();
    assert_eq!(listed(a.peer().list_all_tools().await.unwrap()), 4);
    assert_eq!(listed(b.peer().list_all_tools().await.unwrap()), 0);
    let params = || {
        let args = json!({"title": "t", "text": "x"})
            .as_object()
            .cloned()
            .unwrap();
        CallToolRequestParams::new("create_note").with_arguments(args)
    };
    let created = a.peer().call_tool(params()).await.unwrap();
    assert_eq!(
        serde_json::to_value(&created).unwrap()["content"][0]["text"],
        "Created note 1 't' (private)."
    );
    let Err(ServiceError::McpError(refused)) = b.peer().call_tool(params()).await else {
        panic!("bob's call ran")
    };
    assert_eq!(refused.message, "Unknown tool 'create_note'.");
    assert_eq!(refused.code.0, -32602);
}
