//! The gateway's one TOML file: read, deserialised, checked, and turned into the
//! values the gateway runs on.
//!
//! `file.rs` says what the file may contain, and its serde types are the only
//! list of known keys: an unknown or misspelt key is serde's error, reported here
//! with the file, the key's full path and the closest known key. `check.rs` does
//! what serde cannot and builds the runtime values.

mod check;
mod file;
pub mod guards;
pub mod limits;
mod report;
pub mod servers;

pub use check::{loopback_url, parse_duration, toml_to_json, Access, Hook};
pub use file::{
    AccessConfig, AccessDefault, AdminConfig, Approver, AuditConfig, AuthConfig, CallerConfig,
    ConsoleConfig, CredentialConfig, DefaultsConfig, Discovery, Durability, ErrorData,
    ExchangeConfig, FlowConfig, Front, GatewayConfig, HookConfig, IdempotencyConfig, MetricsConfig,
    OAuthConfig, Phase, PinMode, QuotaConfig, RuleConfig, ServerConfig, StoreConfig, ToolConfig,
    TracesConfig, UpstreamConfig, UpstreamProtocol, WebhookConfig, DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_PING_INTERVAL_MS, DEFAULT_RESTART_AFTER_TIMEOUTS, DEFAULT_TIMEOUT_MS,
};
pub use report::Located;

