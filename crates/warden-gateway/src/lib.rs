//! # warden-gateway
//!
//! mcp-warden's gateway: the [`warden_core`] pipeline in front of MCP servers.
//! It reads one TOML [`config::Config`], runs each `[[upstream]]` as a child
//! process ([`upstream`]), serves clients over the stdio front ([`stdio`]) or Streamable HTTP ([`http`]), and
//! relays every message it does not govern unchanged ([`gateway`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = warden_gateway::config::Config::load("warden.toml".as_ref())?;
//! let gateway = warden_gateway::gateway::Gateway::new(config).await?;
//! warden_gateway::stdio::serve(gateway).await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

pub mod auth;
pub mod client;
pub mod config;
pub mod gateway;
pub mod http;
pub mod jsonrpc;
pub mod metrics;
pub mod modern;
pub mod net;
pub mod stdio;
pub mod trail;
pub mod upstream;
pub mod webhook;
