//! A running gateway's configuration file: checked as `mcp-warden check` checks
//! it, and read again on SIGHUP or, with `run --watch`, when it (or the pins
//! lock beside it) changes on disk.
//!
//! A file that does not pass the check changes nothing: the configuration in
//! force stays, the log says why in the words `check` would use, and
//! `warden_config_reloads_total{result="invalid"}` counts it. One that passes
//! goes to [`Gateway::reload`].

use crate::config::Config;
use crate::gateway::{Gateway, Reloaded};
use crate::pins;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How often `--watch` looks at the files.
const POLL: Duration = Duration::from_secs(1);
/// How long a config file must stay unchanged before a reload reads it: a
/// file being written is not taken half-written.
const SETTLE: Duration = Duration::from_millis(500);
/// Looks at a changing file before the reload gives up on it.
const SETTLE_TRIES: u32 = 10;

/// A file that passed the check, and its warnings.
pub struct Checked {
    pub config: Config,
    pub warnings: Vec<String>,
}

/// One reason a file does not pass the check: the words `check` prints, and
/// `FILE:LINE:COLUMN` where the file has the key it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckError {
    pub text: String,
    pub at: Option<String>,
}

impl CheckError {
    fn unplaced(text: String) -> CheckError {
        CheckError { text, at: None }
    }
}

/// Checks a config file: what `mcp-warden check` runs, and what a reload runs
/// before anything changes. The errors are every problem of the file itself
/// ([`Config::load_all`]), or else each argument condition that can never hold
/// for a tool as the pins lock beside it holds it (G6); one that holds only for
/// calls breaking the tool's schema is a warning.
pub async fn check_file(path: &Path) -> Result<Checked, Vec<CheckError>> {
    let config = Config::load_all(path).map_err(|problems| {
        problems
            .into_iter()
            .map(|p| CheckError {
                at: p.location(),
                text: p.error.to_string(),
            })
            .collect::<Vec<_>>()
    })?;
    let unplaced = |e: String| vec![CheckError::unplaced(e)];
    let mut warnings = config.warnings();
    warnings.extend(check_issuer(&config).await.map_err(unplaced)?);
    warnings.extend(check_lock(&config).map_err(|errors| {
        errors
            .into_iter()
            .map(CheckError::unplaced)
            .collect::<Vec<_>>()
    })?);
    warnings.extend(check_servers(&config).map_err(unplaced)?);
    warnings.extend(check_tool_args(&config).map_err(unplaced)?);
    Ok(Checked { config, warnings })
}

/// A virtual server whose globs match no tool the pins lock holds would serve
/// nothing (V1): a warning, as only the lock tells the tools before the
/// upstreams start. Without a lock nothing is known and nothing is said.
fn check_servers(config: &Config) -> Result<Vec<String>, String> {
    if config.servers.is_empty() {
        return Ok(Vec::new());
    }
    let lock_path = pins::lock_path(&config.path);
    let Some(lock) = pins::Lock::read(&lock_path)? else {
        return Ok(Vec::new());
    };
    let policy = config.policy();
    let mut builder = warden_core::Catalogue::builder(&policy);
    for up in &config.upstream {
        if let Some(tools) = lock.upstreams.get(&up.name) {
            let tools: Vec<serde_json::Value> = tools.values().cloned().collect();
            builder.add_upstream(&up.name, up.prefix, &tools);
        }
    }
    let (catalogue, _) = builder.build();
    let mut warnings: Vec<String> = config
        .servers
        .iter()
        .filter(|s| !catalogue.tools().iter().any(|t| s.exposes(&t.name)))
        .map(|s| {
            format!(
                "server '{}': its tools ({}) match no tool in the pins lock ({}); it would serve no tool",
                s.name,
                s.patterns.join(", "),
                lock_path.display()
            )
        })
        .collect();
    warnings.extend(check_server_args(config, &catalogue, &lock_path));
    Ok(warnings)
}

