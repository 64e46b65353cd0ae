//! `[[guard]]`, checked (S1): detectors exist, patterns compile, globs and
//! caller selectors parse, the action and its labels agree. Scanning happens in
//! `warden_core::scan`, acting on findings in `gateway::call::content`.

use super::file::{GuardConfig, RuleMode};
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use warden_core::scan::{Finding, Scanner};
use warden_core::{Caller, CelCondition, CelInput, Effect, Rule};

/// S8: the reads whose results guards on results look at, by these names in
/// their `tools` globs (`*` matches them too).
pub const READS: [&str; 2] = ["resources/read", "prompts/get"];

/// What a guard does with what it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardAction {
    /// Each match becomes `[redacted:<kind>]`.
    Redact,
    /// The result is replaced by a tool error naming the kinds.
    Block,
    /// The session's flow trail gains the guard's labels.
    Label,
    /// Audited only.
    Report,
    /// A human decides, as for an `ask` rule (H5): whether the call runs (on
    /// arguments) or the result passes (on results).
    Ask,
}

impl GuardAction {
    pub fn as_str(self) -> &'static str {
        match self {
            GuardAction::Redact => "redact",
            GuardAction::Block => "block",
            GuardAction::Label => "label",
            GuardAction::Report => "report",
            GuardAction::Ask => "ask",
        }
    }

    fn parse(s: &str) -> Result<GuardAction, String> {
        match s {
            "redact" => Ok(GuardAction::Redact),
            "block" => Ok(GuardAction::Block),
            "label" => Ok(GuardAction::Label),
            "report" => Ok(GuardAction::Report),
            "ask" => Ok(GuardAction::Ask),
            other => Err(format!(
                "'{other}' is not a guard action; use redact, block, label, report or ask"
            )),
        }
    }
}

/// One `[[guard]]`, ready to run.
pub struct Guard {
    pub name: String,
    pub scanner: Scanner,
    pub action: GuardAction,
    /// With `label`: added to the session's trail on a finding.
    pub labels: Vec<String>,
    selects: Rule,
    /// The tool globs as written (for `check`).
    pub tools: Vec<String>,
    /// Who answers its `ask` on arguments (H6); `None`: `[access] approver`.
    pub approver: Option<super::Approver>,
    /// It looks at tool results (S3), calls' arguments (S6), tool definitions (S7).
    pub results: bool,
    pub arguments: bool,
    pub descriptions: bool,
    /// It applies only to the calls this holds for (X8).
    pub cel: Option<CelCondition>,
    /// It looks and is audited, never acting (X9).
    pub shadow: bool,
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("name", &self.name)
            .field("action", &self.action)
            .finish_non_exhaustive()
    }
}

/// What a guard looks at (`on`): its results, arguments and descriptions.
fn looks_at(g: &GuardConfig) -> Result<(bool, bool, bool), (&'static str, String)> {
    let (mut results, mut arguments, mut descriptions) = (false, false, false);
    for on in &g.on {
        match on.as_str() {
            "results" => results = true,
            "arguments" => arguments = true,
            "descriptions" => descriptions = true,
            other => {
                return Err((
                    "on",
                    format!(
                        "'{other}' is not something a guard looks at; use results, arguments or descriptions"
                    ),
                ))
            }
        }
    }
    if g.on.is_empty() {
        return Err((
            "on",
            "say what the guard looks at: on = [\"results\"], [\"arguments\"], [\"descriptions\"]"
                .into(),
        ));
    }
    Ok((results, arguments, descriptions))
}

/// Whether a guard's action fits its labels, what it looks at and its approver.
fn action_fits(
    g: &GuardConfig,
    action: GuardAction,
    arguments: bool,
    descriptions: bool,
) -> Result<(), (&'static str, String)> {
    match (action, g.labels.is_empty()) {
        (GuardAction::Label, true) => {
            return Err((
                "labels",
                "action = \"label\" needs the labels to add".into(),
            ))
        }
        (a, false) if a != GuardAction::Label => {
            return Err(("labels", "labels apply only with action = \"label\"".into()))
        }
        (GuardAction::Label | GuardAction::Ask, _) if descriptions => {
            return Err(("action", "a guard on descriptions may redact, block or report (a listing has no flow trail to label and no call to ask about)".into()))
        }
        _ => {}
    }
    if g.approver.is_some() && (action != GuardAction::Ask || !arguments) {
        let m = crate::texts::APPROVER_NOT_ASKING.replace("{what}", "guard on arguments");
        return Err(("approver", m));
    }
    Ok(())
}

