//! The gateway's own protocol texts: JSON-RPC errors outside the tool-call
//! pipeline, the HTTP front's refusals, the 2026-07-28 envelope's errors, and the
//! refusals of the policies the gateway adds after the pipeline (quotas, flows).
//!
//! Texts about a tool call itself (unknown tool, unknown parameters, the generic
//! internal error …) belong to the pipeline and live in [`warden_core::answer`].
//! Like those, every text here is tested byte for byte: clients and models match
//! on them.

use warden_core::answer::shown;

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

// The HTTP front's own answers (each the JSON-RPC error message of an HTTP error).

/// 401: no `Authorization` header.
pub const HTTP_NO_CREDENTIAL: &str =
    "Unauthorized: send 'Authorization: Bearer <API key or token>'.";
/// 401: a scheme other than Bearer.
pub const HTTP_NOT_BEARER: &str = "Unauthorized: use the Bearer scheme.";
/// 401: neither a known key nor a valid token.
pub const HTTP_BAD_CREDENTIAL: &str = "Unauthorized: the credential was not accepted.";
pub const HTTP_TOKEN_EXPIRED: &str = "Unauthorized: the token has expired.";
/// 401: a token whose `nbf` has not come yet.
pub const HTTP_TOKEN_NOT_YET_VALID: &str = "Unauthorized: the token is not valid yet.";
/// 401: a token whose `iat` is later than now.
pub const HTTP_TOKEN_ISSUED_IN_FUTURE: &str =
    "Unauthorized: the token says it was issued in the future.";
pub const HTTP_TOKEN_AUDIENCE: &str = "Unauthorized: the token is meant for another audience.";
/// 401: no `aud` in the token, and `[auth] audience` is set.
pub const HTTP_TOKEN_NO_AUDIENCE: &str = "Unauthorized: the token does not name an audience.";
pub const HTTP_TOKEN_ISSUER: &str =
    "Unauthorized: the token comes from an issuer this gateway does not trust.";
/// 401: no `iss` in the token, and `[auth] issuer` is set.
pub const HTTP_TOKEN_NO_ISSUER: &str = "Unauthorized: the token does not name an issuer.";
pub const HTTP_TOKEN_NO_CALLER: &str = "Unauthorized: the token does not name a caller.";
/// 401: a JWT signed with an algorithm the issuer's keys are not for (`none`,
/// HS256 with a public key as the secret, …).
pub const HTTP_TOKEN_ALGORITHM: &str =
    "Unauthorized: the token is signed with an algorithm this gateway does not accept.";
/// 401: a JWT whose key id the issuer does not publish (or not any more).
pub const HTTP_TOKEN_UNKNOWN_KEY: &str =
    "Unauthorized: the token is signed with a key the issuer does not publish.";
/// 401: a JWT whose signature the issuer's key does not verify (forged or altered).
pub const HTTP_TOKEN_SIGNATURE: &str = "Unauthorized: the token's signature is not valid.";
/// 401: an opaque token the issuer's introspection says is not active.
pub const HTTP_TOKEN_INACTIVE: &str = "Unauthorized: the token is not active.";
/// 401: an opaque token, and the issuer could not be asked about it.
pub const HTTP_TOKEN_UNCHECKED: &str =
    "Unauthorized: the token could not be checked with its issuer; retry later.";

/// 403: an OAuth token without a scope the request needs (step-up: the client
/// asks the issuer again, for `scopes`).
pub fn http_insufficient_scope(scopes: &str) -> String {
    format!("Forbidden: the token lacks a scope this request needs; ask for: {scopes}.")
}
/// 403: a browser origin that is not allowed (DNS rebinding protection).
pub const HTTP_BAD_ORIGIN: &str = "Forbidden: this origin is not allowed.";
/// 403: a Host header that is not allowed (DNS rebinding protection).
pub const HTTP_BAD_HOST: &str = "Forbidden: this host name is not allowed.";
/// 400: a request after initialize without its session.
pub const HTTP_NO_SESSION: &str =
    "Bad request: send the Mcp-Session-Id header the initialize response returned.";
/// 404: an ended, expired or never-issued session.
pub const HTTP_UNKNOWN_SESSION: &str =
    "Session not found: it ended or expired. Start a new one with initialize.";
