//! The erasure jobs' journal and the session listings erasure jobs start from, with the
//! semantics of memlayer-store's `Eraser` (`record_job` … `receipt`, `user_session_ids`,
//! `sessions_inactive_before`); the table is in `migrations/0006_erasure_jobs.sql`.

use std::time::Duration;

use memlayer_store::{StoreError, StoredJob, Timestamp, validate_id};
use serde_json::Value;

use crate::memories::{corrupted, random_id};
use crate::sessions::{bigint, micros, unsigned};
use crate::{PgStore, Result};

/// Draws before giving up on a free id: with ids drawn from 2^53, even one taken draw in a
/// lifetime is unlikely.
const ID_ATTEMPTS: usize = 8;

impl PgStore {
    /// Records a job durably and returns its id, random and never issued before. Record it
    /// before the first step runs, so a crash in the middle leaves it pending.
    pub async fn record_job(&self, document: Value) -> Result<u64> {
        let document = json_text("job", &document)?;
        let client = self.connection().await?;
        for _ in 0..ID_ATTEMPTS {
            let id = random_id()?;
            let inserted = client
                .execute(
                    "INSERT INTO erasure_jobs (id, document) VALUES ($1, $2)
                     ON CONFLICT (id) DO NOTHING",
                    &[&id, &document],
                )
                .await?;
            if inserted == 1 {
                return unsigned(id);
            }
        }
        Err(StoreError::Conflict("no free erasure id was drawn; retry".into()).into())
    }

    /// How many jobs are recorded and not finished.
    pub async fn pending_job_count(&self) -> Result<u64> {
        let client = self.connection().await?;
        let row = client
            .query_one(
                "SELECT count(*) FROM erasure_jobs WHERE receipt IS NULL",
                &[],
            )
            .await?;
        unsigned(row.get(0))
    }

    /// Jobs recorded and not finished, oldest (first recorded) first.
    pub async fn pending_jobs(&self) -> Result<Vec<StoredJob>> {
        let client = self.connection().await?;
        let rows = client
            .query(
                "SELECT id, document FROM erasure_jobs WHERE receipt IS NULL ORDER BY seq",
                &[],
            )
            .await?;
        rows.iter()
            .map(|row| {
                Ok(StoredJob {
                    id: unsigned(row.get("id"))?,
                    document: parse_json("erasure job", row.get("document"))?,
                })
            })
            .collect()
    }

    /// Job `id` while it is pending: its document, whatever its tenant.
    pub async fn pending_job(&self, id: u64) -> Result<Option<Value>> {
        let client = self.connection().await?;
        let row = client
            .query_opt(
                "SELECT document FROM erasure_jobs WHERE id = $1 AND receipt IS NULL",
                &[&bigint(id)],
            )
            .await?;
        row.map(|row| parse_json("erasure job", row.get("document")))
            .transpose()
    }

    /// Ends job `id` and keeps its receipt under `tenant`, in one statement: a job is either
    /// pending or has a receipt, never both or neither. The job's document goes.
    pub async fn finish_job(&self, id: u64, tenant: &str, receipt: Value) -> Result<bool> {
        validate_id("tenant", tenant)?;
        let receipt = json_text("receipt", &receipt)?;
        let client = self.connection().await?;
        // One statement: of two holders finishing at once, the row lock orders them and the
        // second finds the receipt there (`updated` false) and leaves it.
        let row = client
            .query_opt(
                "WITH job AS (SELECT id FROM erasure_jobs WHERE id = $1),
                 finished AS (
                     UPDATE erasure_jobs
                     SET document = NULL, tenant = $2, receipt = $3,
                         holder = NULL, lease_until = NULL
                     WHERE id = $1 AND receipt IS NULL
                     RETURNING id
                 )
                 SELECT EXISTS (SELECT 1 FROM finished) AS updated FROM job",
                &[&bigint(id), &tenant, &receipt],
            )
            .await?;
        match row {
            Some(row) => Ok(row.get("updated")),
            None => Err(StoreError::InvalidInput {
                field: "job",
                reason: format!("erasure {id} was never recorded"),
            }
            .into()),
        }
    }

