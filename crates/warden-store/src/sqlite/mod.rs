//! The embedded SQLite store: one file in WAL mode, created and migrated on
//! first use; every operation runs behind one connection, on Tokio's blocking
//! pool or (audit batches) on the audit writer's own thread.

use crate::chain::Lanes;
use crate::{
    millis, new_owner, now_ms, AuditRecord, Claim, FactsRow, Finish, MinuteCount, OnAbandoned,
    StoreError, ABANDONED,
};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod audit;
#[cfg(test)]
pub(crate) use audit::insert_rows;
mod checkpoint;
mod open;
mod search;
#[cfg(test)]
pub(crate) use open::stayed_locked;

/// Schema migrations, applied in order on open; the index + 1 is the version.
pub(crate) const MIGRATIONS: &[&str] = &[
    "CREATE TABLE ledger (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('running', 'completed', 'failed')),
        result TEXT,
        created_ms INTEGER NOT NULL,
        PRIMARY KEY (scope, key)
    );
    CREATE TABLE audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        time_ms INTEGER NOT NULL,
        caller TEXT,
        tool TEXT NOT NULL,
        outcome TEXT NOT NULL,
        record TEXT NOT NULL
    );
    CREATE INDEX audit_time ON audit (time_ms);",
    // 2: a running claim's owner and lease (ms since the epoch). Rows written before
    // have neither: a running one is never taken over and is forgotten with its
    // retention, as before.
    "ALTER TABLE ledger ADD COLUMN owner TEXT;
    ALTER TABLE ledger ADD COLUMN lease_until_ms INTEGER;",
    // 3: HTTP sessions a client ended (DELETE), until their ids would have expired.
    "CREATE TABLE session_end (
        sid TEXT PRIMARY KEY,
        until_ms INTEGER NOT NULL
    );",
    // 4: each audit record's place in its replica's hash chain (tamper evidence);
    // rows written before have none and are reported as unchained. An anchor is
    // where retention cut a chain: the last deleted row's seq and hash.
    "ALTER TABLE audit ADD COLUMN chain TEXT;
    ALTER TABLE audit ADD COLUMN seq INTEGER;
    ALTER TABLE audit ADD COLUMN prev_hash TEXT;
    ALTER TABLE audit ADD COLUMN hash TEXT;
    CREATE INDEX audit_chain ON audit (chain, seq, id) WHERE chain IS NOT NULL;
    CREATE TABLE audit_anchor (
        chain TEXT PRIMARY KEY,
        seq INTEGER NOT NULL,
        hash TEXT NOT NULL
    );",
    // 5: copies of the fields the console charts (decision, upstream, duration,
    // guard findings), so its counts read columns instead of every record's JSON.
    // Rows written before have none; the console reads those from the JSON. The
    // index holds every column the charts read, so counting never touches a record.
    "ALTER TABLE audit ADD COLUMN decision TEXT;
    ALTER TABLE audit ADD COLUMN upstream TEXT;
    ALTER TABLE audit ADD COLUMN duration_ms REAL;
    ALTER TABLE audit ADD COLUMN findings TEXT;
    CREATE INDEX audit_facts ON audit (time_ms, outcome, decision, upstream, duration_ms, findings);",
    // 6: the console's and `audit`'s filters, newest first (an index holds the
    // rowid, which is `id`, so each is in id order within its key).
    "CREATE INDEX audit_caller ON audit (caller);
    CREATE INDEX audit_tool ON audit (tool);
    CREATE INDEX audit_outcome ON audit (outcome);",
    // 7: two B-trees fewer for each record written (issue 28). `audit_facts`
    // leads with time_ms, so it serves every search by time: `audit_time` was a
    // second copy of its first column. Most records' outcome is `ok`, which a
    // search by id finds at once: only the others are indexed by outcome (a
    // search for one of them says `outcome <> 'ok'` too, so the planner takes
    // the index), as on PostgreSQL.
    "DROP INDEX audit_time;
    DROP INDEX audit_outcome;
    CREATE INDEX audit_outcome ON audit (outcome) WHERE outcome <> 'ok';",
];

/// The embedded SQLite store.
#[derive(Clone)]
pub struct Sqlite {
    conn: Arc<Mutex<Connection>>,
    /// The file, named in errors (`None`: in memory).
    path: Option<Arc<Path>>,
    pub(crate) owner: Arc<str>,
    /// Where this store's audit chain stands: one lane, as the file has one writer.
    pub(crate) chain: Arc<Lanes>,
    /// Checkpoints the file's WAL off the commit path (`None`: in memory).
    checkpointer: Option<checkpoint::Checkpointer>,
}

