//! The approvals inbox (H6): calls an approval holds (H5) while an operator may
//! answer them in the console, with `[access] approver = "console"` or
//! `"both"`. Each waiting call is listed with what the operator needs to decide
//! (caller, tool, the arguments as the audit trail records them, why it must be
//! approved, since when); the first answer wins, from the console or (with
//! `"both"`) the client, and a call that ends otherwise (timed out, cancelled)
//! leaves the inbox as it ends.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};
use tokio::sync::oneshot;

/// What the inbox shows of one waiting call.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Waiting {
    pub id: u64,
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
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// Every call waiting for an operator in this process.
#[derive(Default)]
pub struct Inbox {
    next: AtomicU64,
    waiting: Mutex<BTreeMap<u64, Entry>>,
}

/// A call's place in the inbox: it leaves when this is dropped, however the
/// wait ended.
pub struct Ticket {
    inbox: Arc<Inbox>,
    pub id: u64,
    pub answer: oneshot::Receiver<Verdict>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.inbox.lock().remove(&self.id);
    }
}

impl Inbox {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lists a call (its `id` and `since` are set here) until the ticket drops.
    pub fn enter(self: &Arc<Inbox>, mut waiting: Waiting) -> Ticket {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        waiting.id = id;
        waiting.since = warden_store::format_rfc3339(SystemTime::now());
        let (answer, rx) = oneshot::channel();
        self.lock().insert(
            id,
            Entry {
                waiting,
                began: Instant::now(),
                answer,
            },
        );
        Ticket {
            inbox: self.clone(),
            id,
            answer: rx,
        }
    }

    /// The waiting calls, oldest first, each with how long it has waited (ms).
    pub fn list(&self) -> Vec<(Waiting, u64)> {
        self.lock()
            .values()
            .map(|e| (e.waiting.clone(), e.began.elapsed().as_millis() as u64))
            .collect()
    }

    /// Answers call `id`; false when it is no longer waiting (answered already,
    /// timed out or cancelled): the first answer wins.
    pub fn decide(&self, id: u64, verdict: Verdict) -> bool {
        match self.lock().remove(&id) {
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
            id: 0,
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
        let inbox = Arc::new(Inbox::default());
        let a = inbox.enter(waiting("up.a"));
        let b = inbox.enter(waiting("up.b"));
        let listed: Vec<(u64, String)> = inbox
            .list()
            .into_iter()
            .map(|(w, _)| (w.id, w.tool))
            .collect();
        assert_eq!(
            listed,
            [(a.id, "up.a".to_owned()), (b.id, "up.b".to_owned())]
        );
        let yes = Verdict {
            approved: true,
            by: "console:ops".into(),
            note: Some("ok".into()),
        };
        assert!(inbox.decide(a.id, yes.clone()));
        assert!(!inbox.decide(a.id, yes.clone()), "answered already");
        let mut a = a;
        assert_eq!((&mut a.answer).await.unwrap(), yes);
        drop(b);
        assert!(inbox.list().is_empty());
        assert!(!inbox.decide(2, yes));
    }
}
