//! warden-conformance-upstream: an MCP server over stdio offering what the server
//! scenarios of `@modelcontextprotocol/conformance` call (tools `test_*` and
//! `json_schema_2020_12_tool`, resources `test://…`, prompts `test_*`, logging,
//! completion, subscriptions). It speaks stdio by default and Streamable HTTP with
//! `--http ADDR` (with `CONFORMANCE_TOKEN=t` in its environment, every HTTP request
//! must carry `Authorization: Bearer t`). `tests/conformance/run.py` runs the suite
//! against mcp-warden's HTTP front with this server behind it (over stdio and over
//! HTTP), and against this server's own HTTP front, and compares them.
//!
//! It speaks the revisions with `initialize` and sessions (up to 2025-11-25) and the
//! stateless 2026-07-28 one, message by message: a request that carries the
//! 2026-07-28 envelope is served by `conformance/rev2026.rs` (with the input tools of
//! `conformance/input.rs`), any other exactly as before.
//!
//! With `CONFORMANCE_LIKE_REFERENCE=1` it behaves where it matters like the
//! conformance repository's reference server (`examples/servers/typescript`),
//! which exposed gaps in the gateway's bridge between the revisions: its
//! `server/discover` announces neither `logging` nor `completions` (it answers
//! both methods all the same), and in 2026-07-28 its asking tools (`test_sampling`,
//! the elicitation tools) ask nobody and answer that the client cannot be asked;
//! only over an `initialize` session do they ask. A gateway that serves an older
//! client through the stateless side loses those scenarios.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where a message to the client goes: stdout, or the SSE stream of the HTTP
/// request it belongs to.
trait Sink: Send + Sync {
    fn send(&self, msg: &Value);
    /// Whether messages can still reach the client (an SSE stream it left cannot).
    fn open(&self) -> bool {
        true
    }
}

struct Stdout(Mutex<std::io::Stdout>);

impl Sink for Stdout {
    fn send(&self, msg: &Value) {
        let mut o = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(o, "{msg}");
        let _ = o.flush();
    }
}

type Out = Arc<dyn Sink>;
type Waiting = Arc<Mutex<HashMap<String, Sender<Value>>>>;
type Next = Arc<AtomicU64>;

/// A 1×1 PNG and a tiny WAV, base64.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEARKwAAIhYAQACABAAZGF0YQAAAAA=";

fn send(out: &Out, msg: &Value) {
    out.send(msg);
}

fn empty_schema() -> Value {
    json!({"type": "object", "properties": {}})
}

fn tools() -> Value {
    json!([
        {"name": "test_simple_text", "description": "Returns simple text.", "inputSchema": empty_schema()},
        {"name": "test_image_content", "description": "Returns an image.", "inputSchema": empty_schema()},
        {"name": "test_audio_content", "description": "Returns audio.", "inputSchema": empty_schema()},
        {"name": "test_embedded_resource", "description": "Returns an embedded resource.", "inputSchema": empty_schema()},
        {"name": "test_multiple_content_types", "description": "Returns text, image and a resource.", "inputSchema": empty_schema()},
        {"name": "test_tool_with_logging", "description": "Logs three messages while it runs.", "inputSchema": empty_schema()},
        {"name": "test_tool_with_progress", "description": "Reports progress three times.", "inputSchema": empty_schema()},
        {"name": "test_error_handling", "description": "Always fails with a tool error.", "inputSchema": empty_schema()},
        {"name": "test_sampling", "description": "Asks the client's model.", "inputSchema": {"type": "object",
            "properties": {"prompt": {"type": "string"}}, "required": ["prompt"]}},
        {"name": "test_elicitation", "description": "Asks the user for information.", "inputSchema": {"type": "object",
            "properties": {"message": {"type": "string"}}, "required": ["message"]}},
        {"name": "test_elicitation_sep1034_defaults", "description": "Asks with default values.", "inputSchema": empty_schema()},
        {"name": "test_elicitation_sep1330_enums", "description": "Asks with enum schemas.", "inputSchema": empty_schema()},
        {"name": "test_reconnection", "description": "Answers after a short pause.", "inputSchema": empty_schema()},
        {"name": "sleep", "description": "Answers after ms milliseconds.", "inputSchema": {"type": "object",
            "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": 60000}}, "required": ["ms"]}},
        {"name": "garbage_answer", "description": "Over HTTP, answers with a body that is not JSON.", "inputSchema": empty_schema()},
        {"name": "json_schema_2020_12_tool", "description": "Declares a 2020-12 schema.", "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
            "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
            "additionalProperties": false}}
    ])
}

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

