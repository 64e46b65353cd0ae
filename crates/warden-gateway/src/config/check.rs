//! What serde cannot check (names, URLs, durations, settings that exclude each
//! other), the values the gateway runs on (rules, argument policy, parsed
//! webhooks), and the warnings about settings that are valid but risky.
//!
//! Nothing here knows the file name: a problem is a key and a message, and the
//! loader adds where it was read from.

mod advice;
mod auth;
mod rules;

use super::file::{
    AdminConfig, AuthConfig, CallerConfig, ConfigFile, DefaultsConfig, GatewayConfig, OAuthConfig,
    Phase, StoreConfig, UpstreamConfig,
};
use super::guards::Guards;
use super::limits::{Flow, Labels, Limits, Quota, Rate};
use crate::net::target::HttpTarget;
pub(super) use advice::warnings;
use auth::{credentials, oauth};
use rules::rule;
pub(super) use rules::rules;
use serde_json::Value;
use std::collections::HashSet;
use warden_core::{Effect, LayeredPolicy, Overrides, Rules};

/// One thing wrong with the file: the dotted key and what to do about it.
#[derive(Debug)]
pub(super) struct Invalid {
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
    /// Who answers an `ask` (H6).
    pub approver: super::file::Approver,
    /// The grant webhook (G4), if one is configured.
    pub webhook: Option<HttpTarget>,
}

/// One `[[hook]]`, checked: its URL is parsed here, once.
#[derive(Debug, Clone)]
pub struct Hook {
    /// Before the call goes upstream, or after its answer.
    pub phase: Phase,
    /// Where the call's context is POSTed.
    pub webhook: HttpTarget,
}

/// The tables whose checked form differs from what the file says.
pub(super) struct Checked {
    pub access: Access,
    pub hook: Vec<Hook>,
    pub limits: Limits,
    pub guards: Guards,
    /// `store.url`, or the value of the variable `store.url_env` names.
    pub store_url: Option<String>,
}

/// `[admin]` and `[traces]`: one name for the admin listener, a usable endpoint
/// and a ratio that is one.
fn admin_and_traces(file: &ConfigFile) -> Result<(), Invalid> {
    if let (Some(a), Some(m)) = (&file.admin.listen, &file.metrics.listen) {
        if a != m {
            return Err(invalid(
                "metrics.listen",
                "admin.listen already names the admin listener (which serves /metrics): remove metrics.listen",
            ));
        }
    }
    for (i, who) in file.admin.callers.iter().enumerate() {
        if who.is_empty() || who == "group:" {
            return Err(invalid(
                format!("admin.callers[{i}]"),
                "name a caller or group:NAME",
            ));
        }
    }
    let traces = &file.traces;
    if let Some(url) = &traces.endpoint {
        HttpTarget::parse(url, 1).map_err(|m| invalid("traces.endpoint", m))?;
    }
    if let Some(r) = traces.sampling_ratio {
        if !(0.0..=1.0).contains(&r) {
            return Err(invalid(
                "traces.sampling_ratio",
                "must be between 0.0 (no new trace recorded) and 1.0 (every one)",
            ));
        }
    }
    Ok(())
}

/// `[audit]`: a retention of a second or more, an OTLP endpoint that is an
/// http(s) URL.
fn audit(file: &ConfigFile) -> Result<(), Invalid> {
    if let Some(url) = &file.audit.otlp {
        HttpTarget::parse(url, 1).map_err(|m| invalid("audit.otlp", m))?;
    }
    let Some(r) = &file.audit.retention else {
        return Ok(());
    };
    if parse_duration(r)
        .map_err(|m| invalid("audit.retention", m))?
        .is_zero()
    {
        let why =
            "must be at least 1s: a zero retention would delete every record as it is written";
        return Err(invalid("audit.retention", why));
    }
    Ok(())
}

