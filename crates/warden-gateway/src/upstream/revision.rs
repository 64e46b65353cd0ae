//! The revision the gateway speaks to an upstream over one connection, and
//! what that decides on the upstream's hop.
//!
//! A connection speaks the stateless 2026-07-28 revision when the upstream
//! offered it in `server/discover`, else the revision its `initialize` answer
//! named. [`Conn::revision`](super::Conn::revision) says which; the code that
//! talks to the upstream asks the [`UpstreamRevision`]'s hooks instead of
//! branching on it:
//! - what a request's params carry: [`UpstreamRevision::envelop`] (the envelope
//!   in `_meta`, with the client's capabilities and log level);
//! - how the upstream is shown to be alive: [`UpstreamRevision::liveness`];
//! - how its list changes are heard: [`UpstreamRevision::listens`] (the
//!   gateway's own `subscriptions/listen` stream, whose notifications carry its
//!   tag);
//! - how it asks for input: [`UpstreamRevision::asks_in_results`];
//! - what a client is offered of it: [`UpstreamRevision::offer`] and
//!   [`UpstreamRevision::log_level_rides`] (an older client's log level).
//!
//! The client's side of a request is `gateway/rev2026`'s `Revision`; which
//! connection (and so which of these) a client's request goes over is
//! [`Upstream::conn_for`](super::Upstream::conn_for) and
//! [`Upstream::revision_for`](super::Upstream::revision_for) (`legacy.rs`).

use serde_json::{json, Map, Value};

/// The stateless revision, spoken to upstreams that offer it in `server/discover`.
pub const STATELESS_VERSION: &str = "2026-07-28";
/// The envelope's `_meta` keys, on both hops (`gateway/rev2026/wire.rs`
/// re-exports them for the client's).
pub const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
pub const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
pub const CLIENT_INFO_KEY: &str = "io.modelcontextprotocol/clientInfo";
pub const LOG_LEVEL_KEY: &str = "io.modelcontextprotocol/logLevel";

/// The revision spoken to an upstream over one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamRevision {
    /// 2026-07-28: every request carries the envelope; no `ping`, no session.
    Stateless,
    /// A revision up to 2025-11-25, spoken over the session `initialize` opened.
    Session,
}

impl UpstreamRevision {
    /// The revision of a connection or upstream flagged `stateless` (it
    /// offered 2026-07-28 in `server/discover`).
    pub(super) fn of(stateless: bool) -> UpstreamRevision {
        if stateless {
            UpstreamRevision::Stateless
        } else {
            UpstreamRevision::Session
        }
    }

    /// Whether it is the stateless 2026-07-28 revision.
    pub fn is_2026(self) -> bool {
        self == UpstreamRevision::Stateless
    }

    /// `params` as the upstream takes them: at 2026-07-28 with the envelope in
    /// `_meta` (the capabilities of the client the request is for, never more;
    /// none for the gateway's own requests), else unchanged.
    /// `level`: the least severe log level the client wants for the request.
    pub fn envelop(
        self,
        params: Option<Value>,
        capabilities: Option<&Value>,
        level: Option<Value>,
    ) -> Option<Value> {
        if !self.is_2026() {
            return params;
        }
        let mut params = envelope(params, capabilities);
        if let (Some(level), Some(meta)) = (
            level,
            params.get_mut("_meta").and_then(Value::as_object_mut),
        ) {
            meta.insert(LOG_LEVEL_KEY.into(), level);
        }
        Some(params)
    }

    /// The request that shows the upstream is alive: `ping`, or at 2026-07-28
    /// (which has none) `server/discover`.
    pub fn liveness(self) -> (&'static str, Option<Value>) {
        if self.is_2026() {
            ("server/discover", Some(envelope(None, None)))
        } else {
            ("ping", None)
        }
    }

    /// Whether the upstream's list changes come only on a `subscriptions/listen`
    /// stream the gateway opens (2026-07-28), their notifications tagged with
    /// that subscription; else it sends them unasked.
    pub fn listens(self) -> bool {
        self.is_2026()
    }

