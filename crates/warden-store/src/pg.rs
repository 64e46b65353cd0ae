//! The PostgreSQL store, for several gateway replicas sharing one ledger and one
//! audit trail. The same schema and semantics as the SQLite store; exactly one
//! claimant wins a key across replicas because the claim's INSERT … ON CONFLICT
//! waits for a concurrent insert of the same key to commit, and a takeover of an
//! expired lease is one conditional UPDATE on the row the claim has locked.
//!
//! Leases are stamped and compared on the server's clock ([`NOW_MS`]), so replicas
//! on hosts whose clocks disagree still agree on when a lease ran out.

use crate::chain::Lanes;
use crate::{
    millis, new_owner, now_ms, AuditFilter, AuditRecord, Claim, FactsRow, Finish, MinuteCount,
    OnAbandoned, StoreError, ABANDONED,
};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls};

/// The server's time in ms since the epoch (clock_timestamp: the time now, not
/// the transaction's start).
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT";

/// Inserts a key as running, leased until the server's now plus `$6` ms, where
/// no row holds it (`$1` scope, `$2` key, `$3` fingerprint, `$4` now, `$5` owner).
fn claim_free_key() -> String {
    format!(
        "INSERT INTO warden_ledger (scope, key, fingerprint, state, created_ms, owner, lease_until_ms)
         VALUES ($1, $2, $3, 'running', $4, $5, {NOW_MS} + $6)
         ON CONFLICT (scope, key) DO NOTHING"
    )
}

mod approvals;
mod audit;
mod partitions;
mod schema;
pub use approvals::SharedApproval;
pub use partitions::PARTITION_DAYS_AHEAD;
use schema::MIGRATIONS;
mod limits;
pub use limits::QuotaTake;

fn unavailable(e: tokio_postgres::Error) -> StoreError {
    StoreError::Unavailable(format!("PostgreSQL: {e}"))
}

/// How many audit batches a replica writes at once, each on its own connection
/// and in its own chain; a batch that finds a commit running waits for a commit
/// to end, or for one tick of Tokio's timer (`group::SPREAD`), before it takes
/// a lane beside it.
pub const AUDIT_LANES: usize = 4;

/// How many connections a replica opens at most when `[store] connections` is
/// not set.
pub const DEFAULT_CONNECTIONS: usize = 8;

#[derive(Clone)]
pub struct Postgres {
    pool: Arc<Pool>,
    /// A connection of its own for readiness probes: a probe must not queue
    /// behind the calls' statements, or a busy replica looks unreachable.
    probe: Arc<Mutex<Option<Client>>>,
    url: Arc<str>,
    owner: Arc<str>,
    /// Where this replica's audit chains stand: one per batch written at once.
    pub(crate) chain: Arc<Lanes>,
}

/// The calls' connections. A transaction needs its connection to itself, so each
/// sits behind its own lock; one is opened only when every open one is busy, and
/// one that was lost (a server restart, a terminated backend) is opened again by
/// the next statement that takes it, so an outage lasts as long as the server's.
struct Pool {
    slots: Vec<Mutex<Option<Conn>>>,
    /// Where a statement that finds every connection busy waits, in turn.
    next: AtomicUsize,
    url: Arc<str>,
    /// The schema version connections are brought to as they are opened.
    schema: usize,
}

/// One of the pool's connections, with the audit batch's INSERT once it has
/// been prepared on it (parsed and planned once per connection, not per batch).
struct Conn {
    client: Client,
    audit_insert: Option<tokio_postgres::Statement>,
}

