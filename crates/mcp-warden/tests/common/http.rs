//! A plain HTTP/1.1 client over std sockets for the HTTP front's tests: whole
//! replies, and SSE streams read event by event (so a test can walk away mid-stream).

use super::{fixture_config, scratch, write_config, PATIENCE, WARDEN};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    /// The JSON-RPC messages of an SSE body (or the one JSON body).
    pub fn messages(&self) -> Vec<Value> {
        if self
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"))
        {
            parse_events(&self.body)
                .into_iter()
                .filter(|(_, d)| !d.is_empty())
                .map(|(_, d)| serde_json::from_str(&d).expect("event data is JSON"))
                .collect()
        } else {
            vec![self.json()]
        }
    }
}

/// (id, data) of each complete event in an SSE text.
pub fn parse_events(text: &str) -> Vec<(String, String)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut id = String::new();
            let mut data = Vec::new();
            for line in e.lines() {
                if let Some(v) = line.strip_prefix("id: ") {
                    id = v.to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push(v.trim_start().to_owned());
                }
            }
            (id, data.join("\n"))
        })
        .collect()
}

/// An open response whose body is read as it arrives.
pub struct Open {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    reader: BufReader<TcpStream>,
    chunked: bool,
    left: Option<usize>,
    buffer: String,
}

impl Open {
    fn read_more(&mut self) -> bool {
        if self.chunked {
            let mut line = String::new();
            if self.reader.read_line(&mut line).unwrap_or(0) == 0 {
                return false;
            }
            let size = usize::from_str_radix(line.trim(), 16).unwrap_or(0);
            if size == 0 {
                return false;
            }
            let mut chunk = vec![0; size + 2];
            if self.reader.read_exact(&mut chunk).is_err() {
                return false;
            }
            self.buffer
                .push_str(&String::from_utf8_lossy(&chunk[..size]));
            true
        } else {
            let want = self.left.unwrap_or(usize::MAX).min(64 * 1024);
            if want == 0 {
                return false;
            }
            let mut chunk = vec![0; want];
            match self.reader.read(&mut chunk) {
                Ok(0) | Err(_) => false,
                Ok(n) => {
                    self.left = self.left.map(|l| l - n);
                    self.buffer.push_str(&String::from_utf8_lossy(&chunk[..n]));
                    true
                }
            }
        }
    }

    /// The next SSE event (id, data), or None at the end of the stream.
    pub fn next_event(&mut self) -> Option<(String, String)> {
        loop {
            if let Some(at) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..at + 2).collect();
                return parse_events(&event).into_iter().next();
            }
            if !self.read_more() {
                return None;
            }
        }
    }

    /// The rest of the body.
    pub fn finish(mut self) -> Reply {
        while self.read_more() {}
        Reply {
            status: self.status,
            headers: self.headers,
            body: self.buffer,
        }
    }
}

/// Sends a request and returns once the status line and headers are in.
pub fn open(addr: &str, method: &str, headers: &[(&str, &str)], body: &str) -> Open {
    open_path(addr, method, "/mcp", headers, body)
}

