//! A small notes server written on rmcp's own `ServerHandler`, the kind of
//! server warden-rmcp governs: four tools, listed over two pages, and a
//! prompt (which the governance passes through untouched).

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListPromptsResult,
    ListToolsResult, PaginatedRequestParams, Prompt, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};
use std::sync::Mutex;

/// The notes, in order of creation: (title, text, public).
#[derive(Default)]
pub struct Notes {
    notes: Mutex<Vec<(String, String, bool)>>,
}

/// The declarations, in listing order.
fn declarations() -> Vec<Tool> {
    let tools = json!([
        {
            "name": "create_note",
            "description": "Create a note with a title and a text.",
            "inputSchema": {"type": "object", "properties": {
                "title": {"type": "string", "maxLength": 200},
                "text": {"type": "string"},
                "is_public": {"type": "boolean", "default": false}
            }, "required": ["title", "text"]}
        },
        {
            "name": "list_notes",
            "description": "List every note with its id and visibility.",
            "inputSchema": {"type": "object", "properties": {}}
        },
        {
            "name": "delete_note",
            "description": "Delete a note for good.",
            "inputSchema": {"type": "object", "properties": {
                "id": {"type": "integer", "minimum": 1}
            }, "required": ["id"]}
        },
        {
            "name": "publish_note",
            "description": "Make a note public.",
            "inputSchema": {"type": "object", "properties": {
                "id": {"type": "integer", "minimum": 1}
            }, "required": ["id"]}
        }
    ]);
    serde_json::from_value(tools).expect("the declarations are valid tools")
}

/// Tools per page of `tools/list`: the listing takes two pages.
const PAGE: usize = 2;

fn text(text: String, is_error: bool) -> CallToolResponse {
    let content = vec![ContentBlock::text(text)];
    match is_error {
        true => CallToolResult::error(content),
        false => CallToolResult::success(content),
    }
    .into()
}

impl Notes {
    fn create(&self, args: &Map<String, Value>) -> CallToolResponse {
        let s = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
        let (Some(title), Some(body)) = (s("title"), s("text")) else {
            return text("title and text are required".into(), true);
        };
        let public = args.get("is_public").and_then(Value::as_bool) == Some(true);
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        notes.push((title.clone(), body, public));
        let shown = if public { "PUBLIC" } else { "private" };
        text(
            format!("Created note {} '{title}' ({shown}).", notes.len()),
            false,
        )
    }

    fn list(&self) -> CallToolResponse {
        let notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        let lines: Vec<String> = notes
            .iter()
            .enumerate()
            .map(|(i, (title, body, public))| {
                let shown = if *public { "public" } else { "private" };
                format!("{}. {title} [{shown}] {body}", i + 1)
            })
            .collect();
        match lines.is_empty() {
            true => text("No notes yet.".into(), false),
            false => text(lines.join("\n"), false),
        }
    }

    fn publish(&self, args: &Map<String, Value>) -> CallToolResponse {
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        let id = args.get("id").and_then(Value::as_u64).unwrap_or(0) as usize;
        match notes.get_mut(id.wrapping_sub(1)) {
            Some(note) => {
                note.2 = true;
                text(format!("Published note {id}."), false)
            }
            None => text(format!("No note {id}."), true),
        }
    }
}

impl Notes {
    fn delete(&self, args: &Map<String, Value>) -> CallToolResponse {
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        let id = args.get("id").and_then(Value::as_u64).unwrap_or(0) as usize;
        if id == 0 || id > notes.len() {
            return text(format!("No note {id}."), true);
        }
        notes.remove(id - 1);
        text(format!("Deleted note {id}."), false)
    }
}

impl ServerHandler for Notes {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let start: usize = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(c) => c
                .parse()
                .map_err(|_| McpError::invalid_params("bad cursor", None))?,
        };
        let all = declarations();
        let end = (start + PAGE).min(all.len());
        let mut page = ListToolsResult::with_all_items(all[start.min(end)..end].to_vec());
        page.next_cursor = (end < all.len()).then(|| end.to_string());
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        match request.name.as_ref() {
            "create_note" => Ok(self.create(&args)),
            "list_notes" => Ok(self.list()),
            "publish_note" => Ok(self.publish(&args)),
            "delete_note" => Ok(self.delete(&args)),
            other => Err(McpError::invalid_params(format!("no tool {other}"), None)),
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let prompt = Prompt::new("summarise", Some("Summarise every note."), None);
        Ok(ListPromptsResult::with_all_items(vec![prompt]))
    }
}
