//! Fuzzing that keeps the hardening findings found: a seeded mutation fuzzer over
//! the seed corpus in `tests/fuzz/corpus.jsonl`, run against three targets:
//!
//! - framing: random byte streams, cut into random reads, through the line reader,
//!   checked against an exact oracle (every line comes back, or is reported too long);
//! - the pipeline: mutated `tools/call` params against a catalogue with aliases,
//!   pins, a closed 20-property schema and reject mode: never a panic, a refusal a
//!   model can read, and nothing undeclared or unpinned ever forwarded;
//! - the gateway: mutated messages through the stdio front, in-process, to a real
//!   fixture upstream: it never stops answering, and every request gets exactly one
//!   answer.
//!
//! It is not coverage-guided: mutations are structural (JSON-aware) and byte-level,
//! from a seed printed at the start so any failure replays exactly. The
//! coverage-guided targets (cargo-fuzz, libFuzzer, stable toolchain) are in `fuzz/`
//! at the repository root, with the same oracles for framing and the pipeline and a
//! config target; docs/fuzzing.md says how to run them. CI runs only this file.
//! `cargo test -p mcp-warden --test fuzz` runs a short bounded pass (CI);
//! `FUZZ_CASES=100000 FUZZ_SEED=… cargo test --release -p mcp-warden --test fuzz -- --nocapture`
//! is the long local run.

mod common;

use common::*;
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::time::Duration;
use warden_gateway::jsonrpc::{self, Kind, Line};

/// xorshift64*: small, seedable, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seed() -> u64 {
    let seed = env_u64(
        "FUZZ_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    ) | 1;
    eprintln!("fuzz seed: {seed} (FUZZ_SEED={seed} replays this run)");
    seed
}

fn corpus() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fuzz/corpus.jsonl");
    std::fs::read_to_string(path)
        .expect("the seed corpus")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// A JSON value picked to break assumptions: huge, deep, odd numbers, odd strings.
fn nasty(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(12) {
        0 => Value::Null,
        1 => json!(rng.chance(2)),
        2 => serde_json::from_str(
            [
                "1e400",
                "-0",
                "18446744073709551616",
                "1.0",
                "-1",
                "0.5e-310",
            ][rng.below(6)],
        )
        .unwrap(),
        3 => json!("x".repeat(rng.below(5000))),
        4 => json!("\u{0}\u{1b}[31m\n\r\u{2028}\u{202e}'\"\\"),
        5 => {
            let mut v = json!(1);
            for _ in 0..rng.below(300) {
                v = json!([v]);
            }
            v
        }
        6 if depth < 3 => {
            let mut m = Map::new();
            for i in 0..rng.below(6) {
                m.insert(format!("k{i}"), nasty(rng, depth + 1));
            }
            Value::Object(m)
        }
        7 if depth < 3 => Value::Array((0..rng.below(6)).map(|_| nasty(rng, depth + 1)).collect()),
        8 => json!(rng.next() as i64),
        9 => json!(""),
        _ => json!("text"),
    }
}

/// Replaces a random node of `v` (or adds a key) with something nasty.
fn mutate_value(rng: &mut Rng, v: &mut Value, depth: usize) {
    match v {
        Value::Object(m) if !m.is_empty() && depth < 6 && !rng.chance(4) => {
            let i = rng.below(m.len());
            let key = m.keys().nth(i).cloned().unwrap_or_default();
            match rng.below(5) {
                0 => {
                    m.shift_remove(&key);
                }
                1 => {
                    m.insert(format!("{key}{}", rng.below(3)), nasty(rng, 0));
                }
                _ => {
                    if let Some(child) = m.get_mut(&key) {
                        mutate_value(rng, child, depth + 1);
                    }
                }
            }
        }
        Value::Array(a) if !a.is_empty() && depth < 6 && !rng.chance(4) => {
            let i = rng.below(a.len());
            mutate_value(rng, &mut a[i], depth + 1);
        }
        _ => *v = nasty(rng, 0),
    }
}

