//! The MCP servers behind the gateway, whatever carries them: a child process
//! over stdio ([`child`]) or a Streamable HTTP server ([`http`]), behind one type.
//!
//! Each [`Upstream`] owns at most one live [`Conn`] at a time; every transport
//! feeds the same connection: outgoing lines through its writer queue, incoming
//! messages through [`deliver`] (responses resolve pending requests; everything
//! else goes to the [`Inbound`] router, in order). A request fails with one
//! error type, [`CallError`]. When a transport ends, every pending request learns
//! it at once and the router is told, so the gateway can answer callers and
//! start the upstream again with backoff.

use crate::config::{UpstreamConfig, UpstreamProtocol};
use crate::jsonrpc;
use crate::logged::logged;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;
use tokio::process::Child;
use tokio::sync::{mpsc, oneshot};

mod child;
mod conn;
pub mod credential;
mod http;
mod legacy;
mod members;
pub mod per_caller;
mod revision;

pub(crate) use conn::deliver;
pub use conn::{Conn, PendingReply};
pub use revision::{
    UpstreamRevision, CLIENT_CAPABILITIES_KEY, CLIENT_INFO_KEY, LOG_LEVEL_KEY,
    PROTOCOL_VERSION_KEY, STATELESS_VERSION,
};

/// Protocol versions this gateway speaks, newest first.
pub const SUPPORTED_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// The longest the initialize handshake and a tools/list page may take (less
/// when the upstream's `timeout_ms` is less).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest `server/discover` may take when it is only asked whether the
/// server speaks 2026-07-28 (less when the upstream's `timeout_ms` is less).
const DISCOVER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the gateway's own subscription stream is waited on: as long as the
/// connection lives (ten years stand for that).
const LISTEN_FOREVER_MS: u64 = 10 * 365 * 24 * 3600 * 1000;
/// The longest a liveness ping waits for its answer.
const PING_TIMEOUT_MS: u64 = 10_000;
/// Pages of tools/list followed before giving up on a server that never stops paginating.
const MAX_LIST_PAGES: usize = 1000;

/// How a request to an upstream can fail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("the upstream did not answer within {0} ms")]
    Timeout(u64),
    #[error("the upstream is not running")]
    Gone,
    #[error("the request was cancelled")]
    Cancelled,
    #[error("the upstream's answer held no response to the request")]
    NoResponse,
    /// A response whose result is not the object the method's result must be
    /// (what it is instead: "null", "a string" …).
    #[error("the upstream's result is {0}, not a JSON object")]
    NotAnObject(&'static str),
    /// The upstream's input rounds could not be made (what went wrong).
    #[error("{0}")]
    Input(&'static str),
    /// Every per-caller child of the upstream is busy, and there may be no more.
    #[error("all {0} per-caller processes of the upstream are busy")]
    Crowded(usize),
}

enum Reply {
    Response(Value),
    /// A response to a request read by its members ([`Conn::request_members`]).
    Members(members::Members),
    Cancelled,
    NoResponse,
}

/// Where an upstream's requests and notifications go (the gateway's router).
pub trait Inbound: Send + Sync {
    /// A request or notification from the upstream, in the order it was written.
    /// `related` is the gateway's request it came with, when the transport says
    /// (an HTTP upstream's answer stream); over stdio nothing says.
    fn on_message(
        &self,
        upstream: usize,
        conn: &Arc<Conn>,
        msg: Value,
        related: Option<u64>,
    ) -> BoxedSend;
    /// The connection ended: the child exited or closed its stdout, the HTTP
    /// server went away, or the gateway gave up on it as stuck.
    fn on_exit(&self, upstream: usize, generation: u64, exit: Exit);
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// The upstream stopped or could no longer be reached.
    Stopped,
    /// The upstream was alive but stopped answering: the gateway ended it.
    Stuck,
}

impl Exit {
    pub fn as_str(self) -> &'static str {
        match self {
            Exit::Stopped => "stopped",
            Exit::Stuck => "stuck",
        }
    }
}