impl Pool {
    /// A connection to this statement alone (see [`Pool::conn`]).
    async fn client(&self) -> Result<MappedMutexGuard<'_, Client>, StoreError> {
        Ok(MappedMutexGuard::map(self.conn().await?, |c| &mut c.client))
    }

    /// A connection to this statement alone: the first free open one, else a free
    /// slot opened now, else the next busy one in turn once it is free.
    async fn conn(&self) -> Result<MappedMutexGuard<'_, Conn>, StoreError> {
        let slots = &self.slots;
        let mut free_empty = None;
        let mut taken = None;
        for slot in slots {
            if let Ok(guard) = slot.try_lock() {
                if guard.as_ref().is_some_and(|c| !c.client.is_closed()) {
                    taken = Some(guard);
                    break;
                }
                free_empty.get_or_insert(guard);
            }
        }
        let mut guard = match (taken, free_empty) {
            (Some(guard), _) | (None, Some(guard)) => guard,
            (None, None) => {
                let turn = self.next.fetch_add(1, Ordering::Relaxed) % slots.len();
                slots[turn].lock().await
            }
        };
        if guard.as_ref().is_none_or(|c| c.client.is_closed()) {
            *guard = None;
            let client = Postgres::open(&self.url, self.schema).await?;
            *guard = Some(Conn {
                client,
                audit_insert: None,
            });
        }
        MutexGuard::try_map(guard, Option::as_mut)
            .map_err(|_| StoreError::Unavailable("PostgreSQL: no connection".into()))
    }
}

impl Postgres {
    /// Connects and brings the schema up to date (under an advisory lock, so
    /// replicas starting together migrate once). At most `connections` are
    /// opened, the first one now.
    pub async fn connect_pool(url: &str, connections: usize) -> Result<Postgres, StoreError> {
        Postgres::connect_at(url, connections, MIGRATIONS.len()).await
    }

    /// [`Postgres::connect_pool`] with the schema brought up to version `schema`
    /// only (tests make databases of earlier versions with it). The audit
    /// partitions ahead are made now and kept up (from version 10 on): a failure
    /// is logged, and records go to the default partition until the next try.
    async fn connect_at(
        url: &str,
        connections: usize,
        schema: usize,
    ) -> Result<Postgres, StoreError> {
        let first = Postgres::open(url, schema).await?;
        let mut slots: Vec<_> = (0..connections.max(1)).map(|_| Mutex::new(None)).collect();
        *slots[0].get_mut() = Some(Conn {
            client: first,
            audit_insert: None,
        });
        let owner = new_owner()?;
        let pool = Arc::new(Pool {
            slots,
            next: AtomicUsize::new(0),
            url: url.into(),
            schema,
        });
        if schema >= schema::PARTITIONED {
            if let Err(e) = pool.maintain_partitions(now_ms()).await {
                tracing::warn!("audit partitions: not made ahead ({e}); records go to the default partition until the next try");
            }
            partitions::keep_up(Arc::downgrade(&pool));
        }
        Ok(Postgres {
            chain: Arc::new(Lanes::new(&owner, AUDIT_LANES.min(connections.max(1)))),
            pool,
            probe: Arc::new(Mutex::new(None)),
            url: url.into(),
            owner,
        })
    }

    /// [`Postgres::connect_pool`] with [`DEFAULT_CONNECTIONS`].
    pub async fn connect(url: &str) -> Result<Postgres, StoreError> {
        Postgres::connect_pool(url, DEFAULT_CONNECTIONS).await
    }

    /// The id this store's claims are held under.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// How many connections are open now (the readiness probe's own not counted).
    pub async fn open_connections(&self) -> usize {
        let mut open = 0;
        for slot in &self.pool.slots {
            let slot = slot.lock().await;
            open += usize::from(slot.as_ref().is_some_and(|c| !c.client.is_closed()));
        }
        open
    }

