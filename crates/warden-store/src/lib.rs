//! # warden-store
//!
//! mcp-warden's durable state: the idempotency ledger (I1, I2) and the audit
//! trail (H4), in an embedded SQLite file (WAL mode, created and migrated on
//! first use; operations run on Tokio's blocking pool, audit batches on the
//! writer's own thread, [`AuditWriter`]) or in PostgreSQL when
//! several gateway replicas share state ([`Postgres`]).
//!
//! A running claim belongs to the store that took it (each [`Store`] has a random
//! owner id: one per gateway process) and holds a lease, renewed while the call
//! runs. A claim whose lease ran out was abandoned (its gateway died or lost the
//! store mid-call): nobody knows whether the call took effect. The next claimant
//! marks the key abandoned, and from then on it answers [`Claim::Abandoned`]
//! until its retention ends, so a key still runs at most once; only a claimant
//! that says the call is safe to repeat ([`OnAbandoned::Rerun`]) takes it over
//! and runs it again.
//!
//! ```no_run
//! # async fn demo() -> Result<(), warden_store::StoreError> {
//! use std::time::Duration;
//! use warden_store::{Claim, Finish, OnAbandoned, Store};
//! let store = Store::open("warden.db".as_ref())?;
//! let (retention, lease) = (Duration::from_secs(86400), Duration::from_secs(90));
//! let keep = OnAbandoned::Keep;
//! match store.claim_leased("alice", "key-1", "fingerprint", retention, lease, keep).await? {
//!     Claim::Run | Claim::TakenOver => {
//!         // … run the call, renewing the lease every lease / 3 …
//!         store.renew("alice", "key-1", lease).await?;
//!         store.finish("alice", "key-1", Finish::Completed(serde_json::json!({"content": []}))).await?;
//!     }
//!     Claim::Replay(result) => println!("stored: {result}"),
//!     Claim::Abandoned { .. } => println!("it may have run: the outcome is unknown"),
//!     Claim::Running | Claim::Mismatch => {}
//! }
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod chain;
mod group;
mod pg;
mod sqlite;
mod time;

pub use chain::{Break, Verdict, GENESIS};
pub use group::{AuditWriter, Durability, Unstored, Unwritten, MAX_BATCH, QUEUE};
pub use pg::{
    Postgres, QuotaTake, SharedApproval, AUDIT_LANES, DEFAULT_CONNECTIONS, PARTITION_DAYS_AHEAD,
};
pub use sqlite::Sqlite;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use time::{format_rfc3339, parse_since};

/// The store could not do what was asked: callers that need it fail closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}

/// What the ledger says about an idempotency key.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// The key is now ours: run the call, then [`Store::finish`] it.
    Run,
    /// The key is now ours, taken over from a claim whose lease ran out (its
    /// owner died or lost the store mid-call): that first attempt is abandoned.
    /// Run the call, then [`Store::finish`] it. Only with [`OnAbandoned::Rerun`].
    TakenOver,
    /// The call completed before: here is its result; do not run it again.
    Replay(Value),
    /// The same key is running right now.
    Running,
    /// The key was used for a different call (another tool or other arguments).
    Mismatch,
    /// The key's attempt was abandoned: its lease ran out before it finished, so
    /// it may or may not have taken effect. It is not run again (until the key
    /// is forgotten). `first`: this claim found the lease run out and marked the
    /// key so; every later claim gets `first: false`, so the abandoned attempt
    /// is recorded once.
    Abandoned { first: bool },
}

/// What a claim does with a key whose attempt was abandoned (I1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnAbandoned {
    /// The key answers [`Claim::Abandoned`]: at most one execution per key.
    #[default]
    Keep,
    /// The claim takes the key over ([`Claim::TakenOver`], or [`Claim::Run`] for
    /// a key already marked abandoned) and the call runs again: for tools whose
    /// operator declared them safe to repeat.
    Rerun,
}

