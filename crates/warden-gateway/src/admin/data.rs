//! What the operator console shows, as JSON: the admin API serves it as it is and
//! the HTML pages are rendered from it, so both always say the same.
//!
//! Nothing here holds a secret: upstreams are shown by name and transport (never
//! a URL, a command or a token), callers by name and groups, and call arguments
//! only as the audit trail stored them, with `[audit] redact` keys already
//! replaced.

use crate::gateway::Gateway;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use warden_core::{Caller, Effect};
use warden_store::{AuditFilter, AuditRecord, MinuteCount};

/// Calls listed at most by default, and at most when asked for more.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1000;
/// The overview counts calls per minute over this many minutes.
const MINUTES: i64 = 10;

/// The overview: upstreams, calls since start, and calls per minute.
pub async fn overview(gw: &Gateway) -> Value {
    let upstreams: Vec<Value> = gw
        .upstream_status()
        .into_iter()
        .map(|u| {
            json!({
                "name": u.name,
                "transport": u.transport,
                "state": if u.running { "running" } else { "down" },
                "restarts": gw.metrics.restarts_of(&u.name),
                "tools": u.listed_tools,
                "last_listing_error": u.last_listing_error,
                "caller_processes": u.caller_processes
                    .map(|(running, max)| json!({"running": running, "max": max})),
            })
        })
        .collect();
    let totals: Vec<Value> = gw
        .metrics
        .calls()
        .into_iter()
        .map(|((decision, outcome), n)| json!({"decision": decision, "outcome": outcome, "calls": n}))
        .collect();
    let per_minute = match gw.audit_store() {
        None => Value::Null,
        Some(store) => {
            let now = now_ms();
            let since = now - MINUTES * 60_000;
            match store.counts_per_minute(since).await {
                Ok(counts) => per_minute(&counts, now),
                Err(e) => json!({"error": format!("the audit store cannot be read: {e}")}),
            }
        }
    };
    json!({
        "upstreams": upstreams,
        "calls_since_start": totals,
        "calls_per_minute": per_minute,
        "catalogue_tools": gw.catalogue().tools().len(),
        "traces": gw.tracer.is_on(),
    })
}

/// The charts' figures (calls per minute by outcome, refusals by reason,
/// latency per upstream, guard findings) over the last [`MINUTES`] minutes,
/// counted from the audit trail's columns.
pub async fn charts(gw: &Gateway) -> Value {
    let Some(store) = gw.audit_store() else {
        return json!({"error": "no audit store is configured ([store] url)"});
    };
    let now = now_ms();
    let since = (now / 60_000 - MINUTES + 1) * 60_000;
    match store.audit_facts(since).await {
        Ok(facts) => {
            let guards = !gw.current_config().guards.list.is_empty();
            super::stats::charts(&facts, now, MINUTES, guards)
        }
        Err(e) => json!({"error": format!("the audit store cannot be read: {e}")}),
    }
}

/// Counts by minute (newest first, every minute of the window) and (decision, outcome).
fn per_minute(counts: &[MinuteCount], now: i64) -> Value {
    let this_minute = now / 60_000;
    Value::Array(
        (0..MINUTES)
            .map(|m| {
                let minute = this_minute - m;
                let counts: Vec<Value> = counts
                    .iter()
                    .filter(|c| c.minute == minute)
                    .map(
                        |c| json!({"decision": c.decision, "outcome": c.outcome, "calls": c.calls}),
                    )
                    .collect();
                let start = UNIX_EPOCH + Duration::from_secs(minute as u64 * 60);
                json!({"minute": warden_store::format_rfc3339(start), "counts": counts})
            })
            .collect(),
    )
}

/// The callers the config names (for the catalogue page's chooser).
pub fn callers(gw: &Gateway) -> Vec<String> {
    let config = gw.current_config();
    config.caller.iter().map(|c| c.name.clone()).collect()
}

