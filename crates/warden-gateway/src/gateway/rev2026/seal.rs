//! The `requestState` a 2026-07-28 client carries between rounds: sealed under
//! a key only this gateway (or its fleet) holds, and bound to one call.

use super::wire::STATE_TTL_SECS;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use warden_core::Caller;

/// What a sealed request state is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub caller: String,
    pub tool: String,
    /// SHA-256 of the arguments as serialised, hex.
    pub arguments: String,
}

impl Binding {
    pub fn new(caller: &str, tool: &str, arguments: &Map<String, Value>) -> Binding {
        let bytes = serde_json::to_vec(arguments).unwrap_or_default();
        let digest = Sha256::digest(&bytes);
        Binding {
            caller: caller.to_owned(),
            tool: tool.to_owned(),
            arguments: digest.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }

    /// What a 2026-07-28 call's sealed state is bound to: the caller, the tool as
    /// the caller named it, and the arguments as the caller sent them.
    pub fn of_call(caller: Option<&Caller>, tool: &str, arguments: Option<&Value>) -> Binding {
        let caller = caller.map(|c| c.name.as_str()).unwrap_or_default();
        let empty = Map::new();
        let args = arguments.and_then(Value::as_object).unwrap_or(&empty);
        Binding::new(caller, tool, args)
    }

    /// What a 2026-07-28 client's state for a request the gateway does not
    /// govern is bound to: the caller, the method with the name or URI it is
    /// about, and the request's arguments (or, for a request without any, its
    /// params).
    pub fn of_request(caller: Option<&Caller>, method: &str, params: &Value) -> Binding {
        let caller = caller.map(|c| c.name.as_str()).unwrap_or_default();
        let about = params
            .get("name")
            .or_else(|| params.get("uri"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut bound = Map::new();
        for (k, v) in params.as_object().into_iter().flatten() {
            if k != "_meta" {
                bound.insert(k.clone(), v.clone());
            }
        }
        Binding::new(caller, &format!("{method} {about}"), &bound)
    }
}

/// The key request states are sealed with: random per gateway process, or
/// derived from a secret the replicas share.
///
/// A state is sealed with ChaCha20-Poly1305 (an AEAD): a client can neither read
/// what it carries (an upstream's own request state among it) nor change a byte of
/// it unnoticed. A key being rotated out still opens what it sealed
/// ([`StateKey::also_opening`]), so tokens outlive a rotation.
pub struct StateKey {
    sealing: ring::aead::LessSafeKey,
    /// Older keys: they open tokens, never seal new ones.
    opening: Vec<ring::aead::LessSafeKey>,
}

/// What a state token holds besides its binding: the id of a parked call (`p`),
/// an approval already given (`ok`), an upstream's own state (`u`) and the
/// upstream it belongs to (`up`).
pub type Sealed = Map<String, Value>;

impl StateKey {
    fn aead(k: [u8; 32]) -> ring::aead::LessSafeKey {
        let key =
            ring::aead::UnboundKey::new(&ring::aead::CHACHA20_POLY1305, &k).expect("a 32-byte key");
        ring::aead::LessSafeKey::new(key)
    }

    fn from_bytes(k: [u8; 32]) -> StateKey {
        StateKey {
            sealing: StateKey::aead(k),
            opening: Vec::new(),
        }
    }

    /// This key, which also opens what `previous` (a secret being rotated out)
    /// sealed.
    pub fn also_opening(mut self, previous: &[u8]) -> StateKey {
        self.opening
            .push(StateKey::aead(Sha256::digest(previous).into()));
        self
    }

    pub fn random() -> StateKey {
        let mut k = [0u8; 32];
        if let Err(e) = getrandom::fill(&mut k) {
            panic!("the OS random source failed: {e}");
        }
        StateKey::from_bytes(k)
    }

    /// A key derived from a shared secret, so that replicas behind one load
    /// balancer accept each other's states.
    pub fn from_secret(secret: &[u8]) -> StateKey {
        StateKey::from_bytes(Sha256::digest(secret).into())
    }

    /// A state token for `binding`, valid until `now + STATE_TTL_SECS`.
    pub fn seal(&self, binding: &Binding, now: u64) -> String {
        self.seal_with(binding, now, Sealed::new())
    }

    /// A state token that also names a call parked at the gateway.
    pub fn seal_parked(&self, binding: &Binding, now: u64, parked: Option<&str>) -> String {
        let mut extra = Sealed::new();
        if let Some(p) = parked {
            extra.insert("p".into(), json!(p));
        }
        self.seal_with(binding, now, extra)
    }

    /// A state token for `binding` that carries `extra`.
    pub fn seal_with(&self, binding: &Binding, now: u64, mut extra: Sealed) -> String {
        extra.insert("c".into(), json!(binding.caller));
        extra.insert("t".into(), json!(binding.tool));
        extra.insert("a".into(), json!(binding.arguments));
        extra.insert("e".into(), json!(now + STATE_TTL_SECS));
        self.seal_value(&Value::Object(extra))
    }

    /// Seals any JSON payload; whoever opens it checks what it is bound to.
    pub fn seal_value(&self, payload: &Value) -> String {
        let mut sealed = payload.to_string().into_bytes();
        let mut nonce = [0u8; 12];
        if let Err(e) = getrandom::fill(&mut nonce) {
            panic!("the OS random source failed: {e}");
        }
        self.sealing
            .seal_in_place_append_tag(
                ring::aead::Nonce::assume_unique_for_key(nonce),
                ring::aead::Aad::empty(),
                &mut sealed,
            )
            .expect("a state far below the AEAD's size limit");
        let mut token = nonce.to_vec();
        token.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(token)
    }

    /// The payload of a token this key sealed; `None` for anything else.
    pub fn open_value(&self, token: &str) -> Option<Value> {
        let bytes = URL_SAFE_NO_PAD.decode(token).ok()?;
        if bytes.len() < 12 {
            return None;
        }
        let (nonce, sealed) = bytes.split_at(12);
        let nonce: [u8; 12] = nonce.try_into().ok()?;
        for key in std::iter::once(&self.sealing).chain(&self.opening) {
            let mut buf = sealed.to_vec();
            let n = ring::aead::Nonce::assume_unique_for_key(nonce);
            if let Ok(plain) = key.open_in_place(n, ring::aead::Aad::empty(), &mut buf) {
                return serde_json::from_slice::<Value>(plain).ok();
            }
        }
        None
    }

    /// Whether `token` was sealed by this key for exactly `binding` and has not expired.
    pub fn opens(&self, token: &str, binding: &Binding, now: u64) -> bool {
        self.open_with(token, binding, now).is_some()
    }

    /// The sealed state, when `token` was sealed by this key for exactly `binding`
    /// and has not expired: `Some(parked call id, if any)`.
    pub fn open(&self, token: &str, binding: &Binding, now: u64) -> Option<Option<String>> {
        let v = self.open_with(token, binding, now)?;
        Some(v.get("p").and_then(Value::as_str).map(str::to_owned))
    }

    /// Everything `token` holds, when it was sealed by this key for exactly
    /// `binding` and has not expired.
    pub fn open_with(&self, token: &str, binding: &Binding, now: u64) -> Option<Sealed> {
        let Value::Object(v) = self.open_value(token)? else {
            return None;
        };
        let bound = v.get("c") == Some(&json!(binding.caller))
            && v.get("t") == Some(&json!(binding.tool))
            && v.get("a") == Some(&json!(binding.arguments))
            && v.get("e").and_then(Value::as_u64).is_some_and(|e| e >= now);
        bound.then_some(v)
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