/// [`open`] for another path than the endpoint's.
pub fn open_path(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Open {
    let stream = TcpStream::connect(addr).expect("connect to the HTTP front");
    send(stream, addr, method, path, headers, body)
}

/// [`request`] from the loopback address `source` (127.0.0.2, say): the
/// gateway sees another client address.
pub fn request_from(
    source: &str,
    addr: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("a socket");
    let local: std::net::SocketAddr = format!("{source}:0").parse().expect("a source address");
    socket.bind(&local.into()).expect("bind the source address");
    let to: std::net::SocketAddr = addr.parse().expect("the front's address");
    socket
        .connect(&to.into())
        .expect("connect to the HTTP front");
    send(socket.into(), addr, method, "/mcp", headers, body).finish()
}

/// Sends one request on `stream` and reads the answer's head.
fn send(
    stream: TcpStream,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Open {
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut w = stream.try_clone().expect("clone");
    w.write_all(req.as_bytes()).expect("send head");
    w.write_all(body.as_bytes()).expect("send body");
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).expect("status line");
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header line");
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let find = |n: &str| {
        headers
            .iter()
            .find(|(k, _): &&(String, String)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    let chunked = find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let left = find("content-length").and_then(|v| v.parse().ok());
    Open {
        status,
        headers,
        reader,
        chunked,
        left,
        buffer: String::new(),
    }
}

/// Starts a call of `tool` (the fixture's `sample`) that waits upstream until
/// the client answers the sampling request it makes (the session must offer
/// sampling): once this returns, the call is in the upstream. Returns the open
/// stream and that request.
pub fn hold(w: &HttpWarden, (auth, sid): &(String, String), tool: &str, id: i64) -> (Open, Value) {
    let mut headers = POST.to_vec();
    headers.push(("Authorization", auth));
    headers.push(("Mcp-Session-Id", sid));
    let body = call(id, tool, json!({"prompt": "wait"})).to_string();
    let mut stream = open(&w.addr, "POST", &headers, &body);
    let asked = loop {
        let (_, data) = stream.next_event().expect("the sampling request");
        if data.contains("sampling/createMessage") {
            break serde_json::from_str::<Value>(&data).unwrap();
        }
    };
    (stream, asked)
}

pub fn request(addr: &str, method: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    open(addr, method, headers, body).finish()
}

/// [`request`] for another path than the endpoint's.
pub fn request_path(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    open_path(addr, method, path, headers, body).finish()
}

/// The headers every MCP POST carries.
pub const POST: [(&str, &str); 2] = [
    ("Content-Type", "application/json"),
    ("Accept", "application/json, text/event-stream"),
];

/// `mcp-warden run --http 127.0.0.1:0` on a config; stopped when dropped.
pub struct HttpWarden {
    child: Child,
    pub addr: String,
    /// The admin listener's address, when the config has `[admin] listen`.
    pub admin: Option<String>,
    pub dir: std::path::PathBuf,
}

impl HttpWarden {
    pub fn start(name: &str, toml: &str, env: &[(&str, &str)]) -> HttpWarden {
        let dir = scratch(name);
        let config = write_config(&dir, toml);
        let mut child = Command::new(WARDEN)
            .args(["run", "--config"])
            .arg(&config)
            .args(["--http", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mcp-warden");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = channel();
        let admin = std::sync::Arc::new(std::sync::Mutex::new(None));
        let admin_seen = admin.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("[warden] {line}");
                if let Some(rest) = line.strip_prefix("mcp-warden: listening on http://") {
                    let _ = tx.send(rest.trim_end_matches("/mcp").to_owned());
                }
                // Written before the front's line, so known once that one is.
                if let Some(rest) = line.strip_prefix("mcp-warden: admin listener on http://") {
                    let addr = rest.split('/').next().unwrap_or_default().to_owned();
                    *admin_seen.lock().unwrap() = Some(addr);
                }
            }
        });
        let addr = rx
            .recv_timeout(PATIENCE)
            .expect("mcp-warden did not report its address");
        let admin = admin.lock().unwrap().clone();
        HttpWarden {
            child,
            addr,
            admin,
            dir,
        }
    }

    /// Sends the gateway SIGTERM (as Kubernetes does to stop a pod).
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Waits for the gateway to exit; fails the test if it does not within [`PATIENCE`].
    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                started.elapsed() < PATIENCE,
                "mcp-warden did not exit within {PATIENCE:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Kills the gateway with SIGKILL (a replica dying mid-call) and waits for it.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill -9");
        self.wait_exit();
    }

    /// Sends the gateway process SIGHUP (reload the configuration).
    pub fn hangup(&self) {
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -HUP failed");
    }

    /// POSTs a JSON-RPC message with the standard headers plus `extra`.
    pub fn post(&self, extra: &[(&str, &str)], msg: &Value) -> Reply {
        let mut headers = POST.to_vec();
        headers.extend_from_slice(extra);
        request(&self.addr, "POST", &headers, &msg.to_string())
    }

    /// Opens a session (initialize + initialized) and returns its id.
    pub fn session(&self, extra: &[(&str, &str)]) -> String {
        self.session_with(extra, serde_json::json!({}))
    }

    /// [`HttpWarden::session`] for a client that declares `capabilities`.
    pub fn session_with(&self, extra: &[(&str, &str)], capabilities: Value) -> String {
        let r = self.post(
            extra,
            &serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": capabilities,
                "clientInfo": {"name": "warden-http-tests", "version": "1"}}}),
        );
        assert_eq!(r.status, 200, "initialize: {}", r.body);
        let sid = r.header("mcp-session-id").expect("a session id").to_owned();
        let mut with = extra.to_vec();
        with.push(("Mcp-Session-Id", &sid));
        let r = self.post(
            &with,
            &serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        );
        assert_eq!(r.status, 202);
        sid
    }
}

