//! The cost of one `when_cel` evaluation (docs/behaviour.md X3, issue 29 bar:
//! ≤ 5 µs for a typical expression over caller, tool and two arguments), with
//! building the variables it reads included.
//!
//! `cargo bench -p warden-core --bench cel` prints criterion's estimates and, at
//! the end, the median per evaluation.

use criterion::{criterion_group, Criterion};
use serde_json::{json, Map, Value};
use std::hint::black_box;
use std::time::Instant;
use warden_core::{CallScope, Caller, CelCondition, CelInput};

/// A typical expression: the caller, the tool and two arguments.
const TYPICAL: &str = "caller.name == 'alice' && tool.name.startsWith('bank.') \
    && args.amount <= 1000 && args.currency in ['EUR', 'USD']";

fn arguments() -> Map<String, Value> {
    json!({"amount": 250, "currency": "EUR", "memo": "rent", "to": "DE00 1234"})
        .as_object()
        .unwrap()
        .clone()
}

fn bench(c: &mut Criterion) {
    let cond = CelCondition::compile(TYPICAL).unwrap();
    let caller = Caller {
        name: "alice".into(),
        groups: vec!["finance".into()],
    };
    let args = arguments();
    let scope = CallScope::default();
    let input = CelInput {
        caller: &caller,
        tool: "bank.transfer",
        upstream: "bank",
        args: &args,
        scope: &scope,
    };
    // The expression must hold, or the figure measures a short cut.
    assert_eq!(cond.holds(&input), Ok(true));
    c.bench_function("cel/typical_caller_tool_two_args", |b| {
        b.iter(|| black_box(cond.holds(black_box(&input))))
    });
    c.bench_function("cel/compile_typical", |b| {
        b.iter(|| black_box(CelCondition::compile(black_box(TYPICAL))))
    });
}

fn summary() {
    let cond = CelCondition::compile(TYPICAL).unwrap();
    let caller = Caller::new("alice");
    let args = arguments();
    let scope = CallScope::default();
    let input = CelInput {
        caller: &caller,
        tool: "bank.transfer",
        upstream: "bank",
        args: &args,
        scope: &scope,
    };
    let mut v: Vec<u128> = (0..50_001)
        .map(|_| {
            let t = Instant::now();
            black_box(cond.holds(black_box(&input)).ok());
            t.elapsed().as_nanos()
        })
        .collect();
    v.sort_unstable();
    let median = v[v.len() / 2];
    println!("\n== summary ==");
    println!(
        "when_cel, typical expression over caller, tool and two arguments: median {:.2} µs/evaluation (target ≤ 5 µs)",
        median as f64 / 1000.0
    );
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