/// Checks a deserialised file and reports every problem, in the order the
/// checks run (the first one is what a gateway's start or reload names): the
/// front's settings, then each upstream, rule, store, hook and caller, then
/// limits and guards. Each check stands alone, so one problem never hides
/// another; a check that needs a value another refused is skipped.
pub(super) fn check(file: &ConfigFile) -> Result<Checked, Vec<Invalid>> {
    let mut errors = settings(file);
    let mut names = HashSet::new();
    for (i, up) in file.upstream.iter().enumerate() {
        let checked = upstream(i, up, &mut names).and_then(|()| credentials(i, up, &file.oauth));
        errors.extend(checked.err());
    }
    let default = file.access.default.map_or(Effect::Allow, |d| d.effect());
    for (i, r) in file.rule.iter().enumerate() {
        errors.extend(rule(i, r).err());
    }
    let store_url = store_url(&file.store, |var| std::env::var(var).ok());
    if let Ok(url) = &store_url {
        errors.extend(store_connections(&file.store, url.as_deref()).err());
    }
    let store_url = store_url.map_err(|e| errors.push(e)).ok().flatten();
    errors.extend(idempotency(file).err());
    errors.extend(audit(file).err());
    let webhook = file
        .access
        .webhook
        .as_ref()
        .map(|w| HttpTarget::parse(&w.url, w.timeout_ms).map_err(|m| invalid("access.webhook", m)))
        .transpose()
        .map_err(|e| errors.push(e))
        .ok()
        .flatten();
    let mut hook = Vec::with_capacity(file.hook.len());
    for (i, h) in file.hook.iter().enumerate() {
        match HttpTarget::parse(&h.url, h.timeout_ms) {
            Ok(webhook) => hook.push(Hook {
                phase: h.phase,
                webhook,
            }),
            Err(m) => errors.push(invalid(format!("hook[{i}]"), m)),
        }
    }
    let mut callers = HashSet::new();
    for (i, c) in file.caller.iter().enumerate() {
        if !callers.insert(c.name.as_str()) {
            errors.push(invalid(
                format!("caller[{i}].name"),
                format!("'{}' names two callers", c.name),
            ));
        }
    }
    let limits = limits(file).map_err(|e| errors.extend(e)).ok();
    let guards = Guards::build(&file.guard)
        .map_err(|(k, m)| errors.push(invalid(k, m)))
        .ok();
    match (limits, guards) {
        (Some(limits), Some(guards)) if errors.is_empty() => Ok(Checked {
            access: Access {
                default,
                approval_timeout_ms: file.access.approval_timeout_ms,
                approver: file.access.approver.unwrap_or_default(),
                webhook,
            },
            hook,
            limits,
            guards,
            store_url,
        }),
        _ => Err(errors),
    }
}

/// The settings of the fronts, `[auth]`, `[admin]`, `[traces]` and `[oauth]`:
/// every problem, each check on its own.
fn settings(file: &ConfigFile) -> Vec<Invalid> {
    let (gateway, auth) = (&file.gateway, &file.auth);
    let mut errors = Vec::new();
    for (key, text) in [
        ("gateway.session_idle", &gateway.session_idle),
        ("gateway.session_lifetime", &gateway.session_lifetime),
    ] {
        match parse_duration(text) {
            Err(m) => errors.push(invalid(key, m)),
            Ok(d) if d.is_zero() => errors.push(invalid(
                key,
                "must be at least 1s: every HTTP session would end as it began",
            )),
            Ok(_) => {}
        }
    }
    // 0s is allowed: SIGTERM then ends every call in flight at once.
    if let Err(m) = parse_duration(&gateway.drain_timeout) {
        errors.push(invalid("gateway.drain_timeout", m));
    }
    errors.extend(http_limits(gateway, &file.admin));
    if gateway.tls_cert.is_some() != gateway.tls_key.is_some() {
        errors.push(invalid(
            "gateway",
            "tls_cert and tls_key go together: set both to serve https, or neither",
        ));
    }
    if auth.jwt_secret_env.is_some() && auth.jwks.is_some() {
        errors.push(invalid(
            "auth",
            "set jwt_secret_env (HS256) or jwks (RS256/ES256), not both",
        ));
    }
    if (auth.issuer.is_some() || auth.audience.is_some()) && !auth.jwt_enabled() {
        errors.push(invalid(
            "auth",
            "issuer and audience check JWTs: also set jwt_secret_env or jwks",
        ));
    }
    errors.extend(admin_and_traces(file).err());
    errors.extend(oauth(&file.oauth).err());
    // A JWT naming the [oauth] issuer is checked with that issuer's published
    // keys alone (front/auth): [auth] never sees one, and requires its issuer in
    // every token, so with the same issuer it could never let anyone in.
    if auth.issuer.is_some() && auth.issuer == file.oauth.issuer {
        errors.push(invalid(
            "auth.issuer",
            "is also oauth.issuer: a JWT naming that issuer is checked with the [oauth] issuer's published keys only, so [auth] would never accept one; set auth.issuer to the issuer its own tokens name",
        ));
    }
    if gateway.max_message_bytes < 1024 {
        errors.push(invalid(
            "gateway.max_message_bytes",
            "must be at least 1024",
        ));
    }
    errors
}

