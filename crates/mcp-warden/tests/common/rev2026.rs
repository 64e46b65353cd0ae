//! What the 2026-07-28 revision's tests share: the per-request envelope and a
//! call's params carrying it, a request POSTed as a 2026-07-28 client does, the
//! exact body of a JSON-RPC error answer, and the fixture with `fx.echo` under
//! an `ask` rule (the approval these tests retry with a sealed state).

use super::fixture_config;
use super::http::{HttpWarden, Reply};
use serde_json::{json, Value};

/// The revision these tests speak.
pub const V: &str = "2026-07-28";

/// A 2026-07-28 request's `_meta` envelope, with the client's capabilities `caps`.
pub fn envelope(caps: Value) -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": V,
           "io.modelcontextprotocol/clientCapabilities": caps,
           "io.modelcontextprotocol/clientInfo": {"name": "modern-test", "version": "1"}})
}

/// `params` with the envelope merged into their `_meta`.
pub fn with_envelope(mut params: Value, caps: Value) -> Value {
    let meta = params
        .as_object_mut()
        .unwrap()
        .entry("_meta")
        .or_insert(json!({}));
    for (k, v) in envelope(caps).as_object().unwrap() {
        meta[k] = v.clone();
    }
    params
}

/// The fixture with `fx.echo` under an `ask` rule for every caller.
pub fn ask_config() -> String {
    fixture_config(
        "",
        "[[rule]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\neffect = \"ask\"\n",
    )
}

/// POSTs a request the way a 2026-07-28 client does: its version and method in
/// headers, no session.
pub fn post_2026(
    w: &HttpWarden,
    version: &str,
    id: Value,
    method: &str,
    params: Option<Value>,
) -> Reply {
    let mut msg = json!({"jsonrpc": "2.0", "id": id, "method": method});
    if let Some(p) = params {
        msg["params"] = p;
    }
    w.post(
        &[("MCP-Protocol-Version", version), ("Mcp-Method", method)],
        &msg,
    )
}

/// The exact body of a JSON-RPC error answer.
pub fn error_answer(id: Value, error: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": error}).to_string()
}
