//! `[gateway]`: the fronts, what they accept and how long things may take.

use super::*;

/// Which front `run` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Front {
    /// One session on stdin and stdout.
    #[default]
    Stdio,
    /// Streamable HTTP on `gateway.listen`.
    Http,
}

impl FromStr for Front {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "stdio" => Ok(Front::Stdio),
            "http" => Ok(Front::Http),
            other => Err(format!(
                "'{other}' is not a front; use \"stdio\" or \"http\""
            )),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// The front `run` serves when no flag says otherwise: "stdio" or "http".
    #[serde(default, deserialize_with = "parsed")]
    pub front: Front,
    /// The caller a stdio session acts for (G1).
    #[serde(default = "default_stdio_caller")]
    pub stdio_caller: String,
    /// The largest JSON-RPC message accepted from a client or an upstream, in bytes
    /// (over HTTP: the request body limit, 413 beyond it).
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// Where the HTTP front listens (path `/mcp`).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The caller HTTP requests without credentials act for (development only).
    pub anonymous_caller: Option<String>,
    /// Browser origins allowed besides loopback ones (`https://app.example.com`).
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Host header values allowed besides loopback names and the listen address.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// An HTTP session unused this long ends (`30m`).
    #[serde(default = "default_session_idle")]
    pub session_idle: String,
    /// Sessions one caller may hold open at once; an initialize beyond it gets 429.
    #[serde(default = "default_max_sessions_per_caller")]
    pub max_sessions_per_caller: usize,
    /// An HTTP client must send a whole request head within this long of connecting,
    /// or of the head's first byte on a kept-alive connection (`10s`).
    #[serde(default = "default_http_head_timeout")]
    pub http_head_timeout: String,
    /// A kept-alive HTTP connection with no request in flight closes after this long
    /// (`60s`); SSE streams and running calls count as in flight.
    #[serde(default = "default_http_idle_timeout")]
    pub http_idle_timeout: String,
    /// A request body must come whole within this long of the front starting to
    /// read it (`30s`); one that drips is answered 408 and its connection closed.
    #[serde(default = "default_http_body_timeout")]
    pub http_body_timeout: String,
    /// Open HTTP connections at most; one beyond it is answered 503 and closed.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Open HTTP connections at most from one client address (an IPv6 client by its
    /// /64); one beyond it is answered 503 and closed.
    #[serde(default = "default_max_connections_per_client")]
    pub max_connections_per_client: usize,
    /// On SIGTERM, how long calls in flight may take to finish (`30s`); what still
    /// runs then is answered with an error and cancelled upstream.
    #[serde(default = "default_drain_timeout")]
    pub drain_timeout: String,
    /// The HTTP front serves https with this PEM certificate chain …
    pub tls_cert: Option<PathBuf>,
    /// … and this PEM private key.
    pub tls_key: Option<PathBuf>,
    /// The environment variable holding the secret that seals 2026-07-28
    /// `requestState`s, shared by replicas (built-in: a random key per process).
    pub state_secret_env: Option<String>,
    /// While that secret is rotated out: the environment variable holding the
    /// previous one, which still opens (never seals) states and session ids.
    pub state_secret_previous_env: Option<String>,
    /// How long an HTTP session id stays usable on any replica (`24h`); a replica
    /// that never saw the session takes it up within that time.
    #[serde(default = "default_session_lifetime")]
    pub session_lifetime: String,
    /// An upstream's JSON-RPC error reaches the client with its `code` and a bounded
    /// `message`; its `data` only where MCP defines it (-32042) unless "pass" (E3).
    #[serde(default, deserialize_with = "parsed")]
    pub upstream_error_data: ErrorData,
    /// Requests one HTTP caller may make (`50/second`), counted before any work;
    /// one beyond it gets 429 with Retry-After (Q5). Off when absent.
    pub http_caller_rate: Option<String>,
    /// How many requests beyond the steady rate a caller may send at once
    /// (built-in: the rate's count).
    pub http_caller_burst: Option<u32>,
}

/// What happens to the `data` of an upstream's JSON-RPC error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorData {
    /// Dropped, except where the MCP specification gives it a meaning.
    #[default]
    Drop,
    /// Passed to the client as the upstream sent it.
    Pass,
}

impl FromStr for ErrorData {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "drop" => Ok(ErrorData::Drop),
            "pass" => Ok(ErrorData::Pass),
            other => Err(format!(
                "'{other}' is not an error data policy; use \"drop\" or \"pass\""
            )),
        }
    }
}

/// Which protocol revision an upstream is spoken to in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamProtocol {
    /// `server/discover` first; 2026-07-28 where offered, else the handshake.
    #[default]
    Auto,
    /// The `initialize` handshake (up to 2025-11-25), without asking first.
    Handshake,
    /// The stateless 2026-07-28 revision; a server that does not offer it fails to start.
    Stateless,
}

impl FromStr for UpstreamProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(UpstreamProtocol::Auto),
            "2025-11-25" => Ok(UpstreamProtocol::Handshake),
            "2026-07-28" => Ok(UpstreamProtocol::Stateless),
            other => Err(format!(
                "'{other}' is not a protocol choice; use \"auto\", \"2025-11-25\" or \"2026-07-28\""
            )),
        }
    }
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            front: Front::default(),
            stdio_caller: default_stdio_caller(),
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            listen: default_listen(),
            anonymous_caller: None,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            session_idle: default_session_idle(),
            max_sessions_per_caller: DEFAULT_MAX_SESSIONS_PER_CALLER,
            http_head_timeout: default_http_head_timeout(),
            http_idle_timeout: default_http_idle_timeout(),
            http_body_timeout: default_http_body_timeout(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            drain_timeout: default_drain_timeout(),
            tls_cert: None,
            tls_key: None,
            state_secret_env: None,
            state_secret_previous_env: None,
            session_lifetime: default_session_lifetime(),
            upstream_error_data: ErrorData::default(),
            http_caller_rate: None,
            http_caller_burst: None,
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:8931".into()
}
fn default_session_lifetime() -> String {
    "24h".into()
}

fn default_session_idle() -> String {
    "30m".into()
}
fn default_max_sessions_per_caller() -> usize {
    DEFAULT_MAX_SESSIONS_PER_CALLER
}
fn default_http_head_timeout() -> String {
    "10s".into()
}
fn default_http_idle_timeout() -> String {
    "60s".into()
}
fn default_http_body_timeout() -> String {
    "30s".into()
}
fn default_drain_timeout() -> String {
    "30s".into()
}
fn default_max_connections() -> usize {
    DEFAULT_MAX_CONNECTIONS
}
fn default_max_connections_per_client() -> usize {
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT
}
fn default_stdio_caller() -> String {
    "local".into()
}
fn default_max_message_bytes() -> usize {
    DEFAULT_MAX_MESSAGE_BYTES
}
