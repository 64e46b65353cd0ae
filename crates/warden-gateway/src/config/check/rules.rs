//! The access rules of `[[rule]]` (G1, G6, X1, X6, H6), built from the file:
//! callers and tools, conditions on arguments, a CEL condition, shadow mode and
//! who answers an `ask`. An error names the rule and the key within it.

use super::super::file::{ConditionConfig, RuleConfig};
use super::{invalid, Invalid};
use warden_core::{ArgPath, CelCondition, Condition, Conditions, Effect, Rule, Rules, Test};

/// The access rules, built; an error names the rule and what is wrong with it.
pub(in crate::config) fn rules(default: Effect, rule: &[RuleConfig]) -> Result<Rules, Invalid> {
    let rules = rule
        .iter()
        .enumerate()
        .map(|(i, r)| self::rule(i, r))
        .collect::<Result<_, _>>()?;
    Ok(Rules { rules, default })
}

/// One `[[rule]]`, built; an error names the rule and what is wrong with it.
pub(super) fn rule(i: usize, r: &RuleConfig) -> Result<Rule, Invalid> {
    let rule =
        Rule::new(&r.callers, &r.tools, r.effect).map_err(|m| invalid(format!("rule[{i}]"), m))?;
    let all = conditions(i, "when", &r.when)?;
    let any = conditions(i, "when_any", &r.when_any)?;
    if r.approver.is_some() && r.effect != Effect::Ask {
        let m = crate::texts::APPROVER_NOT_ASKING.replace("{what}", "rule");
        return Err(invalid(format!("rule[{i}].approver"), m));
    }
    let mut rule = rule.when(Conditions { all, any });
    if r.mode == Some(super::super::file::RuleMode::Shadow) {
        rule = rule.in_shadow();
    }
    match &r.when_cel {
        Some(src) => CelCondition::compile(src)
            .map(|c| rule.when_cel(c))
            .map_err(|m| invalid(format!("rule[{i}].when_cel"), m)),
        None => Ok(rule),
    }
}

/// A rule's conditions on arguments (G6); an error names the rule, the list and the entry.
fn conditions(
    rule: usize,
    list: &str,
    configs: &[ConditionConfig],
) -> Result<Vec<Condition>, Invalid> {
    configs
        .iter()
        .enumerate()
        .map(|(j, c)| condition(c).map_err(|m| invalid(format!("rule[{rule}].{list}[{j}]"), m)))
        .collect()
}

fn condition(c: &ConditionConfig) -> Result<Condition, String> {
    let path = ArgPath::parse(&c.arg)?;
    let mut tests = Vec::new();
    if let Some(v) = &c.equals {
        tests.push(Test::Equals(v.clone()));
    }
    if let Some(vs) = &c.one_of {
        if vs.is_empty() {
            return Err("one_of = [] is met by no value; list at least one".into());
        }
        tests.push(Test::OneOf(vs.clone()));
    }
    if let Some(g) = &c.glob {
        tests.push(Test::glob(g)?);
    }
    if let Some(r) = &c.regex {
        tests.push(Test::regex(r)?);
    }
    if c.min.is_some() || c.max.is_some() {
        if let (Some(a), Some(b)) = (c.min, c.max) {
            if a > b {
                return Err(format!(
                    "min = {a} is above max = {b}: no number is between them"
                ));
            }
        }
        tests.push(Test::Range {
            min: c.min,
            max: c.max,
        });
    }
    if c.min_len.is_some() || c.max_len.is_some() {
        if let (Some(a), Some(b)) = (c.min_len, c.max_len) {
            if a > b {
                return Err(format!(
                    "min_len = {a} is above max_len = {b}: no length is between them"
                ));
            }
        }
        tests.push(Test::Length {
            min: c.min_len,
            max: c.max_len,
        });
    }
    if let Some(p) = c.present {
        tests.push(Test::Present(p));
    }
    let mut tests = tests.into_iter();
    match (tests.next(), tests.next()) {
        (Some(test), None) => Ok(Condition { path, test }),
        (None, _) => Err(format!(
            "the condition on '{}' has no test; add one of: equals, one_of, glob, regex, min/max, min_len/max_len, present",
            c.arg
        )),
        (Some(_), Some(_)) => Err(format!(
            "the condition on '{}' has more than one test; write one condition per test",
            c.arg
        )),
    }
}
