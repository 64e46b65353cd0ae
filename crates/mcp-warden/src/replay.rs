//! `mcp-warden replay`: the recorded calls of the audit trail, judged again by
//! another configuration (X5) through the stages that need no upstream (X11),
//! offline: no upstream is called, no quota, ledger or trail is touched. It
//! prints the calls whose decision or answer changes, with counts per rule,
//! and exits 1 when a call that ran before would now be refused.

use anyhow::anyhow;
use globset::Glob;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;
use warden_core::{CallScope, Caller, Effect};
use warden_gateway::config::Config;
use warden_gateway::gateway::{Judgement, Offline, OfflineCall, Trail};
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

/// A call's decision, as the trail recorded it or as the configuration takes it now.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Allow,
    Ask,
    /// Refused, with the decision the audit records for it (`denied`,
    /// `unknown_tool`, `invalid_arguments`, `flow_denied`): a call refused
    /// before and now for another cause gets another answer.
    Refuse(String),
    /// The recorded arguments were redacted where the judgement reads them:
    /// the call cannot be judged again (the redacted key).
    Redacted(String),
}

impl Verdict {
    fn word(&self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Refuse(_) => "refuse",
            Verdict::Redacted(_) => "unjudged",
        }
    }
}

/// How the trail's decision reads: `None` for records the judgement does not
/// cover (a failed grant source, drift, a paused call).
fn before(record: &AuditRecord) -> Option<Verdict> {
    match record.decision.as_str() {
        // The stages judged offline let these through; a quota, the ledger
        // or a hook may have ended them after.
        "allowed" | "replayed" | "answered_by_hook" | "rate_limited" => {
            Some(match record.approver {
                Some(_) => Verdict::Ask,
                None => Verdict::Allow,
            })
        }
        d @ ("denied" | "unknown_tool" | "invalid_arguments" | "flow_denied") => {
            Some(Verdict::Refuse(d.to_owned()))
        }
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

/// The trail a recorded call's session had touched before it: the record's
/// `touched`, less the call's own labels where it was let through (F4).
fn trail_before(record: &AuditRecord) -> Trail {
    let ran = record.upstream.is_some() && record.decision != "flow_denied";
    record
        .touched
        .iter()
        .filter(|l| !(ran && record.labels.contains(l)))
        .cloned()
        .collect()
}

/// What NEW makes of a recorded call now, and what decided.
fn now(offline: &Offline, caller: &Caller, record: &AuditRecord) -> (Verdict, Judgement) {
    let tool = record.tool.as_str();
    let mut args = record.arguments.as_object().cloned().unwrap_or_default();
    let hidden: Vec<String> = redacted(&args).into_iter().map(str::to_owned).collect();
    // Records of calls that went upstream hold the arguments as they went.
    if record.upstream.is_some() {
        offline.as_sent(tool, &mut args, record.reason.as_deref());
    }
    let scope = CallScope {
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
    let trail = trail_before(record);
    let judged = offline.judge(OfflineCall {
        caller,
        tool,
        arguments: args,
        scope,
        trail: &trail,
    });
    // A redaction stands where the caller's value stood: where a rule reads
    // that key, or an argument stage refused it, the judgement is not the call's.
    let read = |k: &String| {
        judged.by == "arguments"
            || offline
                .rules()
                .rules
                .iter()
                .any(|r| r.applies(caller, tool) && r.reads_argument(k))
    };
    if judged.by != "tool" {
        if let Some(key) = hidden.iter().find(|k| read(k)) {
            return (Verdict::Redacted(key.clone()), judged);
        }
    }
    let verdict = match judged.effect {
        Effect::Allow => Verdict::Allow,
        Effect::Ask => Verdict::Ask,
        Effect::Deny => Verdict::Refuse(judged.decision.to_owned()),
    };
    (verdict, judged)
}

/// One recorded call whose decision or answer changes.
struct Change<'r> {
    record: &'r AuditRecord,
    before: Verdict,
    now: Verdict,
    judged: Judgement,
}

/// Judges every record the filters keep: (judged, unjudged, whose schema was
/// not judged, the changes).
fn judge_all<'r>(
    config: &Config,
    offline: &Offline,
    records: &'r [AuditRecord],
    glob: Option<&globset::GlobMatcher>,
) -> (usize, usize, usize, Vec<Change<'r>>) {
    let groups: BTreeMap<&str, &[String]> = config
        .caller
        .iter()
        .map(|c| (c.name.as_str(), c.groups.as_slice()))
        .collect();
    let mut changes = Vec::new();
    let (mut judged, mut unjudged, mut skipped) = (0usize, 0usize, 0usize);
    for record in records {
        if glob.is_some_and(|g| !g.is_match(&record.tool)) {
            continue;
        }
        let (Some(name), Some(before)) = (&record.caller, before(record)) else {
            continue;
        };
        let caller = Caller {
            name: name.clone(),
            groups: groups.get(name.as_str()).map_or(Vec::new(), |g| g.to_vec()),
        };
        let (now, judgement) = now(offline, &caller, record);
        judged += 1;
        unjudged += usize::from(matches!(now, Verdict::Redacted(_)));
        skipped += usize::from(judgement.schema_skipped);
        if now != before {
            changes.push(Change {
                record,
                before,
                now,
                judged: judgement,
            });
        }
    }
    (judged, unjudged, skipped, changes)
}

/// Replays the trail of `config`'s store against `config`'s policy.
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
    // Tools of upstreams no pins lock declares are known by the calls that
    // reached them, and by those whose arguments were refused (only a tool
    // the caller may call gets that far, N2).
    let reached = records
        .iter()
        .filter_map(|r| match (&r.upstream, r.decision.as_str()) {
            (Some(up), _) => Some((r.tool.as_str(), Some(up.as_str()))),
            (None, "invalid_arguments") => Some((r.tool.as_str(), None)),
            _ => None,
        });
    let offline = Offline::new(config, reached).map_err(|e| anyhow!(e))?;
    let tally = judge_all(config, &offline, &records, glob.as_ref());
    let (judged, unjudged, skipped, changes) = tally;
    let took = read.elapsed();
    let newly_refused = changes
        .iter()
        .filter(|c| {
            matches!(c.before, Verdict::Allow | Verdict::Ask) && matches!(c.now, Verdict::Refuse(_))
        })
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
    if skipped > 0 {
        eprintln!("{skipped} call(s) to tools no pins lock declares: unknown keys and the schema were not judged");
    }
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
            "rule": c.judged.by,
        });
        if let Verdict::Refuse(was) = &c.before {
            line["was"] = json!(was);
        }
        match &c.now {
            Verdict::Redacted(key) => line["redacted"] = json!(key),
            Verdict::Refuse(would) => line["would"] = json!(would),
            _ => {}
        }
        if let (Some(m), false) = (&c.judged.message, matches!(c.now, Verdict::Redacted(_))) {
            line["answer"] = json!(m);
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
            _ => c.judged.by.clone(),
        };
        // Refused before and now, for another cause: the audit's words tell them apart.
        let (before, now) = match (&c.before, &c.now) {
            (Verdict::Refuse(was), Verdict::Refuse(would)) => (was.as_str(), would.as_str()),
            _ => (c.before.word(), c.now.word()),
        };
        println!(
            "{:<24}  {:<16}  {:<28}  {:<8}  {:<8}  {rule}",
            c.record.time,
            c.record.caller.as_deref().unwrap_or_default(),
            c.record.tool,
            before,
            now
        );
        *per_rule.entry(rule).or_default() += 1;
    }
    for (rule, n) in per_rule {
        println!("{rule}: {n} change(s)");
    }
}
