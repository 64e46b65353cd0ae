//! End-to-end cost of the gateway over stdio (docs/behaviour.md, performance
//! bar), measured against a direct call in the same run:
//!
//! - N sequential `tools/call` round trips from one client to a stdio echo upstream,
//!   directly and through `mcp-warden run` (validation on), interleaved in rounds so
//!   machine noise hits both alike; prints median and p99 of each and the added median.
//! - The same gateway with ten argument rules (G6) on the called tool, beside the
//!   one without, in the same rounds.
//! - The same round trips with a quota and a flow rule applying to every call
//!   (Q1-Q3, F1-F4), beside the gateway without them, interleaved.
//! - Resident memory of the gateway with 3 upstreams and 300+ tools.
//!
//! `cargo bench -p mcp-warden --bench relay` (N defaults to 2000; set RELAY_N).

mod common;
use common::{psql, rss_kib};

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const WARDEN: &str = env!("CARGO_BIN_EXE_mcp-warden");
/// Calls per measurement come in this many interleaved rounds.
const ROUNDS: usize = 20;
const FIXTURE: &str = env!("CARGO_BIN_EXE_warden-fixture-upstream");

struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Peer {
    fn spawn(cmd: &mut Command) -> Peer {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut p = Peer {
            child,
            stdin,
            stdout,
            next: 1,
        };
        p.rpc("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}));
        writeln!(
            p.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
        p
    }

    fn rpc(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        writeln!(
            self.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        )
        .unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "peer closed");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("id") == Some(&json!(id)) {
                return v;
            }
        }
    }

    /// One call carrying a fresh idempotency key (so the ledger claims and finishes it).
    fn time_keyed_call(&mut self, tool: &str, key: usize) -> Duration {
        let t = Instant::now();
        let r = self.rpc(
            "tools/call",
            json!({"name": tool, "arguments": {"text": "hello", "n": 42, "flag": true},
                   "_meta": {"warden/idempotencyKey": format!("bench-{key}")}}),
        );
        let d = t.elapsed();
        assert!(r.pointer("/result/content").is_some(), "call failed: {r}");
        d
    }

    fn time_call(&mut self, tool: &str) -> Duration {
        let t = Instant::now();
        let r = self.rpc(
            "tools/call",
            json!({"name": tool, "arguments": {"text": "hello", "n": 42, "flag": true}}),
        );
        let d = t.elapsed();
        assert!(r.get("result").is_some(), "call failed: {r}");
        d
    }
}

impl Peer {
    /// The process's CPU time so far, in µs.
    fn cpu_us(&self) -> f64 {
        cpu_ns(self.child.id()) as f64 / 1e3
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time a process has used so far, all its threads together, in
/// nanoseconds (Linux's schedstat; 0 when unknown). Unlike a latency, it hardly
/// depends on which core the process and its peers were given, so two gateways
/// compare by it even when their round trips differ by scheduling alone.
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    (
        us(v[v.len() / 2]),
        us(v[(v.len() * 99 / 100).min(v.len() - 1)]),
    )
}

fn config(dir: &std::path::Path, body: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("warden.toml");
    std::fs::write(&path, body).unwrap();
    path
}

/// A relay that copies lines both ways without reading them (two threads, blocking
/// pipes): the floor any stdio gateway pays for the two extra pipe hops.
fn null_relay(program: &str) {
    let mut child = Command::new(program)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut to_child = child.stdin.take().unwrap();
    let from_child = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        let mut out = std::io::stdout().lock();
        for line in from_child.lines() {
            let Ok(line) = line else { break };
            if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
                break;
            }
        }
    });
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if writeln!(to_child, "{line}")
            .and_then(|_| to_child.flush())
            .is_err()
        {
            break;
        }
    }
    drop(to_child);
    let _ = child.wait();
}

