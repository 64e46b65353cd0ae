//! A harness that runs the real `mcp-warden` binary over real pipes, in front of
//! real upstream child processes, and talks JSON-RPC to it line by line; or the
//! same gateway built in-process ([`Warden::start_in_process`]): a `Gateway`
//! served by the stdio front over an in-memory pipe, with real upstream children,
//! for call-path tests that need no process of its own.

#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

pub const WARDEN: &str = env!("CARGO_BIN_EXE_mcp-warden");
pub const FIXTURE: &str = env!("CARGO_BIN_EXE_warden-fixture-upstream");
pub const NOTES: &str = env!("CARGO_BIN_EXE_warden-demo-notes");

/// The shipped example's shape: the demo notes server, reject mode, an alias and a pin.
pub const DEMO: &str = r#"
[[upstream]]
name = "notes"
command = ["{notes}"]
unknown_arguments = "reject"

[upstream.tools.create_note]
aliases = { body = "text" }
pin = { is_public = false }
"#;

/// How long any single expected message may take before the test fails (never a hang).
pub const PATIENCE: Duration = Duration::from_secs(15);

/// A fresh folder for one test's files.
pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "mcp-warden-test-{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst),
        name
    ));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Writes a config; `{fixture}` and `{notes}` stand for the test upstream binaries.
pub fn write_config(dir: &std::path::Path, toml: &str) -> PathBuf {
    let path = dir.join("warden.toml");
    let text = toml
        .replace("{fixture}", FIXTURE)
        .replace("{notes}", NOTES)
        .replace("{dir}", &dir.display().to_string());
    std::fs::write(&path, text).expect("write config");
    path
}

/// A config with one fixture upstream named `fx`, plus extra TOML.
pub fn fixture_config(extra_upstream: &str, rest: &str) -> String {
    format!("[[upstream]]\nname = \"fx\"\ncommand = [\"{{fixture}}\"]\n{extra_upstream}\n{rest}")
}

