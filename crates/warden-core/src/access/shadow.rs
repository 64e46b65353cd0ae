//! Shadow rules (X6): `mode = "shadow"` rules are passed over when a call is
//! decided, and judged once more with them counted as enforced. Where the two
//! decisions differ, the call carries what the shadow rules would have done
//! (`would_deny`, `would_ask`, `would_allow`) and which rule said so, for the
//! audit trail and the metrics.

use super::{Effect, Rules};
use crate::call::Shadowed;
use crate::cel_when::CelInput;
use crate::stage::grant::ArgDecision;

/// `would_deny`, `would_ask` or `would_allow`.
fn word_of(effect: Effect) -> &'static str {
    match effect {
        Effect::Deny => "would_deny",
        Effect::Ask => "would_ask",
        Effect::Allow => "would_allow",
    }
}

impl Rules {
    /// Whether any rule is in shadow mode.
    pub fn has_shadow(&self) -> bool {
        self.rules.iter().any(|r| r.shadow)
    }

    /// The effect a call has all told, its arguments included, and the rule
    /// that decided it, with shadow rules enforced or passed over. A condition
    /// that fails counts as a denial (X3).
    fn overall(&self, input: &CelInput<'_>, shadow: bool) -> (Effect, Option<usize>) {
        let (effect, by) = self.effect_in(input.caller, input.tool, shadow);
        if effect == Effect::Deny {
            return (Effect::Deny, by);
        }
        match self.judge_in(input, shadow) {
            None => (effect, by),
            Some((ArgDecision::Allow, i)) => (Effect::Allow, i),
            Some((ArgDecision::Ask(_), i)) => (Effect::Ask, i),
            Some((ArgDecision::Refuse(_) | ArgDecision::Hide | ArgDecision::Failed(_), i)) => {
                (Effect::Deny, i)
            }
        }
    }

    /// The enforced rule that puts this call to a human (its effect, its
    /// arguments included, is `ask`); `None` when no rule asks (the default
    /// does, or the call is not asked about).
    pub fn asking_rule(&self, input: &CelInput<'_>) -> Option<usize> {
        match self.overall(input, false) {
            (Effect::Ask, rule) => rule,
            _ => None,
        }
    }

    /// What the shadow rules would have made of this call, when it differs
    /// from what the enforced rules make of it; `None` without shadow rules.
    pub fn shadow_verdict(&self, input: &CelInput<'_>) -> Option<Shadowed> {
        if !self.has_shadow() {
            return None;
        }
        let (enforced, _) = self.overall(input, false);
        let (would, rule) = self.overall(input, true);
        (would != enforced).then_some(Shadowed {
            would: word_of(would),
            of: "rule",
            rule,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Rule;
    use crate::call::{CallScope, Caller};
    use crate::cel_when::CelCondition;
    use serde_json::{json, Map, Value};

    fn rule(tools: &str, effect: Effect) -> Rule {
        Rule::new(&["*".into()], &[tools.into()], effect).unwrap()
    }

    fn verdict(rules: &Rules, tool: &str, args: Value) -> Option<Shadowed> {
        let caller = Caller::new("me");
        let args: Map<String, Value> = args.as_object().unwrap().clone();
        let scope = CallScope::default();
        rules.shadow_verdict(&CelInput {
            caller: &caller,
            tool,
            upstream: "",
            args: &args,
            scope: &scope,
        })
    }

    #[test]
    fn a_shadow_rule_is_reported_where_it_would_change_the_call_and_never_enforced() {
        let cel = CelCondition::compile("args.n > 3").unwrap();
        let rules = Rules {
            rules: vec![
                rule("t", Effect::Deny).when_cel(cel).in_shadow(),
                rule("u", Effect::Ask).in_shadow(),
                rule("*", Effect::Allow),
            ],
            default: Effect::Deny,
        };
        let me = Caller::new("me");
        // Enforced: everything is allowed, the shadow rules are passed over.
        assert_eq!(rules.effect(&me, "u"), Effect::Allow);
        assert_eq!(rules.effect_on_arguments(&me, "t", &Map::new()), None);
        let deny = verdict(&rules, "t", json!({"n": 5})).unwrap();
        assert_eq!(deny.to_string(), "would_deny by rule[0]");
        assert_eq!(verdict(&rules, "t", json!({"n": 1})), None);
        assert_eq!(
            verdict(&rules, "u", json!({})).unwrap().to_string(),
            "would_ask by rule[1]"
        );
        assert_eq!(verdict(&rules, "v", json!({})), None);
    }

    #[test]
    fn a_shadow_allow_before_a_deny_would_allow() {
        let rules = Rules {
            rules: vec![rule("t", Effect::Allow).in_shadow()],
            default: Effect::Deny,
        };
        assert_eq!(
            verdict(&rules, "t", json!({})).unwrap().to_string(),
            "would_allow by rule[0]"
        );
        let none = Rules {
            rules: vec![rule("t", Effect::Deny)],
            default: Effect::Allow,
        };
        assert_eq!(verdict(&none, "t", json!({})), None);
    }

    #[test]
    fn the_asking_rule_is_the_enforced_one_that_asks_its_arguments_included() {
        let cel = CelCondition::compile("args.n > 3").unwrap();
        let rules = Rules {
            rules: vec![
                rule("t", Effect::Ask).in_shadow(),
                rule("t", Effect::Ask).when_cel(cel),
                rule("t", Effect::Allow),
                rule("u", Effect::Ask),
            ],
            default: Effect::Ask,
        };
        let caller = Caller::new("me");
        let scope = CallScope::default();
        let asking = |tool: &str, args: Value| {
            rules.asking_rule(&CelInput {
                caller: &caller,
                tool,
                upstream: "",
                args: args.as_object().unwrap(),
                scope: &scope,
            })
        };
        assert_eq!(asking("t", json!({"n": 5})), Some(1));
        assert_eq!(asking("t", json!({"n": 1})), None, "rule[2] allows it");
        assert_eq!(asking("u", json!({})), Some(3));
        assert_eq!(asking("v", json!({})), None, "the default asks, no rule");
    }
}
