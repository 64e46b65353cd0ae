//! The approvals inbox (H6): calls an approval holds (H5) while an operator may
//! answer them in the console, with `[access] approver = "console"` or
//! `"both"`. Each waiting call is listed with what the operator needs to decide
//! (caller, tool, the arguments as the audit trail records them, why it must be
//! approved, since when); the first answer wins, from the console or (with
//! `"both"`) the client, and a call that ends otherwise (timed out, cancelled)
//! leaves the inbox as it ends.
//!
//! With a shared PostgreSQL store the inbox is the fleet's: the replica holding
//! a call lists it in the store, every replica's console shows every waiting
//! call, an answer given at any replica is written there (only where none is
//! yet), and the holder, which looks for it every [`POLL`], lets the call go on.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::oneshot;
use warden_store::Postgres;

/// How often the replica holding a call looks for an answer given elsewhere.
pub const POLL: Duration = Duration::from_millis(200);

/// What the inbox shows of one waiting call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Waiting {
    /// Unique in the fleet: the holding replica's prefix and a number.
    pub id: String,
    pub caller: Option<String>,
    pub tool: String,
    /// As the audit trail records them: `[audit] redact` keys replaced (and,
    /// for an `ask` guard, what it found).
    pub arguments: Value,
    /// Why the call needs approval: the rule, flow rule or guard that asks.
    pub rule: String,
    /// The caller's own reason for the call, when it gave one.
    pub reason: Option<String>,
    /// RFC 3339, when it began to wait.
    pub since: String,
}

/// An operator's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    pub approved: bool,
    /// Who answered: `console:<admin>` (or `console:loopback`).
    pub by: String,
    pub note: Option<String>,
}

struct Entry {
    waiting: Waiting,
    began: Instant,
    answer: oneshot::Sender<Verdict>,
    /// Listed in the shared store (answers go through it).
    shared: bool,
}

/// Every call waiting for an operator in this process (and, shared, the fleet's).
pub struct Inbox {
    next: AtomicU64,
    /// This replica's part of every id it gives.
    prefix: String,
    waiting: Mutex<BTreeMap<String, Entry>>,
    shared: Option<Postgres>,
}

/// A call's place in the inbox: it leaves when this is dropped, however the
/// wait ended.
pub struct Ticket {
    inbox: Arc<Inbox>,
    pub id: String,
    pub answer: oneshot::Receiver<Verdict>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let was_shared = self.inbox.lock().remove(&self.id).is_none_or(|e| e.shared);
        if let (Some(pg), true) = (self.inbox.shared.clone(), was_shared) {
            let id = self.id.clone();
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    if let Err(e) = pg.approval_end(&id).await {
                        tracing::warn!("a finished approval stays listed in the shared store until it expires: {e}");
                    }
                });
            }
        }
    }
}

