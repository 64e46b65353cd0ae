//! Bytes → `tools/call` params → the warden-core pipeline, against the catalogue of
//! tests/fuzz.rs (a closed 20-property schema with an alias and a pin, a nested
//! one, a parameterless tool; reject mode). Oracles: never a panic, the same call
//! decided the same way twice, a refusal a model can read, and nothing undeclared
//! or unpinned ever forwarded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};
use std::sync::{Arc, OnceLock};
use warden_core::{Caller, Catalogue, Outcome, Pipeline, Session};

/// A copy of `fuzz_catalogue` in crates/mcp-warden/tests/fuzz.rs; keep them alike.
fn catalogue() -> Catalogue {
    use warden_core::{LayeredPolicy, Overrides, UnknownMode};
    let mut props = Map::new();
    for i in 0..20 {
        let p = match i % 4 {
            0 => json!({"type": "string", "maxLength": 50}),
            1 => json!({"type": "integer", "minimum": 0}),
            2 => json!({"type": "boolean"}),
            _ => json!({"enum": ["a", "b"]}),
        };
        props.insert(format!("p{i}"), p);
    }
    let tools = [
        json!({"name": "wide", "inputSchema": {"type": "object", "properties": props, "required": ["p0"]}}),
        json!({"name": "nested", "inputSchema": {"type": "object", "properties": {
            "filter": {"type": "object", "properties": {"owner": {"type": "string"}, "ids": {"type": "array", "items": {"type": "integer"}}}},
            "text": {"type": "string"}}}}),
        json!({"name": "bare", "inputSchema": {"type": "object"}}),
    ];
    let mut pins = Map::new();
    pins.insert("p19".into(), json!("a"));
    let wide = Overrides {
        aliases: vec![("alias1".into(), "p1".into())],
        pins,
        ..Default::default()
    };
    let mut policy = LayeredPolicy {
        defaults: Overrides {
            unknown: Some(UnknownMode::Reject),
            reasons: Some(true),
            validate: Some(true),
            ..Default::default()
        },
        ..Default::default()
    };
    policy.tools.insert((String::new(), "wide".into()), wide);
    let (catalogue, problems) = Catalogue::from_tools(&tools, &policy);
    assert!(problems.is_empty(), "{problems:?}");
    catalogue
}

static CATALOGUE: OnceLock<Catalogue> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let Ok(call) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let catalogue = CATALOGUE.get_or_init(catalogue);
    let pipeline = Pipeline::new();
    // A fresh session per input, so that a crash replays from its input alone.
    let session = Session::new(Arc::new(|_: &warden_core::UnknownKeyWarning| {}));
    let me = Caller::new("fuzz");
    let verdict = pipeline.check(catalogue, &session, Some(&me), call.clone());
    let again = pipeline.check(catalogue, &session, Some(&me), call.clone());
    match (&verdict.outcome, &again.outcome) {
        (Outcome::Forward(f), Outcome::Forward(g)) => {
            assert_eq!(f.arguments, g.arguments, "not deterministic");
            let declared = catalogue
                .tools()
                .iter()
                .find(|t| t.name == f.tool.name)
                .map(|t| t.params.clone())
                .unwrap_or_default();
            for key in f.arguments.keys() {
                assert!(
                    declared.contains(key),
                    "'{key}' was forwarded to {} though undeclared: {call}",
                    f.tool.name
                );
            }
            if f.tool.name == "wide" {
                assert_eq!(f.arguments.get("p19"), Some(&json!("a")), "pin lost");
            }
        }
        (Outcome::Answer { answer: a, .. }, Outcome::Answer { answer: b, .. }) => {
            assert_eq!(a, b, "not deterministic");
            let text = a.text();
            assert!(!text.is_empty(), "an empty answer");
            assert!(text.chars().count() < 20_000, "an unbounded answer");
            assert!(
                !text.contains('\u{1b}'),
                "an escape character reached the caller: {text:?}"
            );
        }
        _ => panic!("the same call was decided two ways: {call}"),
    }
});
