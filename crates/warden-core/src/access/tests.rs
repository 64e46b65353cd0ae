use super::*;
use crate::condition::Test;
use serde_json::json;

fn caller(name: &str, groups: &[&str]) -> Caller {
    Caller {
        name: name.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    }
}

fn rule(callers: &[&str], tools: &[&str], effect: Effect) -> Rule {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    Rule::new(&s(callers), &s(tools), effect).unwrap()
}

#[test]
fn first_match_wins_then_default() {
    let rules = Rules {
        rules: vec![
            rule(&["alice"], &["notes.publish_note"], Effect::Ask),
            rule(&["group:ops", "alice"], &["notes.*"], Effect::Allow),
            rule(&["*"], &["notes.list_notes"], Effect::Allow),
        ],
        default: Effect::Deny,
    };
    let alice = caller("alice", &[]);
    let bob = caller("bob", &["ops"]);
    let eve = caller("eve", &[]);
    assert_eq!(rules.effect(&alice, "notes.publish_note"), Effect::Ask);
    assert_eq!(rules.effect(&alice, "notes.create_note"), Effect::Allow);
    assert_eq!(rules.effect(&bob, "notes.publish_note"), Effect::Allow);
    assert_eq!(rules.effect(&eve, "notes.list_notes"), Effect::Allow);
    assert_eq!(rules.effect(&eve, "notes.create_note"), Effect::Deny);
    assert_eq!(rules.effect(&alice, "fs.read_file"), Effect::Deny);
    assert_eq!(
        rules.decide(&eve, "notes.create_note", None),
        GrantDecision::Hide
    );
    assert_eq!(
        rules.decide(&alice, "notes.publish_note", None),
        GrantDecision::Ask
    );
}

#[test]
fn globs_cross_dots_and_slashes() {
    let r = rule(&["*"], &["fs.*"], Effect::Allow);
    assert!(r.applies(&caller("x", &[]), "fs.read_file"));
    assert!(r.applies(&caller("x", &[]), "fs.dir/sub"));
    assert!(!r.applies(&caller("x", &[]), "notes.fs.x"));
}

#[test]
fn invalid_rules_are_named() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        Rule::new(&s(&["*"]), &s(&["notes.[a"]), Effect::Allow).unwrap_err(),
        "'notes.[a' is not a valid tool glob: unclosed character class; missing ']'"
    );
    assert!(Rule::new(&s(&[]), &s(&["x"]), Effect::Allow)
        .unwrap_err()
        .contains("caller selector"));
    assert!(Rule::new(&s(&["group:"]), &s(&["x"]), Effect::Allow).is_err());
    assert_eq!(
        "maybe".parse::<Effect>().unwrap_err(),
        "'maybe' is not an effect; use one of: allow, deny, ask"
    );
}

#[test]
fn shadowed_rules_are_found() {
    let rules = Rules {
        rules: vec![
            rule(&["*"], &["notes.*"], Effect::Allow),
            rule(&["alice"], &["notes.publish_note"], Effect::Deny),
            rule(&["bob"], &["fs.*"], Effect::Deny),
            rule(&["bob"], &["fs.*"], Effect::Allow),
        ],
        default: Effect::Deny,
    };
    assert_eq!(rules.shadowed(), vec![(1, 0), (3, 2)]);
}

fn cond(path: &str, test: Test) -> Condition {
    Condition {
        path: crate::condition::ArgPath::parse(path).unwrap(),
        test,
    }
}

fn at_most(path: &str, n: f64) -> Conditions {
    Conditions {
        all: vec![cond(
            path,
            Test::Range {
                min: None,
                max: Some(n),
            },
        )],
        any: vec![],
    }
}

