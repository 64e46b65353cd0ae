//! The cost of a guard's scan (docs/behaviour.md S5, issue 26): with every
//! built-in detector on, at most 2 µs per KB of result text and 5 ms for a
//! 1 MB result.
//!
//! `cargo bench -p warden-core --bench scan` prints, in one run, the cost of scanning the repository's own text as a 1 MB result, as results of
//! 1 to 4 KB, and as results made of one-line strings, each next to the cost of
//! `serde_json::from_slice` of the same bytes (which the gateway pays for every
//! result anyway), so the ratio holds on a noisy machine. Each figure is the
//! fastest of its samples. `SCAN_BENCH_KINDS=1` adds one line per built-in
//! kind.

use serde_json::{json, Value};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Instant;
use warden_core::scan::{builtin, Scanner};

/// Every line of the repository's docs and Rust sources but the scanner's own
/// (which hold positives on purpose): ordinary text with code in it.
fn lines() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            if name == "target" || name.starts_with('.') || name == "scan" {
                continue;
            }
            if p.is_dir() {
                walk(&p, out);
            } else if name.ends_with(".rs") || name.ends_with(".md") {
                out.push(p);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    walk(&root.join("crates"), &mut files);
    walk(&root.join("docs"), &mut files);
    files.push(root.join("README.md"));
    files.sort();
    let text: Vec<String> = files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect();
    text.iter()
        .flat_map(|t| t.lines().map(str::to_owned))
        .collect()
}

/// Text of `size` bytes or a little more, from `lines` starting at `*at`.
fn text_of(lines: &[String], at: &mut usize, size: usize) -> String {
    let mut text = String::new();
    while text.len() < size {
        text.push_str(&lines[*at % lines.len()]);
        text.push('\n');
        *at += 1;
    }
    text
}

/// One workload: results, the bytes of text in their strings, their JSON.
struct Case {
    name: &'static str,
    results: Vec<Value>,
    text_bytes: usize,
    json: Vec<Vec<u8>>,
}

impl Case {
    fn new(name: &'static str, results: Vec<Value>) -> Case {
        fn strings(v: &Value) -> usize {
            match v {
                Value::String(s) => s.len(),
                Value::Array(a) => a.iter().map(strings).sum(),
                Value::Object(m) => m.values().map(strings).sum(),
                _ => 0,
            }
        }
        let text_bytes = results.iter().map(strings).sum();
        let json = results
            .iter()
            .map(|r| serde_json::to_vec(r).expect("a result serialises"))
            .collect();
        Case {
            name,
            results,
            text_bytes,
            json,
        }
    }
}

fn cases(lines: &[String]) -> Vec<Case> {
    let mut at = 0;
    let big = text_of(lines, &mut at, 1 << 20);
    let one_mb = vec![json!({"content": [{"type": "text", "text": big}]})];
    let small: Vec<Value> = (0..256)
        .map(|i| {
            let text = text_of(lines, &mut at, 1024 * (1 + i % 4));
            json!({"content": [{"type": "text", "text": text}]})
        })
        .collect();
    let rows: Vec<Value> = (0..256)
        .map(|i| {
            let rows: Vec<Value> = (0..40)
                .map(|j| {
                    let line = &lines[(at + j) % lines.len()];
                    json!({"id": i * 40 + j, "line": line, "file": "docs/behaviour.md"})
                })
                .collect();
            at += 40;
            json!({"structuredContent": {"rows": rows}})
        })
        .collect();
    vec![
        Case::new("one 1 MB text result", one_mb),
        Case::new("256 text results of 1-4 KB", small),
        Case::new("256 results of 40 one-line rows", rows),
    ]
}

/// The fastest (ns) of `scan` over the case and of parsing its JSON,
/// interleaved: on a machine shared with other work, a slower sample is one
/// that was descheduled halfway, so the minimum is the figure that repeats.
fn measure(scan: &dyn Fn(&mut Value), case: &mut Case, samples: usize) -> (f64, f64) {
    let (mut s, mut p) = (f64::MAX, f64::MAX);
    for _ in 0..samples {
        let t = Instant::now();
        for r in case.results.iter_mut() {
            scan(black_box(r));
        }
        s = s.min(t.elapsed().as_nanos() as f64);
        let t = Instant::now();
        for j in &case.json {
            black_box(serde_json::from_slice::<Value>(black_box(j)).expect("parses"));
        }
        p = p.min(t.elapsed().as_nanos() as f64);
    }
    (s, p)
}

fn scanner(detect: &[&str]) -> Scanner {
    let detect: Vec<String> = detect.iter().map(|s| s.to_string()).collect();
    Scanner::new(&detect, &[]).expect("built-in detectors compile")
}

fn report(label: &str, case: &mut Case, s: &Scanner, redact: bool, samples: usize) {
    let scan = |v: &mut Value| {
        black_box(if redact { s.redact(v) } else { s.scan(v) });
    };
    scan(&mut case.results[0]); // warm up, strip once
    let (ns, parse) = measure(&scan, case, samples);
    let kb = case.text_bytes as f64 / 1024.0;
    println!(
        "  {label:<28} {:>8.2} ms/MB {:>7.2} µs/KB   parse {:>6.2} µs/KB   ratio {:>5.2}x",
        ns / 1e6 / (kb / 1024.0),
        ns / 1e3 / kb,
        parse / 1e3 / kb,
        ns / parse
    );
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // run as a test (`cargo test --benches`): nothing to measure
    }
    let lines = lines();
    let all = scanner(&["secrets", "pii", "injection"]);
    let kinds = std::env::var_os("SCAN_BENCH_KINDS").is_some();
    println!("scan cost, fastest of each; bars (S5): <= 2 µs/KB, <= 5 ms per 1 MB result");
    // Warm the CPU and the regexes' caches before the first figure.
    let mut warm = Case::new("warm-up", vec![json!(text_of(&lines, &mut 0, 1 << 20))]);
    report("warm-up", &mut warm, &all, false, 5);
    for mut case in cases(&lines) {
        let samples = if case.results.len() == 1 { 41 } else { 21 };
        println!(
            "{} ({:.0} KB of text in {} result(s)):",
            case.name,
            case.text_bytes as f64 / 1024.0,
            case.results.len()
        );
        report("every detector, scan", &mut case, &all, false, samples);
        report("every detector, redact", &mut case, &all, true, samples);
        for group in builtin::GROUPS {
            report(
                &format!("{group} alone"),
                &mut case,
                &scanner(&[group]),
                false,
                samples,
            );
        }
        if kinds {
            for b in builtin::BUILTINS {
                report(b.kind, &mut case, &scanner(&[b.kind]), false, samples);
            }
        }
    }
}
