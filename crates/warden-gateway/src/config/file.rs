//! What the TOML file may say: one serde type per table, nothing checked beyond
//! shape. Every table denies keys it does not declare, so these structs are the
//! only list of known keys; the loader turns serde's complaint into the
//! did-you-mean error.

use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use warden_core::{Effect, UnknownMode};

/// The default upstream call timeout.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;
/// Calls in a row that time out before an upstream counts as stuck.
pub const DEFAULT_RESTART_AFTER_TIMEOUTS: u32 = 3;
/// How often a running upstream is pinged, in milliseconds.
pub const DEFAULT_PING_INTERVAL_MS: u64 = 30_000;
/// The default cap on one JSON-RPC message, in bytes.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// Open HTTP connections at most, in total and from one client address.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 64;
/// Open HTTP sessions at most for one caller.
pub const DEFAULT_MAX_SESSIONS_PER_CALLER: usize = 100;

/// Tables whose keys are names the user chooses rather than settings. serde's
/// path cannot tell a chosen name from a field, and errors name such a table as
/// `[upstream.tools.*]`, whatever the tool is called.
pub(super) const NAMED_TABLES: &[&str] = &["upstream.tools"];

/// Leads the message of a value that had the right type but a wrong content (an
/// unknown `front`, say). serde hands back only a message; this is how the loader
/// tells these from serde's own type errors, which name no key.
pub(super) const VALUE_ERROR: char = '\u{1}';

/// The whole file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfigFile {
    /// `[gateway]`: the fronts and what they accept.
    #[serde(default)]
    pub gateway: GatewayConfig,
    /// `[defaults]`: argument handling unless an upstream or tool says otherwise.
    #[serde(default)]
    pub defaults: DefaultsConfig,
    /// `[[upstream]]`: the servers behind the gateway.
    #[serde(default)]
    pub upstream: Vec<UpstreamConfig>,
    /// `[[caller]]`: who may connect, and their groups.
    #[serde(default)]
    pub caller: Vec<CallerConfig>,
    /// `[access]`: what happens when no rule matches, and the grant webhook.
    #[serde(default)]
    pub access: AccessConfig,
    /// Access rules, first match wins (G1-G3, H5).
    #[serde(default)]
    pub rule: Vec<RuleConfig>,
    /// External before/after hooks (H1-H5).
    #[serde(default)]
    pub hook: Vec<HookConfig>,
    /// Rate and concurrency limits per caller and tool (Q1-Q4).
    #[serde(default)]
    pub quota: Vec<QuotaConfig>,
    /// Session flow rules over tool labels (F1-F4).
    #[serde(default)]
    pub flow: Vec<FlowConfig>,
    /// `[store]`: where the ledger and the audit trail live.
    #[serde(default)]
    pub store: StoreConfig,
    /// `[idempotency]`: how repeated calls are recognised.
    #[serde(default)]
    pub idempotency: IdempotencyConfig,
    /// `[audit]`: the audit trail's extra copy and what it hides.
    #[serde(default)]
    pub audit: AuditConfig,
    /// `[metrics]`: the Prometheus endpoint (the older name of `admin.listen`).
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// `[admin]`: the admin listener (metrics, operator console, admin API).
    #[serde(default)]
    pub admin: AdminConfig,
    /// `[traces]`: OpenTelemetry traces over OTLP/HTTP.
    #[serde(default)]
    pub traces: TracesConfig,
    /// `[auth]`: bearer JWTs on the HTTP front.
    #[serde(default)]
    pub auth: AuthConfig,
    /// `[oauth]`: the HTTP front as an OAuth 2.1 resource server of one issuer.
    #[serde(default)]
    pub oauth: OAuthConfig,
}

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
}

/// What `[access] default` may say: `ask` needs a rule that names the tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessDefault {
    Allow,
    Deny,
}

impl AccessDefault {
    pub fn effect(self) -> Effect {
        match self {
            AccessDefault::Allow => Effect::Allow,
            AccessDefault::Deny => Effect::Deny,
        }
    }
}

