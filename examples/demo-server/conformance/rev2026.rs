//! The 2026-07-28 revision of the fixture (stateless). Every request carries its
//! envelope in `_meta` (the protocol version and the client's capabilities), there
//! is no `initialize`, `server/discover` says what the server offers, every result
//! says its `resultType` and cacheable ones how long they may be kept (`ttlMs`,
//! `cacheScope`), input from the client is asked with an `InputRequiredResult`
//! (`input.rs`), and list-changed notifications travel on `subscriptions/listen`
//! streams. Over HTTP the `Mcp-Method`, `Mcp-Name`, `MCP-Protocol-Version` and
//! `Mcp-Param-*` headers must agree with the body (-32020, HTTP 400).
//!
//! Requests of the older revisions never come here ([`speaks`] tells them apart),
//! so what they get is unchanged.

use super::input::{self, error, MISSING_CAPABILITY};
use super::{call, listing, send, text, tools, Out, Waiting};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hyper::HeaderMap;
use serde_json::{json, Map, Value};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

pub const VERSION: &str = "2026-07-28";
const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The revisions with `initialize` and sessions: a request that names one in its
/// `MCP-Protocol-Version` header and has no envelope is theirs.
const SESSION_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// Methods this revision removed: -32601 (HTTP 404) like any unknown method.
const REMOVED: [&str; 5] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];
const HEADER_MISMATCH: i64 = -32020;
const UNSUPPORTED_VERSION: i64 = -32022;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

/// How a request is answered.
pub enum Answer {
    /// At once: this response, with this HTTP status.
    Now(u16, Value),
    /// Later, through the request's sink (an SSE stream over HTTP), after the
    /// notifications the call sends while it runs.
    Later,
    /// A `subscriptions/listen` stream: acknowledged, then open until the client
    /// leaves.
    Listen,
}

/// The HTTP status of an error answer, as the revision maps them.
fn status(code: i64) -> u16 {
    match code {
        METHOD_NOT_FOUND => 404,
        HEADER_MISMATCH | MISSING_CAPABILITY | UNSUPPORTED_VERSION => 400,
        _ => 200,
    }
}

fn meta(msg: &Value) -> Option<&Map<String, Value>> {
    msg.get("params")?.get("_meta")?.as_object()
}

/// A header's value without the whitespace around it (RFC 9110 §5.5); a value
/// that is not visible ASCII counts as absent.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let v = headers.get(name)?.to_str().ok()?;
    Some(v.trim_matches([' ', '\t']))
}

/// Whether a request speaks 2026-07-28: its envelope names a version, it is
/// `server/discover`, or (over HTTP, outside a session) its `MCP-Protocol-Version`
/// header names a revision without sessions.
pub fn speaks(msg: &Value, headers: Option<&HeaderMap>) -> bool {
    if msg.get("method").is_none() {
        return false;
    }
    if meta(msg).is_some_and(|m| m.contains_key(PROTOCOL_VERSION))
        || msg["method"] == "server/discover"
    {
        return true;
    }
    let Some(h) = headers else {
        return false;
    };
    if h.contains_key("mcp-session-id") {
        return false;
    }
    header(h, "mcp-protocol-version").is_some_and(|v| !SESSION_VERSIONS.contains(&v))
}

/// The error response to `msg` with `error`.
fn refusal(msg: &Value, error: Value) -> Value {
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

fn mismatch(message: &str) -> Value {
    error(HEADER_MISMATCH, message, None)
}

/// What `params` names that the `Mcp-Name` header repeats.
fn named(method: &str, params: &Value) -> Option<String> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" => "uri",
        _ => return None,
    };
    params.get(key)?.as_str().map(str::to_owned)
}

