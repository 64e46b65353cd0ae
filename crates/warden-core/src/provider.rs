//! The client side: a stack of tool providers for Rust agent hosts.
//!
//! A [`ToolProvider`] lists tool declarations for the model and executes a batch
//! of the model's tool calls, returning one result per call in the caller's order.
//! An MCP client connection is one; a host's own in-process tools are another.
//! Layers wrap a provider and are providers themselves, so they stack:
//!
//! ```text
//! PolicyLayer( StageLayer::unknown_keys( StageLayer::reasons( mcp_client ) ) )
//! ```
//!
//! Each layer runs the very stage code the gateway runs ([`crate::stage`]), over a
//! [`Catalogue`] it builds from the most recent listing that passed through it.

use crate::access::Rules;
use crate::answer;
use crate::call::{Answer, CallReport, Caller};
use crate::catalogue::{ArgCheck, Catalogue, ToolEntry};
use crate::hooks::HookFuture;
use crate::policy::{ToolPolicy, UnknownMode};
use crate::stage::grant::{Grant, GrantDecision};
use crate::stage::unknown_keys::{Session, UnknownKeyWarning, WarnSink};
use crate::stage::{self, ArgCall, Step};
use serde_json::{Map, Value};
use std::sync::{Arc, RwLock};

/// One tool call as a model emitted it. `arguments` is an object, or the JSON
/// text a model's function call actually travels as (any other value is passed on
/// for the provider to judge).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// The result of one call: an MCP `CallToolResult` (`content`, `isError`, …).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub id: String,
    pub result: Value,
}

impl ToolResult {
    pub fn is_error(&self) -> bool {
        self.result
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// The text of the first text content item.
    pub fn text(&self) -> &str {
        self.result
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    fn error(id: &str, text: &str) -> ToolResult {
        ToolResult {
            id: id.to_owned(),
            result: Answer::ToolError(text.to_owned())
                .to_tool_result()
                .unwrap_or_default(),
        }
    }
}

/// A provider's own failure (not a tool's): it passes through every layer unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProviderError(pub String);

pub trait ToolProvider: Send + Sync {
    /// The declarations to show the model. A provider that cannot list fails:
    /// a silently shorter catalogue would leave the model guessing.
    fn tools_for_llm(&self) -> HookFuture<'_, Result<Vec<Value>, ProviderError>>;
    /// Runs the calls and returns one result per call, in the same order.
    fn execute_tool_calls(
        &self,
        calls: Vec<ToolCall>,
    ) -> HookFuture<'_, Result<Vec<ToolResult>, ProviderError>>;
}

impl<P: ToolProvider + ?Sized> ToolProvider for Arc<P> {
    fn tools_for_llm(&self) -> HookFuture<'_, Result<Vec<Value>, ProviderError>> {
        (**self).tools_for_llm()
    }
    fn execute_tool_calls(
        &self,
        calls: Vec<ToolCall>,
    ) -> HookFuture<'_, Result<Vec<ToolResult>, ProviderError>> {
        (**self).execute_tool_calls(calls)
    }
}

/// What a call's arguments read as, for the stages.
fn arguments_object(args: &Value) -> Option<Map<String, Value>> {
    match args {
        Value::Object(m) => Some(m.clone()),
        Value::String(text) if !text.trim().is_empty() => match serde_json::from_str(text) {
            Ok(Value::Object(m)) => Some(m),
            _ => None,
        },
        _ => None,
    }
}

/// Sends the calls a layer did not answer to the inner provider and puts every
/// result back in the caller's order (`answered[i]` is `None` where the inner
/// provider's next result belongs). Inner errors pass through unchanged.
async fn forward_rest<P: ToolProvider>(
    inner: &P,
    answered: Vec<Option<ToolResult>>,
    forward: Vec<ToolCall>,
) -> Result<Vec<ToolResult>, ProviderError> {
    let all_forwarded = forward.len() == answered.len();
    let mut results = inner.execute_tool_calls(forward).await?.into_iter();
    if all_forwarded {
        return Ok(results.collect());
    }
    Ok(answered
        .into_iter()
        .map(|a| {
            a.or_else(|| results.next())
                .unwrap_or_else(|| ToolResult::error("", answer::INTERNAL_ERROR))
        })
        .collect())
}