impl Sqlite {
    /// Opens (or creates) the database file and brings its schema up to date,
    /// waiting up to [`open::LOCK_WAIT`] for other processes doing the same.
    pub fn open(path: &Path) -> Result<Sqlite, StoreError> {
        let conn = Connection::open(path)
            .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
        Sqlite::init_at(conn, Some(path))
    }

    /// A store in memory.
    pub fn in_memory() -> Result<Sqlite, StoreError> {
        Sqlite::init(Connection::open_in_memory()?)
    }

    pub(crate) fn init(conn: Connection) -> Result<Sqlite, StoreError> {
        Sqlite::init_at(conn, None)
    }

    fn init_at(mut conn: Connection, path: Option<&Path>) -> Result<Sqlite, StoreError> {
        open::prepare(&mut conn, path)?;
        let checkpointer = match path {
            Some(path) => {
                conn.pragma_update(None, "wal_autocheckpoint", checkpoint::BACKSTOP_PAGES)?;
                let started = checkpoint::Checkpointer::start(path).map_err(|e| {
                    StoreError::Unavailable(format!(
                        "no checkpoint thread for {}: {e}",
                        path.display()
                    ))
                })?;
                Some(started)
            }
            None => None,
        };
        let owner = new_owner()?;
        Ok(Sqlite {
            conn: Arc::new(Mutex::new(conn)),
            path: path.map(Arc::from),
            chain: Arc::new(Lanes::new(&owner, 1)),
            owner,
            checkpointer,
        })
    }