/// Pins and alias targets naming an argument the locked tool does not declare
/// (A2, A7): the pin would send the upstream a key it does not know, the alias
/// would rename into one. The hint is the nearest declared name or alias (an
/// alias pointing at the name it is read as). Warnings, as tools change.
fn check_tool_args(config: &Config) -> Result<Vec<String>, String> {
    if config.upstream.iter().all(|u| u.tools.is_empty()) {
        return Ok(Vec::new());
    }
    let lock_path = pins::lock_path(&config.path);
    let Some(lock) = pins::Lock::read(&lock_path)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for up in &config.upstream {
        for (tool, tc) in &up.tools {
            let Some(props) = lock
                .upstreams
                .get(&up.name)
                .and_then(|tools| tools.get(tool))
                .and_then(|t| t.pointer("/inputSchema/properties"))
                .and_then(serde_json::Value::as_object)
            else {
                continue;
            };
            let declared: Vec<&str> = props.keys().map(String::as_str).collect();
            let aliases: Vec<(String, String)> = tc
                .aliases
                .iter()
                .filter_map(|(a, c)| Some((a.clone(), c.as_str()?.to_owned())))
                .collect();
            let hint = |name: &str, aliases: &[(String, String)]| {
                warden_core::hint::near(name, &declared, aliases)
                    .map(|n| format!("; {}", n.did_you_mean()))
                    .unwrap_or_default()
            };
            let whose = format!("upstream '{}' tool '{tool}'", up.name);
            let lock = lock_path.display();
            for (alias, canonical) in &aliases {
                if !props.contains_key(canonical) {
                    out.push(format!("{whose}: alias '{alias}' names '{canonical}', which its schema in the pins lock ({lock}) does not declare{}", hint(canonical, &[])));
                }
            }
            for pinned in tc.pin.keys().filter(|p| !props.contains_key(*p)) {
                out.push(format!(
                    "{whose}: pin '{pinned}' is not in its schema in the pins lock ({lock}){}",
                    hint(pinned, &aliases)
                ));
            }
        }
    }
    Ok(out)
}

/// Arguments a server sets (V7) that the locked tool does not declare, or a
/// tool the lock does not hold: the setting would do nothing.
fn check_server_args(
    config: &Config,
    catalogue: &warden_core::Catalogue,
    lock: &std::path::Path,
) -> Vec<String> {
    let mut out = Vec::new();
    for s in &config.servers {
        for (tool, args) in s.set_arguments() {
            let Some(entry) = catalogue.get(tool) else {
                out.push(format!(
                    "server '{}': args names '{tool}', which is not in the pins lock ({})",
                    s.name,
                    lock.display()
                ));
                continue;
            };
            for arg in args.into_iter().filter(|a| !entry.declares(a)) {
                out.push(format!("server '{}': argument '{arg}' of '{tool}' is not in its schema in the pins lock ({}); the setting does nothing", s.name, lock.display()));
            }
        }
    }
    out
}

/// The part of the check that reads the pins lock beside the file: one that
/// exists but cannot be read or does not verify is an error (a gateway that
/// started without it would serve every tool unpinned), and so is an argument
/// condition the locked schemas say can never hold. `run` checks this before
/// it starts, as a reload does before it changes anything. The warnings are
/// the conditions that hold only on calls breaking a tool's schema.
pub fn check_lock(config: &Config) -> Result<Vec<String>, Vec<String>> {
    let (certain, doubtful): (Vec<_>, Vec<_>) = pins::rule_problems(config)
        .map_err(|e| vec![e])?
        .into_iter()
        .partition(|p| p.certain);
    let lock = pins::lock_path(&config.path);
    let schema = |p: &warden_core::RuleProblem| format!("{p} (schema from {})", lock.display());
    if !certain.is_empty() {
        let file = config.path.display();
        return Err(certain
            .iter()
            .map(|p| format!("{file}: {}", schema(p)))
            .collect());
    }
    Ok(doubtful.iter().map(schema).collect())
}

