//! The catalogue built from the upstreams' last good listings, checked against
//! the pins lock on every build (P1-P3): drifted tools hidden, put to a human or
//! reported, and each drift recorded once.

use super::Upstreams;
use crate::config::PinMode;
use crate::gateway::client_session::lock;
use crate::logged::logged;
use crate::pins::{self, Lock};
use crate::texts;
use crate::upstream::Upstream;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use warden_core::catalogue::seen_name;
use warden_core::{Catalogue, LayeredPolicy, PolicySource, ToolPolicy};
use warden_store::ToolDrift;

impl Upstreams {
    /// Builds the catalogue from the cached listings under the pins lock, then
    /// records the drifts it found in the audit trail.
    pub(crate) async fn rebuild_catalogue(&self) {
        let drifted = self.build_catalogue();
        self.record_drifts(drifted).await;
    }

    /// Records drifts [`Upstreams::install`] or a catalogue build found in the
    /// audit trail (when drift records go there).
    pub async fn record_drifts(&self, drifted: Vec<Drifted>) {
        let settle = lock(&self.drift_audit).clone();
        if let Some(settle) = settle {
            for (up, tool, mode, drift) in drifted {
                let record = settle.audit.drift(&up, &tool, mode.as_str(), drift);
                settle.audit.record(record, None).await;
            }
        }
    }

    /// Builds and installs the catalogue; returns the drifts that appeared, changed
    /// or ended in it.
    pub(super) fn build_catalogue(&self) -> Vec<Drifted> {
        let listings = self
            .listings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let lock = self.current_lock();
        let settings = self
            .settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (policy, rules) = &*settings;
        let list = self.list();
        let mut asks = HashMap::new();
        let mut drifted = Vec::new();
        let owners = lock
            .as_ref()
            .map(|l| name_owners(l, &list))
            .unwrap_or_default();
        let served: Vec<Option<Cow<'_, [Arc<RawValue>]>>> = list
            .iter()
            .map(|up| {
                let tools = listings.get(&up.index)?;
                Some(match &lock {
                    None => Cow::Borrowed(tools.as_slice()),
                    Some(lock) => {
                        let pinned = self.pinned(lock, up, tools, &mut asks, &mut drifted);
                        Cow::Owned(owned_only(pinned, up, &owners))
                    }
                })
            })
            .collect();
        if lock.is_none() {
            // Without a lock nothing is pinned, so nothing differs from one.
            crate::gateway::client_session::lock(&self.drifts).clear();
        }
        let policy = Asking {
            policy,
            asks: &asks,
        };
        let mut builder = Catalogue::builder(&policy);
        for (up, tools) in list.iter().zip(&served) {
            if let Some(tools) = tools {
                builder.add_upstream_shared(&up.name, up.config.prefix, tools);
            }
        }
        let (catalogue, problems) = builder.build();
        for p in problems {
            // Tool names and what is wrong with them come from the upstream's listing.
            tracing::warn!(upstream = %p.upstream, tool = %logged(&p.tool), dropped = p.dropped, "{}", logged(&p.problem));
        }
        for p in rules.problems(&catalogue) {
            // Names and paths come from the upstream's listing and the config.
            tracing::warn!("config: {}", logged(&p));
        }
        *self.catalogue.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(catalogue);
        // What the build read from is freed before the pages go back.
        drop(served);
        drop(listings);
        crate::memory::release_freed();
        drifted
    }

    /// The pins lock as the file says now; the last good one when it cannot be read.
    pub(super) fn current_lock(&self) -> Option<Lock> {
        let mut last = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        match Lock::read(&self.lock_path) {
            Ok(now) => *last = now,
            Err(e) => tracing::error!("{}; the last good pins lock stays in force", logged(&e)),
        }
        last.clone()
    }

