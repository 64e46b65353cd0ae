//! `mcp-warden replay`: the recorded calls of the audit trail, judged again by
//! the access rules of another configuration (X5), offline: no upstream is
//! called, no quota, ledger or trail is touched. It prints the calls whose
//! decision changes, with counts per rule, and exits 1 when a call that ran
//! before would now be refused.

use anyhow::anyhow;
use globset::Glob;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;
use warden_core::{CallScope, Caller, CelInput, Effect, Rules};
use warden_gateway::config::Config;
use warden_store::{AuditFilter, AuditRecord};

/// `mcp-warden replay`: which recorded calls to replay, against which file.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub config: crate::ConfigArg,
    /// Only calls since: a duration back from now (7d) or a UTC time.
    #[arg(long)]
    since: Option<String>,
    /// Only calls made by this caller.
    #[arg(long)]
    caller: Option<String>,
    /// Only calls to tools matching this glob (as callers name them).
    #[arg(long)]
    tool: Option<String>,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    json: bool,
}

/// A call's access decision, as the trail recorded it or as the rules take it now.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Allow,
    Ask,
    Refuse,
    /// The recorded arguments were redacted where the rules that apply read them:
    /// the call cannot be judged again (the redacted key).
    Redacted(String),
}

impl Verdict {
    fn word(&self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Refuse => "refuse",
            Verdict::Redacted(_) => "unjudged",
        }
    }
}

/// How the trail's decision reads as an access decision: `None` for records the
/// access rules did not decide (invalid arguments, a failed grant source, drift).
fn before(record: &AuditRecord) -> Option<Verdict> {
    match record.decision.as_str() {
        // The rules let these through; a later guard may have stopped them.
        "allowed" | "replayed" | "answered_by_hook" | "rate_limited" | "flow_denied" => {
            Some(Verdict::Allow)
        }
        "denied" | "unknown_tool" => Some(Verdict::Refuse),
        _ => None,
    }
}

/// The top-level arguments whose recorded value is, or holds, a redaction.
fn redacted(args: &Map<String, Value>) -> Vec<&str> {
    fn holds(v: &Value) -> bool {
        match v {
            Value::String(s) => s == "[redacted]",
            Value::Array(a) => a.iter().any(holds),
            Value::Object(o) => o.values().any(holds),
            _ => false,
        }
    }
    args.iter()
        .filter(|(_, v)| holds(v))
        .map(|(k, _)| k.as_str())
        .collect()
}

/// The decision `rules` take on a recorded call now, and the rule that took it.
fn now(rules: &Rules, caller: &Caller, record: &AuditRecord) -> (Verdict, Option<usize>) {
    let tool = record.tool.as_str();
    let empty = Map::new();
    let args = record.arguments.as_object().unwrap_or(&empty);
    let hidden = redacted(args);
    if rules.effect_by(caller, tool).0 != Effect::Deny {
        if let Some(key) = hidden.iter().find(|k| {
            rules
                .rules
                .iter()
                .any(|r| r.applies(caller, tool) && r.reads_argument(k))
        }) {
            return (Verdict::Redacted((*key).to_owned()), None);
        }
    }
    let scope = CallScope {
        tool_labels: record.labels.clone(),
        session_labels: record.touched.clone(),
        time: warden_store::parse_since(&record.time, std::time::SystemTime::now())
            .map_or(0, |ms| ms / 1000),
        transport: if record.session.starts_with("http") {
            "http"
        } else {
            "stdio"
        }
        .to_owned(),
        ..CallScope::default()
    };
    let input = CelInput {
        caller,
        tool,
        upstream: record.upstream.as_deref().unwrap_or_default(),
        args,
        scope: &scope,
    };
    let judged = crate::judge::judge(rules, &input);
    let verdict = match judged.effect {
        Effect::Allow => Verdict::Allow,
        Effect::Ask => Verdict::Ask,
        Effect::Deny => Verdict::Refuse,
    };
    (verdict, judged.rule)
}

/// One recorded call whose decision changes.
struct Change<'r> {
    record: &'r AuditRecord,
    before: Verdict,
    now: Verdict,
    rule: Option<usize>,
}