    /// Runs `f` on the connection, on the blocking pool. A statement refused for
    /// a lock another process holds is tried again (it changed nothing) until
    /// [`open::LOCK_WAIT`] has passed, so a moment's contention fails no call.
    pub(crate) async fn with<T: Send + 'static>(
        &self,
        f: impl FnMut(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.blocking(f))
            .await
            .map_err(|e| StoreError::Unavailable(format!("store task failed: {e}")))?
    }

    /// [`Sqlite::with`] on the calling thread, which it blocks.
    pub(crate) fn blocking<T>(
        &self,
        mut f: impl FnMut(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let deadline = Instant::now() + open::LOCK_WAIT;
        let done = open::retry_busy(self.path.as_deref(), deadline, || f(&mut conn));
        if let Some(c) = &self.checkpointer {
            c.nudge();
        }
        done
    }

    /// See [`Store::claim`].
    pub async fn claim(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        retention: Duration,
    ) -> Result<Claim, StoreError> {
        self.claim_leased(
            scope,
            key,
            fingerprint,
            retention,
            retention,
            OnAbandoned::Keep,
        )
        .await
    }

    /// I1: claims `key` for a call (`fingerprint` identifies tool and arguments)
    /// in this store's name, for `lease`. Exactly one concurrent claimant gets
    /// [`Claim::Run`] (or [`Claim::TakenOver`]). Entries older than `retention`
    /// are gone (I2), unless still running under a live lease; a failed entry may
    /// be claimed again. A running one whose lease ran out was abandoned: what
    /// happens to it is `abandoned`'s to say ([`OnAbandoned`]).
    pub async fn claim_leased(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        retention: Duration,
        lease: Duration,
        abandoned: OnAbandoned,
    ) -> Result<Claim, StoreError> {
        let (scope, key, fingerprint) = (scope.to_owned(), key.to_owned(), fingerprint.to_owned());
        let owner = self.owner.clone();
        self.with(move |conn| {
            let now = now_ms();
            let until = now.saturating_add(millis(lease));
            // IMMEDIATE: the write lock is taken up front, so claimants in other
            // processes on the same file run this transaction one at a time.
            let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            tx.execute(
                "DELETE FROM ledger WHERE scope = ?1 AND key = ?2 AND created_ms < ?3
                   AND NOT (state = 'running' AND COALESCE(lease_until_ms, 0) >= ?4)",
                params![scope, key, now.saturating_sub(millis(retention)), now],
            )?;
            let inserted = tx.execute(
                "INSERT INTO ledger (scope, key, fingerprint, state, created_ms, owner, lease_until_ms)
                 VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6)
                 ON CONFLICT (scope, key) DO NOTHING",
                params![scope, key, fingerprint, now, &*owner, until],
            )?;
            let claim = if inserted == 1 {
                Claim::Run
            } else {
                let (fp, state, result, held_by): (String, String, Option<String>, Option<String>) = tx.query_row(
                    "SELECT fingerprint, state, result, owner FROM ledger WHERE scope = ?1 AND key = ?2",
                    params![scope, key],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )?;
                let rerun = |tx: &rusqlite::Transaction| {
                    tx.execute(
                        "UPDATE ledger SET state = 'running', result = NULL, created_ms = ?3, owner = ?4, lease_until_ms = ?5
                         WHERE scope = ?1 AND key = ?2",
                        params![scope, key, now, &*owner, until],
                    )
                    .map(|_| Claim::Run)
                };
                match state.as_str() {
                    _ if fp != fingerprint => Claim::Mismatch,
                    "running" if held_by.as_deref() == Some(ABANDONED) => match abandoned {
                        OnAbandoned::Keep => Claim::Abandoned { first: false },
                        OnAbandoned::Rerun => rerun(&tx)?,
                    },
                    "running" => claim_running(&tx, (&scope, &key), &owner, (now, until), abandoned)?,
                    "completed" => Claim::Replay(
                        result.and_then(|r| serde_json::from_str(&r).ok()).unwrap_or(Value::Null),
                    ),
                    _ => rerun(&tx)?,
                }
            };
            tx.commit()?;
            Ok(claim)
        })
        .await
    }

    /// Extends the lease of a claim this store holds to `lease` from now. `false`:
    /// the claim is no longer ours (finished, or taken over after its lease ran out).
    pub async fn renew(&self, scope: &str, key: &str, lease: Duration) -> Result<bool, StoreError> {
        let (scope, key, owner) = (scope.to_owned(), key.to_owned(), self.owner.clone());
        self.with(move |conn| {
            let until = now_ms().saturating_add(millis(lease));
            let renewed = conn.execute(
                "UPDATE ledger SET lease_until_ms = ?4
                 WHERE scope = ?1 AND key = ?2 AND state = 'running' AND owner = ?3",
                params![scope, key, &*owner, until],
            )?;
            Ok(renewed == 1)
        })
        .await
    }

    /// Records how a claimed call ended, if the claim is still this store's.
    /// `false`: it is not (its lease ran out and another claimant took the key
    /// over), and the row, now the new attempt's, is left alone.
    pub async fn finish(&self, scope: &str, key: &str, finish: Finish) -> Result<bool, StoreError> {
        let (scope, key, owner) = (scope.to_owned(), key.to_owned(), self.owner.clone());
        let (state, result) = match finish {
            Finish::Completed(v) => ("completed", Some(v.to_string())),
            Finish::Failed(_) => ("failed", None),
        };
        self.with(move |conn| {
            // The lease goes with the run: a finished row is never taken over, and
            // a previous version re-claiming a failed row leaves no stale lease behind.
            let finished = conn.execute(
                "UPDATE ledger SET state = ?3, result = ?4, lease_until_ms = NULL
                 WHERE scope = ?1 AND key = ?2 AND state = 'running' AND owner = ?5",
                params![scope, key, state, result, &*owner],
            )?;
            Ok(finished == 1)
        })
        .await
    }

    /// Records that the HTTP session `sid` ended, so that no process takes it up
    /// again before `until_ms` (when its id expires anyway). Ended sessions whose
    /// time has passed are forgotten on the way.
    pub async fn end_session(&self, sid: &str, until_ms: i64) -> Result<(), StoreError> {
        let sid = sid.to_owned();
        self.with(move |conn| {
            conn.execute(
                "DELETE FROM session_end WHERE until_ms < ?1",
                params![now_ms()],
            )?;
            conn.execute(
                "INSERT INTO session_end (sid, until_ms) VALUES (?1, ?2)
                 ON CONFLICT (sid) DO UPDATE SET until_ms = MAX(until_ms, excluded.until_ms)",
                params![sid, until_ms],
            )?;
            Ok(())
        })
        .await
    }

    /// Whether the HTTP session `sid` was ended ([`Sqlite::end_session`]).
    pub async fn session_ended(&self, sid: &str) -> Result<bool, StoreError> {
        let sid = sid.to_owned();
        self.with(move |conn| {
            let found: Option<i64> = conn
                .query_row(
                    "SELECT 1 FROM session_end WHERE sid = ?1",
                    params![sid],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(found.is_some())
        })
        .await
    }

    /// See [`crate::Store::ping`].
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.with(|conn| {
            conn.query_row("SELECT 1", [], |r| r.get::<_, i64>(0))?;
            Ok(())
        })
        .await
    }

    pub async fn counts_per_minute(&self, since_ms: i64) -> Result<Vec<MinuteCount>, StoreError> {
        self.with(move |conn| {
            let mut stmt = conn.prepare(
                "SELECT m, d, o, SUM(n) FROM (
                   SELECT time_ms / 60000 AS m, decision AS d, outcome AS o, COUNT(*) AS n
                   FROM audit INDEXED BY audit_facts WHERE time_ms >= ?1 AND decision IS NOT NULL
                   GROUP BY 1, 2, 3
                   UNION ALL
                   SELECT time_ms / 60000, json_extract(record, '$.decision'), outcome, COUNT(*)
                   FROM audit INDEXED BY audit_facts WHERE time_ms >= ?1 AND decision IS NULL
                   GROUP BY 1, 2, 3)
                 GROUP BY 1, 2, 3",
            )?;
            let rows = stmt.query_map(params![since_ms], |r| {
                Ok(MinuteCount {
                    minute: r.get(0)?,
                    decision: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                    outcome: r.get(2)?,
                    calls: r.get::<_, i64>(3)? as u64,
                })
            })?;
            rows.collect::<Result<Vec<_>, _>>()
        })
        .await
    }

    pub(crate) async fn audit_facts(&self, since_ms: i64) -> Result<Vec<FactsRow>, StoreError> {
        self.with(move |conn| {
            // From the index alone; then the rows written before the columns, whole.
            let mut stmt = conn.prepare_cached(
                "SELECT time_ms / 60000, outcome, decision, upstream, duration_ms, findings
                 FROM audit INDEXED BY audit_facts WHERE time_ms >= ?1 AND decision IS NOT NULL",
            )?;
            let rows = stmt.query_map(params![since_ms], |r| {
                Ok(FactsRow {
                    minute: r.get(0)?,
                    outcome: r.get(1)?,
                    decision: r.get(2)?,
                    upstream: r.get(3)?,
                    duration_ms: r.get(4)?,
                    findings: r.get(5)?,
                    record: None,
                })
            })?;
            let mut out = rows.collect::<Result<Vec<_>, _>>()?;
            let mut older = conn.prepare_cached(
                "SELECT time_ms / 60000, outcome, record
                 FROM audit INDEXED BY audit_facts WHERE time_ms >= ?1 AND decision IS NULL",
            )?;
            let rows = older.query_map(params![since_ms], |r| {
                Ok(FactsRow {
                    minute: r.get(0)?,
                    outcome: r.get(1)?,
                    decision: None,
                    upstream: None,
                    duration_ms: None,
                    findings: None,
                    record: r.get(2)?,
                })
            })?;
            for row in rows {
                out.push(row?);
            }
            Ok(out)
        })
        .await
    }

    pub async fn audit_record(&self, id: i64) -> Result<Option<AuditRecord>, StoreError> {
        self.with(move |conn| {
            let mut stmt = conn.prepare("SELECT record FROM audit WHERE id = ?1")?;
            let mut rows = stmt.query_map(params![id], |r| r.get::<_, String>(0))?;
            match rows.next() {
                Some(text) => Ok(serde_json::from_str(&text?).ok()),
                None => Ok(None),
            }
        })
        .await
    }
}

