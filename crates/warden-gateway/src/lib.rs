//! # warden-gateway
//!
//! mcp-warden's gateway: the [`warden_core`] pipeline in front of MCP servers.
//!
//! - [`config`]: the one TOML file, checked, turned into runtime values;
//! - [`front`]: how clients reach the gateway: stdio, Streamable HTTP, and who
//!   the caller is ([`front::auth`]);
//! - [`gateway`]: sessions, the catalogue, a call's path from start to settle,
//!   and everything relayed between clients and upstreams;
//! - [`upstream`]: the servers behind it, a child process or an HTTP server
//!   behind one type;
//! - [`live`]: the configuration file of a running gateway, read again on
//!   SIGHUP or when it changes (`run --watch`);
//! - [`texts`]: the gateway's protocol and HTTP texts (call and tool texts are
//!   in [`warden_core::answer`]);
//! - [`logged`]: how strings from callers and upstreams are written to the log.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = warden_gateway::config::Config::load("warden.toml".as_ref())?;
//! let gateway = warden_gateway::gateway::Gateway::new(config).await?;
//! warden_gateway::front::stdio::serve(gateway).await?;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

pub mod admin;
pub mod client;
pub mod config;
pub mod front;
pub mod gateway;
pub mod jsonrpc;
pub mod live;
pub mod logged;
pub mod memory;
pub mod metrics;
pub mod net;
pub mod otel;
pub mod pins;
pub mod texts;
pub mod upstream;
