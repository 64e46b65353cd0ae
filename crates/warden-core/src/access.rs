//! Access rules: which caller may see and call which tool (G1-G3, H5 `ask`).
//!
//! An ordered list of rules, first match wins, then a default. A rule selects
//! callers (by name, by `group:NAME`, or `*`) and tools (globs over the names
//! callers see) and has an effect: allow, deny, or ask (allowed once a human
//! approves the call). The rules are a [`Grant`] source, so the one decision
//! serves listing and calling alike; a denied tool is hidden, which the pipeline
//! answers exactly like an absent one.

use crate::call::Caller;
use crate::catalogue::ToolEntry;
use crate::stage::grant::{Grant, GrantDecision};
use globset::{Glob, GlobMatcher};
use std::fmt;
use std::str::FromStr;

/// What a matching rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Allow,
    Deny,
    /// Visible, and callable once a human approves each call.
    Ask,
}

impl FromStr for Effect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(Effect::Allow),
            "deny" => Ok(Effect::Deny),
            "ask" => Ok(Effect::Ask),
            other => Err(format!(
                "'{other}' is not an effect; use one of: allow, deny, ask"
            )),
        }
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Effect::Allow => "allow",
            Effect::Deny => "deny",
            Effect::Ask => "ask",
        })
    }
}

/// Who a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallerSelector {
    Anyone,
    Named(String),
    Group(String),
}

impl CallerSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "" => {
                Err("an empty caller selector matches nobody; use a name, group:NAME or *".into())
            }
            "*" => Ok(CallerSelector::Anyone),
            _ => match s.strip_prefix("group:") {
                Some("") => Err("'group:' needs a group name".into()),
                Some(g) => Ok(CallerSelector::Group(g.to_owned())),
                None => Ok(CallerSelector::Named(s.to_owned())),
            },
        }
    }

    pub fn matches(&self, caller: &Caller) -> bool {
        match self {
            CallerSelector::Anyone => true,
            CallerSelector::Named(n) => *n == caller.name,
            CallerSelector::Group(g) => caller.groups.iter().any(|cg| cg == g),
        }
    }
}

/// One rule, built from configuration.
#[derive(Debug, Clone)]
pub struct Rule {
    pub callers: Vec<CallerSelector>,
    /// The globs as written, for reports.
    pub tool_patterns: Vec<String>,
    tools: Vec<GlobMatcher>,
    pub effect: Effect,
}

