//! What serde cannot check (names, URLs, durations, settings that exclude each
//! other), the values the gateway runs on (rules, argument policy, parsed
//! webhooks), and the warnings about settings that are valid but risky.
//!
//! Nothing here knows the file name: a problem is a key and a message, and the
//! loader adds where it was read from.

use super::file::{
    AuthConfig, CallerConfig, ConditionConfig, ConfigFile, DefaultsConfig, Front, GatewayConfig,
    OAuthConfig, Phase, RuleConfig, StoreConfig, UpstreamConfig,
};
use super::limits::{Flow, Labels, Limits, Quota, Rate};
use crate::net::target::HttpTarget;
use serde_json::Value;
use std::collections::HashSet;
use warden_core::{
    ArgPath, Condition, Conditions, Effect, LayeredPolicy, Overrides, Rule, Rules, Test,
};

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
    /// `store.url`, or the value of the variable `store.url_env` names.
    pub store_url: Option<String>,
}

/// Checks a deserialised file. Only the first problem is reported, so the order
/// of the checks decides which one a file with several gets to hear about.
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

pub(super) fn check(file: &ConfigFile) -> Result<Checked, Invalid> {
    let (gateway, auth) = (&file.gateway, &file.auth);
    parse_duration(&gateway.session_idle).map_err(|m| invalid("gateway.session_idle", m))?;
    parse_duration(&gateway.session_lifetime)
        .map_err(|m| invalid("gateway.session_lifetime", m))?;
    // 0s is allowed: SIGTERM then ends every call in flight at once.
    parse_duration(&gateway.drain_timeout).map_err(|m| invalid("gateway.drain_timeout", m))?;
    http_limits(gateway)?;
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
    admin_and_traces(file)?;
    oauth(&file.oauth)?;
    if gateway.max_message_bytes < 1024 {
        return Err(invalid(
            "gateway.max_message_bytes",
            "must be at least 1024",
        ));
    }
    let mut names = HashSet::new();
    for (i, up) in file.upstream.iter().enumerate() {
        upstream(i, up, &mut names)?;
        credentials(i, up, &file.oauth)?;
    }
    let default = file.access.default.map_or(Effect::Allow, |d| d.effect());
    rules(default, &file.rule)?;
    let store_url = store_url(&file.store, |var| std::env::var(var).ok())?;
    store_connections(&file.store, store_url.as_deref())?;
    parse_duration(&file.idempotency.retention).map_err(|m| invalid("idempotency.retention", m))?;
    if file.idempotency.meta_key.is_empty() {
        return Err(invalid("idempotency.meta_key", "must not be empty"));
    }
    let webhook = file
        .access
        .webhook
        .as_ref()
        .map(|w| HttpTarget::parse(&w.url, w.timeout_ms).map_err(|m| invalid("access.webhook", m)))
        .transpose()?;
    let mut hook = Vec::with_capacity(file.hook.len());
    for (i, h) in file.hook.iter().enumerate() {
        let webhook = HttpTarget::parse(&h.url, h.timeout_ms)
            .map_err(|m| invalid(format!("hook[{i}]"), m))?;
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
    Ok(Checked {
        access,
        hook,
        limits: limits(file)?,
        store_url,
    })
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

/// Quotas, flows, labels and the HTTP request budget (Q, F).
fn limits(file: &ConfigFile) -> Result<Limits, Invalid> {
    let quotas = file
        .quota
        .iter()
        .enumerate()
        .map(|(i, q)| Quota::build(q).map_err(|m| invalid(format!("quota[{i}]"), m)))
        .collect::<Result<_, _>>()?;
    let flows = file
        .flow
        .iter()
        .enumerate()
        .map(|(i, f)| Flow::build(f).map_err(|m| invalid(format!("flow[{i}]"), m)))
        .collect::<Result<_, _>>()?;
    let labels = Labels::build(&file.upstream).map_err(|(k, m)| invalid(k, m))?;
    let g = &file.gateway;
    let http_caller_rate = match &g.http_caller_rate {
        Some(r) => Some(
            Rate::parse(r, g.http_caller_burst)
                .map_err(|m| invalid("gateway.http_caller_rate", m))?,
        ),
        None if g.http_caller_burst.is_some() => {
            return Err(invalid(
                "gateway.http_caller_burst",
                "needs gateway.http_caller_rate",
            ))
        }
        None => None,
    };
    Ok(Limits {
        quotas,
        flows,
        labels,
        http_caller_rate,
    })
}

/// The HTTP front's caps and timeouts. A zero would refuse every connection or
/// session, or close every connection at once: never what was meant.
fn http_limits(gateway: &GatewayConfig) -> Result<(), Invalid> {
    for (key, text) in [
        ("http_head_timeout", &gateway.http_head_timeout),
        ("http_idle_timeout", &gateway.http_idle_timeout),
    ] {
        let d = parse_duration(text).map_err(|m| invalid(format!("gateway.{key}"), m))?;
        if d.is_zero() {
            return Err(invalid(
                format!("gateway.{key}"),
                "must be at least 1s: a zero timeout would close every connection at once",
            ));
        }
    }
    for (key, n) in [
        ("max_connections", gateway.max_connections),
        (
            "max_connections_per_client",
            gateway.max_connections_per_client,
        ),
        ("max_sessions_per_caller", gateway.max_sessions_per_caller),
    ] {
        if n == 0 {
            return Err(invalid(
                format!("gateway.{key}"),
                "must be at least 1: 0 would refuse everyone",
            ));
        }
    }
    Ok(())
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

/// Whether a URL's host is this machine (`localhost`, `127.0.0.1`, `[::1]`).
pub fn loopback_url(target: &HttpTarget) -> bool {
    let (host, ..) = target.target();
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// `[oauth]`: an issuer the gateway can trust, and settings that go with one.
fn oauth(o: &OAuthConfig) -> Result<(), Invalid> {
    let Some(issuer) = &o.issuer else {
        let set = !o.scopes_supported.is_empty()
            || !o.required_scopes.is_empty()
            || !o.tool_scopes.is_empty()
            || !o.scope_groups.is_empty()
            || o.resource.is_some()
            || o.client_id.is_some()
            || o.introspection;
        if set {
            return Err(invalid(
                "oauth.issuer",
                "is required once [oauth] is used: the URL of the authorization server",
            ));
        }
        return Ok(());
    };
    let target = HttpTarget::parse(issuer, 1).map_err(|m| invalid("oauth.issuer", m))?;
    if !target.is_tls() && !loopback_url(&target) {
        return Err(invalid(
            "oauth.issuer",
            format!("'{issuer}' is plain http: an issuer must be https (http is allowed for localhost, 127.0.0.1 and [::1] only, for tests)"),
        ));
    }
    if issuer.contains(['?', '#']) {
        return Err(invalid(
            "oauth.issuer",
            "an issuer identifier has no query or fragment (RFC 8414)",
        ));
    }
    if o.tls_ca_file.is_some() && !target.is_tls() {
        return Err(invalid(
            "oauth.tls_ca_file",
            "is for an https issuer; this issuer is plain http",
        ));
    }
    if let Some(resource) = &o.resource {
        HttpTarget::parse(resource, 1).map_err(|m| invalid("oauth.resource", m))?;
        if resource.contains('#') {
            return Err(invalid(
                "oauth.resource",
                "a resource URL has no fragment (RFC 8707)",
            ));
        }
    }
    for key in ["jwks_min_interval", "jwks_max_age"] {
        let text = if key == "jwks_min_interval" {
            &o.jwks_min_interval
        } else {
            &o.jwks_max_age
        };
        let d = parse_duration(text).map_err(|m| invalid(format!("oauth.{key}"), m))?;
        if d.is_zero() {
            return Err(invalid(
                format!("oauth.{key}"),
                "must be at least 1s: the issuer's keys would be fetched for every token",
            ));
        }
    }
    if o.timeout_ms == 0 {
        return Err(invalid("oauth.timeout_ms", "must be more than 0"));
    }
    // Scopes go into WWW-Authenticate between quotes: only RFC 6749 scope tokens.
    let scopes = o
        .scopes_supported
        .iter()
        .chain(&o.required_scopes)
        .chain(o.tool_scopes.keys())
        .chain(o.scope_groups.keys());
    for scope in scopes {
        let token = !scope.is_empty()
            && scope
                .bytes()
                .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b));
        if !token {
            return Err(invalid(
                "oauth",
                format!("'{scope}' is not a scope: printable ASCII without spaces, '\"' or '\\'"),
            ));
        }
    }
    for (scope, tools) in &o.tool_scopes {
        for t in tools {
            globset::Glob::new(t).map_err(|e| {
                invalid(
                    format!("oauth.tool_scopes.{scope}"),
                    format!("'{t}' is not a valid tool glob: {}", e.kind()),
                )
            })?;
        }
    }
    if o.introspection && (o.client_id.is_none() || o.client_secret_env.is_none()) {
        return Err(invalid(
            "oauth.introspection",
            "needs client_id and client_secret_env: the issuer only answers its registered clients",
        ));
    }
    if o.client_id.is_some() != o.client_secret_env.is_some() {
        return Err(invalid(
            "oauth",
            "client_id and client_secret_env go together: set both, or neither",
        ));
    }
    Ok(())
}

/// One upstream's `[[upstream.credential]]` entries, and for a child-process
/// upstream the settings of its callers' own children.
fn credentials(i: usize, up: &UpstreamConfig, oauth: &OAuthConfig) -> Result<(), Invalid> {
    let at = |k: &str| format!("upstream[{i}].{k}");
    let stdio = up.url.is_none();
    match (&up.credential_env, stdio) {
        (Some(_), false) => {
            return Err(invalid(
                at("credential_env"),
                "is for child-process upstreams (command); an HTTP upstream is shown a caller's credential as its bearer token",
            ))
        }
        (Some(var), true) if up.credential.is_empty() => {
            return Err(invalid(
                at("credential_env"),
                format!("names where a caller's credential goes ('{var}'), but no [[upstream.credential]] entry gives one"),
            ))
        }
        (Some(var), true) if var.is_empty() || var.contains(['=', '\0']) => {
            return Err(invalid(
                at("credential_env"),
                "must be an environment variable name (not empty, no '=')",
            ))
        }
        (None, true) if !up.credential.is_empty() => {
            return Err(invalid(
                at("credential_env"),
                "is required with [[upstream.credential]] on a child-process upstream: the variable each caller's own child gets its credential in",
            ))
        }
        _ => {}
    }
    let children = stdio && !up.credential.is_empty();
    for (key, set) in [
        ("max_caller_processes", up.max_caller_processes.is_some()),
        (
            "caller_process_idle_ms",
            up.caller_process_idle_ms.is_some(),
        ),
    ] {
        if set && !children {
            return Err(invalid(
                at(key),
                "is for a child-process upstream with [[upstream.credential]] entries (each such caller gets a child of its own)",
            ));
        }
    }
    if up.max_caller_processes == Some(0) {
        return Err(invalid(at("max_caller_processes"), "must be at least 1"));
    }
    if up.caller_process_idle_ms == Some(0) {
        return Err(invalid(at("caller_process_idle_ms"), "must be more than 0"));
    }
    for (j, c) in up.credential.iter().enumerate() {
        let at = |k: &str| format!("upstream[{i}].credential[{j}].{k}");
        if stdio && c.exchange.is_some() {
            return Err(invalid(
                at("exchange"),
                "is for HTTP upstreams (url): a child process keeps the environment it started with, and an exchanged token expires; use token_env or token_file",
            ));
        }
        if c.callers.is_empty() {
            return Err(invalid(
                at("callers"),
                "needs at least one caller name, group:NAME or *",
            ));
        }
        for sel in &c.callers {
            warden_core::access::CallerSelector::parse(sel)
                .map_err(|m| invalid(at("callers"), m))?;
        }
        let sources = [
            c.token_env.is_some(),
            c.token_file.is_some(),
            c.exchange.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() != 1 {
            return Err(invalid(
                format!("upstream[{i}].credential[{j}]"),
                "set exactly one of token_env, token_file or exchange",
            ));
        }
        if c.exchange.is_some() && (oauth.issuer.is_none() || oauth.client_id.is_none()) {
            return Err(invalid(
                at("exchange"),
                "token exchange happens at [oauth] issuer as [oauth] client_id: set both (and client_secret_env)",
            ));
        }
        if c.name.as_deref() == Some("") {
            return Err(invalid(at("name"), "must not be empty"));
        }
    }
    Ok(())
}

/// The access rules, built; an error names the rule and what is wrong with it.
pub(super) fn rules(default: Effect, rule: &[RuleConfig]) -> Result<Rules, Invalid> {
    let rules = rule
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let rule = Rule::new(&r.callers, &r.tools, r.effect)
                .map_err(|m| invalid(format!("rule[{i}]"), m))?;
            let all = conditions(i, "when", &r.when)?;
            let any = conditions(i, "when_any", &r.when_any)?;
            Ok(rule.when(Conditions { all, any }))
        })
        .collect::<Result<_, _>>()?;
    Ok(Rules { rules, default })
}

/// A rule's conditions on arguments (G6); an error names the rule, the list and the entry.
fn conditions(
    rule: usize,
    list: &str,
    configs: &[ConditionConfig],
) -> Result<Vec<Condition>, Invalid> {
    configs
        .iter()
        .enumerate()
        .map(|(j, c)| condition(c).map_err(|m| invalid(format!("rule[{rule}].{list}[{j}]"), m)))
        .collect()
}

fn condition(c: &ConditionConfig) -> Result<Condition, String> {
    let path = ArgPath::parse(&c.arg)?;
    let mut tests = Vec::new();
    if let Some(v) = &c.equals {
        tests.push(Test::Equals(v.clone()));
    }
    if let Some(vs) = &c.one_of {
        if vs.is_empty() {
            return Err("one_of = [] is met by no value; list at least one".into());
        }
        tests.push(Test::OneOf(vs.clone()));
    }
    if let Some(g) = &c.glob {
        tests.push(Test::glob(g)?);
    }
    if let Some(r) = &c.regex {
        tests.push(Test::regex(r)?);
    }
    if c.min.is_some() || c.max.is_some() {
        if let (Some(a), Some(b)) = (c.min, c.max) {
            if a > b {
                return Err(format!(
                    "min = {a} is above max = {b}: no number is between them"
                ));
            }
        }
        tests.push(Test::Range {
            min: c.min,
            max: c.max,
        });
    }
    if c.min_len.is_some() || c.max_len.is_some() {
        if let (Some(a), Some(b)) = (c.min_len, c.max_len) {
            if a > b {
                return Err(format!(
                    "min_len = {a} is above max_len = {b}: no length is between them"
                ));
            }
        }
        tests.push(Test::Length {
            min: c.min_len,
            max: c.max_len,
        });
    }
    if let Some(p) = c.present {
        tests.push(Test::Present(p));
    }
    let mut tests = tests.into_iter();
    match (tests.next(), tests.next()) {
        (Some(test), None) => Ok(Condition { path, test }),
        (None, _) => Err(format!(
            "the condition on '{}' has no test; add one of: equals, one_of, glob, regex, min/max, min_len/max_len, present",
            c.arg
        )),
        (Some(_), Some(_)) => Err(format!(
            "the condition on '{}' has more than one test; write one condition per test",
            c.arg
        )),
    }
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
    pub store_url: Option<&'a str>,
}

/// Risky but valid settings, one sentence each. Environment variables are read
/// now, not when the file was loaded, so a warning reflects the current process.
pub(super) fn warnings(s: Settings<'_>) -> Vec<String> {
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
    for (i, f) in s.limits.flows.iter().enumerate() {
        let carried = |label: &str| {
            s.upstream
                .iter()
                .any(|u| u.labels.values().any(|ls| ls.iter().any(|l| l == label)))
        };
        if let Some(missing) = f.touched.iter().chain([&f.calling]).find(|l| !carried(l)) {
            out.push(format!(
                "flow[{i}] never applies: no upstream gives any tool the label '{missing}' (F1)"
            ));
        }
    }
    let shared = s
        .store_url
        .is_some_and(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"));
    if !shared && !s.limits.flows.is_empty() && s.gateway.state_secret_env.is_some() {
        out.push(
            "flows: replicas sharing gateway.state_secret_env without a PostgreSQL store keep flow trails per process: an HTTP session another replica takes up, or a 2026-07-28 client that drops its flow context and moves, starts afresh (F3)"
                .into(),
        );
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
        && s.oauth.issuer.is_none()
        && gateway.anonymous_caller.is_none()
    {
        out.push("the HTTP front has no way to identify callers (no [[caller]] api_key_env, no [auth] JWT, no [oauth] issuer, no gateway.anonymous_caller): every request will get 401".into());
    }
    for up in s.upstream {
        for c in &up.credential {
            if let Some(var) = &c.token_env {
                if std::env::var(var).map_or(true, |v| v.trim().is_empty()) {
                    out.push(format!(
                        "upstream '{}': credential token_env = '{var}' is not set in the environment: calls of the callers it is for fail (G8)",
                        up.name
                    ));
                }
            }
        }
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