/// A collector that takes every OTLP request (200, body discarded); its address.
fn otlp_sink() -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = listener.local_addr().expect("an address").to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                    if reader.get_mut().write_all(ok).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // cargo bench -- --list
    }
    if std::env::args().nth(1).as_deref() == Some("--null-relay") {
        return null_relay(FIXTURE);
    }
    let n: usize = std::env::var("RELAY_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let dir = std::env::temp_dir().join(format!("warden-relay-bench-{}", std::process::id()));
    let cfg = config(
        &dir,
        &format!("[defaults]\nvalidate = true\n[[upstream]]\nname = \"fx\"\ncommand = [\"{FIXTURE}\"]\nunknown_arguments = \"reject\"\n"),
    );

    let mut gated = relay(n, &dir, &cfg);
    traces(n, &dir, &cfg);
    policy(n, &dir, &cfg);
    stores(n, &dir, &mut gated);
    drop(gated);
    memory(&dir);
    let _ = std::fs::remove_dir_all(dir);
}

/// Sequential calls direct, through a null relay, through the gateway, and
/// through the gateway with ten argument rules, interleaved; returns the plain
/// gateway, still running (the store section compares against it).
fn relay(n: usize, dir: &Path, cfg: &Path) -> Peer {
    // Ten rules on fx.echo's arguments, each read on every call: nine denies the
    // call misses, then the allow it meets.
    let ten_rules = [
        r#"effect = "deny"
when = [{ arg = "text", regex = "(?i)drop" }]"#,
        r#"effect = "deny"
when = [{ arg = "n", min = 1000 }]"#,
        r#"effect = "deny"
when = [{ arg = "text", glob = "*rm -rf*" }]"#,
        r#"effect = "deny"
when = [{ arg = "flag", equals = false }]"#,
        r#"effect = "deny"
when = [{ arg = "text", one_of = ["a", "b", "c"] }]"#,
        r#"effect = "deny"
when = [{ arg = "n", max = -1 }]"#,
        r#"effect = "deny"
when = [{ arg = "text", min_len = 1000 }]"#,
        r#"effect = "deny"
when = [{ arg = "text", present = false }]"#,
        r#"effect = "deny"
when_any = [{ arg = "n", one_of = [1, 2, 3] }, { arg = "n", equals = 7 }]"#,
        r#"effect = "allow"
when = [{ arg = "n", min = 0, max = 100 }, { arg = "text", max_len = 100 }]"#,
    ]
    .map(|r| format!("[[rule]]\ncallers = [\"*\"]\ntools = [\"fx.echo\"]\n{r}\n"))
    .concat();
    let ruled_cfg = config(
        &dir.join("ruled"),
        &format!("[defaults]\nvalidate = true\n{ten_rules}[[upstream]]\nname = \"fx\"\ncommand = [\"{FIXTURE}\"]\nunknown_arguments = \"reject\"\n"),
    );
    let me = std::env::current_exe().expect("own path");
    let mut direct = Peer::spawn(&mut Command::new(FIXTURE));
    let mut null = Peer::spawn(Command::new(&me).arg("--null-relay"));
    let mut gated = Peer::spawn(
        Command::new(WARDEN)
            .args(["run", "--config"])
            .arg(cfg)
            .env("RUST_LOG", "error"),
    );
    let mut ruled = Peer::spawn(
        Command::new(WARDEN)
            .args(["run", "--config"])
            .arg(&ruled_cfg)
            .env("RUST_LOG", "error"),
    );
    for _ in 0..200 {
        direct.time_call("echo");
        null.time_call("echo");
        gated.time_call("fx.echo");
        ruled.time_call("fx.echo");
    }
    let (mut d, mut z, mut g, mut rl) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for _ in 0..ROUNDS {
        for _ in 0..n / ROUNDS {
            d.push(direct.time_call("echo"));
        }
        for _ in 0..n / ROUNDS {
            z.push(null.time_call("echo"));
        }
        for _ in 0..n / ROUNDS {
            g.push(gated.time_call("fx.echo"));
        }
        for _ in 0..n / ROUNDS {
            rl.push(ruled.time_call("fx.echo"));
        }
    }
    let (dm, dp) = stats(d);
    let (rm, rp) = stats(rl);
    let (zm, zp) = stats(z);
    let (gm, gp) = stats(g);
    println!(
        "stdio relay, {n} sequential tools/call round trips each, echo upstream, validation on:"
    );
    println!("  direct to upstream   : median {dm:8.1} µs   p99 {dp:8.1} µs");
    println!("  through a null relay : median {zm:8.1} µs   p99 {zp:8.1} µs   (copies lines, reads nothing)");
    println!("  through mcp-warden   : median {gm:8.1} µs   p99 {gp:8.1} µs");
    println!(
        "  added by mcp-warden  : median {:8.1} µs over direct (target ≤ 50 µs), ratio {:.2}x",
        gm - dm,
        gm / dm
    );
    println!(
        "    of which pipe hops : median {:8.1} µs (null relay over direct)",
        zm - dm
    );
    println!(
        "    gateway's own work : median {:8.1} µs (mcp-warden over null relay)",
        gm - zm
    );
    println!("  ten argument rules   : median {rm:8.1} µs   p99 {rp:8.1} µs   (+{:.1} µs over none, ratio {:.3}x)", rm - gm, rm / gm);
    drop(null);
    drop(ruled);
    gated
}

