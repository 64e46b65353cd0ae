//! The pipeline, assembled in one place (docs/behaviour.md, pipeline order).
//! Read this file to know what happens to a tool call and in which order; each
//! stage lives in [`crate::stage`] with its own tests.

use crate::call::{Answer, CallReport, CallScope, Caller, Forward, Outcome, Refusal, Verdict};
use crate::catalogue::{Catalogue, ToolEntry};
use crate::meta::MetaLimits;
use crate::stage::{
    self, arg_rules::Ruled, grant::Grant, normalise::Arguments, unknown_keys::Session, ArgCall,
    Step,
};
use crate::{answer, stage::grant::AllowAll};
use serde_json::Value;
use std::sync::Arc;

/// The tool-call pipeline: stateless apart from its configuration; per-session
/// state lives in a [`Session`], the tools in a [`Catalogue`].
#[derive(Clone)]
pub struct Pipeline {
    grant: Arc<dyn Grant>,
    base_grant: Arc<dyn Grant>,
    meta_limits: MetaLimits,
}

impl Default for Pipeline {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("meta_limits", &self.meta_limits)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// Every caller sees every tool; default `_meta` limits.
    pub fn new() -> Self {
        Self {
            grant: Arc::new(AllowAll),
            base_grant: Arc::new(AllowAll),
            meta_limits: MetaLimits::default(),
        }
    }

    /// Uses `grant` for decisions and `base` for listings when `grant` cannot decide (G4).
    pub fn with_grant(mut self, grant: Arc<dyn Grant>, base: Arc<dyn Grant>) -> Self {
        self.grant = grant;
        self.base_grant = base;
        self
    }

    pub fn with_meta_limits(mut self, limits: MetaLimits) -> Self {
        self.meta_limits = limits;
        self
    }