/// 415.
pub const HTTP_CONTENT_TYPE: &str = "Unsupported media type: send the message as application/json.";
/// 406 on POST.
pub const HTTP_ACCEPT_POST: &str =
    "Not acceptable: the Accept header must list application/json and text/event-stream.";
/// 406 on GET.
pub const HTTP_ACCEPT_GET: &str = "Not acceptable: the Accept header must list text/event-stream.";
/// 405.
pub const HTTP_METHOD: &str = "Method not allowed: use POST, GET or DELETE.";
/// 405 for GET and DELETE at 2026-07-28, which has no sessions and no GET stream.
pub const HTTP_STATELESS_POST_ONLY: &str =
    "Method not allowed: MCP 2026-07-28 uses POST only (no sessions, no GET stream).";
/// 404 for any path but the endpoint.
pub const HTTP_NOT_ENDPOINT: &str = "Not found: the MCP endpoint is /mcp.";
/// 503: the gateway holds as many sessions as it will.
pub const HTTP_TOO_MANY_SESSIONS: &str =
    "Service unavailable: too many open sessions; end unused ones with DELETE or retry later.";
/// 429: a caller holds as many sessions as `gateway.max_sessions_per_caller` allows.
pub fn http_caller_sessions(open: usize) -> String {
    let sessions = if open == 1 { "session" } else { "sessions" };
    format!("Too many requests: this caller already has {open} open {sessions}; end unused ones with DELETE or let them expire.")
}
/// 503 before a request is read: the front holds `gateway.max_connections`.
pub const HTTP_TOO_MANY_CONNECTIONS: &str =
    "Service unavailable: too many open connections; retry later.";
/// 503 before a request is read: this address holds `gateway.max_connections_per_client`.
pub const HTTP_TOO_MANY_CLIENT_CONNECTIONS: &str =
    "Service unavailable: too many open connections from this address; close idle ones or retry later.";
/// 408: a request body that did not come whole within `gateway.http_body_timeout`
/// of the front starting to read it; nothing of it ran, and the connection closes.
pub const HTTP_BODY_TIMEOUT: &str =
    "Request timeout: the request body did not arrive in time; nothing was run. Send the whole body at once and retry.";
/// 503 while draining (SIGTERM): a request, a new session or a GET stream the
/// gateway will not take on any more. Nothing of it ran, so it is safe to retry.
pub const HTTP_DRAINING: &str =
    "Service unavailable: this gateway is shutting down and takes no new requests; nothing was run, so retry (another instance will answer).";
/// The answer to a call still running when `gateway.drain_timeout` ran out on
/// SIGTERM; the call is cancelled upstream.
pub const DRAIN_DEADLINE: &str =
    "Internal error: the gateway shut down before this call finished, and cancelled it; the tool may or may not have run. Retry it (with an idempotency key a retry is safe).";

// The health endpoints (`/healthz`, `/readyz`): plain text, no details of upstreams or the store.

/// `/healthz`: the process serves.
pub const HEALTH_ALIVE: &str = "ok\n";
/// `/readyz` when every check passes.
pub const HEALTH_READY: &str = "ready\n";
/// `/readyz` while draining.
pub const NOT_READY_DRAINING: &str = "draining";
/// `/readyz` while the store does not answer.
pub const NOT_READY_STORE: &str = "store unreachable";
/// `/readyz` while `unlisted` of `total` upstreams have no tool listing or are down.
pub fn not_ready_upstreams(unlisted: usize, total: usize) -> String {
    format!("upstreams not listed ({unlisted} of {total})")
}
/// `/readyz` when checks fail: each one, in generic words.
pub fn not_ready(failed: &[String]) -> String {
    format!("not ready: {}\n", failed.join("; "))
}
/// 405 on a health endpoint.
pub const HEALTH_METHOD: &str = "Method not allowed: use GET or HEAD.\n";

/// 409: a second standalone GET stream for one session.
pub const HTTP_STREAM_OPEN: &str = "Conflict: this session already has a GET stream open.";
/// 400: a JSON-RPC batch (MCP sends one message per HTTP request).
pub const HTTP_BATCH: &str =
    "JSON-RPC batches are not supported by MCP; send one message per request";