/// `check` asks the `[oauth]` issuer for its metadata and keys: one that cannot be
/// reached now is a warning (the gateway starts and waits for it), one that can
/// never work (an untrusted certificate, metadata naming another issuer) an error.
async fn check_issuer(config: &Config) -> Result<Vec<String>, String> {
    use crate::front::auth::oauth::{Probe, ResourceServer};
    let scheme = if config.gateway.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    let url = format!("{scheme}://{}/mcp", config.gateway.listen);
    let Some(rs) = ResourceServer::from_config(config, &url)? else {
        return Ok(Vec::new());
    };
    match rs.probe().await {
        Probe::Ready => Ok(Vec::new()),
        Probe::Unreachable(m) => Ok(vec![format!(
            "oauth.issuer '{}' cannot be reached now ({m}): its tokens are refused until it can",
            rs.issuer()
        )]),
        Probe::Broken(m) => Err(format!("oauth.issuer: {m}")),
    }
}

/// Reads the file again, once it stayed unchanged for [`SETTLE`], and puts it
/// in force if it passes the check; `None` when it did not (the configuration
/// in force stays).
pub async fn reload(gateway: &Gateway, path: &Path) -> Option<Reloaded> {
    if let Err(why) = settled(path).await {
        gateway.reload_refused(&why);
        return None;
    }
    match check_file(path).await {
        Ok(Checked { config, warnings }) => {
            for w in warnings {
                tracing::warn!("config: {w}");
            }
            Some(gateway.reload(config).await)
        }
        Err(why) => {
            let why: Vec<String> = why.into_iter().map(|e| e.text).collect();
            gateway.reload_refused(&why.join("; "));
            None
        }
    }
}

/// Reloads on SIGHUP and, with `watch`, when the config file or the pins lock
/// beside it changes on disk (their contents are compared every second).
/// Runs until the runtime ends.
pub fn spawn(gateway: Arc<Gateway>, path: PathBuf, watch: bool) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<&'static str>(1);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::hangup()) {
            Ok(mut hup) => {
                let tx = tx.clone();
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        // One pending reload is enough: it reads the file as it is then.
                        let _ = tx.try_send("SIGHUP");
                    }
                });
            }
            Err(e) => tracing::error!("cannot listen for SIGHUP; reload with --watch: {e}"),
        }
    }
    if watch {
        let files = [path.clone(), pins::lock_path(&path)];
        tokio::spawn(async move {
            let mut seen = files.each_ref().map(|f| fingerprint(f));
            loop {
                tokio::time::sleep(POLL).await;
                let now = files.each_ref().map(|f| fingerprint(f));
                // A config file gone for a moment is an editor replacing it: the
                // next look sees the new one.
                if now[0].is_none() {
                    continue;
                }
                if now != seen {
                    seen = now;
                    if tx.send("a file changed").await.is_err() {
                        return;
                    }
                }
            }
        });
        tracing::info!(config = %path.display(), "watching the config file and its pins lock for changes");
    }
    tokio::spawn(async move {
        while let Some(why) = rx.recv().await {
            tracing::info!(config = %path.display(), "reloading the configuration ({why})");
            reload(&gateway, &path).await;
        }
    });
}

/// Waits until the file's contents stayed the same for [`SETTLE`]; an error
/// when they kept changing (or the file stayed unreadable) for
/// [`SETTLE_TRIES`] looks.
async fn settled(path: &Path) -> Result<(), String> {
    let mut last = fingerprint(path);
    for _ in 0..SETTLE_TRIES {
        tokio::time::sleep(SETTLE).await;
        let now = fingerprint(path);
        if now.is_some() && now == last {
            return Ok(());
        }
        last = now;
    }
    Err(format!(
        "{}: the file kept changing (or could not be read) for {} s; write it in one step: \
         to a temporary file, then rename it over the config",
        path.display(),
        (SETTLE * SETTLE_TRIES).as_secs()
    ))
}

/// A file's contents as a hash (`None`: it cannot be read now).
fn fingerprint(path: &Path) -> Option<[u8; 32]> {
    let bytes = std::fs::read(path).ok()?;
    Some(Sha256::digest(&bytes).into())
}
