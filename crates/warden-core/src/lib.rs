//! # warden-core
//!
//! The tool-call pipeline of mcp-warden, free of I/O and of any async runtime, for
//! any Rust MCP host or server. It decides, for each `tools/list` and `tools/call`,
//! what a caller may see, whether its arguments are the ones the tool declared,
//! and what goes upstream:
//!
//! normalise → grant → resolve → reasons → aliases → unknown keys → pin → schema
//!
//! (the order is written once, in [`pipeline`]). Hooks and the upstream call
//! run in the host on a [`Outcome::Forward`].
//!
//! ```
//! use std::sync::Arc;
//! use serde_json::json;
//! use warden_core::{Caller, Catalogue, Outcome, Pipeline, Session, ToolPolicy, UnknownMode};
//!
//! let tools = [json!({"name": "create_note", "inputSchema": {"type": "object",
//!     "properties": {"title": {"type": "string"}, "text": {"type": "string"}}}})];
//! let policy = ToolPolicy { unknown: UnknownMode::Reject, ..Default::default() };
//! let (catalogue, problems) = Catalogue::from_tools(&tools, &policy);
//! assert!(problems.is_empty());
//!
//! let pipeline = Pipeline::new();
//! let session = Session::new(Arc::new(|w: &warden_core::UnknownKeyWarning| eprintln!("{w:?}")));
//! let me = Caller::new("local");
//! let call = json!({"name": "create_note", "arguments": {"title": "Plan", "txt": "Launch"}});
//! let verdict = pipeline.check(&catalogue, &session, Some(&me), call);
//! match verdict.outcome {
//!     Outcome::Answer { answer, .. } => assert_eq!(answer.text(),
//!         "Error: Unknown parameter 'txt' for tool 'create_note'.\n\
//!          Did you mean: text?\n\
//!          Allowed parameters: title, text."),
//!     Outcome::Forward(_) => unreachable!(),
//! }
//! ```
//!
//! ## On the client side: a provider stack
//!
//! An agent host puts the same stages between its model and its tools with
//! [`provider`]: layers that each look like a tool provider and stack.
//!
//! ```no_run
//! use std::sync::Arc;
//! use warden_core::provider::{PolicyLayer, StageLayer, ToolCall, ToolProvider};
//! use warden_core::{Caller, Rules, UnknownKeyWarning, UnknownMode};
//!
//! async fn govern(registry: Arc<dyn ToolProvider>) {
//!     let stack = PolicyLayer::new(
//!         StageLayer::unknown_keys(
//!             StageLayer::reasons(StageLayer::schema(registry), None),
//!             UnknownMode::Warn,
//!             Arc::new(|w: &UnknownKeyWarning| eprintln!("{} got {:?}", w.tool, w.unknown_keys)),
//!         ),
//!         Rules::default(),
//!         Caller::new("host"),
//!         Arc::new(|_: &Caller, _: &str, _: &serde_json::Value| Box::pin(async { false })),
//!     );
//!     let tools = stack.tools_for_llm().await.unwrap(); // shown to the model
//!     let call = ToolCall { id: "call_1".into(), name: "fs_read".into(), arguments: "{\"path\":\"a\"}".into() };
//!     let results = stack.execute_tool_calls(vec![call]).await.unwrap();
//!     # let _ = (tools, results);
//! }
//! ```
//! `warden_gateway::client::McpClient` is a provider for an MCP server run as a
//! child process; `examples/agent_host.rs` stacks every layer over one.
#![forbid(unsafe_code)]

pub mod access;
pub mod answer;
pub mod call;
pub mod catalogue;
pub mod cel_when;
mod compiles;
pub mod condition;
pub mod expected;
pub mod hint;
pub mod hooks;
pub mod meta;
pub mod pipeline;
pub mod policy;
pub mod provider;
pub mod scan;
pub mod stage;

pub use access::{CallerSelector, Effect, Rule, RuleProblem, Rules};
pub use call::{
    Answer, CallReport, CallScope, Caller, Forward, Outcome, Refusal, Shadowed, Verdict,
};
pub use catalogue::{ArgCheck, BuildProblem, Catalogue, PolicySource, ToolEntry};
pub use cel_when::{CelCondition, CelFailure, CelInput};
pub use condition::{ArgPath, Condition, Conditions, Test};
pub use hooks::{
    AfterHook, BeforeDecision, BeforeHook, CallContext, CallEnd, DenyReason, HookError,
};
pub use meta::{Meta, MetaLimits};
pub use pipeline::Pipeline;
pub use policy::{LayeredPolicy, Overrides, ToolPolicy, UnknownMode};
pub use stage::grant::{AllowAll, ArgDecision, Grant, GrantDecision};
pub use stage::unknown_keys::{Session, UnknownKeyWarning, WarnSink};
