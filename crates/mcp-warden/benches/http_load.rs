//! Load on the Streamable HTTP front (docs/behaviour.md, performance bar):
//! concurrent sessions call the `echo` tool of a Rust stdio upstream through
//! `mcp-warden run --http` (validation on, an anonymous caller, keep-alive
//! connections), and the same concurrency is sent to that upstream directly over
//! its own stdio (it has no HTTP front), in the same run. Prints calls/s and
//! p50/p99 latency of each. The load generator runs on one thread of the same
//! 2-core machine.
//!
//! The gateway run is made three times with the same load generator: with the
//! anonymous caller (no credential), with every request carrying an API key, and
//! with every request carrying an `[oauth]` access token (ES256, keys discovered
//! from a loopback issuer served by this bench, so JWKS discovery and signature
//! checks are the real ones); the cost of each way of identifying callers shows
//! as its ratio to the anonymous run.
//!
//! With PostgreSQL on 127.0.0.1:5432, two more anonymous runs keep the ledger and
//! the audit trail there, every call keyed (a claim and a finish in the database
//! per call): once with `[store] connections = 1`, once with the default pool,
//! so the ratio shows what the pool buys under concurrent calls.
//!
//! `cargo bench -p mcp-warden --bench http_load` (LOAD_SESSIONS, default 32;
//! LOAD_SECONDS, default 5).

mod common;
use common::{psql, rss_kib};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WARDEN: &str = env!("CARGO_BIN_EXE_mcp-warden");
const FIXTURE: &str = env!("CARGO_BIN_EXE_warden-fixture-upstream");

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn report(label: &str, calls: usize, elapsed: Duration, mut lat: Vec<Duration>) -> f64 {
    lat.sort();
    let rate = calls as f64 / elapsed.as_secs_f64();
    println!(
        "{label:28} {rate:>10.0} calls/s   p50 {:>8.0} µs   p99 {:>8.0} µs   ({calls} calls in {:.1} s)",
        percentile(&lat, 0.5),
        percentile(&lat, 0.99),
        elapsed.as_secs_f64()
    );
    rate
}

async fn post(
    sender: &mut SendRequest<Full<Bytes>>,
    addr: &str,
    session: Option<&str>,
    body: &Value,
    bearer: Option<&str>,
) -> (Option<String>, Bytes) {
    let mut req = hyper::Request::post("/mcp")
        .header("host", addr)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(b) = bearer {
        req = req.header("authorization", format!("Bearer {b}"));
    }
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    let req = req
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    sender.ready().await.expect("connection ready");
    let resp = sender.send_request(req).await.expect("response");
    let sid = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let status = resp.status();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert!(status.is_success(), "{status}: {body:?}");
    (sid, body)
}

/// One session on its own keep-alive connection, calling echo until `until`.
async fn client(
    addr: String,
    until: Instant,
    warm: Instant,
    bearer: Option<Arc<str>>,
    keyed: Option<u64>,
) -> (usize, Vec<Duration>) {
    let bearer = bearer.as_deref();
    let stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    stream.set_nodelay(true).ok();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "load", "version": "1"}}});
    let (sid, _) = post(&mut sender, &addr, None, &init, bearer).await;
    let sid = sid.expect("session id");
    post(
        &mut sender,
        &addr,
        Some(&sid),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        bearer,
    )
    .await;
    let mut lat = Vec::new();
    let mut id = 1u64;
    loop {
        let now = Instant::now();
        if now >= until {
            break;
        }
        let mut call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "fx.echo", "arguments": {"text": "load", "n": id, "flag": true}}});
        if let Some(client) = keyed {
            call["params"]["_meta"] = json!({"warden/idempotencyKey": format!("{client}-{id}")});
        }
        id += 1;
        let (_, body) = post(&mut sender, &addr, Some(&sid), &call, bearer).await;
        debug_assert!(body.starts_with(b"{\"jsonrpc\""));
        if now >= warm {
            lat.push(now.elapsed());
        }
    }
    (lat.len(), lat)
}

/// A throwaway P-256 key made for tests only, and its public JWK (as in the
/// gateway's auth unit tests).
const TEST_EC_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg+5x5P96Q720Fze4D
EkEf1W2o9XqQfNXUpdF9irWgu2OhRANCAASnLp38a3WQAbLnTSioJoYl+3iIeW0B
0LbBOx+wDIIdKjLtahPsLiJA8ZJ+88Eadrfa246ee0N+Jl+9YTHUQBlI
-----END PRIVATE KEY-----
";
const RESOURCE: &str = "http://bench.invalid/mcp";
/// The API key of the API-key run.
const API_KEY: &str = "load-bench-api-key-0123456789";