/// The arguments of a tool that travel in `Mcp-Param-*` headers too (2026-07-28:
/// an input schema property with `"x-mcp-header": "Suffix"`): (argument, suffix).
pub fn header_params(tool: &Value) -> Vec<(String, String)> {
    let Some(props) = tool
        .pointer("/inputSchema/properties")
        .and_then(Value::as_object)
    else {
        return Vec::new();
    };
    props
        .iter()
        .filter_map(|(arg, def)| {
            let suffix = def.get("x-mcp-header")?.as_str()?;
            Some((arg.clone(), suffix.to_owned()))
        })
        .collect()
}

/// A tool's name and the arguments it sends in `Mcp-Param-*` headers, when it
/// has any. Only a declaration whose text may name `x-mcp-header` (as written,
/// or spelled with escapes) is parsed.
fn tool_header_params(text: &RawValue) -> Option<(String, Vec<(String, String)>)> {
    let text = text.get();
    if !text.contains("x-mcp-header") && !text.contains("\\u") {
        return None;
    }
    let tool: Value = serde_json::from_str(text).ok()?;
    let name = tool.get("name")?.as_str()?;
    let params = header_params(&tool);
    (!params.is_empty()).then(|| (name.to_owned(), params))
}

/// An argument's value as its `Mcp-Param-*` header carries it: a string as it
/// is, anything else as JSON text; `None` for an argument not sent (or null).
pub fn header_text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

/// The tools of a listing, each declaration as the upstream wrote it: text,
/// not a tree of values, which costs several times its text (issue 25).
pub type Declarations = Vec<Arc<RawValue>>;

/// Tool → the arguments it sends in `Mcp-Param-*` headers, for the tools of one
/// upstream that have any.
pub type HeaderParams = Arc<RwLock<HashMap<String, Vec<(String, String)>>>>;

/// A boxed future, to keep [`Inbound`] object-safe without a crate for it.
pub type BoxedSend = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// What the upstream said about itself in its initialize answer.
#[derive(Debug, Clone, Default)]
pub struct ServerInfo {
    pub protocol_version: String,
    pub capabilities: Map<String, Value>,
    pub instructions: Option<String>,
}

impl ServerInfo {
    /// What a `server/discover` or `initialize` result says, at `version`.
    fn read(version: &str, result: &Value) -> ServerInfo {
        ServerInfo {
            protocol_version: version.to_owned(),
            capabilities: result
                .get("capabilities")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            instructions: result
                .get("instructions")
                .and_then(Value::as_str)
                .map(str::to_owned),
        }
    }
}

/// A configured upstream server and its current connection.
pub struct Upstream {
    pub index: usize,
    pub name: String,
    pub config: UpstreamConfig,
    program: PathBuf,
    max_message: usize,
    conn: RwLock<Option<Arc<Conn>>>,
    info: RwLock<Option<ServerInfo>>,
    generation: AtomicU64,
    /// The credential presented for each caller (`[[upstream.credential]]`).
    pub credentials: credential::Credentials,
    /// A child-process upstream with per-caller credentials: each such caller's own child.
    pub children: Option<Arc<per_caller::CallerChildren>>,
    /// The server ended when asked `server/discover`: it gets the handshake only.
    no_discover: AtomicBool,
    /// It speaks 2026-07-28 (as its `info` says, kept where a call reads it cheaply).
    stateless: AtomicBool,
    /// How long its last tool listing said it may be cached (2026-07-28 `ttlMs`).
    tools_ttl: Mutex<Option<u64>>,
    /// Resources older clients subscribed to (2026-07-28 has no
    /// `resources/subscribe`: they ride the gateway's subscription), with how
    /// many subscriptions each.
    resources: Mutex<std::collections::BTreeMap<String, usize>>,
    /// The gateway's open `subscriptions/listen` request: its connection and id.
    listening: Mutex<Option<(Weak<Conn>, u64)>>,
    /// Its tools' `Mcp-Param-*` arguments, for the HTTP transport's headers.
    header_params: HeaderParams,
    /// The older revision's session beside a 2026-07-28 HTTP upstream.
    legacy: legacy::Legacy,
}