fn rule_name(rule: Option<usize>) -> String {
    rule.map_or("default".to_owned(), |i| format!("rule[{i}]"))
}

/// Replays the trail of `config`'s store against `config`'s rules.
pub async fn replay(config: &Config, args: &Args) -> anyhow::Result<ExitCode> {
    let since_ms = args
        .since
        .as_ref()
        .map(|s| warden_store::parse_since(s, std::time::SystemTime::now()))
        .transpose()
        .map_err(|e| anyhow!("--since: {e}"))?;
    let glob = args
        .tool
        .as_ref()
        .map(|g| Glob::new(g).map(|g| g.compile_matcher()))
        .transpose()
        .map_err(|e| anyhow!("--tool: {e}"))?;
    let store = crate::audit::open_trail(config).await?;
    let read = Instant::now();
    let records = store
        .query(AuditFilter {
            caller: args.caller.clone(),
            tool: None,
            outcome: None,
            since_ms,
            limit: 0,
        })
        .await?;
    let rules = config.rules();
    let groups: BTreeMap<&str, &[String]> = config
        .caller
        .iter()
        .map(|c| (c.name.as_str(), c.groups.as_slice()))
        .collect();
    let mut changes = Vec::new();
    let (mut judged, mut unjudged) = (0usize, 0usize);
    for record in &records {
        if glob.as_ref().is_some_and(|g| !g.is_match(&record.tool)) {
            continue;
        }
        let (Some(name), Some(before)) = (&record.caller, before(record)) else {
            continue;
        };
        let caller = Caller {
            name: name.clone(),
            groups: groups.get(name.as_str()).map_or(Vec::new(), |g| g.to_vec()),
        };
        let (now, rule) = now(&rules, &caller, record);
        judged += 1;
        if matches!(now, Verdict::Redacted(_)) {
            unjudged += 1;
        }
        if now != before {
            changes.push(Change {
                record,
                before,
                now,
                rule,
            });
        }
    }
    let took = read.elapsed();
    let newly_refused = changes
        .iter()
        .filter(|c| c.before == Verdict::Allow && c.now == Verdict::Refuse)
        .count();
    if args.json {
        print_json(&changes)?;
    } else {
        print_table(&changes);
    }
    eprintln!(
        "replayed {judged} recorded call(s) in {:.3} s ({:.0} calls/s): {} change(s), {newly_refused} newly refused, {unjudged} not judged (redacted arguments)",
        took.as_secs_f64(),
        judged as f64 / took.as_secs_f64().max(1e-9),
        changes.len()
    );
    Ok(if newly_refused > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print_json(changes: &[Change<'_>]) -> anyhow::Result<()> {
    for c in changes {
        let mut line = json!({
            "time": c.record.time,
            "caller": c.record.caller,
            "tool": c.record.tool,
            "before": c.before.word(),
            "now": c.now.word(),
            "rule": rule_name(c.rule),
        });
        if let Verdict::Redacted(key) = &c.now {
            line["redacted"] = json!(key);
        }
        println!("{}", serde_json::to_string(&line)?);
    }
    Ok(())
}

fn print_table(changes: &[Change<'_>]) {
    println!(
        "{:<24}  {:<16}  {:<28}  {:<8}  {:<8}  RULE",
        "TIME", "CALLER", "TOOL", "BEFORE", "NOW"
    );
    let mut per_rule: BTreeMap<String, usize> = BTreeMap::new();
    for c in changes {
        let rule = match &c.now {
            Verdict::Redacted(key) => format!("(argument '{key}' was redacted)"),
            _ => rule_name(c.rule),
        };
        println!(
            "{:<24}  {:<16}  {:<28}  {:<8}  {:<8}  {rule}",
            c.record.time,
            c.record.caller.as_deref().unwrap_or_default(),
            c.record.tool,
            c.before.word(),
            c.now.word()
        );
        *per_rule.entry(rule).or_default() += 1;
    }
    for (rule, n) in per_rule {
        println!("{rule}: {n} change(s)");
    }
}