/// An event on a stream resumed at a replica other than the one that carried
/// it: the answer the client waits for is gone with that replica. Sent again
/// with the same idempotency key, the call is not run a second time (I1): it
/// answers its stored result, that it is still running, or that its outcome is
/// unknown ([`OUTCOME_UNKNOWN`]).
pub const HTTP_STREAM_LOST: &str = "The gateway replica that was answering this request stopped before its answer was sent, so the answer is lost. The call may or may not have run. Sent again with the same idempotency key, it answers with its result if it finished, and otherwise says that its outcome is unknown instead of running twice.";
/// 400: a Last-Event-ID this gateway never issued for the session.
pub const HTTP_BAD_EVENT_ID: &str = "Bad request: Last-Event-ID names no stream of this session.";

/// 400: an `MCP-Protocol-Version` header naming a version the gateway does not speak.
pub fn http_bad_version(version: &str, supported: &[&str]) -> String {
    format!(
        "Bad request: unsupported MCP-Protocol-Version '{}'; this gateway speaks {}.",
        shown(version),
        supported.join(", ")
    )
}

/// 413: a body over the limit.
pub fn http_too_large(max: usize) -> String {
    format!("Request too large: the gateway accepts bodies of at most {max} bytes (gateway.max_message_bytes).")
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

// Quotas and flows (Q, F): tool results a model reads and acts on.

/// Q3: a rate quota refused the call.
pub fn rate_limited(tool: &str, rate: &str, caller: &str, retry_s: u64) -> String {
    format!(
        "Error: Rate limit for tool '{}' reached ({rate} for caller '{}'). Retry in {retry_s} s.",
        shown(tool),
        shown(caller)
    )
}

/// Q3: a concurrency quota refused the call.
pub fn concurrency_limited(tool: &str, limit: u32, caller: &str, retry_s: u64) -> String {
    let calls = if limit == 1 { "call" } else { "calls" };
    format!(
        "Error: Concurrency limit for tool '{}' reached ({limit} {calls} at a time for caller '{}'). Retry in {retry_s} s.",
        shown(tool),
        shown(caller)
    )
}

/// I1: a keyed call whose idempotency key the store could not record (it is
/// down, or its disk is full): the tool did not run.
pub fn ledger_unavailable(tool: &str, retry_s: u64) -> String {
    format!(
        "Error: Tool '{}' was not run: its idempotency key could not be recorded just now. Retry in {retry_s} s; with the same key it still runs at most once.",
        shown(tool)
    )
}

/// I1: a keyed call whose earlier attempt was abandoned (its gateway stopped, or
/// lost the store, before recording how it ended): it is not run again.
pub const OUTCOME_UNKNOWN: &str = "Error: The outcome of this call is unknown: it may have run, but the gateway running it stopped before recording how it ended. Check whether it took effect, or send it with a new idempotency key.";

/// Q4: a strict quota could not be counted (the shared store did not answer).
pub fn quota_unverifiable(kind: &str, tool: &str, retry_s: u64) -> String {
    format!(
        "Error: The {kind} for tool '{}' could not be checked. Retry in {retry_s} s.",
        shown(tool)
    )
}

/// F2: a `deny` flow rule refused the call; `reason` is the rule's plain words.
pub fn flow_denied(tool: &str, reason: &str) -> String {
    format!(
        "Error: Tool '{}' cannot be called at this point of the session. {reason}",
        shown(tool)
    )
}

/// F3: a labelled call whose session trail lives in the shared store, which
/// could not be read or written (flows fail closed).
pub fn flow_unverifiable(tool: &str, retry_s: u64) -> String {
    format!(
        "Error: Tool '{}' cannot be called now: what this session has touched could not be checked. Retry in {retry_s} s.",
        shown(tool)
    )
}

/// F3: an `ask` flow rule's call was not approved (approval refused or impossible).
pub fn flow_not_approved(tool: &str, reason: &str, approval: &str) -> String {
    format!(
        "Error: Tool '{}' needs approval at this point of the session, and it was not given. {reason} ({})",
        shown(tool),
        approval.trim_start_matches("Error: ")
    )
}

// Guards (S): what a model reads in place of a result a guard blocked.

/// S3: a `block` guard found `kinds` in the tool's result; never the matched text.
pub fn guard_blocked(tool: &str, guard: &str, kinds: &[String]) -> String {
    format!(
        "Error: The result of tool '{}' was withheld: guard '{}' found {} in it. Do not retry the same call; ask the user how to proceed.",
        shown(tool),
        shown(guard),
        kinds.join(", ")
    )
}

/// S6: a `block` guard found `kinds` in a call's arguments; the call went nowhere.
pub fn guard_blocked_arguments(tool: &str, guard: &str, kinds: &[String]) -> String {
    format!(
        "Error: Tool '{}' was not called: guard '{}' found {} in its arguments. Do not send it in another form; ask the user how to proceed.",
        shown(tool),
        shown(guard),
        kinds.join(", ")
    )
}

/// S6 `ask`: what leads the approval question when a guard found `kinds` at
/// `paths` of a call's arguments (the arguments shown under it are redacted).
pub fn guard_ask_arguments(guard: &str, kinds: &[String], paths: &[String]) -> String {
    format!(
        "Guard '{}' found {} in the arguments (at {}); the matches are hidden below.",
        shown(guard),
        kinds.join(", "),
        paths.join(", ")
    )
}

/// S3 `ask`: the question put to the human about a result a guard found
/// `kinds` in, at `paths`; never the matched text.
pub fn guard_ask_result(tool: &str, guard: &str, kinds: &[String], paths: &[String]) -> String {
    format!(
        "Guard '{}' found {} in the result of tool '{}' (at {}). Pass the result on to the model?",
        shown(guard),
        kinds.join(", "),
        shown(tool),
        paths.join(", ")
    )
}

/// S3 `ask`: the human did not let the result through (declined, cancelled,
/// no answer in time).
pub fn guard_ask_refused(tool: &str, guard: &str, kinds: &[String]) -> String {
    format!(
        "Error: The result of tool '{}' was withheld: guard '{}' found {} in it, and the user did not let it through. Do not retry the same call; ask the user how to proceed.",
        shown(tool),
        shown(guard),
        kinds.join(", ")
    )
}

/// S3 `ask`: nobody can be asked about the result (the client cannot elicit,
/// or it is a 2026-07-28 client, whose call has run already).
pub fn guard_ask_unavailable(tool: &str, guard: &str, kinds: &[String]) -> String {
    format!(
        "Error: The result of tool '{}' was withheld: guard '{}' found {} in it, and the client cannot ask the user to let it through. Do not retry the same call; ask the user how to proceed.",
        shown(tool),
        shown(guard),
        kinds.join(", ")
    )
}

/// S3 `label`: the shared store could not take the labels a guard found cause
/// to add, so the result is withheld (flows fail closed).
pub fn guard_label_unrecorded(tool: &str, guard: &str, retry_s: u64) -> String {
    format!(
        "Error: The result of tool '{}' was withheld: guard '{}' labelled it, and what this session has touched could not be recorded. Retry in {retry_s} s.",
        shown(tool),
        shown(guard)
    )
}

/// S8: why a read's result was withheld.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withheld {
    /// A `block` guard found something.
    Blocked,
    /// An `ask` guard found something and the human did not let it through.
    NotLetThrough,
    /// An `ask` guard found something and nobody can be asked.
    CannotAsk,
    /// A `label` guard found something and the shared trail could not take it.
    Unrecorded,
}

