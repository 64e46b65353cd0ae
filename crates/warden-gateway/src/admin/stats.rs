//! The figures the console's charts draw, counted from the audit trail's recent
//! records ([`AuditFacts`]: columns, never the records' JSON): calls per minute
//! by outcome, refusals by reason, latency per upstream, guard findings. The
//! admin API serves them as JSON (`/api/charts`) and the charts page draws them.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::time::{Duration, UNIX_EPOCH};
use warden_store::AuditFacts;

/// Outcomes in the order the charts stack them, each with its colour; an
/// outcome not named here is drawn grey after these.
pub const OUTCOME_COLORS: &[(&str, &str)] = &[
    ("ok", "#2a9d5c"),
    ("tool_error", "#e9a23b"),
    ("upstream_error", "#8e44ad"),
    ("refused", "#c0392b"),
    ("failed", "#7b1d1d"),
    ("cancelled", "#7f8c8d"),
    ("input_required", "#2f6db5"),
    ("abandoned", "#555555"),
];
pub const OTHER_COLOR: &str = "#999999";

/// The charts' figures over the `minutes` before `now_ms` (this minute included):
/// every minute of the window (oldest first) with its calls by outcome; refused
/// calls by decision; per upstream, calls let through and their p50 and p99
/// durations; and per guard and kind, how many findings (`null` when `guards`
/// is false: no guard is configured, so none can find anything).
pub fn charts(facts: &[AuditFacts], now_ms: i64, minutes: i64, guards: bool) -> Value {
    let this_minute = now_ms / 60_000;
    let first = this_minute - minutes + 1;
    let mut per_minute: Vec<BTreeMap<&str, u64>> = vec![BTreeMap::new(); minutes.max(0) as usize];
    let mut refusals: BTreeMap<&str, u64> = BTreeMap::new();
    let mut durations: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut findings: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for f in facts {
        if f.minute < first || f.minute > this_minute {
            continue;
        }
        *per_minute[(f.minute - first) as usize]
            .entry(f.outcome.as_str())
            .or_default() += 1;
        if f.outcome == "refused" {
            *refusals.entry(f.decision.as_str()).or_default() += 1;
        }
        if let (Some(up), "allowed") = (&f.upstream, f.decision.as_str()) {
            durations
                .entry(up.as_str())
                .or_default()
                .push(f.duration_ms);
        }
        for g in &f.findings {
            *findings
                .entry((g.guard.as_str(), g.kind.as_str()))
                .or_default() += g.count as u64;
        }
    }
    let per_minute: Vec<Value> = per_minute
        .iter()
        .enumerate()
        .map(|(i, counts)| {
            let start = UNIX_EPOCH + Duration::from_secs((first + i as i64) as u64 * 60);
            let outcomes: Map<String, Value> = counts
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            json!({"minute": warden_store::format_rfc3339(start), "outcomes": outcomes})
        })
        .collect();
    let mut refusals: Vec<(&str, u64)> = refusals.into_iter().collect();
    refusals.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let latency: Vec<Value> = durations
        .into_iter()
        .map(|(up, mut d)| {
            d.sort_by(f64::total_cmp);
            json!({"upstream": up, "calls": d.len(), "p50_ms": percentile(&d, 50), "p99_ms": percentile(&d, 99)})
        })
        .collect();
    let findings = guards.then(|| {
        let mut list: Vec<((&str, &str), u64)> = findings.into_iter().collect();
        list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        list.into_iter()
            .map(|((guard, kind), n)| json!({"guard": guard, "kind": kind, "found": n}))
            .collect::<Vec<_>>()
    });
    json!({
        "minutes": minutes,
        "per_minute": per_minute,
        "refusals": refusals.into_iter().map(|(r, n)| json!({"reason": r, "calls": n})).collect::<Vec<_>>(),
        "latency": latency,
        "findings": findings,
    })
}

/// The nearest-rank `p`th percentile of `sorted` (ascending, not empty),
/// rounded to a hundredth of a millisecond.
fn percentile(sorted: &[f64], p: usize) -> f64 {
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    let v = sorted[rank.min(sorted.len()) - 1];
    (v * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_store::GuardFinding;

    fn fact(minute: i64, decision: &str, outcome: &str, up: Option<&str>, ms: f64) -> AuditFacts {
        AuditFacts {
            minute,
            decision: decision.into(),
            outcome: outcome.into(),
            upstream: up.map(str::to_owned),
            duration_ms: ms,
            findings: Vec::new(),
        }
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!((percentile(&v, 50), percentile(&v, 99)), (100.0, 198.0));
        assert_eq!((percentile(&[7.0], 50), percentile(&[7.0], 99)), (7.0, 7.0));
        assert_eq!(percentile(&[1.0, 2.0], 50), 1.0);
    }

    #[test]
    fn records_are_counted_into_their_minute_reason_upstream_and_guard() {
        // 12:00 is minute 29,000,000 + …: any minute will do; the window is 3.
        let now = 1_700_000_000_000 - 1_700_000_000_000 % 60_000 + 30_000;
        let m = now / 60_000;
        let mut facts = vec![
            fact(m, "allowed", "ok", Some("up"), 10.0),
            fact(m, "allowed", "tool_error", Some("up"), 30.0),
            fact(m - 2, "unknown_tool", "refused", None, 0.1),
            fact(m - 2, "rate_limited", "refused", None, 0.1),
            fact(m - 1, "rate_limited", "refused", Some("up"), 0.1),
            fact(m - 3, "allowed", "ok", Some("old"), 99.0), // before the window
            fact(m, "replayed", "ok", Some("up"), 0.5),      // never reached it
        ];
        facts[0].findings.push(GuardFinding {
            guard: "leaks".into(),
            detector: "secrets".into(),
            kind: "aws_key".into(),
            path: "/content/0/text".into(),
            count: 3,
            action: "redact".into(),
        });
        let c = charts(&facts, now, 3, true);
        let start = |i: i64| {
            warden_store::format_rfc3339(UNIX_EPOCH + Duration::from_secs((m - 2 + i) as u64 * 60))
        };
        assert_eq!(
            c["per_minute"],
            json!([
                {"minute": start(0), "outcomes": {"refused": 2}},
                {"minute": start(1), "outcomes": {"refused": 1}},
                {"minute": start(2), "outcomes": {"ok": 2, "tool_error": 1}},
            ])
        );
        assert_eq!(
            c["refusals"],
            json!([{"reason": "rate_limited", "calls": 2}, {"reason": "unknown_tool", "calls": 1}])
        );
        assert_eq!(
            c["latency"],
            json!([{"upstream": "up", "calls": 2, "p50_ms": 10.0, "p99_ms": 30.0}])
        );
        assert_eq!(
            c["findings"],
            json!([{"guard": "leaks", "kind": "aws_key", "found": 3}])
        );
        assert_eq!(charts(&facts, now, 3, false)["findings"], Value::Null);
    }
}