/// Called with (tool, reason) when the reasons layer takes a `reason` out of a call.
pub type OnReason = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// Which stage a [`StageLayer`] runs.
enum Kind {
    UnknownKeys(Session),
    Reasons(Option<OnReason>),
    Schema,
    Pins,
}

/// A layer running one argument stage of the pipeline over its inner provider.
pub struct StageLayer<P> {
    inner: P,
    kind: Kind,
    policy: ToolPolicy,
    /// Built from the most recent successful listing; replaced only by another.
    catalogue: RwLock<Arc<Catalogue>>,
}

impl<P: ToolProvider> StageLayer<P> {
    fn new(inner: P, kind: Kind, policy: ToolPolicy) -> Self {
        StageLayer {
            inner,
            kind,
            policy,
            catalogue: RwLock::new(Arc::new(Catalogue::default())),
        }
    }

    /// A3 on the client side. In `warn` mode (seed 000's audit layer) every call is
    /// forwarded as the very object the caller passed, and each (tool, key) pair is
    /// reported once per layer instance through `on_warn`; `strip` removes the keys;
    /// `reject` answers the call with the did-you-mean text and does not forward it.
    pub fn unknown_keys(inner: P, mode: UnknownMode, on_warn: Arc<dyn WarnSink>) -> Self {
        let policy = ToolPolicy {
            unknown: mode,
            validate: false,
            ..Default::default()
        };
        Self::new(inner, Kind::UnknownKeys(Session::new(on_warn)), policy)
    }

    /// R1: adds an optional `reason` to every declaration and takes it out of calls,
    /// handing it to `on_reason(tool, reason)` when given.
    pub fn reasons(inner: P, on_reason: Option<OnReason>) -> Self {
        let policy = ToolPolicy {
            reasons: true,
            validate: false,
            ..Default::default()
        };
        Self::new(inner, Kind::Reasons(on_reason), policy)
    }

    /// A5: validates calls against the declared schemas; violations are answered.
    pub fn schema(inner: P) -> Self {
        Self::new(
            inner,
            Kind::Schema,
            ToolPolicy {
                validate: true,
                ..Default::default()
            },
        )
    }

    /// A7: fixes arguments for every tool that declares them; they disappear from
    /// the declarations and a call that sets one is answered.
    pub fn pins(inner: P, pins: Map<String, Value>) -> Self {
        Self::new(
            inner,
            Kind::Pins,
            ToolPolicy {
                pins,
                validate: false,
                ..Default::default()
            },
        )
    }

    /// The tools this layer audits now: listed last time, with at least one property.
    pub fn audited_tools(&self) -> Vec<String> {
        let catalogue = self.snapshot();
        catalogue
            .tools()
            .iter()
            .filter(|t| t.check == ArgCheck::Declared && !t.params.is_empty())
            .map(|t| t.name.clone())
            .collect()
    }