/// `[idempotency]`: a usable retention and a key to look for.
fn idempotency(file: &ConfigFile) -> Result<(), Invalid> {
    parse_duration(&file.idempotency.retention).map_err(|m| invalid("idempotency.retention", m))?;
    if file.idempotency.meta_key.is_empty() {
        return Err(invalid("idempotency.meta_key", "must not be empty"));
    }
    Ok(())
}

/// The store's URL: `store.url` as written, or the value of the environment
/// variable `store.url_env` names (a URL with a password belongs in a secret, not
/// in the file). A value from the environment is never repeated in an error.
pub(super) fn store_url(
    store: &StoreConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, Invalid> {
    let is_store_url = |url: &str| {
        url.strip_prefix("sqlite://").is_some_and(|p| !p.is_empty())
            || url.starts_with("postgres://")
            || url.starts_with("postgresql://")
    };
    match (&store.url, &store.url_env) {
        (Some(_), Some(_)) => Err(invalid(
            "store",
            "set url or url_env (the environment variable holding the URL), not both",
        )),
        (Some(url), None) if !is_store_url(url) => Err(invalid(
            "store.url",
            format!("'{url}' is not a store URL; use sqlite://FILE or postgres://USER@HOST/DB"),
        )),
        (Some(url), None) => Ok(Some(url.clone())),
        (None, Some(var)) => match env(var).filter(|v| !v.trim().is_empty()) {
            None => Err(invalid(
                "store.url_env",
                format!("the environment variable '{var}' is not set"),
            )),
            Some(url) if !is_store_url(url.trim()) => Err(invalid(
                "store.url_env",
                format!("the environment variable '{var}' holds no store URL; it must be sqlite://FILE or postgres://USER:PASSWORD@HOST/DB"),
            )),
            Some(url) => Ok(Some(url.trim().to_owned())),
        },
        (None, None) => Ok(None),
    }
}

/// `store.connections`: 1 to 256, and only where there is a server to connect to.
pub(super) fn store_connections(store: &StoreConfig, url: Option<&str>) -> Result<(), Invalid> {
    let Some(n) = store.connections else {
        return Ok(());
    };
    if !url.is_some_and(|u| u.starts_with("postgres://") || u.starts_with("postgresql://")) {
        return Err(invalid(
            "store.connections",
            "applies to a PostgreSQL store only (a SQLite file is one connection); remove it or set a postgres:// url",
        ));
    }
    if !(1..=256).contains(&n) {
        return Err(invalid(
            "store.connections",
            format!("{n} is out of range; use 1 to 256"),
        ));
    }
    Ok(())
}

/// Quotas, flows, labels and the HTTP request budget (Q, F): every problem.
fn limits(file: &ConfigFile) -> Result<Limits, Vec<Invalid>> {
    let mut errors = Vec::new();
    let mut quotas = Vec::with_capacity(file.quota.len());
    for (i, q) in file.quota.iter().enumerate() {
        match Quota::build(q) {
            Ok(q) => quotas.push(q),
            Err((k, m)) => errors.push(invalid(super::limits::entry_key("quota", i, k), m)),
        }
    }
    let mut flows = Vec::with_capacity(file.flow.len());
    for (i, f) in file.flow.iter().enumerate() {
        match Flow::build(f) {
            Ok(f) => flows.push(f),
            Err((k, m)) => errors.push(invalid(super::limits::entry_key("flow", i, k), m)),
        }
    }
    let labels = Labels::build(&file.upstream)
        .map_err(|(k, m)| errors.push(invalid(k, m)))
        .ok();
    let g = &file.gateway;
    let http_caller_rate = match &g.http_caller_rate {
        Some(r) => Rate::parse(r, g.http_caller_burst)
            .map_err(|m| errors.push(invalid("gateway.http_caller_rate", m)))
            .ok(),
        None if g.http_caller_burst.is_some() => {
            errors.push(invalid(
                "gateway.http_caller_burst",
                "needs gateway.http_caller_rate",
            ));
            None
        }
        None => None,
    };
    match labels {
        Some(labels) if errors.is_empty() => Ok(Limits {
            quotas,
            flows,
            labels,
            http_caller_rate,
        }),
        _ => Err(errors),
    }
}

/// The HTTP front's caps and timeouts, and the admin listener's. A zero would
/// refuse every connection or session, or close every connection at once: never
/// what was meant.
fn http_limits(gateway: &GatewayConfig, admin: &AdminConfig) -> Vec<Invalid> {
    let mut errors = Vec::new();
    for (key, text) in [
        ("gateway.http_head_timeout", &gateway.http_head_timeout),
        ("gateway.http_idle_timeout", &gateway.http_idle_timeout),
        ("gateway.http_body_timeout", &gateway.http_body_timeout),
        ("admin.http_head_timeout", &admin.http_head_timeout),
        ("admin.http_idle_timeout", &admin.http_idle_timeout),
    ] {
        match parse_duration(text) {
            Err(m) => errors.push(invalid(key, m)),
            Ok(d) if d.is_zero() => errors.push(invalid(
                key,
                "must be at least 1s: a zero timeout would close every connection at once",
            )),
            Ok(_) => {}
        }
    }
    for (key, n) in [
        ("gateway.max_connections", gateway.max_connections),
        (
            "gateway.max_connections_per_client",
            gateway.max_connections_per_client,
        ),
        (
            "gateway.max_sessions_per_caller",
            gateway.max_sessions_per_caller,
        ),
        ("admin.max_connections", admin.max_connections),
        (
            "admin.max_connections_per_client",
            admin.max_connections_per_client,
        ),
    ] {
        if n == 0 {
            errors.push(invalid(key, "must be at least 1: 0 would refuse everyone"));
        }
    }
    errors
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
            let target = HttpTarget::parse(url, 1).map_err(|m| invalid(at("url"), m))?;
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
    secret_env(up).map_err(|m| invalid(at("secret_env"), m))?;
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

/// `secret_env`: for a child process, variable names on both sides, and no
/// variable set both here and in `env`.
fn secret_env(up: &UpstreamConfig) -> Result<(), String> {
    if up.secret_env.is_empty() {
        return Ok(());
    }
    if up.url.is_some() {
        return Err(
            "is for child processes (command); an HTTP upstream's token is bearer_token_env".into(),
        );
    }
    let usable = |v: &str| {
        !v.is_empty() && !v.contains('=') && !v.contains('\0') && !v.starts_with(char::is_numeric)
    };
    for (child, var) in &up.secret_env {
        if !usable(child) || !usable(var) {
            return Err(format!(
                "'{child}' = '{var}' is not a pair of variable names; write CHILD_VARIABLE = \"GATEWAY_VARIABLE\""
            ));
        }
        if up.env.contains_key(child) {
            return Err(format!(
                "'{child}' is also set in env; keep it in one of the two"
            ));
        }
    }
    Ok(())
}

/// Whether a URL's host is this machine (`localhost`, `127.0.0.1`, `[::1]`).
pub fn loopback_url(target: &HttpTarget) -> bool {
    let (host, ..) = target.target();
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// The argument policy: defaults, then per-upstream, then per-tool layers.
pub(super) fn policy(defaults: &DefaultsConfig, upstreams: &[UpstreamConfig]) -> LayeredPolicy {
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
pub(super) struct Settings<'a> {
    pub rules: &'a Rules,
    pub gateway: &'a GatewayConfig,
    pub defaults: &'a DefaultsConfig,
    pub upstream: &'a [UpstreamConfig],
    pub caller: &'a [CallerConfig],
    pub auth: &'a AuthConfig,
    pub oauth: &'a OAuthConfig,
    pub limits: &'a Limits,
    pub guards: &'a Guards,
    pub store_url: Option<&'a str>,
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
