//! Prometheus metrics: calls by decision and outcome, call latency, unknown keys
//! seen, the audit trail's backlog and losses, and the HTTP front's refusals (by
//! status), open sessions and connections, connections refused at accept (by
//! cap) and closed for a timeout (head, idle), served on the admin listener
//! (`crate::admin`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Default)]
pub struct Metrics {
    calls: Mutex<BTreeMap<(String, String), u64>>,
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
    pub unknown_keys: AtomicU64,
    /// Audit records waiting for a retry, and records lost for good (shared with the trail).
    pub audit_backlog: Arc<AtomicU64>,
    pub audit_lost: Arc<AtomicU64>,
    /// Audit records the full queue refused (`durability = "async"`), logged whole.
    pub audit_dropped: Arc<AtomicU64>,
    /// Audit records the OTLP export dropped (T5): a full queue or a collector that refused.
    pub audit_otlp_dropped: Arc<AtomicU64>,
    /// Tool definitions seen drifting from the pins lock (P2), each counted once.
    pub tool_drift: Arc<AtomicU64>,
    /// Trace spans dropped: the export queue was full or the collector refused them.
    pub trace_spans_dropped: Arc<AtomicU64>,
    /// HTTP front: requests refused before any session or pipeline, by status.
    http_refused: Mutex<BTreeMap<u16, u64>>,
    /// X6, X9: calls shadow rules, quotas, flow rules and guards would have decided otherwise, by what they would have done.
    shadow: Mutex<BTreeMap<&'static str, u64>>,
    /// HTTP front: sessions open now.
    pub http_sessions: AtomicU64,
    /// HTTP front: connections open now.
    pub http_connections: AtomicU64,
    /// The admin listener: connections open now.
    pub admin_connections: AtomicU64,
    /// HTTP front: connections refused at accept, by the cap they hit (the admin
    /// listener's as `admin.max_connections…`).
    http_connections_refused: Mutex<BTreeMap<&'static str, u64>>,
    /// HTTP front: connections closed for a timeout, by which ("head", "idle").
    http_connections_timed_out: Mutex<BTreeMap<&'static str, u64>>,
    /// Upstream restarts begun, by upstream and why it ended ("stopped", "stuck").
    upstream_restarts: Mutex<BTreeMap<(String, &'static str), u64>>,
    /// Guard findings in tool results and arguments, by (guard, kind, action) (S4).
    guard_findings: Mutex<BTreeMap<(String, String, String), u64>>,
    /// Configuration reloads and the configuration in force.
    pub config: ConfigMetrics,
}

/// Configuration reloads: how many took and how many were refused, and what is
/// in force now.
#[derive(Default)]
pub struct ConfigMetrics {
    pub reloads_ok: AtomicU64,
    pub reloads_invalid: AtomicU64,
    /// When the configuration in force was loaded (start or reload), Unix seconds.
    pub loaded_at: AtomicU64,
    /// The first 16 hex digits of the SHA-256 of the file in force.
    pub hash: Mutex<String>,
    /// The last file read has settings that take effect only at a restart.
    pub restart_needed: AtomicU64,
}

impl Metrics {
    /// Metrics sharing the audit trail's backlog and loss counters.
    pub fn new(audit_backlog: Arc<AtomicU64>, audit_lost: Arc<AtomicU64>) -> Self {
        Metrics {
            audit_backlog,
            audit_lost,
            ..Default::default()
        }
    }

    /// Counts one thing a shadow rule, quota, flow rule or guard would have done (X6, X9).
    pub fn shadow(&self, would: &'static str) {
        *self
            .shadow
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(would)
            .or_default() += 1;
    }

    /// Counts one HTTP request the front refused (401, 403, 404, 413 …).
    pub fn http_refused(&self, status: u16) {
        *self
            .http_refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(status)
            .or_default() += 1;
    }

    /// Counts one connection refused at accept for the cap `limit` (its config key).
    pub fn http_connection_refused(&self, limit: &'static str) {
        *self
            .http_connections_refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(limit)
            .or_default() += 1;
    }

    /// Counts one connection closed because its `timeout` ("head", "idle") ran out.
    pub fn http_connection_timed_out(&self, timeout: &'static str) {
        *self
            .http_connections_timed_out
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(timeout)
            .or_default() += 1;
    }

    /// Counts one restart of `upstream`, which ended for `reason`.
    pub fn upstream_restarted(&self, upstream: &str, reason: &'static str) {
        *self
            .upstream_restarts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((upstream.to_owned(), reason))
            .or_default() += 1;
    }