pub struct Warden {
    /// The gateway process; `None` when the gateway runs in this process.
    child: Option<Child>,
    stdin: Option<Box<dyn Write + Send>>,
    lines: Receiver<String>,
    next_id: i64,
    /// Messages received while waiting for something else, in order.
    pub backlog: Vec<Value>,
    pub dir: PathBuf,
    /// Collects the gateway's stderr, when it was started to capture it.
    log: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl Warden {
    /// Starts `mcp-warden run` on a config text and completes the MCP handshake.
    pub fn start(name: &str, toml: &str) -> Warden {
        let mut w = Warden::spawn(name, toml);
        w.handshake();
        w
    }

    /// Starts `mcp-warden run` without a handshake.
    pub fn spawn(name: &str, toml: &str) -> Warden {
        Warden::spawn_with(name, toml, None, &[])
    }

    /// [`Warden::start`], logging at `rust_log` into a buffer instead of the test's
    /// stderr; [`Warden::stderr_after_exit`] hands it over.
    pub fn start_capturing_stderr(name: &str, toml: &str, rust_log: &str) -> Warden {
        let mut w = Warden::spawn_with(name, toml, Some(rust_log), &[]);
        w.handshake();
        w
    }

    /// [`Warden::start_capturing_stderr`] with more arguments to `run` (`--watch`).
    pub fn start_with_args(name: &str, toml: &str, rust_log: &str, args: &[&str]) -> Warden {
        let mut w = Warden::spawn_with(name, toml, Some(rust_log), args);
        w.handshake();
        w
    }

    /// `log`: capture stderr, at this `RUST_LOG`; `None`: inherit it, at `warn`.
    fn spawn_with(name: &str, toml: &str, log: Option<&str>, args: &[&str]) -> Warden {
        let dir = scratch(name);
        let config = write_config(&dir, toml);
        let mut cmd = Command::new(WARDEN);
        cmd.args(["run", "--config"]).arg(&config).args(args);
        Warden::spawn_command(dir, cmd, log)
    }

    /// Starts a gateway as `cmd` says (a client's entry for it, say), without a handshake.
    pub fn spawn_command(dir: PathBuf, mut cmd: Command, log: Option<&str>) -> Warden {
        let mut child = cmd
            .env("RUST_LOG", log.unwrap_or("warn"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if log.is_some() {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .expect("start mcp-warden");
        let log = child.stderr.take().map(|mut stderr| {
            std::thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = std::io::Read::read_to_end(&mut stderr, &mut bytes);
                bytes
            })
        });
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Warden {
            stdin: child
                .stdin
                .take()
                .map(|s| Box::new(s) as Box<dyn Write + Send>),
            child: Some(child),
            lines: rx,
            next_id: 1,
            backlog: Vec::new(),
            dir,
            log,
        }
    }

    /// [`Warden::start`] with the gateway built in this process: the same config
    /// file, the same stdio front (over an in-memory pipe), real upstream children.
    pub fn start_in_process(name: &str, toml: &str) -> Warden {
        let mut w = Warden::spawn_in_process(name, toml);
        w.handshake();
        w
    }

    /// [`Warden::spawn`] in this process: no handshake.
    pub fn spawn_in_process(name: &str, toml: &str) -> Warden {
        let dir = scratch(name);
        let path = write_config(&dir, toml);
        let config = warden_gateway::config::Config::load(&path).expect("a valid config");
        let (line_tx, lines) = channel();
        let (input, mut input_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async move {
                use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
                let gateway = warden_gateway::gateway::Gateway::new(config)
                    .await
                    .expect("the gateway starts");
                let (client, server) = tokio::io::duplex(1 << 20);
                let (server_read, server_write) = tokio::io::split(server);
                let serving = tokio::spawn(warden_gateway::front::stdio::serve_on(
                    gateway,
                    tokio::io::BufReader::new(server_read),
                    server_write,
                    std::future::pending::<()>(),
                ));
                let (client_read, mut client_write) = tokio::io::split(client);
                tokio::spawn(async move {
                    while let Some(bytes) = input_rx.recv().await {
                        if client_write.write_all(&bytes).await.is_err() {
                            return;
                        }
                    }
                    // The test closed stdin: end of input, as for the binary.
                    let _ = client_write.shutdown().await;
                });
                let mut out = tokio::io::BufReader::new(client_read).lines();
                while let Ok(Some(line)) = out.next_line().await {
                    if line_tx.send(line).is_err() {
                        break;
                    }
                }
                let _ = serving.await;
            });
        });
        Warden {
            child: None,
            stdin: Some(Box::new(InProcessInput(input))),
            lines,
            next_id: 1,
            backlog: Vec::new(),
            dir,
            log: None,
        }
    }

