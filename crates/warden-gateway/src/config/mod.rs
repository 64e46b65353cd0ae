//! The gateway's one TOML file: parsing, checking, and turning it into runtime values.
//!
//! Every table denies keys it does not declare, so the serde structs are the only
//! list of known keys: an unknown or misspelt key is serde's error, reported with
//! the file, the key's full path and the closest known key.

use crate::webhook::Webhook;
use serde::de::{self, Deserializer};
use serde::Deserialize;
use serde_json::Value;
use serde_path_to_error::Segment;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use warden_core::{Effect, LayeredPolicy, Overrides, Rule, Rules, UnknownMode};

/// The default upstream call timeout.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;
/// The default cap on one JSON-RPC message, in bytes.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Tables whose keys are names the user chooses rather than settings. serde's
/// path cannot tell a chosen name from a field, and errors name such a table as
/// `[upstream.tools.*]`, whatever the tool is called.
const NAMED_TABLES: &[&str] = &["upstream.tools"];

/// Leads the message of a value that had the right type but a wrong content (an
/// unknown `front`, say). serde hands back only a message; this is how the loader
/// tells these from serde's own type errors, which name no key.
const VALUE_ERROR: char = '\u{1}';

/// The whole file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
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
    /// `[store]`: where the ledger and the audit trail live.
    #[serde(default)]
    pub store: StoreConfig,
    /// `[idempotency]`: how repeated calls are recognised.
    #[serde(default)]
    pub idempotency: IdempotencyConfig,
    /// `[audit]`: the audit trail's extra copy and what it hides.
    #[serde(default)]
    pub audit: AuditConfig,
    /// `[metrics]`: the Prometheus endpoint.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// `[auth]`: bearer JWTs on the HTTP front.
    #[serde(default)]
    pub auth: AuthConfig,
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
    /// The HTTP front serves https with this PEM certificate chain …
    pub tls_cert: Option<PathBuf>,
    /// … and this PEM private key.
    pub tls_key: Option<PathBuf>,
    /// The environment variable holding the secret that seals 2026-07-28
    /// `requestState`s, shared by replicas (built-in: a random key per process).
    pub state_secret_env: Option<String>,
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
            tls_cert: None,
            tls_key: None,
            state_secret_env: None,
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:8931".into()
}
fn default_session_idle() -> String {
    "30m".into()
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
    /// Per tool settings, keyed by the upstream's own tool name.
    #[serde(default)]
    pub tools: HashMap<String, ToolConfig>,
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

#[derive(Debug, Clone, Deserialize, Default)]
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
    pub listen: Option<String>,
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

/// One thing wrong with the file: the dotted key and what to do about it.
#[derive(Debug)]
struct Invalid {
    pub key: String,
    pub message: String,
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> Invalid {
    Invalid {
        key: key.into(),
        message: message.into(),
    }
}

/// `[access]`, checked: the grant webhook's URL is parsed here, once.
#[derive(Debug, Clone)]
pub struct Access {
    /// What happens when no rule matches.
    pub default: Effect,
    /// How long an `ask` waits for the human's answer, in ms.
    pub approval_timeout_ms: u64,
    /// The grant webhook (G4), if one is configured.
    pub webhook: Option<Webhook>,
}

/// One `[[hook]]`, checked: its URL is parsed here, once.
#[derive(Debug, Clone)]
pub struct Hook {
    /// Before the call goes upstream, or after its answer.
    pub phase: Phase,
    /// Where the call's context is POSTed.
    pub webhook: Webhook,
}

/// The tables whose checked form differs from what the file says.
struct Checked {
    pub access: Access,
    pub hook: Vec<Hook>,
}

/// Checks a deserialised file. Only the first problem is reported, so the order
/// of the checks decides which one a file with several gets to hear about.
fn check(file: &ConfigFile) -> Result<Checked, Invalid> {
    let (gateway, auth) = (&file.gateway, &file.auth);
    parse_duration(&gateway.session_idle).map_err(|m| invalid("gateway.session_idle", m))?;
    if gateway.tls_cert.is_some() != gateway.tls_key.is_some() {
        return Err(invalid(
            "gateway",
            "tls_cert and tls_key go together: set both to serve https, or neither",
        ));
    }
    if auth.jwt_secret_env.is_some() && auth.jwks.is_some() {
        return Err(invalid(
            "auth",
            "set jwt_secret_env (HS256) or jwks (RS256/ES256), not both",
        ));
    }
    if (auth.issuer.is_some() || auth.audience.is_some()) && !auth.jwt_enabled() {
        return Err(invalid(
            "auth",
            "issuer and audience check JWTs: also set jwt_secret_env or jwks",
        ));
    }
    if gateway.max_message_bytes < 1024 {
        return Err(invalid(
            "gateway.max_message_bytes",
            "must be at least 1024",
        ));
    }
    let mut names = HashSet::new();
    for (i, up) in file.upstream.iter().enumerate() {
        upstream(i, up, &mut names)?;
    }
    let default = file.access.default.map_or(Effect::Allow, |d| d.effect());
    rules(default, &file.rule)?;
    if let Some(url) = &file.store.url {
        let sqlite = url.strip_prefix("sqlite://").is_some_and(|p| !p.is_empty());
        let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
        if !sqlite && !postgres {
            return Err(invalid(
                "store.url",
                format!("'{url}' is not a store URL; use sqlite://FILE or postgres://USER@HOST/DB"),
            ));
        }
    }
    parse_duration(&file.idempotency.retention).map_err(|m| invalid("idempotency.retention", m))?;
    if file.idempotency.meta_key.is_empty() {
        return Err(invalid("idempotency.meta_key", "must not be empty"));
    }
    let webhook = file
        .access
        .webhook
        .as_ref()
        .map(|w| Webhook::parse(&w.url, w.timeout_ms).map_err(|m| invalid("access.webhook", m)))
        .transpose()?;
    let mut hook = Vec::with_capacity(file.hook.len());
    for (i, h) in file.hook.iter().enumerate() {
        let webhook =
            Webhook::parse(&h.url, h.timeout_ms).map_err(|m| invalid(format!("hook[{i}]"), m))?;
        hook.push(Hook {
            phase: h.phase,
            webhook,
        });
    }
    let mut callers = HashSet::new();
    for (i, c) in file.caller.iter().enumerate() {
        if !callers.insert(c.name.as_str()) {
            return Err(invalid(
                format!("caller[{i}].name"),
                format!("'{}' names two callers", c.name),
            ));
        }
    }
    let access = Access {
        default,
        approval_timeout_ms: file.access.approval_timeout_ms,
        webhook,
    };
    Ok(Checked { access, hook })
}

/// One `[[upstream]]`; `names` collects the names seen so far.
fn upstream<'a>(
    i: usize,
    up: &'a UpstreamConfig,
    names: &mut HashSet<&'a str>,
) -> Result<(), Invalid> {
    let at = |k: &str| format!("upstream[{i}].{k}");
    if up.name.is_empty()
        || !up
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
    {
        return Err(invalid(
            at("name"),
            format!(
                "'{}' is not a usable upstream name; use letters, digits, '_' and '-'",
                up.name
            ),
        ));
    }
    if !names.insert(up.name.as_str()) {
        return Err(invalid(
            at("name"),
            format!("'{}' names two upstreams; names must be unique", up.name),
        ));
    }
    match (&up.url, up.command.is_empty()) {
        (Some(_), false) => {
            return Err(invalid(
                at("url"),
                "set command (a child process) or url (an HTTP server), not both",
            ))
        }
        (Some(url), true) => {
            let target = Webhook::parse(url, 1).map_err(|m| invalid(at("url"), m))?;
            if up.tls_ca_file.is_some() && !target.is_tls() {
                return Err(invalid(
                    at("tls_ca_file"),
                    "is for https:// upstreams; this url is plain http",
                ));
            }
        }
        (None, _) => {
            if up.command.is_empty() || up.command[0].is_empty() {
                return Err(invalid(
                    at("command"),
                    "must name the program to run, e.g. [\"npx\", \"-y\", \"server\"], or set url for an HTTP server",
                ));
            }
            if up.bearer_token_env.is_some() {
                return Err(invalid(
                    at("bearer_token_env"),
                    "is for HTTP upstreams (url); a child process gets credentials through env",
                ));
            }
        }
    }
    if up.timeout_ms == 0 {
        return Err(invalid(at("timeout_ms"), "must be more than 0"));
    }
    for (tool, tc) in &up.tools {
        let at = |k: &str| format!("upstream[{i}].tools.{tool}.{k}");
        for (alias, canonical) in &tc.aliases {
            if !canonical.is_str() {
                return Err(invalid(
                    at(&format!("aliases.{alias}")),
                    "an alias maps to the canonical parameter's name, a string",
                ));
            }
        }
        for (pinned, _) in &tc.pin {
            if tc.aliases.contains_key(pinned) {
                return Err(invalid(
                    at("pin"),
                    format!("'{pinned}' is both pinned and an alias"),
                ));
            }
        }
    }
    Ok(())
}

/// The access rules, built; an error names the rule and what is wrong with it.
fn rules(default: Effect, rule: &[RuleConfig]) -> Result<Rules, Invalid> {
    let rules = rule
        .iter()
        .enumerate()
        .map(|(i, r)| {
            Rule::new(&r.callers, &r.tools, r.effect).map_err(|m| invalid(format!("rule[{i}]"), m))
        })
        .collect::<Result<_, _>>()?;
    Ok(Rules { rules, default })
}

/// The argument policy: defaults, then per-upstream, then per-tool layers.
fn policy(defaults: &DefaultsConfig, upstreams: &[UpstreamConfig]) -> LayeredPolicy {
    let mut policy = LayeredPolicy {
        defaults: Overrides {
            unknown: defaults.unknown_arguments,
            validate: defaults.validate,
            reasons: defaults.reasons,
            ..Default::default()
        },
        ..Default::default()
    };
    for up in upstreams {
        policy.upstreams.insert(
            up.name.clone(),
            Overrides {
                unknown: up.unknown_arguments,
                validate: up.validate,
                reasons: up.reasons,
                ..Default::default()
            },
        );
        for (tool, tc) in &up.tools {
            policy.tools.insert(
                (up.name.clone(), tool.clone()),
                Overrides {
                    unknown: tc.unknown_arguments,
                    validate: tc.validate,
                    reasons: tc.reasons,
                    close_schema: tc.close_schema,
                    aliases: tc
                        .aliases
                        .iter()
                        .filter_map(|(a, c)| Some((a.clone(), c.as_str()?.to_owned())))
                        .collect(),
                    pins: tc
                        .pin
                        .iter()
                        .map(|(k, v)| (k.clone(), toml_to_json(v)))
                        .collect(),
                },
            );
        }
    }
    policy
}

/// What the warnings look at, borrowed from the checked config.
struct Settings<'a> {
    pub rules: &'a Rules,
    pub gateway: &'a GatewayConfig,
    pub defaults: &'a DefaultsConfig,
    pub upstream: &'a [UpstreamConfig],
    pub caller: &'a [CallerConfig],
    pub auth: &'a AuthConfig,
}

