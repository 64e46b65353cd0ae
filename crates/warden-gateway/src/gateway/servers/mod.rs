//! Virtual servers at run time (V1-V6): what a session opened on one lists, and
//! how a `tools/call` there reaches the real tool.
//!
//! A server shows part of the caller's own listing (hidden tools are gone
//! before it looks), renamed and described its way. In search mode it lists
//! `search_tools` and `call_tool` only; both read that same listing. A growing
//! server lists those two and what the session's searches found.

mod cache;
#[cfg(test)]
mod labelled;
#[cfg(test)]
mod quality;
mod search;

use crate::config::servers::{VirtualServer, CALL_TOOL, SEARCH_TOOLS};
use crate::config::Discovery;
use crate::texts;
pub use cache::{View, Views};
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
use warden_core::ToolEntry;

/// The longest query `search_tools` takes, in characters.
pub const MAX_QUERY_CHARS: usize = 500;
/// The most results `search_tools` returns, and how many unless asked.
pub const MAX_LIMIT: u64 = 20;
pub const DEFAULT_LIMIT: u64 = 5;

/// Where a `tools/call` on a virtual server goes.
pub enum Route {
    /// To the pipeline under the real tool's name (the params now carry it);
    /// `shown` is the name the caller used, for an answer that must not tell
    /// it apart from an absent tool.
    Real { shown: String },
    /// No tool by that name here: answered as an absent tool (G2).
    Absent,
    /// Answered by the server itself (a tool error).
    Answer(Value),
    /// A search's answer, and the catalogue names of the tools it returned.
    Found(Value, Vec<String>),
}

/// What a call on a server is routed against.
pub struct Against<'a> {
    /// The caller's own listing (read in the search modes, and where the
    /// server sets arguments).
    pub listed: &'a [&'a Arc<ToolEntry>],
    /// The server's view of the catalogue `listed` came from.
    pub view: &'a dyn Fn() -> Arc<View>,
    /// The tools the session's searches found on a growing server (V6).
    pub found: &'a BTreeSet<String>,
}

/// The `tools/list` result of `server` from the caller's own listing and the
/// server's `view` of the catalogue it was listed from; on a growing server,
/// with the tools in `found` that the caller may still see (V6).
pub fn listing(
    server: &VirtualServer,
    listed: &[&Arc<ToolEntry>],
    view: &View,
    found: &BTreeSet<String>,
) -> Vec<Value> {
    match server.discovery {
        Discovery::List => {
            let visible = view.visible(listed);
            let shown = view.tools.iter().zip(visible).filter(|(_, v)| *v);
            shown.map(|(t, _)| t.clone()).collect()
        }
        Discovery::Search => search_mode_tools(),
        Discovery::Grow => {
            let visible = view.visible(listed);
            let mut places: Vec<usize> = found.iter().filter_map(|r| view.place(r)).collect();
            places.retain(|&p| visible[p]);
            places.sort_unstable();
            let mut tools = search_mode_tools();
            tools.extend(places.into_iter().map(|p| view.tools[p].clone()));
            tools
        }
    }
}

