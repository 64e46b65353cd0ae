//! Property tests: the argument stages never panic on any input, and each mode
//! keeps its promise about what reaches the upstream.

use proptest::prelude::*;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use warden_core::{
    Caller, Catalogue, Outcome, Pipeline, Session, ToolPolicy, UnknownKeyWarning, UnknownMode,
};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Keys near the declared ones, plus arbitrary strings (control characters included).
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "title", "text", "top", "tags", "reason", "titel", "txt", "body"
        ])
        .prop_map(str::to_owned),
        any::<String>(),
    ]
}

fn catalogue(mode: UnknownMode, validate: bool) -> Catalogue {
    let policy = ToolPolicy {
        unknown: mode,
        validate,
        aliases: vec![("body".into(), "text".into())],
        ..Default::default()
    };
    let decl = json!({"name":"t","inputSchema":{"type":"object","properties":{
        "title":{"type":"string"},"text":{"type":"string","maxLength":50},
        "top":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},"required":["title"]}});
    Catalogue::from_tools(&[decl], &policy).0
}

fn mode() -> impl Strategy<Value = UnknownMode> {
    prop::sample::select(vec![
        UnknownMode::Warn,
        UnknownMode::Strip,
        UnknownMode::Reject,
    ])
}

const DECLARED: [&str; 5] = ["title", "text", "top", "tags", "reason"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_panics_on_any_params(params in json_value(), m in mode(), validate in any::<bool>()) {
        let c = catalogue(m, validate);
        let s = Session::new(Arc::new(|_: &UnknownKeyWarning| {}));
        let _ = Pipeline::new().check(&c, &s, Some(&Caller::new("p")), params);
    }

    #[test]
    fn never_panics_on_any_arguments(args in json_value(), meta in json_value(), m in mode()) {
        let c = catalogue(m, true);
        let s = Session::new(Arc::new(|_: &UnknownKeyWarning| {}));
        let _ = Pipeline::new().check(&c, &s, Some(&Caller::new("p")), json!({"name":"t","arguments":args,"_meta":meta}));
    }

    #[test]
    fn warn_without_validation_forwards_exactly(args in prop::collection::vec((key(), json_value()), 0..8)) {
        let args: Map<String, Value> = args.into_iter().filter(|(k, _)| k != "body").collect();
        let c = catalogue(UnknownMode::Warn, false);
        let s = Session::new(Arc::new(|_: &UnknownKeyWarning| {}));
        let v = Pipeline::new().check(&c, &s, Some(&Caller::new("p")), json!({"name":"t","arguments":args.clone()}));
        match v.outcome {
            Outcome::Forward(f) => {
                prop_assert!(!f.rewritten);
                prop_assert_eq!(serde_json::to_string(&f.arguments).unwrap(), serde_json::to_string(&args).unwrap());
            }
            Outcome::Answer { answer, .. } => prop_assert!(false, "refused: {}", answer.text()),
        }
    }

    #[test]
    fn strip_and_reject_never_forward_an_undeclared_key(args in prop::collection::vec((key(), json_value()), 0..8), m in prop::sample::select(vec![UnknownMode::Strip, UnknownMode::Reject])) {
        let args: Map<String, Value> = args.into_iter().collect();
        let c = catalogue(m, false);
        let s = Session::new(Arc::new(|_: &UnknownKeyWarning| {}));
        if let Outcome::Forward(f) = Pipeline::new().check(&c, &s, Some(&Caller::new("p")), json!({"name":"t","arguments":args})).outcome {
            for k in f.arguments.keys() {
                prop_assert!(DECLARED.contains(&k.as_str()), "forwarded undeclared key {:?}", k);
            }
        }
    }

    #[test]
    fn validated_calls_that_pass_match_the_schema(args in prop::collection::vec((key(), json_value()), 0..6)) {
        let args: Map<String, Value> = args.into_iter().collect();
        let c = catalogue(UnknownMode::Strip, true);
        let s = Session::new(Arc::new(|_: &UnknownKeyWarning| {}));
        if let Outcome::Forward(f) = Pipeline::new().check(&c, &s, Some(&Caller::new("p")), json!({"name":"t","arguments":args})).outcome {
            prop_assert!(f.arguments.get("title").is_some_and(Value::is_string));
        }
    }
}

#[test]
fn huge_arguments_are_handled() {
    let c = catalogue(UnknownMode::Reject, true);
    let s = Session::new(Arc::new(|_: &UnknownKeyWarning| {}));
    let big = "x".repeat(10 * 1024 * 1024);
    let v = Pipeline::new().check(
        &c,
        &s,
        Some(&Caller::new("p")),
        json!({"name":"t","arguments":{"title":"t","text":big}}),
    );
    let Outcome::Answer { answer, .. } = v.outcome else {
        panic!("a 10 MB text breaks maxLength 50")
    };
    assert_eq!(
        answer.text(),
        "Error: Invalid value for argument 'text': expected string of at most 50 characters."
    );
    // a 10 MB unknown key is shown bounded
    let v = Pipeline::new().check(
        &c,
        &s,
        Some(&Caller::new("p")),
        json!({"name":"t","arguments":{"title":"t", "k".repeat(10 * 1024 * 1024): 1}}),
    );
    let Outcome::Answer { answer, .. } = v.outcome else {
        panic!()
    };
    assert!(answer.text().len() < 1000);
}

#[test]
fn deeply_nested_arguments_are_answered() {
    let c = catalogue(UnknownMode::Reject, true);
    let s = Session::new(Arc::new(|_: &UnknownKeyWarning| {}));
    let mut deep = json!(1);
    for _ in 0..10_000 {
        deep = Value::Array(vec![deep]);
    }
    let mut args = Map::new();
    args.insert("title".into(), json!("t"));
    args.insert("tags".into(), deep);
    let mut params = Map::new();
    params.insert("name".into(), json!("t"));
    params.insert("arguments".into(), Value::Object(args));
    let v = Pipeline::new().check(&c, &s, Some(&Caller::new("p")), Value::Object(params));
    let Outcome::Answer { answer, .. } = v.outcome else {
        panic!()
    };
    assert_eq!(
        answer.text(),
        "Error: Invalid value for argument 'tags': expected array of string."
    );
}
