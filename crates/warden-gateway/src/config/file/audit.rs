//! `[audit]`: where audit records go besides the store, what they hide, and
//! whether an answer waits for its record.

use super::*;

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// A JSON-lines file each audit record is also appended to.
    pub jsonl: Option<String>,
    /// Argument keys whose values are replaced by "[redacted]" in audit records.
    #[serde(default)]
    pub redact: Vec<String>,
    /// `sync` (built-in): no answer leaves before its record is committed to
    /// the store. `async`: the answer goes first, the record through a bounded
    /// queue (T1).
    #[serde(default, deserialize_with = "parsed")]
    pub durability: Durability,
    /// How long the store keeps audit records (`90d`); older ones are deleted
    /// in small batches (T3). Kept forever when absent.
    pub retention: Option<String>,
    /// Each record also as a JSON line on stdout, for container log pipelines
    /// (T4). Only with the HTTP front: over stdio, stdout carries MCP.
    #[serde(default)]
    pub stdout: bool,
    /// The OpenTelemetry collector's base URL (`http://127.0.0.1:4318`): each
    /// record also goes there as a log record, to `<otlp>/v1/logs` (T5). Else
    /// `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, when set, is used as it is.
    pub otlp: Option<String>,
}

/// Whether an answer waits for its audit record to be committed (T1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    #[default]
    Sync,
    Async,
}

impl FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sync" => Ok(Durability::Sync),
            "async" => Ok(Durability::Async),
            other => Err(format!(
                "'{other}' is not a durability; use \"sync\" (an answer waits for its record) or \"async\" (it does not)"
            )),
        }
    }
}

impl From<Durability> for warden_store::Durability {
    fn from(d: Durability) -> Self {
        match d {
            Durability::Sync => warden_store::Durability::Sync,
            Durability::Async => warden_store::Durability::Async,
        }
    }
}