/// S8: a `resources/read` or `prompts/get` result withheld (`what`:
/// `resource '<uri>'` or `prompt '<name>'`); never the matched text.
pub fn guard_withheld_read(what: &str, guard: &str, kinds: &[String], why: Withheld) -> String {
    let guard = shown(guard);
    let kinds = kinds.join(", ");
    match why {
        Withheld::Blocked => format!("The {what} was withheld: guard '{guard}' found {kinds} in it. Do not retry the same request; ask the user how to proceed."),
        Withheld::NotLetThrough => format!("The {what} was withheld: guard '{guard}' found {kinds} in it, and the user did not let it through. Do not retry the same request; ask the user how to proceed."),
        Withheld::CannotAsk => format!("The {what} was withheld: guard '{guard}' found {kinds} in it, and the client cannot ask the user to let it through. Do not retry the same request; ask the user how to proceed."),
        Withheld::Unrecorded => format!("The {what} was withheld: guard '{guard}' labelled it, and what this session has touched could not be recorded. Retry in 1 s."),
    }
}

/// S8 `ask`: the question about a read's result.
pub fn guard_ask_read(what: &str, guard: &str, kinds: &[String], paths: &[String]) -> String {
    format!(
        "Guard '{}' found {} in the {what} (at {}). Pass it on to the model?",
        shown(guard),
        kinds.join(", "),
        paths.join(", ")
    )
}

