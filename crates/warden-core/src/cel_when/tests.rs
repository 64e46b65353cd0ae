use super::*;
use crate::call::{CallScope, Caller};
use serde_json::{json, Map, Value};

fn args(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

fn eval(src: &str, a: Value) -> Result<bool, CelFailure> {
    let caller = Caller {
        name: "alice".into(),
        groups: vec!["ops".into()],
    };
    let mut claims = Map::new();
    claims.insert("tenant".into(), json!("acme"));
    let scope = CallScope {
        claims,
        tool_labels: vec!["pii".into()],
        session_labels: vec!["secret".into()],
        session_calls: 3,
        time: 1_700_000_000,
        transport: "stdio".into(),
        revision: "2025-06-18".into(),
    };
    let a = args(a);
    let input = CelInput {
        caller: &caller,
        tool: "notes.create_note",
        upstream: "notes",
        args: &a,
        scope: &scope,
    };
    CelCondition::compile(src).unwrap().holds(&input)
}

fn compile_err(src: &str) -> String {
    CelCondition::compile(src).unwrap_err()
}

#[test]
fn reads_every_variable() {
    let a = json!({"amount": 120, "title": "hello", "tags": ["a", "b"], "ratio": 0.5});
    for (src, want) in [
        ("caller.name == 'alice' && 'ops' in caller.groups", true),
        ("caller.claims.tenant == 'acme'", true),
        (
            "tool.name.startsWith('notes.') && tool.upstream == 'notes'",
            true,
        ),
        ("'pii' in tool.labels", true),
        ("args.amount > 100 && args.title.size() < 10", true),
        ("args.tags.exists(t, t == 'b')", true),
        ("args.ratio < 1.0 && args.amount >= 120.0", true),
        ("has(args.missing)", false),
        ("'secret' in session.labels && session.calls == 3", true),
        (
            "request.transport == 'stdio' && request.revision == '2025-06-18'",
            true,
        ),
        ("request.time > 1600000000", true),
        ("args.title.matches('^h.*o$')", true),
        ("caller.name == 'bob'", false),
    ] {
        assert_eq!(eval(src, a.clone()), Ok(want), "{src}");
    }
}

#[test]
fn run_time_failures_are_reported_without_values() {
    assert_eq!(
        eval("args.amount > 100", json!({})),
        Err(CelFailure::Error(
            "a key it reads is absent (guard it with has())"
        ))
    );
    assert_eq!(
        eval("args.amount > 100", json!({"amount": "lots"})),
        Err(CelFailure::Error(
            "a value it reads has a type the expression does not handle"
        ))
    );
    assert_eq!(
        eval("args.amount", json!({"amount": 5})),
        Err(CelFailure::NotBool("int".into()))
    );
    assert_eq!(
        eval("args.amount", json!({"amount": 5}))
            .unwrap_err()
            .to_string(),
        "it gave int, not a bool"
    );
}

#[test]
fn compile_errors_name_what_and_where() {
    assert_eq!(
        compile_err("caller.name ==\n  )"),
        "syntax error at line 2, column 3: mismatched input ')' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}"
    );
    assert_eq!(
        compile_err("calller.name == 'a'"),
        "unknown variable 'calller'; did you mean 'caller'? the variables are caller, tool, args, session, request (at line 1, column 1)"
    );
    assert_eq!(
        compile_err("true &&\n  caller.nme == 'a'"),
        "'caller' has no field 'nme'; did you mean 'name'? it has name, groups, claims (at line 2, column 9)"
    );
    assert_eq!(
        compile_err("caller.name == 3"),
        "this compares string with int: they are never equal (at line 1, column 13)"
    );
    assert_eq!(
        compile_err("session.calls < 'x'"),
        "int and string cannot be ordered (at line 1, column 15)"
    );
    assert_eq!(
        compile_err("tool.name"),
        "the expression gives string, not a bool (at line 1, column 5)"
    );
    assert_eq!(compile_err("  "), "the expression is empty");
}

#[test]
fn macro_variables_are_known_inside_only() {
    assert!(CelCondition::compile("args.tags.all(t, t != 'x')").is_ok());
    assert!(
        compile_err("args.tags.all(t, t != 'x') && t == 'y'").starts_with("unknown variable 't'")
    );
}

#[test]
fn size_is_bounded() {
    let long = format!("caller.name == '{}'", "a".repeat(MAX_SOURCE));
    assert_eq!(
        compile_err(&long),
        format!(
            "the expression is {} bytes long; at most 4096 are allowed",
            long.len()
        )
    );
    let many = vec!["args.a == 1"; 80].join(" || ");
    assert!(compile_err(&many).starts_with("the expression has more than 256 parts"));
    let deep = "args.a.all(x, x.all(y, y.all(z, z == 1)))";
    assert!(
        compile_err(deep).starts_with("macros such as all() and exists() nest more than 2 deep"),
        "{}",
        compile_err(deep)
    );
}

#[test]
fn only_what_is_named_is_built() {
    let c = CelCondition::compile("args.a == 1 && has(args.b) && caller.name == 'x'").unwrap();
    let fields = |f: &[&str]| Need::Fields(f.iter().map(|s| s.to_string()).collect());
    assert_eq!(
        c.uses,
        [
            fields(&["name"]),
            Need::Nothing,
            fields(&["a", "b"]),
            Need::Nothing,
            Need::Nothing
        ]
    );
    // Named whole (here: ranged over), the variable is built whole.
    let c = CelCondition::compile("args.exists(k, k == 'x') && args.a == 1").unwrap();
    assert_eq!(c.uses[2], Need::All);
    // A key the call lacks stays absent: has() is false, reading it fails.
    assert_eq!(
        eval("has(args.b) || args.a == 1", json!({"a": 1, "c": 2})),
        Ok(true)
    );
}

#[test]
fn numbers_keep_their_kind() {
    assert_eq!(json(&json!(1)), Cel::Int(1));
    assert_eq!(json(&json!(u64::MAX)), Cel::UInt(u64::MAX));
    assert_eq!(json(&json!(1.5)), Cel::Float(1.5));
}

/// X3: an expression whose work grows with the square of an argument's length
/// stops at the time bound and fails closed, whatever it would have given.
#[test]
fn a_pathological_expression_runs_out_of_time() {
    let xs: Vec<i64> = (0..1000).collect();
    let src = "args.xs.all(x, args.xs.all(y, x + y >= 0))";
    let started = std::time::Instant::now();
    assert_eq!(
        eval(src, json!({ "xs": xs })),
        Err(CelFailure::Error(OUT_OF_TIME))
    );
    // Printed, never asserted: the machine is shared.
    println!("stopped after {:?}", started.elapsed());
}

/// X3: past the deadline no variable can be read: with none left, even a
/// trivial expression fails closed.
#[test]
fn no_variable_is_read_past_the_deadline() {
    let (caller, scope, a) = (Caller::new("alice"), CallScope::default(), Map::new());
    let input = CelInput {
        caller: &caller,
        tool: "t",
        upstream: "u",
        args: &a,
        scope: &scope,
    };
    let c = CelCondition::compile("caller.name == 'alice'").unwrap();
    assert_eq!(c.holds(&input), Ok(true));
    assert_eq!(
        c.holds_within(&input, std::time::Duration::ZERO),
        Err(CelFailure::Error(OUT_OF_TIME))
    );
}

/// X3: arguments past the size bounds are not evaluated; those the expression
/// does not read do not count.
#[test]
fn arguments_past_the_size_bounds_fail_closed() {
    let long: Vec<i64> = (0..=MAX_ARG_ITEMS as i64).collect();
    let too_large = Err(CelFailure::Error(TOO_LARGE));
    assert_eq!(eval("size(args.xs) > 0", json!({ "xs": long })), too_large);
    assert_eq!(eval("args.n == 1", json!({ "n": 1, "xs": long })), Ok(true));
    let wide: Vec<Vec<i64>> = (0..20).map(|_| (0..1000).collect()).collect();
    assert_eq!(eval("size(args.xs) > 0", json!({ "xs": wide })), too_large);
    let fits: Vec<i64> = (0..MAX_ARG_ITEMS as i64).collect();
    assert_eq!(eval("size(args.xs) > 0", json!({ "xs": fits })), Ok(true));
}

/// X3: time spent waiting (asleep here, as a thread on a loaded machine waits
/// for the processor) does not stop an evaluation; time on the processor does.
#[test]
fn waiting_does_not_count_against_the_time_bound_working_does() {
    let bound = std::time::Duration::from_millis(2);
    let timed = Timed {
        variables: vec![("caller", cel::Value::Bool(true).try_into().unwrap())],
        bound,
        deadline: Instant::now() + bound,
        expired: AtomicBool::new(false),
        window: Mutex::new(None),
    };
    for _ in 0..3 {
        std::thread::sleep(bound * 3);
        assert!(timed.resolve("caller").is_some(), "asleep is not at work");
    }
    let Some(start) = thread_cpu() else {
        return; // No processor clock here: the wall clock decides alone.
    };
    while thread_cpu().unwrap() - start < bound * 3 {
        std::hint::black_box(timed.variables.len());
    }
    assert!(timed.resolve("caller").is_none(), "at work past the bound");
    assert!(timed.expired.load(Ordering::Relaxed));
}
