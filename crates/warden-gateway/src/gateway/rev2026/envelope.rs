//! The envelope a 2026-07-28 request carries in `_meta`: checked, and taken
//! out at the edge before the request is dispatched.

use super::wire::{
    CLIENT_CAPABILITIES_KEY, CLIENT_INFO_KEY, HEADER_MISMATCH, LOG_LEVEL_KEY, MISSING_CAPABILITY,
    PROTOCOL_VERSION_KEY, UNSUPPORTED_VERSION, VERSION,
};
use crate::texts as answer;
use serde_json::{json, Map, Value};

/// What a 2026-07-28 request brought besides its params.
#[derive(Debug, Clone, Default)]
pub struct Envelope {
    pub capabilities: Value,
    pub client_info: Option<Value>,
    /// The least severe log level the client wants for this request, if it opted in.
    pub log_level: Option<u8>,
    pub input_responses: Option<Map<String, Value>>,
    pub request_state: Option<String>,
}

impl Envelope {
    /// The initialize params the gateway offers its upstreams when this client is
    /// the first: its capabilities and who it is, at the newest handshake version.
    pub fn upstream_init(&self, handshake_version: &str) -> Value {
        let mut init =
            json!({"protocolVersion": handshake_version, "capabilities": self.capabilities});
        if let Some(info) = &self.client_info {
            init["clientInfo"] = info.clone();
        }
        init
    }

    /// Whether the client declared a capability on this request.
    pub fn can(&self, capability: &str) -> bool {
        self.capabilities
            .get(capability)
            .is_some_and(Value::is_object)
    }
}

fn invalid_params(message: &str) -> Value {
    json!({"code": crate::jsonrpc::INVALID_PARAMS, "message": message})
}

/// What is wrong with an envelope that names a protocol version, as the JSON-RPC
/// error object to answer with; `None` when it can be served.
fn envelope_fault(meta: &Map<String, Value>) -> Option<Value> {
    let version = meta.get(PROTOCOL_VERSION_KEY)?;
    let Some(version) = version.as_str() else {
        return Some(invalid_params(answer::ENVELOPE_VERSION_NOT_STRING));
    };
    if version != VERSION {
        return Some(json!({"code": UNSUPPORTED_VERSION,
            "message": answer::unsupported_version(version, VERSION),
            "data": {"supported": [VERSION], "requested": version}}));
    }
    match meta.get(CLIENT_CAPABILITIES_KEY) {
        None => Some(invalid_params(answer::ENVELOPE_NO_CAPABILITIES)),
        Some(Value::Object(_)) => None,
        Some(_) => Some(invalid_params(answer::ENVELOPE_CAPABILITIES_NOT_OBJECT)),
    }
}

/// The envelope problem of a request that arrived as 2026-07-28 (over HTTP, its
/// `MCP-Protocol-Version` header says so even when its body does not), checked
/// before it is dispatched: `None` when it can be served. Unlike
/// [`take_envelope`], a request without the envelope is an error here, not a
/// request of an older revision.
pub fn envelope_error(params: Option<&Value>) -> Option<Value> {
    if let Some(e) = envelope_shape_error(params) {
        return Some(e);
    }
    let meta = params?.get("_meta")?.as_object()?;
    envelope_fault(meta)
}

/// The part of [`envelope_error`] that must be answered before the HTTP headers
/// are compared with the body: there is no version in the body to compare with.
pub fn envelope_shape_error(params: Option<&Value>) -> Option<Value> {
    let Some(meta) = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
    else {
        return Some(invalid_params(answer::ENVELOPE_NO_META));
    };
    match meta.get(PROTOCOL_VERSION_KEY) {
        None => Some(invalid_params(answer::ENVELOPE_NO_VERSION)),
        Some(Value::String(_)) => None,
        Some(_) => Some(invalid_params(answer::ENVELOPE_VERSION_NOT_STRING)),
    }
}

/// The HTTP status of a 2026-07-28 answer that is a JSON-RPC error with `code`:
/// the revision makes a method the server does not implement a 404, and a
/// request it cannot take as sent (version, headers) a 400.
pub fn http_status(code: i64) -> u16 {
    match code {
        crate::jsonrpc::METHOD_NOT_FOUND => 404,
        UNSUPPORTED_VERSION | HEADER_MISMATCH | MISSING_CAPABILITY => 400,
        _ => 200,
    }
}

/// Reads (and takes out) the envelope of a request. `Ok(None)`: not this revision.
/// `Err`: the JSON-RPC error object to answer with.
pub fn take_envelope(params: &mut Option<Value>) -> Result<Option<Envelope>, Value> {
    let Some(meta) = params
        .as_mut()
        .and_then(|p| p.get_mut("_meta"))
        .and_then(Value::as_object_mut)
    else {
        return Ok(None);
    };
    if !meta.contains_key(PROTOCOL_VERSION_KEY) {
        return Ok(None);
    }
    if let Some(error) = envelope_fault(meta) {
        return Err(error);
    }
    let capabilities = meta
        .get(CLIENT_CAPABILITIES_KEY)
        .cloned()
        .unwrap_or_else(|| json!({}));
    let client_info = meta.get(CLIENT_INFO_KEY).cloned();
    let log_level = meta
        .get(LOG_LEVEL_KEY)
        .and_then(Value::as_str)
        .and_then(log_rank);
    for key in [
        PROTOCOL_VERSION_KEY,
        CLIENT_INFO_KEY,
        CLIENT_CAPABILITIES_KEY,
        LOG_LEVEL_KEY,
    ] {
        meta.shift_remove(key);
    }
    let empty = meta.is_empty();
    let params = params.as_mut().and_then(Value::as_object_mut);
    let mut envelope = Envelope {
        capabilities,
        client_info,
        log_level,
        ..Envelope::default()
    };
    if let Some(p) = params {
        if empty {
            p.shift_remove("_meta");
        }
        envelope.input_responses = match p.shift_remove("inputResponses") {
            Some(Value::Object(m)) => Some(m),
            _ => None,
        };
        envelope.request_state = match p.shift_remove("requestState") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
    }
    Ok(Some(envelope))
}

pub use crate::gateway::client_session::{log_level_name, log_rank};
