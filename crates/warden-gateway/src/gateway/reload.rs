//! Taking a new configuration while calls run.
//!
//! The file was checked before it gets here (the way `mcp-warden check` checks
//! it). What it changes falls in three parts:
//!
//! - the call policy (rules, callers' groups, the grant webhook, hooks, quotas,
//!   flows, argument handling, the pins lock): built whole, then swapped in
//!   together with the catalogue it goes with, so a call sees the old pair or
//!   the new pair, never one of each; a call under way keeps the pair it began
//!   with;
//! - the upstreams: only those whose own connection settings changed are
//!   started again; new ones start before they can be reached, removed ones
//!   stop once their calls in flight are over;
//! - settings read once at start (the front, its address and limits, TLS, the
//!   store, the audit trail, the admin listener, traces, authentication
//!   settings, the state secret): they keep their values, and the reload says
//!   which of them wait for a restart.

use super::client_session::ListChange;
use super::policy::{Kept, Policy};
use super::Gateway;
use crate::config::Config;
use crate::jsonrpc;
use crate::logged::logged;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use warden_core::Caller;

/// Tables whose settings are read once, at start: a change waits for a restart.
pub const RESTART_ONLY: &[&str] = &[
    "gateway",
    "store",
    "idempotency",
    "audit",
    "metrics",
    "admin",
    "traces",
    "auth",
    "oauth",
];

/// Keys of an `[[upstream]]` that shape only its tools as callers see them: a
/// change to these rebuilds the catalogue and leaves the upstream running.
const CATALOGUE_ONLY: &[&str] = &[
    "tools",
    "labels",
    "unknown_arguments",
    "validate",
    "reasons",
];

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reloaded {
    /// Upstreams started, stopped and started again.
    pub upstreams: super::UpstreamChanges,
    /// Tables that changed but keep their values until a restart (`gateway`, `store` …).
    pub needs_restart: Vec<String>,
    /// Sessions told their tool list changed.
    pub notified: usize,
}

/// One reload at a time.
#[derive(Default)]
pub struct Reloads {
    running: tokio::sync::Mutex<()>,
}

/// The tables of `RESTART_ONLY` that `new` writes otherwise than `started` did.
pub fn restart_only_changes(started: &Config, new: &Config) -> Vec<String> {
    RESTART_ONLY
        .iter()
        .filter(|t| started.written(t) != new.written(t))
        .map(|t| (*t).to_owned())
        .collect()
}

