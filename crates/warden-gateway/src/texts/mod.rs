//! The gateway's own protocol texts: JSON-RPC errors outside the tool-call
//! pipeline, the HTTP front's refusals, the 2026-07-28 envelope's errors, and the
//! refusals of the policies the gateway adds after the pipeline (quotas, flows).
//!
//! Texts about a tool call itself (unknown tool, unknown parameters, the generic
//! internal error …) belong to the pipeline and live in [`warden_core::answer`].
//! Like those, every text here is tested byte for byte: clients and models match
//! on them.

mod http;
#[cfg(test)]
mod tests;
mod withheld;

pub use http::*;
use warden_core::answer::shown;
pub use withheld::*;

// V4: tool search on a virtual server in search mode. Each is a tool error the
// model can act on; hidden and absent tools get the same one (G2).

/// `search_tools` without a query, or one of blanks only.
pub const SEARCH_NO_QUERY: &str =
    "search_tools needs a query: say in a few words what the tool should do, as a string in 'query'.";

/// A query longer than `max` characters.
pub fn search_query_too_long(max: usize) -> String {
    format!("The query is too long: use at most {max} characters, a few words about the task.")
}

/// A `limit` that is no whole number from 1 to `max`.
pub fn search_bad_limit(max: u64) -> String {
    format!("'limit' must be a whole number from 1 to {max}; leave it out for 5.")
}

/// `call_tool` without a tool name.
pub const CALL_TOOL_NO_NAME: &str =
    "call_tool needs the name of a tool that search_tools returned, as a string in 'name'.";

/// `call_tool` with `arguments` that are no object.
pub const CALL_TOOL_BAD_ARGUMENTS: &str =
    "call_tool's 'arguments' must be an object holding the tool's own arguments.";

/// `call_tool` of a name no tool the caller may see has here.
pub fn call_tool_unknown(name: &str) -> String {
    format!(
        "No tool '{}' is available here; call search_tools to find the tools you can call.",
        shown(name)
    )
}

// P2 `ask`: what opens the approval question for a tool that differs from the
// pins lock (the question itself is H5's).

/// The admin listener was sent a method it does not take (O3).
pub const ADMIN_METHOD: &str = "Method not allowed: the console takes GET, HEAD and POST.\n";

/// `pins approve` (and the console's) named tools no upstream lists or locks.
pub fn pins_unmatched(names: &[String]) -> String {
    format!(
        "no upstream lists or locks: {}; the lock is unchanged",
        names.join(", ")
    )
}

/// H6: `approver` on something that never asks (`{what}`: rule, flow rule, guard on arguments).
pub const APPROVER_NOT_ASKING: &str =
    "approver names who answers a question; only an ask {what} asks one (H6)";

/// P4: names to reject that are no tool listed now differing from the lock.
pub fn pins_unrejectable(names: &[String]) -> String {
    format!(
        "nothing to reject under: {}; only a tool listed now that differs from the lock can be rejected; the lock is unchanged",
        names.join(", ")
    )
}

/// The tool's reviewed `fields` changed since the lock was written.
pub fn pin_changed(tool: &str, fields: &[&str]) -> String {
    format!(
        "Tool '{}' changed since it was reviewed ({}); its new definition is not approved.",
        shown(tool),
        fields.join(", ")
    )
}

/// The lock has no tool of this name.
pub fn pin_added(tool: &str) -> String {
    format!(
        "Tool '{}' was added since the tools were reviewed; it is not approved.",
        shown(tool)
    )
}

/// The tool is one the lock holds as `from`, under a new name.
pub fn pin_renamed(tool: &str, from: &str) -> String {
    format!(
        "Tool '{}' is '{}' renamed since it was reviewed; the new name is not approved.",
        shown(tool),
        shown(from)
    )
}

// JSON-RPC errors outside the pipeline.

/// An upstream the listing needs is down or never listed (never a shorter list).
pub fn listing_failed(upstreams: &[String]) -> String {
    let names: Vec<String> = upstreams
        .iter()
        .map(|n| format!("'{}'", shown(n)))
        .collect();
    format!(
        "Listing failed: upstream {} is not available, so the list would be incomplete. Retry shortly.",
        names.join(", ")
    )
}

/// A relayed request (not a tool call) got no answer from its upstream.
pub const UPSTREAM_NO_ANSWER: &str =
    "Internal error: the server behind the gateway did not answer.";
/// G8: a caller's own child of a child-process upstream cannot be started, since
/// as many as may run are all busy with other callers' requests.
pub const CALLER_PROCESSES_BUSY: &str =
    "Error: The server of this tool is busy with as many callers as it may serve at once. Retry shortly.";
/// An upstream answered with neither a result nor an error.
pub const UPSTREAM_EMPTY_ANSWER: &str =
    "Internal error: the server behind the gateway sent an empty answer.";
/// An upstream asked the client something, but no client is connected.
pub const NO_CLIENT: &str = "No client is connected to the gateway.";
/// An upstream asked something, and several clients' calls wait on it: the
/// gateway will not guess whose it is.
pub const UNTIED_REQUEST: &str =
    "The gateway cannot tell which of its clients this request is for, so it was not relayed.";
