//! What the argument stages do for one tool, resolved from three layers of
//! configuration: built-in defaults, an upstream's overrides, a tool's overrides.
//!
//! The gateway's TOML maps onto [`Overrides`] one to one; a library user can build
//! them in code. Resolution happens once per tool when the catalogue is built.

use serde_json::{Map, Value};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// A3: what happens to argument keys a tool did not declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UnknownMode {
    /// Forward the call unchanged; report each (tool, key) pair once per session.
    #[default]
    Warn,
    /// Remove the undeclared keys and run the call without them.
    Strip,
    /// Answer with a tool error naming the keys; the tool is not run.
    Reject,
}

impl UnknownMode {
    pub const NAMES: [&'static str; 3] = ["warn", "strip", "reject"];

    pub fn as_str(self) -> &'static str {
        match self {
            UnknownMode::Warn => "warn",
            UnknownMode::Strip => "strip",
            UnknownMode::Reject => "reject",
        }
    }
}

impl fmt::Display for UnknownMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for UnknownMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "warn" => Ok(UnknownMode::Warn),
            "strip" => Ok(UnknownMode::Strip),
            "reject" => Ok(UnknownMode::Reject),
            other => Err(format!(
                "'{other}' is not an unknown-argument mode; use one of: warn, strip, reject"
            )),
        }
    }
}

/// Everything the argument stages need to know about one tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolPolicy {
    pub unknown: UnknownMode,
    /// A5 on or off.
    pub validate: bool,
    /// R1 on or off.
    pub reasons: bool,
    /// A2: alias → canonical, in table order (the first alias for a key wins).
    pub aliases: Vec<(String, String)>,
    /// A7: arguments fixed by configuration, in the order they are set upstream.
    pub pins: Map<String, Value>,
    /// A6: treat the schema as `additionalProperties: false`.
    pub close_schema: bool,
    /// Every call needs a human's approval (H5), whatever the rules say, and the
    /// question opens with this text (a gateway's pinned tool definitions, P2: the
    /// tool changed since it was reviewed). Not part of the configuration layers.
    pub always_ask: Option<String>,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self {
            unknown: UnknownMode::Warn,
            validate: true,
            reasons: false,
            aliases: Vec::new(),
            pins: Map::new(),
            close_schema: false,
            always_ask: None,
        }
    }
}

/// One layer of configuration; `None` inherits from the layer below.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub unknown: Option<UnknownMode>,
    pub validate: Option<bool>,
    pub reasons: Option<bool>,
    pub aliases: Vec<(String, String)>,
    pub pins: Map<String, Value>,
    pub close_schema: Option<bool>,
}

/// Defaults, then per-upstream, then per-tool overrides (upstream's own tool names).
#[derive(Debug, Clone, Default)]
pub struct LayeredPolicy {
    pub defaults: Overrides,
    pub upstreams: HashMap<String, Overrides>,
    /// Keyed by (upstream name, the upstream's own tool name).
    pub tools: HashMap<(String, String), Overrides>,
}

impl LayeredPolicy {
    /// The policy for one tool: the most specific layer that sets a value wins.
    pub fn resolve(&self, upstream: &str, tool: &str) -> ToolPolicy {
        let mut policy = ToolPolicy::default();
        let layers = [
            Some(&self.defaults),
            self.upstreams.get(upstream),
            self.tools.get(&(upstream.to_owned(), tool.to_owned())),
        ];
        for layer in layers.into_iter().flatten() {
            if let Some(m) = layer.unknown {
                policy.unknown = m;
            }
            if let Some(v) = layer.validate {
                policy.validate = v;
            }
            if let Some(r) = layer.reasons {
                policy.reasons = r;
            }
            if let Some(c) = layer.close_schema {
                policy.close_schema = c;
            }
            policy.aliases.extend(layer.aliases.iter().cloned());
            for (k, v) in &layer.pins {
                policy.pins.insert(k.clone(), v.clone());
            }
        }
        policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn most_specific_layer_wins() {
        let mut p = LayeredPolicy {
            defaults: Overrides {
                unknown: Some(UnknownMode::Warn),
                reasons: Some(true),
                ..Default::default()
            },
            ..Default::default()
        };
        p.upstreams.insert(
            "notes".into(),
            Overrides {
                unknown: Some(UnknownMode::Strip),
                ..Default::default()
            },
        );
        let mut pins = Map::new();
        pins.insert("is_public".into(), json!(false));
        p.tools.insert(
            ("notes".into(), "create_note".into()),
            Overrides {
                unknown: Some(UnknownMode::Reject),
                aliases: vec![("body".into(), "text".into())],
                pins,
                ..Default::default()
            },
        );
        let create = p.resolve("notes", "create_note");
        assert_eq!(create.unknown, UnknownMode::Reject);
        assert!(create.reasons);
        assert_eq!(
            create.aliases,
            vec![("body".to_string(), "text".to_string())]
        );
        assert_eq!(create.pins.get("is_public"), Some(&json!(false)));
        assert_eq!(p.resolve("notes", "list_notes").unknown, UnknownMode::Strip);
        assert_eq!(p.resolve("other", "x").unknown, UnknownMode::Warn);
        assert!(p.resolve("other", "x").validate);
    }

    #[test]
    fn modes_parse() {
        assert_eq!("strip".parse::<UnknownMode>(), Ok(UnknownMode::Strip));
        assert_eq!(
            "block".parse::<UnknownMode>().unwrap_err(),
            "'block' is not an unknown-argument mode; use one of: warn, strip, reject"
        );
    }
}