fn resource_content() -> Value {
    json!({"type": "resource", "resource": {"uri": "test://static-text", "mimeType": "text/plain", "text": "An embedded resource."}})
}

/// Sends the client a request and waits for its answer (or gives up after 30 s).
fn ask(
    out: &Out,
    waiting: &Waiting,
    next: &AtomicU64,
    method: &str,
    params: Value,
) -> Option<Value> {
    let id = format!("c-{}", next.fetch_add(1, Ordering::Relaxed));
    let (tx, rx) = channel();
    waiting
        .lock()
        .unwrap()
        .insert(Value::String(id.clone()).to_string(), tx);
    send(
        out,
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    );
    rx.recv_timeout(Duration::from_secs(30)).ok()
}

/// Whether to behave like the reference server (`CONFORMANCE_LIKE_REFERENCE=1`).
fn like_reference() -> bool {
    static LIKE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *LIKE.get_or_init(|| std::env::var("CONFORMANCE_LIKE_REFERENCE").is_ok_and(|v| v == "1"))
}

/// The request a tool sends its client while it runs (`test_sampling` and the
/// elicitation tools), with the label its answer is reported after: a request of
/// its own up to 2025-11-25, an input request of an `InputRequiredResult` in
/// 2026-07-28.
fn asking(name: &str, args: &Value) -> Option<(&'static str, &'static str, Value)> {
    Some(match name {
        "test_sampling" => {
            let prompt = args
                .get("prompt")
                .and_then(Value::as_str)
                .unwrap_or("Hello");
            (
                "sampling/createMessage",
                "LLM response",
                json!({
                "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
                "maxTokens": 100}),
            )
        }
        "test_elicitation" => {
            let message = args
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("Please provide your information");
            (
                "elicitation/create",
                "User response",
                json!({
                "message": message,
                "requestedSchema": {"type": "object", "properties": {
                    "username": {"type": "string", "description": "Your username"},
                    "email": {"type": "string", "description": "Your email address"}},
                    "required": ["username", "email"]}}),
            )
        }
        "test_elicitation_sep1034_defaults" => (
            "elicitation/create",
            "Elicitation completed",
            json!({
                "message": "Please review and update the form fields with defaults",
                "requestedSchema": {"type": "object", "properties": {
                    "name": {"type": "string", "description": "User name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User age", "default": 30},
                    "score": {"type": "number", "description": "User score", "default": 95.5},
                    "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
                    "verified": {"type": "boolean", "description": "Verification status", "default": true}}}}),
        ),
        "test_elicitation_sep1330_enums" => (
            "elicitation/create",
            "Elicitation completed",
            json!({
                "message": "Please select options from the enum fields",
                "requestedSchema": {"type": "object", "properties": {
                    "untitledSingle": {"type": "string", "description": "Select one option", "enum": ["option1", "option2", "option3"]},
                    "titledSingle": {"type": "string", "description": "Select one option with titles", "oneOf": [
                        {"const": "value1", "title": "First Option"}, {"const": "value2", "title": "Second Option"}, {"const": "value3", "title": "Third Option"}]},
                    "legacyEnum": {"type": "string", "description": "Select one option (legacy)", "enum": ["opt1", "opt2", "opt3"],
                        "enumNames": ["Option One", "Option Two", "Option Three"]},
                    "untitledMulti": {"type": "array", "description": "Select multiple options", "minItems": 1, "maxItems": 3,
                        "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                    "titledMulti": {"type": "array", "description": "Select multiple options with titles", "minItems": 1, "maxItems": 3,
                        "items": {"anyOf": [{"const": "value1", "title": "First Choice"}, {"const": "value2", "title": "Second Choice"}, {"const": "value3", "title": "Third Choice"}]}}}}}),
        ),
        _ => return None,
    })
}

/// What a tool from [`asking`] answers once its client said `answer` (the result
/// of the request; `None` when none came).
fn asked(method: &str, label: &str, answer: Option<&Value>) -> Value {
    let said = if method == "sampling/createMessage" {
        answer
            .and_then(|a| a.pointer("/content/text"))
            .and_then(Value::as_str)
            .unwrap_or("(no answer)")
            .to_owned()
    } else {
        answer.map(Value::to_string).unwrap_or_default()
    };
    json!({"content": [text(&format!("{label}: {said}"))]})
}

