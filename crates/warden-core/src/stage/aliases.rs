//! A2: aliases rename a key a caller commonly sends (`build_id`) to the canonical
//! parameter (`buildId`) before anything compares keys.
//!
//! Every alias in the table is tried, in table order. An alias is renamed only when
//! the canonical key is absent, and the alias key is removed, so a later strict
//! check never sees it. When two aliases target one absent canonical key, the first
//! in the table wins; the other stays and is judged as an unknown key.

use super::{ArgCall, Step};
use serde_json::Map;

pub fn apply(call: &mut ArgCall<'_>) -> Step {
    let mut step = Step::Pass;
    for (alias, canonical) in &call.tool.policy.aliases {
        if alias == canonical || !call.args.contains_key(alias) || call.args.contains_key(canonical)
        {
            continue;
        }
        rename(call.args, alias, canonical);
        call.report.aliased.push((alias.clone(), canonical.clone()));
        step = Step::Rewritten;
    }
    step
}

/// Renames `from` to `to` in place, keeping the key's position.
fn rename(args: &mut Map<String, serde_json::Value>, from: &str, to: &str) {
    let Some(index) = args.keys().position(|k| k == from) else {
        return;
    };
    if let Some(v) = args.shift_remove(from) {
        args.shift_insert(index, to.to_owned(), v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::CallReport;
    use crate::catalogue::Catalogue;
    use crate::policy::ToolPolicy;
    use serde_json::{json, Value};

    fn run(aliases: &[(&str, &str)], args: Value) -> (Step, String, CallReport) {
        let policy = ToolPolicy {
            aliases: aliases
                .iter()
                .map(|(a, c)| (a.to_string(), c.to_string()))
                .collect(),
            ..Default::default()
        };
        let (c, _) = Catalogue::from_tools(
            &[json!({"name":"t","inputSchema":{"properties":{"buildId":{},"result":{}}}})],
            &policy,
        );
        let mut args = args.as_object().unwrap().clone();
        let mut report = CallReport::default();
        let step = apply(&mut ArgCall {
            tool: c.get("t").unwrap(),
            args: &mut args,
            report: &mut report,
        });
        (step, serde_json::to_string(&args).unwrap(), report)
    }

    #[test]
    fn renames_in_place_and_removes_the_alias() {
        let (step, args, report) = run(
            &[("build_id", "buildId")],
            json!({"a":1,"build_id":7,"z":2}),
        );
        assert_eq!(step, Step::Rewritten);
        assert_eq!(args, r#"{"a":1,"buildId":7,"z":2}"#);
        assert_eq!(
            report.aliased,
            vec![("build_id".to_string(), "buildId".to_string())]
        );
    }

    #[test]
    fn resolves_every_alias_in_one_call() {
        let (_, args, _) = run(
            &[("build_id", "buildId"), ("outcome", "result")],
            json!({"build_id":7,"outcome":"ok"}),
        );
        assert_eq!(args, r#"{"buildId":7,"result":"ok"}"#);
    }

    #[test]
    fn first_alias_wins_and_the_loser_stays() {
        let (_, args, _) = run(
            &[("build_id", "buildId"), ("id", "buildId")],
            json!({"id":1,"build_id":2}),
        );
        assert_eq!(args, r#"{"id":1,"buildId":2}"#);
    }

    #[test]
    fn canonical_present_leaves_the_alias() {
        let (step, args, _) = run(
            &[("build_id", "buildId")],
            json!({"buildId":1,"build_id":2}),
        );
        assert_eq!(step, Step::Pass);
        assert_eq!(args, r#"{"buildId":1,"build_id":2}"#);
    }
}
