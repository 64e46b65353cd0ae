//! The cost of a guard's scan (docs/behaviour.md S5, issue 26): with every
//! built-in detector on, at most 2 µs per KB of result text and 5 ms for a
//! 1 MB result.
//!
//! `cargo bench -p warden-core --bench scan` prints, in one run, the cost of scanning the repository's own text as a 1 MB result, as results of
//! 1 to 4 KB, and as results made of one-line strings, each next to the cost of
//! `serde_json::from_slice` of the same bytes (which the gateway pays for every
//! result anyway), so the ratio holds on a noisy machine. Times are the
//! thread's own CPU time (Linux), the lowest of three blocks of about 200 ms.
//! `SCAN_BENCH_KINDS=1` adds one line per built-in kind; `SCAN_BENCH_ONLY=rows`
//! runs only the cases whose name holds `rows` (for a profiler),
//! `SCAN_BENCH_LABEL="every detector, scan"` only the figures so labelled.
//!
//! `SCAN_BENCH_DUMP=1` times nothing either: it prints every finding and
//! every redacted result of each case, to compare two revisions' output.
//!
//! `SCAN_BENCH_INSTR=1` times nothing: each figure scans and parses its
//! results once, in [`scan_once`] and [`parse_once`], for an instruction
//! count that load on the machine does not change:
//! `valgrind --tool=callgrind BENCH --bench`, then
//! `callgrind_annotate --inclusive=yes` on the output gives the two.

use serde_json::{json, Value};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Instant;
use warden_core::scan::{builtin, Scanner};

/// Every line of the repository's docs and Rust sources but the files that
/// hold secrets and injections on purpose (the same as `tests/guard_corpus/`
/// leaves out): ordinary text with code in it.
fn lines() -> Vec<String> {
    const SKIP: &[&str] = &[
        "scan",
        "guards.rs",
        "content.rs",
        "guard_corpus",
        "http_auth.rs",
        "jwt",
    ];
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            if name == "target" || name.starts_with('.') || SKIP.iter().any(|s| name.contains(s)) {
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
    /// The results as built: each figure starts from them, not from what a
    /// redaction left.
    pristine: Vec<Value>,
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
            pristine: results.clone(),
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

/// Nanoseconds this thread has run on a CPU (Linux; updated at each tick, so
/// only good over many milliseconds), else wall-clock time since `start`.
/// The machine this runs on is shared: a scan descheduled halfway would
/// otherwise count the time other work ran.
fn cpu_ns(start: Instant) -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or_else(|| start.elapsed().as_nanos() as f64)
}

/// The cost (ns) of one `f()`: the lowest of `rounds` blocks of about 200 ms
/// of CPU time each, divided by the runs in the block.
fn per_run(f: &mut dyn FnMut(), rounds: usize) -> f64 {
    let start = Instant::now();
    let t = Instant::now();
    f();
    let once = t.elapsed().as_nanos().max(1) as f64;
    let runs = (2e8 / once).clamp(3.0, 10_000.0) as usize;
    (0..rounds)
        .map(|_| {
            let t = cpu_ns(start);
            for _ in 0..runs {
                f();
            }
            (cpu_ns(start) - t) / runs as f64
        })
        .fold(f64::MAX, f64::min)
}

/// The cost (ns) of `scan` over the case and of parsing its JSON, measured in
/// alternating blocks.
fn measure(scan: &dyn Fn(&mut Value), case: &mut Case, rounds: usize) -> (f64, f64) {
    let (mut s, mut p) = (f64::MAX, f64::MAX);
    for _ in 0..rounds {
        s = s.min(per_run(
            &mut || case.results.iter_mut().for_each(|r| scan(black_box(r))),
            1,
        ));
        p = p.min(per_run(
            &mut || {
                for j in &case.json {
                    black_box(serde_json::from_slice::<Value>(black_box(j)).expect("parses"));
                }
            },
            1,
        ));
    }
    (s, p)
}

fn scanner(detect: &[&str]) -> Scanner {
    let detect: Vec<String> = detect.iter().map(|s| s.to_string()).collect();
    Scanner::new(&detect, &[]).expect("built-in detectors compile")
}

/// Each result scanned once (`SCAN_BENCH_INSTR`): a function of its own
/// for the instruction counter.
#[inline(never)]
fn scan_once(scan: &dyn Fn(&mut Value), results: &mut [Value]) {
    results.iter_mut().for_each(|r| scan(black_box(r)));
}

/// Each result's JSON parsed once (`SCAN_BENCH_INSTR`).
#[inline(never)]
fn parse_once(json: &[Vec<u8>]) {
    for j in json {
        black_box(serde_json::from_slice::<Value>(black_box(j)).expect("parses"));
    }
}

fn report(label: &str, case: &mut Case, s: &Scanner, redact: bool, samples: usize) {
    let only = std::env::var("SCAN_BENCH_LABEL").unwrap_or_default();
    if label != "warm-up" && !label.contains(only.as_str()) {
        return;
    }
    case.results = case.pristine.clone();
    let scan = |v: &mut Value| {
        black_box(if redact { s.redact(v) } else { s.scan(v) });
    };
    scan(&mut case.results[0]); // warm up, strip once
    if std::env::var_os("SCAN_BENCH_INSTR").is_some() {
        // Every result once before, as the timed blocks repeat: the regexes'
        // lazy automata are built then, not counted.
        case.results.iter_mut().for_each(&scan);
        case.results = case.pristine.clone();
        scan_once(&scan, &mut case.results);
        parse_once(&case.json);
        println!("  {label}: scanned and parsed once");
        return;
    }
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

/// Every finding and redacted result of each case, with every detector and
/// with each group (`SCAN_BENCH_DUMP`).
fn dump(lines: &[String], all: &Scanner) {
    let groups: Vec<Scanner> = builtin::GROUPS.iter().map(|g| scanner(&[g])).collect();
    for case in cases(lines) {
        for (i, result) in case.pristine.iter().enumerate() {
            for (name, s) in
                std::iter::once(("all", all)).chain(builtin::GROUPS.iter().copied().zip(&groups))
            {
                let mut v = result.clone();
                println!("{} #{i} {name} scan: {:?}", case.name, s.scan(&mut v));
                let mut v = result.clone();
                println!(
                    "{} #{i} {name} redact: {:?} {v}",
                    case.name,
                    s.redact(&mut v)
                );
            }
        }
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // run as a test (`cargo test --benches`): nothing to measure
    }
    let lines = lines();
    let all = scanner(&["secrets", "pii", "injection"]);
    if std::env::var_os("SCAN_BENCH_DUMP").is_some() {
        return dump(&lines, &all);
    }
    let kinds = std::env::var_os("SCAN_BENCH_KINDS").is_some();
    let only = std::env::var("SCAN_BENCH_ONLY").unwrap_or_default();
    println!("scan cost, CPU time; bars (S5): <= 2 µs/KB, <= 5 ms per 1 MB result");
    // Warm the CPU and the regexes' caches before the first figure.
    let mut warm = Case::new("warm-up", vec![json!(text_of(&lines, &mut 0, 1 << 20))]);
    if only.is_empty() && std::env::var_os("SCAN_BENCH_INSTR").is_none() {
        report("warm-up", &mut warm, &all, false, 1);
    }
    for mut case in cases(&lines) {
        if !case.name.contains(only.as_str()) {
            continue;
        }
        let samples = 3;
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