impl Guard {
    fn build(g: &GuardConfig) -> Result<Guard, (&'static str, String)> {
        if g.name.trim().is_empty() {
            return Err((
                "name",
                "a guard needs a name (it is in audit records and metrics)".into(),
            ));
        }
        let (results, arguments, descriptions) = looks_at(g)?;
        if g.detect.is_empty() && g.patterns.is_empty() {
            return Err((
                "detect",
                "a guard needs detectors (detect) or patterns".into(),
            ));
        }
        let patterns: Vec<_> = g
            .patterns
            .iter()
            .map(|p| (p.name.clone(), p.regex.clone()))
            .collect();
        let scanner = Scanner::new(&g.detect, &patterns).map_err(|m| {
            let key = if m.starts_with("pattern ") {
                "patterns"
            } else {
                "detect"
            };
            (key, m)
        })?;
        let action = GuardAction::parse(&g.action).map_err(|m| ("action", m))?;
        action_fits(g, action, arguments, descriptions)?;
        let selects = Rule::new(&g.callers, &g.tools, Effect::Allow).map_err(|m| ("tools", m))?;
        let cel = super::limits::compile(g.when_cel.as_deref())?;
        let shadow = g.mode == Some(RuleMode::Shadow);
        if descriptions && cel.is_some() {
            return Err((
                "when_cel",
                "a guard on descriptions cannot have when_cel: a listing has no call to read"
                    .into(),
            ));
        }
        if descriptions && shadow {
            return Err(("mode", "a guard on descriptions cannot be in shadow mode: a listing has no audit record to note it in".into()));
        }
        Ok(Guard {
            name: g.name.clone(),
            scanner,
            action,
            labels: g.labels.clone(),
            selects,
            tools: g.tools.clone(),
            approver: g.approver,
            results,
            arguments,
            descriptions,
            cel,
            shadow,
        })
    }

    /// Whether the guard looks at `caller`'s results of `tool` (the name callers see).
    pub fn applies(&self, caller: Option<&Caller>, tool: &str) -> bool {
        match caller {
            Some(c) => self.selects.applies(c, tool),
            None => self.selects.applies(&Caller::new(""), tool),
        }
    }
}

/// What `g` finds in a tool definition, its name aside (paths from the
/// definition's root: `/description`).
fn flags(g: &Guard, definition: &serde_json::Value) -> Vec<Finding> {
    let Some(obj) = definition.as_object() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (key, field) in obj.iter().filter(|(k, _)| *k != "name") {
        // Scanning strips invisible characters: the copy is thrown away.
        for mut f in g.scanner.scan(&mut field.clone()) {
            f.path = format!("/{key}{}", f.path);
            out.push(f);
        }
    }
    out
}

/// Every guard of a configuration, in file order.
#[derive(Debug, Clone, Default)]
pub struct Guards {
    pub list: Vec<Arc<Guard>>,
}

/// The guards that apply to one call (`None`: none, and the call pays nothing).
pub type Applied = Option<Arc<[Arc<Guard>]>>;

/// The guards of one call: those that act, and those in shadow mode (X9) with
/// their place in the file (`guard[<i>]`).
#[derive(Debug, Default)]
pub struct CallGuards {
    pub arguments: Applied,
    pub results: Applied,
    pub shadow_arguments: Vec<(usize, Arc<Guard>)>,
    pub shadow_results: Vec<(usize, Arc<Guard>)>,
}