/// A loopback issuer serving its metadata and key set (each answer closes its
/// connection); returns its URL and an access token for `RESOURCE`.
fn issuer() -> (String, String) {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let metadata = json!({"issuer": url, "jwks_uri": format!("{url}/jwks")}).to_string();
    let jwks = json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256",
        "x": "py6d_Gt1kAGy500oqCaGJft4iHltAdC2wTsfsAyCHSo",
        "y": "Mu1qE-wuIkDxkn7zwRp2t9rbjp57Q34mX71hMdRAGUg"}]})
    .to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head);
            let body = if head.starts_with("GET /jwks ") {
                &jwks
            } else {
                &metadata
            };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some("k1".into());
    let token = jsonwebtoken::encode(
        &header,
        &json!({"iss": url, "sub": "load", "aud": RESOURCE, "scope": "mcp",
            "iat": now, "exp": now + 3600}),
        &jsonwebtoken::EncodingKey::from_ec_pem(TEST_EC_KEY.as_bytes()).unwrap(),
    )
    .unwrap();
    (url, token)
}

/// How the bench's requests say who they are.
#[derive(Clone, Copy, PartialEq)]
enum Identity {
    Anonymous,
    ApiKey,
    OAuth,
}

/// A run whose gateway keeps its ledger in PostgreSQL, every call keyed.
struct Ledger<'a> {
    url: &'a str,
    connections: usize,
}

