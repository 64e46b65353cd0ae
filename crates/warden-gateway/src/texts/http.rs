//! The HTTP front's own answers (each the JSON-RPC error message of an HTTP
//! error), and the health endpoints' plain text.

use warden_core::answer::shown;

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

/// Q5: 429, an HTTP caller is over `gateway.http_caller_rate`.
pub fn http_caller_rate(retry_s: u64) -> String {
    format!("Too many requests: this caller is over its request rate (gateway.http_caller_rate); retry in {retry_s} s.")
}