    /// `tools/list`: the tools this caller sees, whose declarations as published
    /// ([`ToolEntry::published`]) make the listing (G2: the same decision a call takes).
    pub fn list<'c>(
        &self,
        catalogue: &'c Catalogue,
        caller: Option<&Caller>,
    ) -> Vec<&'c Arc<ToolEntry>> {
        self.list_with(&*self.grant, catalogue, caller)
    }

    /// [`Pipeline::list`] with a grant source decided for this listing (a host that
    /// asked a webhook first); the base grant still covers what it cannot decide.
    pub fn list_with<'c>(
        &self,
        grant: &dyn Grant,
        catalogue: &'c Catalogue,
        caller: Option<&Caller>,
    ) -> Vec<&'c Arc<ToolEntry>> {
        stage::grant::visible(grant, &*self.base_grant, caller, catalogue)
    }

    /// `tools/call`: runs the stages on the request's `params` and says what to do.
    /// Before and after hooks, and the upstream call, run on a [`Outcome::Forward`]
    /// in the host (the gateway), since they may do I/O.
    pub fn check(
        &self,
        catalogue: &Catalogue,
        session: &Session,
        caller: Option<&Caller>,
        params: Value,
    ) -> Verdict {
        self.check_with(&*self.grant, catalogue, session, caller, params)
    }

    /// [`Pipeline::check`] with a grant source decided for this call (a host that
    /// asked a webhook first, or one that knows its grant source is down).
    pub fn check_with(
        &self,
        grant: &dyn Grant,
        catalogue: &Catalogue,
        session: &Session,
        caller: Option<&Caller>,
        params: Value,
    ) -> Verdict {
        self.check_in_scope(
            grant,
            catalogue,
            session,
            (caller, &CallScope::default()),
            params,
        )
    }

    /// [`Pipeline::check_with`] with what the call carries for `when_cel`
    /// conditions besides its caller (X1).
    pub fn check_in_scope(
        &self,
        grant: &dyn Grant,
        catalogue: &Catalogue,
        session: &Session,
        (caller, scope): (Option<&Caller>, &CallScope),
        params: Value,
    ) -> Verdict {
        let mut report = CallReport::default();
        let answered = |answer, refusal, report| Verdict {
            outcome: Outcome::Answer { answer, refusal },
            report,
        };

        // Normalise first: nothing below may read an unchecked name or an unbounded `_meta`.
        let call = match stage::normalise::apply(params, &self.meta_limits) {
            Ok(call) => call,
            Err(answer) => return answered(answer, Refusal::NoToolName, report),
        };
        // Grant before resolving, and for absent names too, so hidden and absent look alike (G2).
        let (tool, needs_approval) = match stage::grant::apply(grant, caller, &call.name, catalogue)
        {
            Ok(granted) => granted,
            Err((answer, refusal)) => return answered(answer, refusal, report),
        };
        // Only now may malformed arguments be told apart: the caller may call this tool (N2).
        let mut args = match call.arguments {
            Arguments::Object(args) => args,
            Arguments::NotObject => {
                let answer = Answer::RpcError {
                    code: answer::INVALID_PARAMS,
                    message: answer::arguments_not_object(&tool.name),
                };
                return answered(answer, Refusal::InvalidArguments, report);
            }
        };

        let mut arg_call = ArgCall {
            tool,
            args: &mut args,
            report: &mut report,
        };
        let rewritten = match argument_stages(&mut arg_call, session) {
            Ok(rewritten) => rewritten,
            Err(answer) => return answered(answer, Refusal::InvalidArguments, report),
        };
        // Rules on arguments last: they judge the values the tool will get (G6).
        let ruled = match caller {
            Some(caller) => stage::arg_rules::apply(grant, caller, tool, &args, scope),
            None => Ruled::Stands,
        };
        let approval = match approval_after_rules(ruled, needs_approval) {
            Ok(approval) => approval,
            Err((answer, refusal, note)) => {
                if let Some(note) = note {
                    report.condition_failed = Some(note);
                }
                return answered(answer, refusal, report);
            }
        };
        // A tool its policy always puts to a human: no rule allows it past that.
        let (needs_approval, approval_because) = always_ask(tool, approval);
        Verdict {
            outcome: Outcome::Forward(Forward {
                tool: tool.clone(),
                arguments: args,
                rewritten,
                meta: call.meta,
                needs_approval,
                approval_because,
            }),
            report,
        }
    }
}