    /// The tools of `up` to serve under the lock (P2): those it holds, and in `ask`
    /// and `report` mode the others too, but for definitions rejected (P4) (`ask` puts each call to a human: `asks`
    /// gets what to tell them). A drift that appeared or changed since the last
    /// listing is logged and counted, and goes to `drifted` with each that ended.
    pub(super) fn pinned(
        &self,
        lock: &Lock,
        up: &Upstream,
        tools: &[Arc<RawValue>],
        asks: &mut HashMap<(String, String), String>,
        drifted: &mut Vec<Drifted>,
    ) -> Vec<(Arc<RawValue>, Value)> {
        // Parsed for the comparisons, once per build under a lock; dropped after.
        let parsed: Vec<Value> = tools
            .iter()
            .map(|t| serde_json::from_str(t.get()).unwrap_or(Value::Null))
            .collect();
        let none = Default::default();
        let locked = lock.upstreams.get(&up.name).unwrap_or(&none);
        let mode = up.config.pins.unwrap_or_default();
        let seen = |n: &str| seen_name(&up.name, n, up.config.prefix);
        // In `pins diff` order: (the lock's name for the tool, text, tool, drift).
        let mut now = Vec::new();
        for d in pins::diff(locked, &parsed) {
            let text = pins::render(&up.name, &d);
            // Keyed by the lock's name for the tool; asked about under its name now.
            let (key, tool, drift, ask) = match &d {
                pins::Drift::Added(n) => {
                    let ask = (n, texts::pin_added(&seen(n)));
                    (n, seen(n), drift_of("added", &[], None, &text), Some(ask))
                }
                pins::Drift::Removed(n) => {
                    (n, seen(n), drift_of("removed", &[], None, &text), None)
                }
                pins::Drift::Renamed { from, to } => {
                    let ask = (to, texts::pin_renamed(&seen(to), &seen(from)));
                    let drift = drift_of("renamed", &[], Some(seen(from)), &text);
                    (from, seen(to), drift, Some(ask))
                }
                pins::Drift::Changed(n, fields) => {
                    let fields: Vec<&str> = fields.iter().map(|(f, _, _)| f.as_str()).collect();
                    let ask = (n, texts::pin_changed(&seen(n), &fields));
                    (
                        n,
                        seen(n),
                        drift_of("changed", &fields, None, &text),
                        Some(ask),
                    )
                }
            };
            if let (PinMode::Ask, Some((name, question))) = (mode, ask) {
                asks.insert((up.name.clone(), name.clone()), question);
            }
            now.push((key.clone(), text, tool, drift));
        }
        let mut drifts = crate::gateway::client_session::lock(&self.drifts);
        let before = drifts.remove(&up.index).unwrap_or_default();
        for (key, text, tool, drift) in &now {
            if before.get(key) == Some(text) {
                continue;
            }
            self.tool_drift.fetch_add(1, Ordering::Relaxed);
            // Names, descriptions and schemas come from the upstream: escaped.
            tracing::warn!(upstream = %up.name, mode = ?mode, "tool definition differs from the pins lock: {}", logged(text.trim_end()));
            drifted.push((up.name.clone(), tool.clone(), mode, drift.clone()));
        }
        for key in before.keys().filter(|k| !now.iter().any(|n| n.0 == **k)) {
            tracing::info!(upstream = %up.name, tool = %logged(key), "tool definition matches the pins lock again");
            let restored = drift_of("restored", &[], None, "");
            drifted.push((up.name.clone(), seen(key), mode, restored));
        }
        drifts.insert(
            up.index,
            now.into_iter().map(|(k, text, _, _)| (k, text)).collect(),
        );
        drop(drifts);
        // A definition a reviewer rejected (P4) is withheld whatever the mode.
        tools
            .iter()
            .cloned()
            .zip(parsed)
            .filter(|(_, t)| {
                lock.holds(&up.name, t) || (mode != PinMode::Hidden && !lock.rejects(&up.name, t))
            })
            .collect()
    }
}

/// The name callers see → the upstream it was locked to: the first upstream
/// (in config order) whose section of the pins lock holds a tool of that name,
/// the one that served it when the lock was written.
fn name_owners(lock: &Lock, list: &[Arc<Upstream>]) -> HashMap<String, usize> {
    let mut owners = HashMap::new();
    for up in list {
        for name in lock
            .upstreams
            .get(&up.name)
            .into_iter()
            .flatten()
            .map(|(n, _)| n)
        {
            owners
                .entry(seen_name(&up.name, name, up.config.prefix))
                .or_insert(up.index);
        }
    }
    owners
}

/// P2: `tools` of `up` without those whose name callers see was locked to
/// another upstream. A name locked to one upstream never moves to another
/// offering the same name (unprefixed): while its own tool is hidden for a
/// drift, the name is absent until the drift is reviewed.
fn owned_only(
    tools: Vec<(Arc<RawValue>, Value)>,
    up: &Upstream,
    owners: &HashMap<String, usize>,
) -> Vec<Arc<RawValue>> {
    tools
        .into_iter()
        .filter(|(_, t)| {
            let Some(name) = t.get("name").and_then(Value::as_str) else {
                return true;
            };
            let seen = seen_name(&up.name, name, up.config.prefix);
            owners.get(&seen).is_none_or(|owner| *owner == up.index)
        })
        .map(|(text, _)| text)
        .collect()
}

/// A drift a catalogue build found: (upstream, tool, mode, what).
pub type Drifted = (String, String, PinMode, ToolDrift);

/// The configured argument policy, with `always_ask` set on the tools that differ
/// from the pins lock of an upstream in `ask` mode (keyed by upstream and its own
/// tool name).
struct Asking<'a> {
    policy: &'a LayeredPolicy,
    asks: &'a HashMap<(String, String), String>,
}

impl PolicySource for Asking<'_> {
    fn policy_for(&self, upstream: &str, tool: &str) -> ToolPolicy {
        let mut policy = self.policy.resolve(upstream, tool);
        if !self.asks.is_empty() {
            policy.always_ask = self
                .asks
                .get(&(upstream.to_owned(), tool.to_owned()))
                .cloned();
        }
        policy
    }
}

fn drift_of(change: &str, fields: &[&str], renamed_from: Option<String>, diff: &str) -> ToolDrift {
    ToolDrift {
        change: change.to_owned(),
        fields: fields.iter().map(|f| (*f).to_owned()).collect(),
        renamed_from,
        diff: diff.to_owned(),
    }
}