/// Risky but valid settings, one sentence each. Environment variables are read
/// now, not when the file was loaded, so a warning reflects the current process.
fn warnings(s: Settings<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for (shadowed, by) in s.rules.shadowed() {
        out.push(format!(
            "rule[{shadowed}] never applies: rule[{by}] comes first and matches everything it does"
        ));
    }
    for up in s.upstream {
        for (tool, tc) in &up.tools {
            let seen = warden_core::catalogue::seen_name(&up.name, tool, up.prefix);
            if tc.arbitrary_targets && s.rules.grants_any(&seen) {
                out.push(format!(
                    "'{seen}' reaches arbitrary targets (arbitrary_targets = true) and is granted: a caller who may call it reaches everything it can name (G5)"
                ));
            }
        }
    }
    if s.defaults.validate == Some(false) {
        out.push(
            "defaults.validate = false: arguments reach upstreams without schema validation (A5)"
                .into(),
        );
    }
    let unprefixed: Vec<&str> = s
        .upstream
        .iter()
        .filter(|u| !u.prefix)
        .map(|u| u.name.as_str())
        .collect();
    if unprefixed.len() > 1 {
        out.push(format!(
            "upstreams {} are not prefixed: a tool name both offer is served by the first only",
            unprefixed.join(", ")
        ));
    }
    if s.upstream.is_empty() {
        out.push("no [[upstream]] is configured: the gateway offers no tools".into());
    }
    for up in s.upstream {
        if up.timeout_ms > 600_000 {
            out.push(format!(
                "upstream '{}': timeout_ms = {} lets a hung call hold a caller for over 10 minutes",
                up.name, up.timeout_ms
            ));
        }
        if let Some(var) = &up.bearer_token_env {
            if std::env::var(var).map_or(true, |v| v.is_empty()) {
                out.push(format!(
                    "upstream '{}': bearer_token_env = '{var}' is not set in the environment: requests go without a token",
                    up.name
                ));
            }
        }
        if up.validate == Some(false) {
            out.push(format!(
                "upstream '{}': validate = false turns schema validation off",
                up.name
            ));
        }
    }
    let gateway = s.gateway;
    if let Some(anon) = &gateway.anonymous_caller {
        out.push(format!(
            "gateway.anonymous_caller = '{anon}': HTTP requests without credentials act as '{anon}' (authentication is off for them; development and test suites only)"
        ));
    }
    let keyed = s.caller.iter().any(|c| c.api_key_env.is_some());
    if gateway.front == Front::Http
        && !keyed
        && !s.auth.jwt_enabled()
        && gateway.anonymous_caller.is_none()
    {
        out.push("the HTTP front has no way to identify callers (no [[caller]] api_key_env, no [auth] JWT, no gateway.anonymous_caller): every request will get 401".into());
    }
    if s.auth.jwt_enabled() && s.auth.audience.is_none() {
        out.push("[auth] has no audience: a JWT issued for another service is accepted".into());
    }
    for c in s.caller {
        if let Some(var) = &c.api_key_env {
            if std::env::var(var).map_or(true, |v| v.is_empty()) {
                out.push(format!(
                    "caller '{}': api_key_env = '{var}' is not set in the environment: the caller cannot authenticate over HTTP",
                    c.name
                ));
            }
        }
    }
    if !s.caller.iter().any(|c| c.name == gateway.stdio_caller) && !s.caller.is_empty() {
        out.push(format!(
            "gateway.stdio_caller = '{}' is not one of the [[caller]] entries: it has no groups",
            gateway.stdio_caller
        ));
    }
    out
}

