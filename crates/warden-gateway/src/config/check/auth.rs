//! The `[oauth]` table and the per-caller upstream credentials (G7, G8): what
//! must hold for the gateway to be an OAuth resource server, and for each
//! credential entry to name exactly one source it can use.

use super::{invalid, loopback_url, parse_duration, Invalid};
use crate::config::file::{OAuthConfig, UpstreamConfig};
use crate::config::CredentialConfig;
use crate::net::target::HttpTarget;

/// `[oauth]`: an issuer the gateway can trust, and settings that go with one.
pub(super) fn oauth(o: &OAuthConfig) -> Result<(), Invalid> {
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
    oauth_timing(o)?;
    oauth_scopes(o)?;
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

/// `[oauth]`'s key refresh intervals, timeout and introspection rate.
fn oauth_timing(o: &OAuthConfig) -> Result<(), Invalid> {
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
    if o.introspection_rate == 0 {
        return Err(invalid(
            "oauth.introspection_rate",
            "must be at least 1: no opaque token could ever be checked",
        ));
    }
    Ok(())
}

/// `[oauth]`'s scope names (RFC 6749 tokens) and the tool globs of its scopes.
fn oauth_scopes(o: &OAuthConfig) -> Result<(), Invalid> {
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
    Ok(())
}

/// One upstream's `[[upstream.credential]]` entries, and for a child-process
/// upstream the settings of its callers' own children.
pub(super) fn credentials(
    i: usize,
    up: &UpstreamConfig,
    oauth: &OAuthConfig,
) -> Result<(), Invalid> {
    let stdio = up.url.is_none();
    credential_env(i, up, stdio)?;
    caller_processes(i, up, stdio)?;
    for (j, c) in up.credential.iter().enumerate() {
        credential(i, j, c, stdio, oauth)?;
    }
    Ok(())
}

/// `credential_env`: the variable a child-process upstream's callers' own
/// children get their credential in, set exactly where there are credentials.
fn credential_env(i: usize, up: &UpstreamConfig, stdio: bool) -> Result<(), Invalid> {
    let at = |k: &str| format!("upstream[{i}].{k}");
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
    Ok(())
}

/// `max_caller_processes` and `caller_process_idle_ms`: only where each caller
/// gets a child of its own, and never 0.
fn caller_processes(i: usize, up: &UpstreamConfig, stdio: bool) -> Result<(), Invalid> {
    let at = |k: &str| format!("upstream[{i}].{k}");
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
    Ok(())
}

/// One `[[upstream.credential]]` entry (`j`): its callers, and exactly one
/// source it can use on this upstream.
fn credential(
    i: usize,
    j: usize,
    c: &CredentialConfig,
    stdio: bool,
    oauth: &OAuthConfig,
) -> Result<(), Invalid> {
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
        warden_core::access::CallerSelector::parse(sel).map_err(|m| invalid(at("callers"), m))?;
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
    Ok(())
}