/// A tool error the model can act on.
pub fn tool_error(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// Routes one call (`params`: the `tools/call` params, rewritten in place).
pub fn route(server: &VirtualServer, params: &mut Value, on: &Against<'_>) -> Route {
    let listed = on.listed;
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if server.discovery.searches() {
        let args = params.get("arguments").and_then(Value::as_object);
        let empty = Map::new();
        let args = args.unwrap_or(&empty);
        match name.as_str() {
            SEARCH_TOOLS => {
                return match search_tools(server, listed, on.view, args) {
                    Ok((answer, found)) => Route::Found(answer, found),
                    Err(answer) => Route::Answer(answer),
                }
            }
            CALL_TOOL => match unwrap_call(server, params, listed) {
                Ok(()) => {}
                Err(answer) => return Route::Answer(answer),
            },
            // A growing server's found tools are listed, so called by name (V6).
            _ if server.discovery == Discovery::Grow
                && server.real(&name).is_some_and(|r| on.found.contains(r)) => {}
            _ => return Route::Absent,
        }
    }
    let shown = params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let Some(real) = server.real(&shown) else {
        return Route::Absent;
    };
    if let Err(sent) = server.set_args(real, params) {
        // Only a tool the caller may see says why (G2).
        let seen = listed.iter().any(|t| t.name == real);
        if !seen {
            return Route::Absent;
        }
        let refused = warden_core::answer::pinned_argument(&sent, real);
        return Route::Answer(tool_error(&refused));
    }
    params["name"] = real.into();
    Route::Real { shown }
}

/// `call_tool`'s own arguments become the call's: the tool named, with its
/// arguments (the request's `_meta` stays). `Err`: a tool error.
fn unwrap_call(
    server: &VirtualServer,
    params: &mut Value,
    listed: &[&Arc<ToolEntry>],
) -> Result<(), Value> {
    let args = params
        .get_mut("arguments")
        .map(Value::take)
        .unwrap_or(Value::Null);
    let Some(name) = args.get("name").and_then(Value::as_str) else {
        return Err(tool_error(texts::CALL_TOOL_NO_NAME));
    };
    // Shown here by that name, and in the caller's own listing.
    let real = server.real(name);
    let visible = real.is_some_and(|r| listed.iter().any(|t| t.name == r));
    if !visible {
        return Err(tool_error(&texts::call_tool_unknown(name)));
    }
    let inner = match args.get("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => return Err(tool_error(texts::CALL_TOOL_BAD_ARGUMENTS)),
    };
    params["name"] = name.into();
    params["arguments"] = inner;
    Ok(())
}

/// `search_tools`: the best matches among the tools the caller may see here,
/// and their catalogue names. `Err`: a tool error (V5).
fn search_tools(
    server: &VirtualServer,
    listed: &[&Arc<ToolEntry>],
    view: &dyn Fn() -> Arc<View>,
    args: &Map<String, Value>,
) -> Result<(Value, Vec<String>), Value> {
    let (query, limit) = search_input(args)?;
    let view = view();
    let visible = view.visible(listed);
    let mut reals = Vec::new();
    let found: Vec<Value> = view
        .index
        .rank(&visible, query, limit)
        .into_iter()
        .map(|d| {
            let t = &view.tools[d];
            let shown = t.get("name").and_then(Value::as_str).unwrap_or_default();
            reals.extend(server.real(shown).map(str::to_owned));
            let mut out = Map::new();
            for k in ["name", "description", "inputSchema"] {
                if let Some(v) = t.get(k) {
                    out.insert(k.into(), v.clone());
                }
            }
            Value::Object(out)
        })
        .collect();
    let structured = json!({"tools": found});
    let answer = json!({
        "content": [{"type": "text", "text": structured.to_string()}],
        "structuredContent": structured,
    });
    Ok((answer, reals))
}

/// `search_tools`' query and limit, checked (V5).
fn search_input(args: &Map<String, Value>) -> Result<(&str, usize), Value> {
    let query = args
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if query.trim().is_empty() {
        return Err(tool_error(texts::SEARCH_NO_QUERY));
    }
    if query.chars().count() > MAX_QUERY_CHARS {
        return Err(tool_error(&texts::search_query_too_long(MAX_QUERY_CHARS)));
    }
    let limit = match args.get("limit") {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        Some(v) => match v.as_u64().filter(|n| (1..=MAX_LIMIT).contains(n)) {
            Some(n) => n,
            None => return Err(tool_error(&texts::search_bad_limit(MAX_LIMIT))),
        },
    };
    Ok((query, limit as usize))
}

/// The two tools a server in search mode lists.
fn search_mode_tools() -> Vec<Value> {
    vec![
        json!({
            "name": SEARCH_TOOLS,
            "description": "Find the tools for a task. Describe the task in a few words; returns the best-matching tools with their names, descriptions and input schemas. Then run one with call_tool.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What the tool should do, in a few words."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": "How many tools to return (default 5)."}
                },
                "required": ["query"]
            }
        }),
        json!({
            "name": CALL_TOOL,
            "description": "Run one tool that search_tools returned, by its name, with its arguments.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The tool's name as search_tools gave it."},
                    "arguments": {"type": "object", "description": "The tool's own arguments, as its input schema says."}
                },
                "required": ["name"]
            }
        }),
    ]
}