/// `90s`, `15m`, `24h`, `7d`.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let bad =
        || format!("'{text}' is not a duration; write a number and a unit: 90s, 15m, 24h, 7d");
    let t = text.trim();
    let unit = t.chars().last().ok_or_else(bad)?;
    let n: u64 = t[..t.len() - unit.len_utf8()].parse().map_err(|_| bad())?;
    let secs = match unit {
        's' => n,
        'm' => n * 60,
        'h' => n * 3600,
        'd' => n * 86_400,
        _ => return Err(bad()),
    };
    Ok(std::time::Duration::from_secs(secs))
}

/// Converts a TOML value into JSON (pins are JSON values sent upstream).
pub fn toml_to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), toml_to_json(v)))
                .collect(),
        ),
    }
}

/// A checked config file.
#[derive(Debug, Clone)]
pub struct Config {
    pub gateway: GatewayConfig,
    pub defaults: DefaultsConfig,
    pub upstream: Vec<UpstreamConfig>,
    pub caller: Vec<CallerConfig>,
    /// `[access]`, with the grant webhook parsed.
    pub access: Access,
    /// Access rules, first match wins (G1-G3, H5).
    pub rule: Vec<RuleConfig>,
    /// External before/after hooks (H1-H5), their URLs parsed.
    pub hook: Vec<Hook>,
    pub store: StoreConfig,
    pub idempotency: IdempotencyConfig,
    pub audit: AuditConfig,
    pub metrics: MetricsConfig,
    pub auth: AuthConfig,
    /// Where the file was read from; relative upstream commands resolve against its folder.
    pub path: PathBuf,
}