    pub fn handshake(&mut self) {
        let init = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {"sampling": {}, "elicitation": {}},
                   "clientInfo": {"name": "warden-tests", "version": "1"}}),
        );
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        self.notify("notifications/initialized", None);
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write to gateway");
        stdin.flush().expect("flush");
    }

    pub fn send(&mut self, msg: &Value) {
        let mut line = serde_json::to_vec(msg).unwrap();
        line.push(b'\n');
        self.send_raw(&line);
    }

    pub fn notify(&mut self, method: &str, params: Option<Value>) {
        let mut m = json!({"jsonrpc": "2.0", "method": method});
        if let Some(p) = params {
            m["params"] = p;
        }
        self.send(&m);
    }

    /// Sends a request and returns its id.
    pub fn send_request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next raw line from the gateway.
    pub fn recv_line(&mut self) -> String {
        match self.lines.recv_timeout(PATIENCE) {
            Ok(l) => l,
            Err(RecvTimeoutError::Timeout) => {
                panic!("no message from the gateway within {PATIENCE:?}")
            }
            Err(RecvTimeoutError::Disconnected) => panic!("the gateway closed its stdout"),
        }
    }

    pub fn recv(&mut self) -> Value {
        let line = self.recv_line();
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("gateway wrote a non-JSON line ({e}): {line}"))
    }

    /// Waits for the response with `id`, keeping everything else in the backlog.
    pub fn response(&mut self, id: &Value) -> Value {
        self.response_line(id).1
    }

    /// The response with `id`, as its raw line and parsed.
    pub fn response_line(&mut self, id: &Value) -> (String, Value) {
        if let Some(i) = self
            .backlog
            .iter()
            .position(|m| m.get("id") == Some(id) && m.get("method").is_none())
        {
            let m = self.backlog.remove(i);
            return (serde_json::to_string(&m).unwrap(), m);
        }
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            let line = self.recv_line();
            let msg: Value = serde_json::from_str(&line).expect("JSON line");
            if msg.get("id") == Some(id) && msg.get("method").is_none() {
                return (line, msg);
            }
            self.backlog.push(msg);
        }
        panic!("no response to {id} within {PATIENCE:?}");
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.response(&json!(id))
    }

    /// `tools/call` → the whole response message.
    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }

    /// The names `tools/list` offers, in order.
    pub fn tool_names(&mut self) -> Vec<String> {
        let l = self.request("tools/list", json!({}));
        l["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools in {l}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// The text of a tool result's first content item.
    pub fn call_text(&mut self, tool: &str, args: Value) -> String {
        let r = self.call(tool, args);
        r.pointer("/result/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no text in {r}"))
            .to_owned()
    }

    /// Waits for a message matching `pred` (from the backlog first).
    pub fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(i);
        }
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            let msg = self.recv();
            if pred(&msg) {
                return msg;
            }
            self.backlog.push(msg);
        }
        panic!("never received {what}");
    }

    /// The next line within `d`, if one comes (panics if the gateway closed its stdout).
    pub fn try_recv_line(&mut self, d: Duration) -> Option<String> {
        match self.lines.recv_timeout(d) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => panic!("the gateway closed its stdout"),
        }
    }

    /// Every line the gateway wrote that was not read yet, up to its end of
    /// output (call once it exited), with the backlog's messages first.
    pub fn rest_of_output(&mut self) -> Vec<String> {
        let mut rest: Vec<String> = self.backlog.drain(..).map(|m| m.to_string()).collect();
        loop {
            match self.lines.recv_timeout(PATIENCE) {
                Ok(line) => rest.push(line),
                Err(RecvTimeoutError::Disconnected) => return rest,
                Err(RecvTimeoutError::Timeout) => panic!("the gateway's stdout never ended"),
            }
        }
    }

    /// Asserts nothing arrives for `d`.
    pub fn expect_silence(&mut self, d: Duration) {
        match self.lines.recv_timeout(d) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(line) => panic!("expected silence, got {line}"),
            Err(RecvTimeoutError::Disconnected) => panic!("the gateway closed its stdout"),
        }
    }

    /// Closes the gateway's stdin (end of input), keeping the process.
    pub fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a gateway process").id()
    }

    /// Sends the gateway process SIGHUP (reload the configuration).
    pub fn hangup(&self) {
        let status = Command::new("kill")
            .args(["-HUP", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -HUP failed");
    }

    fn process(&mut self) -> &mut Child {
        self.child
            .as_mut()
            .expect("this gateway runs in-process; start it with Warden::start for a process")
    }

    /// Waits for the gateway to exit by itself.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.process().try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the gateway did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Closes stdin, waits for the gateway to exit, and returns all it wrote to
    /// stderr (started with [`Warden::start_capturing_stderr`]).
    pub fn stderr_after_exit(&mut self) -> String {
        self.close_stdin();
        assert!(self.wait_exit().success(), "the gateway failed");
        let log = self
            .log
            .take()
            .expect("a gateway started with Warden::start_capturing_stderr");
        // Its upstream children's stderr is the gateway's to read: with the gateway
        // gone, the pipe is at its end.
        String::from_utf8_lossy(&log.join().expect("the stderr reader")).into_owned()
    }

    /// Closes stdin and waits for the gateway to exit.
    pub fn close(mut self) -> ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.process().try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the gateway did not exit after stdin closed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Input to an in-process gateway: bytes handed to the task that writes its pipe.
struct InProcessInput(tokio::sync::mpsc::UnboundedSender<Vec<u8>>);

impl Write for InProcessInput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .send(buf.to_vec())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Warden {
    fn drop(&mut self) {
        // In-process: closing the input ends the front, which stops its upstreams.
        drop(self.stdin.take());
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the CLI to completion: (exit code, stdout, stderr).
pub fn cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(WARDEN)
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run mcp-warden");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What the test webhook server answers.
pub enum Reply {
    Json(Value),
    /// A status and a raw body (garbage, errors).
    Raw(u16, Vec<u8>),
    /// Waits, then answers.
    After(Duration, Value),
}

/// A webhook endpoint on loopback that records every POST body and answers with
/// what `respond` says. Serves until the test process ends.
pub struct HookServer {
    pub url: String,
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl HookServer {
    pub fn start(respond: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> HookServer {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind hook server");
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let respond = std::sync::Arc::new(respond);
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let (respond, record) = (respond.clone(), record.clone());
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let head_end = loop {
                        let n = stream.read(&mut chunk).unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    while buf.len() < head_end + len {
                        let n = stream.read(&mut chunk).unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                    }
                    let body: Value =
                        serde_json::from_slice(&buf[head_end..]).unwrap_or(Value::Null);
                    record.lock().unwrap().push(body.clone());
                    let (status, bytes) = match respond(&body) {
                        Reply::Json(v) => (200, serde_json::to_vec(&v).unwrap()),
                        Reply::Raw(status, bytes) => (status, bytes),
                        Reply::After(d, v) => {
                            std::thread::sleep(d);
                            (200, serde_json::to_vec(&v).unwrap())
                        }
                    };
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        bytes.len()
                    );
                    let _ = stream.write_all(&bytes);
                });
            }
        });
        HookServer { url, seen }
    }

    pub fn bodies(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }
}

/// A loopback URL nothing listens on.
pub fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/hook")
}
pub mod http;
mod metrics;
pub mod rev2026;
// Not every test uses them (as `dead_code` above).
#[allow(unused_imports)]
pub use metrics::{metrics_text, reloads, wait_for_reloads};

