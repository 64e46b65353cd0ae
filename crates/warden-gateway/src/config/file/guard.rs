//! `[[guard]]`: scanners with actions over what flows through the gateway (S1-S8).

use super::*;

/// One `[[guard]]` as the file writes it; checked in `config::guards`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardConfig {
    /// In audit records, metrics and logs.
    pub name: String,
    /// What it looks at: `results` (tool results, resources read, prompts got),
    /// `arguments` (a call's arguments), `descriptions` (tool definitions at listing).
    pub on: Vec<String>,
    /// Built-in detectors: groups (`secrets`, `pii`, `injection`) or kinds (`pii.card`).
    #[serde(default)]
    pub detect: Vec<String>,
    /// The guard's own named regexes.
    #[serde(default)]
    pub patterns: Vec<PatternConfig>,
    /// Globs over the tool names callers see.
    #[serde(default = "everything")]
    pub tools: Vec<String>,
    /// Caller names, `group:NAME`, or `*`.
    #[serde(default = "everything")]
    pub callers: Vec<String>,
    /// redact | block | label | report | ask.
    pub action: String,
    /// With `action = "label"`: the flow labels a finding adds to the session's trail.
    #[serde(default)]
    pub labels: Vec<String>,
    /// A CEL expression over caller, tool, args, session and request: the guard
    /// applies only to the calls it holds for (X8).
    pub when_cel: Option<String>,
    /// enforce (built-in) | shadow: it looks and is audited, never acting (X9).
    #[serde(default, deserialize_with = "super::parsed_opt")]
    pub mode: Option<super::RuleMode>,
    /// With `action = "ask"` on arguments: who answers the guard's question
    /// (client | console | both), instead of `[access] approver` (H6).
    #[serde(default, deserialize_with = "super::parsed_opt")]
    pub approver: Option<super::Approver>,
}

/// A guard's own pattern: its name is the kind its findings carry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PatternConfig {
    pub name: String,
    pub regex: String,
}

fn everything() -> Vec<String> {
    vec!["*".into()]
}
