//! A [`ToolProvider`] over an rmcp client, so an rmcp agent host stacks
//! warden-core's layers (`PolicyLayer`, `StageLayer` …) over the servers it
//! already reaches with rmcp, on whatever transport rmcp connected them (L2).

use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::{Peer, ServiceError};
use serde_json::{json, Map, Value};
use warden_core::answer;
use warden_core::hooks::HookFuture;
use warden_core::provider::{ProviderError, ToolCall, ToolProvider, ToolResult};

/// The tools of one MCP server, reached through rmcp's client peer.
#[derive(Clone)]
pub struct RmcpProvider {
    peer: Peer<RoleClient>,
}

impl RmcpProvider {
    /// A provider over `peer` (`running.peer().clone()` for an rmcp client).
    pub fn new(peer: Peer<RoleClient>) -> Self {
        RmcpProvider { peer }
    }

    /// A provider over a running rmcp client.
    pub fn of<S: rmcp::Service<RoleClient>>(client: &RunningService<RoleClient, S>) -> Self {
        Self::new(client.peer().clone())
    }

    /// One call: its result, a tool error when the server refused it, or the
    /// provider's failure when the server could not be asked.
    async fn call(&self, call: ToolCall) -> Result<ToolResult, ProviderError> {
        let Some(arguments) = arguments(&call.arguments) else {
            let text = answer::arguments_not_object(&call.name);
            return Ok(error_result(call.id, &text));
        };
        let params = CallToolRequestParams::new(call.name.clone()).with_arguments(arguments);
        match self.peer.call_tool(params).await {
            Ok(result) => {
                let result = serde_json::to_value(&result)
                    .map_err(|e| ProviderError(format!("tools/call {}: {e}", call.name)))?;
                Ok(ToolResult {
                    id: call.id,
                    result,
                })
            }
            // The server's own words, as warden's McpClient passes them on; never its `data`.
            Err(ServiceError::McpError(e)) => Ok(error_result(call.id, &e.message)),
            Err(e) => Err(ProviderError(format!("tools/call {}: {e}", call.name))),
        }
    }
}

/// A call's arguments as an object: an object, JSON text of one, or nothing.
fn arguments(args: &Value) -> Option<Map<String, Value>> {
    match args {
        Value::Object(m) => Some(m.clone()),
        Value::Null => Some(Map::new()),
        Value::String(t) if t.trim().is_empty() => Some(Map::new()),
        Value::String(t) => match serde_json::from_str(t) {
            Ok(Value::Object(m)) => Some(m),
            _ => None,
        },
        _ => None,
    }
}

fn error_result(id: String, text: &str) -> ToolResult {
    ToolResult {
        id,
        result: json!({"content": [{"type": "text", "text": text}], "isError": true}),
    }
}

impl ToolProvider for RmcpProvider {
    fn tools_for_llm(&self) -> HookFuture<'_, Result<Vec<Value>, ProviderError>> {
        Box::pin(async move {
            let tools = self
                .peer
                .list_all_tools()
                .await
                .map_err(|e| ProviderError(format!("tools/list: {e}")))?;
            tools
                .iter()
                .map(|t| {
                    serde_json::to_value(t).map_err(|e| ProviderError(format!("tools/list: {e}")))
                })
                .collect()
        })
    }

    /// One after another, in the caller's order, as the gateway's `McpClient` runs them.
    fn execute_tool_calls(
        &self,
        calls: Vec<ToolCall>,
    ) -> HookFuture<'_, Result<Vec<ToolResult>, ProviderError>> {
        Box::pin(async move {
            let mut results = Vec::with_capacity(calls.len());
            for call in calls {
                results.push(self.call(call).await?);
            }
            Ok(results)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_read_as_a_model_sends_them() {
        assert_eq!(
            arguments(&json!({"a": 1})),
            Some(json!({"a": 1}).as_object().cloned().unwrap())
        );
        assert_eq!(
            arguments(&json!(r#"{"a":1}"#)),
            Some(json!({"a": 1}).as_object().cloned().unwrap())
        );
        assert_eq!(arguments(&Value::Null), Some(Map::new()));
        assert_eq!(arguments(&json!(" ")), Some(Map::new()));
        assert_eq!(arguments(&json!("[1]")), None);
        assert_eq!(arguments(&json!([1])), None);
    }
}