/// The owner a key whose attempt was abandoned is left under (its lease cleared):
/// no store's id (those are 32 hex digits), so nobody renews or finishes the
/// attempt, and without a lease nothing takes it over by mistake. The row stays
/// `running`, the one state earlier versions know for it: a gateway of an
/// earlier version that meets it refuses the key as running rather than run the
/// call again, and no schema change is needed.
pub(crate) const ABANDONED: &str = "abandoned";

/// How a claimed call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    Completed(Value),
    /// Recorded as failed: the key may be claimed again.
    Failed(String),
}

/// One call in the audit trail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    pub session: String,
    pub caller: Option<String>,
    /// The tool as the caller named it.
    pub tool: String,
    pub upstream: Option<String>,
    /// The virtual server the call came through (V2): `tool` is then the real
    /// tool's catalogue name, whatever the server calls it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The arguments as sent upstream, with configured keys redacted.
    pub arguments: Value,
    pub reason: Option<String>,
    pub unknown_keys: Vec<String>,
    pub unknown_mode: Option<String>,
    /// allowed | denied | answered_by_hook | unknown_tool | grant_failure | invalid_arguments | replayed | rate_limited | flow_denied
    pub decision: String,
    /// ok | tool_error | upstream_error | failed | cancelled | refused | abandoned
    pub outcome: String,
    pub duration_ms: f64,
    pub idempotency_key: Option<String>,
    pub replayed: bool,
    /// What went wrong, in full, when the call failed or its upstream answered with
    /// an error (the caller saw only the generic or the bounded answer); for a
    /// call refused before it began, why (T6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The flow labels of the tool called (F1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// The labels the call's session had touched once the call was decided: with
    /// the call's own when it was let through (F4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub touched: Vec<String>,
    /// The name of the credential the gateway presented upstream for the caller
    /// (`[[upstream.credential]]`), never the secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// Set on a record of a tool definition that drifted from the pins lock (P2),
    /// which is no call: its decision is `tool_drift` and its outcome the
    /// upstream's pins mode (`hidden`, `ask` or `report`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<ToolDrift>,
    /// What guards found in the call's result (S4): where and how often, never
    /// the matched text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<GuardFinding>,
    /// Who answered the call's approval (H6): `client` (its user, through
    /// elicitation) or `console:<admin>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<String>,
    /// The note the operator gave with the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_note: Option<String>,
    /// What the shadow rules would have made of the call where it differs from
    /// what was enforced (X6): `would_deny by rule[2]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<String>,
}

/// One guard's finding in a call's result: the kind, where, how many times,
/// and what the guard did. Never the matched text (S4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardFinding {
    /// The `[[guard]]`'s name.
    pub guard: String,
    /// `secrets`, `pii`, `injection`, or `pattern`.
    pub detector: String,
    /// The built-in kind or the pattern's name.
    pub kind: String,
    /// A JSON pointer into the result as the upstream sent it.
    pub path: String,
    pub count: usize,
    /// redact | block | label | report.
    pub action: String,
}

/// How one tool differs from the pins lock, or that it matches it again (P2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDrift {
    /// `changed`, `added`, `removed`, `renamed`, or `restored` (the tool matches
    /// the lock again: changed back, or approved into it).
    pub change: String,
    /// For `changed`: the reviewed fields that differ.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// For `renamed`: the name the lock holds the tool under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renamed_from: Option<String>,
    /// The drift as `mcp-warden pins diff` prints it (empty for `restored`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diff: String,
}

impl ToolDrift {
    /// The change in a few words, for a table: `changed: description, inputSchema`.
    pub fn summary(&self) -> String {
        match (&self.renamed_from, self.fields.is_empty()) {
            (Some(from), _) => format!("{} from {from}", self.change),
            (None, false) => format!("{}: {}", self.change, self.fields.join(", ")),
            (None, true) => self.change.clone(),
        }
    }
}

/// Calls in one minute with one decision and outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MinuteCount {
    /// Minutes since the epoch.
    pub minute: i64,
    pub decision: String,
    pub outcome: String,
    pub calls: u64,
}

