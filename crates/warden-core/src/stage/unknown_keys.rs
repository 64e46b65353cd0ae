//! A3/A4: argument keys the tool never declared.
//!
//! Unknown keys = the call's keys − the tool's canonical parameters − `reason` (R2:
//! always tolerated, whether the reasons stage is on or off). What happens to them
//! depends on the tool's mode:
//! - `warn` forwards the call untouched and reports each (tool, key) pair once per
//!   [`Session`], naming only first-time keys beside the declared ones;
//! - `strip` removes them;
//! - `reject` answers with the keys, a did-you-mean hint each, and the allowed list.
//!
//! A tool without a usable schema, or with `additionalProperties: true`, is not
//! checked. In `warn` mode a tool that declares no properties is not audited either
//! (nothing to compare); `strip` and `reject` treat every key of such a tool as unknown.
//! A tool configured with `close_schema` is closed: `warn` becomes `reject` for it.

use super::reasons::REASON;
use super::{ArgCall, Step};
use crate::answer::Answer;
use crate::answer::{self, UnknownKey};
use crate::catalogue::ArgCheck;
use crate::policy::UnknownMode;
use serde_json::Map;
use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

/// Largest edit distance that still earns a hint (`minFinishTime` → `minTime` is 6).
const MAX_HINT_DISTANCE: usize = 6;

/// One `warn` report: the keys said for the first time on this tool, and what it declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKeyWarning {
    /// The tool as the caller named it.
    pub tool: String,
    pub unknown_keys: Vec<String>,
    /// The tool's declared parameters, in declaration order.
    pub declared_keys: Vec<String>,
}

/// Where `warn` reports go. A sink that fails or panics never changes the call.
pub trait WarnSink: Send + Sync {
    fn warn(&self, warning: &UnknownKeyWarning);
}

impl<F: Fn(&UnknownKeyWarning) + Send + Sync> WarnSink for F {
    fn warn(&self, warning: &UnknownKeyWarning) {
        self(warning)
    }
}

/// The per-session memory of what was already reported. It is never cleared, not
/// even when the catalogue is refreshed: a refresh can only make a key known.
pub struct Session {
    seen: Mutex<HashSet<(String, String)>>,
    sink: Arc<dyn WarnSink>,
}

impl Session {
    pub fn new(sink: Arc<dyn WarnSink>) -> Self {
        Self {
            seen: Mutex::new(HashSet::new()),
            sink,
        }
    }

    /// Claims the pairs not yet reported; returns the keys claimed now, in call order.
    fn claim_first_time(&self, tool: &str, keys: &[String]) -> Vec<String> {
        // A poisoned lock only means another thread panicked mid-insert; the set is still usable.
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        keys.iter()
            .filter(|k| seen.insert((tool.to_owned(), (*k).clone())))
            .cloned()
            .collect()
    }

