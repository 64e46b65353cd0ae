//! The stateless 2026-07-28 revision, as far as the gateway's own hop goes.
//!
//! A request that carries `_meta["io.modelcontextprotocol/protocolVersion"]` speaks
//! it: no `initialize`, the client's capabilities ride on every request, every
//! result says its `resultType`, lists say how long they may be cached, and the
//! gateway asks its client for input (an approval) by answering with an
//! `InputRequiredResult` that the client retries with `inputResponses` and the
//! `requestState` it was given. That state comes back from the client, so it is
//! sealed (ChaCha20-Poly1305 under a key only this gateway, or its fleet,
//! holds) and bound to the caller, the tool, the arguments and an expiry.
//!
//! The envelope belongs to the client↔gateway hop: it is taken out of `_meta`
//! at the edge, before a request is dispatched, into the request's
//! [`Revision`] (`context.rs`), the one context the call path asks about the
//! revision through its hooks; a result is stamped on its way out
//! ([`Revision::stamp`]); upstreams speak the revision they negotiated with the
//! gateway. Deeper in, two things only this revision needs: an upstream's
//! request during a call becomes an input request of the call's result
//! ([`wait_bridged`]), and the call is set aside until the client retries
//! ([`ParkedCalls`]).
//!
//! The files: `context.rs` ([`Revision`] and its hooks), `requests.rs` (what
//! only a 2026-07-28 request meets at dispatch: removed methods,
//! `server/discover`, `subscriptions/listen`), `wire.rs` (the names and codes),
//! `listen.rs` (`subscriptions/listen` streams), `envelope.rs`, `results.rs` (stamps, cache hints, `InputRequiredResult`s),
//! `seal.rs` (the sealed `requestState` and what it is bound to), `parked.rs`,
//! and `input.rs` (a 2026-07-28 upstream's input rounds, for either client).

mod context;
mod envelope;
pub(crate) mod input;
mod listen;
mod parked;
mod requests;
mod results;
mod seal;
mod wire;

pub use context::{ApprovalRound, FlowTrail, Revision};
pub use envelope::{
    envelope_error, envelope_shape_error, http_status, log_level_name, log_rank, take_envelope,
    Envelope,
};
pub use parked::{park_id, wait_bridged, Bridged, ParkedCalls};
pub use results::{
    approval_required, discover, input_required, stamp_result, upstream_answer, CacheHint,
};
pub use seal::{unix_now, Binding, Sealed, StateKey};
pub use wire::*;

#[cfg(test)]
mod tests;