/// Traces off, on with sampling ratio 0, and on for every call, interleaved.
fn traces(n: usize, dir: &Path, cfg: &Path) {
    // Traces: the gateway above has them off (the default). The same gateway with
    // traces on (every call recorded and exported to a collector that takes
    // everything), and on with a sampling ratio of 0 (nothing recorded), interleaved
    // with it: what traces cost when on, and that off is the plain gateway.
    let sink = otlp_sink();
    let traced_cfg = |name: &str, ratio: f64| {
        config(
            &dir.join(name),
            &format!("[defaults]\nvalidate = true\n[traces]\nendpoint = \"http://{sink}\"\nsampling_ratio = {ratio}\n[[upstream]]\nname = \"fx\"\ncommand = [\"{FIXTURE}\"]\nunknown_arguments = \"reject\"\n"),
        )
    };
    // Each comparison is against a plain gateway started together with the ones
    // compared: the gateway above, running since the start, answered faster than
    // any fresh process, and quotas measured against it read +60 µs instead of +15.
    let mut plain = gateway(cfg);
    let mut traced = gateway(&traced_cfg("traced", 1.0));
    let mut unsampled = gateway(&traced_cfg("unsampled", 0.0));
    for _ in 0..200 {
        plain.time_call("fx.echo");
        traced.time_call("fx.echo");
        unsampled.time_call("fx.echo");
    }
    let (mut off, mut on, mut zero) = (Vec::new(), Vec::new(), Vec::new());
    let cpu0 = [plain.cpu_us(), traced.cpu_us(), unsampled.cpu_us()];
    for _ in 0..ROUNDS {
        for _ in 0..n / ROUNDS {
            off.push(plain.time_call("fx.echo"));
        }
        for _ in 0..n / ROUNDS {
            on.push(traced.time_call("fx.echo"));
        }
        for _ in 0..n / ROUNDS {
            zero.push(unsampled.time_call("fx.echo"));
        }
    }
    let [oc, tc, uc] = [(&plain, cpu0[0]), (&traced, cpu0[1]), (&unsampled, cpu0[2])]
        .map(|(p, before)| (p.cpu_us() - before) / n as f64);
    let (om, op) = stats(off);
    let (tm, tp) = stats(on);
    let (um, up) = stats(zero);
    println!("traces, interleaved, {n} calls each (and the gateway's CPU time per call):");
    println!("  traces off (default) : median {om:8.1} µs   p99 {op:8.1} µs   cpu {oc:6.1} µs");
    println!(
        "  traces on, ratio 0   : median {um:8.1} µs   p99 {up:8.1} µs   cpu {uc:6.1} µs   ({:+.1} µs over off, cpu {:+.1})",
        um - om, uc - oc
    );
    println!(
        "  traces on, every call: median {tm:8.1} µs   p99 {tp:8.1} µs   cpu {tc:6.1} µs   ({:+.1} µs over off, cpu {:+.1})",
        tm - om, tc - oc
    );
    drop(traced);
    drop(unsampled);
    drop(plain);
}