    /// Hands a warning to the sink, outside any lock, swallowing its panics.
    fn report(&self, warning: &UnknownKeyWarning) {
        let sink = &self.sink;
        let _ = catch_unwind(AssertUnwindSafe(|| sink.warn(warning)));
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

pub fn apply(call: &mut ArgCall<'_>, session: &Session) -> Step {
    let tool = call.tool;
    if tool.check != ArgCheck::Declared {
        return Step::Pass;
    }
    let unknown: Vec<String> = call
        .args
        .keys()
        .filter(|k| k.as_str() != REASON && !tool.declares(k))
        .cloned()
        .collect();
    if unknown.is_empty() {
        return Step::Pass;
    }
    let mode = match tool.policy.unknown {
        UnknownMode::Warn if tool.policy.close_schema => UnknownMode::Reject,
        mode => mode,
    };
    call.report.unknown_mode = Some(mode);
    match mode {
        UnknownMode::Warn => {
            call.report.unknown_keys = unknown;
            if !tool.params.is_empty() {
                let first = session.claim_first_time(&tool.name, &call.report.unknown_keys);
                if !first.is_empty() {
                    session.report(&UnknownKeyWarning {
                        tool: tool.name.clone(),
                        unknown_keys: first,
                        declared_keys: tool.params.clone(),
                    });
                }
            }
            Step::Pass
        }
        UnknownMode::Strip => {
            for k in &unknown {
                call.args.shift_remove(k);
            }
            call.report.unknown_keys = unknown;
            Step::Rewritten
        }
        UnknownMode::Reject => {
            let visible = tool.visible_params();
            let keys: Vec<UnknownKey> = unknown
                .iter()
                .map(|k| UnknownKey {
                    key: k.clone(),
                    hint: hint(k, &visible, call.args).map(str::to_owned),
                })
                .collect();
            call.report.unknown_keys = unknown;
            Step::Answer(Answer::ToolError(answer::unknown_parameters(
                &tool.name, &keys, &visible,
            )))
        }
    }
}

/// The declared parameter closest to `key`, if close enough: Levenshtein distance
/// d ≤ 6 and d ≤ ⌊max(len(key), len(param)) / 2⌋, ties to the first declared.
/// Never a parameter the call already carries.
pub fn hint<'p>(
    key: &str,
    params: &'p [String],
    args: &Map<String, serde_json::Value>,
) -> Option<&'p str> {
    let key_len = key.chars().count();
    let mut best: Option<(usize, &str)> = None;
    for p in params {
        if args.contains_key(p) {
            continue;
        }
        let limit = MAX_HINT_DISTANCE.min(key_len.max(p.chars().count()) / 2);
        // The distance is at least the length difference; skip hopeless pairs cheaply.
        if key_len.abs_diff(p.chars().count()) > limit {
            continue;
        }
        let d = strsim::levenshtein(key, p);
        if d <= limit && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, p));
        }
    }
    best.map(|(_, p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::CallReport;
    use crate::catalogue::Catalogue;
    use crate::policy::ToolPolicy;
    use serde_json::{json, Value};
    use std::sync::atomic::{AtomicUsize, Ordering};

    const AZDO: &str = r#"{"name":"azdo_builds","inputSchema":{"type":"object","properties":{
        "org":{"type":"string"},"project":{"type":"string"},"top":{"type":"integer"},
        "branch":{"type":"string"},"minTime":{"type":"string"},"maxTime":{"type":"string"}}}}"#;

    fn catalogue(decl: &str, policy: ToolPolicy) -> Catalogue {
        let decl: Value = serde_json::from_str(decl).unwrap();
        Catalogue::from_tools(&[decl], &policy).0
    }

    fn mode(m: UnknownMode) -> ToolPolicy {
        ToolPolicy {
            unknown: m,
            ..Default::default()
        }
    }

    fn collecting() -> (Arc<Mutex<Vec<UnknownKeyWarning>>>, Session) {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        let session = Session::new(Arc::new(move |w: &UnknownKeyWarning| {
            sink.lock().unwrap().push(w.clone())
        }));
        (got, session)
    }

    fn run(
        c: &Catalogue,
        tool: &str,
        session: &Session,
        args: Value,
    ) -> (Step, Map<String, Value>, CallReport) {
        let mut args = args.as_object().unwrap().clone();
        let mut report = CallReport::default();
        let step = apply(
            &mut ArgCall {
                tool: c.get(tool).unwrap(),
                args: &mut args,
                report: &mut report,
            },
            session,
        );
        (step, args, report)
    }

    #[test]
    fn reject_one_key_with_hint() {
        let c = catalogue(AZDO, mode(UnknownMode::Reject));
        let (_, s) = collecting();
        let (step, _, report) = run(
            &c,
            "azdo_builds",
            &s,
            json!({"org":"o","minFinishTime":"x"}),
        );
        assert_eq!(
            step,
            Step::Answer(Answer::ToolError(
                "Error: Unknown parameter 'minFinishTime' for tool 'azdo_builds'.\n\
                 Did you mean: minTime?\n\
                 Allowed parameters: org, project, top, branch, minTime, maxTime."
                    .into()
            ))
        );
        assert_eq!(report.unknown_keys, ["minFinishTime"]);
        assert_eq!(report.unknown_mode, Some(UnknownMode::Reject));
    }

    #[test]
    fn reject_several_keys() {
        let c = catalogue(AZDO, mode(UnknownMode::Reject));
        let (_, s) = collecting();
        let (step, _, _) = run(
            &c,
            "azdo_builds",
            &s,
            json!({"minFinishTime":"x","fooBar":1}),
        );
        assert_eq!(
            step,
            Step::Answer(Answer::ToolError(
                "Error: Unknown parameters for tool 'azdo_builds':\n  \
                 'minFinishTime' — did you mean: minTime?\n  \
                 'fooBar'\n\
                 Allowed parameters: org, project, top, branch, minTime, maxTime."
                    .into()
            ))
        );
    }

    #[test]
    fn hint_rules() {
        let params: Vec<String> = ["org", "project", "top", "branch", "minTime", "maxTime"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let none = Map::new();
        assert_eq!(hint("minFinishTime", &params, &none), Some("minTime"));
        assert_eq!(hint("fooBar", &params, &none), None);
        assert_eq!(hint("projct", &params, &none), Some("project"));
        assert_eq!(hint("m_nTime", &params, &none), Some("minTime"));
        assert_eq!(hint("maTime", &params, &none), Some("maxTime"));
        // a tie (2 from minTime and from maxTime) goes to the first declared
        assert_eq!(hint("mTime", &params, &none), Some("minTime"));
        // never a parameter the call already carries
        let mut carried = Map::new();
        carried.insert("minTime".into(), json!("x"));
        assert_eq!(hint("minFinishTime", &params, &carried), None);
        // short names: distance must also be within half the longer length
        assert_eq!(hint("xy", &params, &none), None);
        assert_eq!(hint("tp", &params, &none), Some("top"));
    }

    #[test]
    fn strip_removes_only_unknown_keys_in_order() {
        let c = catalogue(AZDO, mode(UnknownMode::Strip));
        let (got, s) = collecting();
        let (step, args, report) = run(
            &c,
            "azdo_builds",
            &s,
            json!({"top":1,"x":2,"reason":"r","org":"o","y":3}),
        );
        assert_eq!(step, Step::Rewritten);
        assert_eq!(
            serde_json::to_string(&args).unwrap(),
            r#"{"top":1,"reason":"r","org":"o"}"#
        );
        assert_eq!(report.unknown_keys, ["x", "y"]);
        assert!(got.lock().unwrap().is_empty());
    }

    #[test]
    fn warn_passes_untouched_and_reports_each_pair_once() {
        let c = catalogue(AZDO, mode(UnknownMode::Warn));
        let (got, s) = collecting();
        let original = json!({"org":"o","ffset":1,"the rest":"…"});
        let (step, args, report) = run(&c, "azdo_builds", &s, original.clone());
        assert_eq!(step, Step::Pass);
        assert_eq!(Value::Object(args), original);
        assert_eq!(report.unknown_keys, ["ffset", "the rest"]);
        run(&c, "azdo_builds", &s, json!({"ffset":2}));
        run(&c, "azdo_builds", &s, json!({"ffset":2,"new":1}));
        let got = got.lock().unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].unknown_keys, ["ffset", "the rest"]);
        assert_eq!(
            got[0].declared_keys,
            ["org", "project", "top", "branch", "minTime", "maxTime"]
        );
        assert_eq!(got[1].unknown_keys, ["new"]);
    }

    #[test]
    fn seen_set_outlives_a_catalogue_refresh() {
        let (got, s) = collecting();
        let c1 = catalogue(AZDO, mode(UnknownMode::Warn));
        run(&c1, "azdo_builds", &s, json!({"x":1}));
        let c2 = catalogue(AZDO, mode(UnknownMode::Warn));
        run(&c2, "azdo_builds", &s, json!({"x":1}));
        assert_eq!(got.lock().unwrap().len(), 1);
    }

    #[test]
    fn reason_is_always_tolerated() {
        for m in [UnknownMode::Warn, UnknownMode::Strip, UnknownMode::Reject] {
            let c = catalogue(AZDO, mode(m));
            let (got, s) = collecting();
            let (step, args, _) = run(&c, "azdo_builds", &s, json!({"org":"o","reason":"why"}));
            assert_eq!(step, Step::Pass);
            assert!(args.contains_key("reason"));
            assert!(got.lock().unwrap().is_empty());
        }
    }

    #[test]
    fn a_panicking_or_failing_sink_never_changes_the_call() {
        let c = catalogue(AZDO, mode(UnknownMode::Warn));
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let s = Session::new(Arc::new(move |_: &UnknownKeyWarning| {
            counted.fetch_add(1, Ordering::SeqCst);
            panic!("sink is broken");
        }));
        let (step, args, _) = run(&c, "azdo_builds", &s, json!({"x":1}));
        assert_eq!(step, Step::Pass);
        assert_eq!(Value::Object(args), json!({"x":1}));
        // the session still works after the panic
        run(&c, "azdo_builds", &s, json!({"y":1}));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn schema_edge_cases() {
        let (got, s) = collecting();
        let open = catalogue(
            r#"{"name":"open","inputSchema":{"properties":{"a":{}},"additionalProperties":true}}"#,
            mode(UnknownMode::Reject),
        );
        assert_eq!(run(&open, "open", &s, json!({"zz":1})).0, Step::Pass);
        let unusable = catalogue(r#"{"name":"u"}"#, mode(UnknownMode::Reject));
        assert_eq!(run(&unusable, "u", &s, json!({"zz":1})).0, Step::Pass);

        let bare = r#"{"name":"ping","inputSchema":{"type":"object"}}"#;
        let rejecting = catalogue(bare, mode(UnknownMode::Reject));
        assert_eq!(
            run(&rejecting, "ping", &s, json!({"zz":1})).0,
            Step::Answer(Answer::ToolError(
                "Error: Unknown parameter 'zz' for tool 'ping'.\nThis tool takes no parameters."
                    .into()
            ))
        );
        let warning = catalogue(bare, mode(UnknownMode::Warn));
        assert_eq!(run(&warning, "ping", &s, json!({"zz":1})).0, Step::Pass);
        assert!(
            got.lock().unwrap().is_empty(),
            "a tool without properties is not audited in warn mode"
        );
    }

    #[test]
    fn close_schema_turns_warn_into_reject() {
        let policy = ToolPolicy {
            close_schema: true,
            ..Default::default()
        };
        let c = catalogue(AZDO, policy);
        let (_, s) = collecting();
        assert!(matches!(
            run(&c, "azdo_builds", &s, json!({"zz":1})).0,
            Step::Answer(_)
        ));
    }

    #[test]
    fn concurrent_calls_report_each_pair_once() {
        let c = Arc::new(catalogue(AZDO, mode(UnknownMode::Warn)));
        let (got, s) = collecting();
        let s = Arc::new(s);
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (c, s) = (c.clone(), s.clone());
                std::thread::spawn(move || {
                    for i in 0..50 {
                        run(
                            &c,
                            "azdo_builds",
                            &s,
                            json!({"a":1, format!("k{}", i % 5): 1}),
                        );
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let mut keys: Vec<String> = got
            .lock()
            .unwrap()
            .iter()
            .flat_map(|w| w.unknown_keys.clone())
            .collect();
        keys.sort();
        assert_eq!(keys, ["a", "k0", "k1", "k2", "k3", "k4"]);
    }
}