/// Checks a request before it is served: the envelope, and over HTTP the headers
/// that repeat the body. `Err` is the response to send, with its HTTP status (400).
pub fn admit(msg: &Value, headers: Option<&HeaderMap>) -> Result<(), Value> {
    let method = msg["method"].as_str().unwrap_or_default();
    let params = msg.get("params").cloned().unwrap_or(json!({}));
    if let Some(h) = headers {
        if header(h, "mcp-method") != Some(method) {
            return Err(refusal(
                msg,
                mismatch("The Mcp-Method header must name the request's method."),
            ));
        }
        let name = named(method, &params);
        if header(h, "mcp-name") != name.as_deref() {
            return Err(refusal(msg, mismatch(
                "The Mcp-Name header must repeat the request's params.name (params.uri for resources/read).",
            )));
        }
    }
    let Some(meta) = meta(msg) else {
        return Err(refusal(msg, error(INVALID_PARAMS,
            "The request has no _meta envelope: it needs io.modelcontextprotocol/protocolVersion and io.modelcontextprotocol/clientCapabilities.", None)));
    };
    let Some(version) = meta.get(PROTOCOL_VERSION).and_then(Value::as_str) else {
        return Err(refusal(
            msg,
            error(
                INVALID_PARAMS,
                "_meta needs io.modelcontextprotocol/protocolVersion, a string.",
                None,
            ),
        ));
    };
    if !meta.get(CLIENT_CAPABILITIES).is_some_and(Value::is_object) {
        return Err(refusal(
            msg,
            error(
                INVALID_PARAMS,
                "_meta needs io.modelcontextprotocol/clientCapabilities, an object.",
                None,
            ),
        ));
    }
    if let Some(h) = headers {
        if header(h, "mcp-protocol-version") != Some(version) {
            return Err(refusal(
                msg,
                mismatch("The MCP-Protocol-Version header must name the version in _meta."),
            ));
        }
    }
    if version != VERSION {
        return Err(refusal(
            msg,
            error(
                UNSUPPORTED_VERSION,
                &format!("This server does not speak protocol version {version}."),
                Some(json!({"supported": [VERSION], "requested": version})),
            ),
        ));
    }
    if let (Some(h), "tools/call") = (headers, method) {
        param_headers(h, &params).map_err(|e| refusal(msg, e))?;
    }
    Ok(())
}

/// The tool whose argument travels in a custom header too (`x-mcp-header`).
const HEADER_TOOL: &str = "test_header_param";

fn header_tool() -> Value {
    json!({"name": HEADER_TOOL, "description": "Echoes its region, which the client also sends in the Mcp-Param-Region header.",
        "inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "description": "A region name", "x-mcp-header": "Region"}},
            "required": ["region"]}})
}

/// A custom header's value: `=?base64?…?=` is decoded (strictly: a bad padding or
/// character is an error), anything else is taken as it is.
fn decoded(value: &str) -> Option<String> {
    match value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    {
        Some(b64) => String::from_utf8(STANDARD.decode(b64).ok()?).ok(),
        None => Some(value.to_owned()),
    }
}

/// The `Mcp-Param-*` headers of a call to a tool that declares them must be
/// there and agree with the arguments.
fn param_headers(h: &HeaderMap, params: &Value) -> Result<(), Value> {
    if params["name"] != HEADER_TOOL {
        return Ok(());
    }
    let tool = header_tool();
    let Some(props) = tool["inputSchema"]["properties"].as_object() else {
        return Ok(());
    };
    for (arg, def) in props {
        let Some(suffix) = def["x-mcp-header"].as_str() else {
            continue;
        };
        let body = match &params["arguments"][arg] {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        };
        let sent = header(h, &format!("mcp-param-{}", suffix.to_ascii_lowercase()));
        let fits = match (body, sent) {
            (None, None) => true,
            (Some(b), Some(s)) => decoded(s).is_some_and(|d| d == b),
            _ => false,
        };
        if !fits {
            return Err(mismatch(&format!(
                "The Mcp-Param-{suffix} header must carry the argument {arg} (=?base64?…?= for base64)."
            )));
        }
    }
    Ok(())
}

/// The result `result` of `method`, stamped as the revision wants.
fn stamped(method: &str, mut result: Value) -> Value {
    if let Some(obj) = result.as_object_mut() {
        obj.entry("resultType").or_insert(json!("complete"));
        let hint = match method {
            "server/discover" => Some((300_000, "public")),
            "tools/list" | "prompts/list" => Some((60_000, "public")),
            "resources/list" | "resources/templates/list" => Some((30_000, "public")),
            "resources/read" => Some((10_000, "public")),
            _ => None,
        };
        if let Some((ttl, scope)) = hint {
            obj.entry("ttlMs").or_insert(json!(ttl));
            obj.entry("cacheScope").or_insert(json!(scope));
        }
    }
    result
}

