//! The gateway's fronts: how clients reach it. Each turns what arrives into
//! messages for [`crate::gateway::Gateway::handle`] and writes back the
//! [`crate::gateway::Outgoing`] messages of its sessions.

pub mod auth;
pub mod http;
pub mod stdio;
