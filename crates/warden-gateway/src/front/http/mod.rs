//! The Streamable HTTP front: one endpoint, `/mcp`, for POST, GET and DELETE.
//!
//! - [`handler`]: every request's checks, in order, and the POST, GET and DELETE
//!   answers (each refusal built there, from the typed reasons the others give);
//! - [`session`]: HTTP sessions, the streams their messages go out on, resumption;
//! - [`sse`]: response bodies, JSON or server-sent events;
//! - [`conn`]: connections: the caps on how many, the head and idle timeouts;
//! - [`server`]: the listener.

mod conn;
pub mod handler;
pub mod server;
mod session;
mod sse;

pub use handler::{Front, ENDPOINT};
pub use server::Server;
pub use sse::{OutBody, SseBody};
