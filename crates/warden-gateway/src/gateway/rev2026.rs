//! The stateless 2026-07-28 revision, as far as the gateway's own hop goes.
//!
//! A request that carries `_meta["io.modelcontextprotocol/protocolVersion"]` speaks
//! it: no `initialize`, the client's capabilities ride on every request, every
//! result says its `resultType`, lists say how long they may be cached, and the
//! gateway asks its client for input (an approval) by answering with an
//! `InputRequiredResult` that the client retries with `inputResponses` and the
//! `requestState` it was given. That state comes back from the client, so it is
//! sealed (ChaCha20-Poly1305 under a key only this gateway, or its fleet,
//! holds) and bound to the caller, the tool, the arguments and an expiry.
//!
//! The envelope belongs to the client↔gateway hop: it is taken out of `_meta`
//! at the edge ([`take_envelope`], before a request is dispatched), and a result
//! is stamped on its way out ([`stamp_result`]); upstreams speak the revision they
//! negotiated with the gateway. Deeper in, two things only this revision needs:
//! an upstream's request during a call becomes an input request of the call's
//! result ([`wait_bridged`]), and the call is set aside until the client retries
//! ([`ParkedCalls`]).

use super::client_session::{lock, ClientSession};
use super::relay::{self, Pending};
use crate::texts as answer;
use crate::upstream::CallError;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::mpsc;

pub const VERSION: &str = "2026-07-28";
pub const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
pub const CLIENT_INFO_KEY: &str = "io.modelcontextprotocol/clientInfo";
pub const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
pub const LOG_LEVEL_KEY: &str = "io.modelcontextprotocol/logLevel";
pub const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";
/// -32022: the request names a protocol version the gateway does not speak.
pub const UNSUPPORTED_VERSION: i64 = -32022;
/// -32021: the request needs a client capability the client did not declare.
pub const MISSING_CAPABILITY: i64 = crate::jsonrpc::MISSING_CAPABILITY;
/// -32020: an HTTP header disagrees with the request body.
pub const HEADER_MISMATCH: i64 = -32020;
/// How long list results may be cached by the client, in milliseconds.
pub const LIST_TTL_MS: u64 = 30_000;
/// How long an approval question stays answerable.
pub const STATE_TTL_SECS: u64 = 600;
/// The input request key of the gateway's approval question.
pub const APPROVAL_KEY: &str = "warden/approval";
/// The input request key of an upstream's request, bridged to the client.
pub const UPSTREAM_KEY: &str = "warden/upstream";
/// Server-to-client requests that can travel as input requests, with the client
/// capability each needs.
pub const INPUT_METHODS: &[(&str, &str)] = &[
    ("sampling/createMessage", "sampling"),
    ("elicitation/create", "elicitation"),
    ("roots/list", "roots"),
];

/// The capability a client needs to take `method` as an input request.
pub fn input_capability(method: &str) -> Option<&'static str> {
    INPUT_METHODS
        .iter()
        .find(|(m, _)| *m == method)
        .map(|(_, c)| *c)
}

/// Methods the revision removed; a request speaking it gets -32601 for them.
pub const REMOVED: &[&str] = &[
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
];

/// What a 2026-07-28 request brought besides its params.
#[derive(Debug, Clone, Default)]
pub struct Envelope {
    pub capabilities: Value,
    pub client_info: Option<Value>,
    /// The least severe log level the client wants for this request, if it opted in.
    pub log_level: Option<u8>,
    pub input_responses: Option<Map<String, Value>>,
    pub request_state: Option<String>,
}

impl Envelope {
    /// The initialize params the gateway offers its upstreams when this client is
    /// the first: its capabilities and who it is, at the newest handshake version.
    pub fn upstream_init(&self, handshake_version: &str) -> Value {
        let mut init =
            json!({"protocolVersion": handshake_version, "capabilities": self.capabilities});
        if let Some(info) = &self.client_info {
            init["clientInfo"] = info.clone();
        }
        init
    }

    /// Whether the client declared a capability on this request.
    pub fn can(&self, capability: &str) -> bool {
        self.capabilities
            .get(capability)
            .is_some_and(Value::is_object)
    }
}

fn invalid_params(message: &str) -> Value {
    json!({"code": crate::jsonrpc::INVALID_PARAMS, "message": message})
}

