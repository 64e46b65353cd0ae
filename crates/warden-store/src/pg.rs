//! The PostgreSQL store, for several gateway replicas sharing one ledger and one
//! audit trail. The same schema and semantics as the SQLite store; exactly one
//! claimant wins a key across replicas because the claim's INSERT … ON CONFLICT
//! waits for a concurrent insert of the same key to commit, and a takeover of an
//! expired lease is one conditional UPDATE on the row the claim has locked.
//!
//! Leases are stamped and compared on the server's clock ([`NOW_MS`]), so replicas
//! on hosts whose clocks disagree still agree on when a lease ran out.

use crate::{
    millis, new_owner, now_ms, AuditFilter, AuditRecord, Claim, Finish, MinuteCount, StoreError,
};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls};

/// Schema migrations, in order; the index + 1 is the version.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE warden_ledger (
        scope TEXT NOT NULL,
        key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('running', 'completed', 'failed')),
        result TEXT,
        created_ms BIGINT NOT NULL,
        PRIMARY KEY (scope, key)
    );
    CREATE TABLE warden_audit (
        id BIGSERIAL PRIMARY KEY,
        time_ms BIGINT NOT NULL,
        caller TEXT,
        tool TEXT NOT NULL,
        outcome TEXT NOT NULL,
        record TEXT NOT NULL
    );
    CREATE INDEX warden_audit_time ON warden_audit (time_ms);",
    // 2: a running claim's owner and lease (ms since the epoch, server clock). Rows
    // written before have neither: a running one is never taken over and is
    // forgotten with its retention, as before.
    "ALTER TABLE warden_ledger ADD COLUMN owner TEXT;
    ALTER TABLE warden_ledger ADD COLUMN lease_until_ms BIGINT;",
    // 3: quota buckets shared by replicas: per bucket, the theoretical arrival
    // time of its next call (ms since the epoch, server clock; GCRA).
    "CREATE TABLE warden_quota (
        key TEXT PRIMARY KEY,
        tat_ms DOUBLE PRECISION NOT NULL
    );",
    // 4: HTTP sessions a client ended (DELETE), until their ids would have expired,
    // so that no replica takes them up again.
    "CREATE TABLE warden_session_end (
        sid TEXT PRIMARY KEY,
        until_ms BIGINT NOT NULL
    );",
];

/// The server's time in ms since the epoch (clock_timestamp: the time now, not
/// the transaction's start).
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT";

/// An arbitrary constant: the advisory lock replicas take while migrating.
const MIGRATION_LOCK: i64 = 0x5741_5244_454e;

fn unavailable(e: tokio_postgres::Error) -> StoreError {
    StoreError::Unavailable(format!("PostgreSQL: {e}"))
}

#[derive(Clone)]
pub struct Postgres {
    // One connection; transactions need it exclusively. Replaced when it drops.
    client: Arc<Mutex<Client>>,
    url: Arc<str>,
    owner: Arc<str>,
}

impl Postgres {
    /// Connects and brings the schema up to date (under an advisory lock, so
    /// replicas starting together migrate once).
    pub async fn connect(url: &str) -> Result<Postgres, StoreError> {
        let client = Postgres::open(url).await?;
        Ok(Postgres {
            client: Arc::new(Mutex::new(client)),
            url: url.into(),
            owner: new_owner()?,
        })
    }

