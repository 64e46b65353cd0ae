//! `mcp-warden policy test CASES.toml` (X7): cases of caller, tool and
//! arguments, each with the decision and message it expects, judged by a
//! configuration offline through the stages that need no upstream (X11).
//! Failures print what differs.

use anyhow::{anyhow, Context};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::path::Path;
use std::process::ExitCode;
use warden_core::{CallScope, Caller, Effect};
use warden_gateway::config::Config;
use warden_gateway::gateway::{Offline, OfflineCall, Trail};

/// `mcp-warden policy …`.
#[derive(clap::Subcommand)]
pub enum Action {
    /// Run the cases of CASES.toml; print a diff for each that fails; exit 1 if any does.
    Test {
        /// The cases file: [[case]] tables of caller, tool, arguments, expect, message.
        cases: std::path::PathBuf,
        #[command(flatten)]
        config: crate::ConfigArg,
    },
}

/// A cases file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Cases {
    #[serde(default, rename = "case")]
    cases: Vec<Case>,
}

/// One case.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    /// What the case is about (default: `case[<i>]`).
    name: Option<String>,
    caller: String,
    /// The caller's groups (default: those the config's `[[caller]]` gives it).
    groups: Option<Vec<String>>,
    tool: String,
    /// The arguments as the caller sends them (before aliases and pins).
    #[serde(default)]
    arguments: Map<String, Value>,
    /// The flow labels the caller's session touched before the call (F1).
    #[serde(default)]
    trail: Vec<String>,
    /// allow | ask | deny.
    expect: String,
    /// The exact text the caller (for `ask`, the human) reads, if it matters.
    message: Option<String>,
}

fn word(effect: Effect) -> &'static str {
    match effect {
        Effect::Allow => "allow",
        Effect::Ask => "ask",
        Effect::Deny => "deny",
    }
}

/// Runs every case of `path` against `config`; exit 1 if any fails.
pub fn run(config: &Config, path: &Path) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let cases: Cases = toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let called = cases.cases.iter().map(|c| (c.tool.as_str(), None));
    let offline = Offline::new(config, called).map_err(|e| anyhow!(e))?;
    let mut failed = 0;
    for (i, case) in cases.cases.iter().enumerate() {
        let name = case.name.clone().unwrap_or_else(|| format!("case[{i}]"));
        if !["allow", "ask", "deny"].contains(&case.expect.as_str()) {
            return Err(anyhow!(
                "{}: case[{i}].expect: '{}' is not a decision; use one of: allow, ask, deny",
                path.display(),
                case.expect
            ));
        }
        let groups = case.groups.clone().unwrap_or_else(|| {
            config
                .caller
                .iter()
                .find(|c| c.name == case.caller)
                .map_or(Vec::new(), |c| c.groups.clone())
        });
        let caller = Caller {
            name: case.caller.clone(),
            groups,
        };
        let trail: Trail = case.trail.iter().cloned().collect();
        let judged = offline.judge(OfflineCall {
            caller: &caller,
            tool: &case.tool,
            arguments: case.arguments.clone(),
            scope: CallScope::default(),
            trail: &trail,
        });
        let got = word(judged.effect);
        let message_ok = case
            .message
            .as_ref()
            .is_none_or(|m| Some(m) == judged.message.as_ref());
        if got == case.expect && message_ok {
            println!("ok    {name}");
            continue;
        }
        failed += 1;
        println!("FAIL  {name}");
        let shown = |d: &str, m: Option<&String>| match m {
            Some(m) => format!("{d}: {m}"),
            None => d.to_owned(),
        };
        println!(
            "  - expected {}",
            shown(&case.expect, case.message.as_ref())
        );
        println!("  + got      {}", shown(got, judged.message.as_ref()));
    }
    println!("{} case(s), {failed} failed", cases.cases.len());
    Ok(if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