use check::{Checked, Settings};
use file::{ConfigFile, NAMED_TABLES, VALUE_ERROR};
use serde_path_to_error::Segment;
use sha2::Digest as _;
use std::fmt;
use std::path::{Path, PathBuf};
use warden_core::{LayeredPolicy, Rules};

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
    /// Quotas, flow rules and tool labels, checked (Q, F).
    pub limits: limits::Limits,
    /// Guards over tool results, checked (S1).
    pub guards: guards::Guards,
    pub store: StoreConfig,
    pub idempotency: IdempotencyConfig,
    pub audit: AuditConfig,
    pub metrics: MetricsConfig,
    pub admin: AdminConfig,
    pub traces: TracesConfig,
    pub auth: AuthConfig,
    /// `[oauth]`: the resource server's issuer, scopes and groups.
    pub oauth: OAuthConfig,
    /// `[console]`: the console's own OpenID Connect issuer (O9).
    pub console: ConsoleConfig,
    /// `[[server]]`: the virtual servers, checked (V1-V7).
    pub servers: Vec<std::sync::Arc<servers::VirtualServer>>,
    /// Where the file was read from; relative upstream commands resolve against its folder.
    pub path: PathBuf,
    /// The file's tables as written, for telling what a reload changed.
    source: toml::Table,
    /// The SHA-256 of the text, in hex.
    digest: String,
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
    /// Reads and checks a config file; the error is the first problem
    /// [`Config::load_all`] would report.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_all(path).map_err(first)
    }

    /// Parses and checks config text; `file` names it in errors. The error is
    /// the first problem [`Config::parse_all`] would report.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        Config::parse_all(text, file).map_err(first)
    }

    /// The runtime values of a file that passed every check.
    fn assemble(
        raw: ConfigFile,
        checked: Checked,
        servers: Vec<std::sync::Arc<servers::VirtualServer>>,
        source: toml::Table,
        text: &str,
    ) -> Config {
        let Checked {
            access,
            hook,
            limits,
            guards,
            store_url,
        } = checked;
        let ConfigFile {
            gateway,
            defaults,
            upstream,
            caller,
            access: _,
            rule,
            hook: _,
            quota: _,
            flow: _,
            guard: _,
            store,
            idempotency,
            audit,
            metrics,
            admin,
            traces,
            auth,
            oauth,
            console,
            server: _,
        } = raw;
        let store = StoreConfig {
            url: store_url,
            ..store
        };
        Config {
            gateway,
            defaults,
            upstream,
            caller,
            access,
            rule,
            hook,
            limits,
            guards,
            store,
            idempotency,
            audit,
            metrics,
            admin,
            traces,
            auth,
            oauth,
            console,
            servers,
            path: PathBuf::new(),
            source,
            digest: hex(&sha2::Sha256::digest(text.as_bytes())),
        }
    }

    /// The SHA-256 of the file's text, in hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// A top-level table or array of tables as the file wrote it (`None`: absent).
    pub fn written(&self, key: &str) -> Option<&toml::Value> {
        self.source.get(key)
    }

    /// The `[[upstream]]` table named `name` as the file wrote it.
    pub fn written_upstream(&self, name: &str) -> Option<&toml::Table> {
        self.source
            .get("upstream")?
            .as_array()?
            .iter()
            .filter_map(toml::Value::as_table)
            .find(|t| t.get("name").and_then(toml::Value::as_str) == Some(name))
    }

    /// The virtual server `name` (V1), when one is configured.
    pub fn server(&self, name: &str) -> Option<&std::sync::Arc<servers::VirtualServer>> {
        self.servers.iter().find(|s| s.name == name)
    }

    /// Where the admin listener listens: `admin.listen`, or the older `metrics.listen`.
    pub fn admin_listen(&self) -> Option<&str> {
        self.admin
            .listen
            .as_deref()
            .or(self.metrics.listen.as_deref())
    }

    /// The access rules (the config was checked when loaded).
    pub fn rules(&self) -> Rules {
        check::rules(self.access.default, &self.rule).unwrap_or_default()
    }

    /// Risky but valid settings, one sentence each (printed by `check` and at start-up).
    pub fn warnings(&self) -> Vec<String> {
        check::warnings(Settings {
            rules: &self.rules(),
            gateway: &self.gateway,
            defaults: &self.defaults,
            upstream: &self.upstream,
            caller: &self.caller,
            auth: &self.auth,
            oauth: &self.oauth,
            limits: &self.limits,
            guards: &self.guards,
            store_url: self.store.url.as_deref(),
        })
    }

    /// The argument policy: defaults, then per-upstream, then per-tool layers.
    pub fn policy(&self) -> LayeredPolicy {
        check::policy(&self.defaults, &self.upstream)
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
            None => {
                let connections = self
                    .store
                    .connections
                    .unwrap_or(warden_store::DEFAULT_CONNECTIONS);
                warden_store::Store::connect_postgres(url, connections).await
            }
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

/// The first of a file's problems (a list of them is never empty).
fn first(problems: Vec<Located>) -> ConfigError {
    problems
        .into_iter()
        .next()
        .map(|p| p.error)
        .unwrap_or_else(|| ConfigError {
            file: String::new(),
            key: String::new(),
            message: "the file was refused".into(),
        })
}

/// An empty or truncated file must never be put in force: it would stop
/// every upstream (and drop every rule) of a running gateway.
fn no_upstream(config: &Config, file: &str) -> Option<ConfigError> {
    config.upstream.is_empty().then(|| ConfigError {
        file: file.to_owned(),
        key: "upstream".into(),
        message: "none is configured (is the file empty or cut short?): the gateway would offer no tools. \
                  Add one: [[upstream]] with name = \"…\" and command = [\"…\"] or url = \"…\""
            .into(),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
        Some(message) => (path.to_string(), with_value_hint(message)),
        None => (String::new(), message),
    }
}

/// A value parser's `'alow' is not an effect; use one of: allow, deny, ask`,
/// with ` (did you mean 'allow'?)` when one of the words it lists is a likely
/// typo of the value.
fn with_value_hint(message: &str) -> String {
    let value = message
        .strip_prefix('\'')
        .and_then(|m| m.split_once('\''))
        .map(|(v, _)| v);
    let words = message
        .rsplit_once("; use ")
        .map(|(_, w)| w.strip_prefix("one of: ").unwrap_or(w));
    let (Some(value), Some(words)) = (value, words) else {
        return message.to_owned();
    };
    let near = words
        .split(", ")
        .flat_map(|w| w.split(" or "))
        .map(|w| w.trim_matches('"'))
        .map(|w| (strsim::levenshtein(value, w), w))
        .filter(|(d, w)| *d > 0 && *d <= 1.max(w.chars().count() / 3))
        .min_by_key(|(d, _)| *d);
    match near {
        Some((_, w)) => format!("{message} (did you mean '{w}'?)"),
        None => message.to_owned(),
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
mod documented;
#[cfg(test)]
mod tests;
