//! # warden-rmcp
//!
//! mcp-warden's pipeline for [rmcp](https://docs.rs/rmcp), the official Rust MCP
//! SDK, in process, with the same settings and the same answers as the gateway:
//!
//! - on the server side, [`Governed`] puts the pipeline (grants and rules,
//!   reasons, aliases, unknown keys, pins, schema validation) in front of any
//!   rmcp [`ServerHandler`](rmcp::ServerHandler); its settings come from a
//!   `warden.toml` through the gateway's own loader ([`Governance::from_config`])
//!   or are built in code;
//! - on the client side, [`RmcpProvider`] is a warden-core
//!   [`ToolProvider`](warden_core::provider::ToolProvider) over rmcp's client
//!   peer, so an rmcp agent host stacks `PolicyLayer`, `StageLayer` … over the
//!   servers it already reaches.
//!
//! ```no_run
//! # async fn run(my_server: impl rmcp::ServerHandler) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use rmcp::ServiceExt;
//! use warden_rmcp::{Governance, Governed};
//!
//! let config = warden_gateway::config::Config::load("warden.toml".as_ref())?;
//! let governance = Arc::new(Governance::from_config(&config, "notes")?);
//! let server = Governed::new(my_server, governance)
//!     .serve(rmcp::transport::stdio())
//!     .await?;
//! server.waiting().await?;
//! # Ok(()) }
//! ```
//!
//! `examples/rmcp_governed.rs` runs both sides; docs/library.md explains them.
#![forbid(unsafe_code)]

pub mod governance;
mod handler;
pub mod provider;
pub mod server;

pub use governance::{Governance, NoSuchUpstream};
pub use provider::RmcpProvider;
pub use server::{CallerOf, Governed};