    /// Counts `n` matches of `kind` a guard found (S4).
    pub fn guard_found(&self, guard: &str, kind: &str, action: &str, n: u64) {
        *self
            .guard_findings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((guard.to_owned(), kind.to_owned(), action.to_owned()))
            .or_default() += n;
    }

    /// Restarts of `upstream` so far, for every reason.
    pub fn restarts_of(&self, upstream: &str) -> u64 {
        let restarts = self
            .upstream_restarts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        restarts
            .iter()
            .filter(|((name, _), _)| name == upstream)
            .map(|(_, n)| n)
            .sum()
    }

    /// Tool calls since start, by (decision, outcome).
    pub fn calls(&self) -> BTreeMap<(String, String), u64> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Counts one finished tool call.
    pub fn observe(&self, decision: &str, outcome: &str, duration_ms: f64) {
        *self
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((decision.to_owned(), outcome.to_owned()))
            .or_default() += 1;
        let secs = duration_ms / 1e3;
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                self.buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((duration_ms * 1e3) as u64, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let calls = rows(&self.calls, |(decision, outcome)| {
            format!("decision=\"{decision}\",outcome=\"{outcome}\"")
        });
        family(
            &mut out,
            "warden_calls_total",
            "counter",
            "Tool calls by the gateway's decision and the call's outcome.",
            calls,
        );
        self.render_durations(&mut out);
        let restarts = rows(&self.upstream_restarts, |(upstream, reason)| {
            format!("upstream=\"{upstream}\",reason=\"{reason}\"")
        });
        family(
            &mut out,
            "warden_upstream_restarts_total",
            "counter",
            "Upstreams started again, by why they ended (stopped, stuck).",
            restarts,
        );
        let findings = rows(&self.guard_findings, |(guard, kind, action)| {
            let (guard, kind) = (escaped(guard), escaped(kind));
            format!("guard=\"{guard}\",kind=\"{kind}\",action=\"{action}\"")
        });
        family(&mut out, "warden_guard_findings_total", "counter", "Matches guards found in tool results, arguments and definitions (at each listing), by guard, kind and action.", findings);
        let shadow = rows(&self.shadow, |would| format!("would=\"{would}\""));
        family(&mut out, "warden_shadow_total", "counter", "Calls shadow rules, quotas, flow rules and guards would have decided otherwise (X6, X9), by what they would have done.", shadow);
        let refused = rows(&self.http_refused, |status| format!("status=\"{status}\""));
        family(
            &mut out,
            "warden_http_refused_total",
            "counter",
            "HTTP requests the front refused, by status.",
            refused,
        );
        let refused = rows(&self.http_connections_refused, |limit| {
            format!("limit=\"{limit}\"")
        });
        family(&mut out, "warden_http_connections_refused_total", "counter", "HTTP connections answered 503 and closed at accept, by the cap they hit (admin.*: the admin listener's).", refused);
        let timed_out = rows(&self.http_connections_timed_out, |timeout| {
            format!("timeout=\"{timeout}\"")
        });
        family(&mut out, "warden_http_connections_timed_out_total", "counter", "HTTP connections closed because a request head came too slowly (head), none came (idle) or a request body came too slowly (body); admin.*: the admin listener's.", timed_out);
        for (name, kind, help, v) in self.scalars() {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        }
        self.config.render(&mut out);
        out
    }

    /// The call duration histogram.
    fn render_durations(&self, out: &mut String) {
        out.push_str(
            "# HELP warden_call_duration_seconds Time from a call's arrival to its answer.\n",
        );
        out.push_str("# TYPE warden_call_duration_seconds histogram\n");
        for (i, le) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "warden_call_duration_seconds_bucket{{le=\"{le}\"}} {}",
                self.buckets[i].load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "warden_call_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "warden_call_duration_seconds_sum {}",
            self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "warden_call_duration_seconds_count {count}");
    }

