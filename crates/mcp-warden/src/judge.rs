//! One call judged by a configuration's access rules alone, offline: what
//! `replay` (X5) and `policy test` (X7) both ask of a call.

use warden_core::{answer, ArgDecision, CelInput, Effect, Rules};

/// The rules' decision on a call, the rule that took it (`None`: the default),
/// and the text a caller (or, for `ask`, the human) would read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub effect: Effect,
    pub rule: Option<usize>,
    pub message: Option<String>,
}

pub fn judge(rules: &Rules, input: &CelInput<'_>) -> Judged {
    let (effect, by) = rules.effect_by(input.caller, input.tool);
    let hidden = || Some(answer::unknown_tool(input.tool));
    if effect == Effect::Deny {
        return Judged {
            effect,
            rule: by,
            message: hidden(),
        };
    }
    let (effect, rule, message) = match rules.judge_call(input) {
        None => (effect, by, None),
        Some((ArgDecision::Allow, i)) => (Effect::Allow, i, None),
        Some((ArgDecision::Ask(why), i)) => (Effect::Ask, i, why),
        Some((ArgDecision::Refuse(why), i)) => {
            (Effect::Deny, i, Some(answer::argument_refused(&why)))
        }
        Some((ArgDecision::Hide, i)) => (Effect::Deny, i, hidden()),
        Some((ArgDecision::Failed(_), i)) => {
            (Effect::Deny, i, Some(answer::CONDITION_FAILED.to_owned()))
        }
    };
    Judged {
        effect,
        rule,
        message,
    }
}