    /// A connection to this statement alone (see [`Pool::client`]).
    async fn client(&self) -> Result<MappedMutexGuard<'_, Client>, StoreError> {
        self.pool.client().await
    }

    async fn open(url: &str, schema: usize) -> Result<Client, StoreError> {
        let (mut client, connection) =
            tokio::time::timeout(Duration::from_secs(10), tokio_postgres::connect(url, NoTls))
                .await
                .map_err(|_| {
                    StoreError::Unavailable(format!(
                        "PostgreSQL at {} did not answer within 10 s",
                        redact_url(url)
                    ))
                })?
                .map_err(|e| {
                    StoreError::Unavailable(format!(
                        "cannot connect to PostgreSQL at {}: {e}",
                        redact_url(url)
                    ))
                })?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(
                    "the PostgreSQL connection ended: {e}; the next store call reconnects"
                );
            }
        });
        schema::migrate(&mut client, schema).await?;
        Ok(client)
    }

    /// See [`crate::Store::claim`].
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

    /// See [`crate::Sqlite::claim_leased`].
    pub async fn claim_leased(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        retention: Duration,
        lease: Duration,
        abandoned: OnAbandoned,
    ) -> Result<Claim, StoreError> {
        let mut client = self.client().await?;
        let now = now_ms();
        let (lease, owner) = (millis(lease), &*self.owner);
        // A key nobody holds (the usual case) is taken in one round trip: with no
        // row, the transaction below would delete nothing and insert the same.
        let t = Type::TEXT;
        let inserted = client
            .execute_typed(
                &claim_free_key(),
                &[
                    (&scope, t.clone()),
                    (&key, t.clone()),
                    (&fingerprint, t.clone()),
                    (&now, Type::INT8),
                    (&owner, t),
                    (&lease, Type::INT8),
                ],
            )
            .await
            .map_err(unavailable)?;
        if inserted == 1 {
            return Ok(Claim::Run);
        }
        let tx = client.transaction().await.map_err(unavailable)?;
        tx.execute(
            &format!(
                "DELETE FROM warden_ledger WHERE scope = $1 AND key = $2 AND created_ms < $3
                   AND NOT (state = 'running' AND COALESCE(lease_until_ms, 0) >= {NOW_MS})"
            ),
            &[&scope, &key, &now.saturating_sub(millis(retention))],
        )
        .await
        .map_err(unavailable)?;
        let inserted = tx
            .execute(
                &claim_free_key(),
                &[&scope, &key, &fingerprint, &now, &owner, &lease],
            )
            .await
            .map_err(unavailable)?;
        let claim = if inserted == 1 {
            Claim::Run
        } else {
            let at = (now, lease);
            claim_held(&tx, (scope, key), fingerprint, owner, at, abandoned).await?
        };
        tx.commit().await.map_err(unavailable)?;
        Ok(claim)
    }

    /// See [`crate::Sqlite::renew`].
    pub async fn renew(&self, scope: &str, key: &str, lease: Duration) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let renewed = client
            .execute(
                &format!(
                    "UPDATE warden_ledger SET lease_until_ms = {NOW_MS} + $4
                     WHERE scope = $1 AND key = $2 AND state = 'running' AND owner = $3"
                ),
                &[&scope, &key, &&*self.owner, &millis(lease)],
            )
            .await
            .map_err(unavailable)?;
        Ok(renewed == 1)
    }

    /// See [`crate::Sqlite::end_session`].
    pub async fn end_session(&self, sid: &str, until_ms: i64) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                &format!("DELETE FROM warden_session_end WHERE until_ms < {NOW_MS}"),
                &[],
            )
            .await
            .map_err(unavailable)?;
        client
            .execute(
                "INSERT INTO warden_session_end (sid, until_ms) VALUES ($1, $2)
                 ON CONFLICT (sid) DO UPDATE
                 SET until_ms = GREATEST(warden_session_end.until_ms, excluded.until_ms)",
                &[&sid, &until_ms],
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// See [`crate::Sqlite::session_ended`].
    pub async fn session_ended(&self, sid: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT 1 FROM warden_session_end WHERE sid = $1", &[&sid])
            .await
            .map_err(unavailable)?;
        Ok(row.is_some())
    }

    /// See [`crate::Sqlite::finish`].
    pub async fn finish(&self, scope: &str, key: &str, finish: Finish) -> Result<bool, StoreError> {
        let (state, result) = match finish {
            Finish::Completed(v) => ("completed", Some(v.to_string())),
            Finish::Failed(_) => ("failed", None),
        };
        let client = self.client().await?;
        let t = Type::TEXT;
        // Typed: no separate prepare, one round trip.
        let finished = client
            .execute_typed(
                "UPDATE warden_ledger SET state = $3, result = $4, lease_until_ms = NULL
                 WHERE scope = $1 AND key = $2 AND state = 'running' AND owner = $5",
                &[
                    (&scope, t.clone()),
                    (&key, t.clone()),
                    (&state, t.clone()),
                    (&result, t.clone()),
                    (&&*self.owner, t),
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(finished == 1)
    }

    /// See [`crate::Store::ping`].
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut probe = self.probe.lock().await;
        // A kept connection that fails may only have been cut: one fresh try.
        if let Some(client) = probe.as_ref().filter(|c| !c.is_closed()) {
            if client.simple_query("SELECT 1").await.is_ok() {
                return Ok(());
            }
        }
        *probe = None;
        let (client, connection) =
            tokio_postgres::connect(&self.url, NoTls)
                .await
                .map_err(|e| {
                    StoreError::Unavailable(format!(
                        "cannot connect to PostgreSQL at {}: {e}",
                        redact_url(&self.url)
                    ))
                })?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        client.simple_query("SELECT 1").await.map_err(unavailable)?;
        *probe = Some(client);
        Ok(())
    }

    pub async fn recent(
        &self,
        filter: AuditFilter,
        before: Option<i64>,
    ) -> Result<Vec<(i64, AuditRecord)>, StoreError> {
        let limit = if filter.limit == 0 {
            i64::MAX
        } else {
            filter.limit as i64
        };
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, record FROM warden_audit
                 WHERE ($1::TEXT IS NULL OR caller = $1) AND ($2::TEXT IS NULL OR tool = $2)
                   AND ($3::TEXT IS NULL OR outcome = $3) AND ($4::BIGINT IS NULL OR time_ms >= $4)
                   AND ($6::BIGINT IS NULL OR id < $6)
                 ORDER BY id DESC LIMIT $5",
                &[
                    &filter.caller,
                    &filter.tool,
                    &filter.outcome,
                    &filter.since_ms,
                    &limit,
                    &before,
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let id: i64 = r.get(0);
                Some((id, serde_json::from_str(r.get::<_, &str>(1)).ok()?))
            })
            .collect())
    }

    pub async fn counts_per_minute(&self, since_ms: i64) -> Result<Vec<MinuteCount>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT time_ms / 60000, COALESCE(decision, record::json ->> 'decision'), outcome, COUNT(*)
                 FROM warden_audit WHERE time_ms >= $1 GROUP BY 1, 2, 3",
                &[&since_ms],
            )
            .await
            .map_err(unavailable)?;
        Ok(rows
            .iter()
            .map(|r| MinuteCount {
                minute: r.get(0),
                decision: r.get::<_, Option<String>>(1).unwrap_or_default(),
                outcome: r.get(2),
                calls: r.get::<_, i64>(3) as u64,
            })
            .collect())
    }

    pub(crate) async fn audit_facts(&self, since_ms: i64) -> Result<Vec<FactsRow>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT time_ms / 60000, outcome, decision, upstream, duration_ms, findings,
                        CASE WHEN decision IS NULL THEN record END
                 FROM warden_audit WHERE time_ms >= $1",
                &[&since_ms],
            )
            .await
            .map_err(unavailable)?;
        Ok(rows
            .iter()
            .map(|r| FactsRow {
                minute: r.get(0),
                outcome: r.get(1),
                decision: r.get(2),
                upstream: r.get(3),
                duration_ms: r.get(4),
                findings: r.get(5),
                record: r.get(6),
            })
            .collect())
    }

    pub async fn audit_record(&self, id: i64) -> Result<Option<AuditRecord>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT record FROM warden_audit WHERE id = $1", &[&id])
            .await
            .map_err(unavailable)?;
        Ok(row.and_then(|r| serde_json::from_str(r.get::<_, &str>(0)).ok()))
    }

    pub async fn query(&self, filter: AuditFilter) -> Result<Vec<AuditRecord>, StoreError> {
        let limit = if filter.limit == 0 {
            i64::MAX
        } else {
            filter.limit as i64
        };
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT record FROM warden_audit
                 WHERE ($1::TEXT IS NULL OR caller = $1) AND ($2::TEXT IS NULL OR tool = $2)
                   AND ($3::TEXT IS NULL OR outcome = $3) AND ($4::BIGINT IS NULL OR time_ms >= $4)
                 ORDER BY id LIMIT $5",
                &[
                    &filter.caller,
                    &filter.tool,
                    &filter.outcome,
                    &filter.since_ms,
                    &limit,
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(rows
            .iter()
            .filter_map(|r| serde_json::from_str(r.get::<_, &str>(0)).ok())
            .collect())
    }
}