/// What is wrong with an envelope that names a protocol version, as the JSON-RPC
/// error object to answer with; `None` when it can be served.
fn envelope_fault(meta: &Map<String, Value>) -> Option<Value> {
    let version = meta.get(PROTOCOL_VERSION_KEY)?;
    let Some(version) = version.as_str() else {
        return Some(invalid_params(answer::ENVELOPE_VERSION_NOT_STRING));
    };
    if version != VERSION {
        return Some(json!({"code": UNSUPPORTED_VERSION,
            "message": answer::unsupported_version(version, VERSION),
            "data": {"supported": [VERSION], "requested": version}}));
    }
    match meta.get(CLIENT_CAPABILITIES_KEY) {
        None => Some(invalid_params(answer::ENVELOPE_NO_CAPABILITIES)),
        Some(Value::Object(_)) => None,
        Some(_) => Some(invalid_params(answer::ENVELOPE_CAPABILITIES_NOT_OBJECT)),
    }
}

/// The envelope problem of a request that arrived as 2026-07-28 (over HTTP, its
/// `MCP-Protocol-Version` header says so even when its body does not), checked
/// before it is dispatched: `None` when it can be served. Unlike
/// [`take_envelope`], a request without the envelope is an error here, not a
/// request of an older revision.
pub fn envelope_error(params: Option<&Value>) -> Option<Value> {
    if let Some(e) = envelope_shape_error(params) {
        return Some(e);
    }
    let meta = params?.get("_meta")?.as_object()?;
    envelope_fault(meta)
}

/// The part of [`envelope_error`] that must be answered before the HTTP headers
/// are compared with the body: there is no version in the body to compare with.
pub fn envelope_shape_error(params: Option<&Value>) -> Option<Value> {
    let Some(meta) = params
        .and_then(|p| p.get("_meta"))
        .and_then(Value::as_object)
    else {
        return Some(invalid_params(answer::ENVELOPE_NO_META));
    };
    match meta.get(PROTOCOL_VERSION_KEY) {
        None => Some(invalid_params(answer::ENVELOPE_NO_VERSION)),
        Some(Value::String(_)) => None,
        Some(_) => Some(invalid_params(answer::ENVELOPE_VERSION_NOT_STRING)),
    }
}

/// The HTTP status of a 2026-07-28 answer that is a JSON-RPC error with `code`:
/// the revision makes a method the server does not implement a 404, and a
/// request it cannot take as sent (version, headers) a 400.
pub fn http_status(code: i64) -> u16 {
    match code {
        crate::jsonrpc::METHOD_NOT_FOUND => 404,
        UNSUPPORTED_VERSION | HEADER_MISMATCH | MISSING_CAPABILITY => 400,
        _ => 200,
    }
}

/// Reads (and takes out) the envelope of a request. `Ok(None)`: not this revision.
/// `Err`: the JSON-RPC error object to answer with.
pub fn take_envelope(params: &mut Option<Value>) -> Result<Option<Envelope>, Value> {
    let Some(meta) = params
        .as_mut()
        .and_then(|p| p.get_mut("_meta"))
        .and_then(Value::as_object_mut)
    else {
        return Ok(None);
    };
    if !meta.contains_key(PROTOCOL_VERSION_KEY) {
        return Ok(None);
    }
    if let Some(error) = envelope_fault(meta) {
        return Err(error);
    }
    let capabilities = meta
        .get(CLIENT_CAPABILITIES_KEY)
        .cloned()
        .unwrap_or_else(|| json!({}));
    let client_info = meta.get(CLIENT_INFO_KEY).cloned();
    let log_level = meta
        .get(LOG_LEVEL_KEY)
        .and_then(Value::as_str)
        .and_then(log_rank);
    for key in [
        PROTOCOL_VERSION_KEY,
        CLIENT_INFO_KEY,
        CLIENT_CAPABILITIES_KEY,
        LOG_LEVEL_KEY,
    ] {
        meta.shift_remove(key);
    }
    let empty = meta.is_empty();
    let params = params.as_mut().and_then(Value::as_object_mut);
    let mut envelope = Envelope {
        capabilities,
        client_info,
        log_level,
        ..Envelope::default()
    };
    if let Some(p) = params {
        if empty {
            p.shift_remove("_meta");
        }
        envelope.input_responses = match p.shift_remove("inputResponses") {
            Some(Value::Object(m)) => Some(m),
            _ => None,
        };
        envelope.request_state = match p.shift_remove("requestState") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
    }
    Ok(Some(envelope))
}

pub use super::client_session::{log_level_name, log_rank};

