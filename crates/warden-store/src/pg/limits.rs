//! Quotas and flow trails shared by replicas (Q4, F3): rate buckets and
//! concurrency slots taken in one transaction on the server's clock, one-time
//! credits for approved retries, and the labels a session has touched.

use super::*;

/// What [`Postgres::take_quota`] decided about one call.
#[derive(Debug, Clone, PartialEq)]
pub enum QuotaTake {
    /// Every bucket took the call: the ids of the slots it now holds, one per
    /// concurrency bucket, leased until released or no longer renewed.
    Admitted(Vec<String>),
    /// Concurrency bucket `i` has no free slot.
    Full(usize),
    /// Rate bucket `i` refuses (the one that makes the caller wait longest) for
    /// this many more milliseconds.
    Wait(usize, f64),
}

impl Postgres {
    /// Takes one call from every rate bucket in `rates` and one slot from every
    /// concurrency bucket in `slots`, or nothing at all: the generic cell rate
    /// algorithm over the server's clock, in one transaction whose row locks make
    /// replicas take their turns. A rate bucket is its key, the ms between two
    /// calls at its steady rate, and how far ahead of that rate it may run; a
    /// concurrency bucket is its key and how many slots it has. A slot taken is
    /// leased for `lease` (see [`Postgres::renew_slots`]); slots whose lease ran out
    /// are free. A full concurrency bucket refuses before any rate is looked at.
    pub async fn take_quota(
        &self,
        rates: &[(String, f64, f64)],
        slots: &[(String, u32)],
        lease: Duration,
    ) -> Result<QuotaTake, StoreError> {
        let keys = bucket_keys(rates, slots);
        let ids = slots
            .iter()
            .map(|_| new_owner().map(|id| id.to_string()))
            .collect::<Result<Vec<String>, StoreError>>()?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(unavailable)?;
        let rows = lock_buckets(&tx, &keys).await?;
        if let Some(i) = full_bucket(&tx, slots).await? {
            tx.rollback().await.map_err(unavailable)?;
            return Ok(QuotaTake::Full(i));
        }
        let next = match next_arrivals(rates, &rows) {
            Ok(next) => next,
            Err((i, wait)) => {
                tx.rollback().await.map_err(unavailable)?;
                return Ok(QuotaTake::Wait(i, wait));
            }
        };
        advance_rates(&tx, rates, &next).await?;
        lease_slots(&tx, slots, &ids, lease).await?;
        tx.commit().await.map_err(unavailable)?;
        Ok(QuotaTake::Admitted(ids))
    }

    /// Extends the leases of slots this gateway holds; how many it still held
    /// (a slot whose lease ran out may have been freed and taken by another call).
    pub async fn renew_slots(&self, ids: &[String], lease: Duration) -> Result<u64, StoreError> {
        let client = self.client().await?;
        client
            .execute(
                &format!("UPDATE warden_quota_slot SET lease_until_ms = {NOW_MS} + $2 WHERE id = ANY($1)"),
                &[&ids, &millis(lease)],
            )
            .await
            .map_err(unavailable)
    }

    /// Frees slots: their calls ended.
    pub async fn release_slots(&self, ids: &[String]) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute("DELETE FROM warden_quota_slot WHERE id = ANY($1)", &[&ids])
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Records a credit: a call counted against its quotas paused, and its retry,
    /// which brings `id` back sealed, is not counted again. Valid for `ttl`.
    pub async fn issue_credit(&self, id: &str, ttl: Duration) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                &format!("DELETE FROM warden_quota_credit WHERE until_ms < {NOW_MS}"),
                &[],
            )
            .await
            .map_err(unavailable)?;
        client
            .execute(
                &format!(
                    "INSERT INTO warden_quota_credit (id, until_ms) VALUES ($1, {NOW_MS} + $2)
                     ON CONFLICT (id) DO NOTHING"
                ),
                &[&id, &millis(ttl)],
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Redeems a credit: true once, for a credit issued and not yet expired.
    pub async fn redeem_credit(&self, id: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let n = client
            .execute(
                &format!("DELETE FROM warden_quota_credit WHERE id = $1 AND until_ms >= {NOW_MS}"),
                &[&id],
            )
            .await
            .map_err(unavailable)?;
        Ok(n == 1)
    }

    /// The labels a session (`scope`) has touched, unless its trail expired.
    pub async fn flow_trail(&self, scope: &str) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!("SELECT labels FROM warden_flow_trail WHERE scope = $1 AND until_ms >= {NOW_MS}"),
                &[&scope],
            )
            .await
            .map_err(unavailable)?;
        Ok(row.map(|r| r.get(0)).unwrap_or_default())
    }

    /// Adds `labels` to a session's trail and keeps it for `keep` from now (an
    /// expired trail starts afresh); returns the whole trail, sorted.
    pub async fn touch_flow(
        &self,
        scope: &str,
        labels: &[String],
        keep: Duration,
    ) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                &format!(
                    "INSERT INTO warden_flow_trail AS t (scope, labels, until_ms)
                     VALUES ($1, ARRAY(SELECT DISTINCT l FROM unnest($2::TEXT[]) AS l ORDER BY l), {NOW_MS} + $3)
                     ON CONFLICT (scope) DO UPDATE SET
                       labels = CASE WHEN t.until_ms < {NOW_MS} THEN EXCLUDED.labels
                         ELSE ARRAY(SELECT DISTINCT l FROM unnest(t.labels || EXCLUDED.labels) AS l ORDER BY l) END,
                       until_ms = EXCLUDED.until_ms
                     RETURNING labels"
                ),
                &[&scope, &labels, &millis(keep)],
            )
            .await
            .map_err(unavailable)?;
        Ok(row.get(0))
    }
}