/// A claim of a key a row holds, in the claim's transaction: the same
/// fingerprint's completed result replays, a running call is waited for (or its
/// ran-out lease taken over), a failed or abandoned one may run again.
async fn claim_held(
    tx: &tokio_postgres::Transaction<'_>,
    (scope, key): (&str, &str),
    fingerprint: &str,
    owner: &str,
    (now, lease): (i64, i64),
    abandoned: OnAbandoned,
) -> Result<Claim, StoreError> {
    // FOR UPDATE: a concurrent claimant of the same key waits here until
    // this transaction ends, then sees the row as it left it.
    let row = tx
        .query_one(
            "SELECT fingerprint, state, result, owner FROM warden_ledger WHERE scope = $1 AND key = $2 FOR UPDATE",
            &[&scope, &key],
        )
        .await
        .map_err(unavailable)?;
    let (fp, state, result, held_by): (String, String, Option<String>, Option<String>) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let abandoned_before = held_by.as_deref() == Some(ABANDONED);
    Ok(match state.as_str() {
        _ if fp != fingerprint => Claim::Mismatch,
        "running" if abandoned_before && abandoned == OnAbandoned::Keep => {
            Claim::Abandoned { first: false }
        }
        "running" if !abandoned_before => {
            claim_running(tx, (scope, key), owner, (now, lease), abandoned).await?
        }
        "completed" => Claim::Replay(
            result
                .and_then(|r| serde_json::from_str(&r).ok())
                .unwrap_or(Value::Null),
        ),
        // Failed, or abandoned and may be run again.
        _ => {
            tx.execute(
                &format!(
                    "UPDATE warden_ledger SET state = 'running', result = NULL, created_ms = $3, owner = $4,
                       lease_until_ms = {NOW_MS} + $5
                     WHERE scope = $1 AND key = $2"
                ),
                &[&scope, &key, &now, &owner, &lease],
            )
            .await
            .map_err(unavailable)?;
            Claim::Run
        }
    })
}