/// Makes a result say what it is (`resultType`) and, for lists, how long it may
/// be cached and by whom: never longer than the upstreams behind it said (their
/// `ttlMs`, already in the result), nor than the gateway's own [`LIST_TTL_MS`];
/// the tool list always `private` (it is the caller's), others as the upstreams
/// said, `private` when they said nothing.
pub fn stamp_result(method: &str, result: &mut Value) {
    let Some(obj) = result.as_object_mut() else {
        return;
    };
    if !obj.contains_key("resultType") {
        obj.insert("resultType".into(), json!("complete"));
    }
    if matches!(
        method,
        "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list"
    ) {
        let ttl = obj
            .get("ttlMs")
            .and_then(Value::as_u64)
            .map_or(LIST_TTL_MS, |t| t.min(LIST_TTL_MS));
        obj.insert("ttlMs".into(), json!(ttl));
        let said = obj.get("cacheScope").and_then(Value::as_str);
        let scope = match (method, said) {
            ("tools/list", _) | (_, None) => "private",
            (_, Some("public")) => "public",
            _ => "private",
        };
        obj.insert("cacheScope".into(), json!(scope));
    }
}

/// The cache hints of a list merged from several upstreams' answers: the shortest
/// lifetime any of them allows, and `public` only when every one of them says so.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheHint {
    pub ttl_ms: Option<u64>,
    /// The scope the upstreams that gave one agree on (`private` if any said so).
    pub scope: Option<&'static str>,
    /// Some upstream gave no scope.
    pub unscoped: bool,
}

impl CacheHint {
    /// Takes in one upstream's list result.
    pub fn absorb(&mut self, result: &Value) {
        if let Some(t) = result.get("ttlMs").and_then(Value::as_u64) {
            self.ttl_ms = Some(self.ttl_ms.map_or(t, |mine| mine.min(t)));
        }
        match result.get("cacheScope").and_then(Value::as_str) {
            Some("public") if self.scope.is_none() => self.scope = Some("public"),
            Some("public") => {}
            Some(_) => self.scope = Some("private"),
            None => self.unscoped = true,
        }
    }

    /// The scope to write: none when no upstream gave one (an older client's
    /// list stays as its upstreams made it); `public` only when every upstream
    /// said so, as one that gave no scope promised nothing about who may share
    /// its list.
    pub fn merged_scope(&self) -> Option<&'static str> {
        self.scope
            .map(|s| if self.unscoped { "private" } else { s })
    }

    /// Writes the hints into a merged result (nothing when no upstream gave any).
    pub fn apply(&self, result: &mut Map<String, Value>) {
        if let Some(t) = self.ttl_ms {
            result.insert("ttlMs".into(), json!(t));
        }
        if let Some(s) = self.merged_scope() {
            result.insert("cacheScope".into(), json!(s));
        }
    }
}

/// The answer to `server/discover`.
pub fn discover(capabilities: Map<String, Value>, instructions: Option<String>) -> Value {
    let mut result = json!({
        "resultType": "complete",
        "supportedVersions": [VERSION],
        "capabilities": capabilities,
        "ttlMs": LIST_TTL_MS,
        "cacheScope": "public",
        "_meta": {SERVER_INFO_KEY: {"name": "mcp-warden", "version": env!("CARGO_PKG_VERSION")}},
    });
    if let Some(i) = instructions {
        result["instructions"] = Value::String(i);
    }
    result
}

/// What a sealed request state is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub caller: String,
    pub tool: String,
    /// SHA-256 of the arguments as serialised, hex.
    pub arguments: String,
}

