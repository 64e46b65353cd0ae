//! H1-H4 through the gateway library: in-process hooks, the real fixture upstream
//! as a child process, the stdio front driven over an in-memory pipe.

mod common;

use common::{scratch, FIXTURE};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use warden_core::hooks::{
    AfterHook, BeforeDecision, BeforeHook, CallContext, CallEnd, HookError, HookFuture,
};
use warden_core::DenyReason;
use warden_gateway::config::Config;
use warden_gateway::gateway::Gateway;

/// Decides by the `text` argument: deny, answer, fail, or both deny and answer.
struct Steer(&'static str);
impl BeforeHook for Steer {
    fn before<'a>(
        &'a self,
        ctx: &'a CallContext,
    ) -> HookFuture<'a, Result<BeforeDecision, HookError>> {
        let text = ctx
            .arguments
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let me = self.0;
        Box::pin(async move {
            Ok(match (me, text.as_str()) {
                ("first", "deny") | ("second", "both") => {
                    BeforeDecision::Deny(DenyReason::new("Denied by policy hook.").unwrap())
                }
                ("first", "answer") | ("first", "both") => BeforeDecision::Answer(
                    json!({"content": [{"type": "text", "text": "from the hook"}]}),
                ),
                ("first", "fail") => return Err(HookError("hook backend unreachable".into())),
                _ => BeforeDecision::Pass,
            })
        })
    }
}

/// One after-hook event: the call's `text` argument, its result, its failure.
type Seen = (String, Option<Value>, Option<String>);

#[derive(Default)]
struct Record(Mutex<Vec<Seen>>);
impl AfterHook for Record {
    fn after<'a>(
        &'a self,
        ctx: &'a CallContext,
        end: &'a CallEnd,
    ) -> HookFuture<'a, Result<(), HookError>> {
        let text = ctx
            .arguments
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or(&ctx.tool)
            .to_owned();
        self.0
            .lock()
            .unwrap()
            .push((text, end.result.clone(), end.failure.clone()));
        Box::pin(async { Err(HookError("after hooks may fail; nobody notices".into())) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_hooks_decide_and_after_hooks_run_exactly_once() {
    let dir = scratch("hooks");
    let count = dir.join("count.txt");
    let toml = format!(
        "[[upstream]]\nname = \"fx\"\ncommand = [\"{FIXTURE}\"]\ntimeout_ms = 300\nenv = {{ FIXTURE_COUNT_FILE = \"{}\" }}\n",
        count.display()
    );
    let config = Config::parse(&toml, "hooks.toml").unwrap();
    let record = Arc::new(Record::default());
    let gateway = Gateway::with_hooks(
        config,
        vec![Arc::new(Steer("first")), Arc::new(Steer("second"))],
        vec![record.clone()],
    )
    .await
    .unwrap();
    let (client, server) = tokio::io::duplex(1 << 20);
    let (server_read, server_write) = tokio::io::split(server);
    let serving = tokio::spawn(warden_gateway::front::stdio::serve_on(
        gateway,
        BufReader::new(server_read),
        server_write,
        std::future::pending::<()>(),
    ));
    let (client_read, mut client_write) = tokio::io::split(client);
    let mut lines = BufReader::new(client_read).lines();
    let mut next = 0;
    let mut call = async |name: &str, args: Value| -> Value {
        next += 1;
        let msg = json!({"jsonrpc": "2.0", "id": next, "method": "tools/call", "params": {"name": name, "arguments": args}});
        client_write
            .write_all(format!("{msg}\n").as_bytes())
            .await
            .unwrap();
        loop {
            let line = tokio::time::timeout(Duration::from_secs(15), lines.next_line())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == json!(next) {
                return v;
            }
        }
    };
    let text = |v: &Value| {
        v.pointer("/result/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };

    assert_eq!(
        text(&call("fx.echo", json!({"text": "ok"})).await),
        r#"{"text":"ok"}"#
    );
    let denied = call("fx.echo", json!({"text": "deny"})).await;
    assert_eq!(
        denied["result"],
        json!({"content": [{"type": "text", "text": "Denied by policy hook."}], "isError": true})
    );
    assert_eq!(
        text(&call("fx.echo", json!({"text": "answer"})).await),
        "from the hook"
    );
    assert_eq!(
        text(&call("fx.echo", json!({"text": "both"})).await),
        "Denied by policy hook."
    );
    assert_eq!(
        text(&call("fx.echo", json!({"text": "fail"})).await),
        "Error: An internal error occurred while executing the tool."
    );
    assert_eq!(
        text(&call("fx.slow", json!({"text": "slow", "ms": 5000})).await),
        "Error: An internal error occurred while executing the tool."
    );
    assert_eq!(
        text(&call("fx.crash", json!({"text": "crash"})).await),
        "Error: An internal error occurred while executing the tool."
    );
    let unknown = call("fx.nope", json!({"text": "unknown"})).await;
    assert_eq!(unknown["error"]["code"], -32602);

    // After hooks are spawned; give them a moment, then count.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut seen = record.0.lock().unwrap().clone();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let summary: Vec<(String, bool, bool)> = seen
        .iter()
        .map(|(t, result, failure)| (t.clone(), result.is_some(), failure.is_some()))
        .collect();
    assert_eq!(
        summary,
        [
            ("answer".to_string(), true, false),
            ("both".to_string(), true, false),
            ("crash".to_string(), false, true),
            ("deny".to_string(), true, false),
            ("fail".to_string(), false, true),
            ("ok".to_string(), true, false),
            ("slow".to_string(), false, true),
        ],
        "each call past the before hooks is seen once; the unknown tool is not"
    );
    // Only the calls the hooks let through reached the upstream.
    let ran = std::fs::read_to_string(&count).unwrap();
    assert_eq!(ran.lines().collect::<Vec<_>>(), ["echo", "slow", "crash"]);
    // End of input: the gateway finishes and stops its children.
    client_write.shutdown().await.unwrap();
    let served = tokio::time::timeout(Duration::from_secs(10), serving).await;
    assert!(
        matches!(served, Ok(Ok(Ok(())))),
        "the gateway did not stop cleanly: {served:?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