/// See the SQLite store's `claim_running`: the same, with the lease stamped and
/// compared on the server's clock.
async fn claim_running(
    tx: &tokio_postgres::Transaction<'_>,
    (scope, key): (&str, &str),
    owner: &str,
    (now, lease): (i64, i64),
    abandoned: OnAbandoned,
) -> Result<Claim, StoreError> {
    let (taken, ran_out) = match abandoned {
        OnAbandoned::Keep => (
            tx.execute(
                &format!(
                    "UPDATE warden_ledger SET owner = $3, lease_until_ms = NULL
                     WHERE scope = $1 AND key = $2 AND state = 'running' AND lease_until_ms < {NOW_MS}"
                ),
                &[&scope, &key, &ABANDONED],
            )
            .await,
            Claim::Abandoned { first: true },
        ),
        OnAbandoned::Rerun => (
            tx.execute(
                &format!(
                    "UPDATE warden_ledger SET owner = $3, lease_until_ms = {NOW_MS} + $4, created_ms = $5
                     WHERE scope = $1 AND key = $2 AND state = 'running' AND lease_until_ms < {NOW_MS}"
                ),
                &[&scope, &key, &owner, &lease, &now],
            )
            .await,
            Claim::TakenOver,
        ),
    };
    Ok(if taken.map_err(unavailable)? == 1 {
        ran_out
    } else {
        Claim::Running
    })
}

/// A URL without its password, for messages.
fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{}{}@{}", &url[..s + 3], user, &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod bench;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_lanes;
#[cfg(test)]
mod tests_partitions;
