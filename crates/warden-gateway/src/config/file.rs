//! What the TOML file may say: one serde type per table, nothing checked beyond
//! shape. Every table denies keys it does not declare, so these structs are the
//! only list of known keys; the loader turns serde's complaint into the
//! did-you-mean error.

mod admin;
mod audit;
mod console;
mod gateway;
mod guard;
mod server;
mod upstream;

pub use admin::*;
pub use audit::*;
pub use console::*;
pub use gateway::*;
pub use guard::*;
use serde::de::{self, Deserializer};
use serde::Deserialize;
pub use server::*;
use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
pub use upstream::*;
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
    /// Scanners with actions over tool results (S1-S5).
    #[serde(default)]
    pub guard: Vec<GuardConfig>,
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
    /// `[console]`: the console's own OpenID Connect issuer for its login (O9).
    #[serde(default)]
    pub console: ConsoleConfig,
    /// `[[server]]`: virtual servers, named tool sets (V1-V7).
    #[serde(default)]
    pub server: Vec<ServerConfig>,
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

/// Who answers an approval (H5, H6): the client's user through elicitation, an
/// operator in the console's inbox, or whichever answers first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Approver {
    #[default]
    Client,
    Console,
    Both,
}

impl FromStr for Approver {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "client" => Ok(Approver::Client),
            "console" => Ok(Approver::Console),
            "both" => Ok(Approver::Both),
            other => Err(format!(
                "'{other}' is not an approver; use client, console or both"
            )),
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
    /// Who answers an `ask`: `client` (elicitation, the default), `console` (the
    /// approvals inbox) or `both` (the first answer wins).
    #[serde(default, deserialize_with = "parsed_opt")]
    pub approver: Option<Approver>,
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
            approver: None,
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
    /// A CEL expression over caller, tool, args, session and request that must
    /// hold too (X1).
    pub when_cel: Option<String>,
    /// enforce (built-in) | shadow: judged, audited and counted, not enforced (X6).
    #[serde(default, deserialize_with = "parsed_opt")]
    pub mode: Option<RuleMode>,
    /// With `effect = "ask"`: who answers this rule's question (client |
    /// console | both), instead of `[access] approver` (H6).
    #[serde(default, deserialize_with = "parsed_opt")]
    pub approver: Option<Approver>,
}

/// Whether a rule is enforced or only watched (X6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleMode {
    Enforce,
    Shadow,
}

impl FromStr for RuleMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "enforce" => Ok(RuleMode::Enforce),
            "shadow" => Ok(RuleMode::Shadow),
            other => Err(format!(
                "'{other}' is not a mode; use one of: enforce, shadow"
            )),
        }
    }
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
    /// A CEL expression over caller, tool, args, session and request: the quota
    /// counts only the calls it holds for (X8).
    pub when_cel: Option<String>,
    /// enforce (built-in) | shadow: counted and audited, never refusing (X9).
    #[serde(default, deserialize_with = "parsed_opt")]
    pub mode: Option<RuleMode>,
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
    /// A CEL expression over caller, tool, args, session and request that must
    /// hold too for the rule to stop the call (X1).
    pub when_cel: Option<String>,
    /// enforce (built-in) | shadow: judged and audited, never stopping a call (X9).
    #[serde(default, deserialize_with = "parsed_opt")]
    pub mode: Option<RuleMode>,
    /// With `effect = "ask"`: who answers this rule's question (client |
    /// console | both), instead of `[access] approver` (H6).
    #[serde(default, deserialize_with = "parsed_opt")]
    pub approver: Option<Approver>,
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
    /// Introspection requests a second at most (as many at once after a quiet second).
    #[serde(default = "default_introspection_rate")]
    pub introspection_rate: u32,
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
            introspection_rate: default_introspection_rate(),
            jwks_min_interval: default_jwks_min_interval(),
            jwks_max_age: default_jwks_max_age(),
            timeout_ms: default_oauth_timeout(),
        }
    }
}

fn default_introspection_rate() -> u32 {
    20
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