/// A configuration error: where, what, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    /// The dotted key path (`upstream[0].tools.create_note.pin`), empty for the whole file.
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}: {}: {}", self.file, self.key, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            key: String::new(),
            message: format!("cannot read the file ({e}); pass --config FILE with a readable file"),
        })?;
        let mut config = Config::parse(&text, &file)?;
        config.path = path.to_path_buf();
        Ok(config)
    }

    /// Parses and checks config text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let err = |key: String, message: String| ConfigError {
            file: file.to_owned(),
            key,
            message,
        };
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            err(
                String::new(),
                format!("not valid TOML: {}", e.message().trim()),
            )
        })?;
        let raw: ConfigFile =
            serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
                let (key, message) = deserialise_error(e);
                err(key, message)
            })?;
        let Checked { access, hook } =
            check(&raw).map_err(|Invalid { key, message }| err(key, message))?;
        let ConfigFile {
            gateway,
            defaults,
            upstream,
            caller,
            access: _,
            rule,
            hook: _,
            store,
            idempotency,
            audit,
            metrics,
            auth,
        } = raw;
        Ok(Config {
            gateway,
            defaults,
            upstream,
            caller,
            access,
            rule,
            hook,
            store,
            idempotency,
            audit,
            metrics,
            auth,
            path: PathBuf::new(),
        })
    }

    /// The access rules (the config was checked when loaded).
    pub fn rules(&self) -> Rules {
        rules(self.access.default, &self.rule).unwrap_or_default()
    }

    /// Risky but valid settings, one sentence each (printed by `check` and at start-up).
    pub fn warnings(&self) -> Vec<String> {
        warnings(Settings {
            rules: &self.rules(),
            gateway: &self.gateway,
            defaults: &self.defaults,
            upstream: &self.upstream,
            caller: &self.caller,
            auth: &self.auth,
        })
    }

    /// The argument policy: defaults, then per-upstream, then per-tool layers.
    pub fn policy(&self) -> LayeredPolicy {
        policy(&self.defaults, &self.upstream)
    }

    /// The program to start for an upstream, resolved against the config's folder.
    pub fn program(&self, up: &UpstreamConfig) -> PathBuf {
        let Some(first) = up.command.first() else {
            return PathBuf::new(); // an HTTP upstream
        };
        let program = Path::new(first);
        if program.is_relative() && up.command[0].contains('/') {
            self.path.parent().unwrap_or(Path::new(".")).join(program)
        } else {
            program.to_path_buf()
        }
    }

    /// A path from the config, resolved against the config file's folder.
    pub fn resolve_path(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        if p.is_relative() {
            self.path.parent().unwrap_or(Path::new(".")).join(p)
        } else {
            p.to_path_buf()
        }
    }

    /// The SQLite file of `[store] url`, if one is configured.
    pub fn store_path(&self) -> Option<PathBuf> {
        let url = self.store.url.as_deref()?;
        Some(self.resolve_path(url.strip_prefix("sqlite://")?))
    }

    /// Opens the configured store, if any: a SQLite file, or a PostgreSQL connection.
    pub async fn open_store(&self) -> Result<Option<warden_store::Store>, String> {
        let Some(url) = self.store.url.as_deref() else {
            return Ok(None);
        };
        let store = match self.store_path() {
            Some(path) => warden_store::Store::open(&path),
            None => warden_store::Store::connect_postgres(url).await,
        };
        store.map(Some).map_err(|e| format!("store.url: {e}"))
    }

    /// The groups of a caller named in config (none for an unlisted caller).
    pub fn groups_of(&self, caller: &str) -> Vec<String> {
        self.caller
            .iter()
            .find(|c| c.name == caller)
            .map(|c| c.groups.clone())
            .unwrap_or_default()
    }
}

