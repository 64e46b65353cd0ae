//! The Streamable HTTP front: one endpoint, `/mcp`, for POST, GET and DELETE.
//!
//! - [`handler`]: every request's checks, in order, and the POST, GET and DELETE
//!   answers, from the typed reasons the other parts give;
//! - [`reply`]: every answer the front writes itself (status, JSON-RPC body, headers);
//! - [`session`]: HTTP sessions, their table and caps, resumption;
//! - [`streams`]: a session's streams and the sorting of its messages onto them;
//! - [`sse`]: response bodies, JSON or server-sent events;
//! - [`conn`]: connections: the caps on how many, the head and idle timeouts;
//! - [`hosts`]: the Host and Origin check (DNS rebinding), shared with the admin listener;
//! - [`drain`]: the graceful stop on SIGTERM;
//! - [`server`]: the listener.
//!
//! `/healthz` and `/readyz` are answered on the same listener, before any other
//! check (see [`handler`]).

pub(crate) mod conn;
mod drain;
pub mod handler;
pub(crate) mod hosts;
mod http_session;
mod reply;
mod sealed;
pub mod server;
mod sse;
mod streams;

pub use handler::{Front, ENDPOINT};
pub use server::Server;
pub use sse::{OutBody, SseBody};
