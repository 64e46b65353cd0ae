//! Approvals shared by replicas (H6): a call waiting for an operator is listed
//! here by the replica that holds it, so every replica's console shows it, and
//! an answer given at any replica is written here, where the holder reads it.
//! The first answer wins: a verdict is only ever set where there is none.

use super::{unavailable, Postgres, NOW_MS};
use crate::StoreError;

/// One waiting call as the store lists it: its id, what the inbox shows of it
/// (JSON, as the gateway wrote it), and how long it has waited (ms, server clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedApproval {
    pub id: String,
    pub waiting: String,
    pub waited_ms: i64,
}

impl Postgres {
    /// Lists a waiting call until `ttl_ms` from now (its timeout and a margin);
    /// rows a replica left behind past theirs are cleared on the way.
    pub async fn approval_wait(
        &self,
        id: &str,
        waiting: &str,
        ttl_ms: i64,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                &format!("DELETE FROM warden_approval WHERE until_ms < {NOW_MS}"),
                &[],
            )
            .await
            .map_err(unavailable)?;
        client
            .execute(
                &format!(
                    "INSERT INTO warden_approval (id, waiting, created_ms, until_ms, verdict)
                     VALUES ($1, $2, {NOW_MS}, {NOW_MS} + $3, NULL)"
                ),
                &[&id, &waiting, &ttl_ms],
            )
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// The answer to call `id`, once there is one.
    pub async fn approval_verdict(&self, id: &str) -> Result<Option<String>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT verdict FROM warden_approval WHERE id = $1", &[&id])
            .await
            .map_err(unavailable)?;
        Ok(row.and_then(|r| r.get::<_, Option<String>>(0)))
    }

    /// Answers call `id`; false when it is not waiting (answered already, or
    /// gone): the first answer wins.
    pub async fn approval_decide(&self, id: &str, verdict: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let n = client
            .execute(
                &format!(
                    "UPDATE warden_approval SET verdict = $2
                     WHERE id = $1 AND verdict IS NULL AND until_ms >= {NOW_MS}"
                ),
                &[&id, &verdict],
            )
            .await
            .map_err(unavailable)?;
        Ok(n == 1)
    }

    /// Call `id` waits no more (answered, timed out or cancelled).
    pub async fn approval_end(&self, id: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute("DELETE FROM warden_approval WHERE id = $1", &[&id])
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// Every call waiting for an answer, at any replica, oldest first.
    pub async fn approvals_waiting(&self) -> Result<Vec<SharedApproval>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT id, waiting, {NOW_MS} - created_ms FROM warden_approval
                     WHERE verdict IS NULL AND until_ms >= {NOW_MS} ORDER BY created_ms, id"
                ),
                &[],
            )
            .await
            .map_err(unavailable)?;
        Ok(rows
            .iter()
            .map(|r| SharedApproval {
                id: r.get(0),
                waiting: r.get(1),
                waited_ms: r.get(2),
            })
            .collect())
    }
}