fn call(out: &Out, waiting: &Waiting, next: &AtomicU64, name: &str, params: &Value) -> Value {
    let args = params.get("arguments").cloned().unwrap_or(json!({}));
    if let Some((method, label, request)) = asking(name, &args) {
        let answer = ask(out, waiting, next, method, request);
        return asked(method, label, answer.as_ref().map(|a| &a["result"]));
    }
    match name {
        "test_simple_text" => {
            json!({"content": [text("This is a simple text response for testing.")]})
        }
        "test_image_content" => {
            json!({"content": [{"type": "image", "data": PNG, "mimeType": "image/png"}]})
        }
        "test_audio_content" => {
            json!({"content": [{"type": "audio", "data": WAV, "mimeType": "audio/wav"}]})
        }
        "test_embedded_resource" => json!({"content": [resource_content()]}),
        "test_multiple_content_types" => json!({"content": [
            text("Text, an image and a resource."),
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            resource_content()]}),
        "test_tool_with_logging" => {
            for (i, m) in [
                "Tool execution started",
                "Tool processing data",
                "Tool execution completed",
            ]
            .iter()
            .enumerate()
            {
                send(
                    out,
                    &json!({"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": "info", "logger": "conformance", "data": m}}),
                );
                if i < 2 {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            json!({"content": [text("Logged three messages.")]})
        }
        "test_tool_with_progress" => {
            if let Some(token) = params.pointer("/_meta/progressToken") {
                for p in [0, 50, 100] {
                    send(
                        out,
                        &json!({"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": token, "progress": p, "total": 100}}),
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            json!({"content": [text("Progress reported.")]})
        }
        "test_error_handling" => {
            json!({"content": [text("This tool always fails, on purpose.")], "isError": true})
        }
        "test_reconnection" => {
            std::thread::sleep(Duration::from_millis(200));
            json!({"content": [text("Reconnection test completed.")]})
        }
        "sleep" => {
            let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
            std::thread::sleep(Duration::from_millis(ms));
            json!({"content": [text(&format!("slept {ms} ms"))]})
        }
        "garbage_answer" => json!({"content": [text("Over stdio this tool answers normally.")]}),
        "json_schema_2020_12_tool" => json!({"content": [text(&format!("Received: {args}"))]}),
        other => json!({"content": [text(&format!("Unknown tool: {other}"))], "isError": true}),
    }
}

fn prompt(name: &str, args: &Value) -> Option<Value> {
    let arg = |k: &str| {
        args.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let user = |content: Value| json!({"role": "user", "content": content});
    Some(match name {
        "test_simple_prompt" => {
            json!({"messages": [user(text("This is a simple prompt for testing."))]})
        }
        "test_prompt_with_arguments" => json!({"messages": [user(text(&format!(
            "Prompt with arguments: arg1='{}', arg2='{}'", arg("arg1"), arg("arg2"))))]}),
        "test_prompt_with_embedded_resource" => json!({"messages": [
            user(json!({"type": "resource", "resource": {"uri": arg("resourceUri"), "mimeType": "text/plain", "text": "Embedded resource content for testing."}})),
            user(text("Please process the embedded resource above."))]}),
        "test_prompt_with_image" => json!({"messages": [
            user(json!({"type": "image", "data": PNG, "mimeType": "image/png"})),
            user(text("Please analyze the image above."))]}),
        _ => return None,
    })
}

/// The answer to a request that only reads the fixture's lists (the same in both
/// revisions, before the 2026-07-28 stamps): `None` for other methods.
fn listing(method: &str, params: &Value) -> Option<Result<Value, (i64, &'static str)>> {
    Some(match method {
        "tools/list" => Ok(json!({"tools": tools()})),
        "resources/list" => Ok(json!({"resources": [
            {"uri": "test://static-text", "name": "Static text", "mimeType": "text/plain"},
            {"uri": "test://static-binary", "name": "Static binary", "mimeType": "image/png"},
            {"uri": "test://watched-resource", "name": "Watched resource", "mimeType": "text/plain"}]})),
        "resources/templates/list" => Ok(json!({"resourceTemplates": [
            {"uriTemplate": "test://template/{id}/data", "name": "Template", "mimeType": "application/json"}]})),
        "resources/read" => {
            let uri = params
                .get("uri")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match uri {
                "test://static-text" | "test://watched-resource" => Ok(json!({"contents": [
                    {"uri": uri, "mimeType": "text/plain", "text": "This is the content of a static text resource."}]})),
                "test://static-binary" => {
                    Ok(json!({"contents": [{"uri": uri, "mimeType": "image/png", "blob": PNG}]}))
                }
                _ => match uri
                    .strip_prefix("test://template/")
                    .and_then(|r| r.strip_suffix("/data"))
                {
                    Some(id) => Ok(
                        json!({"contents": [{"uri": uri, "mimeType": "application/json",
                        "text": json!({"id": id, "templateTest": true}).to_string()}]}),
                    ),
                    None => Err((-32002, "Resource not found")),
                },
            }
        }
        "prompts/list" => Ok(json!({"prompts": [
            {"name": "test_simple_prompt", "description": "A simple prompt."},
            {"name": "test_prompt_with_arguments", "description": "A prompt with arguments.", "arguments": [
                {"name": "arg1", "description": "First argument", "required": true},
                {"name": "arg2", "description": "Second argument", "required": true}]},
            {"name": "test_prompt_with_embedded_resource", "description": "A prompt with a resource.", "arguments": [
                {"name": "resourceUri", "description": "The resource to embed", "required": true}]},
            {"name": "test_prompt_with_image", "description": "A prompt with an image."}]})),
        "prompts/get" => {
            let name = params
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match prompt(name, params.get("arguments").unwrap_or(&json!({}))) {
                Some(r) => Ok(r),
                None => Err((-32602, "Unknown prompt")),
            }
        }
        "completion/complete" => Ok(
            json!({"completion": {"values": ["test", "testing", "tested"], "total": 3, "hasMore": false}}),
        ),
        _ => return None,
    })
}

/// Handles one message from the client; requests are answered through `out`.
fn handle(msg: Value, out: &Out, waiting: &Waiting, next: &Arc<AtomicU64>) {
    let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
    let Some(id) = msg.get("id").cloned() else {
        return; // notifications: nothing to do
    };
    let params = msg.get("params").cloned().unwrap_or(json!({}));
    let Some(method) = method else {
        if let Some(tx) = waiting.lock().unwrap().remove(&id.to_string()) {
            let _ = tx.send(msg);
        }
        return;
    };
    let reply = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
    let refuse = |code: i64, message: &str| json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    let answer = match method.as_str() {
        "initialize" => reply(json!({
            "protocolVersion": params.get("protocolVersion").cloned().unwrap_or(json!("2025-11-25")),
            "capabilities": {"tools": {"listChanged": true}, "resources": {"subscribe": true, "listChanged": true},
                "prompts": {"listChanged": true}, "logging": {}, "completions": {}},
            "serverInfo": {"name": "warden-conformance-upstream", "version": "0.1.0"}})),
        "ping" | "logging/setLevel" | "resources/subscribe" | "resources/unsubscribe" => {
            reply(json!({}))
        }
        "tools/call" => {
            let name = params
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let (out, waiting, next, id) = (out.clone(), waiting.clone(), next.clone(), id.clone());
            // Tools that ask the client must not block the reader.
            std::thread::spawn(move || {
                let result = call(&out, &waiting, &next, &name, &params);
                send(&out, &json!({"jsonrpc": "2.0", "id": id, "result": result}));
            });
            return;
        }
        _ => match listing(&method, &params) {
            Some(Ok(result)) => reply(result),
            Some(Err((code, message))) => refuse(code, message),
            None => refuse(-32601, "Method not found"),
        },
    };
    send(out, &answer);
}

fn main() {
    let waiting: Waiting = Arc::default();
    let next = Arc::new(AtomicU64::new(1));
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--http") {
        let addr = args.get(at + 1).map_or("127.0.0.1:0", String::as_str);
        // --tls CERT KEY: serve https with that certificate chain and PKCS#8 key.
        let tls = args
            .iter()
            .position(|a| a == "--tls")
            .and_then(|t| Some((args.get(t + 1)?.clone(), args.get(t + 2)?.clone())));
        http::serve(addr, tls, waiting, next);
        return;
    }
    let out: Out = Arc::new(Stdout(Mutex::new(std::io::stdout())));
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if rev2026::speaks(&msg, None) {
            rev2026::over_stdio(&msg, &out, &waiting, &next);
            continue;
        }
        rev2026::cancelled(&msg, &out);
        handle(msg, &out, &waiting, &next);
    }
}

#[path = "conformance/http.rs"]
mod http;
#[path = "conformance/input.rs"]
mod input;
#[path = "conformance/rev2026.rs"]
mod rev2026;
