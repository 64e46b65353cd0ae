//! A POST outside any session from a 2026-07-28 client: the envelope and the
//! revision's headers checked (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`,
//! `Mcp-Param-*`), and errors answered with the HTTP statuses the revision gives
//! them.

use super::{Front, OnServer};
use crate::front::http::reply::{header_str, message_reply, Reply, VERSION_HEADER};
use crate::gateway::{rev2026, Early};
use crate::jsonrpc;
use crate::texts as answer;
use hyper::header::HeaderMap;
use hyper::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;

/// What a request's token gives the session: the `[oauth]` token itself (for
/// token exchange) and its verified claims (`caller.claims`, X10).
pub(super) type Credentials = (
    Option<Arc<str>>,
    Option<Arc<serde_json::Map<String, Value>>>,
);

impl Front {
    /// A 2026-07-28 request: its envelope and headers are checked here, at the
    /// edge, so that what it cannot be served for gets the status the revision
    /// gives it (400, 404) with the request's id; then it is served on a session
    /// of its own that ends with it (no Mcp-Session-Id, no GET stream). A
    /// `tools/call` refused here is audited by the tool it names (T6).
    pub(super) async fn stateless(
        &self,
        headers: &HeaderMap,
        msg: Value,
        caller: warden_core::Caller,
        token: Credentials,
        on: &OnServer,
    ) -> Reply {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        if let Some((status, error)) = self.edge_fault(headers, &msg, &caller).await {
            let tool = msg.pointer("/params/name").and_then(Value::as_str);
            if let (Some("tools/call"), Some(tool)) = (msg["method"].as_str(), tool) {
                let call = Early {
                    label: "http:stateless",
                    caller: Some(&caller),
                    server: on.0.as_deref(),
                    tool,
                    arguments: msg.pointer("/params/arguments"),
                };
                let why = error["message"].as_str().unwrap_or_default().to_owned();
                // Boxed: a refusal's audit would set the size of every request's future.
                Box::pin(self.gateway.refused_at_front(call, why)).await;
            }
            return message_reply(status, &jsonrpc::error_response(id, error));
        }
        let who = caller.clone();
        let session = self.sessions.open_stateless(caller);
        if let Some(name) = &on.0 {
            session.client.serve(name);
        }
        self.drain.track_stateless(&session);
        session.client.update_caller(&who, token.0);
        session.client.set_claims(token.1);
        self.request(&session, id, msg, header_str(headers, "traceparent"))
            .await
    }

