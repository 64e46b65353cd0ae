//! mcp-warden's governance inside rmcp, the official Rust MCP SDK, both ways:
//!
//! 1. an rmcp server governed in process: a notes server written on rmcp's
//!    `ServerHandler`, wrapped in `warden_rmcp::Governed` with the settings a
//!    warden.toml gives it, served on a TCP socket to rmcp's own client;
//! 2. an rmcp agent host: the provider stack over rmcp's client peer
//!    (`warden_rmcp::RmcpProvider`), in front of the same server, plain.
//!
//! Run it: `cargo run --example rmcp_governed`. It prints what each side answered.

#[path = "rmcp/notes.rs"]
mod notes;

use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::sync::Arc;
use warden_core::provider::{no_warnings, PolicyLayer, StageLayer, ToolCall, ToolProvider};
use warden_core::{Caller, Effect, Rule, Rules, UnknownMode};
use warden_rmcp::{Governance, Governed, RmcpProvider};

/// The settings, as the gateway would read them for an upstream `notes`.
const WARDEN_TOML: &str = r#"
[[upstream]]
name = "notes"
command = ["warden-rmcp-notes"]   # what the gateway would start; here the server runs in process
unknown_arguments = "reject"

[upstream.tools.create_note]
aliases = { body = "text" }
pin = { is_public = false }

[[rule]]                          # deleting is not for this caller: the tool is not even listed
callers = ["*"]
tools = ["notes.delete_note"]
effect = "deny"
"#;

/// Part 1: the governed server on a socket, and rmcp's client calling it.
async fn governed_server(out: &mut String) -> Result<(), Box<dyn std::error::Error>> {
    let config = warden_gateway::config::Config::parse(WARDEN_TOML, "warden.toml")?;
    let governance = Arc::new(Governance::from_config(&config, "notes")?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let server = Governed::new(notes::Notes::default(), governance);
        if let Ok(running) = server.serve(stream).await {
            let _ = running.waiting().await;
        }
    });

    let client = ().serve(tokio::net::TcpStream::connect(addr).await?).await?;
    for tool in client.peer().list_all_tools().await? {
        let params: Vec<String> = tool.input_schema["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        writeln!(out, "listed {}({})", tool.name, params.join(", "))?;
    }
    let calls = [
        json!({"title": "Plan", "body": "Ship it"}),
        json!({"title": "Plan", "txt": "Ship it"}),
        json!({"title": "Leak", "text": "x", "is_public": true}),
    ];
    for args in calls {
        let Value::Object(args) = args else { continue };
        let params = CallToolRequestParams::new("notes.create_note").with_arguments(args.clone());
        let result = client.peer().call_tool(params).await?;
        let result = serde_json::to_value(&result)?;
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        writeln!(out, "call {} -> {text}", Value::Object(args))?;
    }
    client.cancel().await?;
    Ok(())
}

/// Part 2: an rmcp client to the plain server, under the provider stack.
async fn agent_host(out: &mut String) -> Result<(), Box<dyn std::error::Error>> {
    let (server_end, client_end) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Ok(running) = notes::Notes::default().serve(server_end).await {
            let _ = running.waiting().await;
        }
    });
    let client = ().serve(client_end).await?;
    let mut pins = Map::new();
    pins.insert("is_public".into(), json!(false));
    let deny = |tool: &str| Rule::new(&["*".into()], &[tool.into()], Effect::Deny);
    let rules = Rules {
        rules: vec![deny("publish_note")?, deny("delete_note")?],
        default: Effect::Allow,
    };
    let stack = PolicyLayer::new(
        StageLayer::unknown_keys(
            StageLayer::schema(StageLayer::pins(RmcpProvider::of(&client), pins)),
            UnknownMode::Reject,
            no_warnings(),
        ),
        rules,
        Caller::new("host"),
        Arc::new(|_: &Caller, _: &str, _: &Value| Box::pin(async { false })),
    );
    let names: Vec<String> = stack
        .tools_for_llm()
        .await?
        .iter()
        .filter_map(|t| Some(t.get("name")?.as_str()?.to_owned()))
        .collect();
    writeln!(out, "the model is shown: {}", names.join(", "))?;
    let call = |id: &str, name: &str, args: &str| ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: Value::String(args.into()),
    };
    let results = stack
        .execute_tool_calls(vec![
            call("c1", "create_note", r#"{"title":"Plan","text":"Ship it"}"#),
            call("c2", "create_note", r#"{"title":"Plan","txt":"Ship it"}"#),
            call("c3", "publish_note", r#"{"id":1}"#),
            call("c4", "list_notes", "{}"),
        ])
        .await?;
    for r in results {
        writeln!(out, "{} -> {}", r.id, r.text())?;
    }
    client.cancel().await?;
    Ok(())
}

async fn run() -> Result<String, Box<dyn std::error::Error>> {
    let mut out = String::from("== an rmcp server, governed in process ==\n");
    governed_server(&mut out).await?;
    out.push_str("== an rmcp agent host, with the provider stack ==\n");
    agent_host(&mut out).await?;
    Ok(out)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    match run().await {
        Ok(out) => print!("{out}"),
        Err(e) => {
            eprintln!("rmcp_governed: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn both_sides_answer_as_the_gateway_would() {
        let out = super::run().await.unwrap();
        assert_eq!(
            out,
            "== an rmcp server, governed in process ==\n\
             listed notes.create_note(title, text)\n\
             listed notes.list_notes()\n\
             listed notes.publish_note(id)\n\
             call {\"title\":\"Plan\",\"body\":\"Ship it\"} -> Created note 1 'Plan' (private).\n\
             call {\"title\":\"Plan\",\"txt\":\"Ship it\"} -> Error: Unknown parameter 'txt' for tool 'notes.create_note'.\n\
             Did you mean: text?\n\
             Allowed parameters: title, text.\n\
             call {\"title\":\"Leak\",\"text\":\"x\",\"is_public\":true} -> Error: Argument 'is_public' of tool 'notes.create_note' is fixed by configuration and cannot be set by the caller.\n\
             == an rmcp agent host, with the provider stack ==\n\
             the model is shown: create_note, list_notes\n\
             c1 -> Created note 1 'Plan' (private).\n\
             c2 -> Error: Unknown parameter 'txt' for tool 'create_note'.\n\
             Did you mean: text?\n\
             Allowed parameters: title, text.\n\
             c3 -> Error: Unknown tool 'publish_note'.\n\
             c4 -> 1. Plan [private] Ship it\n"
        );
    }
}