fn answered(msg: &Value, method: &str, outcome: Result<Value, Value>) -> Answer {
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    match outcome {
        Ok(result) => Answer::Now(
            200,
            json!({"jsonrpc": "2.0", "id": id, "result": stamped(method, result)}),
        ),
        Err(e) => Answer::Now(status(e["code"].as_i64().unwrap_or(0)), refusal(msg, e)),
    }
}

fn discover() -> Value {
    if super::like_reference() {
        return json!({"supportedVersions": [VERSION],
            "capabilities": {"tools": {"listChanged": true}, "prompts": {"listChanged": true}, "resources": {}},
            "_meta": {SERVER_INFO: {"name": "warden-conformance-upstream", "version": "0.1.0"}}});
    }
    json!({"supportedVersions": [VERSION],
        "capabilities": {"tools": {"listChanged": true}, "resources": {"listChanged": true},
            "prompts": {"listChanged": true}, "logging": {}, "completions": {}},
        "_meta": {SERVER_INFO: {"name": "warden-conformance-upstream", "version": "0.1.0"}}})
}

/// The 2020-12 schema of `json_schema_2020_12_tool` in this revision, which lets a
/// tool's input schema use the whole vocabulary (SEP-2106): an `$anchor` in
/// `$defs`, composition (`allOf`/`anyOf`) and conditionals (`if`/`then`/`else`).
fn schema_2020_12() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {"address": {"$anchor": "postalAddress", "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
        "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"},
            "reach": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"}, "email": {"type": "string"}},
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"reach": {"const": "phone"}}, "required": ["reach"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": false})
}

/// The tools of the older revisions, the input tools and the diagnostic tools.
/// The 2026-07-28 tool list, built once: a call looks its tool up in it, and
/// building it for every call cost this server more than twice the processor
/// time per call of its 2025-11-25 path (the gateway's HTTP bench).
fn tools2026() -> &'static Value {
    static ALL: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    ALL.get_or_init(build_tools2026)
}

fn build_tools2026() -> Value {
    let mut all = tools().as_array().cloned().unwrap_or_default();
    for t in &mut all {
        if t["name"] == "json_schema_2020_12_tool" {
            t["inputSchema"] = schema_2020_12();
        }
    }
    all.extend(input::tools());
    let none = || json!({"type": "object", "properties": {}});
    for (name, description) in [
        (
            "test_logging_tool",
            "Logs one message, only when the request's _meta asks for a log level.",
        ),
        (
            "test_trigger_tool_change",
            "Notifies open subscriptions that the tool list changed.",
        ),
        (
            "test_trigger_prompt_change",
            "Notifies open subscriptions that the prompt list changed.",
        ),
        (
            "test_trigger_resource_change",
            "Notifies open subscriptions that the resource list changed.",
        ),
    ] {
        all.push(json!({"name": name, "description": description, "inputSchema": none()}));
    }
    all.push(header_tool());
    Value::Array(all)
}

/// Serves a request admitted by [`admit`]; `Later` answers go through `out`.
pub fn serve(msg: &Value, out: &Out, waiting: &Waiting, next: &Arc<AtomicU64>) -> Answer {
    let method = msg["method"].as_str().unwrap_or_default();
    let params = msg.get("params").cloned().unwrap_or(json!({}));
    let caps = meta(msg)
        .and_then(|m| m.get(CLIENT_CAPABILITIES))
        .cloned()
        .unwrap_or(json!({}));
    match method {
        "server/discover" => answered(msg, method, Ok(discover())),
        "subscriptions/listen" => listen(msg, &params, out),
        "tools/list" => answered(msg, method, Ok(json!({"tools": tools2026().clone()}))),
        "tools/call" => tools_call(msg, &params, &caps, out, waiting, next),
        "prompts/get" if params["name"] == input::PROMPT => {
            answered(msg, method, input::prompt(&params, &caps))
        }
        _ if REMOVED.contains(&method) => answered(msg, method, Err(not_found(method))),
        _ => {
            let outcome = match listing(method, &params) {
                Some(Ok(mut result)) => {
                    if method == "prompts/list" {
                        if let Some(p) = result["prompts"].as_array_mut() {
                            p.push(json!({"name": input::PROMPT,
                                "description": "Asks the client for context before it is built."}));
                        }
                    }
                    Ok(result)
                }
                // SEP-2164: an unknown resource is -32602 with its uri (was -32002).
                Some(Err((-32002, message))) => Err(error(
                    INVALID_PARAMS,
                    message,
                    Some(json!({"uri": params["uri"]})),
                )),
                Some(Err((code, message))) => Err(error(code, message, None)),
                None => Err(not_found(method)),
            };
            answered(msg, method, outcome)
        }
    }
}

