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
use warden_core::Caller;

/// S7 `block`: `listed` without the tools whose definition a blocking guard
/// flags for `caller` (they are absent for it, as hidden tools are, G2).
pub fn unblocked<'c>(
    guards: &Guards,
    caller: Option<&Caller>,
    listed: Vec<&'c Value>,
) -> Vec<&'c Value> {
    if guards.list.is_empty() {
        return listed;
    }
    listed
        .into_iter()
        .filter(|t| {
            let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
            let blocked = guards.blocks_definition(caller, name, t);
            if blocked {
                tracing::debug!(tool = %logged(name), "a guard hides a tool whose definition it flags");
            }
            !blocked
        })
        .collect()
}

/// Runs the description guards that apply to `caller` over each listed tool.
pub fn govern_listing(
    guards: &Guards,
    caller: Option<&Caller>,
    tools: &mut [Value],
    metrics: &Metrics,
) {
    if guards.list.is_empty() {
        return;
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
                }
            }
        }
    }
}