/// The catalogue one caller sees, and the rules that decided each tool.
pub async fn catalogue(gw: &Gateway, name: &str) -> Value {
    // The configuration in force, as a reload left it.
    let config = gw.current_config();
    let caller = Caller {
        name: name.to_owned(),
        groups: config.groups_of(name),
    };
    let listed = match gw.list_tools(Some(&caller)).await {
        Ok(result) => result,
        Err(e) => return json!({"caller": name, "error": e}),
    };
    let tools: Vec<Value> = listed
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    json!({
                        "name": t.get("name").cloned().unwrap_or(Value::Null),
                        "description": t.get("description").cloned().unwrap_or(Value::Null),
                        "parameters": t.pointer("/inputSchema/properties")
                            .and_then(Value::as_object)
                            .map(|p| p.keys().cloned().collect::<Vec<_>>())
                            .unwrap_or_default(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    // Which rule decides each tool of the whole catalogue for this caller.
    let rules = config.rules();
    let catalogue = gw.catalogue();
    let mut decided: Vec<Vec<String>> = vec![Vec::new(); rules.rules.len() + 1];
    for tool in catalogue.tools() {
        let i = rules
            .rules
            .iter()
            .position(|r| r.applies(&caller, &tool.name))
            .unwrap_or(rules.rules.len());
        decided[i].push(tool.name.clone());
    }
    let mut shown: Vec<Value> = config
        .rule
        .iter()
        .zip(&decided)
        .enumerate()
        .map(|(i, (r, tools))| {
            json!({
                "rule": i + 1,
                "callers": r.callers,
                "tools": r.tools,
                "effect": effect(r.effect),
                "decides": tools,
            })
        })
        .collect();
    shown.push(json!({
        "rule": "default",
        "effect": effect(rules.default),
        "decides": decided.last().cloned().unwrap_or_default(),
    }));
    json!({
        "caller": name,
        "groups": caller.groups,
        "tools": tools,
        "rules": shown,
        "grant_webhook": config.access.webhook.is_some(),
    })
}

fn effect(e: Effect) -> &'static str {
    match e {
        Effect::Allow => "allow",
        Effect::Deny => "deny",
        Effect::Ask => "ask",
    }
}

/// The filters of the calls page, as read from its query string.
#[derive(Debug, Default, Clone)]
pub struct CallQuery {
    pub caller: Option<String>,
    pub tool: Option<String>,
    pub outcome: Option<String>,
    /// `2h`, `15m` or an RFC 3339 time.
    pub since: Option<String>,
    pub limit: usize,
    /// The page that starts below this record id (the last one of the page before).
    pub before: Option<i64>,
}

impl CallQuery {
    pub fn from_pairs(pairs: &[(String, String)]) -> CallQuery {
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, v)| key == k && !v.trim().is_empty())
                .map(|(_, v)| v.trim().to_owned())
        };
        CallQuery {
            caller: get("caller"),
            tool: get("tool"),
            outcome: get("outcome"),
            since: get("since"),
            limit: get("limit")
                .and_then(|l| l.parse().ok())
                .unwrap_or(DEFAULT_LIMIT)
                .clamp(1, MAX_LIMIT),
            before: get("before").and_then(|b| b.parse().ok()),
        }
    }

    /// This query's string with the page starting below `before` (`None`: the
    /// newest page); the filters stay as they are.
    pub fn page(&self, before: Option<i64>) -> String {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        for (k, v) in [
            ("caller", &self.caller),
            ("tool", &self.tool),
            ("outcome", &self.outcome),
            ("since", &self.since),
        ] {
            if let Some(v) = v {
                pairs.push((k, v.clone()));
            }
        }
        if self.limit != DEFAULT_LIMIT {
            pairs.push(("limit", self.limit.to_string()));
        }
        if let Some(b) = before {
            pairs.push(("before", b.to_string()));
        }
        pairs
            .iter()
            .map(|(k, v)| format!("{k}={}", url_encode(v)))
            .collect::<Vec<_>>()
            .join("&")
    }
}

/// Recent calls from the audit trail, newest first, a page of at most
/// `q.limit`; `next_before` names the next (older) page when there may be one.
pub async fn calls(gw: &Gateway, q: &CallQuery) -> Value {
    let filters = json!({"caller": q.caller, "tool": q.tool, "outcome": q.outcome, "since": q.since, "limit": q.limit, "before": q.before});
    let Some(store) = gw.audit_store() else {
        return json!({"filters": filters, "error": "no audit store is configured ([store] url)"});
    };
    let since_ms = match &q.since {
        None => None,
        Some(s) => match warden_store::parse_since(s, SystemTime::now()) {
            Ok(ms) => Some(ms),
            Err(e) => return json!({"filters": filters, "error": e}),
        },
    };
    let filter = AuditFilter {
        caller: q.caller.clone(),
        tool: q.tool.clone(),
        outcome: q.outcome.clone(),
        since_ms,
        limit: q.limit,
    };
    match store.recent_before(filter, q.before).await {
        Ok(records) => {
            // A full page: there may be older calls, from below its last id.
            let next = (records.len() == q.limit)
                .then(|| records.last().map(|(id, _)| *id))
                .flatten();
            let calls: Vec<Value> = records.into_iter().map(|(id, r)| summary(id, r)).collect();
            json!({"filters": filters, "calls": calls, "next_before": next})
        }
        Err(e) => {
            json!({"filters": filters, "error": format!("the audit store cannot be read: {e}")})
        }
    }
}