impl Drop for HttpWarden {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends one request on a kept-alive socket and reads its whole reply (a
/// Content-Length body), leaving the socket open for the next one.
pub fn exchange(
    stream: &mut TcpStream,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    try_exchange(stream, method, headers, body).expect("an HTTP exchange")
}

/// [`exchange`], for a socket the server may close instead of answering.
pub fn try_exchange(
    stream: &mut TcpStream,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<Reply> {
    let mut req = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {}\r\n",
        stream.peer_addr()?
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(req.as_bytes())?;
    read_reply(stream)
}

/// Reads one whole reply (a Content-Length body) off `stream`, and no more.
pub fn read_reply(stream: &mut TcpStream) -> std::io::Result<Reply> {
    use std::io::{Error, ErrorKind};
    stream.set_read_timeout(Some(PATIENCE))?;
    // Byte by byte up to the blank line, so nothing past this reply is taken.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte)?;
        head.push(byte[0]);
    }
    let bad = |what: &str| Error::new(ErrorKind::InvalidData, what.to_owned());
    let head = String::from_utf8(head).map_err(|_| bad("a head that is not UTF-8"))?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let length = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .ok_or_else(|| bad("no Content-Length"))?;
    let mut body = vec![0; length];
    stream.read_exact(&mut body)?;
    let body = String::from_utf8(body).map_err(|_| bad("a body that is not UTF-8"))?;
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// Reads `stream` until the server closes it. Returns how long that took and what
/// the server wrote first, or `None` when it is still open after `limit`.
pub fn wait_closed(
    stream: &mut TcpStream,
    limit: std::time::Duration,
) -> Option<(std::time::Duration, String)> {
    let started = std::time::Instant::now();
    let mut said = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = limit.checked_sub(started.elapsed())?;
        stream
            .set_read_timeout(Some(left.max(std::time::Duration::from_millis(1))))
            .expect("timeout");
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => said.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None
            }
            // Reset: closed all the same.
            Err(_) => break,
        }
    }
    Some((
        started.elapsed(),
        String::from_utf8_lossy(&said).into_owned(),
    ))
}

/// A config whose HTTP requests act as the anonymous caller `dev`, bodies up to
/// 4 KiB, one fixture upstream `fx`, plus `extra` in `[gateway]`.
pub fn anonymous(extra: &str) -> String {
    format!(
        "[gateway]\nanonymous_caller = \"dev\"\nmax_message_bytes = 4096\n{extra}\n{}",
        fixture_config("", "")
    )
}

/// A JSON-RPC -32600 error body with a null id, as the front writes it.
pub fn error_body(message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": message}}).to_string()
}

/// A `tools/call` request.
pub fn call(id: i64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}})
}

/// A 2025-11-25 initialize request with id 1.
pub fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
}
