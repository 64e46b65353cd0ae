//! # warden-store
//!
//! mcp-warden's durable state: the idempotency ledger (I1, I2) and the audit
//! trail (H4), in an embedded SQLite file (WAL mode, created and migrated on
//! first use; operations run on Tokio's blocking pool) or in PostgreSQL when
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
pub use group::{AuditWriter, Durability, Unstored, Unwritten, BATCH_WINDOW, MAX_BATCH, QUEUE};
pub use pg::{Postgres, QuotaTake, AUDIT_LANES, DEFAULT_CONNECTIONS};
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
    /// an error (the caller saw only the generic or the bounded answer).
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

    /// Deletes the records older than `before_ms`, `batch` at a time (each batch
    /// its own short transaction or statement, so writers wait for none long),
    /// keeping every chain verifiable from its first record left. How many went.
    pub async fn prune_audit(&self, before_ms: i64, batch: usize) -> Result<u64, StoreError> {
        let mut total = 0;
        loop {
            let gone = match self {
                Store::Sqlite(s) => s.prune_batch(before_ms, batch).await?,
                Store::Postgres(p) => p.prune_batch(before_ms, batch).await?,
            };
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

/// For the stores' tests: 100 concurrent claims of one key, alternating between
/// two stores on the same data (as two gateway processes); how many got to run.
#[cfg(test)]
pub(crate) async fn concurrent_runs(a: &Store, b: &Store) -> usize {
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                s.claim("c", "same", "f", Duration::from_secs(86_400))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut runs = 0;
    for t in tasks {
        if t.await.unwrap() == Claim::Run {
            runs += 1;
        }
    }
    runs
}

/// For the stores' tests: leases across two stores on the same data (as two
/// gateway processes): a live lease holds the key, one that ran out is taken over,
/// the first owner can then neither renew nor finish over the new attempt, and
/// renewal keeps a claim alive past its first lease.
#[cfg(test)]
pub(crate) async fn lease_semantics(a: &Store, b: &Store) {
    use serde_json::json;
    const DAY: Duration = Duration::from_secs(86_400);
    const SHORT: Duration = Duration::from_millis(200);
    let run_out = || tokio::time::sleep(Duration::from_millis(400));
    assert_ne!(a.owner(), b.owner(), "each store is an owner of its own");
    assert_eq!(a.owner().len(), 32, "128 bits, hex");

    let claim = |s: &Store, key: &'static str, fp: &'static str, lease: Duration| {
        let s = s.clone();
        let rerun = OnAbandoned::Rerun;
        async move {
            s.claim_leased("c", key, fp, DAY, lease, rerun)
                .await
                .unwrap()
        }
    };
    assert_eq!(claim(a, "k", "f", SHORT).await, Claim::Run);
    assert_eq!(
        claim(b, "k", "f", SHORT).await,
        Claim::Running,
        "the lease holds"
    );
    run_out().await;
    assert_eq!(claim(b, "k", "f", DAY).await, Claim::TakenOver);
    assert_eq!(
        claim(a, "k", "f", SHORT).await,
        Claim::Running,
        "the new lease holds"
    );
    // The first owner comes back late: it neither renews nor records its end.
    assert!(!a.renew("c", "k", DAY).await.unwrap());
    assert!(!a
        .finish("c", "k", Finish::Completed(json!("first")))
        .await
        .unwrap());
    assert!(!a
        .finish("c", "k", Finish::Failed("first".into()))
        .await
        .unwrap());
    run_out().await;
    assert_eq!(
        claim(a, "k", "f", SHORT).await,
        Claim::Running,
        "the row is still the new attempt's"
    );
    assert!(b
        .finish("c", "k", Finish::Completed(json!("second")))
        .await
        .unwrap());
    assert_eq!(
        claim(a, "k", "f", SHORT).await,
        Claim::Replay(json!("second"))
    );

    // Renewed every 50 ms, a 400 ms lease outlives itself; unrenewed, it runs out.
    let lease = Duration::from_millis(400);
    assert_eq!(claim(a, "r", "f", lease).await, Claim::Run);
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(a.renew("c", "r", lease).await.unwrap());
    }
    assert_eq!(
        claim(b, "r", "f", SHORT).await,
        Claim::Running,
        "renewed past its first lease"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(claim(b, "r", "f", SHORT).await, Claim::TakenOver);

    // A finished claim has no lease to run out; an expired one is still not
    // another call's to take.
    assert_eq!(claim(a, "d", "f", SHORT).await, Claim::Run);
    assert!(a
        .finish("c", "d", Finish::Completed(json!("d")))
        .await
        .unwrap());
    assert_eq!(claim(a, "m", "f", SHORT).await, Claim::Run);
    run_out().await;
    assert_eq!(claim(b, "d", "f", SHORT).await, Claim::Replay(json!("d")));
    assert_eq!(claim(b, "m", "g", SHORT).await, Claim::Mismatch);
    assert_eq!(claim(b, "m", "f", SHORT).await, Claim::TakenOver);
}

/// For the stores' tests: by default a key whose lease ran out is abandoned for
/// good, across two stores on the same data (as two gateway processes): the
/// claim that finds it so says so first, every later one after it, the first
/// owner can neither renew nor finish it, and only a claim that may rerun it
/// runs it again. It is forgotten with its retention like any key.
#[cfg(test)]
pub(crate) async fn abandon_semantics(a: &Store, b: &Store) {
    use serde_json::json;
    const DAY: Duration = Duration::from_secs(86_400);
    const SHORT: Duration = Duration::from_millis(200);
    let run_out = || tokio::time::sleep(Duration::from_millis(400));
    let claim = |s: &Store, fp: &'static str, then: OnAbandoned| {
        let s = s.clone();
        async move {
            s.claim_leased("c", "ab", fp, DAY, SHORT, then)
                .await
                .unwrap()
        }
    };
    use OnAbandoned::{Keep, Rerun};
    assert_eq!(claim(a, "f", Keep).await, Claim::Run);
    assert_eq!(claim(b, "f", Keep).await, Claim::Running, "the lease holds");
    run_out().await;
    assert_eq!(claim(b, "f", Keep).await, Claim::Abandoned { first: true });
    assert_eq!(claim(a, "f", Keep).await, Claim::Abandoned { first: false });
    assert_eq!(claim(b, "g", Keep).await, Claim::Mismatch);
    // The first owner comes back late: its end is not recorded over the mark.
    assert!(!a.renew("c", "ab", DAY).await.unwrap());
    let done = Finish::Completed(json!("late"));
    assert!(!a.finish("c", "ab", done).await.unwrap());
    assert!(!a
        .finish("c", "ab", Finish::Failed("late".into()))
        .await
        .unwrap());
    run_out().await;
    assert_eq!(claim(b, "f", Keep).await, Claim::Abandoned { first: false });
    // A claim that may rerun it runs it once more; then it is a key as any other.
    assert_eq!(claim(a, "f", Rerun).await, Claim::Run);
    assert_eq!(claim(b, "f", Rerun).await, Claim::Running);
    assert!(a
        .finish("c", "ab", Finish::Completed(json!(2)))
        .await
        .unwrap());
    assert_eq!(claim(b, "f", Keep).await, Claim::Replay(json!(2)));
    // Forgotten with its retention.
    let (key, fp) = ("ab-gone", "f");
    let first = a.claim_leased("c", key, fp, SHORT, Duration::from_millis(50), Keep);
    assert_eq!(first.await.unwrap(), Claim::Run);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let next = b.claim_leased("c", key, fp, DAY, SHORT, Keep);
    assert_eq!(next.await.unwrap(), Claim::Abandoned { first: true });
    run_out().await;
    let later = b.claim_leased("c", key, fp, SHORT, SHORT, Keep);
    assert_eq!(later.await.unwrap(), Claim::Run, "past its retention");
}

/// For the stores' tests: 100 concurrent claims of one key whose lease ran out,
/// alternating between two stores on the same data; how many took it over
/// (`Rerun`) or found it abandoned first (`Keep`).
#[cfg(test)]
pub(crate) async fn concurrent_takeovers(a: &Store, b: &Store, then: OnAbandoned) -> usize {
    const DAY: Duration = Duration::from_secs(86_400);
    let key = format!("expired-{then:?}");
    let lease = Duration::from_millis(100);
    let first = a.claim_leased("c", &key, "f", DAY, lease, then).await;
    assert_eq!(first.unwrap(), Claim::Run);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            let key = key.clone();
            tokio::spawn(async move { s.claim_leased("c", &key, "f", DAY, DAY, then).await })
        })
        .collect();
    let mut firsts = 0;
    for t in tasks {
        match (t.await.unwrap().unwrap(), then) {
            (Claim::TakenOver, OnAbandoned::Rerun) => firsts += 1,
            (Claim::Running, OnAbandoned::Rerun) => {}
            (Claim::Abandoned { first: true }, OnAbandoned::Keep) => firsts += 1,
            (Claim::Abandoned { first: false }, OnAbandoned::Keep) => {}
            other => panic!("a claim of an expired running key got {other:?}"),
        }
    }
    firsts
}

#[cfg(test)]
mod tests;
