//! An MCP client connection as a [`ToolProvider`], for Rust agent hosts: the
//! bottom of a provider stack (see [`warden_core::provider`]). It reuses the
//! gateway's upstream transports: a child process over stdio
//! ([`McpClient::spawn`]) or a Streamable HTTP server ([`McpClient::connect_http`]).

use crate::config::{
    UpstreamConfig, UpstreamProtocol, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_TIMEOUT_MS,
};
use crate::jsonrpc;
use crate::upstream::{BoxedSend, Conn, Inbound, Upstream};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use warden_core::answer;
use warden_core::hooks::HookFuture;
use warden_core::provider::{ProviderError, ToolCall, ToolProvider, ToolResult};

/// A connection to one MCP server: a child process, or a Streamable HTTP server.
pub struct McpClient {
    upstream: Arc<Upstream>,
    // Keeps the router the connection reports to alive.
    _inbound: Arc<dyn Inbound>,
}

/// A host without sampling, elicitation or roots: the server's requests are
/// answered "method not found", pings are answered, notifications are dropped.
struct HostInbound;

impl Inbound for HostInbound {
    fn on_message(
        &self,
        _upstream: usize,
        conn: &Arc<Conn>,
        msg: Value,
        _related: Option<u64>,
    ) -> BoxedSend {
        let conn = conn.clone();
        Box::pin(async move {
            let Some(id) = msg.get("id").cloned() else {
                return;
            };
            let reply = match msg.get("method").and_then(Value::as_str) {
                Some("ping") => jsonrpc::response(id, json!({})),
                _ => jsonrpc::error(id, jsonrpc::METHOD_NOT_FOUND, "Method not found"),
            };
            conn.send(reply).await;
        })
    }

    fn on_exit(&self, _upstream: usize, _generation: u64, _exit: crate::upstream::Exit) {
        tracing::warn!("the MCP server exited; later calls will fail");
    }
}

impl McpClient {
    /// Starts `command` (program first) and completes the MCP handshake.
    pub async fn spawn(name: &str, command: &[String]) -> Result<McpClient, ProviderError> {
        let program = command
            .first()
            .ok_or_else(|| ProviderError("an empty command".into()))?;
        Self::start(name, command.to_vec(), None, None, PathBuf::from(program)).await
    }

    /// Connects to a Streamable HTTP server at `url` (`http://host:port/mcp`),
    /// presenting `bearer_token` when given, and completes the MCP handshake.
    pub async fn connect_http(
        name: &str,
        url: &str,
        bearer_token: Option<String>,
    ) -> Result<McpClient, ProviderError> {
        crate::net::target::HttpTarget::parse(url, DEFAULT_TIMEOUT_MS).map_err(ProviderError)?;
        Self::start(
            name,
            Vec::new(),
            Some(url.to_owned()),
            bearer_token,
            PathBuf::new(),
        )
        .await
    }

    async fn start(
        name: &str,
        command: Vec<String>,
        url: Option<String>,
        bearer_token: Option<String>,
        program: PathBuf,
    ) -> Result<McpClient, ProviderError> {
        let config = UpstreamConfig {
            name: name.to_owned(),
            command,
            url,
            bearer_token_env: None,
            bearer_token,
            tls_ca_file: None,
            env: Default::default(),
            secret_env: Default::default(),
            prefix: false,
            unknown_arguments: None,
            validate: None,
            reasons: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            rerun_abandoned: None,
            restart_after_timeouts: 0,
            ping_interval_ms: 0,
            // A host's client takes answers as 2025-11-25 results.
            protocol: UpstreamProtocol::Handshake,
            pins: None,
            tools: Default::default(),
            labels: Default::default(),
            credential: Vec::new(),
            credential_env: None,
            max_caller_processes: None,
            caller_process_idle_ms: None,
        };
        let upstream = Arc::new(Upstream::new(0, config, program, DEFAULT_MAX_MESSAGE_BYTES));
        let inbound: Arc<dyn Inbound> = Arc::new(HostInbound);
        let weak: Weak<dyn Inbound> = Arc::downgrade(&inbound);
        let init = json!({"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "warden-core host", "version": env!("CARGO_PKG_VERSION")}});
        upstream.connect(weak, &init).await.map_err(ProviderError)?;
        Ok(McpClient {
            upstream,
            _inbound: inbound,
        })
    }

    /// Ends the server process (or the HTTP session).
    pub async fn shutdown(&self) {
        self.upstream.shutdown().await;
    }
}

impl ToolProvider for McpClient {
    fn tools_for_llm(&self) -> HookFuture<'_, Result<Vec<Value>, ProviderError>> {
        Box::pin(async move {
            let tools = self.upstream.list_tools().await.map_err(ProviderError)?;
            // Each declaration is JSON text as the server wrote it, so it parses.
            Ok(tools
                .iter()
                .map(|t| serde_json::from_str(t.get()).unwrap_or(Value::Null))
                .collect())
        })
    }

    fn execute_tool_calls(
        &self,
        calls: Vec<ToolCall>,
    ) -> HookFuture<'_, Result<Vec<ToolResult>, ProviderError>> {
        Box::pin(async move {
            let conn = self
                .upstream
                .conn()
                .ok_or_else(|| ProviderError("the MCP server is not running".into()))?;
            let mut results = Vec::with_capacity(calls.len());
            for call in calls {
                let arguments = match &call.arguments {
                    Value::Object(_) => Some(call.arguments.clone()),
                    Value::Null => Some(json!({})),
                    Value::String(t) if t.trim().is_empty() => Some(json!({})),
                    Value::String(t) => serde_json::from_str::<Value>(t)
                        .ok()
                        .filter(Value::is_object),
                    _ => None,
                };
                let Some(arguments) = arguments else {
                    let text = answer::arguments_not_object(&call.name);
                    results.push(ToolResult {
                        id: call.id,
                        result: error_result(&text),
                    });
                    continue;
                };
                let response = conn
                    .request(
                        "tools/call",
                        Some(json!({"name": call.name, "arguments": arguments})),
                        self.upstream.timeout_ms(),
                    )
                    .await
                    .map_err(|e| ProviderError(format!("tools/call {}: {e}", call.name)))?;
                let result = match (response.get("result"), response.get("error")) {
                    (Some(r), _) => r.clone(),
                    (None, Some(e)) => error_result(
                        e.get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("the server refused the call"),
                    ),
                    _ => error_result(crate::texts::UPSTREAM_EMPTY_ANSWER),
                };
                results.push(ToolResult {
                    id: call.id,
                    result,
                });
            }
            Ok(results)
        })
    }
}

fn error_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}