impl Rule {
    /// Builds a rule; an invalid selector or glob is an error naming it.
    pub fn new(callers: &[String], tools: &[String], effect: Effect) -> Result<Rule, String> {
        if callers.is_empty() {
            return Err(
                "a rule needs at least one caller selector (a name, group:NAME or *)".into(),
            );
        }
        if tools.is_empty() {
            return Err("a rule needs at least one tool glob (e.g. \"notes.*\")".into());
        }
        let callers = callers
            .iter()
            .map(|c| CallerSelector::parse(c))
            .collect::<Result<Vec<_>, _>>()?;
        let matchers = tools
            .iter()
            .map(|t| {
                Glob::new(t)
                    .map(|g| g.compile_matcher())
                    .map_err(|e| format!("'{t}' is not a valid tool glob: {}", e.kind()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Rule {
            callers,
            tool_patterns: tools.to_vec(),
            tools: matchers,
            effect,
        })
    }

    pub fn applies(&self, caller: &Caller, tool: &str) -> bool {
        self.callers.iter().any(|c| c.matches(caller))
            && self.tools.iter().any(|g| g.is_match(tool))
    }

    /// Whether this rule matches every tool name `pattern` could match (a literal
    /// pattern, or the same glob); used to find shadowed rules.
    fn covers_pattern(&self, pattern: &str) -> bool {
        self.tool_patterns.iter().any(|p| p == "*" || p == pattern)
            || (!pattern.contains(['*', '?', '[', '{'])
                && self.tools.iter().any(|g| g.is_match(pattern)))
    }

    /// Whether this rule applies to every caller `sel` selects.
    fn covers_caller(&self, sel: &CallerSelector) -> bool {
        self.callers
            .iter()
            .any(|c| *c == CallerSelector::Anyone || c == sel)
    }
}

/// The rules, in order, and the effect when none matches.
#[derive(Debug, Clone)]
pub struct Rules {
    pub rules: Vec<Rule>,
    pub default: Effect,
}

impl Default for Rules {
    /// No rules: everyone may see and call everything (the built-in default).
    fn default() -> Self {
        Rules {
            rules: Vec::new(),
            default: Effect::Allow,
        }
    }
}

impl Rules {
    /// The effect for one caller and tool name: the first matching rule's, else the default.
    pub fn effect(&self, caller: &Caller, tool: &str) -> Effect {
        self.rules
            .iter()
            .find(|r| r.applies(caller, tool))
            .map_or(self.default, |r| r.effect)
    }

    /// Rules that can never match because an earlier rule takes all their cases:
    /// (index of the shadowed rule, index of the rule shadowing it).
    pub fn shadowed(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (j, later) in self.rules.iter().enumerate() {
            let by = self.rules[..j].iter().position(|earlier| {
                later.callers.iter().all(|c| earlier.covers_caller(c))
                    && later
                        .tool_patterns
                        .iter()
                        .all(|p| earlier.covers_pattern(p))
            });
            if let Some(i) = by {
                out.push((j, i));
            }
        }
        out
    }

    /// Whether some rule (or the default) lets someone call `tool` (allow or ask).
    pub fn grants_any(&self, tool: &str) -> bool {
        self.rules
            .iter()
            .any(|r| r.effect != Effect::Deny && r.tools.iter().any(|g| g.is_match(tool)))
            || self.default != Effect::Deny
    }
}

impl Grant for Rules {
    fn decide(&self, caller: &Caller, name: &str, _tool: Option<&ToolEntry>) -> GrantDecision {
        match self.effect(caller, name) {
            Effect::Allow => GrantDecision::Allow,
            Effect::Ask => GrantDecision::Ask,
            Effect::Deny => GrantDecision::Hide,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(name: &str, groups: &[&str]) -> Caller {
        Caller {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn rule(callers: &[&str], tools: &[&str], effect: Effect) -> Rule {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        Rule::new(&s(callers), &s(tools), effect).unwrap()
    }

    #[test]
    fn first_match_wins_then_default() {
        let rules = Rules {
            rules: vec![
                rule(&["alice"], &["notes.publish_note"], Effect::Ask),
                rule(&["group:ops", "alice"], &["notes.*"], Effect::Allow),
                rule(&["*"], &["notes.list_notes"], Effect::Allow),
            ],
            default: Effect::Deny,
        };
        let alice = caller("alice", &[]);
        let bob = caller("bob", &["ops"]);
        let eve = caller("eve", &[]);
        assert_eq!(rules.effect(&alice, "notes.publish_note"), Effect::Ask);
        assert_eq!(rules.effect(&alice, "notes.create_note"), Effect::Allow);
        assert_eq!(rules.effect(&bob, "notes.publish_note"), Effect::Allow);
        assert_eq!(rules.effect(&eve, "notes.list_notes"), Effect::Allow);
        assert_eq!(rules.effect(&eve, "notes.create_note"), Effect::Deny);
        assert_eq!(rules.effect(&alice, "fs.read_file"), Effect::Deny);
        assert_eq!(
            rules.decide(&eve, "notes.create_note", None),
            GrantDecision::Hide
        );
        assert_eq!(
            rules.decide(&alice, "notes.publish_note", None),
            GrantDecision::Ask
        );
    }

    #[test]
    fn globs_cross_dots_and_slashes() {
        let r = rule(&["*"], &["fs.*"], Effect::Allow);
        assert!(r.applies(&caller("x", &[]), "fs.read_file"));
        assert!(r.applies(&caller("x", &[]), "fs.dir/sub"));
        assert!(!r.applies(&caller("x", &[]), "notes.fs.x"));
    }

    #[test]
    fn invalid_rules_are_named() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            Rule::new(&s(&["*"]), &s(&["notes.[a"]), Effect::Allow).unwrap_err(),
            "'notes.[a' is not a valid tool glob: unclosed character class; missing ']'"
        );
        assert!(Rule::new(&s(&[]), &s(&["x"]), Effect::Allow)
            .unwrap_err()
            .contains("caller selector"));
        assert!(Rule::new(&s(&["group:"]), &s(&["x"]), Effect::Allow).is_err());
        assert_eq!(
            "maybe".parse::<Effect>().unwrap_err(),
            "'maybe' is not an effect; use one of: allow, deny, ask"
        );
    }

    #[test]
    fn shadowed_rules_are_found() {
        let rules = Rules {
            rules: vec![
                rule(&["*"], &["notes.*"], Effect::Allow),
                rule(&["alice"], &["notes.publish_note"], Effect::Deny),
                rule(&["bob"], &["fs.*"], Effect::Deny),
                rule(&["bob"], &["fs.*"], Effect::Allow),
            ],
            default: Effect::Deny,
        };
        assert_eq!(rules.shadowed(), vec![(1, 0), (3, 2)]);
    }
}