impl Binding {
    pub fn new(caller: &str, tool: &str, arguments: &Map<String, Value>) -> Binding {
        let bytes = serde_json::to_vec(arguments).unwrap_or_default();
        let digest = Sha256::digest(&bytes);
        Binding {
            caller: caller.to_owned(),
            tool: tool.to_owned(),
            arguments: digest.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

/// The key request states are sealed with: random per gateway process, or
/// derived from a secret the replicas share.
///
/// A state is sealed with ChaCha20-Poly1305 (an AEAD): a client can neither read
/// what it carries (an upstream's own request state among it) nor change a byte of
/// it unnoticed. A key being rotated out still opens what it sealed
/// ([`StateKey::also_opening`]), so tokens outlive a rotation.
pub struct StateKey {
    sealing: ring::aead::LessSafeKey,
    /// Older keys: they open tokens, never seal new ones.
    opening: Vec<ring::aead::LessSafeKey>,
}

/// What a state token holds besides its binding: the id of a parked call (`p`),
/// an approval already given (`ok`), an upstream's own state (`u`) and the
/// upstream it belongs to (`up`).
pub type Sealed = Map<String, Value>;

impl StateKey {
    fn aead(k: [u8; 32]) -> ring::aead::LessSafeKey {
        let key =
            ring::aead::UnboundKey::new(&ring::aead::CHACHA20_POLY1305, &k).expect("a 32-byte key");
        ring::aead::LessSafeKey::new(key)
    }

    fn from_bytes(k: [u8; 32]) -> StateKey {
        StateKey {
            sealing: StateKey::aead(k),
            opening: Vec::new(),
        }
    }

    /// This key, which also opens what `previous` (a secret being rotated out)
    /// sealed.
    pub fn also_opening(mut self, previous: &[u8]) -> StateKey {
        self.opening
            .push(StateKey::aead(Sha256::digest(previous).into()));
        self
    }

    pub fn random() -> StateKey {
        let mut k = [0u8; 32];
        if let Err(e) = getrandom::fill(&mut k) {
            panic!("the OS random source failed: {e}");
        }
        StateKey::from_bytes(k)
    }

    /// A key derived from a shared secret, so that replicas behind one load
    /// balancer accept each other's states.
    pub fn from_secret(secret: &[u8]) -> StateKey {
        StateKey::from_bytes(Sha256::digest(secret).into())
    }

    /// A state token for `binding`, valid until `now + STATE_TTL_SECS`.
    pub fn seal(&self, binding: &Binding, now: u64) -> String {
        self.seal_with(binding, now, Sealed::new())
    }

    /// A state token that also names a call parked at the gateway.
    pub fn seal_parked(&self, binding: &Binding, now: u64, parked: Option<&str>) -> String {
        let mut extra = Sealed::new();
        if let Some(p) = parked {
            extra.insert("p".into(), json!(p));
        }
        self.seal_with(binding, now, extra)
    }

    /// A state token for `binding` that carries `extra`.
    pub fn seal_with(&self, binding: &Binding, now: u64, mut extra: Sealed) -> String {
        extra.insert("c".into(), json!(binding.caller));
        extra.insert("t".into(), json!(binding.tool));
        extra.insert("a".into(), json!(binding.arguments));
        extra.insert("e".into(), json!(now + STATE_TTL_SECS));
        self.seal_value(&Value::Object(extra))
    }

    /// Seals any JSON payload; whoever opens it checks what it is bound to.
    pub fn seal_value(&self, payload: &Value) -> String {
        let mut sealed = payload.to_string().into_bytes();
        let mut nonce = [0u8; 12];
        if let Err(e) = getrandom::fill(&mut nonce) {
            panic!("the OS random source failed: {e}");
        }
        self.sealing
            .seal_in_place_append_tag(
                ring::aead::Nonce::assume_unique_for_key(nonce),
                ring::aead::Aad::empty(),
                &mut sealed,
            )
            .expect("a state far below the AEAD's size limit");
        let mut token = nonce.to_vec();
        token.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(token)
    }

    /// The payload of a token this key sealed; `None` for anything else.
    pub fn open_value(&self, token: &str) -> Option<Value> {
        let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
        if bytes.len() < 12 {
            return None;
        }
        let (nonce, sealed) = bytes.split_at(12);
        let nonce: [u8; 12] = nonce.try_into().ok()?;
        for key in std::iter::once(&self.sealing).chain(&self.opening) {
            let mut buf = sealed.to_vec();
            let n = ring::aead::Nonce::assume_unique_for_key(nonce);
            if let Ok(plain) = key.open_in_place(n, ring::aead::Aad::empty(), &mut buf) {
                return serde_json::from_slice::<Value>(plain).ok();
            }
        }
        None
    }

    /// Whether `token` was sealed by this key for exactly `binding` and has not expired.
    pub fn opens(&self, token: &str, binding: &Binding, now: u64) -> bool {
        self.open_with(token, binding, now).is_some()
    }

    /// The sealed state, when `token` was sealed by this key for exactly `binding`
    /// and has not expired: `Some(parked call id, if any)`.
    pub fn open(&self, token: &str, binding: &Binding, now: u64) -> Option<Option<String>> {
        let v = self.open_with(token, binding, now)?;
        Some(v.get("p").and_then(Value::as_str).map(str::to_owned))
    }

    /// Everything `token` holds, when it was sealed by this key for exactly
    /// `binding` and has not expired.
    pub fn open_with(&self, token: &str, binding: &Binding, now: u64) -> Option<Sealed> {
        let Value::Object(v) = self.open_value(token)? else {
            return None;
        };
        let bound = v.get("c") == Some(&json!(binding.caller))
            && v.get("t") == Some(&json!(binding.tool))
            && v.get("a") == Some(&json!(binding.arguments))
            && v.get("e").and_then(Value::as_u64).is_some_and(|e| e >= now);
        bound.then_some(v)
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// How a 2026-07-28 call's wait upstream ended.
pub enum Bridged {
    /// The upstream answered (or the wait failed).
    Answered(Result<Value, CallError>),
    /// The upstream asked the client something it can answer: the call pauses.
    /// The upstream's id for its request, and the request without its id.
    Asked(Value, Value),
}

/// Waits for a 2026-07-28 call's answer. An upstream's request for the call
/// interrupts the wait when the client declared it can take it; otherwise the
/// upstream is told at once that the client cannot.
pub async fn wait_bridged(
    session: &ClientSession,
    p: &mut Pending,
    envelope: Option<&Envelope>,
) -> Bridged {
    let Some(key) = p.call.clone() else {
        return Bridged::Answered(relay::wait(session, p).await);
    };
    let (tx, mut rx) = mpsc::channel(1);
    lock(&session.interrupts).insert(key.clone(), tx);
    let outcome = loop {
        tokio::select! {
            r = p.conn.wait(p.id, &mut p.reply, p.timeout_ms) => break Bridged::Answered(r),
            Some((their_id, request)) = rx.recv() => {
                let method = request.get("method").and_then(Value::as_str).unwrap_or_default();
                let can = input_capability(method).is_some_and(|c| envelope.is_some_and(|e| e.can(c)));
                if can {
                    break Bridged::Asked(their_id, request);
                }
                relay::refuse_upstream(&p.conn, their_id, answer::CLIENT_LACKS_CAPABILITY).await;
            }
        }
    };
    lock(&session.interrupts).remove(&key);
    session.untrack(&key);
    outcome
}

/// The `InputRequiredResult` that puts an upstream's request to the client.
pub fn input_required(request: &Value, state: String) -> Value {
    let method = request.get("method").cloned().unwrap_or(Value::Null);
    let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
    json!({
        "resultType": "input_required",
        "inputRequests": {UPSTREAM_KEY: {"method": method, "params": params}},
        "requestState": state,
    })
}

/// The `InputRequiredResult` that asks the client's user to approve a call.
pub fn approval_required(question: Value, state: String) -> Value {
    json!({
        "resultType": "input_required",
        "inputRequests": {APPROVAL_KEY: {"method": "elicitation/create", "params": question}},
        "requestState": state,
    })
}

/// The response an upstream's request gets from a client's retry: its answer
/// under [`UPSTREAM_KEY`], or an error when the retry brought none.
pub fn upstream_answer(asked: Value, envelope: &Envelope) -> Value {
    match envelope
        .input_responses
        .as_ref()
        .and_then(|r| r.get(UPSTREAM_KEY))
    {
        Some(result) => crate::jsonrpc::response(asked, result.clone()),
        None => crate::jsonrpc::error(
            asked,
            crate::jsonrpc::INTERNAL_ERROR,
            answer::CLIENT_DID_NOT_ANSWER,
        ),
    }
}

/// A fresh id for a parked call (128 bits from the OS); `None` without randomness.
pub fn park_id() -> Option<String> {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id).ok()?;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// Calls set aside while their client answers an upstream's request, by the id
/// their sealed state names. `T` is what the call path needs to go on.
pub struct ParkedCalls<T> {
    key: StateKey,
    parked: Mutex<HashMap<String, (T, Value)>>,
}

impl<T> ParkedCalls<T> {
    pub fn new(key: StateKey) -> Self {
        ParkedCalls {
            key,
            parked: Mutex::new(HashMap::new()),
        }
    }

    pub fn key(&self) -> &StateKey {
        &self.key
    }

    /// Sets `call` aside under `id` (its upstream asked `asked`); returns the
    /// sealed state the client must bring back.
    pub fn park(&self, id: String, binding: &Binding, call: T, asked: Value) -> String {
        let state = self.key.seal_parked(binding, unix_now(), Some(&id));
        lock(&self.parked).insert(id, (call, asked));
        state
    }

    /// Takes a parked call back: the call and the upstream's id for its request.
    pub fn take(&self, id: &str) -> Option<(T, Value)> {
        lock(&self.parked).remove(id)
    }

    /// The parked call a retry's state names, when it was sealed for `binding`:
    /// `None` when the retry names no parked call (it then runs as a new one),
    /// `Some(None)` when it names one the gateway no longer holds.
    pub fn resume(&self, envelope: &Envelope, binding: &Binding) -> Option<Option<(T, Value)>> {
        let token = envelope.request_state.as_deref()?;
        let id = self.key.open(token, binding, unix_now())??;
        Some(self.take(&id))
    }
}

#[cfg(test)]
mod tests;