impl Guards {
    /// Checks every `[[guard]]`; `Err`: the key (`guard[1].detect`) and why.
    pub(super) fn build(guards: &[GuardConfig]) -> Result<Guards, (String, String)> {
        let mut names = HashSet::new();
        let mut list = Vec::new();
        for (i, g) in guards.iter().enumerate() {
            let guard = Guard::build(g).map_err(|(k, m)| (format!("guard[{i}].{k}"), m))?;
            if !names.insert(g.name.clone()) {
                return Err((
                    format!("guard[{i}].name"),
                    format!("'{}' names two guards", g.name),
                ));
            }
            list.push(Arc::new(guard));
        }
        Ok(Guards { list })
    }

    /// The guards over `caller`'s results of `tool` (a read's, S8): enforced
    /// ones; one with `when_cel` applies, there being no call to read (X8).
    pub fn for_results(&self, caller: Option<&Caller>, tool: &str) -> Applied {
        self.select(|g| g.results && !g.shadow && g.applies(caller, tool))
    }

    /// The guards of one call (S2, S6) whose `when_cel` holds (X8), enforced
    /// and in shadow mode (X9). `Err`: an expression failed (X3), and the call
    /// is refused closed.
    pub fn for_call(&self, call: &CelInput<'_>) -> Result<CallGuards, String> {
        let mut out = CallGuards::default();
        if self.list.is_empty() {
            return Ok(out);
        }
        let mut lists: [Vec<(usize, Arc<Guard>)>; 4] = Default::default();
        for (i, g) in self.list.iter().enumerate() {
            if !(g.results || g.arguments) || !g.selects.applies(call.caller, call.tool) {
                continue;
            }
            let held = super::limits::holds(g.cel.as_ref(), call)
                .map_err(|m| format!("guard[{i}].{m}"))?;
            if !held {
                continue;
            }
            let at = usize::from(g.shadow) * 2;
            if g.arguments {
                lists[at].push((i, g.clone()));
            }
            if g.results {
                lists[at + 1].push((i, g.clone()));
            }
        }
        let [arguments, results, shadow_arguments, shadow_results] = lists;
        let applied = |l: Vec<(usize, Arc<Guard>)>| -> Applied {
            (!l.is_empty()).then(|| l.into_iter().map(|(_, g)| g).collect())
        };
        out.arguments = applied(arguments);
        out.results = applied(results);
        out.shadow_arguments = shadow_arguments;
        out.shadow_results = shadow_results;
        Ok(out)
    }

    /// Whether any guard goes over tool definitions (S7).
    pub fn over_descriptions(&self) -> bool {
        self.list.iter().any(|g| g.descriptions)
    }

    /// The guards over the definition of `tool` listed to `caller` (S7).
    pub fn for_descriptions(&self, caller: Option<&Caller>, tool: &str) -> Applied {
        self.select(|g| g.descriptions && g.applies(caller, tool))
    }

    /// S7: the first `block` guard over descriptions that applies to `caller`
    /// and flags the definition of `tool` (the catalogue's name and the
    /// definition callers are shown): such a tool is absent for that caller.
    pub fn blocks_definition(
        &self,
        caller: Option<&Caller>,
        tool: &str,
        definition: &serde_json::Value,
    ) -> bool {
        self.blocking(caller, tool, definition).is_some()
    }

    /// [`Guards::blocks_definition`], with the guard and what it found.
    pub fn blocking(
        &self,
        caller: Option<&Caller>,
        tool: &str,
        definition: &serde_json::Value,
    ) -> Option<(&Guard, Vec<Finding>)> {
        self.list
            .iter()
            .filter(|g| g.descriptions && g.action == GuardAction::Block)
            .filter(|g| g.applies(caller, tool))
            .find_map(|g| {
                let found = flags(g, definition);
                (!found.is_empty()).then_some((&**g, found))
            })
    }

    fn select(&self, wanted: impl Fn(&Guard) -> bool) -> Applied {
        if self.list.is_empty() {
            return None;
        }
        let applied: Vec<_> = self.list.iter().filter(|g| wanted(g)).cloned().collect();
        (!applied.is_empty()).then(|| applied.into())
    }
}
