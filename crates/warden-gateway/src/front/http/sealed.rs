//! Session ids any replica can take up: what a 2025-11-25 HTTP session must keep
//! beyond one process (its caller, the version agreed, the capabilities the client
//! declared) sealed into the `Mcp-Session-Id` itself with the gateway's state key
//! (ChaCha20-Poly1305, [`StateKey`]).
//!
//! Replicas that share `gateway.state_secret_env` open each other's ids, so a
//! load balancer needs no stickiness and a session outlives the replica that
//! opened it. A client can neither read its id nor change a byte of it unnoticed;
//! an id is bound to its caller (another caller's credential does not take it up)
//! and expires `gateway.session_lifetime` after it was issued. What changes within
//! a session (a log level set, resource subscriptions, open streams) stays with
//! the replica that holds it.

use crate::gateway::rev2026::StateKey;
use serde_json::{json, Value};

/// The largest capabilities object kept whole in an id; a larger one keeps only
/// which capabilities the client declared (each as `{}`), so the header stays small.
const CAPS_KEPT_BYTES: usize = 2048;

/// What a session id carries.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SessionToken {
    /// The session's own short id: audit records and logs name it (`http:<sid>`).
    pub(super) sid: String,
    pub(super) caller: String,
    pub(super) version: String,
    pub(super) capabilities: Value,
    /// Unix seconds after which the id is refused.
    pub(super) until: u64,
    /// The virtual server the session was opened on (V1), if any.
    pub(super) server: Option<String>,
}

impl SessionToken {
    /// Seals the token into a session id (visible ASCII: base64url).
    pub(super) fn seal(&self, key: &StateKey) -> String {
        let caps = match serde_json::to_vec(&self.capabilities) {
            Ok(b) if b.len() <= CAPS_KEPT_BYTES => self.capabilities.clone(),
            _ => Value::Object(
                self.capabilities
                    .as_object()
                    .map(|m| m.keys().map(|k| (k.clone(), json!({}))).collect())
                    .unwrap_or_default(),
            ),
        };
        let mut sealed = json!({
            "k": "session",
            "s": self.sid,
            "c": self.caller,
            "v": self.version,
            "cap": caps,
            "u": self.until,
        });
        if let Some(server) = &self.server {
            sealed["srv"] = json!(server);
        }
        key.seal_value(&sealed)
    }

    /// The token in `id`, when `key` sealed it as a session id. Whether it is still
    /// valid (its caller, its time) is the caller's to check.
    pub(super) fn open(key: &StateKey, id: &str) -> Option<SessionToken> {
        // Far larger than any id this gateway issues: not worth decrypting.
        if id.len() > 8 * CAPS_KEPT_BYTES {
            return None;
        }
        let v = key.open_value(id)?;
        if v.get("k")?.as_str()? != "session" {
            return None;
        }
        Some(SessionToken {
            sid: v.get("s")?.as_str()?.to_owned(),
            caller: v.get("c")?.as_str()?.to_owned(),
            version: v.get("v")?.as_str()?.to_owned(),
            capabilities: v.get("cap")?.clone(),
            until: v.get("u")?.as_u64()?,
            server: match v.get("srv") {
                None => None,
                Some(s) => Some(s.as_str()?.to_owned()),
            },
        })
    }
}

/// 64 bits from the OS's random source, as 16 hex characters.
pub(super) fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    if let Err(e) = getrandom::fill(&mut b) {
        // Without randomness an id could be guessed; better to stop.
        panic!("the OS random source failed: {e}");
    }
    b.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::rev2026::Binding;
    use serde_json::Map;

    fn token() -> SessionToken {
        SessionToken {
            sid: random_hex(16),
            caller: "alice".into(),
            version: "2025-11-25".into(),
            capabilities: json!({"sampling": {}, "elicitation": {"form": {}}}),
            until: 2_000_000_000,
            server: Some("research".into()),
        }
    }

    #[test]
    fn an_id_opens_on_every_replica_sharing_the_secret_and_nowhere_else() {
        let a = StateKey::from_secret(b"shared by the fleet");
        let b = StateKey::from_secret(b"shared by the fleet");
        let t = token();
        let id = t.seal(&a);
        assert!(id.bytes().all(|c| (0x21..=0x7e).contains(&c)), "{id}");
        assert_eq!(SessionToken::open(&b, &id), Some(t.clone()));
        assert_eq!(SessionToken::open(&StateKey::random(), &id), None);
        // Two sessions of one caller get different ids.
        assert_ne!(id, token().seal(&a));
    }

    #[test]
    fn a_changed_byte_or_a_request_state_is_not_a_session_id() {
        let key = StateKey::from_secret(b"shared by the fleet");
        let id = token().seal(&key);
        let mut bytes = id.clone().into_bytes();
        let i = bytes.len() / 2;
        bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
        assert_eq!(
            SessionToken::open(&key, &String::from_utf8(bytes).unwrap()),
            None
        );
        let state = key.seal(&Binding::new("alice", "t", &Map::new()), 0);
        assert_eq!(SessionToken::open(&key, &state), None);
        assert_eq!(SessionToken::open(&key, "0123"), None);
        assert_eq!(SessionToken::open(&key, &"A".repeat(100_000)), None);
    }

    #[test]
    fn large_capabilities_keep_only_their_names() {
        let key = StateKey::random();
        let mut t = token();
        t.capabilities = json!({"sampling": {}, "experimental": {"x": "y".repeat(5000)}});
        let id = t.seal(&key);
        assert!(id.len() < 1000, "{}", id.len());
        let back = SessionToken::open(&key, &id).unwrap();
        assert_eq!(
            back.capabilities,
            json!({"sampling": {}, "experimental": {}})
        );
    }
}