/// Quotas and a flow rule on every call against the plain gateway, interleaved.
fn policy(n: usize, dir: &Path, cfg: &Path) {
    // Quotas and flows on: a rate and a concurrency quota and a flow rule apply to
    // every call (none refuses), interleaved with the gateway without them.
    let policy_cfg = config(
        &dir.join("policy"),
        &format!("[defaults]\nvalidate = true\n[[upstream]]\nname = \"fx\"\ncommand = [\"{FIXTURE}\"]\nunknown_arguments = \"reject\"\nlabels = {{ \"*\" = [\"private_data\"] }}\n\
                  [[quota]]\ncallers = [\"*\"]\ntools = [\"fx.*\"]\nrate = \"1000000/second\"\nconcurrency = 8\n\
                  [[flow]]\ntouched = [\"private_data\"]\ncalling = \"external_sink\"\neffect = \"deny\"\n"),
    );
    let mut policed = gateway(&policy_cfg);
    let mut plain = gateway(cfg);
    for _ in 0..200 {
        policed.time_call("fx.echo");
        plain.time_call("fx.echo");
    }
    let (mut off, mut on) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let cpu0 = [plain.cpu_us(), policed.cpu_us()];
    for _ in 0..ROUNDS {
        for _ in 0..n / ROUNDS {
            off.push(plain.time_call("fx.echo"));
        }
        for _ in 0..n / ROUNDS {
            on.push(policed.time_call("fx.echo"));
        }
    }
    let [oc, pc] = [(&plain, cpu0[0]), (&policed, cpu0[1])]
        .map(|(p, before)| (p.cpu_us() - before) / n as f64);
    let (om, op) = stats(off);
    let (pm, pp) = stats(on);
    println!(
        "quotas and flows, {n} calls each, interleaved (and the gateway's CPU time per call):"
    );
    println!(
        "  off                        : median {om:8.1} µs   p99 {op:8.1} µs   cpu {oc:6.1} µs"
    );
    println!(
        "  quota (rate + concurrency) and a flow rule on every call: median {pm:8.1} µs   p99 {pp:8.1} µs   cpu {pc:6.1} µs   ({:+.1} µs, cpu {:+.1})",
        pm - om, pc - oc
    );
    drop(policed);
    drop(plain);
}

