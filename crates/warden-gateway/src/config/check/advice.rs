//! Settings that are valid but risky: one sentence each, printed by `check`
//! and logged at start-up and on every reload.

use super::Settings;
use crate::config::file::{Front, UpstreamConfig};
use crate::config::guards::{Guards, READS};

/// Risky but valid settings, one sentence each. Environment variables are read
/// now, not when the file was loaded, so a warning reflects the current process.
pub(in crate::config) fn warnings(s: Settings<'_>) -> Vec<String> {
    let mut out = Vec::new();
    access_warnings(&s, &mut out);
    upstream_warnings(&s, &mut out);
    identity_warnings(&s, &mut out);
    out
}

/// Rules, tools, flows and guards that cannot do what they seem to.
fn access_warnings(s: &Settings<'_>, out: &mut Vec<String>) {
    for (shadowed, by) in s.rules.shadowed() {
        out.push(format!(
            "rule[{shadowed}] never applies: rule[{by}] comes first and matches everything it does"
        ));
    }
    for up in s.upstream {
        for (child, var) in &up.secret_env {
            if std::env::var_os(var).is_none() {
                out.push(format!(
                    "upstream '{}': secret_env.{child}: the environment variable '{var}' is not set, so the child starts without {child}",
                    up.name
                ));
            }
        }
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
                || s.guards
                    .list
                    .iter()
                    .any(|g| g.labels.iter().any(|l| l == label))
        };
        if let Some(missing) = f.touched.iter().chain([&f.calling]).find(|l| !carried(l)) {
            out.push(format!(
                "flow[{i}] never applies: no upstream gives any tool the label '{missing}' (F1)"
            ));
        }
    }
    out.extend(guard_warnings(s.guards, s.upstream));
    let shared = s
        .store_url
        .is_some_and(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"));
    if !shared && !s.limits.flows.is_empty() && s.gateway.state_secret_env.is_some() {
        out.push(
            "flows: replicas sharing gateway.state_secret_env without a PostgreSQL store keep flow trails per process: an HTTP session is not taken up from its id (at another replica, after a restart or once idle it gets 404), and a 2026-07-28 client that drops its flow context and moves starts afresh (F3)"
                .into(),
        );
    }
}

/// Upstream settings that weaken what the gateway does for their calls.
fn upstream_warnings(s: &Settings<'_>, out: &mut Vec<String>) {
    for up in s.upstream {
        let tools = up
            .tools
            .iter()
            .filter(|(_, t)| t.rerun_abandoned == Some(true));
        let named: Vec<String> = tools
            .map(|(name, _)| format!("'{}.{name}'", up.name))
            .collect();
        let what = match (up.rerun_abandoned == Some(true), named.is_empty()) {
            (true, _) => format!("upstream '{}'", up.name),
            (false, false) => named.join(", "),
            (false, true) => continue,
        };
        out.push(format!(
            "{what}: rerun_abandoned = true runs a keyed call again once the gateway that ran it stopped mid-call, so it may take effect twice; only for tools safe to repeat (I1)"
        ));
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
}

/// How callers are (or cannot be) identified.
fn identity_warnings(s: &Settings<'_>, out: &mut Vec<String>) {
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
}

/// S1: a guard's tool glob that no tool name can match, because it starts with
/// no upstream's name (only said when every upstream prefixes its tools).
fn guard_warnings(guards: &Guards, upstream: &[UpstreamConfig]) -> Vec<String> {
    if upstream.is_empty() || upstream.iter().any(|u| !u.prefix) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (i, g) in guards.list.iter().enumerate() {
        for glob in &g.tools {
            let literal = glob.split(['*', '?', '[', '{']).next().unwrap_or_default();
            let reachable = upstream.iter().any(|u| {
                let prefix = format!("{}.", u.name);
                literal.starts_with(&prefix) || prefix.starts_with(literal)
            }) || (g.results && READS.iter().any(|m| m.starts_with(literal)));
            if !reachable {
                out.push(format!(
                    "guard[{i}] ('{}'): the tools glob '{glob}' matches no tool: no upstream's tools start with '{literal}' (S1)",
                    g.name
                ));
            }
        }
    }
    out
}