    /// Whether `holder` may run job `id` now: takes or renews its lease until `lease` from
    /// now, by the database's clock, unless the job finished or another holder's lease is
    /// still live (migrations/0007_job_leases.sql).
    pub async fn claim_job(&self, id: u64, holder: &str, lease: Duration) -> Result<bool> {
        let millis = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        let client = self.connection().await?;
        let claimed = client
            .execute(
                "UPDATE erasure_jobs
                 SET holder = $2, lease_until = clock_timestamp() + $3::bigint * interval '1 millisecond'
                 WHERE id = $1 AND receipt IS NULL
                   AND (holder IS NULL OR holder = $2 OR lease_until < clock_timestamp())",
                &[&bigint(id), &holder, &millis],
            )
            .await?;
        Ok(claimed == 1)
    }

    /// A tenant's erasure receipts, newest (last recorded) first, at most `limit`.
    pub async fn receipts(&self, tenant: &str, limit: usize) -> Result<Vec<Value>> {
        validate_id("tenant", tenant)?;
        let client = self.connection().await?;
        let rows = client
            .query(
                "SELECT receipt FROM erasure_jobs
                 WHERE tenant = $1 AND receipt IS NOT NULL
                 ORDER BY seq DESC LIMIT $2",
                &[&tenant, &bigint(limit as u64)],
            )
            .await?;
        rows.iter()
            .map(|row| parse_json("receipt", row.get("receipt")))
            .collect()
    }

    /// The receipt of job `id` of `tenant`, once it finished.
    pub async fn receipt(&self, tenant: &str, id: u64) -> Result<Option<Value>> {
        validate_id("tenant", tenant)?;
        let client = self.connection().await?;
        let row = client
            .query_opt(
                "SELECT receipt FROM erasure_jobs
                 WHERE id = $1 AND tenant = $2 AND receipt IS NOT NULL",
                &[&bigint(id), &tenant],
            )
            .await?;
        row.map(|row| parse_json("receipt", row.get("receipt")))
            .transpose()
    }

    /// Ids of every session of a user in a tenant, least recently active first.
    pub async fn user_session_ids(&self, tenant: &str, user_id: &str) -> Result<Vec<String>> {
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        let client = self.connection().await?;
        let rows = client
            .query(
                "SELECT session_id FROM sessions WHERE tenant = $1 AND user_id = $2
                 ORDER BY updated_at, session_id",
                &[&tenant, &user_id],
            )
            .await?;
        Ok(rows.iter().map(|row| row.get("session_id")).collect())
    }

    /// Ids of every session of a tenant whose last activity is before `cutoff`, oldest
    /// first.
    pub async fn sessions_inactive_before(
        &self,
        tenant: &str,
        cutoff: Timestamp,
    ) -> Result<Vec<String>> {
        validate_id("tenant", tenant)?;
        // A cutoff past what a bigint holds is after every activity.
        let cutoff = micros(cutoff).unwrap_or(i64::MAX);
        let client = self.connection().await?;
        let rows = client
            .query(
                "SELECT session_id FROM sessions WHERE tenant = $1 AND updated_at < $2
                 ORDER BY updated_at, session_id",
                &[&tenant, &cutoff],
            )
            .await?;
        Ok(rows.iter().map(|row| row.get("session_id")).collect())
    }
}

fn json_text(field: &'static str, value: &Value) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|err| StoreError::InvalidInput {
        field,
        reason: err.to_string(),
    })
}

fn parse_json(what: &'static str, text: Option<&str>) -> Result<Value> {
    let text = text.ok_or_else(|| corrupted(what, "missing"))?;
    serde_json::from_str(text).map_err(|err| corrupted(what, err))
}