/// One record's figures as the console charts them: when, how it was decided
/// and ended, where it went, how long it took and what guards found.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditFacts {
    /// Minutes since the epoch.
    pub minute: i64,
    pub decision: String,
    pub outcome: String,
    pub upstream: Option<String>,
    pub duration_ms: f64,
    pub findings: Vec<GuardFinding>,
}

/// The fields of a record the columns copy, read from its JSON (rows written
/// before the columns were).
#[derive(Deserialize)]
struct FactsOfRecord {
    #[serde(default)]
    decision: String,
    #[serde(default)]
    upstream: Option<String>,
    #[serde(default)]
    duration_ms: f64,
    #[serde(default)]
    findings: Vec<GuardFinding>,
}

/// A row of the facts query: minute, outcome, the columns (all `None` for a
/// row written before them) and, for such a row, its record's JSON.
pub(crate) struct FactsRow {
    pub minute: i64,
    pub outcome: String,
    pub decision: Option<String>,
    pub upstream: Option<String>,
    pub duration_ms: Option<f64>,
    pub findings: Option<String>,
    pub record: Option<String>,
}

impl FactsRow {
    pub(crate) fn into_facts(self) -> AuditFacts {
        let (decision, upstream, duration_ms, findings) = match (self.decision, self.record) {
            (Some(d), _) => (
                d,
                self.upstream,
                self.duration_ms.unwrap_or_default(),
                self.findings
                    .and_then(|f| serde_json::from_str(&f).ok())
                    .unwrap_or_default(),
            ),
            (None, record) => {
                let old: Option<FactsOfRecord> = record.and_then(|r| serde_json::from_str(&r).ok());
                match old {
                    Some(o) => (o.decision, o.upstream, o.duration_ms, o.findings),
                    None => Default::default(),
                }
            }
        };
        AuditFacts {
            minute: self.minute,
            decision,
            outcome: self.outcome,
            upstream,
            duration_ms,
            findings,
        }
    }
}

/// What `mcp-warden audit` filters on.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub caller: Option<String>,
    pub tool: Option<String>,
    pub outcome: Option<String>,
    /// Records at or after this time, in milliseconds since the epoch.
    pub since_ms: Option<i64>,
    pub limit: usize,
}

/// What [`Store::verify_chains`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainsReport {
    /// One per chain, in chain order.
    pub verdicts: Vec<Verdict>,
    /// Records written before chains existed, which nothing can verify.
    pub unchained: u64,
}

impl ChainsReport {
    /// Whether every chain holds.
    pub fn intact(&self) -> bool {
        self.verdicts.iter().all(|v| v.broken.is_none())
    }
}

/// The store behind the ledger and the audit trail.
#[derive(Clone)]
pub enum Store {
    Sqlite(Sqlite),
    Postgres(Postgres),
}