/// A mutated message: JSON-aware most of the time, raw bytes otherwise.
fn mutate(rng: &mut Rng, seeds: &[String]) -> Vec<u8> {
    let seed = &seeds[rng.below(seeds.len())];
    if rng.below(10) < 7 {
        if let Ok(mut v) = serde_json::from_str::<Value>(seed) {
            for _ in 0..1 + rng.below(3) {
                mutate_value(rng, &mut v, 0);
            }
            return serde_json::to_vec(&v).unwrap();
        }
    }
    let mut b = seed.as_bytes().to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = b.len().max(1);
        match rng.below(6) {
            0 => {
                let i = rng.below(len);
                if i < b.len() {
                    b[i] ^= 1 << rng.below(8);
                }
            }
            1 => {
                let i = rng.below(len);
                b.insert(i.min(b.len()), rng.next() as u8);
            }
            2 => b.truncate(rng.below(len)),
            3 => {
                let (i, j) = (rng.below(len), rng.below(len));
                let (i, j) = (i.min(j).min(b.len()), i.max(j).min(b.len()));
                let piece = b[i..j].to_vec();
                b.splice(i..i, piece);
            }
            4 => {
                let other = &seeds[rng.below(seeds.len())];
                let cut = rng.below(other.len().max(1)).min(other.len());
                b.truncate(rng.below(len).min(b.len()));
                b.extend_from_slice(&other.as_bytes()[cut..]);
            }
            _ => {
                let i = rng.below(len).min(b.len());
                b.insert(
                    i,
                    [b'{', b'}', b'[', b']', b'"', b',', b':', b'\\'][rng.below(8)],
                );
            }
        }
    }
    b
}

/// Reads lines back through the real line reader, in reads of random sizes.
struct Chunked {
    data: Vec<u8>,
    at: usize,
    step: usize,
}

impl tokio::io::AsyncRead for Chunked {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let n = self
            .step
            .min(self.data.len() - self.at)
            .min(buf.remaining());
        let at = self.at;
        buf.put_slice(&self.data[at..at + n]);
        self.at += n;
        std::task::Poll::Ready(Ok(()))
    }
}

#[test]
fn framing_returns_every_line_or_says_it_was_too_long() {
    let mut rng = Rng(seed());
    let seeds = corpus();
    let cases = env_u64("FUZZ_CASES", 3000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for case in 0..cases {
        let mut data = Vec::new();
        for _ in 0..rng.below(8) {
            data.extend(mutate(&mut rng, &seeds));
            match rng.below(4) {
                0 => data.extend_from_slice(b"\r\n"),
                1 => {}
                _ => data.push(b'\n'),
            }
        }
        let max = 16 + rng.below(400);
        let step = 1 + rng.below(64);
        let expected: Vec<String> = {
            let mut segments: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
            if segments.last().is_some_and(|s| s.is_empty()) {
                segments.pop();
            }
            // The last line, cut short by the end of input, keeps a trailing `\r`
            // (found by fuzz/ framing): only a line ended by `\n` loses one.
            let unterminated = !data.is_empty() && !data.ends_with(b"\n");
            let count = segments.len();
            segments
                .into_iter()
                .enumerate()
                .map(|(i, s)| match s.len() > max {
                    true => format!("too long: {}", s.len()),
                    false => {
                        let s = match unterminated && i + 1 == count {
                            true => s,
                            false => s.strip_suffix(b"\r").unwrap_or(s),
                        };
                        format!("line: {}", String::from_utf8_lossy(s))
                    }
                })
                .collect()
        };
        let got: Vec<String> = rt.block_on(async {
            let mut reader = tokio::io::BufReader::with_capacity(
                8 + rng.below(128),
                Chunked {
                    data: data.clone(),
                    at: 0,
                    step,
                },
            );
            let mut out = Vec::new();
            while let Some(line) = jsonrpc::read_line(&mut reader, max).await.unwrap() {
                out.push(match line {
                    Line::Message(m) => format!("line: {}", String::from_utf8_lossy(&m)),
                    Line::TooLong(n) => format!("too long: {n}"),
                });
            }
            out
        });
        assert_eq!(
            got,
            expected,
            "case {case}: {:?}",
            String::from_utf8_lossy(&data)
        );
        // Whatever a line holds, telling what it is never panics.
        for line in &got {
            if let Ok(v) = serde_json::from_str::<Value>(line.trim_start_matches("line: ")) {
                let _ = jsonrpc::classify(&v);
                let _ = jsonrpc::usable_id(&v);
            }
        }
    }
}

/// Found by the coverage-guided framing target (fuzz/): a last line ended by the
/// end of input, not by `\n`, comes back with its trailing `\r`.
#[test]
fn framing_keeps_the_carriage_return_of_an_unterminated_last_line() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let lines: Vec<Vec<u8>> = rt.block_on(async {
        let mut reader = tokio::io::BufReader::new(&b"a\r\nx\r"[..]);
        let mut out = Vec::new();
        while let Some(line) = jsonrpc::read_line(&mut reader, 64).await.unwrap() {
            match line {
                Line::Message(m) => out.push(m),
                Line::TooLong(n) => panic!("too long: {n}"),
            }
        }
        out
    });
    assert_eq!(lines, vec![b"a".to_vec(), b"x\r".to_vec()]);
}