    /// The unlabelled counters and gauges: name, type, help, value.
    fn scalars(&self) -> [(&'static str, &'static str, &'static str, u64); 10] {
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            ("warden_tool_drift_total", "counter", "Tool definitions that differed from the pins lock, each counted once.", c(&self.tool_drift)),
            ("warden_unknown_keys_total", "counter", "Undeclared argument keys seen in calls.", c(&self.unknown_keys)),
            ("warden_audit_backlog", "gauge", "Audit records waiting to be retried.", c(&self.audit_backlog)),
            ("warden_trace_spans_dropped_total", "counter", "Trace spans dropped: the export queue was full or the collector did not take them.", c(&self.trace_spans_dropped)),
            ("warden_audit_lost_total", "counter", "Audit records the store refused for good (logged whole).", c(&self.audit_lost)),
            ("warden_audit_dropped_total", "counter", "Audit records dropped because the queue to the store was full (durability = \"async\"; logged whole).", c(&self.audit_dropped)),
            ("warden_audit_otlp_dropped_total", "counter", "Audit records not exported over OTLP: the export queue was full or the collector did not take them (the store still holds them).", c(&self.audit_otlp_dropped)),
            ("warden_http_sessions", "gauge", "HTTP sessions open.", c(&self.http_sessions)),
            ("warden_http_connections", "gauge", "HTTP connections open.", c(&self.http_connections)),
            ("warden_admin_connections", "gauge", "Connections open to the admin listener.", c(&self.admin_connections)),
        ]
    }
}

/// A labelled family's rows, read under its lock: the labels rendered, the count.
fn rows<K>(counts: &Mutex<BTreeMap<K, u64>>, labels: impl Fn(&K) -> String) -> Vec<(String, u64)> {
    let counts = counts.lock().unwrap_or_else(|e| e.into_inner());
    counts.iter().map(|(k, n)| (labels(k), *n)).collect()
}

/// One labelled family: its HELP and TYPE lines, then a line per row.
fn family(out: &mut String, name: &str, kind: &str, help: &str, rows: Vec<(String, u64)>) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, n) in rows {
        let _ = writeln!(out, "{name}{{{labels}}} {n}");
    }
}

impl ConfigMetrics {
    fn render(&self, out: &mut String) {
        let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP warden_config_reloads_total Configuration reloads: ok (in force) or invalid (refused; the configuration before stays).\n\
             # TYPE warden_config_reloads_total counter\n\
             warden_config_reloads_total{{result=\"ok\"}} {}\n\
             warden_config_reloads_total{{result=\"invalid\"}} {}",
            c(&self.reloads_ok),
            c(&self.reloads_invalid)
        );
        let _ = writeln!(
            out,
            "# HELP warden_config_last_reload_success_timestamp_seconds When the configuration in force was loaded, at start or by a reload (Unix time).\n\
             # TYPE warden_config_last_reload_success_timestamp_seconds gauge\n\
             warden_config_last_reload_success_timestamp_seconds {}",
            c(&self.loaded_at)
        );
        let hash = self.hash.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let _ = writeln!(
            out,
            "# HELP warden_config_info The configuration in force, by the SHA-256 of its file (first 16 hex digits).\n\
             # TYPE warden_config_info gauge\n\
             warden_config_info{{sha256=\"{hash}\"}} 1"
        );
        let _ = writeln!(
            out,
            "# HELP warden_config_restart_needed 1 when the file last read changes settings that take effect only at a restart.\n\
             # TYPE warden_config_restart_needed gauge\n\
             warden_config_restart_needed {}",
            c(&self.restart_needed)
        );
    }
}

/// A label value as Prometheus reads it.
fn escaped(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_histogram() {
        let m = Metrics::default();
        m.observe("allowed", "ok", 0.7);
        m.observe("allowed", "ok", 30.0);
        m.observe("unknown_tool", "refused", 0.1);
        m.unknown_keys.fetch_add(2, Ordering::Relaxed);
        let text = m.render();
        assert!(
            text.contains("warden_calls_total{decision=\"allowed\",outcome=\"ok\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("warden_calls_total{decision=\"unknown_tool\",outcome=\"refused\"} 1\n")
        );
        assert!(text.contains("warden_call_duration_seconds_bucket{le=\"0.0005\"} 1\n"));
        assert!(text.contains("warden_call_duration_seconds_bucket{le=\"0.001\"} 2\n"));
        assert!(text.contains("warden_call_duration_seconds_bucket{le=\"0.05\"} 3\n"));
        assert!(text.contains("warden_call_duration_seconds_count 3\n"));
        assert!(text.contains("warden_unknown_keys_total 2\n"));
        assert!(text.contains("warden_audit_lost_total 0\n"));
    }

    #[test]
    fn renders_the_http_fronts_connection_counts() {
        let m = Metrics::default();
        m.http_connection_refused("max_connections");
        m.http_connection_refused("max_connections");
        m.http_connection_refused("max_connections_per_client");
        m.http_connection_timed_out("head");
        m.http_connections.store(3, Ordering::Relaxed);
        let text = m.render();
        for line in [
            "warden_http_connections_refused_total{limit=\"max_connections\"} 2\n",
            "warden_http_connections_refused_total{limit=\"max_connections_per_client\"} 1\n",
            "warden_http_connections_timed_out_total{timeout=\"head\"} 1\n",
            "# TYPE warden_http_connections gauge\nwarden_http_connections 3\n",
        ] {
            assert!(text.contains(line), "{line} missing from {text}");
        }
    }
}