impl FromStr for AccessDefault {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(AccessDefault::Allow),
            "deny" => Ok(AccessDefault::Deny),
            other => Err(format!("'{other}' is not a default; use allow or deny")),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessConfig {
    /// allow | deny, when no rule matches; built-in: allow.
    #[serde(default, deserialize_with = "parsed_opt")]
    pub default: Option<AccessDefault>,
    /// How long an `ask` waits for the human's answer, in ms.
    #[serde(default = "default_approval_timeout")]
    pub approval_timeout_ms: u64,
    /// A grant webhook (G4): decides per caller and tool; when it fails a listing
    /// falls back to the rules and a call fails closed.
    pub webhook: Option<WebhookConfig>,
}

fn default_approval_timeout() -> u64 {
    120_000
}

// Not derived: a config without `[access]` must get the same approval timeout as
// one whose `[access]` leaves it out (a derived 0 made every question time out).
impl Default for AccessConfig {
    fn default() -> Self {
        AccessConfig {
            default: None,
            approval_timeout_ms: default_approval_timeout(),
            webhook: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// An http:// or https:// URL.
    pub url: String,
    /// How long one decision may take, in ms.
    #[serde(default = "default_webhook_timeout")]
    pub timeout_ms: u64,
}

fn default_webhook_timeout() -> u64 {
    300
}

/// When a hook webhook hears of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before the call goes upstream; the hook may refuse or rewrite it.
    Before,
    /// After the answer; the hook only hears of it.
    After,
}

impl FromStr for Phase {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "before" => Ok(Phase::Before),
            "after" => Ok(Phase::After),
            other => Err(format!("'{other}' is not a phase; use before or after")),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    /// before | after.
    #[serde(deserialize_with = "parsed")]
    pub phase: Phase,
    /// An http:// or https:// URL the call's context is POSTed to.
    pub url: String,
    /// How long one POST may take, in ms.
    #[serde(default = "default_webhook_timeout")]
    pub timeout_ms: u64,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite://FILE` (relative to the config file's folder) or
    /// `postgres://USER@HOST/DB` for replicas sharing state. Without it the
    /// ledger is off and the audit trail goes to the log (and `audit.jsonl`) only.
    pub url: Option<String>,
    /// The environment variable holding the URL instead (a password stays in a
    /// secret); once loaded, `url` holds its value.
    pub url_env: Option<String>,
    /// PostgreSQL only: how many connections a replica opens at most (default 8).
    /// One is opened at start; more as concurrent calls find the open ones busy.
    pub connections: Option<usize>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdempotencyConfig {
    /// The `_meta` key carrying a call's idempotency key (I1).
    #[serde(default = "default_meta_key")]
    pub meta_key: String,
    /// How long a key is remembered (I2): `90s`, `15m`, `24h`, `7d`.
    #[serde(default = "default_retention")]
    pub retention: String,
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        Self {
            meta_key: default_meta_key(),
            retention: default_retention(),
        }
    }
}

fn default_meta_key() -> String {
    "warden/idempotencyKey".into()
}
fn default_retention() -> String {
    "24h".into()
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Where Prometheus scrapes `/metrics` (`127.0.0.1:9464`); off when absent.
    /// Kept for configurations written before `admin.listen`, which is the same listener.
    pub listen: Option<String>,
}

/// The admin listener: `/metrics`, the operator console (`/`) and the admin API (`/api/`).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Where the admin listener listens (`127.0.0.1:9464`); off when absent (and
    /// `metrics.listen` is absent too).
    pub listen: Option<String>,
    /// Who may open the console and the admin API: caller names or `group:NAME`,
    /// authenticated as on the HTTP front (API key or JWT). Empty: loopback clients only.
    #[serde(default)]
    pub callers: Vec<String>,
}

/// OpenTelemetry traces, sent over OTLP/HTTP (protobuf). Off unless an endpoint is
/// set here or in `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TracesConfig {
    /// The collector's base URL (`http://127.0.0.1:4318`); spans go to `<endpoint>/v1/traces`.
    pub endpoint: Option<String>,
    /// The `service.name` of the spans (else `OTEL_SERVICE_NAME`, else `mcp-warden`).
    pub service_name: Option<String>,
    /// The share of new traces recorded, 0.0 to 1.0 (built-in: 1.0). A trace the
    /// client started follows the client's sampled flag.
    pub sampling_ratio: Option<f64>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// A JSON-lines file each audit record is also appended to.
    pub jsonl: Option<String>,
    /// Argument keys whose values are replaced by "[redacted]" in audit records.
    #[serde(default)]
    pub redact: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Caller names, `group:NAME`, or `*`.
    pub callers: Vec<String>,
    /// Globs over the tool names callers see (`notes.*`).
    pub tools: Vec<String>,
    /// allow | deny | ask.
    #[serde(deserialize_with = "parsed")]
    pub effect: Effect,
    /// Conditions on the call's arguments that must all hold for the rule to decide (G6).
    #[serde(default)]
    pub when: Vec<ConditionConfig>,
    /// Conditions of which at least one must hold (besides all of `when`) (G6).
    #[serde(default)]
    pub when_any: Vec<ConditionConfig>,
}