/// To an upstream: the client did not declare the capability its request needs.
pub const CLIENT_LACKS_CAPABILITY: &str =
    "The client did not declare the capability this request needs.";
/// To an upstream: the client did not answer its request (or never came back).
pub const CLIENT_DID_NOT_ANSWER: &str = "The client did not answer this request.";
/// A 2026-07-28 retry whose `requestState` the gateway did not seal for this
/// caller and request, or that expired (-32602).
pub const REQUEST_STATE_REFUSED: &str = "Invalid params: requestState was not issued by this gateway for this caller and request, or it expired. Send the request again without requestState and inputResponses.";
/// An upstream's `InputRequiredResult` without input requests to put to the client.
pub const INPUT_REQUESTS_MISSING: &str = "the upstream asked for input without inputRequests";
/// A request whose param `what` is missing or not what the method takes (-32602).
pub fn invalid_param(what: &str) -> String {
    format!("Invalid params: '{what}' is missing or not valid.")
}
/// Logged: an upstream's input request that cannot be put to this client.
pub const INPUT_NOT_BRIDGEABLE: &str =
    "the upstream asked for input the client cannot be asked for";
/// Logged: an upstream that asked for input round after round.
pub const INPUT_ROUNDS_EXHAUSTED: &str = "the upstream kept asking for input (8 rounds)";
/// A 2026-07-28 retry whose earlier round the gateway no longer holds.
pub const INPUT_ROUND_EXPIRED: &str =
    "Error: This call waited too long for its input and was ended. Call the tool again.";
/// An upstream asked something of a client that speaks 2026-07-28, where servers
/// send clients no requests (the gateway does not bridge them into input requests).
pub const CLIENT_TAKES_NO_REQUESTS: &str =
    "The client speaks MCP 2026-07-28, which takes no requests from servers; this request cannot reach it.";

/// Why a message is not a JSON-RPC 2.0 message (completes [`invalid_request`]).
pub const NOT_A_BATCH: &str =
    "JSON-RPC batches are not supported by MCP; send one message per line";
pub const NOT_AN_OBJECT: &str = "a JSON-RPC message must be an object";
pub const NO_VERSION: &str = "the message must carry \"jsonrpc\": \"2.0\"";
pub const BAD_ID: &str = "a request id must be a string or a number";
pub const BAD_METHOD: &str = "\"method\" must be a string";
pub const NO_KIND: &str = "the message is neither a request, a notification nor a response";

/// A request whose id is still in use by a running request of the session (over
/// HTTP the error of a 400).
pub const ID_IN_USE: &str = "a request with this id is still running in this session";

pub fn invalid_request(why: &str) -> String {
    format!("Invalid request: {why}.")
}

pub fn parse_error(detail: &str) -> String {
    format!("Parse error: {detail}.")
}

pub fn request_too_large(bytes: usize, max: usize) -> String {
    format!("Request too large: {bytes} bytes; the gateway accepts at most {max} (gateway.max_message_bytes).")
}

pub fn method_not_found(method: &str) -> String {
    format!("Method not found: {}", shown(method))
}

// The 2026-07-28 revision's envelope (the gateway's hop).

/// -32602: the protocol version in `_meta` is not a string.
pub const ENVELOPE_VERSION_NOT_STRING: &str =
    "Invalid params: _meta[\"io.modelcontextprotocol/protocolVersion\"] must be a string.";
/// -32602: a 2026-07-28 request without the client's capabilities.
pub const ENVELOPE_NO_CAPABILITIES: &str = "Invalid params: _meta is missing \"io.modelcontextprotocol/clientCapabilities\"; a 2026-07-28 request carries the client's capabilities.";
/// -32602: the client's capabilities in `_meta` are not an object.
pub const ENVELOPE_CAPABILITIES_NOT_OBJECT: &str =
    "Invalid params: _meta[\"io.modelcontextprotocol/clientCapabilities\"] must be an object.";
/// -32602 over HTTP: a request sent as 2026-07-28 (by its header) without a `_meta` object.
pub const ENVELOPE_NO_META: &str = "Invalid params: a 2026-07-28 request carries _meta with \"io.modelcontextprotocol/protocolVersion\" and \"io.modelcontextprotocol/clientCapabilities\"; this one has no _meta object.";
/// -32602 over HTTP: a request sent as 2026-07-28 (by its header) whose `_meta` names no version.
pub const ENVELOPE_NO_VERSION: &str = "Invalid params: _meta is missing \"io.modelcontextprotocol/protocolVersion\"; a 2026-07-28 request names its protocol version.";

/// -32022: a protocol version the gateway does not speak.
pub fn unsupported_version(requested: &str, speaks: &str) -> String {
    format!(
        "Unsupported protocol version '{}'; this gateway speaks {speaks} (or the initialize handshake for 2025-11-25 and earlier).",
        shown(requested)
    )
}

/// -32020 over HTTP: a header that disagrees with the body.
pub fn header_mismatch(header: &str) -> String {
    format!("Bad request: the {header} header does not match the request body.")
}
