//! `mcp-warden tools`: what a caller would see listed, as a table or JSON,
//! with the guards' findings in tool descriptions.

use crate::{load_to_serve, start, Audit, ConfigArg};
use anyhow::anyhow;
use serde_json::Value;
use std::process::ExitCode;
use warden_gateway::gateway::DescriptionFinding;

/// `tools`: what a caller would see listed, with description findings.
pub async fn tools(
    config: &ConfigArg,
    caller: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let config = load_to_serve(config)?;
    let (gateway, session) = start(config, caller, Audit::CallsOnly).await?;
    let listed = gateway.list_tools_found(session.caller().as_deref()).await;
    gateway.shutdown().await;
    let (result, found) = listed.map_err(|e| anyhow!(e))?;
    let tools = result["tools"].as_array().cloned().unwrap_or_default();
    if json {
        let tools = with_findings(tools, &found);
        println!("{}", serde_json::to_string_pretty(&tools)?);
    } else {
        print_table(&tools);
        print_findings(&found);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(tools: &[Value]) {
    let rows: Vec<(String, String, String)> = tools
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap_or_default().to_owned();
            let required: Vec<&str> = t
                .pointer("/inputSchema/required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let params = t
                .pointer("/inputSchema/properties")
                .and_then(Value::as_object)
                .map(|p| {
                    p.keys()
                        .map(|k| {
                            if required.contains(&k.as_str()) {
                                format!("{k}*")
                            } else {
                                k.clone()
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            let desc = t["description"]
                .as_str()
                .unwrap_or_default()
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned();
            (name, params, desc)
        })
        .collect();
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(4);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(10);
    println!("{:w0$}  {:w1$}  DESCRIPTION", "TOOL", "PARAMETERS");
    for (n, p, d) in rows {
        println!("{n:w0$}  {p:w1$}  {d}");
    }
    println!("({} tool(s); * = required)", tools.len());
}

/// S7, `tools --json`: each listed tool a description guard found something
/// in carries `warden/findings`; a tool a `block` guard hides follows the
/// listing as `{"name", "warden/hidden": true, "warden/findings"}`.
fn with_findings(mut tools: Vec<Value>, found: &[DescriptionFinding]) -> Vec<Value> {
    let of = |name: &str| -> Vec<Value> {
        let mine = found.iter().filter(|f| f.tool == name);
        mine.map(|f| serde_json::to_value(f).unwrap_or_default())
            .collect()
    };
    for t in &mut tools {
        let name = t["name"].as_str().unwrap_or_default().to_owned();
        let mine = of(&name);
        if let (false, Some(obj)) = (mine.is_empty(), t.as_object_mut()) {
            obj.insert("warden/findings".into(), Value::Array(mine));
        }
    }
    let mut hidden: Vec<&str> = found
        .iter()
        .filter(|f| f.action == "block")
        .map(|f| f.tool.as_str())
        .collect();
    hidden.dedup();
    for name in hidden {
        tools.push(
            serde_json::json!({"name": name, "warden/hidden": true, "warden/findings": of(name)}),
        );
    }
    tools
}

/// S7, `tools`: what description guards found, one line each, never the text.
fn print_findings(found: &[DescriptionFinding]) {
    if found.is_empty() {
        return;
    }
    println!("\nGuards found in tool definitions:");
    for f in found {
        let hidden = if f.action == "block" {
            ", tool hidden"
        } else {
            ""
        };
        println!(
            "  {}: guard '{}' found {} at {} ({}x, {}{hidden})",
            f.tool, f.guard, f.kind, f.path, f.count, f.action
        );
    }
}