/// A claim of a key another claim is running: [`Claim::Running`] while its
/// lease holds. One that ran out was abandoned: the key is marked so
/// ([`ABANDONED`]) or, when it may rerun, taken over under `owner`'s lease. A
/// row without a lease (written before leases) waits for its retention.
fn claim_running(
    tx: &rusqlite::Transaction,
    (scope, key): (&str, &str),
    owner: &str,
    (now, until): (i64, i64),
    abandoned: OnAbandoned,
) -> rusqlite::Result<Claim> {
    let (taken, ran_out) = match abandoned {
        OnAbandoned::Keep => (
            tx.execute(
                "UPDATE ledger SET owner = ?3, lease_until_ms = NULL
                 WHERE scope = ?1 AND key = ?2 AND state = 'running' AND lease_until_ms < ?4",
                params![scope, key, ABANDONED, now],
            )?,
            Claim::Abandoned { first: true },
        ),
        OnAbandoned::Rerun => (
            tx.execute(
                "UPDATE ledger SET owner = ?3, lease_until_ms = ?4, created_ms = ?5
                 WHERE scope = ?1 AND key = ?2 AND state = 'running' AND lease_until_ms < ?5",
                params![scope, key, owner, until, now],
            )?,
            Claim::TakenOver,
        ),
    };
    Ok(if taken == 1 { ran_out } else { Claim::Running })
}