    fn snapshot(&self) -> Arc<Catalogue> {
        self.catalogue
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn policy_for(&self, tool: &Value) -> ToolPolicy {
        let mut policy = self.policy.clone();
        // Pins apply to the tools that declare them, and only those.
        let declared = |k: &String| {
            tool.pointer("/inputSchema/properties")
                .and_then(|p| p.get(k))
                .is_some()
        };
        policy.pins.retain(|k, _| declared(k));
        policy
    }

    /// Runs this layer's stage on one call: the call to forward, or its answer.
    fn judge(&self, tool: &ToolEntry, call: ToolCall) -> Result<ToolCall, ToolResult> {
        let Some(mut args) = arguments_object(&call.arguments) else {
            return Ok(call); // not ours to judge: the provider answers it in its own words
        };
        let mut report = CallReport::default();
        let mut arg_call = ArgCall {
            tool,
            args: &mut args,
            report: &mut report,
        };
        let step = match &self.kind {
            Kind::UnknownKeys(session) => stage::unknown_keys::apply(&mut arg_call, session),
            Kind::Reasons(_) => stage::reasons::apply(&mut arg_call),
            Kind::Schema => stage::schema::apply(&mut arg_call),
            Kind::Pins => stage::pin::apply(&mut arg_call),
        };
        match step {
            Step::Pass => Ok(call),
            Step::Rewritten => {
                if let (Kind::Reasons(Some(on_reason)), Some(reason)) = (&self.kind, &report.reason)
                {
                    on_reason(&call.name, reason);
                }
                Ok(ToolCall {
                    arguments: Value::Object(args),
                    ..call
                })
            }
            Step::Answer(answer) => Err(ToolResult::error(&call.id, answer.text())),
        }
    }
}

impl<P: ToolProvider> ToolProvider for StageLayer<P> {
    fn tools_for_llm(&self) -> HookFuture<'_, Result<Vec<Value>, ProviderError>> {
        Box::pin(async move {
            let tools = self.inner.tools_for_llm().await?;
            let per_tool = PerTool(
                tools
                    .iter()
                    .filter_map(|t| Some((t.get("name")?.as_str()?.to_owned(), self.policy_for(t))))
                    .collect(),
            );
            let mut builder = Catalogue::builder(&per_tool);
            builder.add_upstream("", false, &tools);
            let (catalogue, _problems) = builder.build();
            let published: Vec<Value> = match self.kind {
                // These layers change what the model is shown; the others show it as listed.
                Kind::Reasons(_) | Kind::Pins => tools
                    .iter()
                    .map(|t| {
                        let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
                        catalogue
                            .get(name)
                            .map_or_else(|| t.clone(), |e| e.published_value())
                    })
                    .collect(),
                _ => tools,
            };
            *self.catalogue.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(catalogue);
            Ok(published)
        })
    }

    fn execute_tool_calls(
        &self,
        calls: Vec<ToolCall>,
    ) -> HookFuture<'_, Result<Vec<ToolResult>, ProviderError>> {
        Box::pin(async move {
            let catalogue = self.snapshot();
            let mut answered: Vec<Option<ToolResult>> = Vec::with_capacity(calls.len());
            let mut forward = Vec::with_capacity(calls.len());
            for call in calls {
                let verdict = match catalogue.get(&call.name) {
                    Some(tool) => self.judge(tool, call),
                    None => Ok(call), // never listed: nothing to compare against
                };
                match verdict {
                    Ok(call) => {
                        answered.push(None);
                        forward.push(call);
                    }
                    Err(result) => answered.push(Some(result)),
                }
            }
            drop(catalogue);
            forward_rest(&self.inner, answered, forward).await
        })
    }
}

/// Policies decided per tool while listing.
struct PerTool(std::collections::HashMap<String, ToolPolicy>);

impl crate::catalogue::PolicySource for PerTool {
    fn policy_for(&self, _upstream: &str, tool: &str) -> ToolPolicy {
        self.0.get(tool).cloned().unwrap_or_default()
    }
}

/// The host's approval callback for `ask`: (caller, tool, arguments) → approved?
pub type Approve = Arc<dyn Fn(&Caller, &str, &Value) -> HookFuture<'static, bool> + Send + Sync>;

/// G1-G3 and `ask` on the client side: the rules decide what the model sees and
/// may call; a hidden tool is answered like an absent one; `ask` calls `approve`.
pub struct PolicyLayer<P> {
    inner: P,
    rules: Rules,
    caller: Caller,
    approve: Approve,
}

impl<P: ToolProvider> PolicyLayer<P> {
    pub fn new(inner: P, rules: Rules, caller: Caller, approve: Approve) -> Self {
        PolicyLayer {
            inner,
            rules,
            caller,
            approve,
        }
    }
}