    /// Whether the upstream asks for input (elicitation, sampling, roots) in a
    /// call's result, as input rounds the gateway answers by retrying
    /// (2026-07-28), rather than by a request of its own.
    pub fn asks_in_results(self) -> bool {
        self.is_2026()
    }

    /// Whether an older client's log level rides its requests in the envelope
    /// (2026-07-28, which has no `logging/setLevel`: the gateway answers it),
    /// rather than being sent on as `logging/setLevel`.
    pub fn log_level_rides(self) -> bool {
        self.is_2026()
    }

    /// The upstream's `capabilities` as a client is offered them over this
    /// revision (`older`: a client of a revision before 2026-07-28): at
    /// 2026-07-28 without `resources.subscribe` (there is no such method to
    /// relay it to), and to an older client with `logging` (the gateway answers
    /// its `logging/setLevel`).
    pub fn offer(self, capabilities: &mut Map<String, Value>, older: bool) {
        if !self.is_2026() {
            return;
        }
        if older {
            capabilities.entry("logging").or_insert_with(|| json!({}));
        }
        if let Some(r) = capabilities
            .get_mut("resources")
            .and_then(Value::as_object_mut)
        {
            r.shift_remove("subscribe");
        }
    }
}

/// `params` with the 2026-07-28 envelope in its `_meta`: the protocol version,
/// the gateway as the client, and `capabilities` (none when absent).
fn envelope(params: Option<Value>, capabilities: Option<&Value>) -> Value {
    let mut params = match params {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(PROTOCOL_VERSION_KEY.into(), json!(STATELESS_VERSION));
        meta.insert(
            CLIENT_CAPABILITIES_KEY.into(),
            capabilities.cloned().unwrap_or_else(|| json!({})),
        );
        meta.insert(
            CLIENT_INFO_KEY.into(),
            json!({"name": "mcp-warden", "version": env!("CARGO_PKG_VERSION")}),
        );
    }
    Value::Object(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_2026_gets_the_envelope() {
        let params = Some(json!({"a": 1, "_meta": {"progressToken": 2}}));
        assert_eq!(
            UpstreamRevision::Session.envelop(
                params.clone(),
                Some(&json!({"x": {}})),
                Some(json!("info"))
            ),
            params
        );
        let sent = UpstreamRevision::Stateless
            .envelop(params, Some(&json!({"x": {}})), Some(json!("info")))
            .unwrap();
        assert_eq!(sent["a"], json!(1));
        let meta = &sent["_meta"];
        assert_eq!(meta["progressToken"], json!(2));
        assert_eq!(meta[PROTOCOL_VERSION_KEY], json!(STATELESS_VERSION));
        assert_eq!(meta[CLIENT_CAPABILITIES_KEY], json!({"x": {}}));
        assert_eq!(meta[CLIENT_INFO_KEY]["name"], json!("mcp-warden"));
        assert_eq!(meta[LOG_LEVEL_KEY], json!("info"));
        assert_eq!(
            UpstreamRevision::Stateless.envelop(None, None, None),
            Some(envelope(None, None))
        );
    }

    #[test]
    fn the_offer_follows_the_revision() {
        let caps = json!({"resources": {"subscribe": true, "listChanged": true}});
        let caps = caps.as_object().unwrap();
        let mut same = caps.clone();
        UpstreamRevision::Session.offer(&mut same, true);
        assert_eq!(&same, caps);
        let mut newer = caps.clone();
        UpstreamRevision::Stateless.offer(&mut newer, false);
        assert_eq!(json!(newer), json!({"resources": {"listChanged": true}}));
        let mut older = caps.clone();
        UpstreamRevision::Stateless.offer(&mut older, true);
        assert_eq!(
            json!(older),
            json!({"resources": {"listChanged": true}, "logging": {}})
        );
        assert_eq!(UpstreamRevision::Session.liveness(), ("ping", None));
        assert_eq!(UpstreamRevision::Stateless.liveness().0, "server/discover");
    }
}
