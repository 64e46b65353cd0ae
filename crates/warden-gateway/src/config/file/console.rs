//! `[console]`: an OpenID Connect issuer of the console's own for its login
//! (O9), when console users sign in somewhere else than the `[oauth]` issuer
//! MCP clients get their tokens from.

use super::*;

/// The console's own OpenID Connect provider; unused unless `[admin] login`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    /// The issuer console users log in at (`https://idp.example/realms/ops`),
    /// instead of the `[oauth]` issuer; its ID tokens are checked (signature
    /// by its published keys, `iss`, `aud`, `exp`, `nonce`).
    pub issuer: Option<String>,
    /// The console's client at that issuer (the ID token's audience).
    pub client_id: Option<String>,
    /// The environment variable holding that client's secret (none: a public client).
    pub client_secret_env: Option<String>,
    /// The ID token claim naming the admin, as `[admin] callers` names them
    /// (built-in: `sub`).
    pub caller_claim: Option<String>,
    /// The ID token claim listing the admin's groups, for `group:NAME` in
    /// `[admin] callers` (built-in: `groups`).
    pub groups_claim: Option<String>,
    /// Scopes asked for besides `openid` (`["profile", "groups"]`), for an
    /// issuer that puts the claims above in the ID token only when asked.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// A CA file (PEM) trusted for an https issuer besides the public roots.
    pub tls_ca_file: Option<PathBuf>,
    /// How long a request to the issuer may take, in ms (built-in: 5000).
    pub timeout_ms: Option<u64>,
}