    /// What a 2026-07-28 request cannot be served for, with the status the
    /// revision gives it and the JSON-RPC error: its envelope's shape, a header
    /// that disagrees with its body, a version or capabilities missing, a
    /// method the revision removed.
    async fn edge_fault(
        &self,
        headers: &HeaderMap,
        msg: &Value,
        caller: &warden_core::Caller,
    ) -> Option<(StatusCode, Value)> {
        let method = msg
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let params = msg.get("params");
        // Without a version in the body there is nothing to compare the header with.
        if let Some(error) = rev2026::envelope_shape_error(params) {
            return Some((StatusCode::BAD_REQUEST, error));
        }
        let version = params
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(rev2026::PROTOCOL_VERSION_KEY))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mismatch = |header: &str| {
            let text = answer::header_mismatch(header);
            let error = json!({"code": rev2026::HEADER_MISMATCH, "message": text});
            Some((StatusCode::BAD_REQUEST, error))
        };
        if header_str(headers, VERSION_HEADER) != Some(version) {
            return mismatch("MCP-Protocol-Version");
        }
        if header_str(headers, "mcp-method") != Some(method) {
            return mismatch("Mcp-Method");
        }
        let named = match method {
            "tools/call" | "prompts/get" => msg.pointer("/params/name"),
            "resources/read" => msg.pointer("/params/uri"),
            _ => None,
        };
        if let Some(Value::String(name)) = named {
            if header_str(headers, "mcp-name")
                .and_then(decode_header_value)
                .as_deref()
                != Some(name.as_str())
            {
                return mismatch("Mcp-Name");
            }
            if method == "tools/call" {
                let args = msg.pointer("/params/arguments");
                if let Some(suffix) = self.param_header_fault(headers, caller, name, args).await {
                    return mismatch(&format!("Mcp-Param-{suffix}"));
                }
            }
        }
        // A version the gateway does not speak, or capabilities missing: 400.
        if let Some(error) = rev2026::envelope_error(params) {
            return Some((StatusCode::BAD_REQUEST, error));
        }
        if rev2026::REMOVED.contains(&method) {
            let error = json!({"code": jsonrpc::METHOD_NOT_FOUND,
                "message": answer::method_not_found(method)});
            return Some((StatusCode::NOT_FOUND, error));
        }
        None
    }

    /// The `Mcp-Param-*` header of a 2026-07-28 call that disagrees with its
    /// arguments (its suffix), for a tool the caller sees whose schema puts
    /// arguments in headers (`x-mcp-header`). A tool the caller does not see is
    /// left to the pipeline, which answers it as unknown (G2).
    pub(super) async fn param_header_fault(
        &self,
        headers: &HeaderMap,
        caller: &warden_core::Caller,
        tool: &str,
        arguments: Option<&Value>,
    ) -> Option<String> {
        let catalogue = self.gateway.catalogue();
        let published = catalogue.get(tool)?.published();
        // Serialised compactly, a declaration that names the keyword spells it so.
        if !published.get().contains("x-mcp-header") {
            return None;
        }
        let params = crate::upstream::header_params(&serde_json::from_str(published.get()).ok()?);
        if params.is_empty() {
            return None;
        }
        let listed = self.gateway.list_tools(Some(caller)).await.ok()?;
        let visible = listed["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|t| t["name"] == tool));
        if !visible {
            return None;
        }
        params.into_iter().find_map(|(arg, suffix)| {
            let body = crate::upstream::header_text(arguments.and_then(|a| a.get(&arg)));
            let name = format!("mcp-param-{}", suffix.to_ascii_lowercase());
            let sent = header_str(headers, name.as_str()).map(str::trim);
            let fits = match (body, sent) {
                (None, None) => true,
                (Some(b), Some(s)) => decode_header_value(s).is_some_and(|d| d == b),
                _ => false,
            };
            (!fits).then_some(suffix)
        })
    }
}

/// Whether a message is a request that names a 2026-07-28 protocol version in
/// its `_meta` envelope (any version: one the gateway does not speak is refused
/// as this revision refuses it).
pub(super) fn carries_envelope(msg: &Value) -> bool {
    msg.get("id").is_some()
        && msg.get("method").is_some()
        && msg
            .get("params")
            .and_then(|p| p.get("_meta"))
            .and_then(|m| m.get(rev2026::PROTOCOL_VERSION_KEY))
            .is_some()
}

/// The status of a 2026-07-28 answer sent as plain JSON: a JSON-RPC error's
/// code decides it ([`rev2026::http_status`]); only the code is read, the rest
/// of the answer is skipped.
pub(super) fn stateless_status(data: &[u8]) -> StatusCode {
    #[derive(serde::Deserialize)]
    struct Answer {
        error: Option<Code>,
    }
    #[derive(serde::Deserialize)]
    struct Code {
        code: i64,
    }
    serde_json::from_slice::<Answer>(data)
        .ok()
        .and_then(|a| a.error)
        .and_then(|e| StatusCode::from_u16(rev2026::http_status(e.code)).ok())
        .unwrap_or(StatusCode::OK)
}

/// An `Mcp-Name` header value: verbatim, or `=?base64?…?=` for names HTTP cannot carry.
pub(super) fn decode_header_value(v: &str) -> Option<String> {
    use base64::Engine;
    match v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        None => Some(v.to_owned()),
        Some(payload) => base64::engine::general_purpose::STANDARD
            .decode(payload)
            .ok()
            .and_then(|b| String::from_utf8(b).ok()),
    }
}
