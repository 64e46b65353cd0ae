//! The in-process cost of the pipeline (docs/behaviour.md, performance bar:
//! ≤ 5 µs a call with every stage on against a 20-property schema), and the
//! catalogue build for 300 tools.
//!
//! `cargo bench -p warden-core --bench pipeline` prints criterion's estimates and,
//! at the end, the median per call next to the cost of the bare validator on the
//! same arguments in the same run.

use criterion::{criterion_group, Criterion};
use serde_json::{json, Map, Value};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;
use warden_core::{
    Caller, Catalogue, LayeredPolicy, Outcome, Overrides, Pipeline, Session, UnknownMode,
};

fn schema20() -> Value {
    let mut props = Map::new();
    for i in 0..20 {
        let p = match i % 4 {
            0 => json!({"type": "string", "maxLength": 200}),
            1 => json!({"type": "integer", "minimum": 0}),
            2 => json!({"type": "boolean"}),
            _ => json!({"enum": ["a", "b", "c"]}),
        };
        props.insert(format!("param_{i:02}"), p);
    }
    json!({"type": "object", "properties": props, "required": ["param_00", "param_01"]})
}

fn args20() -> Value {
    let mut args = Map::new();
    for i in 0..20 {
        let v = match i % 4 {
            0 => json!("some text"),
            1 => json!(42),
            2 => json!(true),
            _ => json!("b"),
        };
        args.insert(format!("param_{i:02}"), v);
    }
    args.insert("reason".into(), json!("benchmark"));
    args.insert("alias_05".into(), json!(7));
    args.shift_remove("param_05");
    Value::Object(args)
}

fn policy() -> LayeredPolicy {
    let mut pins = Map::new();
    pins.insert("param_19".into(), json!("c"));
    let mut p = LayeredPolicy {
        defaults: Overrides {
            unknown: Some(UnknownMode::Reject),
            reasons: Some(true),
            validate: Some(true),
            ..Default::default()
        },
        ..Default::default()
    };
    p.tools.insert(
        ("up".into(), "t".into()),
        Overrides {
            aliases: vec![("alias_05".into(), "param_05".into())],
            pins,
            ..Default::default()
        },
    );
    p
}

fn catalogue(n: usize) -> Catalogue {
    let tools: Vec<Value> = (0..n)
        .map(|i| json!({"name": if i == 0 { "t".to_string() } else { format!("t{i}") }, "inputSchema": schema20()}))
        .collect();
    let policy = policy();
    let mut b = Catalogue::builder(&policy);
    b.add_upstream("up", true, &tools);
    let (c, problems) = b.build();
    assert!(problems.is_empty());
    c
}

fn call_params(args: &Value) -> Value {
    let mut args = args.clone();
    args.as_object_mut().unwrap().shift_remove("param_19");
    json!({"name": "up.t", "arguments": args, "_meta": {"progressToken": 1, "warden/idempotencyKey": "k"}})
}

fn bench(c: &mut Criterion) {
    let cat = catalogue(1);
    let pipeline = Pipeline::new();
    let session = Session::new(Arc::new(|_: &warden_core::UnknownKeyWarning| {}));
    let caller = Caller::new("bench");
    let params = call_params(&args20());
    // The call must get through every stage, or the figure means nothing.
    match pipeline
        .check(&cat, &session, Some(&caller), params.clone())
        .outcome
    {
        Outcome::Forward(f) => assert!(f.rewritten && f.arguments.contains_key("param_05")),
        Outcome::Answer { answer, .. } => panic!("benchmark call refused: {}", answer.text()),
    }
    c.bench_function("pipeline/all_stages_20_props", |b| {
        b.iter_batched(
            || params.clone(),
            |p| black_box(pipeline.check(&cat, &session, Some(&caller), p)),
            criterion::BatchSize::SmallInput,
        )
    });
    let validator = jsonschema::validator_for(&schema20()).unwrap();
    let mut plain = args20();
    plain.as_object_mut().unwrap().shift_remove("reason");
    c.bench_function("baseline/validator_is_valid_20_props", |b| {
        b.iter(|| black_box(validator.is_valid(black_box(&plain))))
    });
    c.bench_function("catalogue/build_300_tools", |b| {
        b.iter(|| black_box(catalogue(300)))
    });
}

/// Plain medians in one run, printed as the figures the design brief asks for.
fn summary() {
    let cat = catalogue(1);
    let pipeline = Pipeline::new();
    let session = Session::new(Arc::new(|_: &warden_core::UnknownKeyWarning| {}));
    let caller = Caller::new("bench");
    let params = call_params(&args20());
    let validator = jsonschema::validator_for(&schema20()).unwrap();
    let mut plain = args20();
    plain.as_object_mut().unwrap().shift_remove("reason");

    let median = |f: &mut dyn FnMut() -> u128| {
        let mut v: Vec<u128> = (0..20_001).map(|_| f()).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let pipe = median(&mut || {
        let p = params.clone();
        let t = Instant::now();
        black_box(pipeline.check(&cat, &session, Some(&caller), p));
        t.elapsed().as_nanos()
    });
    let base = median(&mut || {
        let t = Instant::now();
        black_box(validator.is_valid(black_box(&plain)));
        t.elapsed().as_nanos()
    });
    let t = Instant::now();
    let builds = 5;
    for _ in 0..builds {
        black_box(catalogue(300));
    }
    let build = t.elapsed() / builds;
    println!("\n== summary ==");
    println!("pipeline, all stages, 20-property schema: median {pipe} ns/call (target ≤ 5000 ns)");
    println!(
        "bare validator is_valid on the same arguments: median {base} ns/call (ratio {:.2}x)",
        pipe as f64 / base.max(1) as f64
    );
    println!(
        "catalogue build, 300 tools with 20-property schemas: {:.2} ms",
        build.as_secs_f64() * 1e3
    );
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