/// The SQLite and PostgreSQL stores on (audit, ledger, quotas counted in the
/// store), interleaved with the store-off gateway `gated`.
fn stores(n: usize, dir: &Path, gated: &mut Peer) {
    // The same gateway with the SQLite store on: every call audited, and keyed calls
    // claimed and finished in the ledger. Interleaved with the store-off gateway.
    let db_dir = dir.join("store");
    std::fs::create_dir_all(&db_dir).unwrap();
    let pg_db = format!("warden_bench_{}", std::process::id());
    let mut stores = vec![(
        "SQLite, WAL",
        format!("sqlite://{}", db_dir.join("bench.db").display()),
    )];
    if psql(&format!("DROP DATABASE IF EXISTS {pg_db}"))
        && psql(&format!("CREATE DATABASE {pg_db}"))
    {
        stores.push((
            "PostgreSQL, loopback",
            format!("postgres://postgres@127.0.0.1:5432/{pg_db}"),
        ));
    } else {
        println!("(PostgreSQL on 127.0.0.1:5432 not reachable: its figures are skipped)");
    }
    let m = n / 2;
    for (label, url) in stores {
        let stored_cfg = config(
            &db_dir,
            &format!("[store]\nurl = \"{url}\"\n[[upstream]]\nname = \"fx\"\ncommand = [\"{FIXTURE}\"]\nunknown_arguments = \"reject\"\n"),
        );
        let mut stored = Peer::spawn(
            Command::new(WARDEN)
                .args(["run", "--config"])
                .arg(&stored_cfg)
                .env("RUST_LOG", "error"),
        );
        for i in 0..100 {
            stored.time_keyed_call("fx.echo", 1_000_000 + i);
        }
        // With PostgreSQL, quotas are counted in it (Q4): audited calls under a
        // rate and a concurrency quota and a flow rule, in the same ROUNDS.
        let mut quota = url.starts_with("postgres").then(|| {
            let quota_cfg = config(
                &db_dir.join("quota"),
                &format!("[store]\nurl = \"{url}\"\n[[upstream]]\nname = \"fx\"\ncommand = [\"{FIXTURE}\"]\nunknown_arguments = \"reject\"\nlabels = {{ \"*\" = [\"private_data\"] }}\n\
                          [[quota]]\ncallers = [\"*\"]\ntools = [\"fx.*\"]\nrate = \"1000000/second\"\nconcurrency = 8\n\
                          [[flow]]\ntouched = [\"private_data\"]\ncalling = \"external_sink\"\neffect = \"deny\"\n"),
            );
            let mut quota = Peer::spawn(
                Command::new(WARDEN)
                    .args(["run", "--config"])
                    .arg(&quota_cfg)
                    .env("RUST_LOG", "error"),
            );
            for _ in 0..100 {
                quota.time_call("fx.echo");
            }
            quota
        });
        let mut counted = Vec::new();
        let (mut off, mut audit_only, mut keyed) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..ROUNDS {
            if let Some(q) = quota.as_mut() {
                for _ in 0..m / ROUNDS {
                    counted.push(q.time_call("fx.echo"));
                }
            }
            for _ in 0..m / ROUNDS {
                off.push(gated.time_call("fx.echo"));
            }
            for _ in 0..m / ROUNDS {
                audit_only.push(stored.time_call("fx.echo"));
            }
            for i in 0..m / ROUNDS {
                keyed.push(stored.time_keyed_call("fx.echo", r * m + i));
            }
        }
        let (om, _) = stats(off);
        let (am, ap) = stats(audit_only);
        let (km, kp) = stats(keyed);
        println!("store ({label}), {m} calls each, interleaved with the store-off gateway:");
        println!("  store off                  : median {om:8.1} µs");
        println!(
            "  audit record per call      : median {am:8.1} µs   p99 {ap:8.1} µs   (+{:.1} µs)",
            am - om
        );
        println!(
            "  audit + ledger claim/finish: median {km:8.1} µs   p99 {kp:8.1} µs   (+{:.1} µs)",
            km - om
        );
        if !counted.is_empty() {
            let (qm, qp) = stats(counted);
            println!(
                "  audit + quotas counted here: median {qm:8.1} µs   p99 {qp:8.1} µs   (+{:.1} µs)",
                qm - om
            );
        }
    }
    psql(&format!("DROP DATABASE IF EXISTS {pg_db} WITH (FORCE)"));
}

/// The gateway's resident memory with 3 upstreams of about 100 tools each.
fn memory(dir: &Path) {
    let mem_cfg = config(
        dir,
        &(1..=3)
            .map(|i| format!("[[upstream]]\nname = \"u{i}\"\ncommand = [\"{FIXTURE}\"]\nenv = {{ FIXTURE_EXTRA_TOOLS = \"100\" }}\n"))
            .collect::<String>(),
    );
    let mut mem = Peer::spawn(
        Command::new(WARDEN)
            .args(["run", "--config"])
            .arg(&mem_cfg)
            .env("RUST_LOG", "error"),
    );
    let listed = mem.rpc("tools/list", json!({}));
    let tools = listed["result"]["tools"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    for i in 0..300 {
        mem.time_call(&format!("u{}.gen_{:03}", i % 3 + 1, i % 100).replace("gen_", "gen_"));
    }
    let rss = rss_kib(mem.child.id());
    println!("memory: 3 upstreams, {tools} tools, after listing and 300 calls: gateway RSS {:.1} MiB (target ≤ 30 MiB)", rss as f64 / 1024.0);
    drop(mem);
}

/// `mcp-warden run` with `cfg`, errors only in its log.
fn gateway(cfg: &Path) -> Peer {
    Peer::spawn(
        Command::new(WARDEN)
            .args(["run", "--config"])
            .arg(cfg)
            .env("RUST_LOG", "error"),
    )
}