/// The stages on a call's arguments, in the order behaviour.md gives them:
/// whether one rewrote the arguments, or (`Err`) the answer of one that refused
/// them.
fn argument_stages(call: &mut ArgCall<'_>, session: &Session) -> Result<bool, Answer> {
    let mut rewritten = false;
    let steps: [&dyn Fn(&mut ArgCall<'_>) -> Step; 5] = [
        // Reasons first: `reason` is ours, not the tool's; take it out before keys are compared (R1).
        &stage::reasons::apply,
        // Aliases before the key check, so a known alias is never reported as unknown (A2).
        &stage::aliases::apply,
        // Unknown keys on the caller's keys, after aliasing, before validation can trip on them (A3).
        &|c| stage::unknown_keys::apply(c, session),
        // Pins before validation: refuse a caller-set pin, then set the configured values,
        // so validation sees the call exactly as it will go upstream (A7).
        &stage::pin::apply,
        // Schema validation last, before any side effect: nothing after it changes the call (A5).
        &stage::schema::apply,
    ];
    for step in steps {
        match step(call) {
            Step::Pass => {}
            Step::Rewritten => rewritten = true,
            Step::Answer(answer) => return Err(answer),
        }
    }
    Ok(rewritten)
}

/// A call's approval after the rules on its arguments (G6, X1): whether it needs
/// one (`needs_approval`: what the grant said), and the constraint put to the
/// human; or (`Err`) the answer of a rule that refuses it, with the note of a
/// `when_cel` condition that failed.
#[allow(clippy::type_complexity)]
fn approval_after_rules(
    ruled: Ruled,
    needs_approval: bool,
) -> Result<(bool, Option<String>), (Answer, Refusal, Option<String>)> {
    match ruled {
        Ruled::Stands => Ok((needs_approval, None)),
        Ruled::Allow => Ok((false, None)),
        Ruled::Ask(why) => Ok((true, why)),
        Ruled::Answer(answer, refusal) => Err((answer, refusal, None)),
        Ruled::Failed(note) => {
            let answer = Answer::ToolError(answer::CONDITION_FAILED.to_owned());
            Err((answer, Refusal::ConditionFailed, Some(note)))
        }
    }
}

/// A tool its policy always puts to a human (H5, P2): it needs approval, and
/// the policy's reason comes before the rule's.
fn always_ask(
    tool: &ToolEntry,
    (needs_approval, because): (bool, Option<String>),
) -> (bool, Option<String>) {
    let Some(always) = &tool.policy.always_ask else {
        return (needs_approval, because);
    };
    let because = match because {
        Some(rule) => format!("{always}\n{rule}"),
        None => always.clone(),
    };
    (true, Some(because))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{ToolPolicy, UnknownMode};
    use crate::stage::unknown_keys::UnknownKeyWarning;
    use serde_json::{json, Map};

    fn notes(policy: ToolPolicy) -> Catalogue {
        let decl = json!({"name":"create_note","inputSchema":{"type":"object",
            "properties":{"title":{"type":"string"},"text":{"type":"string"},"is_public":{"type":"boolean"}},
            "required":["title","text"]}});
        let mut b = Catalogue::builder(&policy);
        b.add_upstream("notes", true, &[decl]);
        b.build().0
    }

    fn session() -> Session {
        Session::new(Arc::new(|_: &UnknownKeyWarning| {}))
    }

    fn strict() -> ToolPolicy {
        let mut pins = Map::new();
        pins.insert("is_public".into(), json!(false));
        ToolPolicy {
            unknown: UnknownMode::Reject,
            aliases: vec![("body".into(), "text".into())],
            pins,
            reasons: true,
            ..Default::default()
        }
    }

    fn check(c: &Catalogue, params: Value) -> Verdict {
        Pipeline::new().check(c, &session(), Some(&Caller::new("me")), params)
    }

    #[test]
    fn a_tool_its_policy_always_asks_about_needs_approval_with_that_text() {
        let call = json!({"name":"notes.create_note","arguments":{"title":"t","text":"x"}});
        let allowed = check(&notes(ToolPolicy::default()), call.clone());
        let Outcome::Forward(f) = allowed.outcome else {
            panic!("refused")
        };
        assert!(!f.needs_approval);
        assert_eq!(f.approval_because, None);
        let asking = ToolPolicy {
            always_ask: Some("It changed.".into()),
            ..Default::default()
        };
        let Outcome::Forward(f) = check(&notes(asking), call).outcome else {
            panic!("refused")
        };
        assert!(f.needs_approval);
        assert_eq!(f.approval_because.as_deref(), Some("It changed."));
    }

    #[test]
    fn warn_forwards_the_callers_arguments_unchanged() {
        let c = notes(ToolPolicy::default());
        let args: Value =
            serde_json::from_str(r#"{"text":"x","title":"t","extra":1.50,"n":1e400}"#).unwrap();
        let v = check(
            &c,
            json!({"name":"notes.create_note","arguments":args.clone()}),
        );
        let Outcome::Forward(f) = v.outcome else {
            panic!("refused")
        };
        assert!(!f.rewritten);
        assert_eq!(
            serde_json::to_string(&f.arguments).unwrap(),
            serde_json::to_string(&args).unwrap()
        );
        assert_eq!(f.tool.upstream_name, "create_note");
        assert_eq!(v.report.unknown_keys, ["extra", "n"]);
    }

    #[test]
    fn every_stage_in_order() {
        let c = notes(strict());
        let v = check(
            &c,
            json!({"name":"notes.create_note","arguments":{"title":"t","body":"b","reason":"asked to"},"_meta":{"k":1}}),
        );
        let Outcome::Forward(f) = v.outcome else {
            panic!("refused")
        };
        assert!(f.rewritten);
        assert_eq!(
            serde_json::to_string(&f.arguments).unwrap(),
            r#"{"title":"t","text":"b","is_public":false}"#
        );
        assert_eq!(v.report.reason.as_deref(), Some("asked to"));
        assert_eq!(
            v.report.aliased,
            vec![("body".to_string(), "text".to_string())]
        );
        assert_eq!(f.meta.get("k"), Some(&json!(1)));
    }

    #[test]
    fn validation_sees_pinned_values() {
        let decl = json!({"name":"t","inputSchema":{"type":"object",
            "properties":{"title":{"type":"string"},"is_public":{"type":"boolean"}},"required":["title","is_public"]}});
        let mut pins = Map::new();
        pins.insert("is_public".into(), json!(false));
        let (c, _) = Catalogue::from_tools(
            &[decl],
            &ToolPolicy {
                pins,
                ..Default::default()
            },
        );
        let v = check(&c, json!({"name":"t","arguments":{"title":"x"}}));
        let Outcome::Forward(f) = v.outcome else {
            panic!("a pinned required argument counts as sent")
        };
        assert_eq!(f.arguments.get("is_public"), Some(&json!(false)));
        let mut bad = Map::new();
        bad.insert("is_public".into(), json!("no"));
        let (c, _) = Catalogue::from_tools(
            &[
                json!({"name":"t","inputSchema":{"type":"object","properties":{"is_public":{"type":"boolean"}}}}),
            ],
            &ToolPolicy {
                pins: bad,
                ..Default::default()
            },
        );
        let v = check(&c, json!({"name":"t"}));
        let Outcome::Answer { answer, .. } = v.outcome else {
            panic!("a pin that breaks the schema is caught")
        };
        assert_eq!(
            answer.text(),
            "Error: Invalid value for argument 'is_public': expected boolean."
        );
    }

    #[test]
    fn unknown_keys_are_judged_before_the_schema() {
        let c = notes(strict());
        let v = check(
            &c,
            json!({"name":"notes.create_note","arguments":{"titel":"t"}}),
        );
        let Outcome::Answer { answer, refusal } = v.outcome else {
            panic!("forwarded")
        };
        assert_eq!(refusal, Refusal::InvalidArguments);
        assert_eq!(
            answer.text(),
            "Error: Unknown parameter 'titel' for tool 'notes.create_note'.\n\
             Did you mean: title?\n\
             Allowed parameters: title, text."
        );
    }

    #[test]
    fn malformed_arguments_are_told_apart_only_for_a_callable_tool() {
        let c = notes(strict());
        let absent = check(&c, json!({"name":"notes.nope","arguments":[1]}));
        let Outcome::Answer { answer, refusal } = absent.outcome else {
            panic!()
        };
        assert_eq!(refusal, Refusal::UnknownTool);
        assert_eq!(answer.text(), "Unknown tool 'notes.nope'.");
        let present = check(
            &c,
            json!({"name":"notes.create_note","arguments":"title=x"}),
        );
        let Outcome::Answer { answer, refusal } = present.outcome else {
            panic!()
        };
        assert_eq!(refusal, Refusal::InvalidArguments);
        assert_eq!(
            answer,
            Answer::RpcError {
                code: -32602,
                message: "Invalid arguments for tool 'notes.create_note': arguments must be a JSON object.".into()
            }
        );
    }

    #[test]
    fn listing_shows_the_published_declarations() {
        let c = notes(strict());
        let list = Pipeline::new().list(&c, Some(&Caller::new("me")));
        assert_eq!(list.len(), 1);
        let shown = list[0].published_value();
        assert_eq!(shown["name"], "notes.create_note");
        assert!(shown["inputSchema"]["properties"]
            .get("is_public")
            .is_none());
        assert!(Pipeline::new().list(&c, None).is_empty());
    }
}
