//! Chaos: the real binary in front of three misbehaving upstreams, one client
//! pipelining a few thousand `tools/call`s drawn from a seeded generator. The
//! upstreams crash, hang past the timeout and answer late anyway, freeze, write
//! garbage, answer twice, flood unsolicited messages and answer with results that
//! are no objects; the client also sends unknown tools and invalid arguments.
//! One start in four of an upstream dies while it lists its tools, and every
//! upstream refuses requests that come before its handshake finished, so a
//! restart that goes wrong, or traffic that runs ahead of one, shows too.
//!
//! What must hold, whatever the mix: every request is answered exactly once, and
//! with an answer its kind allows (an echo never gets another call's text, a
//! double answer never shows its second half); the gateway stays up and serves
//! each upstream afterwards; it is left with one child per upstream, the
//! descriptors it had after start-up, and an RSS under a bound throughout.
//!
//! `CHAOS_CALLS` (default 2000) sets the size, `CHAOS_SEED` replays a run: the
//! seed is printed first, the figures the run produced at the end (see them with
//! `-- --nocapture`). `CHAOS_LOG=file` keeps the gateway's log, at the level
//! `CHAOS_RUST_LOG` says (default `warn`).

mod chaos_mix;
mod common;

use chaos_mix::*;
use common::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

const UPSTREAMS: [&str; 3] = ["a", "b", "c"];
/// Requests the client keeps in flight at once.
const IN_FLIGHT: usize = 16;
/// The gateway's RSS must stay under this at every sample.
const RSS_LIMIT_KIB: u64 = 60 * 1024;
/// Descriptors the gateway may hold beyond its count after start-up (a metrics
/// connection still closing, a blocking-pool thread's handle).
const FD_MARGIN: usize = 4;
/// No answer for this long, with calls outstanding, ends the run: they are missing.
const STALL: Duration = Duration::from_secs(20);
/// Far beyond a healthy run on a busy 2-core machine (a few ms a call): only a
/// gateway that keeps answering something but never finishes reaches it.
fn hard_limit(calls: u64) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(10 * calls)
}

/// What /proc says about a process, by pid.
mod procfs {
    /// (pid, state, command name) of every process whose parent is `parent`.
    pub fn children(parent: u32) -> Vec<(u32, char, String)> {
        let mut out = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return out;
        };
        for entry in dir.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if let Some((ppid, state, comm)) = stat(pid) {
                if ppid == parent {
                    out.push((pid, state, comm));
                }
            }
        }
        out
    }

    /// (parent pid, state, command name) from /proc/<pid>/stat.
    pub fn stat(pid: u32) -> Option<(u32, char, String)> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name is in parentheses and may hold anything: split after the last ')'.
        let open = text.find('(')?;
        let close = text.rfind(')')?;
        let comm = text[open + 1..close].to_owned();
        let mut rest = text[close + 1..].split_whitespace();
        let state = rest.next()?.chars().next()?;
        let ppid = rest.next()?.parse().ok()?;
        Some((ppid, state, comm))
    }

    /// A number field (in kB for sizes) of /proc/<pid>/status.
    pub fn status(pid: u32, field: &str) -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = text.lines().find(|l| l.starts_with(field))?;
        line[field.len()..]
            .trim_start_matches(':')
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// The children of `parent` once there are `want`, none of them a zombie (a
    /// child just ended may take a moment to be reaped), or as they are after 10 s.
    pub fn settled_children(parent: u32, want: usize) -> Vec<(u32, char, String)> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let now = children(parent);
            if (now.len() == want && now.iter().all(|c| c.1 != 'Z'))
                || std::time::Instant::now() > deadline
            {
                return now;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    pub fn fds(pid: u32) -> usize {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0)
    }
}

