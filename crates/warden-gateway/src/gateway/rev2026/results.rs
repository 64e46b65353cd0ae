//! What a 2026-07-28 result says besides its content: its `resultType`, a
//! list's cache hints, the answer to `server/discover`, and the
//! `InputRequiredResult`s the gateway answers with.

use super::envelope::Envelope;
use super::wire::{APPROVAL_KEY, LIST_TTL_MS, SERVER_INFO_KEY, UPSTREAM_KEY, VERSION};
use crate::texts as answer;
use serde_json::{json, Map, Value};

/// Makes a result say what it is (`resultType`) and, for lists, how long it may
/// be cached and by whom: never longer than the upstreams behind it said (their
/// `ttlMs`, already in the result), nor than the gateway's own [`LIST_TTL_MS`];
/// the tool list always `private` (it is the caller's), others as the upstreams
/// said, `private` when they said nothing.
pub fn stamp_result(method: &str, result: &mut Value) {
    let Some(obj) = result.as_object_mut() else {
        return;
    };
    if !obj.contains_key("resultType") {
        obj.insert("resultType".into(), json!("complete"));
    }
    if matches!(
        method,
        "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list"
    ) {
        let ttl = obj
            .get("ttlMs")
            .and_then(Value::as_u64)
            .map_or(LIST_TTL_MS, |t| t.min(LIST_TTL_MS));
        obj.insert("ttlMs".into(), json!(ttl));
        let said = obj.get("cacheScope").and_then(Value::as_str);
        let scope = match (method, said) {
            ("tools/list", _) | (_, None) => "private",
            (_, Some("public")) => "public",
            _ => "private",
        };
        obj.insert("cacheScope".into(), json!(scope));
    }
}

/// The cache hints of a list merged from several upstreams' answers: the shortest
/// lifetime any of them allows, and `public` only when every one of them says so.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheHint {
    pub ttl_ms: Option<u64>,
    /// The scope the upstreams that gave one agree on (`private` if any said so).
    pub scope: Option<&'static str>,
    /// Some upstream gave no scope.
    pub unscoped: bool,
}

impl CacheHint {
    /// Takes in one upstream's list result.
    pub fn absorb(&mut self, result: &Value) {
        if let Some(t) = result.get("ttlMs").and_then(Value::as_u64) {
            self.ttl_ms = Some(self.ttl_ms.map_or(t, |mine| mine.min(t)));
        }
        match result.get("cacheScope").and_then(Value::as_str) {
            Some("public") if self.scope.is_none() => self.scope = Some("public"),
            Some("public") => {}
            Some(_) => self.scope = Some("private"),
            None => self.unscoped = true,
        }
    }

    /// The scope to write: none when no upstream gave one (an older client's
    /// list stays as its upstreams made it); `public` only when every upstream
    /// said so, as one that gave no scope promised nothing about who may share
    /// its list.
    pub fn merged_scope(&self) -> Option<&'static str> {
        self.scope
            .map(|s| if self.unscoped { "private" } else { s })
    }

    /// Writes the hints into a merged result (nothing when no upstream gave any).
    pub fn apply(&self, result: &mut Map<String, Value>) {
        if let Some(t) = self.ttl_ms {
            result.insert("ttlMs".into(), json!(t));
        }
        if let Some(s) = self.merged_scope() {
            result.insert("cacheScope".into(), json!(s));
        }
    }
}

/// The answer to `server/discover`.
pub fn discover(capabilities: Map<String, Value>, instructions: Option<String>) -> Value {
    let mut result = json!({
        "resultType": "complete",
        "supportedVersions": [VERSION],
        "capabilities": capabilities,
        "ttlMs": LIST_TTL_MS,
        "cacheScope": "public",
        "_meta": {SERVER_INFO_KEY: {"name": "mcp-warden", "version": env!("CARGO_PKG_VERSION")}},
    });
    if let Some(i) = instructions {
        result["instructions"] = Value::String(i);
    }
    result
}

/// The `InputRequiredResult` that puts an upstream's request to the client.
pub fn input_required(request: &Value, state: String) -> Value {
    let method = request.get("method").cloned().unwrap_or(Value::Null);
    let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
    json!({
        "resultType": "input_required",
        "inputRequests": {UPSTREAM_KEY: {"method": method, "params": params}},
        "requestState": state,
    })
}

/// The `InputRequiredResult` that asks the client's user to approve a call.
pub fn approval_required(question: Value, state: String) -> Value {
    json!({
        "resultType": "input_required",
        "inputRequests": {APPROVAL_KEY: {"method": "elicitation/create", "params": question}},
        "requestState": state,
    })
}

/// The response an upstream's request gets from a client's retry: its answer
/// under [`UPSTREAM_KEY`], or an error when the retry brought none.
pub fn upstream_answer(asked: Value, envelope: &Envelope) -> Value {
    match envelope
        .input_responses
        .as_ref()
        .and_then(|r| r.get(UPSTREAM_KEY))
    {
        Some(result) => crate::jsonrpc::response(asked, result.clone()),
        None => crate::jsonrpc::error(
            asked,
            crate::jsonrpc::INTERNAL_ERROR,
            answer::CLIENT_DID_NOT_ANSWER,
        ),
    }
}