fn args(v: serde_json::Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn argument_rules_decide_calls_and_count_as_holding_for_listings() {
    // `allow transfer when amount <= 100` then `deny transfer`: listed; 50 runs; 500 is refused.
    let rules = Rules {
        rules: vec![
            rule(&["alice"], &["bank.transfer"], Effect::Allow).when(at_most("amount", 100.0)),
            rule(&["*"], &["bank.transfer"], Effect::Deny),
        ],
        default: Effect::Allow,
    };
    let alice = caller("alice", &[]);
    assert_eq!(rules.effect(&alice, "bank.transfer"), Effect::Allow);
    assert_eq!(
        rules.effect(&caller("bob", &[]), "bank.transfer"),
        Effect::Deny
    );
    let on = |v| rules.effect_on_arguments(&alice, "bank.transfer", &args(v));
    assert_eq!(on(json!({"amount": 50})), Some(ArgDecision::Allow));
    assert_eq!(
        on(json!({"amount": 500})),
        Some(ArgDecision::Refuse(
            "Argument 'amount' of tool 'bank.transfer' must be at most 100 for caller 'alice'."
                .into()
        ))
    );
    assert_eq!(
        on(json!({})),
        Some(ArgDecision::Refuse(
            "Argument 'amount' of tool 'bank.transfer' must be at most 100 for caller 'alice'."
                .into()
        ))
    );
    // A tool no conditional rule names: the name decides alone.
    assert_eq!(
        rules.effect_on_arguments(&alice, "bank.balance", &args(json!({}))),
        None
    );
}

#[test]
fn a_conditional_deny_never_hides_and_names_what_it_met() {
    let drop = Conditions {
        all: vec![cond("query", Test::regex("(?i)\\bdrop\\b").unwrap())],
        any: vec![],
    };
    let rules = Rules {
        rules: vec![rule(&["*"], &["db.query"], Effect::Deny).when(drop)],
        default: Effect::Allow,
    };
    let me = caller("me", &[]);
    assert_eq!(rules.effect(&me, "db.query"), Effect::Allow);
    assert_eq!(
            rules.effect_on_arguments(&me, "db.query", &args(json!({"query": "DROP TABLE x"}))),
            Some(ArgDecision::Refuse(
                "Argument 'query' of tool 'db.query' must not match the pattern '(?i)\\bdrop\\b' for caller 'me'.".into()
            ))
        );
    assert_eq!(
        rules.effect_on_arguments(&me, "db.query", &args(json!({"query": "select 1"}))),
        Some(ArgDecision::Allow)
    );
    // Only conditional denies before a default deny: the name hides the tool.
    let hidden = Rules {
        rules: rules.rules.clone(),
        default: Effect::Deny,
    };
    assert_eq!(hidden.effect(&me, "db.query"), Effect::Deny);
    assert_eq!(
        hidden.effect_on_arguments(&me, "db.query", &args(json!({"query": "x"}))),
        Some(ArgDecision::Hide)
    );
}

#[test]
fn ask_conditions_say_what_they_put_to_the_human() {
    let outside = Conditions {
        all: vec![cond("path", Test::glob("/srv/public/*").unwrap())],
        any: vec![],
    };
    let rules = Rules {
        rules: vec![
            rule(&["*"], &["fs.read"], Effect::Allow).when(outside),
            rule(&["*"], &["fs.read"], Effect::Ask),
        ],
        default: Effect::Deny,
    };
    let me = caller("me", &[]);
    assert_eq!(
        rules.effect_on_arguments(&me, "fs.read", &args(json!({"path": "/etc/passwd"}))),
        Some(ArgDecision::Ask(Some(
            "Argument 'path' of tool 'fs.read' must match '/srv/public/*' for caller 'me'.".into()
        )))
    );
    assert_eq!(
        rules.effect_on_arguments(&me, "fs.read", &args(json!({"path": "/srv/public/a"}))),
        Some(ArgDecision::Allow)
    );
}

#[test]
fn a_conditional_rule_shadows_nothing() {
    let rules = Rules {
        rules: vec![
            rule(&["*"], &["bank.*"], Effect::Allow).when(at_most("amount", 1.0)),
            rule(&["*"], &["bank.transfer"], Effect::Deny),
        ],
        default: Effect::Deny,
    };
    assert!(rules.shadowed().is_empty());
}

#[test]
fn impossible_paths_and_types_are_found_with_a_hint() {
    use crate::policy::ToolPolicy;
    let decl = json!({"name":"transfer","inputSchema":{"type":"object","properties":{
            "amount":{"type":"number"},"memo":{"type":"string"},
            "items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"string"}}}},
            "extra":{"type":"object","additionalProperties":true}}}});
    let (c, _) = Catalogue::from_tools(std::slice::from_ref(&decl), &ToolPolicy::default());
    let rules = Rules {
        rules: vec![rule(&["*"], &["transfer"], Effect::Allow).when(Conditions {
            all: vec![
                cond("amuont", Test::Present(true)),
                cond(
                    "memo",
                    Test::Range {
                        min: Some(1.0),
                        max: None,
                    },
                ),
                cond("items[*].idd", Test::Present(true)),
                cond("memo[*]", Test::Present(true)),
                cond("items[*].id", Test::glob("a*").unwrap()),
                cond("extra.anything", Test::Present(true)),
                cond(
                    "amount",
                    Test::Range {
                        min: None,
                        max: Some(5.0),
                    },
                ),
                cond("zzzzzzzz", Test::Present(true)),
            ],
            any: vec![],
        })],
        default: Effect::Deny,
    };
    let found = |c: &Catalogue| -> Vec<(String, bool)> {
        rules
            .problems(c)
            .into_iter()
            .map(|p| (p.text, p.certain))
            .collect()
    };
    // Unknown keys in warn mode reach the rules: a key the schema lacks makes a
    // condition hold only on calls that break the schema, and is worth a word
    // only when it looks like a typo of a declared one.
    let doubt = |text: &str| (text.to_owned(), false);
    let never = |text: &str| (text.to_owned(), true);
    assert_eq!(
        found(&c),
        [
            doubt("rule[0]: the condition on 'amuont' holds for tool 'transfer' only on calls that break its schema: the tool has no argument 'amuont'; did you mean 'amount'?"),
            never("rule[0]: the condition on 'memo' can never hold for tool 'transfer': it is declared string, and the test needs number or integer"),
            doubt("rule[0]: the condition on 'items[*].idd' holds for tool 'transfer' only on calls that break its schema: 'items[*]' has no key 'idd'; did you mean 'id'?"),
            never("rule[0]: the condition on 'memo[*]' can never hold for tool 'transfer': 'memo' is declared string, not an array"),
        ]
    );
    // Rejected (or stripped) unknown keys never reach the rules; an object whose
    // schema forbids more keys refuses them in validation.
    let strict = ToolPolicy {
        unknown: crate::UnknownMode::Reject,
        ..ToolPolicy::default()
    };
    let mut closed = decl.clone();
    closed["inputSchema"]["properties"]["items"]["items"]["additionalProperties"] = json!(false);
    let (c, _) = Catalogue::from_tools(&[closed.clone()], &strict);
    assert_eq!(
        found(&c),
        [
            never("rule[0]: the condition on 'amuont' can never hold for tool 'transfer': the tool has no argument 'amuont'; did you mean 'amount'?"),
            never("rule[0]: the condition on 'memo' can never hold for tool 'transfer': it is declared string, and the test needs number or integer"),
            never("rule[0]: the condition on 'items[*].idd' can never hold for tool 'transfer': 'items[*]' has no key 'idd'; did you mean 'id'?"),
            never("rule[0]: the condition on 'memo[*]' can never hold for tool 'transfer': 'memo' is declared string, not an array"),
            never("rule[0]: the condition on 'zzzzzzzz' can never hold for tool 'transfer': the tool has no argument 'zzzzzzzz' (it has: amount, memo, items, extra)"),
        ]
    );
    // Without validation a declared type is a promise, not a gate.
    let unchecked = ToolPolicy {
        validate: false,
        ..strict
    };
    let (c, _) = Catalogue::from_tools(&[closed], &unchecked);
    assert_eq!(
        found(&c)[1],
        doubt("rule[0]: the condition on 'memo' holds for tool 'transfer' only on calls that break its schema: it is declared string, and the test needs number or integer")
    );
}

#[test]
fn a_condition_near_an_alias_is_pointed_at_the_name_rules_read() {
    // Rules read a call after aliasing (A2): a condition on an alias never
    // sees a value, and a typo of one is told the canonical name.
    let decl = json!({"name":"note","inputSchema":{"type":"object","properties":{
            "title":{"type":"string"},"text":{"type":"string"}}}});
    let aliased = crate::ToolPolicy {
        aliases: vec![("body".to_owned(), "text".to_owned())],
        ..crate::ToolPolicy::default()
    };
    let (c, _) = Catalogue::from_tools(std::slice::from_ref(&decl), &aliased);
    let rules = Rules {
        rules: vec![rule(&["*"], &["note"], Effect::Deny).when(Conditions {
            all: vec![
                cond("body", Test::Present(true)),
                cond("bdy", Test::Present(true)),
            ],
            any: vec![],
        })],
        default: Effect::Allow,
    };
    let found: Vec<(String, bool)> = rules
        .problems(&c)
        .into_iter()
        .map(|p| (p.text, p.certain))
        .collect();
    assert_eq!(
        found,
        [
            ("rule[0]: the condition on 'body' can never hold for tool 'note': 'body' is an alias, and rules read it as 'text'".to_owned(), true),
            ("rule[0]: the condition on 'bdy' holds for tool 'note' only on calls that break its schema: the tool has no argument 'bdy'; did you mean 'text'? ('body' is an alias of it)".to_owned(), false),
        ]
    );
}

mod negation {
    use super::*;
    use proptest::prelude::*;

    /// Argument values a condition may meet: numbers, strings, arrays of either, absent.
    fn value() -> impl Strategy<Value = Option<Value>> {
        let leaf = prop_oneof![
            (-200i64..200).prop_map(|n| json!(n)),
            "[a-c/]{0,6}".prop_map(|s| json!(s)),
            Just(json!(true)),
        ];
        prop_oneof![
            Just(None),
            leaf.clone().prop_map(Some),
            prop::collection::vec(leaf, 0..4).prop_map(|v| Some(Value::Array(v))),
        ]
    }

    fn test() -> impl Strategy<Value = Test> {
        prop_oneof![
            (-200i64..200).prop_map(|n| Test::Equals(json!(n))),
            "[a-c]{0,3}".prop_map(|s| Test::OneOf(vec![json!(s), json!(1)])),
            "[a-c/*]{0,4}".prop_map(|g| Test::glob(&g).unwrap()),
            "[a-c]{0,2}".prop_map(|r| Test::regex(&format!("^{r}")).unwrap()),
            (
                proptest::option::of(-200i64..200),
                proptest::option::of(-200i64..200)
            )
                .prop_map(|(a, b)| Test::Range {
                    min: a.map(|x| x as f64),
                    max: b.map(|x| x as f64)
                }),
            (proptest::option::of(0u64..5), proptest::option::of(0u64..5))
                .prop_map(|(min, max)| Test::Length { min, max }),
            any::<bool>().prop_map(Test::Present),
        ]
    }

    proptest! {
        /// `allow T when C` then `deny T`, beside `deny T when C` then `allow T`:
        /// whatever the arguments, at most one of the two lets the call run.
        #[test]
        fn a_rule_and_its_negation_never_both_allow(
            tests in prop::collection::vec(test(), 1..3),
            any_mode in any::<bool>(),
            x in value(),
            y in value(),
            wildcard in any::<bool>(),
        ) {
            let path = if wildcard { "x[*]" } else { "x" };
            let conds: Vec<Condition> = tests.into_iter().enumerate()
                .map(|(i, t)| cond(if i == 0 { path } else { "y" }, t)).collect();
            let when = if any_mode {
                Conditions { all: vec![], any: conds }
            } else {
                Conditions { all: conds, any: vec![] }
            };
            let allow_when = Rules {
                rules: vec![
                    rule(&["*"], &["t"], Effect::Allow).when(when.clone()),
                    rule(&["*"], &["t"], Effect::Deny),
                ],
                default: Effect::Deny,
            };
            let deny_when = Rules {
                rules: vec![
                    rule(&["*"], &["t"], Effect::Deny).when(when),
                    rule(&["*"], &["t"], Effect::Allow),
                ],
                default: Effect::Deny,
            };
            let mut a = Map::new();
            if let Some(x) = x { a.insert("x".into(), x); }
            if let Some(y) = y { a.insert("y".into(), y); }
            let me = caller("me", &[]);
            let allows = |r: &Rules| {
                r.effect(&me, "t") != Effect::Deny
                    && r.effect_on_arguments(&me, "t", &a) == Some(ArgDecision::Allow)
            };
            prop_assert!(!(allows(&allow_when) && allows(&deny_when)));
        }
    }
}

fn cel(src: &str) -> CelCondition {
    CelCondition::compile(src).unwrap()
}

#[test]
fn a_cel_condition_decides_like_when_and_says_so() {
    let rules = Rules {
        rules: vec![
            rule(&["*"], &["bank.*"], Effect::Deny)
                .when_cel(cel("args.amount > 1000 && !('finance' in caller.groups)")),
            rule(&["*"], &["bank.transfer"], Effect::Ask).when_cel(cel("args.amount > 100")),
            rule(&["*"], &["bank.transfer"], Effect::Allow)
                .when_cel(cel("tool.name == 'bank.transfer' && args.amount > 0")),
        ],
        default: Effect::Deny,
    };
    let alice = caller("alice", &[]);
    let fin = caller("fin", &["finance"]);
    // Listing: a conditional deny is passed over, a conditional allow shows the tool.
    assert_eq!(rules.effect(&alice, "bank.transfer"), Effect::Allow);
    let on = |who: &Caller, v| rules.effect_on_arguments(who, "bank.transfer", &args(v));
    assert_eq!(
        on(&alice, json!({"amount": 5000})),
        Some(ArgDecision::Refuse(
            "Policy does not allow this call to tool 'bank.transfer' for caller 'alice'.".into()
        ))
    );
    assert_eq!(
        on(&fin, json!({"amount": 5000})),
        Some(ArgDecision::Ask(Some(
            "Policy asks for approval of this call to tool 'bank.transfer' for caller 'fin'."
                .into()
        )))
    );
    assert_eq!(on(&alice, json!({"amount": 50})), Some(ArgDecision::Allow));
    // The allow missed and the default denies: the words say a policy condition did.
    assert_eq!(
        on(&alice, json!({"amount": -5})),
        Some(ArgDecision::Refuse(
            "Policy does not allow this call to tool 'bank.transfer' for caller 'alice'.".into()
        ))
    );
}

#[test]
fn a_cel_condition_that_fails_at_run_time_fails_the_call_closed() {
    // An allow rule: were the failure read as "does not hold", the default would allow.
    let rules = Rules {
        rules: vec![rule(&["*"], &["t"], Effect::Deny).when_cel(cel("args.n > 3"))],
        default: Effect::Allow,
    };
    let me = caller("me", &[]);
    assert_eq!(
        rules.effect_on_arguments(&me, "t", &args(json!({"n": "x"}))),
        Some(ArgDecision::Failed(
            "rule[0].when_cel: it stopped: a value it reads has a type the expression does not handle"
                .into()
        ))
    );
    assert_eq!(
        rules.effect_on_arguments(&me, "t", &args(json!({"n": 1}))),
        Some(ArgDecision::Allow)
    );
}

#[test]
fn a_rule_with_a_cel_condition_shadows_nothing() {
    let rules = Rules {
        rules: vec![
            rule(&["*"], &["*"], Effect::Deny).when_cel(cel("caller.name == 'x'")),
            rule(&["*"], &["t"], Effect::Allow),
        ],
        default: Effect::Deny,
    };
    assert!(rules.shadowed().is_empty());
}