/// Q5: 429, an HTTP caller is over `gateway.http_caller_rate`.
pub fn http_caller_rate(retry_s: u64) -> String {
    format!("Too many requests: this caller is over its request rate (gateway.http_caller_rate); retry in {retry_s} s.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_texts() {
        assert_eq!(
            guard_blocked("crm.lookup", "cards", &["pii.card".into(), "pii.iban".into()]),
            "Error: The result of tool 'crm.lookup' was withheld: guard 'cards' found pii.card, pii.iban in it. Do not retry the same call; ask the user how to proceed."
        );
        assert_eq!(
            guard_blocked_arguments("mail.send", "no-keys-out", &["secrets.aws_access_key".into()]),
            "Error: Tool 'mail.send' was not called: guard 'no-keys-out' found secrets.aws_access_key in its arguments. Do not send it in another form; ask the user how to proceed."
        );
        assert_eq!(
            guard_label_unrecorded("web.fetch", "injected", 1),
            "Error: The result of tool 'web.fetch' was withheld: guard 'injected' labelled it, and what this session has touched could not be recorded. Retry in 1 s."
        );
        let card = ["pii.card".to_owned()];
        let r = "resource 'fx://a/r1'";
        assert_eq!(
            guard_withheld_read(r, "cards", &card, Withheld::Blocked),
            "The resource 'fx://a/r1' was withheld: guard 'cards' found pii.card in it. Do not retry the same request; ask the user how to proceed."
        );
        assert_eq!(
            guard_withheld_read("prompt 'p'", "cards", &card, Withheld::NotLetThrough),
            "The prompt 'p' was withheld: guard 'cards' found pii.card in it, and the user did not let it through. Do not retry the same request; ask the user how to proceed."
        );
        assert_eq!(
            guard_withheld_read(r, "cards", &card, Withheld::CannotAsk),
            "The resource 'fx://a/r1' was withheld: guard 'cards' found pii.card in it, and the client cannot ask the user to let it through. Do not retry the same request; ask the user how to proceed."
        );
        assert_eq!(
            guard_withheld_read(r, "taint", &[], Withheld::Unrecorded),
            "The resource 'fx://a/r1' was withheld: guard 'taint' labelled it, and what this session has touched could not be recorded. Retry in 1 s."
        );
        assert_eq!(
            guard_ask_read(r, "cards", &card, &["/contents/0/text".into()]),
            "Guard 'cards' found pii.card in the resource 'fx://a/r1' (at /contents/0/text). Pass it on to the model?"
        );
        let at = ["/content/0/text".to_owned()];
        assert_eq!(
            guard_ask_arguments("cards", &card, &["/text".into()]),
            "Guard 'cards' found pii.card in the arguments (at /text); the matches are hidden below."
        );
        assert_eq!(
            guard_ask_result("crm.lookup", "cards", &card, &at),
            "Guard 'cards' found pii.card in the result of tool 'crm.lookup' (at /content/0/text). Pass the result on to the model?"
        );
        assert_eq!(
            guard_ask_refused("crm.lookup", "cards", &card),
            "Error: The result of tool 'crm.lookup' was withheld: guard 'cards' found pii.card in it, and the user did not let it through. Do not retry the same call; ask the user how to proceed."
        );
        assert_eq!(
            guard_ask_unavailable("crm.lookup", "cards", &card),
            "Error: The result of tool 'crm.lookup' was withheld: guard 'cards' found pii.card in it, and the client cannot ask the user to let it through. Do not retry the same call; ask the user how to proceed."
        );
    }

    #[test]
    fn pin_texts() {
        assert_eq!(
            pin_changed("fx.stamp", &["description", "inputSchema"]),
            "Tool 'fx.stamp' changed since it was reviewed (description, inputSchema); its new definition is not approved."
        );
        assert_eq!(
            pin_added("fx.extra"),
            "Tool 'fx.extra' was added since the tools were reviewed; it is not approved."
        );
        assert_eq!(
            pin_renamed("fx.new_name", "fx.old_name"),
            "Tool 'fx.new_name' is 'fx.old_name' renamed since it was reviewed; the new name is not approved."
        );
    }

    #[test]
    fn quota_and_flow_texts() {
        assert_eq!(
            rate_limited("search.query", "30 calls per minute", "alice", 12),
            "Error: Rate limit for tool 'search.query' reached (30 calls per minute for caller 'alice'). Retry in 12 s."
        );
        assert_eq!(
            concurrency_limited("s.q", 2, "bob", 1),
            "Error: Concurrency limit for tool 's.q' reached (2 calls at a time for caller 'bob'). Retry in 1 s."
        );
        assert_eq!(
            quota_unverifiable("rate limit", "s.q", 1),
            "Error: The rate limit for tool 's.q' could not be checked. Retry in 1 s."
        );
        assert_eq!(
            quota_unverifiable("concurrency limit", "s.q", 1),
            "Error: The concurrency limit for tool 's.q' could not be checked. Retry in 1 s."
        );
        assert_eq!(
            flow_unverifiable("mail.send", 1),
            "Error: Tool 'mail.send' cannot be called now: what this session has touched could not be checked. Retry in 1 s."
        );
        assert_eq!(
            flow_denied("mail.send", "Reason."),
            "Error: Tool 'mail.send' cannot be called at this point of the session. Reason."
        );
        assert_eq!(
            flow_not_approved("mail.send", "Reason.", "Error: This call needs approval, and approval was refused."),
            "Error: Tool 'mail.send' needs approval at this point of the session, and it was not given. Reason. (This call needs approval, and approval was refused.)"
        );
        assert_eq!(
            http_caller_rate(3),
            "Too many requests: this caller is over its request rate (gateway.http_caller_rate); retry in 3 s."
        );
        // A caller name from a token is echoed escaped: it cannot break the line.
        assert!(!rate_limited("t", "1 call per second", "a\nb", 1).contains('\n'));
    }

    #[test]
    fn gateway_texts() {
        assert_eq!(
            listing_failed(&["bad".into()]),
            "Listing failed: upstream 'bad' is not available, so the list would be incomplete. Retry shortly."
        );
        assert_eq!(
            listing_failed(&["a".into(), "b".into()]),
            "Listing failed: upstream 'a', 'b' is not available, so the list would be incomplete. Retry shortly."
        );
        assert_eq!(
            UPSTREAM_NO_ANSWER,
            "Internal error: the server behind the gateway did not answer."
        );
        assert_eq!(
            UPSTREAM_EMPTY_ANSWER,
            "Internal error: the server behind the gateway sent an empty answer."
        );
        assert_eq!(NO_CLIENT, "No client is connected to the gateway.");
        assert_eq!(
            invalid_request(NOT_A_BATCH),
            "Invalid request: JSON-RPC batches are not supported by MCP; send one message per line."
        );
        assert_eq!(
            invalid_request(NO_VERSION),
            "Invalid request: the message must carry \"jsonrpc\": \"2.0\"."
        );
        assert_eq!(
            invalid_request(NOT_AN_OBJECT),
            "Invalid request: a JSON-RPC message must be an object."
        );
        assert_eq!(
            invalid_request(BAD_ID),
            "Invalid request: a request id must be a string or a number."
        );
        assert_eq!(
            invalid_request(BAD_METHOD),
            "Invalid request: \"method\" must be a string."
        );
        assert_eq!(
            invalid_request(NO_KIND),
            "Invalid request: the message is neither a request, a notification nor a response."
        );
        assert_eq!(
            invalid_request(ID_IN_USE),
            "Invalid request: a request with this id is still running in this session."
        );
        assert_eq!(
            parse_error("EOF while parsing"),
            "Parse error: EOF while parsing."
        );
        assert_eq!(
            request_too_large(70000, 65536),
            "Request too large: 70000 bytes; the gateway accepts at most 65536 (gateway.max_message_bytes)."
        );
        assert_eq!(method_not_found("x/y"), "Method not found: x/y");
    }

    #[test]
    fn http_front_texts() {
        assert_eq!(
            http_bad_version("1999-01-01", &["2025-11-25", "2025-06-18"]),
            "Bad request: unsupported MCP-Protocol-Version '1999-01-01'; this gateway speaks 2025-11-25, 2025-06-18."
        );
        assert_eq!(
            http_too_large(1024),
            "Request too large: the gateway accepts bodies of at most 1024 bytes (gateway.max_message_bytes)."
        );
        assert_eq!(
            HTTP_UNKNOWN_SESSION,
            "Session not found: it ended or expired. Start a new one with initialize."
        );
        assert_eq!(
            HTTP_NO_CREDENTIAL,
            "Unauthorized: send 'Authorization: Bearer <API key or token>'."
        );
    }

    #[test]
    fn http_limit_texts() {
        assert_eq!(
            http_caller_sessions(2),
            "Too many requests: this caller already has 2 open sessions; end unused ones with DELETE or let them expire."
        );
        assert_eq!(
            http_caller_sessions(1),
            "Too many requests: this caller already has 1 open session; end unused ones with DELETE or let them expire."
        );
        assert_eq!(
            HTTP_TOO_MANY_CONNECTIONS,
            "Service unavailable: too many open connections; retry later."
        );
        assert_eq!(
            HTTP_TOO_MANY_CLIENT_CONNECTIONS,
            "Service unavailable: too many open connections from this address; close idle ones or retry later."
        );
        assert_eq!(
            HTTP_BODY_TIMEOUT,
            "Request timeout: the request body did not arrive in time; nothing was run. Send the whole body at once and retry."
        );
    }

    #[test]
    fn token_time_and_claim_texts() {
        assert_eq!(
            HTTP_TOKEN_NOT_YET_VALID,
            "Unauthorized: the token is not valid yet."
        );
        assert_eq!(
            HTTP_TOKEN_ISSUED_IN_FUTURE,
            "Unauthorized: the token says it was issued in the future."
        );
        assert_eq!(
            HTTP_TOKEN_NO_AUDIENCE,
            "Unauthorized: the token does not name an audience."
        );
        assert_eq!(
            HTTP_TOKEN_NO_ISSUER,
            "Unauthorized: the token does not name an issuer."
        );
    }

    #[test]
    fn oauth_texts() {
        assert_eq!(
            http_insufficient_scope("mcp notes:write"),
            "Forbidden: the token lacks a scope this request needs; ask for: mcp notes:write."
        );
        assert_eq!(
            HTTP_TOKEN_UNKNOWN_KEY,
            "Unauthorized: the token is signed with a key the issuer does not publish."
        );
    }

    #[test]
    fn envelope_texts() {
        assert_eq!(
            unsupported_version("2027-01-01", "2026-07-28"),
            "Unsupported protocol version '2027-01-01'; this gateway speaks 2026-07-28 (or the initialize handshake for 2025-11-25 and earlier)."
        );
        assert_eq!(
            header_mismatch("Mcp-Method"),
            "Bad request: the Mcp-Method header does not match the request body."
        );
        assert_eq!(
            ENVELOPE_VERSION_NOT_STRING,
            "Invalid params: _meta[\"io.modelcontextprotocol/protocolVersion\"] must be a string."
        );
        assert_eq!(
            ENVELOPE_CAPABILITIES_NOT_OBJECT,
            "Invalid params: _meta[\"io.modelcontextprotocol/clientCapabilities\"] must be an object."
        );
        assert_eq!(
            ENVELOPE_NO_META,
            "Invalid params: a 2026-07-28 request carries _meta with \"io.modelcontextprotocol/protocolVersion\" and \"io.modelcontextprotocol/clientCapabilities\"; this one has no _meta object."
        );
        assert_eq!(
            ENVELOPE_NO_VERSION,
            "Invalid params: _meta is missing \"io.modelcontextprotocol/protocolVersion\"; a 2026-07-28 request names its protocol version."
        );
    }
}