    /// The id this store's claims are held under.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The connection, reconnecting first when the last one was lost (a server
    /// restart, a terminated backend): an outage lasts as long as the server's.
    async fn client(&self) -> Result<tokio::sync::MutexGuard<'_, Client>, StoreError> {
        let mut client = self.client.lock().await;
        if client.is_closed() {
            *client = Postgres::open(&self.url).await?;
        }
        Ok(client)
    }

    async fn open(url: &str) -> Result<Client, StoreError> {
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
        client
            .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
            .await
            .map_err(unavailable)?;
        let migrated = async {
            client
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS warden_schema_version (version INTEGER NOT NULL)",
                )
                .await?;
            let version: i32 = client
                .query_opt("SELECT version FROM warden_schema_version", &[])
                .await?
                .map(|r| r.get(0))
                .unwrap_or(0);
            Ok::<i32, tokio_postgres::Error>(version)
        }
        .await;
        let result = match migrated {
            Err(e) => Err(unavailable(e)),
            Ok(version) if version as usize > MIGRATIONS.len() => Err(StoreError::Unavailable(format!(
                "the database has schema version {version}, newer than this mcp-warden knows ({}); upgrade mcp-warden",
                MIGRATIONS.len()
            ))),
            Ok(version) => {
                let mut outcome = Ok(());
                for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
                    let step = async {
                        let tx = client.transaction().await?;
                        tx.batch_execute(sql).await?;
                        tx.execute("DELETE FROM warden_schema_version", &[]).await?;
                        tx.execute("INSERT INTO warden_schema_version (version) VALUES ($1)", &[&(i as i32 + 1)]).await?;
                        tx.commit().await
                    }
                    .await;
                    if let Err(e) = step {
                        outcome = Err(unavailable(e));
                        break;
                    }
                }
                outcome
            }
        };
        let _ = client
            .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
            .await;
        result?;
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
        self.claim_leased(scope, key, fingerprint, retention, retention)
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
    ) -> Result<Claim, StoreError> {
        let mut client = self.client().await?;
        let now = now_ms();
        let (lease, owner) = (millis(lease), &*self.owner);
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
                &format!(
                    "INSERT INTO warden_ledger (scope, key, fingerprint, state, created_ms, owner, lease_until_ms)
                     VALUES ($1, $2, $3, 'running', $4, $5, {NOW_MS} + $6)
                     ON CONFLICT (scope, key) DO NOTHING"
                ),
                &[&scope, &key, &fingerprint, &now, &owner, &lease],
            )
            .await
            .map_err(unavailable)?;
        let claim = if inserted == 1 {
            Claim::Run
        } else {
            // FOR UPDATE: a concurrent claimant of the same key waits here until
            // this transaction ends, then sees the row as it left it.
            let row = tx
                .query_one(
                    "SELECT fingerprint, state, result FROM warden_ledger WHERE scope = $1 AND key = $2 FOR UPDATE",
                    &[&scope, &key],
                )
                .await
                .map_err(unavailable)?;
            let (fp, state, result): (String, String, Option<String>) =
                (row.get(0), row.get(1), row.get(2));
            match state.as_str() {
                _ if fp != fingerprint => Claim::Mismatch,
                "running" => {
                    // Only a lease that ran out is taken; a row without one
                    // (written before leases) waits for its retention.
                    let taken = tx
                        .execute(
                            &format!(
                                "UPDATE warden_ledger SET owner = $3, lease_until_ms = {NOW_MS} + $4, created_ms = $5
                                 WHERE scope = $1 AND key = $2 AND state = 'running' AND lease_until_ms < {NOW_MS}"
                            ),
                            &[&scope, &key, &owner, &lease, &now],
                        )
                        .await
                        .map_err(unavailable)?;
                    if taken == 1 {
                        Claim::TakenOver
                    } else {
                        Claim::Running
                    }
                }
                "completed" => Claim::Replay(
                    result
                        .and_then(|r| serde_json::from_str(&r).ok())
                        .unwrap_or(Value::Null),
                ),
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
            }
        };
        tx.commit().await.map_err(unavailable)?;
        Ok(claim)
    }

    /// Takes one call from every bucket in `buckets`, or from none of them: the
    /// generic cell rate algorithm over the server's clock, in one transaction
    /// whose row locks make replicas take their turns. Each bucket is its key, the
    /// ms between two calls at its steady rate, and how far ahead of that rate it
    /// may run. `Ok(None)`: admitted; `Ok(Some((i, ms)))`: bucket `i` refuses
    /// (the one that makes the caller wait longest) for `ms` more milliseconds.
    pub async fn take_quota(
        &self,
        buckets: &[(String, f64, f64)],
    ) -> Result<Option<(usize, f64)>, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        // Rows are locked in key order, so two replicas never wait on each other in a circle.
        let mut order: Vec<usize> = (0..buckets.len()).collect();
        order.sort_by(|a, b| buckets[*a].0.cmp(&buckets[*b].0));
        let now_sql = "extract(epoch FROM clock_timestamp()) * 1000";
        let mut seen = Vec::with_capacity(buckets.len());
        for &i in &order {
            let key = &buckets[i].0;
            tx.execute(
                "INSERT INTO warden_quota (key, tat_ms) VALUES ($1, 0) ON CONFLICT (key) DO NOTHING",
                &[key],
            )
            .await
            .map_err(unavailable)?;
            let row = tx
                .query_one(
                    &format!("SELECT tat_ms, ({now_sql})::DOUBLE PRECISION FROM warden_quota WHERE key = $1 FOR UPDATE"),
                    &[key],
                )
                .await
                .map_err(unavailable)?;
            let (tat, now): (f64, f64) = (row.get(0), row.get(1));
            seen.push((i, tat.max(now), now));
        }
        let refused = seen
            .iter()
            .filter_map(|&(i, tat, now)| {
                let wait = tat - now - buckets[i].2;
                (wait > 0.0).then_some((i, wait))
            })
            .fold(None, |worst: Option<(usize, f64)>, (i, w)| match worst {
                Some((_, ww)) if ww >= w => worst,
                _ => Some((i, w)),
            });
        if refused.is_none() {
            for &(i, tat, _) in &seen {
                tx.execute(
                    "UPDATE warden_quota SET tat_ms = $2 WHERE key = $1",
                    &[&buckets[i].0, &(tat + buckets[i].1)],
                )
                .await
                .map_err(unavailable)?;
            }
        }
        tx.commit().await.map_err(unavailable)?;
        Ok(refused)
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
        let finished = client
            .execute(
                "UPDATE warden_ledger SET state = $3, result = $4, lease_until_ms = NULL
                 WHERE scope = $1 AND key = $2 AND state = 'running' AND owner = $5",
                &[&scope, &key, &state, &result, &&*self.owner],
            )
            .await
            .map_err(unavailable)?;
        Ok(finished == 1)
    }

    /// See [`crate::Store::ping`].
    pub async fn ping(&self) -> Result<(), StoreError> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await.map_err(unavailable)?;
        Ok(())
    }

    pub async fn record(&self, record: &AuditRecord) -> Result<(), StoreError> {
        let json =
            serde_json::to_string(record).map_err(|e| StoreError::Unavailable(e.to_string()))?;
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO warden_audit (time_ms, caller, tool, outcome, record) VALUES ($1, $2, $3, $4, $5)",
                &[&now_ms(), &record.caller, &record.tool, &record.outcome, &json],
            )
            .await
            .map_err(unavailable)?;
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
                "SELECT time_ms / 60000, record::json ->> 'decision', outcome, COUNT(*)
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
mod tests {
    use super::*;
    use serde_json::json;