/// What the list shows of one call; its `reason` is the refusal or failure when
/// there is one, else the caller's own reason.
fn summary(id: i64, r: AuditRecord) -> Value {
    json!({
        "id": id,
        "time": r.time,
        "caller": r.caller,
        "tool": r.tool,
        "decision": r.decision,
        "outcome": r.outcome,
        "duration_ms": r.duration_ms,
        "undeclared_keys": r.unknown_keys,
        "why": why(&r),
    })
}

/// Why a call ended as it did, in words: the stored failure, else what its
/// decision means.
fn why(r: &AuditRecord) -> Option<String> {
    if let Some(e) = &r.error {
        return Some(e.clone());
    }
    if let Some(d) = &r.drift {
        return Some(match d.change.as_str() {
            "restored" => "the tool matches the pins lock again (P2)".to_owned(),
            _ => format!("the tool differs from the pins lock: {} (P2)", d.summary()),
        });
    }
    let text = match r.decision.as_str() {
        "unknown_tool" => "hidden from the caller, or no such tool (G2)",
        "invalid_arguments" => "the arguments were refused (A3, A5, A7)",
        "grant_failure" => "the grant webhook failed (G4)",
        "denied" => "refused by an approval, a before hook or the ledger (H1, I1)",
        "answered_by_hook" => "a before hook answered in the tool's place (H1)",
        _ => return None,
    };
    Some(text.to_owned())
}

/// One call in full, as the audit trail holds it (arguments redacted there).
pub async fn call(gw: &Gateway, id: i64) -> Option<Value> {
    let store = gw.audit_store()?;
    let r = store.audit_record(id).await.ok()??;
    let why = why(&r);
    let mut detail = Map::new();
    detail.insert("id".into(), json!(id));
    if let Value::Object(m) = serde_json::to_value(&r).unwrap_or_default() {
        detail.extend(m);
    }
    detail.insert("why".into(), json!(why));
    Some(Value::Object(detail))
}

/// The quotas (Q1-Q4) as configured, and each caller's use of each as this
/// process counts it: calls in flight, and calls its rate would take now.
pub fn quotas(gw: &Gateway) -> Value {
    let (usage, shared) = gw.quota_usage();
    let quotas: Vec<Value> = gw
        .config
        .limits
        .quotas
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let rule = q.selects();
            let callers: Vec<String> = rule.callers.iter().map(selector).collect();
            let used: Vec<Value> = usage
                .iter()
                .filter(|u| u.quota == i)
                .map(|u| {
                    json!({
                        "caller": u.caller,
                        "in_flight": u.in_flight,
                        "available": u.available,
                        "burst": u.burst,
                    })
                })
                .collect();
            json!({
                "quota": i + 1,
                "callers": callers,
                "tools": rule.tool_patterns,
                "rate": q.rate.map(|r| r.to_string()),
                "burst": q.rate.map(|r| r.burst),
                "concurrency": q.concurrency,
                "strict": q.strict,
                "use": used,
            })
        })
        .collect();
    json!({"quotas": quotas, "rates_shared": shared})
}

fn selector(s: &warden_core::CallerSelector) -> String {
    match s {
        warden_core::CallerSelector::Anyone => "*".to_owned(),
        warden_core::CallerSelector::Named(n) => n.clone(),
        warden_core::CallerSelector::Group(g) => format!("group:{g}"),
    }
}

/// A query-string value, percent-encoded.
pub fn url_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &[(&str, &str)]) -> Vec<(String, String)> {
        q.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_page_link_keeps_the_filters_and_moves_the_start() {
        let q = CallQuery::from_pairs(&pairs(&[
            ("caller", "a b"),
            ("outcome", "refused"),
            ("limit", "50"),
            ("before", "900"),
            ("tool", " "),
        ]));
        assert_eq!(q.before, Some(900));
        assert_eq!(
            q.page(Some(850)),
            "caller=a%20b&outcome=refused&limit=50&before=850"
        );
        assert_eq!(q.page(None), "caller=a%20b&outcome=refused&limit=50");
        let plain = CallQuery::from_pairs(&pairs(&[("limit", "100"), ("before", "x")]));
        assert_eq!((plain.before, plain.page(None)), (None, String::new()));
    }
}