/// The PostgreSQL server the tests make their databases on:
/// `WARDEN_TEST_PG_URL` (`postgres://USER@HOST:PORT`, no database; scripts/test
/// sets it to a throwaway cluster when the machine has no server), else the
/// machine's on 127.0.0.1:5432.
pub fn pg_server() -> String {
    std::env::var("WARDEN_TEST_PG_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432".to_owned())
        .trim_end_matches('/')
        .to_owned()
}

/// Runs one statement with psql on the server's `postgres` database.
fn psql(sql: &str) -> std::process::Output {
    std::process::Command::new("psql")
        .arg("-d")
        .arg(format!("{}/postgres", pg_server()))
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .expect("psql must be installed for the PostgreSQL tests")
}

/// A database of the test PostgreSQL server for one test (dropped when done).
pub struct PgDb(pub String);

impl PgDb {
    pub fn create(tag: &str) -> PgDb {
        let name = format!("warden_it_{tag}_{}", std::process::id());
        for sql in [
            format!("DROP DATABASE IF EXISTS {name}"),
            format!("CREATE DATABASE {name}"),
        ] {
            let out = psql(&sql);
            assert!(
                out.status.success(),
                "PostgreSQL on {} is needed: {}",
                pg_server(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        PgDb(name)
    }

    pub fn url(&self) -> String {
        format!("{}/{}", pg_server(), self.0)
    }

    /// Drops the database under the gateways using it: the store is lost.
    pub fn lose(&self) {
        let out = psql(&format!("DROP DATABASE {} WITH (FORCE)", self.0));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let _ = psql(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0));
    }
}

/// The audit records of `dir`'s `audit.jsonl`, one per line.
pub fn audit_records(dir: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The fixture's `secret` answer (`FX_TOKEN=… pid=…`), split into what the
/// variable holds and the answering process's id.
pub fn said(result: &Value) -> (String, u32) {
    let text = result["content"][0]["text"].as_str().expect("a text");
    let (env, pid) = text.split_once(" pid=").expect("env and pid");
    (env.to_owned(), pid.parse().expect("a pid"))
}

/// Whether the process with this id still runs.
pub fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}
