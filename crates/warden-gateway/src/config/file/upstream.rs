//! `[defaults]`, `[[upstream]]` and its tables: the servers behind the gateway,
//! how their tools' arguments are handled, the credentials they are shown, and
//! their pins mode.

use super::*;

fn default_true() -> bool {
    true
}
fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_MS
}
fn default_restart_after_timeouts() -> u32 {
    DEFAULT_RESTART_AFTER_TIMEOUTS
}
fn default_ping_interval_ms() -> u64 {
    DEFAULT_PING_INTERVAL_MS
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DefaultsConfig {
    /// warn | strip | reject (A3); built-in: warn.
    #[serde(default, deserialize_with = "parsed_opt")]
    pub unknown_arguments: Option<UnknownMode>,
    /// JSON Schema validation of arguments (A5); built-in: true.
    pub validate: Option<bool>,
    /// The optional `reason` parameter (R1); built-in: false.
    pub reasons: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Unique name; the tool prefix when `prefix` is on.
    pub name: String,
    /// The server's command line, program first. A program given as a relative path
    /// with a `/` resolves against the config file's folder; a bare name uses PATH.
    #[serde(default)]
    pub command: Vec<String>,
    /// … or the URL of a Streamable HTTP server (`http://host:port/mcp`).
    pub url: Option<String>,
    /// The environment variable holding the bearer token this gateway presents to
    /// an HTTP upstream (its own credential; a client's token is never forwarded).
    pub bearer_token_env: Option<String>,
    /// The token itself, for library users (never read from a config file).
    #[serde(skip)]
    pub bearer_token: Option<String>,
    /// For an `https://` upstream: a PEM file of CA certificates trusted besides the
    /// public roots (a private CA). Relative paths resolve against the config's folder.
    pub tls_ca_file: Option<PathBuf>,
    /// Extra environment variables for the child.
    #[serde(default)]
    pub env: HashMap<String, String>,
    /// Variables of the child whose values come from the gateway's own
    /// environment, so a secret stays out of the file: the child's variable →
    /// the gateway's variable holding the value (`{ GITHUB_TOKEN = "GH_TOKEN" }`).
    #[serde(default)]
    pub secret_env: std::collections::BTreeMap<String, String>,
    /// Tools appear as `name.tool` (true) or under their own names (false).
    #[serde(default = "default_true")]
    pub prefix: bool,
    /// This upstream's A3 mode, over `[defaults]`.
    #[serde(default, deserialize_with = "parsed_opt")]
    pub unknown_arguments: Option<UnknownMode>,
    /// This upstream's A5 switch, over `[defaults]`.
    pub validate: Option<bool>,
    /// This upstream's R1 switch, over `[defaults]`.
    pub reasons: Option<bool>,
    /// Per call; past it the caller gets the internal-error answer and the upstream a cancellation.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// I1: a keyed call whose gateway stopped mid-call runs again once its lease
    /// ran out (true), instead of answering that its outcome is unknown (false,
    /// the default). Only for tools that are safe to repeat.
    pub rerun_abandoned: Option<bool>,
    /// After this many calls in a row time out, the upstream counts as stuck and is
    /// restarted as after a crash (0: never).
    #[serde(default = "default_restart_after_timeouts")]
    pub restart_after_timeouts: u32,
    /// How often a running upstream is pinged; one that does not answer within its
    /// timeout (at most 10 s) counts as stuck and is restarted (0: never ping).
    #[serde(default = "default_ping_interval_ms")]
    pub ping_interval_ms: u64,
    /// Which protocol revision the gateway speaks to this upstream: "auto" asks
    /// `server/discover` first and speaks 2026-07-28 where it is offered, else
    /// runs the `initialize` handshake; "2025-11-25" or "2026-07-28" fixes it.
    #[serde(default, deserialize_with = "parsed")]
    pub protocol: UpstreamProtocol,
    /// With a pins lock beside the config (P2): `hidden` (the default) serves a new or
    /// changed tool as if it were absent; `ask` lists it and puts each call to a
    /// human; `report` serves it and only logs the drift.
    #[serde(default, deserialize_with = "parsed_opt")]
    pub pins: Option<PinMode>,
    /// Per tool settings, keyed by the upstream's own tool name.
    #[serde(default)]
    pub tools: HashMap<String, ToolConfig>,
    /// Flow labels of this upstream's tools: a glob over its own tool names →
    /// labels (`{ "read_*" = ["private_data"] }`) (F1).
    #[serde(default)]
    pub labels: HashMap<String, Vec<String>>,
    /// `[[upstream.credential]]`: the credential the gateway presents to an HTTP
    /// upstream for a caller, first match wins; callers no entry matches get
    /// `bearer_token_env`.
    #[serde(default)]
    pub credential: Vec<CredentialConfig>,
    /// For a child-process upstream with `[[upstream.credential]]` entries: the
    /// environment variable a caller's own child gets that caller's credential in
    /// (each such caller gets a child of its own).
    pub credential_env: Option<String>,
    /// Callers' own children running at once (built-in: 16); at the bound the
    /// idle one used longest ago is stopped, and when all are busy a new caller's
    /// request is refused.
    pub max_caller_processes: Option<usize>,
    /// A caller's own child idle this long is stopped (built-in: 300000, five minutes).
    pub caller_process_idle_ms: Option<u64>,
}

/// One per-caller upstream credential: who it is for and where it comes from
/// (exactly one of `token_env`, `token_file`, `exchange`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialConfig {
    /// Caller names, `group:NAME`, or `*`.
    pub callers: Vec<String>,
    /// The name the audit trail records for it (never the secret); built-in: the
    /// variable, the file name, or `exchange:<audience>`.
    pub name: Option<String>,
    /// The environment variable holding the bearer token.
    pub token_env: Option<String>,
    /// A file holding the bearer token (read at start; relative to the config's folder).
    pub token_file: Option<PathBuf>,
    /// RFC 8693 token exchange at `[oauth] issuer`: the caller's token is traded
    /// for one for this upstream, cached per caller until it expires.
    pub exchange: Option<ExchangeConfig>,
}

