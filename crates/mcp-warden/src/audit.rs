//! `mcp-warden audit`: list the trail's records, and `audit verify`: check every
//! replica's hash chain in it (T2).

use anyhow::anyhow;
use std::process::ExitCode;
use warden_gateway::config::Config;
use warden_store::{AuditFilter, ChainsReport, Store};

/// What `audit` lists, as the command line gave it.
pub struct Filter {
    pub caller: Option<String>,
    pub tool: Option<String>,
    pub outcome: Option<String>,
    pub since: Option<String>,
    pub limit: usize,
}

/// The configured store, which must exist already: these commands read it.
pub(crate) async fn open_trail(config: &Config) -> anyhow::Result<Store> {
    if config.store.url.is_none() {
        return Err(anyhow!("{}: no [store] url is configured, so there is no audit trail to query; add [store] url = \"sqlite://warden.db\"", config.path.display()));
    }
    if let Some(path) = config.store_path().filter(|p| !p.exists()) {
        return Err(anyhow!(
            "{}: the store {} does not exist yet (it is created when the gateway first runs)",
            config.path.display(),
            path.display()
        ));
    }
    config
        .open_store()
        .await
        .map_err(|e| anyhow!("{}: {e}", config.path.display()))?
        .ok_or_else(|| anyhow!("no store"))
}

/// Prints the records that pass `filter`, oldest first, as a table or JSON lines.
pub async fn list(config: &Config, filter: Filter, json: bool) -> anyhow::Result<ExitCode> {
    let since_ms = filter
        .since
        .map(|s| warden_store::parse_since(&s, std::time::SystemTime::now()))
        .transpose()
        .map_err(|e| anyhow!("--since: {e}"))?;
    let store = open_trail(config).await?;
    let records = store
        .query(AuditFilter {
            caller: filter.caller,
            tool: filter.tool,
            outcome: filter.outcome,
            since_ms,
            limit: filter.limit,
        })
        .await?;
    if json {
        for r in &records {
            println!("{}", serde_json::to_string(r)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<24}  {:<10}  {:<28}  {:<17}  {:<14}  {:>9}",
        "TIME", "CALLER", "TOOL", "DECISION", "OUTCOME", "MS"
    );
    for r in &records {
        // A drift record (P2) says what changed; a replayed call says so.
        let note = match (&r.drift, r.replayed) {
            (Some(d), _) => format!("  ({})", d.summary()),
            (None, true) => "  (replayed)".to_owned(),
            (None, false) => String::new(),
        };
        println!(
            "{:<24}  {:<10}  {:<28}  {:<17}  {:<14}  {:>9.1}{note}",
            r.time,
            r.caller.as_deref().unwrap_or("-"),
            r.tool,
            r.decision,
            r.outcome,
            r.duration_ms,
        );
    }
    println!("({} record(s))", records.len());
    Ok(ExitCode::SUCCESS)
}

/// T2: checks every chain and prints one line per chain, then the verdict; exit
/// 1 when a chain is broken.
pub async fn verify(config: &Config) -> anyhow::Result<ExitCode> {
    let store = open_trail(config).await?;
    let report = store.verify_chains().await?;
    print!("{}", verify_text(&report));
    Ok(if report.intact() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What `audit verify` prints for `report`.
fn verify_text(report: &ChainsReport) -> String {
    let mut out = String::new();
    for v in &report.verdicts {
        out.push_str(&format!("{v}\n"));
    }
    if report.unchained > 0 {
        out.push_str(&format!(
            "{} record(s) written before records were chained: they cannot be verified\n",
            report.unchained
        ));
    }
    let records: u64 = report.verdicts.iter().map(|v| v.records).sum();
    let broken = report
        .verdicts
        .iter()
        .filter(|v| v.broken.is_some())
        .count();
    out.push_str(&match (report.verdicts.len(), broken) {
        (0, _) => "no chained records yet\n".to_owned(),
        (n, 0) => format!("every chain holds: {n} chain(s), {records} record(s)\n"),
        (n, b) => format!("{b} of {n} chain(s) broken: records were edited, deleted or reordered after they were written\n"),
    });
    out
}