impl Upstream {
    pub fn new(index: usize, config: UpstreamConfig, program: PathBuf, max_message: usize) -> Self {
        Self {
            index,
            name: config.name.clone(),
            credentials: credential::Credentials::from_config(&config),
            children: per_caller::CallerChildren::for_upstream(
                index,
                &config,
                &program,
                max_message,
            ),
            config,
            program,
            max_message,
            conn: RwLock::new(None),
            info: RwLock::new(None),
            generation: AtomicU64::new(0),
            no_discover: AtomicBool::new(false),
            stateless: AtomicBool::new(false),
            tools_ttl: Mutex::new(None),
            resources: Mutex::new(Default::default()),
            listening: Mutex::new(None),
            header_params: HeaderParams::default(),
            legacy: legacy::Legacy::default(),
        }
    }

    /// The live connection, if the child is running and its start finished. A
    /// server must see nothing but `initialize` (and pings) before it answered
    /// that and heard `notifications/initialized`: until then, callers are told
    /// the upstream is not running, as while it is down.
    pub fn conn(&self) -> Option<Arc<Conn>> {
        self.conn
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .filter(|c| !c.is_closed() && c.ready.load(Ordering::SeqCst))
    }

    pub fn info(&self) -> Option<ServerInfo> {
        self.info.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The revision the upstream speaks on its connection: 2026-07-28 when it
    /// offered it in `server/discover` when last started. Read on every call: an
    /// atomic.
    pub fn revision(&self) -> UpstreamRevision {
        UpstreamRevision::of(self.stateless.load(Ordering::Relaxed))
    }

    /// How long the upstream said its tool list may be cached, if it said.
    pub fn tools_ttl(&self) -> Option<u64> {
        *self.tools_ttl.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn timeout_ms(&self) -> u64 {
        self.config.timeout_ms
    }

    /// Starts the child, learns which revision it speaks (`server/discover`,
    /// else the initialize handshake), and lists its tools.
    pub async fn connect(
        &self,
        inbound: Weak<dyn Inbound>,
        init: &Value,
    ) -> Result<Declarations, String> {
        if let Some(children) = &self.children {
            // Callers' own children start the way this one does.
            children.remember(inbound.clone(), init);
        }
        let conn = self.spawn(inbound.clone())?;
        let result = async {
            let stateless = match self.config.protocol {
                UpstreamProtocol::Handshake => None,
                // A server that fell over when asked is not asked again.
                UpstreamProtocol::Auto if self.no_discover.load(Ordering::Relaxed) => None,
                UpstreamProtocol::Auto => self.discover(&conn, init).await.ok().flatten(),
                UpstreamProtocol::Stateless => Some(
                    self.discover(&conn, init)
                        .await?
                        .ok_or("server/discover does not offer 2026-07-28 (protocol = \"2026-07-28\")")?,
                ),
            };
            let info = match stateless {
                Some(info) => {
                    conn.stateless.store(true, Ordering::Relaxed);
                    if self.config.url.is_some() && self.config.protocol == UpstreamProtocol::Auto {
                        self.open_legacy(conn.generation, inbound, init).await;
                    }
                    info
                }
                None if conn.is_closed() => {
                    self.no_discover.store(true, Ordering::Relaxed);
                    return Err("the upstream ended when asked server/discover; it is started again without asking (protocol = \"2025-11-25\" skips the question)".to_owned())
                }
                None => self.handshake(&conn, init).await?,
            };
            self.stateless
                .store(info.protocol_version == STATELESS_VERSION, Ordering::Relaxed);
            *self.info.write().unwrap_or_else(|e| e.into_inner()) = Some(info);
            self.list_tools_on(&conn).await
        }
        .await;
        match &result {
            Ok(_) => {
                conn.ready.store(true, Ordering::SeqCst);
                self.keep_pinging(&conn);
                self.subscribe(&conn).await;
            }
            Err(_) => conn.shutdown().await,
        }
        result
    }

    /// Asks `server/discover`: `Some` when the upstream offers 2026-07-28, `None`
    /// when it answers otherwise (a server of an older revision refuses the method).
    async fn discover(&self, conn: &Conn, init: &Value) -> Result<Option<ServerInfo>, String> {
        // Asked at 2026-07-28: the answer says whether the upstream speaks it.
        let params = UpstreamRevision::Stateless.envelop(None, init.get("capabilities"), None);
        // Asked without knowing whether the server has the method: a server that
        // leaves unknown requests unanswered costs this much at start, not more.
        let patience = self.start_patience(match self.config.protocol {
            UpstreamProtocol::Auto => DISCOVER_TIMEOUT,
            _ => HANDSHAKE_TIMEOUT,
        });
        let answer = conn
            .request("server/discover", params, patience.as_millis() as u64)
            .await
            .map_err(|e| format!("server/discover failed: {e}"))?;
        let Some(result) = answer.get("result") else {
            return Ok(None);
        };
        let offers = result
            .get("supportedVersions")
            .and_then(Value::as_array)
            .is_some_and(|v| v.iter().any(|v| v == STATELESS_VERSION));
        if !offers {
            return Ok(None);
        }
        tracing::info!(upstream = %self.name, "the upstream speaks 2026-07-28");
        Ok(Some(ServerInfo::read(STATELESS_VERSION, result)))
    }

    /// The initialize handshake (up to 2025-11-25).
    async fn handshake(&self, conn: &Conn, init: &Value) -> Result<ServerInfo, String> {
        self.handshake_within(conn, init, self.start_patience(HANDSHAKE_TIMEOUT))
            .await
    }

    /// How long one step of starting the upstream (discover, handshake, a
    /// listing page) may take: its `timeout_ms`, at most `most`.
    fn start_patience(&self, most: Duration) -> Duration {
        Duration::from_millis(self.config.timeout_ms).min(most)
    }

    /// The initialize handshake, answered within `patience`.
    async fn handshake_within(
        &self,
        conn: &Conn,
        init: &Value,
        patience: Duration,
    ) -> Result<ServerInfo, String> {
        let answer = conn
            .request(
                "initialize",
                Some(init.clone()),
                patience.as_millis() as u64,
            )
            .await
            .map_err(|e| format!("initialize failed: {e}"))?;
        let result = match (answer.get("result"), answer.get("error")) {
            (Some(r), _) => r.clone(),
            (None, Some(e)) => return Err(format!("initialize was refused: {e}")),
            _ => return Err("initialize answer has neither result nor error".into()),
        };
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let info = ServerInfo::read(version, &result);
        if !SUPPORTED_VERSIONS.contains(&info.protocol_version.as_str()) {
            tracing::warn!(upstream = %self.name, version = %logged(&info.protocol_version), "upstream answered with a protocol version this gateway does not know; going on");
        }
        conn.send(jsonrpc::notification("notifications/initialized", None))
            .await;
        Ok(info)
    }

    /// A 2026-07-28 upstream sends list changes only on a `subscriptions/listen`
    /// stream: the gateway opens one for the lists the upstream announces changes
    /// of, for as long as the connection lives (its notifications reach the
    /// router like any other).
    async fn subscribe(&self, conn: &Arc<Conn>) {
        if !conn.revision().listens() {
            return;
        }
        // One subscription at a time: a new filter replaces the old stream.
        let previous = self
            .listening
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some((old, id)) = previous {
            if let Some(old) = old.upgrade() {
                old.cancel(id, "the gateway's subscription changed");
            }
        }
        let caps = self.info().map(|i| i.capabilities).unwrap_or_default();
        let announces = |c: &str| {
            caps.get(c)
                .and_then(|v| v.get("listChanged"))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let mut wanted = Map::new();
        for (capability, key) in [
            ("tools", "toolsListChanged"),
            ("prompts", "promptsListChanged"),
            ("resources", "resourcesListChanged"),
        ] {
            if announces(capability) {
                wanted.insert(key.into(), Value::Bool(true));
            }
        }
        let uris: Vec<Value> = self
            .resources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .map(|u| json!(u))
            .collect();
        if !uris.is_empty() {
            wanted.insert("resourceSubscriptions".into(), Value::Array(uris));
        }
        if wanted.is_empty() {
            return;
        }
        let params = conn
            .revision()
            .envelop(Some(json!({"notifications": wanted})), None, None);
        let Ok((id, mut reply)) = conn
            .start("subscriptions/listen", params, PING_TIMEOUT_MS)
            .await
        else {
            return;
        };
        *self.listening.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Arc::downgrade(conn), id));
        let (name, conn) = (self.name.clone(), conn.clone());
        tokio::spawn(async move {
            // The stream lasts as long as the connection; an answer means it ended.
            if let Ok(answer) = conn.wait(id, &mut reply, LISTEN_FOREVER_MS).await {
                tracing::info!(upstream = %name, answer = %logged(&answer), "the upstream ended the gateway's subscription; list changes are not heard until it restarts");
            }
        });
    }

    /// An older client's `resources/subscribe` (`on`) or `unsubscribe` of `uri` on
    /// a 2026-07-28 upstream: the gateway's own subscription to it is opened
    /// again with the resources subscribed to.
    pub async fn subscribe_resource(&self, uri: &str, on: bool) {
        let changed = {
            let mut resources = self.resources.lock().unwrap_or_else(|e| e.into_inner());
            if on {
                let n = resources.entry(uri.to_owned()).or_insert(0);
                *n += 1;
                *n == 1
            } else {
                match resources.get_mut(uri) {
                    Some(n) if *n > 1 => {
                        *n -= 1;
                        false
                    }
                    Some(_) => resources.remove(uri).is_some(),
                    None => false,
                }
            }
        };
        if let (true, Some(conn)) = (changed, self.conn()) {
            self.subscribe(&conn).await;
        }
    }

    /// Pings the connection every `ping_interval_ms` while it lives; one that does
    /// not answer in time is stuck. Off with an interval of 0.
    fn keep_pinging(&self, conn: &Arc<Conn>) {
        let every = self.config.ping_interval_ms;
        if every == 0 {
            return;
        }
        let patience = self.config.timeout_ms.min(PING_TIMEOUT_MS);
        let conn = Arc::downgrade(conn);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(every)).await;
                let Some(c) = conn.upgrade().filter(|c| !c.is_closed()) else {
                    return;
                };
                let (method, params) = c.revision().liveness();
                match c.request(method, params, patience).await {
                    Err(CallError::Timeout(_)) => {
                        c.abandon("it did not answer a liveness ping");
                        return;
                    }
                    Err(_) => return,
                    // Any answer, even "method not found", shows it is alive.
                    Ok(_) => {}
                }
            }
        });
    }

    /// Lists the tools again on the live connection (after `list_changed`).
    pub async fn list_tools(&self) -> Result<Declarations, String> {
        let conn = self.conn().ok_or("the upstream is not running")?;
        self.list_tools_on(&conn).await
    }

    /// Every page of the upstream's tool listing. Each page is read as its
    /// members' text and each tool kept as the upstream wrote it: no tree of a
    /// page is built (issue 25).
    async fn list_tools_on(&self, conn: &Conn) -> Result<Declarations, String> {
        let has_tools = self
            .info()
            .is_some_and(|i| i.capabilities.contains_key("tools"));
        if !has_tools {
            return Ok(Vec::new());
        }
        let mut tools = Vec::new();
        let mut ttl: Option<u64> = None;
        let mut cursor: Option<Value> = None;
        for _ in 0..MAX_LIST_PAGES {
            let params =
                conn.revision()
                    .envelop(cursor.take().map(|c| json!({"cursor": c})), None, None);
            let answer = conn
                .request_members(
                    "tools/list",
                    params,
                    self.start_patience(HANDSHAKE_TIMEOUT).as_millis() as u64,
                )
                .await
                .map_err(|e| format!("tools/list failed: {e}"))?;
            let result = answer
                .get("result")
                .ok_or_else(|| match answer.get("error") {
                    Some(e) => format!("tools/list was refused: {}", members::value(e)),
                    None => "tools/list answer has no result".to_owned(),
                })?;
            // A result that is no object has none of the members read below.
            let result = members::object(result).unwrap_or_default();
            let member = |key: &str| result.get(key).map(|m| members::value(m));
            if let Some(t) = member("ttlMs").as_ref().and_then(Value::as_u64) {
                ttl = Some(ttl.map_or(t, |mine| mine.min(t)));
            }
            *self.tools_ttl.lock().unwrap_or_else(|e| e.into_inner()) = ttl;
            let page = result
                .get("tools")
                .and_then(|t| members::array(t))
                .ok_or("tools/list result has no 'tools' array")?;
            tools.extend(page.into_iter().map(|t| Arc::from(t.to_owned())));
            match member("nextCursor") {
                Some(c) if !c.is_null() => cursor = Some(c),
                _ => {
                    let params = tools.iter().filter_map(|t| tool_header_params(t)).collect();
                    *self
                        .header_params
                        .write()
                        .unwrap_or_else(|e| e.into_inner()) = params;
                    return Ok(tools);
                }
            }
        }
        Err(format!(
            "tools/list did not finish within {MAX_LIST_PAGES} pages"
        ))
    }

    /// A connection record for a new transport of `generation`; the caller runs
    /// its tasks.
    fn new_conn(
        &self,
        generation: u64,
        tx: mpsc::Sender<Vec<u8>>,
        stop: oneshot::Sender<()>,
        child: Option<Child>,
        inbound: Weak<dyn Inbound>,
    ) -> Arc<Conn> {
        Arc::new_cyclic(|me| Conn {
            me: me.clone(),
            upstream: self.index,
            generation,
            name: self.name.clone(),
            tx,
            pending: Mutex::new(HashMap::new()),
            by_members: Mutex::new(Default::default()),
            any_by_members: AtomicBool::new(false),
            credentials: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            child: Mutex::new(child),
            stop_writer: Mutex::new(Some(stop)),
            timeouts: AtomicU32::new(0),
            restart_after: self.config.restart_after_timeouts,
            confirm_ms: self.config.timeout_ms.min(PING_TIMEOUT_MS),
            confirming: AtomicBool::new(false),
            stuck: AtomicBool::new(false),
            ready: AtomicBool::new(false),
            stateless: AtomicBool::new(false),
            inbound,
        })
    }

    /// Opens the transport (a child process, or an HTTP server for `url =`) as
    /// the upstream's connection, of a new generation.
    fn spawn(&self, inbound: Weak<dyn Inbound>) -> Result<Arc<Conn>, String> {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let conn = match self.config.url {
            Some(_) => http::open(self, generation, inbound)?,
            None => child::open(self, generation, inbound)?,
        };
        *self.conn.write().unwrap_or_else(|e| e.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    /// Ends the current child, if any, and every caller's own.
    pub async fn shutdown(&self) {
        self.stop().await;
        if let Some(children) = &self.children {
            children.shutdown().await;
        }
    }

    /// Ends the current child (or HTTP session), if any, and the older
    /// revision's session beside it.
    async fn stop(&self) {
        let conn = self.conn.write().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(conn) = conn {
            conn.shutdown().await;
        }
        self.legacy.stop().await;
    }
}