impl<P: ToolProvider> ToolProvider for PolicyLayer<P> {
    fn tools_for_llm(&self) -> HookFuture<'_, Result<Vec<Value>, ProviderError>> {
        Box::pin(async move {
            let tools = self.inner.tools_for_llm().await?;
            Ok(tools
                .into_iter()
                .filter(|t| {
                    let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
                    self.rules.decide(&self.caller, name, None) != GrantDecision::Hide
                })
                .collect())
        })
    }

    fn execute_tool_calls(
        &self,
        calls: Vec<ToolCall>,
    ) -> HookFuture<'_, Result<Vec<ToolResult>, ProviderError>> {
        Box::pin(async move {
            let mut answered = Vec::with_capacity(calls.len());
            let mut forward = Vec::new();
            for call in calls {
                let verdict = match self.rules.decide(&self.caller, &call.name, None) {
                    GrantDecision::Allow => None,
                    GrantDecision::Ask => {
                        let args = arguments_object(&call.arguments)
                            .map(Value::Object)
                            .unwrap_or_else(|| call.arguments.clone());
                        if (self.approve)(&self.caller, &call.name, &args).await {
                            None
                        } else {
                            Some(ToolResult::error(&call.id, answer::APPROVAL_REFUSED))
                        }
                    }
                    GrantDecision::Hide | GrantDecision::Unavailable => Some(ToolResult::error(
                        &call.id,
                        &format!("Error: {}", answer::unknown_tool(&call.name)),
                    )),
                };
                if verdict.is_none() {
                    forward.push(call);
                }
                answered.push(verdict);
            }
            forward_rest(&self.inner, answered, forward).await
        })
    }
}

/// A host's own in-process tool: its arguments in, a `CallToolResult` out.
pub type LocalTool = Arc<dyn Fn(&Map<String, Value>) -> Value + Send + Sync>;

/// A provider for tools the host implements itself (a delegation tool, a lease
/// tool), so they sit under the same layers as the MCP servers' tools.
#[derive(Default)]
pub struct LocalTools {
    tools: Vec<(Value, LocalTool)>,
}

impl LocalTools {
    /// Adds a tool: its declaration (`name`, `inputSchema`, …) and its body.
    pub fn with(mut self, declaration: Value, body: LocalTool) -> Self {
        self.tools.push((declaration, body));
        self
    }
}

impl ToolProvider for LocalTools {
    fn tools_for_llm(&self) -> HookFuture<'_, Result<Vec<Value>, ProviderError>> {
        let tools = self.tools.iter().map(|(d, _)| d.clone()).collect();
        Box::pin(async move { Ok(tools) })
    }

    fn execute_tool_calls(
        &self,
        calls: Vec<ToolCall>,
    ) -> HookFuture<'_, Result<Vec<ToolResult>, ProviderError>> {
        let results = calls
            .into_iter()
            .map(|call| {
                let body = self
                    .tools
                    .iter()
                    .find(|(d, _)| d.get("name").and_then(Value::as_str) == Some(&call.name));
                match (
                    body,
                    arguments_object(&call.arguments)
                        .or_else(|| call.arguments.is_null().then(Map::new)),
                ) {
                    (None, _) => ToolResult::error(
                        &call.id,
                        &format!("Error: {}", answer::unknown_tool(&call.name)),
                    ),
                    (Some(_), None) => {
                        ToolResult::error(&call.id, &answer::arguments_not_object(&call.name))
                    }
                    (Some((_, body)), Some(args)) => ToolResult {
                        id: call.id,
                        result: body(&args),
                    },
                }
            })
            .collect();
        Box::pin(async move { Ok(results) })
    }
}

/// A sink that drops warnings (for stacks that only strip or reject).
pub fn no_warnings() -> Arc<dyn WarnSink> {
    Arc::new(|_: &UnknownKeyWarning| {})
}