/// Every bucket's key, rate and concurrency alike, sorted and once each: the
/// order their rows are created and locked in.
fn bucket_keys<'a>(rates: &'a [(String, f64, f64)], slots: &'a [(String, u32)]) -> Vec<&'a str> {
    let mut keys: Vec<&str> = rates
        .iter()
        .map(|r| r.0.as_str())
        .chain(slots.iter().map(|s| s.0.as_str()))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// Creates the buckets' rows where missing and locks them, in key order, so two
/// replicas never wait on each other in a circle: each key's theoretical arrival
/// time and the server's now (ms).
async fn lock_buckets(
    tx: &tokio_postgres::Transaction<'_>,
    keys: &[&str],
) -> Result<Vec<tokio_postgres::Row>, StoreError> {
    tx.execute(
        "INSERT INTO warden_quota (key, tat_ms) SELECT k, 0 FROM unnest($1::TEXT[]) AS k ORDER BY k
         ON CONFLICT (key) DO NOTHING",
        &[&keys],
    )
    .await
    .map_err(unavailable)?;
    tx.query(
        "SELECT key, tat_ms, (extract(epoch FROM clock_timestamp()) * 1000)::DOUBLE PRECISION
         FROM warden_quota WHERE key = ANY($1) ORDER BY key FOR UPDATE",
        &[&keys],
    )
    .await
    .map_err(unavailable)
}

/// The first concurrency bucket with no free slot, once the slots whose lease
/// ran out are freed (none: every bucket has one).
async fn full_bucket(
    tx: &tokio_postgres::Transaction<'_>,
    slots: &[(String, u32)],
) -> Result<Option<usize>, StoreError> {
    if slots.is_empty() {
        return Ok(None);
    }
    let buckets: Vec<&str> = slots.iter().map(|s| s.0.as_str()).collect();
    tx.execute(
        &format!(
            "DELETE FROM warden_quota_slot WHERE bucket = ANY($1) AND lease_until_ms < {NOW_MS}"
        ),
        &[&buckets],
    )
    .await
    .map_err(unavailable)?;
    let held = tx
        .query(
            "SELECT bucket, COUNT(*) FROM warden_quota_slot WHERE bucket = ANY($1) GROUP BY bucket",
            &[&buckets],
        )
        .await
        .map_err(unavailable)?;
    for (i, (bucket, limit)) in slots.iter().enumerate() {
        let n = held
            .iter()
            .find(|r| r.get::<_, &str>(0) == bucket)
            .map_or(0, |r| r.get::<_, i64>(1));
        if n >= i64::from(*limit) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// The generic cell rate algorithm over the locked rows: each rate bucket's
/// next theoretical arrival time once it takes the call, or (`Err`) the bucket
/// that makes the caller wait longest and for how many ms.
fn next_arrivals(
    rates: &[(String, f64, f64)],
    rows: &[tokio_postgres::Row],
) -> Result<Vec<f64>, (usize, f64)> {
    let tat_of = |key: &str| -> (f64, f64) {
        rows.iter()
            .find(|r| r.get::<_, &str>(0) == key)
            .map(|r| (r.get(1), r.get(2)))
            .unwrap_or((0.0, 0.0))
    };
    let mut next = Vec::with_capacity(rates.len());
    let mut worst: Option<(usize, f64)> = None;
    for (i, (key, interval, tolerance)) in rates.iter().enumerate() {
        let (tat, now) = tat_of(key);
        let tat = tat.max(now);
        let wait = tat - now - tolerance;
        if wait > 0.0 && worst.is_none_or(|(_, w)| wait > w) {
            worst = Some((i, wait));
        }
        next.push(tat + interval);
    }
    match worst {
        Some(worst) => Err(worst),
        None => Ok(next),
    }
}

/// Stores the rate buckets' next theoretical arrival times: they took the call.
async fn advance_rates(
    tx: &tokio_postgres::Transaction<'_>,
    rates: &[(String, f64, f64)],
    next: &[f64],
) -> Result<(), StoreError> {
    if rates.is_empty() {
        return Ok(());
    }
    let keys: Vec<&str> = rates.iter().map(|r| r.0.as_str()).collect();
    tx.execute(
        "UPDATE warden_quota SET tat_ms = t.tat FROM unnest($1::TEXT[], $2::DOUBLE PRECISION[]) AS t(key, tat)
         WHERE warden_quota.key = t.key",
        &[&keys, &next],
    )
    .await
    .map_err(unavailable)?;
    Ok(())
}

/// Takes one slot (`ids`, one per bucket) in every concurrency bucket, leased
/// for `lease` on the server's clock.
async fn lease_slots(
    tx: &tokio_postgres::Transaction<'_>,
    slots: &[(String, u32)],
    ids: &[String],
    lease: Duration,
) -> Result<(), StoreError> {
    if slots.is_empty() {
        return Ok(());
    }
    let buckets: Vec<&str> = slots.iter().map(|s| s.0.as_str()).collect();
    tx.execute(
        &format!(
            "INSERT INTO warden_quota_slot (id, bucket, lease_until_ms)
             SELECT id, bucket, {NOW_MS} + $3 FROM unnest($1::TEXT[], $2::TEXT[]) AS t(id, bucket)"
        ),
        &[&ids, &buckets, &millis(lease)],
    )
    .await
    .map_err(unavailable)?;
    Ok(())
}
