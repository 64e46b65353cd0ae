//! Access rules: which caller may see and call which tool (G1-G3, H5 `ask`).
//!
//! An ordered list of rules, first match wins, then a default. A rule selects
//! callers (by name, by `group:NAME`, or `*`) and tools (globs over the names
//! callers see) and has an effect: allow, deny, or ask (allowed once a human
//! approves the call). The rules are a [`Grant`] source, so the one decision
//! serves listing and calling alike; a denied tool is hidden, which the pipeline
//! answers exactly like an absent one.

use crate::answer;
use crate::call::{CallScope, Caller};
use crate::catalogue::{Catalogue, ToolEntry};
use crate::cel_when::{CelCondition, CelInput};
use crate::condition::{Condition, Conditions, Evidence, Step};
use crate::hint;
use crate::policy::UnknownMode;
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
    /// A CEL condition over the call (X1), which must hold besides `when`.
    pub cel: Option<CelCondition>,
    /// `mode = "shadow"` (X6): judged and reported, never enforced.
    pub shadow: bool,
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
            cel: None,
            shadow: false,
        })
    }

    /// The rule in shadow mode (X6): judged and reported, never enforced.
    pub fn in_shadow(mut self) -> Rule {
        self.shadow = true;
        self
    }

    /// The rule, deciding only calls `cel` holds for (X1).
    pub fn when_cel(mut self, cel: CelCondition) -> Rule {
        self.cel = Some(cel);
        self
    }

    /// Whether the rule's conditions read the top-level argument `key` (replay
    /// cannot judge a call whose recorded value for it was redacted).
    pub fn reads_argument(&self, key: &str) -> bool {
        self.when.iter().any(|c| c.path.root() == key)
            || self.cel.as_ref().is_some_and(|c| c.reads_argument(key))
    }

    /// Whether something about the call beyond its caller and tool name decides
    /// whether the rule applies (`when`, `when_any`, `when_cel`).
    pub fn is_conditional(&self) -> bool {
        !self.when.is_empty() || self.cel.is_some()
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
        self.effect_by(caller, tool).0
    }

    /// [`Rules::effect`], and the index of the rule that decided it (`None`: the default).
    pub fn effect_by(&self, caller: &Caller, tool: &str) -> (Effect, Option<usize>) {
        self.effect_in(caller, tool, false)
    }

    /// [`Rules::effect_by`], shadow rules (X6) counted as enforced or passed over.
    fn effect_in(&self, caller: &Caller, tool: &str, shadow: bool) -> (Effect, Option<usize>) {
        for (i, r) in self.rules.iter().enumerate() {
            if !r.applies(caller, tool) || (r.shadow && !shadow) {
                continue;
            }
            if !r.is_conditional() {
                return (r.effect, Some(i));
            }
            if r.effect != Effect::Deny {
                return (Effect::Allow, Some(i));
            }
        }
        (self.default, None)
    }

    /// The decision on one call's arguments (G6), or `None` when no rule with
    /// conditions stands before the one that decides (the name decided alone).
    pub fn effect_on_arguments(
        &self,
        caller: &Caller,
        tool: &str,
        args: &Map<String, Value>,
    ) -> Option<ArgDecision> {
        let input = CelInput {
            caller,
            tool,
            upstream: "",
            args,
            scope: &CallScope::default(),
        };
        self.effect_on_call(&input)
    }

    /// [`Rules::effect_on_arguments`] with everything a `when_cel` condition
    /// reads (X1). A CEL condition that fails at run time fails the call closed
    /// (X3), whatever the rule's effect.
    pub fn effect_on_call(&self, input: &CelInput<'_>) -> Option<ArgDecision> {
        self.judge_call(input).map(|(d, _)| d)
    }

    /// [`Rules::effect_on_call`], and the index of the rule that decided
    /// (`None`: the default), for replay.
    pub fn judge_call(&self, input: &CelInput<'_>) -> Option<(ArgDecision, Option<usize>)> {
        self.judge_in(input, false)
    }

    /// [`Rules::judge_call`], shadow rules (X6) counted as enforced or passed over.
    fn judge_in(&self, input: &CelInput<'_>, shadow: bool) -> Option<(ArgDecision, Option<usize>)> {
        let (caller, tool, args) = (input.caller, input.tool, input.args);
        // The words for the first condition an allowing rule missed: what the caller could change.
        let mut missed: Option<String> = None;
        let mut conditional = false;
        let words =
            |ev: &Evidence| answer::argument_constraint(&ev.argument, tool, &ev.must, &caller.name);
        for (i, r) in self.rules.iter().enumerate() {
            if !r.applies(caller, tool) || (r.shadow && !shadow) {
                continue;
            }
            if !r.is_conditional() {
                return conditional.then(|| (decided(r.effect, missed), Some(i)));
            }
            conditional = true;
            // An allow needs every element a wildcard reaches to pass; deny and ask
            // are set off by any (the cautious reading both ways).
            let (mut held, mut why) = (true, None);
            if !r.when.is_empty() {
                let (h, ev) = r.when.check(args, r.effect == Effect::Allow);
                (held, why) = (h, Some(words(&ev)));
            }
            if let (true, Some(cel)) = (held, &r.cel) {
                held = match cel.holds(input) {
                    Ok(h) => h,
                    Err(failure) => {
                        let note = format!("rule[{i}].when_cel: {failure}");
                        return Some((ArgDecision::Failed(note), Some(i)));
                    }
                };
                // The CEL condition decided: it is what the words are about.
                let effect = if held { r.effect } else { Effect::Deny };
                if !held || why.is_none() {
                    why = Some(answer::policy_condition(
                        effect == Effect::Ask,
                        tool,
                        &caller.name,
                    ));
                }
            }
            if held {
                return Some((decided(r.effect, why), Some(i)));
            }
            if r.effect != Effect::Deny && missed.is_none() {
                missed = why;
            }
        }
        conditional.then(|| (decided(self.default, missed), None))
    }

    /// Rules that can never match because an earlier rule takes all their cases:
    /// (index of the shadowed rule, index of the rule shadowing it).
    pub fn shadowed(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (j, later) in self.rules.iter().enumerate() {
            let by = self.rules[..j].iter().position(|earlier| {
                // A rule with conditions lets the calls that miss them through to later rules.
                // A shadow rule takes no case at all (X6).
                !earlier.is_conditional()
                    && !earlier.shadow
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

    /// Whether some rule has a `when_cel` condition, which reads a call's
    /// [`CallScope`] (X1): a host builds the scope only then.
    pub fn reads_scope(&self) -> bool {
        self.rules.iter().any(|r| r.cel.is_some())
    }

    /// Whether some rule (or the default) lets someone call `tool` (allow or ask).
    pub fn grants_any(&self, tool: &str) -> bool {
        self.rules
            .iter()
            .any(|r| r.effect != Effect::Deny && r.tools.iter().any(|g| g.is_match(tool)))
            || self.default != Effect::Deny
    }
}

/// A rule's condition measured against the schema of a tool it names (G6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleProblem {
    /// `rule[i]: the condition on 'p' …`, naming the tool and what is wrong.
    pub text: String,
    /// No call can ever meet the condition: the argument is stripped, refused or
    /// fails validation before rules are judged. When false, only a call sending
    /// what the schema does not declare can meet it (a likely typo, not a proof).
    pub certain: bool,
}

impl fmt::Display for RuleProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Rules {
    /// Conditions measured against the tools they name (G6), found when the
    /// catalogue is built: a path the tool's input schema does not have (with the
    /// nearest name it does have), or a test the argument's declared type can never
    /// pass. Certain ones can never hold: the pipeline strips or refuses the
    /// argument, or validation refuses the call, before rules are judged. Where an
    /// undeclared argument still reaches the rules (the tool's unknown-key mode is
    /// `warn` and its schema does not close the object, or validation is off), the
    /// condition holds only for calls that break the schema: reported when a
    /// declared name is near (a likely typo), not certain. Tools change, so all of
    /// these are warnings at run time.
    pub fn problems(&self, catalogue: &Catalogue) -> Vec<RuleProblem> {
        let mut out = Vec::new();
        for (i, r) in self.rules.iter().enumerate() {
            if r.when.is_empty() {
                continue;
            }
            for tool in catalogue.tools() {
                if !r.tools.iter().any(|g| g.is_match(&tool.name)) {
                    continue;
                }
                let gate = Gate::of(tool);
                let declaration = tool.declaration_value();
                for c in r.when.iter() {
                    let schema = &declaration["inputSchema"];
                    if let Some((problem, certain)) =
                        path_problem(schema, c, gate, &tool.policy.aliases)
                    {
                        let text = if certain {
                            format!(
                                "rule[{i}]: the condition on '{}' can never hold for tool '{}': {problem}",
                                c.path.text, tool.name
                            )
                        } else {
                            format!(
                                "rule[{i}]: the condition on '{}' holds for tool '{}' only on calls that break its schema: {problem}",
                                c.path.text, tool.name
                            )
                        };
                        out.push(RuleProblem { text, certain });
                    }
                }
            }
        }
        out
    }
}

/// What reaches the rules of a tool's arguments, by its policy.
#[derive(Debug, Clone, Copy)]
struct Gate {
    /// An undeclared top-level argument is stripped or refused first (A3, A6).
    top_closed: bool,
    /// Arguments are validated against the schema first (A5).
    validated: bool,
}

impl Gate {
    fn of(tool: &ToolEntry) -> Gate {
        Gate {
            top_closed: tool.policy.close_schema || tool.policy.unknown != UnknownMode::Warn,
            validated: tool.policy.validate,
        }
    }
}

/// What is wrong with `c` against a tool's input schema, if anything, and
/// whether it is certain (see [`Rules::problems`]).
fn path_problem(
    schema: &Value,
    c: &Condition,
    gate: Gate,
    aliases: &[(String, String)],
) -> Option<(String, bool)> {
    let mut at = schema;
    let mut walked = String::new();
    for step in &c.path.steps {
        match step {
            Step::Key(k) => {
                let props = at.get("properties").and_then(Value::as_object);
                let more = at.get("additionalProperties");
                // An object that welcomes more keys may carry ones it does not declare.
                let open = matches!(more, Some(Value::Bool(true) | Value::Object(_)));
                // Aliases are top-level names, renamed before rules read the call (A2).
                let aliases = if walked.is_empty() { aliases } else { &[] };
                let alias_of = aliases.iter().find(|(a, _)| a == k).map(|(_, c)| c);
                match (props.and_then(|p| p.get(k)), alias_of) {
                    (Some(next), _) => at = next,
                    (None, Some(canonical)) => {
                        return Some((
                            format!("'{k}' is an alias, and rules read it as '{canonical}'"),
                            true,
                        ));
                    }
                    (None, None) if open || props.is_none() => return None,
                    (None, None) => return undeclared_key(k, &walked, props, more, gate, aliases),
                }
                if !walked.is_empty() {
                    walked.push('.');
                }
                walked.push_str(k);
            }
            Step::Index(_) | Step::Each => {
                if let Some(t) = declared_types(at) {
                    if !t.contains(&"array") {
                        return Some((
                            format!("'{walked}' is declared {}, not an array", t.join(" or ")),
                            gate.validated,
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
        (
            format!(
                "it is declared {}, and the test needs {}",
                declared.join(" or "),
                wanted.join(" or ")
            ),
            gate.validated,
        )
    })
}

/// A key on `c`'s path that the schema at `walked` does not declare (in an
/// object closed to more keys): a problem when a declared name is near it, or
/// when the key is refused before the rules read it; certain when refused.
fn undeclared_key(
    k: &str,
    walked: &str,
    props: Option<&serde_json::Map<String, Value>>,
    more: Option<&Value>,
    gate: Gate,
    aliases: &[(String, String)],
) -> Option<(String, bool)> {
    let names: Vec<&str> = props.map_or(Vec::new(), |p| p.keys().map(String::as_str).collect());
    // Does an undeclared key get as far as the rules?
    let refused = (gate.validated && more == Some(&Value::Bool(false)))
        || (walked.is_empty() && gate.top_closed);
    let whose = if walked.is_empty() {
        "the tool has no argument".to_owned()
    } else {
        format!("'{walked}' has no key")
    };
    match (hint::near(k, &names, aliases), refused) {
        (Some(n), _) => Some((format!("{whose} '{k}'; {}", n.did_you_mean()), refused)),
        // A name near none: a key the caller may add on purpose.
        (None, false) => None,
        (None, true) if names.is_empty() => Some((format!("{whose} '{k}'"), true)),
        (None, true) => Some((
            format!("{whose} '{k}' (it has: {})", names.join(", ")),
            true,
        )),
    }
}

/// The JSON types a schema declares with `type`, if it does.
fn declared_types(schema: &Value) -> Option<Vec<&str>> {
    match schema.get("type")? {
        Value::String(t) => Some(vec![t.as_str()]),
        Value::Array(ts) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
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
        self.decide_in_scope(caller, tool, args, &CallScope::default())
    }

    fn decide_in_scope(
        &self,
        caller: &Caller,
        tool: &ToolEntry,
        args: &Map<String, Value>,
        scope: &CallScope,
    ) -> Option<ArgDecision> {
        self.effect_on_call(&CelInput {
            caller,
            tool: &tool.name,
            upstream: &tool.upstream,
            args,
            scope,
        })
    }
}

mod shadow;

#[cfg(test)]
mod tests;