/// The pipeline's catalogue for the fuzzer: a closed 20-property schema with an
/// alias and a pin, a nested one, and a parameterless tool; reject mode.
fn fuzz_catalogue() -> (warden_core::Catalogue, warden_core::LayeredPolicy) {
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
    let tool_wide = Overrides {
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
    policy
        .tools
        .insert((String::new(), "wide".into()), tool_wide);
    let (catalogue, problems) = warden_core::Catalogue::from_tools(&tools, &policy);
    assert!(problems.is_empty(), "{problems:?}");
    (catalogue, policy)
}

#[test]
fn the_pipeline_never_forwards_what_the_tool_did_not_declare() {
    use std::sync::Arc;
    use warden_core::{Caller, Outcome, Pipeline, Session};
    let mut rng = Rng(seed());
    let (catalogue, _) = fuzz_catalogue();
    let pipeline = Pipeline::new();
    let session = Session::new(Arc::new(|_: &warden_core::UnknownKeyWarning| {}));
    let me = Caller::new("fuzz");
    let seeds = [
        json!({"name": "wide", "arguments": {"p0": "x", "p1": 2, "p2": true, "p3": "a", "reason": "r"}}),
        json!({"name": "wide", "arguments": {"p0": "x", "alias1": 3, "p19": "b"}}),
        json!({"name": "nested", "arguments": {"filter": {"owner": "o", "ids": [1, 2]}, "text": "t"}, "_meta": {"progressToken": 1}}),
        json!({"name": "bare", "arguments": {}}),
        json!({"name": "absent", "arguments": {"a": 1}}),
    ];
    let declared = |tool: &str| -> Vec<String> {
        catalogue
            .tools()
            .iter()
            .find(|t| t.name == tool)
            .map(|t| t.params.clone())
            .unwrap_or_default()
    };
    for case in 0..env_u64("FUZZ_CASES", 3000) {
        let mut call = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(4) {
            mutate_value(&mut rng, &mut call, 0);
        }
        let verdict = pipeline.check(&catalogue, &session, Some(&me), call.clone());
        let again = pipeline.check(&catalogue, &session, Some(&me), call.clone());
        match (&verdict.outcome, &again.outcome) {
            (Outcome::Forward(f), Outcome::Forward(g)) => {
                assert_eq!(f.arguments, g.arguments, "case {case}: not deterministic");
                let allowed = declared(&f.tool.name);
                for key in f.arguments.keys() {
                    assert!(
                        allowed.contains(key),
                        "case {case}: '{key}' was forwarded to {} though undeclared: {call}",
                        f.tool.name
                    );
                }
                if f.tool.name == "wide" {
                    assert_eq!(
                        f.arguments.get("p19"),
                        Some(&json!("a")),
                        "case {case}: pin lost"
                    );
                }
            }
            (Outcome::Answer { answer: a, .. }, Outcome::Answer { answer: b, .. }) => {
                assert_eq!(a, b, "case {case}: not deterministic");
                let text = a.text();
                assert!(!text.is_empty(), "case {case}: an empty answer");
                assert!(
                    text.chars().count() < 20_000,
                    "case {case}: an unbounded answer"
                );
                assert!(
                    !text.contains('\u{1b}'),
                    "case {case}: an escape character reached the caller: {text:?}"
                );
            }
            _ => panic!("case {case}: the same call was decided two ways: {call}"),
        }
    }
}

#[test]
fn the_gateway_answers_every_request_once_whatever_it_is_sent() {
    let mut rng = Rng(seed());
    let seeds = corpus();
    let toml = fixture_config("timeout_ms = 300", "");
    let mut w = Warden::start_in_process("fuzz-gateway", &toml);
    let cases = env_u64("FUZZ_GATEWAY_CASES", env_u64("FUZZ_CASES", 3000) / 5);
    let mut expected: HashSet<String> = HashSet::new();
    let mut answered: HashSet<String> = HashSet::new();
    let mut next = 0u64;
    let take = |line: &str, answered: &mut HashSet<String>| {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            panic!("the gateway wrote a line that is not JSON: {line}");
        };
        let is_response = matches!(jsonrpc::classify(&v), Kind::Response { .. });
        if let (true, Some(id)) = (is_response, v["id"].as_str()) {
            if id.starts_with("fz-") {
                assert!(answered.insert(id.to_owned()), "answered twice: {line}");
            }
        }
    };
    let batch = 25;
    for start in (0..cases).step_by(batch) {
        for _ in start..(start + batch as u64).min(cases) {
            let mut bytes = mutate(&mut rng, &seeds);
            // One message per line: a newline inside would make it two.
            for b in bytes.iter_mut().filter(|b| **b == b'\n') {
                *b = b' ';
            }
            if let Ok(mut v) = serde_json::from_slice::<Value>(&bytes) {
                match jsonrpc::classify(&v) {
                    Kind::Request { .. } => {
                        next += 1;
                        let id = format!("fz-{next}");
                        v["id"] = json!(id);
                        expected.insert(id);
                        bytes = serde_json::to_vec(&v).unwrap();
                    }
                    // A cancellation may rightly leave one of ours unanswered.
                    Kind::Notification {
                        method: "notifications/cancelled",
                    } => {
                        v["method"] = json!("notifications/fuzzed");
                        bytes = serde_json::to_vec(&v).unwrap();
                    }
                    _ => {}
                }
            }
            bytes.push(b'\n');
            w.send_raw(&bytes);
        }
        // Still alive: a ping of ours is answered, and everything sent so far too.
        next += 1;
        let live = format!("fz-{next}");
        expected.insert(live.clone());
        w.send(&json!({"jsonrpc": "2.0", "id": live, "method": "ping"}));
        let deadline = std::time::Instant::now() + PATIENCE;
        while !expected.is_subset(&answered) {
            assert!(
                std::time::Instant::now() < deadline,
                "unanswered after {PATIENCE:?}: {:?}",
                expected.difference(&answered).take(5).collect::<Vec<_>>()
            );
            if let Some(line) = w.try_recv_line(Duration::from_millis(200)) {
                take(&line, &mut answered);
            }
        }
    }
    // Late duplicates would show up now.
    while let Some(line) = w.try_recv_line(Duration::from_millis(500)) {
        take(&line, &mut answered);
    }
    assert_eq!(answered.len(), expected.len());
    eprintln!(
        "fuzz: {cases} messages, {} requests answered once each",
        expected.len()
    );
}