fn not_found(method: &str) -> Value {
    error(
        METHOD_NOT_FOUND,
        &format!("Method not found: {method}"),
        None,
    )
}

/// The severity rank of a log level (RFC 5424 order, debug lowest).
fn log_rank(level: &str) -> Option<usize> {
    [
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    ]
    .iter()
    .position(|l| *l == level)
}

fn tools_call(
    msg: &Value,
    params: &Value,
    caps: &Value,
    out: &Out,
    waiting: &Waiting,
    next: &Arc<AtomicU64>,
) -> Answer {
    let name = params["name"].as_str().unwrap_or_default().to_owned();
    if let Some(outcome) = input::call(&name, params, caps) {
        return answered(msg, "tools/call", outcome);
    }
    let said = |t: &str| Ok(json!({"content": [text(t)]}));
    match name.as_str() {
        "test_trigger_tool_change"
        | "test_trigger_prompt_change"
        | "test_trigger_resource_change" => {
            let kind = name
                .trim_start_matches("test_trigger_")
                .trim_end_matches("_change");
            notify(&format!("{kind}s"));
            return answered(
                msg,
                "tools/call",
                said(&format!("Notified the {kind} list change.")),
            );
        }
        HEADER_TOOL => {
            let region = params["arguments"]["region"].as_str().unwrap_or_default();
            return answered(msg, "tools/call", said(&format!("Region: {region}")));
        }
        _ => {}
    }
    let known = tools2026()
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["name"] == name.as_str()));
    if !known {
        return answered(
            msg,
            "tools/call",
            Err(error(
                INVALID_PARAMS,
                &format!("Unknown tool: {name}"),
                None,
            )),
        );
    }
    // The rest may take a while or send notifications: on a thread of their own.
    let (id, params) = (msg["id"].clone(), params.clone());
    let (out, waiting, next) = (out.clone(), waiting.clone(), next.clone());
    std::thread::spawn(move || {
        let result = match name.as_str() {
            "test_logging_tool" | "test_tool_with_logging" => logging(&name, &params, &out),
            _ => call(&out, &waiting, &next, &name, &params),
        };
        let answer = json!({"jsonrpc": "2.0", "id": id, "result": stamped("tools/call", result)});
        send(&out, &answer);
    });
    Answer::Later
}

/// The logging tools: a message goes out only when the request asked for a log
/// level that lets `info` through.
fn logging(name: &str, params: &Value, out: &Out) -> Value {
    let wanted = params["_meta"][LOG_LEVEL].as_str().and_then(log_rank);
    let logs = wanted.is_some_and(|w| w <= 1);
    let messages: &[&str] = if name == "test_logging_tool" {
        &["Logging evaluated"]
    } else {
        &[
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed",
        ]
    };
    if logs {
        for m in messages {
            send(
                out,
                &json!({"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": "info", "logger": "conformance", "data": m}}),
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let said = if logs {
        "Logged at info."
    } else {
        "Nothing logged: the request asked for no log level."
    };
    json!({"content": [text(said)]})
}

/// An open `subscriptions/listen` stream.
struct Listener {
    id: Value,
    out: Out,
    /// The kinds of list change it asked for: "tools", "prompts", "resources".
    kinds: Vec<&'static str>,
}

fn listeners() -> &'static Mutex<Vec<Listener>> {
    static LISTENERS: OnceLock<Mutex<Vec<Listener>>> = OnceLock::new();
    LISTENERS.get_or_init(Mutex::default)
}

const FILTERS: [(&str, &str); 3] = [
    ("toolsListChanged", "tools"),
    ("promptsListChanged", "prompts"),
    ("resourcesListChanged", "resources"),
];

/// Opens a subscription: acknowledges what of the filter the server honours (list
/// changes; not `resourceSubscriptions`) and keeps the stream for [`notify`].
fn listen(msg: &Value, params: &Value, out: &Out) -> Answer {
    let id = msg["id"].clone();
    let mut honoured = Map::new();
    let mut kinds = Vec::new();
    for (flag, kind) in FILTERS {
        if params["notifications"][flag] == true {
            honoured.insert(flag.to_owned(), json!(true));
            kinds.push(kind);
        }
    }
    send(
        out,
        &json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {SUBSCRIPTION_ID: id}, "notifications": honoured}}),
    );
    lock().push(Listener {
        id,
        out: out.clone(),
        kinds,
    });
    Answer::Listen
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Listener>> {
    listeners().lock().unwrap_or_else(|e| e.into_inner())
}