impl Store {
    /// Opens an embedded SQLite file.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Ok(Store::Sqlite(Sqlite::open(path)?))
    }

    /// A SQLite store in memory (tests).
    pub fn in_memory() -> Result<Store, StoreError> {
        Ok(Store::Sqlite(Sqlite::in_memory()?))
    }

    /// Connects to PostgreSQL (`postgres://user@host/db`), migrates its schema,
    /// and opens up to `connections` connections as concurrent calls need them.
    pub async fn connect_postgres(url: &str, connections: usize) -> Result<Store, StoreError> {
        Ok(Store::Postgres(
            Postgres::connect_pool(url, connections).await?,
        ))
    }

    /// The id the claims of this store (and its clones) are held under.
    pub fn owner(&self) -> &str {
        match self {
            Store::Sqlite(s) => &s.owner,
            Store::Postgres(p) => p.owner(),
        }
    }

    /// [`Store::claim_leased`] with a lease as long as the retention: a claim that
    /// is never renewed holds its key until the entry expires.
    pub async fn claim(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        retention: Duration,
    ) -> Result<Claim, StoreError> {
        let keep = OnAbandoned::Keep;
        self.claim_leased(scope, key, fingerprint, retention, retention, keep)
            .await
    }

    /// See [`Sqlite::claim_leased`].
    pub async fn claim_leased(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        retention: Duration,
        lease: Duration,
        abandoned: OnAbandoned,
    ) -> Result<Claim, StoreError> {
        let (fp, r) = (fingerprint, retention);
        match self {
            Store::Sqlite(s) => s.claim_leased(scope, key, fp, r, lease, abandoned).await,
            Store::Postgres(p) => p.claim_leased(scope, key, fp, r, lease, abandoned).await,
        }
    }

    /// See [`Sqlite::renew`].
    pub async fn renew(&self, scope: &str, key: &str, lease: Duration) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(s) => s.renew(scope, key, lease).await,
            Store::Postgres(p) => p.renew(scope, key, lease).await,
        }
    }

    /// See [`Sqlite::finish`].
    pub async fn finish(&self, scope: &str, key: &str, finish: Finish) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(s) => s.finish(scope, key, finish).await,
            Store::Postgres(p) => p.finish(scope, key, finish).await,
        }
    }

    /// See [`Sqlite::end_session`].
    pub async fn end_session(&self, sid: &str, until_ms: i64) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(s) => s.end_session(sid, until_ms).await,
            Store::Postgres(p) => p.end_session(sid, until_ms).await,
        }
    }

    /// See [`Sqlite::session_ended`].
    pub async fn session_ended(&self, sid: &str) -> Result<bool, StoreError> {
        match self {
            Store::Sqlite(s) => s.session_ended(sid).await,
            Store::Postgres(p) => p.session_ended(sid).await,
        }
    }

    /// Whether the store answers a trivial query now (readiness probes); a lost
    /// PostgreSQL connection is opened again first, as any other call would.
    pub async fn ping(&self) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(s) => s.ping().await,
            Store::Postgres(p) => p.ping().await,
        }
    }

    /// Appends one record to the trail, chained; committed when this returns.
    /// Calls write through an [`AuditWriter`], which batches them.
    pub async fn record(&self, record: &AuditRecord) -> Result<(), StoreError> {
        self.record_batch(std::slice::from_ref(record)).await
    }

    /// Appends `records` in one transaction, chained in order after this
    /// store's last record; committed when this returns.
    pub async fn record_batch(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        match self {
            Store::Sqlite(s) => s.record_batch(records).await,
            Store::Postgres(p) => p.record_batch(records).await,
        }
    }

    /// This store's audit chains now (one per lane): each one's id, how many
    /// records it holds, and the last one's hash (logged at a stop, to be held
    /// outside the database).
    pub async fn chain_heads(&self) -> Vec<(String, i64, String)> {
        self.lanes().describe().await
    }

    /// How many audit batches this store writes at once ([`AuditWriter`]).
    pub fn audit_lanes(&self) -> usize {
        self.lanes().len()
    }

    fn lanes(&self) -> &chain::Lanes {
        match self {
            Store::Sqlite(s) => &s.chain,
            Store::Postgres(p) => &p.chain,
        }
    }

    /// Deletes the records older than `before_ms`, keeping every chain
    /// verifiable from its first record left. How many went. SQLite deletes
    /// them `batch` at a time (each batch its own short transaction, so writers
    /// wait for none long); PostgreSQL drops the day partitions wholly older
    /// (a record outlives `before_ms` by at most a day).
    pub async fn prune_audit(&self, before_ms: i64, batch: usize) -> Result<u64, StoreError> {
        let s = match self {
            Store::Sqlite(s) => s,
            Store::Postgres(p) => return p.drop_partitions_before(before_ms).await,
        };
        let mut total = 0;
        loop {
            let gone = s.prune_batch(before_ms, batch).await?;
            total += gone;
            if gone < batch as u64 {
                return Ok(total);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Walks every chain in the trail and says, per chain, whether it holds and
    /// where it first breaks; records written before chains existed are counted.
    pub async fn verify_chains(&self) -> Result<ChainsReport, StoreError> {
        const PAGE: i64 = 5000;
        let (anchors, unchained) = match self {
            Store::Sqlite(s) => (s.anchors().await?, s.unchained().await?),
            Store::Postgres(p) => (p.anchors().await?, p.unchained().await?),
        };
        let mut verifier = chain::Verifier::new(anchors);
        let mut after = (String::new(), i64::MIN, i64::MIN);
        loop {
            let page = match self {
                Store::Sqlite(s) => s.chain_page(after.clone(), PAGE).await?,
                Store::Postgres(p) => p.chain_page(after.clone(), PAGE).await?,
            };
            let Some(last) = page.last() else { break };
            after = (last.linked.chain.clone(), last.linked.seq, last.id);
            page.iter().for_each(|row| verifier.push(row));
        }
        Ok(ChainsReport {
            verdicts: verifier.finish(),
            unchained,
        })
    }

    pub async fn query(&self, filter: AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
        match self {
            Store::Sqlite(s) => s.query(filter).await,
            Store::Postgres(p) => p.query(filter).await,
        }
    }

    /// The newest records that pass `filter` (at most `filter.limit`, newest
    /// first), each with its id in the trail: what the operator console lists.
    pub async fn recent(&self, filter: AuditFilter) -> Result<Vec<(i64, AuditRecord)>, StoreError> {
        self.recent_before(filter, None).await
    }

    /// [`Store::recent`] from the record before id `before` on (the next page of
    /// a list whose last record had that id); `None`: from the newest.
    pub async fn recent_before(
        &self,
        filter: AuditFilter,
        before: Option<i64>,
    ) -> Result<Vec<(i64, AuditRecord)>, StoreError> {
        match self {
            Store::Sqlite(s) => s.recent(filter, before).await,
            Store::Postgres(p) => p.recent(filter, before).await,
        }
    }

    /// Records at or after `since_ms`, counted by minute (ms since the epoch / 60,000),
    /// decision and outcome: counted by the database, no record is decoded here.
    pub async fn counts_per_minute(&self, since_ms: i64) -> Result<Vec<MinuteCount>, StoreError> {
        match self {
            Store::Sqlite(s) => s.counts_per_minute(since_ms).await,
            Store::Postgres(p) => p.counts_per_minute(since_ms).await,
        }
    }

    /// The figures of every record at or after `since_ms`, in no order: what the
    /// console's charts count. Read from columns of their own, not the records'
    /// JSON (but for rows written before those columns were).
    pub async fn audit_facts(&self, since_ms: i64) -> Result<Vec<AuditFacts>, StoreError> {
        let rows = match self {
            Store::Sqlite(s) => s.audit_facts(since_ms).await?,
            Store::Postgres(p) => p.audit_facts(since_ms).await?,
        };
        Ok(rows.into_iter().map(FactsRow::into_facts).collect())
    }

    /// One record by its id in the trail.
    pub async fn audit_record(&self, id: i64) -> Result<Option<AuditRecord>, StoreError> {
        match self {
            Store::Sqlite(s) => s.audit_record(id).await,
            Store::Postgres(p) => p.audit_record(id).await,
        }
    }
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A new owner id: 128 random bits, hex. Two gateways must never share one, or
/// either could finish or renew the other's claims; hence the OS's random source.
pub(crate) fn new_owner() -> Result<Arc<str>, StoreError> {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id).map_err(|e| {
        StoreError::Unavailable(format!("no owner id: the OS random source failed: {e}"))
    })?;
    Ok(id
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
        .into())
}

/// The ledger's semantics, as both stores' tests check them.
#[cfg(test)]
mod semantics;
#[cfg(test)]
pub(crate) use semantics::*;

#[cfg(test)]
mod bench;
#[cfg(test)]
mod tests;
