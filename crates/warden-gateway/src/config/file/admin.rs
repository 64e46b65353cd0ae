//! `[admin]`: the admin listener, who may use its console, and its own caps on
//! connections (smaller than the MCP front's, from a budget of their own).

use super::*;

/// The admin listener: `/metrics`, the operator console (`/`) and the admin API (`/api/`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Where the admin listener listens (`127.0.0.1:9464`); off when absent (and
    /// `metrics.listen` is absent too).
    pub listen: Option<String>,
    /// Who may open the console and the admin API: caller names or `group:NAME`,
    /// authenticated as on the HTTP front (API key or JWT). Empty: loopback clients only.
    #[serde(default)]
    pub callers: Vec<String>,
    /// Console users log in with OpenID Connect (authorization code + PKCE) at
    /// the `[console]` issuer when there is one (its ID token checked), else at
    /// the `[oauth]` issuer as the gateway's client (`oauth.client_id`); the
    /// token they get must name an admin caller. API keys keep working.
    #[serde(default)]
    pub login: bool,
    /// A client must send a whole request head within this long of connecting, or
    /// of the head's first byte on a kept-alive connection (`10s`).
    #[serde(default = "default_admin_head_timeout")]
    pub http_head_timeout: String,
    /// A kept-alive connection with no request in flight closes after this long (`30s`).
    #[serde(default = "default_admin_idle_timeout")]
    pub http_idle_timeout: String,
    /// Open connections at most (`64`); one beyond it is answered 503 and closed.
    #[serde(default = "default_admin_max_connections")]
    pub max_connections: usize,
    /// Open connections at most from one client address (`16`; an IPv6 client by
    /// its /64); one beyond it is answered 503 and closed.
    #[serde(default = "default_admin_max_connections_per_client")]
    pub max_connections_per_client: usize,
}

/// `admin.max_connections` when not set: probes, a scraper and a few browsers.
pub const DEFAULT_ADMIN_MAX_CONNECTIONS: usize = 64;
/// `admin.max_connections_per_client` when not set.
pub const DEFAULT_ADMIN_MAX_CONNECTIONS_PER_CLIENT: usize = 16;

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: None,
            callers: Vec::new(),
            login: false,
            http_head_timeout: default_admin_head_timeout(),
            http_idle_timeout: default_admin_idle_timeout(),
            max_connections: DEFAULT_ADMIN_MAX_CONNECTIONS,
            max_connections_per_client: DEFAULT_ADMIN_MAX_CONNECTIONS_PER_CLIENT,
        }
    }
}

fn default_admin_head_timeout() -> String {
    "10s".into()
}
fn default_admin_idle_timeout() -> String {
    "30s".into()
}
fn default_admin_max_connections() -> usize {
    DEFAULT_ADMIN_MAX_CONNECTIONS
}
fn default_admin_max_connections_per_client() -> usize {
    DEFAULT_ADMIN_MAX_CONNECTIONS_PER_CLIENT
}
