//! What the revision names on the wire: its version, the `_meta` keys of the
//! envelope, its error codes, the input request keys and the methods it removed.

/// The version and the envelope's keys are the upstream hop's too: one home.
pub use crate::upstream::{
    CLIENT_CAPABILITIES_KEY, CLIENT_INFO_KEY, LOG_LEVEL_KEY, PROTOCOL_VERSION_KEY,
    STATELESS_VERSION as VERSION,
};
pub const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";
/// -32022: the request names a protocol version the gateway does not speak.
pub const UNSUPPORTED_VERSION: i64 = -32022;
/// -32021: the request needs a client capability the client did not declare.
pub const MISSING_CAPABILITY: i64 = crate::jsonrpc::MISSING_CAPABILITY;
/// -32020: an HTTP header disagrees with the request body.
pub const HEADER_MISMATCH: i64 = -32020;
/// How long list results may be cached by the client, in milliseconds.
pub const LIST_TTL_MS: u64 = 30_000;
/// How long an approval question stays answerable.
pub const STATE_TTL_SECS: u64 = 600;
/// The input request key of the gateway's approval question.
pub const APPROVAL_KEY: &str = "warden/approval";
/// The input request key of an upstream's request, bridged to the client.
pub const UPSTREAM_KEY: &str = "warden/upstream";
/// Server-to-client requests that can travel as input requests, with the client
/// capability each needs.
pub const INPUT_METHODS: &[(&str, &str)] = &[
    ("sampling/createMessage", "sampling"),
    ("elicitation/create", "elicitation"),
    ("roots/list", "roots"),
];

/// The capability a client needs to take `method` as an input request.
pub fn input_capability(method: &str) -> Option<&'static str> {
    INPUT_METHODS
        .iter()
        .find(|(m, _)| *m == method)
        .map(|(_, c)| *c)
}

/// Methods the revision removed; a request speaking it gets -32601 for them.
pub const REMOVED: &[&str] = &[
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];
