//! Guards over tool definitions at listing (S7): tool poisoning hides
//! instructions for the model in a description or a schema. A guard with
//! `on = ["descriptions"]` scans every field of a listed tool but its name:
//! `redact` changes what the caller is shown, `report` logs and counts. Either
//! way, an injection detector strips invisible characters. The findings go to
//! the log and the metrics, never the matched text.

use crate::config::guards::{GuardAction, Guards};
use crate::logged::logged;
use crate::metrics::Metrics;
use serde_json::Value;
use std::sync::Arc;
use warden_core::{Caller, ToolEntry};

/// One thing a guard found in a tool definition: never the matched text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DescriptionFinding {
    /// The tool, by the name the listing shows (or, hidden, its catalogue name).
    pub tool: String,
    pub guard: String,
    pub kind: String,
    /// Within the definition: `/description`, `/inputSchema/properties/city/description`.
    pub path: String,
    pub count: usize,
    /// The guard's action; with `block` the tool is hidden.
    pub action: &'static str,
}

/// S7 `block`: `listed` without the tools whose definition a blocking guard
/// flags for `caller` (they are absent for it, as hidden tools are, G2), and
/// what those guards found.
pub fn unblocked<'c>(
    guards: &Guards,
    caller: Option<&Caller>,
    listed: Vec<&'c Arc<ToolEntry>>,
) -> (Vec<&'c Arc<ToolEntry>>, Vec<DescriptionFinding>) {
    if guards.list.is_empty() {
        return (listed, Vec::new());
    }
    let mut hidden = Vec::new();
    let kept = listed
        .into_iter()
        .filter(|t| {
            let name = t.name.as_str();
            let Some((g, found)) = guards.blocking(caller, name, &t.published_value()) else {
                return true;
            };
            tracing::debug!(tool = %logged(name), guard = %logged(&g.name), "a guard hides a tool whose definition it flags");
            hidden.extend(found.into_iter().map(|f| DescriptionFinding {
                tool: name.to_owned(),
                guard: g.name.clone(),
                kind: f.kind,
                path: f.path,
                count: f.count,
                action: g.action.as_str(),
            }));
            false
        })
        .collect();
    (kept, hidden)
}

/// Runs the description guards that apply to `caller` over each listed tool;
/// returns what they found.
pub fn govern_listing(
    guards: &Guards,
    caller: Option<&Caller>,
    tools: &mut [Value],
    metrics: &Metrics,
) -> Vec<DescriptionFinding> {
    let mut out = Vec::new();
    if guards.list.is_empty() {
        return out;
    }
    for tool in tools {
        let Some(obj) = tool.as_object_mut() else {
            continue;
        };
        let name = obj
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let Some(applied) = guards.for_descriptions(caller, &name) else {
            continue;
        };
        // Blocking guards hid their tools already (`unblocked`).
        for g in applied.iter().filter(|g| g.action != GuardAction::Block) {
            // The name is how the tool is called: never changed.
            for (key, field) in obj.iter_mut().filter(|(k, _)| *k != "name") {
                let found = match g.action {
                    GuardAction::Redact => g.scanner.redact(field),
                    _ => g.scanner.scan(field),
                };
                for f in found {
                    let path = format!("/{key}{}", f.path);
                    metrics.guard_found(&g.name, &f.kind, g.action.as_str(), f.count as u64);
                    tracing::warn!(tool = %logged(&name), guard = %logged(&g.name), kind = %logged(&f.kind), path = %logged(&path), count = f.count, action = g.action.as_str(), "a guard found something in a tool definition");
                    out.push(DescriptionFinding {
                        tool: name.clone(),
                        guard: g.name.clone(),
                        kind: f.kind,
                        path,
                        count: f.count,
                        action: g.action.as_str(),
                    });
                }
            }
        }
    }
    out
}