/// What a token exchange asks the issuer for.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeConfig {
    /// The upstream's identifier at the issuer (`audience`; also sent as `resource`).
    pub audience: String,
    /// The scope asked for, space-separated.
    pub scope: Option<String>,
}

/// What a tool that differs from the pins lock becomes (P2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PinMode {
    /// Served exactly like an absent tool (G2).
    #[default]
    Hidden,
    /// Listed; each call runs only once a human approved it (H5), told what changed.
    Ask,
    /// Served; the drift is only logged, counted and recorded.
    Report,
}

impl PinMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PinMode::Hidden => "hidden",
            PinMode::Ask => "ask",
            PinMode::Report => "report",
        }
    }
}

impl FromStr for PinMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "hidden" => Ok(PinMode::Hidden),
            "ask" => Ok(PinMode::Ask),
            "report" => Ok(PinMode::Report),
            other => Err(format!(
                "'{other}' is not a pins mode; use one of: hidden, ask, report"
            )),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// alias = "canonical" (A2); the first alias for a key wins.
    #[serde(default)]
    pub aliases: toml::Table,
    /// Arguments fixed by configuration (A7).
    #[serde(default)]
    pub pin: toml::Table,
    /// Treat the schema as `additionalProperties: false` (A6).
    pub close_schema: Option<bool>,
    /// The tool reaches arbitrary targets (a URL, a command, a path): granting it
    /// grants everything it can reach (G5); `check` warns when a rule grants it.
    #[serde(default)]
    pub arbitrary_targets: bool,
    /// This tool's A3 mode, over its upstream's.
    #[serde(default, deserialize_with = "parsed_opt")]
    pub unknown_arguments: Option<UnknownMode>,
    /// This tool's A5 switch, over its upstream's.
    pub validate: Option<bool>,
    /// This tool's R1 switch, over its upstream's.
    pub reasons: Option<bool>,
    /// This tool's I1 `rerun_abandoned`, over its upstream's.
    pub rerun_abandoned: Option<bool>,
}

impl UpstreamConfig {
    /// Whether a keyed call of `tool` (this upstream's own name for it) whose
    /// attempt was abandoned runs again (I1): the tool's `rerun_abandoned`, else
    /// the upstream's, else not.
    pub fn reruns_abandoned(&self, tool: &str) -> bool {
        self.tools
            .get(tool)
            .and_then(|t| t.rerun_abandoned)
            .or(self.rerun_abandoned)
            .unwrap_or(false)
    }
}
