//! A 2026-07-28 call whose upstream asked its client something: the wait that
//! notices the question, and the call set aside until the client retries.

use super::envelope::Envelope;
use super::seal::{unix_now, Binding, StateKey};
use super::wire::input_capability;
use crate::gateway::client_session::{lock, ClientSession};
use crate::gateway::relay::{self, Pending};
use crate::texts as answer;
use crate::upstream::CallError;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::mpsc;

/// How a 2026-07-28 call's wait upstream ended.
pub enum Bridged {
    /// The upstream answered (or the wait failed).
    Answered(Result<Value, CallError>),
    /// The upstream asked the client something it can answer: the call pauses.
    /// The upstream's id for its request, and the request without its id.
    Asked(Value, Value),
}

/// Waits for a 2026-07-28 call's answer. An upstream's request for the call
/// interrupts the wait when the client declared it can take it; otherwise the
/// upstream is told at once that the client cannot.
pub async fn wait_bridged(
    session: &ClientSession,
    p: &mut Pending,
    envelope: Option<&Envelope>,
) -> Bridged {
    let Some(key) = p.call.clone() else {
        return Bridged::Answered(relay::wait(session, p).await);
    };
    let (tx, mut rx) = mpsc::channel(1);
    lock(&session.interrupts).insert(key.clone(), tx);
    let outcome = loop {
        tokio::select! {
            r = p.conn.wait(p.id, &mut p.reply, p.timeout_ms) => break Bridged::Answered(r),
            Some((their_id, request)) = rx.recv() => {
                let method = request.get("method").and_then(Value::as_str).unwrap_or_default();
                let can = input_capability(method).is_some_and(|c| envelope.is_some_and(|e| e.can(c)));
                if can {
                    break Bridged::Asked(their_id, request);
                }
                relay::refuse_upstream(&p.conn, their_id, answer::CLIENT_LACKS_CAPABILITY).await;
            }
        }
    };
    lock(&session.interrupts).remove(&key);
    session.untrack(&key);
    outcome
}

/// A fresh id for a parked call (128 bits from the OS); `None` without randomness.
pub fn park_id() -> Option<String> {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id).ok()?;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// Calls set aside while their client answers an upstream's request, by the id
/// their sealed state names. `T` is what the call path needs to go on.
pub struct ParkedCalls<T> {
    key: StateKey,
    parked: Mutex<HashMap<String, (T, Value)>>,
}

impl<T> ParkedCalls<T> {
    pub fn new(key: StateKey) -> Self {
        ParkedCalls {
            key,
            parked: Mutex::new(HashMap::new()),
        }
    }

    pub fn key(&self) -> &StateKey {
        &self.key
    }

    /// Sets `call` aside under `id` (its upstream asked `asked`); returns the
    /// sealed state the client must bring back.
    pub fn park(&self, id: String, binding: &Binding, call: T, asked: Value) -> String {
        let state = self.key.seal_parked(binding, unix_now(), Some(&id));
        lock(&self.parked).insert(id, (call, asked));
        state
    }

    /// Takes a parked call back: the call and the upstream's id for its request.
    pub fn take(&self, id: &str) -> Option<(T, Value)> {
        lock(&self.parked).remove(id)
    }

    /// The parked call a retry's state names, when it was sealed for `binding`:
    /// `None` when the retry names no parked call (it then runs as a new one),
    /// `Some(None)` when it names one the gateway no longer holds.
    pub fn resume(&self, envelope: &Envelope, binding: &Binding) -> Option<Option<(T, Value)>> {
        let token = envelope.request_state.as_deref()?;
        let id = self.key.open(token, binding, unix_now())??;
        Some(self.take(&id))
    }
}