/// Tells every open subscription that asked for it that the `kind` list changed.
pub fn notify(kind: &str) {
    let mut open = lock();
    open.retain(|l| l.out.open());
    for l in open.iter().filter(|l| l.kinds.contains(&kind)) {
        l.out.send(
            &json!({"jsonrpc": "2.0", "method": format!("notifications/{kind}/list_changed"),
            "params": {"_meta": {SUBSCRIPTION_ID: l.id}}}),
        );
    }
}

/// `notifications/cancelled` ends the subscription it names on the same channel
/// (stdio; over HTTP a stream ends when the client closes it).
pub fn cancelled(msg: &Value, out: &Out) {
    if msg["method"] != "notifications/cancelled" {
        return;
    }
    let id = &msg["params"]["requestId"];
    lock().retain(|l| !(l.id == *id && Arc::ptr_eq(&l.out, out)));
}

/// Whether an HTTP request of this revision comes from a page the server should
/// not answer (DNS rebinding): its Host or Origin names neither a loopback name
/// nor the address the server listens on.
pub fn foreign(h: &HeaderMap, local: &std::net::SocketAddr) -> bool {
    let ip = local.ip().to_string();
    let allowed = |host: &str| {
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => host.rsplit_once(':').map_or(host, |(n, _)| n),
        };
        matches!(name, "localhost" | "127.0.0.1" | "::1") || name == ip
    };
    let host_bad = header(h, "host").is_some_and(|v| !allowed(v));
    let origin_bad = header(h, "origin").is_some_and(|o| {
        let rest = o.split_once("://").map_or(o, |(_, r)| r);
        !allowed(rest.split('/').next().unwrap_or_default())
    });
    host_bad || origin_bad
}

/// Serves one message of this revision over stdio.
pub fn over_stdio(msg: &Value, out: &Out, waiting: &Waiting, next: &Arc<AtomicU64>) {
    if msg.get("id").is_none() {
        cancelled(msg, out);
        return;
    }
    if let Err(answer) = admit(msg, None) {
        send(out, &answer);
        return;
    }
    if let Answer::Now(_, answer) = serve(msg, out, waiting, next) {
        send(out, &answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_header_values_decode_strictly() {
        assert_eq!(decoded("=?base64?SGVsbG8=?=").as_deref(), Some("Hello"));
        assert_eq!(decoded("=?base64?SGVsbG8?="), None);
        assert_eq!(decoded("=?base64?SGVs!!!bG8=?="), None);
        assert_eq!(decoded("SGVsbG8=").as_deref(), Some("SGVsbG8="));
    }

    #[test]
    fn only_requests_with_the_envelope_or_a_sessionless_version_speak_2026() {
        let envelope = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
            "params": {"_meta": {PROTOCOL_VERSION: VERSION, CLIENT_CAPABILITIES: {}}}});
        assert!(speaks(&envelope, None));
        let old = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
            "params": {"_meta": {"progressToken": 1}}});
        assert!(!speaks(&old, None));
        let mut h = HeaderMap::new();
        h.insert("mcp-protocol-version", "2025-11-25".parse().unwrap());
        assert!(!speaks(&old, Some(&h)));
        h.insert("mcp-protocol-version", VERSION.parse().unwrap());
        assert!(speaks(&old, Some(&h)));
        h.insert("mcp-session-id", "s".parse().unwrap());
        assert!(!speaks(&old, Some(&h)));
    }
}