/// One condition on an argument (G6): a path and exactly one test (`min` and
/// `max` together are one test, as are `min_len` and `max_len`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionConfig {
    /// The argument path: `amount`, `filters.owner`, `items[*].id`, `items[0]`.
    pub arg: String,
    /// The value equals this one (numbers by value).
    pub equals: Option<serde_json::Value>,
    /// The value is one of these.
    pub one_of: Option<Vec<serde_json::Value>>,
    /// The value is a string matching this glob (`*` crosses `/`).
    pub glob: Option<String>,
    /// The value is a string this regex finds a match in (anchor it with ^…$ to match whole).
    pub regex: Option<String>,
    /// The value is a number at least this.
    pub min: Option<f64>,
    /// The value is a number at most this.
    pub max: Option<f64>,
    /// The value is a string, array or object of at least this length.
    pub min_len: Option<u64>,
    /// The value is a string, array or object of at most this length.
    pub max_len: Option<u64>,
    /// true: the path reaches a value; false: it reaches none.
    pub present: Option<bool>,
}

/// One `[[quota]]`: whose calls to which tools, how many, how fast (Q1-Q4).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// Caller names, `group:NAME`, or `*`; each caller is counted on its own.
    pub callers: Vec<String>,
    /// Globs over the tool names callers see; the tools share one count.
    pub tools: Vec<String>,
    /// Calls per unit: `30/minute`, `5/second`, `1000/hour`, `10000/day`.
    pub rate: Option<String>,
    /// Calls allowed at once on top of the steady rate (built-in: the rate's count).
    pub burst: Option<u32>,
    /// Calls of one caller in flight at once.
    pub concurrency: Option<u32>,
    /// When the shared store cannot answer, refuse the call (true) or let it
    /// through uncounted (false, the built-in).
    #[serde(default)]
    pub strict: bool,
}

/// What a matching `[[flow]]` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowEffect {
    Deny,
    /// Runs once a human approves it (the approval path of `ask` rules).
    Ask,
}

impl FromStr for FlowEffect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "deny" => Ok(FlowEffect::Deny),
            "ask" => Ok(FlowEffect::Ask),
            other => Err(format!("'{other}' is not a flow effect; use deny or ask")),
        }
    }
}

/// One `[[flow]]`: a label combination a session must not complete (F2).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowConfig {
    /// Labels the session has touched, all of them (the call's own labels count).
    pub touched: Vec<String>,
    /// … and the label of the call this rule stops.
    pub calling: String,
    /// deny | ask.
    #[serde(deserialize_with = "parsed")]
    pub effect: FlowEffect,
    /// Why, in plain words for the model (built-in: a sentence naming the labels).
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallerConfig {
    /// The name rules and audit records know the caller by.
    pub name: String,
    /// Groups rules can name as `group:NAME`.
    #[serde(default)]
    pub groups: Vec<String>,
    /// The environment variable holding this caller's HTTP bearer key.
    pub api_key_env: Option<String>,
}

