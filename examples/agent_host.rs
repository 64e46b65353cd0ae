//! A small agent host that governs its own tool calls with warden-core's
//! provider stack, over an MCP client connection to the demo notes server:
//!
//! ```text
//! PolicyLayer( unknown keys (warn)( reasons( schema( pins( McpClient ) ) ) ) )
//! ```
//!
//! It plays a scripted sequence of model calls — including a truncated generation
//! a decoder closed into valid JSON — and prints what each layer did.
//!
//! `cargo run --example agent_host [-- path/to/warden-demo-notes]`

use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use warden_core::provider::{PolicyLayer, StageLayer, ToolCall, ToolProvider};
use warden_core::{Caller, Effect, Rule, Rules, UnknownKeyWarning, UnknownMode};
use warden_gateway::client::McpClient;

/// Runs the scripted session and returns its transcript.
async fn run(notes_server: PathBuf) -> Result<String, String> {
    let log = Arc::new(Mutex::new(String::new()));
    let say = {
        let log = log.clone();
        move |line: String| {
            println!("{line}");
            log.lock().unwrap().push_str(&(line + "\n"));
        }
    };

    let client = McpClient::spawn("notes", &[notes_server.display().to_string()])
        .await
        .map_err(|e| e.to_string())?;
    let client = Arc::new(client);
    let mut pins = Map::new();
    pins.insert("is_public".into(), json!(false));
    let on_reason = {
        let say = say.clone();
        Arc::new(move |tool: &str, reason: &str| {
            say(format!(
                "  [reasons]      {tool}: the model says why: {reason:?}"
            ))
        })
    };
    let on_warn = {
        let say = say.clone();
        Arc::new(move |w: &UnknownKeyWarning| {
            say(format!(
                "  [unknown keys] {} carried undeclared argument(s) {}; it declares {} (forwarded unchanged)",
                w.tool,
                w.unknown_keys.join(", "),
                w.declared_keys.join(", ")
            ))
        })
    };
    let on_ask = {
        let say = say.clone();
        Arc::new(
            move |_: &Caller,
                  tool: &str,
                  args: &Value|
                  -> warden_core::hooks::HookFuture<'static, bool> {
                say(format!(
                    "  [policy]       asking the human about {tool} {args}: the human says no"
                ));
                Box::pin(async { false })
            },
        )
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let rules = Rules {
        rules: vec![
            Rule::new(&s(&["*"]), &s(&["publish_note"]), Effect::Ask)?,
            Rule::new(&s(&["*"]), &s(&["*"]), Effect::Allow)?,
        ],
        default: Effect::Deny,
    };
    let stack = PolicyLayer::new(
        StageLayer::unknown_keys(
            StageLayer::reasons(
                StageLayer::schema(StageLayer::pins(client.clone(), pins)),
                Some(on_reason),
            ),
            UnknownMode::Warn,
            on_warn,
        ),
        rules,
        Caller::new("host"),
        on_ask,
    );

    let tools = stack.tools_for_llm().await.map_err(|e| e.to_string())?;
    say("The model is shown:".into());
    for t in &tools {
        let params: Vec<&String> = t
            .pointer("/inputSchema/properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().collect())
            .unwrap_or_default();
        say(format!(
            "  {}({})",
            t["name"].as_str().unwrap_or_default(),
            params
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    let script = [
        (
            "a well-formed call with a reason",
            "create_note",
            json!({"title": "Launch plan", "text": "Ship on Monday", "reason": "the user asked to save the plan"}),
        ),
        (
            "a truncated generation, closed into valid JSON",
            "create_note",
            json!("{\"title\": \"Investigate the\", \"nvestigate\": \"…\", \"the rest\": \"…\"}"),
        ),
        (
            "a model that tries to publish while creating",
            "create_note",
            json!({"title": "Leak", "text": "secret", "is_public": true}),
        ),
        (
            "a wrong type",
            "create_note",
            json!({"title": 42, "text": "x"}),
        ),
        (
            "publishing (needs approval)",
            "publish_note",
            json!({"id": 1}),
        ),
        ("listing", "list_notes", json!({})),
    ];
    for (i, (what, tool, args)) in script.into_iter().enumerate() {
        say(format!("call {}: {what}: {tool} {args}", i + 1));
        let results = stack
            .execute_tool_calls(vec![ToolCall {
                id: format!("call_{}", i + 1),
                name: tool.into(),
                arguments: args,
            }])
            .await
            .map_err(|e| e.to_string())?;
        for r in results {
            let mark = if r.is_error() { "error" } else { "ok" };
            say(format!(
                "  -> {mark}: {}",
                r.text().replace('\n', "\n     ")
            ));
        }
    }
    client.shutdown().await;
    let transcript = log.lock().unwrap().clone();
    Ok(transcript)
}

/// The demo server: the argument, else `warden-demo-notes` beside this example's build.
fn notes_server() -> PathBuf {
    if let Some(path) = std::env::args().nth(1) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe
        .parent()
        .and_then(|examples| examples.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    dir.join("warden-demo-notes")
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let server = notes_server();
    if !server.exists() {
        eprintln!(
            "error: {} not found; build it (cargo build) or pass its path",
            server.display()
        );
        std::process::exit(1);
    }
    if let Err(e) = run(server).await {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_scripted_session_against_the_demo_server() {
        let server = super::notes_server();
        assert!(
            server.exists(),
            "{} is built with the package's tests",
            server.display()
        );
        let transcript = super::run(server).await.unwrap();
        let expect = [
            "  create_note(title, text, reason)",
            "  [reasons]      create_note: the model says why: \"the user asked to save the plan\"",
            "  -> ok: Created note 1 'Launch plan' (private).",
            "  [unknown keys] create_note carried undeclared argument(s) nvestigate, the rest; it declares title, text, reason (forwarded unchanged)",
            "  -> error: Error: Missing required argument 'text'.",
            "  -> error: Error: Argument 'is_public' of tool 'create_note' is fixed by configuration and cannot be set by the caller.",
            "  [unknown keys] create_note carried undeclared argument(s) is_public; it declares title, text, reason (forwarded unchanged)",
            "  -> error: Error: Invalid value for argument 'title': expected string of at most 200 characters.",
            "  [policy]       asking the human about publish_note {\"id\":1}: the human says no",
            "  -> error: Error: This call needs approval, and approval was refused.",
            "  -> ok: 1. Launch plan [private] Ship on Monday",
        ];
        for line in expect {
            assert!(
                transcript.contains(&format!("{line}\n")),
                "missing {line:?} in:\n{transcript}"
            );
        }
    }
}