    const DAY: Duration = Duration::from_secs(86_400);
    const ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

    /// A fresh database for one test, dropped at the end.
    struct TestDb {
        name: String,
    }

    impl TestDb {
        async fn create(tag: &str) -> TestDb {
            let name = format!("warden_test_{tag}_{}", std::process::id());
            let (admin, conn) = tokio_postgres::connect(ADMIN, NoTls)
                .await
                .expect("PostgreSQL must run on 127.0.0.1:5432 with trust auth for these tests");
            tokio::spawn(conn);
            admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
                .await
                .unwrap();
            admin
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .unwrap();
            TestDb { name }
        }

        fn url(&self) -> String {
            format!("postgres://postgres@127.0.0.1:5432/{}", self.name)
        }

        async fn drop_db(self) {
            let (admin, conn) = tokio_postgres::connect(ADMIN, NoTls).await.unwrap();
            tokio::spawn(conn);
            let _ = admin
                .batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ))
                .await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ledger_semantics_and_one_winner_across_two_connections() {
        let db = TestDb::create("ledger").await;
        let (a, b) = (
            Postgres::connect(&db.url()).await.unwrap(),
            Postgres::connect(&db.url()).await.unwrap(),
        );
        assert_eq!(a.claim("alice", "k", "f", DAY).await.unwrap(), Claim::Run);
        assert_eq!(
            b.claim("alice", "k", "f", DAY).await.unwrap(),
            Claim::Running
        );
        assert_eq!(
            b.claim("alice", "k", "g", DAY).await.unwrap(),
            Claim::Mismatch
        );
        a.finish("alice", "k", Finish::Completed(json!({"content": []})))
            .await
            .unwrap();
        assert_eq!(
            b.claim("alice", "k", "f", DAY).await.unwrap(),
            Claim::Replay(json!({"content": []}))
        );
        assert_eq!(a.claim("bob", "k", "f", DAY).await.unwrap(), Claim::Run);
        a.finish("bob", "k", Finish::Failed("crash".into()))
            .await
            .unwrap();
        assert_eq!(b.claim("bob", "k", "f", DAY).await.unwrap(), Claim::Run);

        let (sa, sb) = (
            crate::Store::Postgres(a.clone()),
            crate::Store::Postgres(b.clone()),
        );
        assert_eq!(crate::concurrent_runs(&sa, &sb).await, 1);
        drop((sa, sb));
        drop((a, b));
        db.drop_db().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn leases_and_one_takeover_across_two_connections() {
        let db = TestDb::create("lease").await;
        let (a, b) = (
            crate::Store::Postgres(Postgres::connect(&db.url()).await.unwrap()),
            crate::Store::Postgres(Postgres::connect(&db.url()).await.unwrap()),
        );
        crate::lease_semantics(&a, &b).await;
        assert_eq!(crate::concurrent_takeovers(&a, &b).await, 1);
        drop((a, b));
        db.drop_db().await;
    }

    #[tokio::test]
    async fn ping_answers_while_the_database_is_there_and_fails_once_it_is_gone() {
        let db = TestDb::create("ping").await;
        let store = crate::Store::Postgres(Postgres::connect(&db.url()).await.unwrap());
        store.ping().await.unwrap();
        let name = db.name.clone();
        db.drop_db().await;
        // The connection was ended with the database; reconnecting finds none.
        let e = store.ping().await.unwrap_err();
        assert!(e.to_string().contains(&name), "{e}");
    }

    #[tokio::test]
    async fn a_database_of_the_previous_version_is_migrated_and_keeps_its_keys() {
        let db = TestDb::create("v1").await;
        let (old, conn) = tokio_postgres::connect(&db.url(), NoTls).await.unwrap();
        tokio::spawn(conn);
        old.batch_execute(MIGRATIONS[0]).await.unwrap();
        old.batch_execute(
            "CREATE TABLE warden_schema_version (version INTEGER NOT NULL);
             INSERT INTO warden_schema_version VALUES (1);",
        )
        .await
        .unwrap();
        let now = now_ms();
        old.execute(
            "INSERT INTO warden_ledger (scope, key, fingerprint, state, result, created_ms) VALUES
               ('a', 'running', 'f', 'running', NULL, $1),
               ('a', 'stale', 'f', 'running', NULL, $2),
               ('a', 'done', 'f', 'completed', '{\"x\":1}', $1),
               ('a', 'failed', 'f', 'failed', NULL, $1)",
            &[&now, &(now - 2 * 3_600_000)],
        )
        .await
        .unwrap();
        let s = Postgres::connect(&db.url()).await.unwrap();
        let version: i32 = old
            .query_one("SELECT version FROM warden_schema_version", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(version as usize, MIGRATIONS.len(), "migrated to the newest");
        let (hour, short) = (Duration::from_secs(3600), Duration::from_millis(1));
        tokio::time::sleep(Duration::from_millis(5)).await;
        // A running row without a lease is never taken over: it lasts its retention, as before.
        let claim = |key: &'static str| s.claim_leased("a", key, "f", hour, short);
        assert_eq!(claim("running").await.unwrap(), Claim::Running);
        assert_eq!(claim("stale").await.unwrap(), Claim::Run);
        assert_eq!(claim("done").await.unwrap(), Claim::Replay(json!({"x": 1})));
        assert_eq!(claim("failed").await.unwrap(), Claim::Run);
        drop((s, old));
        db.drop_db().await;
    }

    #[tokio::test]
    async fn an_ended_session_is_seen_by_every_replica() {
        let db = TestDb::create("session_end").await;
        let (a, b) = (
            Postgres::connect(&db.url()).await.unwrap(),
            Postgres::connect(&db.url()).await.unwrap(),
        );
        assert!(!b.session_ended("s1").await.unwrap());
        a.end_session("s1", crate::now_ms() + 60_000).await.unwrap();
        a.end_session("gone", crate::now_ms() - 1).await.unwrap();
        assert!(b.session_ended("s1").await.unwrap());
        b.end_session("s2", crate::now_ms() + 60_000).await.unwrap();
        assert!(!a.session_ended("gone").await.unwrap());
    }

    #[tokio::test]
    async fn quota_buckets_take_a_call_from_all_or_none() {
        let db = TestDb::create("quota").await;
        let s = Postgres::connect(&db.url()).await.unwrap();
        // "wide": 1 call per hour, a burst of 2; "narrow": 1 per hour, no burst.
        let wide = ("wide".to_owned(), 3_600_000.0, 3_600_000.0);
        let narrow = ("narrow".to_owned(), 3_600_000.0, 0.0);
        assert_eq!(
            s.take_quota(&[wide.clone(), narrow.clone()]).await.unwrap(),
            None
        );
        // The narrow bucket is empty: it refuses, and the wide one keeps its call.
        let (i, wait) = s
            .take_quota(&[wide.clone(), narrow.clone()])
            .await
            .unwrap()
            .unwrap();
        assert_eq!(i, 1);
        assert!(wait > 3_590_000.0 && wait <= 3_600_000.0, "{wait}");
        assert_eq!(
            s.take_quota(std::slice::from_ref(&wide)).await.unwrap(),
            None
        );
        assert!(s.take_quota(&[wide]).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn audit_records_round_trip() {
        let db = TestDb::create("audit").await;
        let s = Postgres::connect(&db.url()).await.unwrap();
        let rec = AuditRecord {
            time: "2026-11-30T00:00:00.000Z".into(),
            session: "stdio".into(),
            caller: Some("alice".into()),
            tool: "notes.create_note".into(),
            upstream: Some("notes".into()),
            arguments: json!({"title": "t"}),
            reason: Some("asked".into()),
            unknown_keys: vec!["x".into()],
            unknown_mode: Some("warn".into()),
            decision: "allowed".into(),
            outcome: "ok".into(),
            duration_ms: 2.5,
            idempotency_key: Some("k".into()),
            replayed: false,
            error: None,
            credential: None,
            labels: Vec::new(),
            touched: Vec::new(),
            drift: None,
        };
        s.record(&rec).await.unwrap();
        let got = s
            .query(AuditFilter {
                caller: Some("alice".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(got, vec![rec.clone()]);
        assert!(s
            .query(AuditFilter {
                outcome: Some("failed".into()),
                ..Default::default()
            })
            .await
            .unwrap()
            .is_empty());
        let recent = s.recent(AuditFilter::default(), None).await.unwrap();
        assert_eq!(recent.len(), 1);
        // The page below the only record is empty; below the next id, it is there.
        let below = |id| s.recent(AuditFilter::default(), Some(id));
        assert!(below(recent[0].0).await.unwrap().is_empty());
        assert_eq!(below(recent[0].0 + 1).await.unwrap(), recent);
        assert_eq!(
            s.audit_record(recent[0].0).await.unwrap(),
            Some(rec.clone())
        );
        assert_eq!(s.audit_record(recent[0].0 + 1).await.unwrap(), None);
        let counts = s.counts_per_minute(0).await.unwrap();
        assert_eq!(
            counts
                .iter()
                .map(|c| (c.decision.as_str(), c.outcome.as_str(), c.calls))
                .collect::<Vec<_>>(),
            [("allowed", "ok", 1)]
        );
        // Reconnecting does not migrate again.
        drop(s);
        let again = Postgres::connect(&db.url()).await.unwrap();
        assert_eq!(again.query(AuditFilter::default()).await.unwrap().len(), 1);
        drop(again);
        db.drop_db().await;
    }

    #[tokio::test]
    async fn a_lost_connection_fails_then_recovers() {
        let db = TestDb::create("reconnect").await;
        let s = Postgres::connect(&db.url()).await.unwrap();
        assert_eq!(s.claim("a", "k1", "f", DAY).await.unwrap(), Claim::Run);
        let (admin, conn) = tokio_postgres::connect(ADMIN, NoTls).await.unwrap();
        tokio::spawn(conn);
        admin
            .execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", &[&db.name])
            .await
            .unwrap();
        // The call that meets the dead connection may fail (callers fail closed);
        // a later one reconnects.
        let _ = s.claim("a", "k2", "f", DAY).await;
        let mut recovered = false;
        for _ in 0..20 {
            if s.claim("a", "k3", "f", DAY).await.is_ok() {
                recovered = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(recovered, "the store reconnected");
        assert_eq!(
            s.claim("a", "k1", "f", DAY).await.unwrap(),
            Claim::Running,
            "state survived"
        );
        drop(s);
        db.drop_db().await;
    }

    #[tokio::test]
    async fn an_unreachable_server_is_a_clear_error() {
        let e = Postgres::connect("postgres://warden:secret@127.0.0.1:1/x")
            .await
            .err()
            .unwrap();
        let text = e.to_string();
        assert!(text.starts_with("the store is unavailable: cannot connect to PostgreSQL at postgres://warden@127.0.0.1:1/x"), "{text}");
        assert!(!text.contains("secret"));
    }
}