/// The upstreams of `new` that run on as they are: configured in `old` with the
/// same connection settings (only the keys in `CATALOGUE_ONLY` may differ).
pub fn unchanged_upstreams(old: &Config, new: &Config) -> HashSet<String> {
    let connection = |t: &toml::Table| {
        let mut t = t.clone();
        for k in CATALOGUE_ONLY {
            t.remove(*k);
        }
        t
    };
    new.upstream
        .iter()
        .filter(
            |u| match (old.written_upstream(&u.name), new.written_upstream(&u.name)) {
                (Some(a), Some(b)) => connection(a) == connection(b),
                _ => false,
            },
        )
        .map(|u| u.name.clone())
        .collect()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

impl Gateway {
    /// Notes the configuration loaded at start in the metrics.
    pub(super) fn loaded(&self) {
        let c = &self.metrics.config;
        c.loaded_at.store(unix_now(), Ordering::Relaxed);
        *c.hash.lock().unwrap_or_else(|e| e.into_inner()) = self.config.digest()[..16].to_owned();
    }

    /// A reload was refused: the file did not pass the check (`why`, as `check`
    /// says it). The configuration in force stays.
    pub fn reload_refused(&self, why: &str) {
        self.metrics
            .config
            .reloads_invalid
            .fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            "config reload refused; the configuration in force stays: {}",
            logged(why)
        );
    }

    /// Puts a checked configuration in force (see the module's text).
    pub async fn reload(&self, new: Config) -> Reloaded {
        let _one = self.reloads.running.lock().await;
        let old = self.current_config();
        let mut reloaded = Reloaded {
            needs_restart: restart_only_changes(&self.config, &new),
            ..Reloaded::default()
        };
        // Settings read at start keep the values they started with.
        let mut config = new;
        config.gateway = self.config.gateway.clone();
        config.store = self.config.store.clone();
        config.idempotency = self.config.idempotency.clone();
        config.audit = self.config.audit.clone();
        config.metrics = self.config.metrics.clone();
        config.admin = self.config.admin.clone();
        config.traces = self.config.traces.clone();
        config.auth = self.config.auth.clone();
        config.oauth = self.config.oauth.clone();
        let before = self.calls.policy();
        let same = |k: &str| old.written(k) == config.written(k);
        let labels_same = config.upstream.iter().all(|u| {
            let label = |c: &Config| {
                c.written_upstream(&u.name)
                    .and_then(|t| t.get("labels"))
                    .cloned()
            };
            label(&old) == label(&config)
        }) && old.upstream.len() == config.upstream.len();
        let kept = Kept {
            webhooks: same("hook").then_some(&*before),
            quotas: same("quota").then_some(&*before),
            flows: (same("flow") && labels_same).then_some(&*before),
        };
        let policy = Arc::new(Policy::build(
            &config,
            &self.hooks,
            self.shared.clone(),
            kept,
        ));
        let keep = unchanged_upstreams(&old, &config);
        let prepared = self.upstreams.prepare(&config, &keep).await;
        if let Some(x) = self.exchanger.get() {
            for up in prepared.upstreams() {
                if up.credentials.exchanges() {
                    up.credentials.set_exchanger(x.clone());
                }
            }
        }
        let catalogue_before = self.catalogue();
        // The policy and the catalogue change together: a call begins under
        // both old or both new (it reads them under the same lock).
        let (changes, failed, drifted) =
            self.calls.swap(policy, || self.upstreams.install(prepared));
        // Audit records are written outside the lock calls begin under.
        self.upstreams.record_drifts(drifted).await;
        for index in failed {
            let upstreams = self.upstreams.clone();
            tokio::spawn(async move { upstreams.restart(index).await });
        }
        reloaded.upstreams = changes;
        *self.live.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
        self.regroup_stdio_sessions();
        reloaded.notified = self.tell_sessions(&before, &catalogue_before).await;
        let c = &self.metrics.config;
        c.reloads_ok.fetch_add(1, Ordering::Relaxed);
        c.loaded_at.store(unix_now(), Ordering::Relaxed);
        *c.hash.lock().unwrap_or_else(|e| e.into_inner()) =
            self.current_config().digest()[..16].to_owned();
        c.restart_needed.store(
            u64::from(!reloaded.needs_restart.is_empty()),
            Ordering::Relaxed,
        );
        let u = &reloaded.upstreams;
        tracing::info!(
            started = %u.started.join(","),
            stopped = %u.stopped.join(","),
            restarted = %u.restarted.join(","),
            notified = reloaded.notified,
            "config reloaded"
        );
        if !reloaded.needs_restart.is_empty() {
            tracing::warn!(
                "config reload: [{}] changed and needs a restart; the values the gateway started with stay in force",
                reloaded.needs_restart.join("], [")
            );
        }
        reloaded
    }

    /// A stdio session acts for the configured stdio caller: its groups are the
    /// configuration's now.
    fn regroup_stdio_sessions(&self) {
        let config = self.current_config();
        for s in self.sessions.live() {
            let Some(caller) = s.caller() else { continue };
            if s.label == "stdio" && caller.name == config.gateway.stdio_caller {
                let groups = config.groups_of(&caller.name);
                if groups != caller.groups {
                    let regrouped = Caller {
                        name: caller.name.clone(),
                        groups,
                    };
                    s.update_caller(&regrouped, s.subject_token());
                }
            }
        }
    }

    /// Sends `notifications/tools/list_changed` to each session whose caller
    /// sees another list now, and wakes the `subscriptions/listen` streams
    /// (each compares for its own caller). Returns how many sessions were told.
    async fn tell_sessions(
        &self,
        before: &Policy,
        catalogue_before: &Arc<warden_core::Catalogue>,
    ) -> usize {
        let now = self.calls.policy();
        let catalogue = self.catalogue();
        // Callers compared so far (few distinct ones), and whether their list changed.
        let mut changed: Vec<(Option<Caller>, bool)> = Vec::new();
        let mut told = 0;
        for s in self.sessions.live() {
            if s.is_stateless() {
                continue;
            }
            let caller = s.caller().map(|c| Caller::clone(&c));
            let differs = match changed.iter().find(|(c, _)| *c == caller) {
                Some((_, d)) => *d,
                None => {
                    let was = before
                        .grant
                        .list(&before.pipeline, catalogue_before, caller.as_ref())
                        .await;
                    let is = now
                        .grant
                        .list(&now.pipeline, &catalogue, caller.as_ref())
                        .await;
                    let d = !warden_core::catalogue::same_listing(&was, &is);
                    changed.push((caller, d));
                    d
                }
            };
            if differs {
                s.send(super::Outgoing::session(jsonrpc::notification(
                    "notifications/tools/list_changed",
                    None,
                )))
                .await;
                told += 1;
            }
        }
        self.sessions
            .changed(ListChange::Tools(catalogue_before.clone()));
        told
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::parse(text, "w.toml").unwrap()
    }

    #[test]
    fn only_connection_settings_start_an_upstream_again() {
        let old = config(
            "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\n\
             [[upstream]]\nname = \"b\"\ncommand = [\"y\"]\n\
             [[upstream]]\nname = \"c\"\ncommand = [\"z\"]\n",
        );
        let new = config(
            "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\nunknown_arguments = \"reject\"\n\
             [upstream.tools.t]\naliases = { a = \"b\" }\n\
             [[upstream]]\nname = \"b\"\ncommand = [\"y\", \"--more\"]\n\
             [[upstream]]\nname = \"d\"\ncommand = [\"z\"]\n",
        );
        let kept = unchanged_upstreams(&old, &new);
        assert_eq!(kept, HashSet::from(["a".to_owned()]));
    }

    #[test]
    fn tables_read_at_start_are_named_when_they_change() {
        let started = config("[gateway]\nlisten = \"127.0.0.1:1\"\n[[rule]]\ncallers = [\"*\"]\ntools = [\"*\"]\neffect = \"allow\"\n");
        let same = config("[gateway]\nlisten = \"127.0.0.1:1\"\n");
        assert!(restart_only_changes(&started, &same).is_empty());
        let moved =
            config("[gateway]\nlisten = \"127.0.0.1:2\"\n[store]\nurl = \"sqlite://w.db\"\n");
        assert_eq!(restart_only_changes(&started, &moved), ["gateway", "store"]);
    }
}
