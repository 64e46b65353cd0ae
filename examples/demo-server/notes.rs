//! warden-demo-notes: a small notes app as an MCP server over stdio, the upstream
//! the bundled example fronts (examples/warden.toml).
//!
//! Like most servers in the wild it trusts its input: it ignores arguments it does
//! not know, and `create_note` honours an `is_public` flag a caller should never
//! set (creating is not publishing). The gateway's example config rejects unknown
//! keys, maps the alias `body` to `text`, and pins `is_public = false`.

use serde_json::{json, Value};
use std::io::{BufRead, Write};

const VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

struct Note {
    title: String,
    text: String,
    public: bool,
}

fn tools() -> Value {
    json!([
        {
            "name": "create_note",
            "title": "Create a note",
            "description": "Create a private note with a title and a text.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "description": "The note's title", "maxLength": 200},
                    "text": {"type": "string", "description": "The note's body"},
                    "is_public": {"type": "boolean", "description": "Internal: whether the note is public", "default": false}
                },
                "required": ["title", "text"]
            }
        },
        {
            "name": "list_notes",
            "description": "List every note with its id and visibility.",
            "inputSchema": {"type": "object", "properties": {}}
        },
        {
            "name": "publish_note",
            "description": "Make a note public.",
            "inputSchema": {
                "type": "object",
                "properties": {"id": {"type": "integer", "minimum": 1, "description": "The note's id"}},
                "required": ["id"]
            }
        }
    ])
}

fn text_result(text: String, is_error: bool) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": is_error})
}

fn call(notes: &mut Vec<Note>, name: &str, args: &Value) -> Value {
    let s = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
    match name {
        "create_note" => {
            let (Some(title), Some(text)) = (s("title"), s("text")) else {
                return text_result("title and text are required".into(), true);
            };
            let public = args
                .get("is_public")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            notes.push(Note {
                title,
                text,
                public,
            });
            let n = notes
                .last()
                .map(|n| (n.title.clone(), n.public))
                .unwrap_or_default();
            text_result(
                format!(
                    "Created note {} '{}' ({}).",
                    notes.len(),
                    n.0,
                    if n.1 { "PUBLIC" } else { "private" }
                ),
                false,
            )
        }
        "list_notes" => {
            let lines: Vec<String> = notes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    format!(
                        "{}. {} [{}] {}",
                        i + 1,
                        n.title,
                        if n.public { "public" } else { "private" },
                        n.text
                    )
                })
                .collect();
            text_result(
                if lines.is_empty() {
                    "No notes yet.".into()
                } else {
                    lines.join("\n")
                },
                false,
            )
        }
        "publish_note" => match args.get("id").and_then(Value::as_u64).map(|i| i as usize) {
            Some(id) if id >= 1 && id <= notes.len() => {
                notes[id - 1].public = true;
                text_result(format!("Note {id} is now public."), false)
            }
            _ => text_result("No such note.".into(), true),
        },
        _ => text_result(format!("Unknown tool: {name}"), true),
    }
}

fn main() {
    let mut notes = Vec::new();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let (Some(id), Some(method)) = (
            msg.get("id").cloned(),
            msg.get("method").and_then(Value::as_str),
        ) else {
            continue; // notifications and responses need no answer
        };
        let params = msg.get("params").cloned().unwrap_or(json!({}));
        let result = match method {
            "initialize" => {
                let asked = params
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let version = if VERSIONS.contains(&asked) {
                    asked
                } else {
                    VERSIONS[0]
                };
                json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "warden-demo-notes", "version": "0.1.0"}
                })
            }
            "ping" => json!({}),
            "tools/list" => json!({"tools": tools()}),
            "tools/call" => {
                let name = params
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let args = params.get("arguments").cloned().unwrap_or(json!({}));
                call(&mut notes, &name, &args)
            }
            _ => {
                let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}});
                let _ = writeln!(out, "{error}");
                let _ = out.flush();
                continue;
            }
        };
        let _ = writeln!(
            out,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "result": result})
        );
        let _ = out.flush();
    }
}