/// `name{labels} value` lines of one metric, as (labels, value).
fn metric(text: &str, name: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|l| {
            let (labels, value) = l.rsplit_once("} ")?;
            Some((labels.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}")),
    )
}

/// Calls `up`'s echo until it answers: after the chaos an upstream may still be
/// restarting, or frozen until enough timeouts in a row give up on it.
fn echo_until_back(w: &mut Warden, up: &str, calls: &mut u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let want = format!(r#"{{"text":"back on {up}"}}"#);
    loop {
        *calls += 1;
        let r = w.call(
            &format!("{up}.echo"),
            json!({"text": format!("back on {up}")}),
        );
        if r.pointer("/result/content/0/text").and_then(Value::as_str) == Some(want.as_str()) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{up}.echo still fails after 30 s: {r}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn thousands_of_calls_against_misbehaving_upstreams() {
    let total = env_u64("CHAOS_CALLS").unwrap_or(2000);
    let seed = env_u64("CHAOS_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    });
    println!(
        "chaos: {total} calls, seed {seed} (CHAOS_SEED={seed} CHAOS_CALLS={total} replays it)"
    );
    let mut rng = Rng(seed);

    let port = free_port();
    let mut toml = String::new();
    for up in UPSTREAMS {
        // restart_after_timeouts = 3: a frozen upstream is given up after three
        // calls in a row time out; the liveness ping is frequent, so a freeze
        // nobody calls into is noticed too.
        toml.push_str(&format!(
            "[[upstream]]\nname = \"{up}\"\ncommand = [\"{{fixture}}\"]\ntimeout_ms = {TIMEOUT_MS}\n\
             restart_after_timeouts = 3\nping_interval_ms = 1000\n\
             env = {{ FIXTURE_CHAOS = \"1\", FIXTURE_FREEZE_TOOL = \"1\", FIXTURE_MALFORMED = \"1\", \
             FIXTURE_STRICT_INIT = \"1\", FIXTURE_FLAKY_START = \"4\" }}\n"
        ));
    }
    toml.push_str(&format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"));
    let level = std::env::var("CHAOS_RUST_LOG").unwrap_or_else(|_| "warn".into());
    let mut w = Warden::start_capturing_stderr("chaos", &toml, &level);
    let pid = w.pid();

    // Start-up figures, once every upstream has served a call and metrics were read.
    let mut extra_calls = 0u64;
    for up in UPSTREAMS {
        echo_until_back(&mut w, up, &mut extra_calls).expect("a fresh upstream answers");
    }
    metrics_text(port);
    let children_before = procfs::settled_children(pid, UPSTREAMS.len());
    assert_eq!(
        children_before.len(),
        UPSTREAMS.len(),
        "one child per upstream after start-up: {children_before:?}"
    );
    std::thread::sleep(Duration::from_millis(200));
    let fds_before = procfs::fds(pid);
    let threads_before = procfs::status(pid, "Threads").unwrap_or(0);
    let rss_before = procfs::status(pid, "VmRSS").unwrap_or(0);

    let mut calls: HashMap<i64, Call> = HashMap::new();
    let mut tokens: HashMap<String, i64> = HashMap::new();
    let mut violations: Vec<String> = Vec::new();
    let mut notifications: BTreeMap<String, u64> = BTreeMap::new();
    let mut late_progress = 0u64;
    let mut seen_children: HashSet<u32> = children_before.iter().map(|c| c.0).collect();
    let mut peak_children = children_before.len();
    let mut peak_rss = rss_before;
    let mut rss_samples = 0u64;
    let mut sent = 0u64;
    let mut in_flight = 0usize;
    let started = Instant::now();
    let mut last_answer = Instant::now();
    let mut last_sample = Instant::now() - Duration::from_secs(1);
    let mut stalled = false;

    while sent < total || in_flight > 0 {
        while in_flight < IN_FLIGHT && sent < total {
            let kind = rng.kind();
            let up = UPSTREAMS[rng.below(UPSTREAMS.len() as u64) as usize];
            let (params, expect) = draw(kind, up, sent, &mut rng);
            let token = params
                .pointer("/_meta/progressToken")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let id = w.send_request("tools/call", params);
            if let Some(token) = token {
                tokens.insert(token, id);
            }
            calls.insert(
                id,
                Call {
                    kind,
                    expect,
                    answers: 0,
                    got: None,
                },
            );
            sent += 1;
            in_flight += 1;
        }
        if last_sample.elapsed() >= Duration::from_millis(100) {
            last_sample = Instant::now();
            if let Some(rss) = procfs::status(pid, "VmRSS") {
                peak_rss = peak_rss.max(rss);
                rss_samples += 1;
            }
            if rss_samples % 5 == 0 {
                let now = procfs::children(pid);
                peak_children = peak_children.max(now.len());
                seen_children.extend(now.iter().map(|c| c.0));
            }
        }
        if started.elapsed() > hard_limit(total) || last_answer.elapsed() > STALL {
            stalled = true;
            break;
        }
        let Some(line) = w.try_recv_line(Duration::from_millis(100)) else {
            continue;
        };
        let msg: Value = match serde_json::from_str(&line) {
            Ok(m) => m,
            Err(e) => {
                violations.push(format!(
                    "the gateway wrote a line that is not JSON ({e}): {line}"
                ));
                continue;
            }
        };
        if let Some(method) = msg.get("method").and_then(Value::as_str) {
            *notifications.entry(method.to_owned()).or_default() += 1;
            if msg.get("id").is_some() {
                violations.push(format!(
                    "a request reached the client, though no tool in the mix asks it anything: {msg}"
                ));
            }
            if method == "notifications/progress" {
                let token = msg.pointer("/params/progressToken").and_then(Value::as_str);
                match token.and_then(|t| calls.get(tokens.get(t)?)) {
                    None => violations.push(format!(
                        "progress for a token this client never used: {msg}"
                    )),
                    // Counted, not failed: the spec wants none after the answer, but a
                    // call that timed out may see its last relayed step race its answer.
                    Some(c) if c.answers > 0 => late_progress += 1,
                    Some(_) => {}
                }
            }
            continue;
        }
        let Some(id) = msg.get("id").and_then(Value::as_i64) else {
            violations.push(format!(
                "a response without one of this client's ids: {msg}"
            ));
            continue;
        };
        let Some(call) = calls.get_mut(&id) else {
            violations.push(format!(
                "a response to id {id}, which was never sent: {msg}"
            ));
            continue;
        };
        call.answers += 1;
        if call.answers > 1 {
            violations.push(format!("id {id} ({:?}) answered again: {msg}", call.kind));
            continue;
        }
        in_flight -= 1;
        last_answer = Instant::now();
        let got = Got::of(&msg);
        if !got.allowed_by(&call.expect) {
            violations.push(format!(
                "id {id} ({:?}, expecting {:?}) got {msg}",
                call.kind, call.expect
            ));
        }
        call.got = Some(got.class());
    }
    let run_time = started.elapsed();
    let missing: Vec<(i64, Kind)> = {
        let mut m: Vec<_> = calls
            .iter()
            .filter(|(_, c)| c.answers == 0)
            .map(|(id, c)| (*id, c.kind))
            .collect();
        m.sort();
        m
    };
    if !missing.is_empty() {
        violations.push(format!(
            "{} of {sent} calls never answered (stalled: {stalled}), first ones: {:?}",
            missing.len(),
            &missing[..missing.len().min(20)]
        ));
    }

    // Afterwards: alive, every upstream serving again.
    let ping = w.request("ping", json!({}));
    if ping.get("result") != Some(&json!({})) {
        violations.push(format!("ping after the chaos: {ping}"));
    }
    for up in UPSTREAMS {
        if let Err(e) = echo_until_back(&mut w, up, &mut extra_calls) {
            violations.push(e);
        }
    }
    // Anything that came meanwhile: a late second answer to a chaos call would be here.
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Some(line) = w.try_recv_line(Duration::from_millis(300)) {
        if Instant::now() > deadline {
            violations.push("the gateway still writes 5 s after the last call".into());
            break;
        }
        match serde_json::from_str(&line) {
            Ok(msg) => w.backlog.push(msg),
            Err(e) => violations.push(format!(
                "the gateway wrote a line that is not JSON ({e}): {line}"
            )),
        }
    }
    for msg in std::mem::take(&mut w.backlog) {
        let id = msg.get("id").and_then(Value::as_i64);
        match id.and_then(|id| calls.get(&id)) {
            Some(c) if msg.get("method").is_none() => {
                violations.push(format!("a late answer to {:?} id {id:?}: {msg}", c.kind))
            }
            _ => {
                let method = msg.get("method").and_then(Value::as_str).unwrap_or("?");
                *notifications.entry(method.to_owned()).or_default() += 1;
            }
        }
    }

    // Nothing leaked: one live child per upstream, the start-up descriptors (a
    // connection just closed may take a moment to let go of its pipes).
    let children = procfs::settled_children(pid, UPSTREAMS.len());
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut fds_after = procfs::fds(pid);
    while fds_after > fds_before + FD_MARGIN && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        fds_after = procfs::fds(pid);
    }
    seen_children.extend(children.iter().map(|c| c.0));
    let threads_after = procfs::status(pid, "Threads").unwrap_or(0);
    let rss_after = procfs::status(pid, "VmRSS").unwrap_or(0);
    peak_rss = peak_rss.max(rss_after);
    if children.len() != UPSTREAMS.len() || children.iter().any(|c| c.1 == 'Z') {
        violations.push(format!(
            "the gateway has {} children, {} expected: {children:?}",
            children.len(),
            UPSTREAMS.len()
        ));
    }
    if fds_after > fds_before + FD_MARGIN {
        violations.push(format!(
            "the gateway holds {fds_after} descriptors, {fds_before} after start-up"
        ));
    }
    if peak_rss > RSS_LIMIT_KIB {
        violations.push(format!(
            "the gateway's RSS reached {peak_rss} KiB, over {RSS_LIMIT_KIB}"
        ));
    }

    // Every call settled exactly once: the metrics count one per call.
    let metrics = metrics_text(port);
    let settled: u64 = metric(&metrics, "warden_calls_total")
        .iter()
        .map(|(_, n)| n)
        .sum();
    if settled != sent + extra_calls {
        violations.push(format!(
            "the metrics count {settled} settled calls; the client made {}",
            sent + extra_calls
        ));
    }
    let restarts = metric(&metrics, "warden_upstream_restarts_total");

    // A clean exit, every child gone with it, no task panicked.
    let log = w.stderr_after_exit();
    if let Ok(path) = std::env::var("CHAOS_LOG") {
        std::fs::write(&path, &log).expect("write CHAOS_LOG");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let survivors = loop {
        let alive: Vec<u32> = seen_children
            .iter()
            .copied()
            .filter(|p| {
                procfs::stat(*p).is_some_and(|(_, state, comm)| {
                    state != 'Z' && comm.starts_with("warden-fixture")
                })
            })
            .collect();
        if alive.is_empty() || Instant::now() > deadline {
            break alive;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    if !survivors.is_empty() {
        violations.push(format!(
            "upstream children outlived the gateway: {survivors:?}"
        ));
    }
    if log.contains("panicked") {
        violations.push(format!(
            "a gateway task panicked:\n{}",
            log.lines()
                .filter(|l| l.contains("panicked"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }

    // The figures.
    let mut by_kind: BTreeMap<Kind, BTreeMap<&str, u64>> = BTreeMap::new();
    let mut by_class: BTreeMap<&str, u64> = BTreeMap::new();
    for c in calls.values() {
        let class = c.got.unwrap_or("missing");
        *by_kind.entry(c.kind).or_default().entry(class).or_default() += 1;
        *by_class.entry(class).or_default() += 1;
    }
    println!(
        "chaos: {sent} calls in {:.1} s, {} answered, {} missing, {} violations",
        run_time.as_secs_f64(),
        sent - missing.len() as u64,
        missing.len(),
        violations.len()
    );
    println!("chaos: answers by class: {by_class:?}");
    println!(
        "chaos: {:<12} {:>5}  {:>5} {:>10} {:>8} {:>9}",
        "kind", "sent", "ok", "tool_error", "internal", "rpc_error"
    );
    for (kind, classes) in &by_kind {
        let n = |k: &str| classes.get(k).copied().unwrap_or(0);
        println!(
            "chaos: {:<12} {:>5}  {:>5} {:>10} {:>8} {:>9}",
            format!("{kind:?}"),
            classes.values().sum::<u64>(),
            n("ok"),
            n("tool_error"),
            n("internal"),
            n("rpc_error")
        );
    }
    println!("chaos: notifications to the client: {notifications:?}; progress after its answer: {late_progress}");
    println!("chaos: restarts: {restarts:?}");
    println!(
        "chaos: RSS {rss_before} KiB after start-up, peak {peak_rss} KiB over {rss_samples} samples, {rss_after} KiB at the end (limit {RSS_LIMIT_KIB})"
    );
    println!("chaos: descriptors {fds_before} after start-up, {fds_after} at the end; threads {threads_before} → {threads_after}");
    println!(
        "chaos: children {} after start-up, {} at the end, at most {peak_children} seen at once, {} distinct over the run",
        children_before.len(),
        children.len(),
        seen_children.len()
    );
    println!(
        "chaos: log: {} lines, {} skipped non-JSON upstream lines, {} stuck upstreams",
        log.lines().count(),
        log.matches("skipped a message that is not JSON").count(),
        log.matches("is stuck").count()
    );
    assert!(
        violations.is_empty(),
        "seed {seed}: {} violations:\n{}",
        violations.len(),
        violations
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