/// A deserialisation error as a key and a message.
///
/// An unknown key gets the table it is in, the closest known key and the list
/// of known keys, all taken from serde's complaint. A value its parser refused
/// names its key. Any other serde error (a wrong type, a missing field) is
/// reported as serde words it, for the whole file, as it always was.
fn deserialise_error(e: serde_path_to_error::Error<toml::de::Error>) -> (String, String) {
    let path = e.path().clone();
    let message = e.into_inner().message().trim().to_owned();
    let segments: Vec<&Segment> = path.iter().collect();
    if let Some((Segment::Map { key }, table)) = segments.split_last() {
        if let Some(known) = unknown_field(&message, key) {
            return (path.to_string(), unknown_key(key, table, &known));
        }
    }
    match message.strip_prefix(VALUE_ERROR) {
        Some(message) => (path.to_string(), message.to_owned()),
        None => (String::new(), message),
    }
}

/// The field names serde lists when it rejects `key` as unknown, or `None` for
/// any other error. The key is taken from the path rather than the message, as a
/// quoted TOML key may itself contain a backtick.
fn unknown_field(message: &str, key: &str) -> Option<Vec<String>> {
    let rest = message
        .strip_prefix("unknown field `")?
        .strip_prefix(key)?
        .strip_prefix("`, ")?;
    if rest == "there are no fields" {
        return Some(Vec::new());
    }
    let list = rest.strip_prefix("expected ")?;
    let list = list.strip_prefix("one of ").unwrap_or(list);
    // `a`, `b` or `a` or `b`: the names are every other piece between backticks.
    Some(
        list.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// The message for an unknown `key` in the table at `table`.
fn unknown_key(key: &str, table: &[&Segment], known: &[String]) -> String {
    let hint = known
        .iter()
        .map(|k| (strsim::levenshtein(key, k), k))
        .filter(|(d, k)| *d <= 3.max(k.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| format!(" Did you mean '{k}'?"))
        .unwrap_or_default();
    let section = section(table);
    let where_ = if section.is_empty() {
        "at the top level".to_owned()
    } else {
        format!("in [{section}]")
    };
    format!(
        "unknown key {where_}.{hint} Known keys: {}.",
        known.join(", ")
    )
}

/// How errors name a table: its dotted path without array indices, a name the
/// user chose standing as `*` (`upstream[0].tools.t` is `upstream.tools.*`).
fn section(table: &[&Segment]) -> String {
    let mut names: Vec<String> = Vec::new();
    for segment in table {
        let name = match segment {
            Segment::Seq { .. } => continue,
            _ if NAMED_TABLES.contains(&names.join(".").as_str()) => "*".to_owned(),
            other => other.to_string(),
        };
        names.push(name);
    }
    names.join(".")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const EXAMPLE: &str = r#"
[gateway]
stdio_caller = "local"

[defaults]
unknown_arguments = "warn"

[[upstream]]
name = "notes"
command = ["./notes-server", "--flag"]
unknown_arguments = "reject"
timeout_ms = 5000

[upstream.tools.create_note]
aliases = { body = "text" }
pin = { is_public = false }
close_schema = true
"#;

    #[test]
    fn parses_the_example_shape() {
        let c = Config::parse(EXAMPLE, "warden.toml").unwrap();
        assert_eq!(c.upstream[0].timeout_ms, 5000);
        let p = c.policy().resolve("notes", "create_note");
        assert_eq!(p.unknown, UnknownMode::Reject);
        assert_eq!(p.aliases, vec![("body".to_string(), "text".to_string())]);
        assert_eq!(p.pins.get("is_public"), Some(&Value::Bool(false)));
        assert!(p.close_schema);
        assert_eq!(
            c.policy().resolve("notes", "list_notes").unknown,
            UnknownMode::Reject
        );
    }

    #[test]
    fn http_upstreams_are_checked() {
        let e = Config::parse(
            "[[upstream]]\nname = \"a\"\nurl = \"http://127.0.0.1:1/mcp\"\ntls_ca_file = \"ca.pem\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml: upstream[0].tls_ca_file: is for https:// upstreams; this url is plain http"
        );
        let e = Config::parse(
            "[[upstream]]\nname = \"a\"\nurl = \"ftp://x/mcp\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml: upstream[0].url: 'ftp://x/mcp' is not an http:// or https:// URL"
        );
        let e = Config::parse(
            "[[upstream]]\nname = \"a\"\nurl = \"http://x/mcp\"\ncommand = [\"y\"]\n",
            "w.toml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml: upstream[0].url: set command (a child process) or url (an HTTP server), not both"
        );
        assert!(Config::parse(
            "[[upstream]]\nname = \"a\"\nurl = \"https://mcp.example.com/mcp\"\n",
            "w.toml"
        )
        .is_ok());
        let e = Config::parse("[gateway]\ntls_cert = \"c.pem\"\n", "w.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml: gateway: tls_cert and tls_key go together: set both to serve https, or neither"
        );
    }

    #[test]
    fn unknown_key_names_file_key_and_fix() {
        let e = Config::parse("[gateway]\nstdio_caler = \"x\"\n", "w.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml: gateway.stdio_caler: unknown key in [gateway]. Did you mean 'stdio_caller'? Known keys: front, stdio_caller, max_message_bytes, listen, anonymous_caller, allowed_origins, allowed_hosts, session_idle, tls_cert, tls_key, state_secret_env."
        );
        let e = Config::parse(
            "[[upstream]]\nname=\"a\"\ncommand=[\"x\"]\n[upstream.tools.t]\npinn = {}\n",
            "w.toml",
        )
        .unwrap_err();
        assert_eq!(e.key, "upstream[0].tools.t.pinn");
        assert!(e.message.contains("Did you mean 'pin'?"), "{}", e.message);
        let e = Config::parse("[defaultz]\n", "w.toml").unwrap_err();
        assert!(e.message.contains("Did you mean 'defaults'?"));
    }

    #[test]
    fn bad_values_are_named() {
        let e = Config::parse("[defaults]\nunknown_arguments = \"block\"\n", "w.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml: defaults.unknown_arguments: 'block' is not an unknown-argument mode; use one of: warn, strip, reject"
        );
        let e = Config::parse("[[upstream]]\nname=\"a\"\ncommand=[]\n", "w.toml").unwrap_err();
        assert_eq!(e.key, "upstream[0].command");
        let e = Config::parse("[[upstream]]\nname=\"a\"\ncommand=[\"x\"]\n[[upstream]]\nname=\"a\"\ncommand=[\"y\"]\n", "w.toml")
            .unwrap_err();
        assert_eq!(e.key, "upstream[1].name");
        let e = Config::parse("[gateway\n", "w.toml").unwrap_err();
        assert!(e.message.starts_with("not valid TOML"), "{}", e.message);
        let e = Config::parse("[[upstream]]\nname=\"a\"\ncommand=\"x\"\n", "w.toml").unwrap_err();
        assert!(
            e.message.contains("command") || e.message.contains("sequence"),
            "{}",
            e.message
        );
    }

    #[test]
    fn serde_errors_read_as_the_key_table_did() {
        // serde words its list of known keys differently for one, two and more.
        let e = Config::parse("[store]\nurl_ = 1\n", "w.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml: store.url_: unknown key in [store]. Did you mean 'url'? Known keys: url."
        );
        let e = Config::parse("[idempotency]\nmeta = 1\n", "w.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml: idempotency.meta: unknown key in [idempotency]. Known keys: meta_key, retention."
        );
        let e = Config::parse(
            "[[upstream]]\nname=\"a\"\ncommand=[\"x\"]\n[upstream.tools.\"a.b\"]\npinn = 1\n",
            "w.toml",
        )
        .unwrap_err();
        assert_eq!(e.key, "upstream[0].tools.a.b.pinn");
        assert!(
            e.message
                .starts_with("unknown key in [upstream.tools.*]. Did you mean 'pin'?"),
            "{}",
            e.message
        );
        // A word the field does not know names the key; a value of the wrong type
        // is serde's message for the whole file.
        let e = Config::parse("[gateway]\nfront = \"ftp\"\n", "w.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml: gateway.front: 'ftp' is not a front; use \"stdio\" or \"http\""
        );
        let e = Config::parse("[access]\ndefault = \"ask\"\n", "w.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml: access.default: 'ask' is not a default; use allow or deny"
        );
        let e = Config::parse("[gateway]\nfront = 1\n", "w.toml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml: invalid type: integer `1`, expected a string"
        );
        let e = Config::parse("[[upstream]]\ncommand = [\"x\"]\n", "w.toml").unwrap_err();
        assert_eq!(e.to_string(), "w.toml: missing field `name`");
    }

    #[test]
    fn webhooks_are_parsed_once_when_checked() {
        let c = Config::parse(
            "[access]\ndefault = \"deny\"\nwebhook = { url = \"https://grant.example/g\" }\n\
             [[hook]]\nphase = \"after\"\nurl = \"http://127.0.0.1:9/a\"\n\
             [[hook]]\nphase = \"before\"\nurl = \"http://127.0.0.1:9/b\"\ntimeout_ms = 50\n",
            "w.toml",
        )
        .unwrap();
        assert_eq!(c.access.default, warden_core::Effect::Deny);
        let grant = c.access.webhook.as_ref().unwrap();
        assert_eq!(grant.url(), "https://grant.example/g");
        assert!(grant.is_tls());
        let hooks: Vec<(Phase, &str)> = c.hook.iter().map(|h| (h.phase, h.webhook.url())).collect();
        assert_eq!(
            hooks,
            [
                (Phase::After, "http://127.0.0.1:9/a"),
                (Phase::Before, "http://127.0.0.1:9/b")
            ]
        );
    }

    #[test]
    fn warnings_for_risky_settings() {
        let c = Config::parse(
            "[defaults]\nvalidate=false\n[[upstream]]\nname=\"a\"\ncommand=[\"x\"]\nprefix=false\n[[upstream]]\nname=\"b\"\ncommand=[\"y\"]\nprefix=false\n",
            "w.toml",
        )
        .unwrap();
        let w = c.warnings();
        assert!(w.iter().any(|w| w.contains("validate = false")));
        assert!(w.iter().any(|w| w.contains("not prefixed")));
    }

    #[test]
    fn rules_are_checked_and_warned_about() {
        let e = Config::parse(
            "[[rule]]\ncallers = [\"*\"]\ntools = [\"a.[x\"]\neffect = \"allow\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml: rule[0]: 'a.[x' is not a valid tool glob: unclosed character class; missing ']'"
        );
        let e = Config::parse(
            "[[rule]]\ncallers = [\"*\"]\ntools = [\"a\"]\neffect = \"permit\"\n",
            "w.toml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "w.toml: rule[0].effect: 'permit' is not an effect; use one of: allow, deny, ask"
        );
        let e = Config::parse("[access]\ndefault = \"ask\"\n", "w.toml").unwrap_err();
        assert_eq!(e.key, "access.default");
        let c = Config::parse(
            "[access]\ndefault = \"deny\"\n\
             [[rule]]\ncallers = [\"*\"]\ntools = [\"web.*\"]\neffect = \"allow\"\n\
             [[rule]]\ncallers = [\"alice\"]\ntools = [\"web.fetch\"]\neffect = \"deny\"\n\
             [[upstream]]\nname = \"web\"\ncommand = [\"x\"]\n[upstream.tools.fetch]\narbitrary_targets = true\n",
            "w.toml",
        )
        .unwrap();
        assert_eq!(
            c.warnings(),
            [
                "rule[1] never applies: rule[0] comes first and matches everything it does",
                "'web.fetch' reaches arbitrary targets (arbitrary_targets = true) and is granted: a caller who may call it reaches everything it can name (G5)"
            ]
        );
    }

    #[test]
    fn relative_programs_resolve_against_the_config_folder() {
        let mut c = Config::parse(EXAMPLE, "w.toml").unwrap();
        c.path = PathBuf::from("/etc/warden/warden.toml");
        assert_eq!(
            c.program(&c.upstream[0]),
            PathBuf::from("/etc/warden/./notes-server")
        );
        c.upstream[0].command[0] = "npx".into();
        assert_eq!(c.program(&c.upstream[0]), PathBuf::from("npx"));
    }
}
