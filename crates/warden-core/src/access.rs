//! Access rules: which caller may see and call which tool (G1-G3, H5 `ask`).
//!
//! An ordered list of rules, first match wins, then a default. A rule selects
//! callers (by name, by `group:NAME`, or `*`) and tools (globs over the names
//! callers see) and has an effect: allow, deny, or ask (allowed once a human
//! approves the call). The rules are a [`Grant`] source, so the one decision
//! serves listing and calling alike; a denied tool is hidden, which the pipeline
//! answers exactly like an absent one.

use crate::answer;
use crate::call::Caller;
use crate::catalogue::{Catalogue, ToolEntry};
use crate::condition::{Condition, Conditions, Evidence, Step};
use crate::stage::grant::{ArgDecision, Grant, GrantDecision};
use globset::{Glob, GlobMatcher};
use serde_json::{Map, Value};
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
    /// Conditions on the call's arguments (G6); empty: the rule decides on names alone.
    pub when: Conditions,
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
            when: Conditions::default(),
        })
    }

    /// The rule, deciding only calls whose arguments meet `when` (G6).
    pub fn when(mut self, when: Conditions) -> Rule {
        self.when = when;
        self
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
    /// The effect for one caller and tool name: the first matching rule's, else the
    /// default. A rule with conditions counts as if they could hold (G6): one that
    /// allows or asks makes the tool visible (`Allow`; the call's arguments decide
    /// the rest), one that denies is passed over, since some call may miss it.
    pub fn effect(&self, caller: &Caller, tool: &str) -> Effect {
        for r in &self.rules {
            if !r.applies(caller, tool) {
                continue;
            }
            if r.when.is_empty() {
                return r.effect;
            }
            if r.effect != Effect::Deny {
                return Effect::Allow;
            }
        }
        self.default
    }

    /// The decision on one call's arguments (G6), or `None` when no rule with
    /// conditions stands before the one that decides (the name decided alone).
    pub fn effect_on_arguments(
        &self,
        caller: &Caller,
        tool: &str,
        args: &Map<String, Value>,
    ) -> Option<ArgDecision> {
        // The first condition an allowing rule missed: what the caller could change.
        let mut missed: Option<Evidence> = None;
        let mut conditional = false;
        let words =
            |ev: &Evidence| answer::argument_constraint(&ev.argument, tool, &ev.must, &caller.name);
        for r in &self.rules {
            if !r.applies(caller, tool) {
                continue;
            }
            if r.when.is_empty() {
                return conditional.then(|| decided(r.effect, missed.as_ref().map(words)));
            }
            conditional = true;
            // An allow needs every element a wildcard reaches to pass; deny and ask
            // are set off by any (the cautious reading both ways).
            let (held, evidence) = r.when.check(args, r.effect == Effect::Allow);
            if held {
                return Some(decided(r.effect, Some(words(&evidence))));
            }
            if r.effect != Effect::Deny && missed.is_none() {
                missed = Some(evidence);
            }
        }
        conditional.then(|| decided(self.default, missed.as_ref().map(words)))
    }

    /// Rules that can never match because an earlier rule takes all their cases:
    /// (index of the shadowed rule, index of the rule shadowing it).
    pub fn shadowed(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (j, later) in self.rules.iter().enumerate() {
            let by = self.rules[..j].iter().position(|earlier| {
                // A rule with conditions lets the calls that miss them through to later rules.
                earlier.when.is_empty()
                    && later.callers.iter().all(|c| earlier.covers_caller(c))
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

impl Rules {
    /// Conditions that can never hold for a tool they name (G6), found when the
    /// catalogue is built: a path the tool's input schema does not have (with the
    /// nearest name it does have), or a test the argument's declared type can never
    /// pass. Tools change, so these are warnings at run time.
    pub fn problems(&self, catalogue: &Catalogue) -> Vec<String> {
        let mut out = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            if r.when.is_empty() {
                continue;
            }
            for tool in catalogue.tools() {
                if !r.tools.iter().any(|g| g.is_match(&tool.name)) {
                    continue;
                }
                for c in r.when.iter() {
                    if let Some(problem) = path_problem(&tool.declaration["inputSchema"], c) {
                        out.push(format!(
                            "rule[{i}]: the condition on '{}' can never hold for tool '{}': {problem}",
                            c.path.text, tool.name
                        ));
                    }
                }
            }
        }
        out
    }
}

/// What is wrong with `c` against a tool's input schema, if anything.
fn path_problem(schema: &Value, c: &Condition) -> Option<String> {
    let mut at = schema;
    let mut walked = String::new();
    for step in &c.path.steps {
        match step {
            Step::Key(k) => {
                let props = at.get("properties").and_then(Value::as_object);
                // Undeclared keys count as a mistake unless the object welcomes more.
                let closed = !matches!(
                    at.get("additionalProperties"),
                    Some(Value::Bool(true) | Value::Object(_))
                );
                match props.and_then(|p| p.get(k)) {
                    Some(next) => at = next,
                    // An open object may carry keys it does not declare: nothing to say.
                    None if !closed || props.is_none() => return None,
                    None => {
                        let names: Vec<&str> =
                            props.map_or(Vec::new(), |p| p.keys().map(String::as_str).collect());
                        let whose = if walked.is_empty() {
                            "the tool has no argument".to_owned()
                        } else {
                            format!("'{walked}' has no key")
                        };
                        return Some(match nearest(k, &names) {
                            Some(n) => format!("{whose} '{k}'; did you mean '{n}'?"),
                            None if names.is_empty() => format!("{whose} '{k}'"),
                            None => format!("{whose} '{k}' (it has: {})", names.join(", ")),
                        });
                    }
                }
                if !walked.is_empty() {
                    walked.push('.');
                }
                walked.push_str(k);
            }
            Step::Index(_) | Step::Each => {
                if let Some(t) = declared_types(at) {
                    if !t.contains(&"array") {
                        return Some(format!(
                            "'{walked}' is declared {}, not an array",
                            t.join(" or ")
                        ));
                    }
                }
                match at.get("items") {
                    Some(items) if items.is_object() => at = items,
                    _ => return None,
                }
                walked.push_str(if *step == Step::Each { "[*]" } else { "[]" });
            }
        }
    }
    let wanted = c.test.types();
    let declared = declared_types(at)?;
    let fits = wanted.is_empty()
        || declared
            .iter()
            .any(|d| wanted.contains(d) || (*d == "integer" && wanted.contains(&"number")));
    (!fits).then(|| {
        format!(
            "it is declared {}, and the test needs {}",
            declared.join(" or "),
            wanted.join(" or ")
        )
    })
}

/// The JSON types a schema declares with `type`, if it does.
fn declared_types(schema: &Value) -> Option<Vec<&str>> {
    match schema.get("type")? {
        Value::String(t) => Some(vec![t.as_str()]),
        Value::Array(ts) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
}

/// The closest name to `key` (A3's measure: Levenshtein within 6 and half the longer name).
fn nearest<'n>(key: &str, names: &[&'n str]) -> Option<&'n str> {
    names
        .iter()
        .map(|n| (strsim::levenshtein(key, n), *n))
        .filter(|(d, n)| *d <= 6 && *d <= key.chars().count().max(n.chars().count()) / 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// A rule's effect on a call its arguments decided, with the words that explain it.
fn decided(effect: Effect, why: Option<String>) -> ArgDecision {
    match (effect, why) {
        (Effect::Allow, _) => ArgDecision::Allow,
        (Effect::Ask, why) => ArgDecision::Ask(why),
        (Effect::Deny, Some(why)) => ArgDecision::Refuse(why),
        // Only denying rules stood before: the name alone hides the tool.
        (Effect::Deny, None) => ArgDecision::Hide,
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

    fn decide_arguments(
        &self,
        caller: &Caller,
        tool: &ToolEntry,
        args: &Map<String, Value>,
    ) -> Option<ArgDecision> {
        self.effect_on_arguments(caller, &tool.name, args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::condition::Test;
    use serde_json::json;

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

    fn cond(path: &str, test: Test) -> Condition {
        Condition {
            path: crate::condition::ArgPath::parse(path).unwrap(),
            test,
        }
    }

    fn at_most(path: &str, n: f64) -> Conditions {
        Conditions {
            all: vec![cond(
                path,
                Test::Range {
                    min: None,
                    max: Some(n),
                },
            )],
            any: vec![],
        }
    }

    fn args(v: serde_json::Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn argument_rules_decide_calls_and_count_as_holding_for_listings() {
        // `allow transfer when amount <= 100` then `deny transfer`: listed; 50 runs; 500 is refused.
        let rules = Rules {
            rules: vec![
                rule(&["alice"], &["bank.transfer"], Effect::Allow).when(at_most("amount", 100.0)),
                rule(&["*"], &["bank.transfer"], Effect::Deny),
            ],
            default: Effect::Allow,
        };
        let alice = caller("alice", &[]);
        assert_eq!(rules.effect(&alice, "bank.transfer"), Effect::Allow);
        assert_eq!(
            rules.effect(&caller("bob", &[]), "bank.transfer"),
            Effect::Deny
        );
        let on = |v| rules.effect_on_arguments(&alice, "bank.transfer", &args(v));
        assert_eq!(on(json!({"amount": 50})), Some(ArgDecision::Allow));
        assert_eq!(
            on(json!({"amount": 500})),
            Some(ArgDecision::Refuse(
                "Argument 'amount' of tool 'bank.transfer' must be at most 100 for caller 'alice'."
                    .into()
            ))
        );
        assert_eq!(
            on(json!({})),
            Some(ArgDecision::Refuse(
                "Argument 'amount' of tool 'bank.transfer' must be at most 100 for caller 'alice'."
                    .into()
            ))
        );
        // A tool no conditional rule names: the name decides alone.
        assert_eq!(
            rules.effect_on_arguments(&alice, "bank.balance", &args(json!({}))),
            None
        );
    }

    #[test]
    fn a_conditional_deny_never_hides_and_names_what_it_met() {
        let drop = Conditions {
            all: vec![cond("query", Test::regex("(?i)\\bdrop\\b").unwrap())],
            any: vec![],
        };
        let rules = Rules {
            rules: vec![rule(&["*"], &["db.query"], Effect::Deny).when(drop)],
            default: Effect::Allow,
        };
        let me = caller("me", &[]);
        assert_eq!(rules.effect(&me, "db.query"), Effect::Allow);
        assert_eq!(
            rules.effect_on_arguments(&me, "db.query", &args(json!({"query": "DROP TABLE x"}))),
            Some(ArgDecision::Refuse(
                "Argument 'query' of tool 'db.query' must not match the pattern '(?i)\\bdrop\\b' for caller 'me'.".into()
            ))
        );
        assert_eq!(
            rules.effect_on_arguments(&me, "db.query", &args(json!({"query": "select 1"}))),
            Some(ArgDecision::Allow)
        );
        // Only conditional denies before a default deny: the name hides the tool.
        let hidden = Rules {
            rules: rules.rules.clone(),
            default: Effect::Deny,
        };
        assert_eq!(hidden.effect(&me, "db.query"), Effect::Deny);
        assert_eq!(
            hidden.effect_on_arguments(&me, "db.query", &args(json!({"query": "x"}))),
            Some(ArgDecision::Hide)
        );
    }

    #[test]
    fn ask_conditions_say_what_they_put_to_the_human() {
        let outside = Conditions {
            all: vec![cond("path", Test::glob("/srv/public/*").unwrap())],
            any: vec![],
        };
        let rules = Rules {
            rules: vec![
                rule(&["*"], &["fs.read"], Effect::Allow).when(outside),
                rule(&["*"], &["fs.read"], Effect::Ask),
            ],
            default: Effect::Deny,
        };
        let me = caller("me", &[]);
        assert_eq!(
            rules.effect_on_arguments(&me, "fs.read", &args(json!({"path": "/etc/passwd"}))),
            Some(ArgDecision::Ask(Some(
                "Argument 'path' of tool 'fs.read' must match '/srv/public/*' for caller 'me'."
                    .into()
            )))
        );
        assert_eq!(
            rules.effect_on_arguments(&me, "fs.read", &args(json!({"path": "/srv/public/a"}))),
            Some(ArgDecision::Allow)
        );
    }

    #[test]
    fn a_conditional_rule_shadows_nothing() {
        let rules = Rules {
            rules: vec![
                rule(&["*"], &["bank.*"], Effect::Allow).when(at_most("amount", 1.0)),
                rule(&["*"], &["bank.transfer"], Effect::Deny),
            ],
            default: Effect::Deny,
        };
        assert!(rules.shadowed().is_empty());
    }

    #[test]
    fn impossible_paths_and_types_are_found_with_a_hint() {
        use crate::policy::ToolPolicy;
        let decl = json!({"name":"transfer","inputSchema":{"type":"object","properties":{
            "amount":{"type":"number"},"memo":{"type":"string"},
            "items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"string"}}}},
            "extra":{"type":"object","additionalProperties":true}}}});
        let (c, _) = Catalogue::from_tools(&[decl], &ToolPolicy::default());
        let rules = Rules {
            rules: vec![rule(&["*"], &["transfer"], Effect::Allow).when(Conditions {
                all: vec![
                    cond("amuont", Test::Present(true)),
                    cond(
                        "memo",
                        Test::Range {
                            min: Some(1.0),
                            max: None,
                        },
                    ),
                    cond("items[*].idd", Test::Present(true)),
                    cond("memo[*]", Test::Present(true)),
                    cond("items[*].id", Test::glob("a*").unwrap()),
                    cond("extra.anything", Test::Present(true)),
                    cond(
                        "amount",
                        Test::Range {
                            min: None,
                            max: Some(5.0),
                        },
                    ),
                    cond("zzzzzzzz", Test::Present(true)),
                ],
                any: vec![],
            })],
            default: Effect::Deny,
        };
        assert_eq!(
            rules.problems(&c),
            [
                "rule[0]: the condition on 'amuont' can never hold for tool 'transfer': the tool has no argument 'amuont'; did you mean 'amount'?",
                "rule[0]: the condition on 'memo' can never hold for tool 'transfer': it is declared string, and the test needs number or integer",
                "rule[0]: the condition on 'items[*].idd' can never hold for tool 'transfer': 'items[*]' has no key 'idd'; did you mean 'id'?",
                "rule[0]: the condition on 'memo[*]' can never hold for tool 'transfer': 'memo' is declared string, not an array",
                "rule[0]: the condition on 'zzzzzzzz' can never hold for tool 'transfer': the tool has no argument 'zzzzzzzz' (it has: amount, memo, items, extra)",
            ]
        );
    }

    mod negation {
        use super::*;
        use proptest::prelude::*;

        /// Argument values a condition may meet: numbers, strings, arrays of either, absent.
        fn value() -> impl Strategy<Value = Option<Value>> {
            let leaf = prop_oneof![
                (-200i64..200).prop_map(|n| json!(n)),
                "[a-c/]{0,6}".prop_map(|s| json!(s)),
                Just(json!(true)),
            ];
            prop_oneof![
                Just(None),
                leaf.clone().prop_map(Some),
                prop::collection::vec(leaf, 0..4).prop_map(|v| Some(Value::Array(v))),
            ]
        }

        fn test() -> impl Strategy<Value = Test> {
            prop_oneof![
                (-200i64..200).prop_map(|n| Test::Equals(json!(n))),
                "[a-c]{0,3}".prop_map(|s| Test::OneOf(vec![json!(s), json!(1)])),
                "[a-c/*]{0,4}".prop_map(|g| Test::glob(&g).unwrap()),
                "[a-c]{0,2}".prop_map(|r| Test::regex(&format!("^{r}")).unwrap()),
                (
                    proptest::option::of(-200i64..200),
                    proptest::option::of(-200i64..200)
                )
                    .prop_map(|(a, b)| Test::Range {
                        min: a.map(|x| x as f64),
                        max: b.map(|x| x as f64)
                    }),
                (proptest::option::of(0u64..5), proptest::option::of(0u64..5))
                    .prop_map(|(min, max)| Test::Length { min, max }),
                any::<bool>().prop_map(Test::Present),
            ]
        }

        proptest! {
            /// `allow T when C` then `deny T`, beside `deny T when C` then `allow T`:
            /// whatever the arguments, at most one of the two lets the call run.
            #[test]
            fn a_rule_and_its_negation_never_both_allow(
                tests in prop::collection::vec(test(), 1..3),
                any_mode in any::<bool>(),
                x in value(),
                y in value(),
                wildcard in any::<bool>(),
            ) {
                let path = if wildcard { "x[*]" } else { "x" };
                let conds: Vec<Condition> = tests.into_iter().enumerate()
                    .map(|(i, t)| cond(if i == 0 { path } else { "y" }, t)).collect();
                let when = if any_mode {
                    Conditions { all: vec![], any: conds }
                } else {
                    Conditions { all: conds, any: vec![] }
                };
                let allow_when = Rules {
                    rules: vec![
                        rule(&["*"], &["t"], Effect::Allow).when(when.clone()),
                        rule(&["*"], &["t"], Effect::Deny),
                    ],
                    default: Effect::Deny,
                };
                let deny_when = Rules {
                    rules: vec![
                        rule(&["*"], &["t"], Effect::Deny).when(when),
                        rule(&["*"], &["t"], Effect::Allow),
                    ],
                    default: Effect::Deny,
                };
                let mut a = Map::new();
                if let Some(x) = x { a.insert("x".into(), x); }
                if let Some(y) = y { a.insert("y".into(), y); }
                let me = caller("me", &[]);
                let allows = |r: &Rules| {
                    r.effect(&me, "t") != Effect::Deny
                        && r.effect_on_arguments(&me, "t", &a) == Some(ArgDecision::Allow)
                };
                prop_assert!(!(allows(&allow_when) && allows(&deny_when)));
            }
        }
    }
}