/// How HTTP callers prove who they are besides API keys: bearer JWTs.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// The environment variable holding an HS256 secret.
    pub jwt_secret_env: Option<String>,
    /// A JWKS file with RS256 / ES256 public keys (selected by `kid`).
    pub jwks: Option<String>,
    /// The `iss` a token must carry.
    pub issuer: Option<String>,
    /// The `aud` a token must carry.
    pub audience: Option<String>,
    /// The claim naming the caller (built-in: `sub`).
    pub caller_claim: Option<String>,
}

/// `[oauth]`: the HTTP front as an OAuth 2.1 resource server (RFC 9728 metadata,
/// tokens from one issuer whose keys and endpoints are discovered).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// The authorization server's issuer identifier; https (http only for a
    /// loopback host, for tests and local development).
    pub issuer: Option<String>,
    /// The gateway's canonical URL, the audience its tokens must name (RFC 8707);
    /// built-in: the front's own URL (`http[s]://listen/mcp`).
    pub resource: Option<String>,
    /// Scopes the metadata advertises to clients.
    #[serde(default)]
    pub scopes_supported: Vec<String>,
    /// Scopes every token must carry (403 `insufficient_scope` otherwise).
    #[serde(default)]
    pub required_scopes: Vec<String>,
    /// Scope → tool globs: a `tools/call` of a matching tool needs the scope (step-up).
    #[serde(default)]
    pub tool_scopes: HashMap<String, Vec<String>>,
    /// Scope → groups a token carrying it puts its caller in.
    #[serde(default)]
    pub scope_groups: HashMap<String, Vec<String>>,
    /// A claim holding a list of group names (built-in: none).
    pub groups_claim: Option<String>,
    /// The claim naming the caller (built-in: `sub`).
    pub caller_claim: Option<String>,
    /// A PEM file of CA certificates trusted for the issuer besides the public roots.
    pub tls_ca_file: Option<PathBuf>,
    /// The gateway's own client id at the issuer (introspection, token exchange).
    pub client_id: Option<String>,
    /// The environment variable holding that client's secret.
    pub client_secret_env: Option<String>,
    /// Opaque (non-JWT) tokens are checked at the issuer's introspection endpoint (RFC 7662).
    #[serde(default)]
    pub introspection: bool,
    /// The least time between two fetches of the issuer's keys (an unknown `kid`
    /// triggers one).
    #[serde(default = "default_jwks_min_interval")]
    pub jwks_min_interval: String,
    /// How long fetched keys are used before they are fetched again.
    #[serde(default = "default_jwks_max_age")]
    pub jwks_max_age: String,
    /// Each request to the issuer.
    #[serde(default = "default_oauth_timeout")]
    pub timeout_ms: u64,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        OAuthConfig {
            issuer: None,
            resource: None,
            scopes_supported: Vec::new(),
            required_scopes: Vec::new(),
            tool_scopes: HashMap::new(),
            scope_groups: HashMap::new(),
            groups_claim: None,
            caller_claim: None,
            tls_ca_file: None,
            client_id: None,
            client_secret_env: None,
            introspection: false,
            jwks_min_interval: default_jwks_min_interval(),
            jwks_max_age: default_jwks_max_age(),
            timeout_ms: default_oauth_timeout(),
        }
    }
}

fn default_jwks_min_interval() -> String {
    "10s".into()
}

fn default_jwks_max_age() -> String {
    "15m".into()
}

fn default_oauth_timeout() -> u64 {
    5000
}

impl AuthConfig {
    pub fn jwt_enabled(&self) -> bool {
        self.jwt_secret_env.is_some() || self.jwks.is_some()
    }
}

/// A value written as a string and read with its type's own parser. Going through
/// `String` keeps serde's type errors as they were for string fields, and the
/// parser's message says which words are allowed.
fn parsed<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr<Err = String>,
{
    String::deserialize(deserializer)?
        .parse()
        .map_err(|message| de::Error::custom(format!("{VALUE_ERROR}{message}")))
}

fn parsed_opt<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr<Err = String>,
{
    parsed(deserializer).map(Some)
}