fn through_gateway(
    sessions: u64,
    seconds: u64,
    identity: Identity,
    ledger: Option<Ledger<'_>>,
) -> f64 {
    let dir = std::env::temp_dir().join(format!("warden-http-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("warden.toml");
    let (who, bearer) = match identity {
        Identity::OAuth => {
            let (url, token) = issuer();
            (
                format!("[oauth]\nissuer = \"{url}\"\nresource = \"{RESOURCE}\"\nrequired_scopes = [\"mcp\"]\n"),
                Some(Arc::<str>::from(token)),
            )
        }
        Identity::ApiKey => (
            "[[caller]]\nname = \"load\"\napi_key_env = \"WARDEN_LOAD_KEY\"\n".to_owned(),
            Some(Arc::<str>::from(API_KEY)),
        ),
        Identity::Anonymous => ("[gateway]\nanonymous_caller = \"load\"\n".to_owned(), None),
    };
    let store = ledger.as_ref().map_or(String::new(), |l| {
        format!(
            "[store]\nurl = \"{}\"\nconnections = {}\n",
            l.url, l.connections
        )
    });
    std::fs::write(
        &config,
        format!("{who}{store}[[upstream]]\nname = \"fx\"\ncommand = [\"{FIXTURE}\"]\n"),
    )
    .unwrap();
    let mut gw = Command::new(WARDEN)
        .args(["run", "--config"])
        .arg(&config)
        .args(["--http", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .env("WARDEN_LOAD_KEY", API_KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mcp-warden");
    let mut lines = BufReader::new(gw.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("gateway output").expect("line");
        if let Some(rest) = line.strip_prefix("mcp-warden: listening on http://") {
            break rest.trim_end_matches("/mcp").to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let warm = Instant::now() + Duration::from_secs(1);
    let until = warm + Duration::from_secs(seconds);
    let results = rt.block_on(async {
        let tasks: Vec<_> = (0..sessions)
            .map(|i| {
                let keyed = ledger.is_some().then_some(i);
                tokio::spawn(client(addr.clone(), until, warm, bearer.clone(), keyed))
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("client"));
        }
        out
    });
    let rss = rss_kib(gw.id());
    let _ = gw.kill();
    let _ = gw.wait();
    let calls = results.iter().map(|r| r.0).sum();
    let lat = results.into_iter().flat_map(|r| r.1).collect();
    let label = match (&ledger, identity) {
        (Some(l), _) if l.connections == 1 => "PostgreSQL ledger, 1 conn.".to_owned(),
        (Some(l), _) => format!("PostgreSQL ledger, {} conn.", l.connections),
        (None, Identity::Anonymous) => "through mcp-warden (HTTP)".to_owned(),
        (None, Identity::ApiKey) => "through mcp-warden, API key".to_owned(),
        (None, Identity::OAuth) => "through mcp-warden, OAuth".to_owned(),
    };
    let rate = report(&label, calls, Duration::from_secs(seconds), lat);
    println!(
        "{:28} {:.1} MiB resident after the run ({sessions} sessions still open)",
        "",
        rss as f64 / 1024.0
    );
    rate
}

/// The same concurrency straight into the upstream's stdin: `window` requests in flight.
fn direct(window: u64, seconds: u64) -> f64 {
    let mut child = Command::new(FIXTURE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the upstream");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "load", "version": "1"}}})).unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    let sent: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let (permit_tx, permit_rx) = std::sync::mpsc::sync_channel::<()>(window as usize);
    let warm = Instant::now() + Duration::from_secs(1);
    let until = warm + Duration::from_secs(seconds);
    let reader = {
        let sent = sent.clone();
        std::thread::spawn(move || {
            let mut lat = Vec::new();
            let mut line = String::new();
            loop {
                line.clear();
                if stdout.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                let v: Value = serde_json::from_str(&line).unwrap();
                let Some(id) = v["id"].as_u64() else { continue };
                let at = sent.lock().unwrap().remove(&id);
                if let Some(at) = at {
                    if at >= warm && at < until {
                        lat.push(at.elapsed());
                    }
                }
                if permit_rx.recv().is_err() {
                    break;
                }
                if Instant::now() >= until && sent.lock().unwrap().is_empty() {
                    break;
                }
            }
            lat
        })
    };
    let mut id = 1u64;
    let mut out = std::io::BufWriter::new(stdin);
    while Instant::now() < until {
        permit_tx.send(()).unwrap();
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "load", "n": id, "flag": true}}});
        sent.lock().unwrap().insert(id, Instant::now());
        writeln!(out, "{call}").unwrap();
        out.flush().unwrap();
        id += 1;
    }
    drop(permit_tx);
    let lat = reader.join().unwrap();
    drop(out);
    let _ = child.kill();
    let _ = child.wait();
    let calls = lat.len();
    report(
        "upstream directly (stdio)",
        calls,
        Duration::from_secs(seconds),
        lat,
    )
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing we need.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let sessions = env_or("LOAD_SESSIONS", 32);
    let seconds = env_or("LOAD_SECONDS", 5);
    println!(
        "HTTP front load: {sessions} concurrent sessions, {seconds} s after 1 s of warm-up, echo tool, validation on"
    );
    let g = through_gateway(sessions, seconds, Identity::Anonymous, None);
    let k = through_gateway(sessions, seconds, Identity::ApiKey, None);
    let o = through_gateway(sessions, seconds, Identity::OAuth, None);
    let d = direct(sessions, seconds);
    println!(
        "gateway/direct throughput: {:.2}   (target: ≥ 10,000 calls/s through the gateway)",
        g / d
    );
    println!(
        "API key/anonymous throughput: {:.2}   (every request carries an API key)",
        k / g
    );
    println!(
        "OAuth/anonymous throughput: {:.2}   (every request carries an ES256 access token)",
        o / g
    );
    println!("OAuth/API key throughput: {:.2}", o / k);
    let db = format!("warden_http_load_{}", std::process::id());
    let url = format!("postgres://postgres@127.0.0.1:5432/{db}");
    let fresh =
        || psql(&format!("DROP DATABASE IF EXISTS {db}")) && psql(&format!("CREATE DATABASE {db}"));
    if !fresh() {
        println!("(PostgreSQL on 127.0.0.1:5432 not reachable: the ledger runs are skipped)");
        return;
    }
    let pooled = warden_store::DEFAULT_CONNECTIONS;
    let one = through_gateway(
        sessions,
        seconds,
        Identity::Anonymous,
        Some(Ledger {
            url: &url,
            connections: 1,
        }),
    );
    fresh();
    let pool = through_gateway(
        sessions,
        seconds,
        Identity::Anonymous,
        Some(Ledger {
            url: &url,
            connections: pooled,
        }),
    );
    psql(&format!("DROP DATABASE IF EXISTS {db}"));
    println!(
        "PostgreSQL ledger, {pooled} connections/1 connection throughput: {:.2}   (every call keyed: a claim and a finish in the database)",
        pool / one
    );
    println!(
        "PostgreSQL ledger/anonymous throughput: {:.2}   (the default pool)",
        pool / g
    );
}