impl Inbox {
    /// An inbox of this process, shared through `shared` when there is one;
    /// `prefix` tells this replica's ids from the others'.
    pub fn new(prefix: &str, shared: Option<Postgres>) -> Inbox {
        Inbox {
            next: AtomicU64::new(0),
            prefix: prefix.chars().take(12).collect(),
            waiting: Mutex::default(),
            shared,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lists a call (its `id` and `since` are set here) until the ticket drops;
    /// `timeout`: how long it may wait.
    pub async fn enter(self: &Arc<Inbox>, mut waiting: Waiting, timeout: Duration) -> Ticket {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("{}-{n}", self.prefix);
        waiting.id = id.clone();
        waiting.since = warden_store::format_rfc3339(SystemTime::now());
        let mut shared = false;
        if let Some(pg) = &self.shared {
            let text = serde_json::to_string(&waiting).unwrap_or_default();
            let ttl = (timeout + Duration::from_secs(60)).as_millis() as i64;
            match pg.approval_wait(&id, &text, ttl).await {
                Ok(()) => shared = true,
                Err(e) => tracing::warn!("a call waiting for approval is listed at this replica only: the shared store did not take it: {e}"),
            }
        }
        let (answer, rx) = oneshot::channel();
        self.lock().insert(
            id.clone(),
            Entry {
                waiting,
                began: Instant::now(),
                answer,
                shared,
            },
        );
        if shared {
            self.clone().watch(id.clone());
        }
        Ticket {
            inbox: self.clone(),
            id,
            answer: rx,
        }
    }

    /// Looks for an answer given at any replica until the call waits no more.
    fn watch(self: Arc<Inbox>, id: String) {
        let Some(pg) = self.shared.clone() else {
            return;
        };
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(POLL).await;
                if !self.lock().contains_key(&id) {
                    return;
                }
                match pg.approval_verdict(&id).await {
                    Ok(Some(text)) => {
                        if let Ok(v) = serde_json::from_str::<Verdict>(&text) {
                            if let Some(e) = self.lock().remove(&id) {
                                let _ = e.answer.send(v);
                            }
                        }
                        return;
                    }
                    Ok(None) => {}
                    Err(e) => tracing::debug!("cannot read an approval's answer yet: {e}"),
                }
            }
        });
    }

    /// The waiting calls, oldest first, each with how long it has waited (ms):
    /// the fleet's when the inbox is shared.
    pub async fn list(&self) -> Vec<(Waiting, u64)> {
        let mut out: Vec<(Waiting, u64)> = self
            .lock()
            .values()
            .filter(|e| !e.shared)
            .map(|e| (e.waiting.clone(), e.began.elapsed().as_millis() as u64))
            .collect();
        if let Some(pg) = &self.shared {
            match pg.approvals_waiting().await {
                Ok(rows) => out.extend(rows.into_iter().filter_map(|r| {
                    let w: Waiting = serde_json::from_str(&r.waiting).ok()?;
                    Some((w, r.waited_ms.max(0) as u64))
                })),
                Err(e) => {
                    tracing::warn!(
                        "the shared store cannot list the fleet's waiting approvals: {e}"
                    );
                    out.extend(
                        self.lock()
                            .values()
                            .filter(|e| e.shared)
                            .map(|e| (e.waiting.clone(), e.began.elapsed().as_millis() as u64)),
                    );
                }
            }
        }
        out.sort_by_key(|w| std::cmp::Reverse(w.1));
        out
    }

    /// Answers call `id`; false when it is no longer waiting (answered already,
    /// timed out or cancelled): the first answer wins, in the fleet too.
    pub async fn decide(&self, id: &str, verdict: Verdict) -> bool {
        let local_only = self.lock().get(id).is_some_and(|e| !e.shared);
        if let (Some(pg), false) = (&self.shared, local_only) {
            let text = serde_json::to_string(&verdict).unwrap_or_default();
            return match pg.approval_decide(id, &text).await {
                Ok(taken) => taken,
                Err(e) => {
                    tracing::warn!("the shared store did not take an approval's answer: {e}");
                    false
                }
            };
        }
        match self.lock().remove(id) {
            Some(e) => e.answer.send(verdict).is_ok(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn waiting(tool: &str) -> Waiting {
        Waiting {
            id: String::new(),
            caller: Some("alice".into()),
            tool: tool.into(),
            arguments: json!({"password": "[redacted]"}),
            rule: "an ask rule".into(),
            reason: None,
            since: String::new(),
        }
    }

    #[tokio::test]
    async fn the_first_answer_wins_and_a_dropped_ticket_leaves() {
        let inbox = Arc::new(Inbox::new("r1", None));
        let minute = Duration::from_secs(60);
        let mut a = inbox.enter(waiting("up.a"), minute).await;
        let b = inbox.enter(waiting("up.b"), minute).await;
        let mut listed: Vec<(String, String)> = inbox
            .list()
            .await
            .into_iter()
            .map(|(w, _)| (w.id, w.tool))
            .collect();
        listed.sort();
        assert_eq!(
            listed,
            [
                ("r1-1".to_owned(), "up.a".to_owned()),
                ("r1-2".to_owned(), "up.b".to_owned())
            ]
        );
        let yes = Verdict {
            approved: true,
            by: "console:ops".into(),
            note: Some("ok".into()),
        };
        assert!(inbox.decide(&a.id, yes.clone()).await);
        assert!(!inbox.decide(&a.id, yes.clone()).await, "answered already");
        assert_eq!((&mut a.answer).await.unwrap(), yes);
        drop(b);
        assert!(inbox.list().await.is_empty());
        assert!(!inbox.decide("r1-2", yes).await);
    }
}
