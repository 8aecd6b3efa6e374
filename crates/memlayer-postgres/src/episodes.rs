//! Episodes: what an agent did for a user on one kind of task and the lesson it drew,
//! sealed under a data key per episode (see migrations/0004_memories.sql).

use memlayer_store::{Episode, Outcome, StoreError, Timestamp, validate_id};
use serde::{Deserialize, Serialize};
use tokio_postgres::Row;

use crate::erasure::new_key;
use crate::memories::{BATCH, corrupted, random_id, signed};
use crate::seal::{DataKey, Field, Place};
use crate::sessions::{key_from_row, unsigned};
use crate::{PgStore, Result};

/// Deletes the episodes of tenant `$1` and user `$2` drawn from session `$3` (or, when
/// NULL, from any), returning their keys for `delete_sealed_rows`.
pub(crate) const DELETE_USER_EPISODES: &str = "DELETE FROM episodes
     WHERE tenant = $1 AND user_id = $2 AND ($3::text IS NULL OR source_session = $3)
     RETURNING key_id";

const EPISODE_COLUMNS: &str = "e.tenant, e.id, e.user_id, e.agent_id, e.task_type, \
     e.source_session, e.key_id, e.body, k.key, e.seq";

const EPISODE_FROM: &str =
    "episodes e JOIN data_keys k ON k.tenant = e.tenant AND k.key_id = e.key_id";

#[derive(Serialize, Deserialize)]
struct Body {
    description: String,
    outcome: Outcome,
    reflection: String,
    lesson: String,
    standing: bool,
    created_at: u64,
}

/// Where an episode's body is sealed: its tenant, its user (in the session's place) and id.
fn episode_place<'a>(tenant: &'a str, user_id: &'a str, id: u64) -> Place<'a> {
    Place {
        tenant,
        session_id: user_id,
        index: id,
        field: Field::Episode,
    }
}

fn episode_from_row(row: &Row) -> Result<Episode> {
    let key = key_from_row(row)?;
    let tenant: String = row.get("tenant");
    let id = unsigned(row.get("id"))?;
    let user_id: String = row.get("user_id");
    let json = key.open(episode_place(&tenant, &user_id, id), row.get("body"))?;
    let body: Body = serde_json::from_slice(&json).map_err(|err| corrupted("episode", err))?;
    Ok(Episode {
        id,
        tenant,
        user_id,
        agent_id: row.get("agent_id"),
        task_type: row.get("task_type"),
        description: body.description,
        outcome: body.outcome,
        reflection: body.reflection,
        lesson: body.lesson,
        standing: body.standing,
        source_session: row.get("source_session"),
        created_at: Timestamp::from_micros(body.created_at),
    })
}

fn seal_episode(key: &DataKey, episode: &Episode) -> Result<Vec<u8>> {
    let body = Body {
        description: episode.description.clone(),
        outcome: episode.outcome,
        reflection: episode.reflection.clone(),
        lesson: episode.lesson.clone(),
        standing: episode.standing,
        created_at: episode.created_at.as_micros(),
    };
    let json = serde_json::to_vec(&body).map_err(|err| corrupted("episode", err))?;
    key.seal(
        episode_place(&episode.tenant, &episode.user_id, episode.id),
        &json,
    )
}

impl PgStore {
    /// Records a new episode and returns its random id. A source session must be one of
    /// the same user's (checked and share-locked in the same transaction, so its deletion
    /// waits for this one and then finds the episode).
    pub async fn put_episode(&self, episode: Episode) -> Result<u64> {
        episode.validate()?;
        let tenant = episode.tenant.as_str();
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        if let Some(session_id) = &episode.source_session {
            let found = txn
                .query_opt(
                    "SELECT 1 FROM sessions
                     WHERE tenant = $1 AND session_id = $2 AND user_id = $3 FOR KEY SHARE",
                    &[&tenant, &session_id, &episode.user_id],
                )
                .await?;
            if found.is_none() {
                return Err(StoreError::session_not_found(session_id).into());
            }
        }
        let key = new_key(&txn, tenant).await?;
        let mut record = episode.clone();
        let id = loop {
            let id = random_id()?;
            record.id = id as u64;
            let body = seal_episode(&key, &record)?;
            let inserted = txn
                .execute(
                    "INSERT INTO episodes
                         (tenant, id, user_id, agent_id, task_type, source_session, key_id, body)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                     ON CONFLICT (id) DO NOTHING",
                    &[
                        &tenant,
                        &id,
                        &record.user_id,
                        &record.agent_id,
                        &record.task_type,
                        &record.source_session,
                        &key.id,
                        &body,
                    ],
                )
                .await?;
            if inserted == 1 {
                break id;
            }
        };
        txn.commit().await?;
        Ok(id as u64)
    }

    /// The episode with this id if it belongs to `tenant`.
    pub async fn episode(&self, tenant: &str, id: u64) -> Result<Option<Episode>> {
        validate_id("tenant", tenant)?;
        let Some(id) = signed(id) else {
            return Ok(None);
        };
        let client = self.connection().await?;
        client
            .query_opt(
                &format!(
                    "SELECT {EPISODE_COLUMNS} FROM {EPISODE_FROM}
                     WHERE e.tenant = $1 AND e.id = $2"
                ),
                &[&tenant, &id],
            )
            .await?
            .map(|row| episode_from_row(&row))
            .transpose()
    }

    /// Every episode of a user, oldest first (read in bounded batches of one snapshot).
    pub async fn user_episodes(&self, tenant: &str, user_id: &str) -> Result<Vec<Episode>> {
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        self.episodes_in_batches(tenant, user_id, None, usize::MAX, &|_| true)
            .await
    }

    /// A user's episodes of one task type that `keep` accepts, newest first, at most
    /// `limit`: batches of one snapshot until `limit` are kept or none are left.
    pub async fn recent_episodes(
        &self,
        tenant: &str,
        user_id: &str,
        task_type: &str,
        limit: usize,
        keep: &(dyn Fn(&Episode) -> bool + Sync),
    ) -> Result<Vec<Episode>> {
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        validate_id("task_type", task_type)?;
        self.episodes_in_batches(tenant, user_id, Some(task_type), limit, keep)
            .await
    }

    /// A user's episodes `keep` accepts, at most `limit`: all oldest first, or those of
    /// `task_type` newest first.
    async fn episodes_in_batches(
        &self,
        tenant: &str,
        user_id: &str,
        task_type: Option<&str>,
        limit: usize,
        keep: &(dyn Fn(&Episode) -> bool + Sync),
    ) -> Result<Vec<Episode>> {
        let mut found = Vec::new();
        if limit == 0 {
            return Ok(found);
        }
        let mut client = self.connection().await?;
        let txn = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let batch = limit.clamp(16, BATCH) as i64;
        let statement = match task_type {
            None => format!(
                "SELECT {EPISODE_COLUMNS} FROM {EPISODE_FROM}
                 WHERE e.tenant = $1 AND e.user_id = $2 AND e.seq > $3
                 ORDER BY e.seq LIMIT $4"
            ),
            Some(_) => format!(
                "SELECT {EPISODE_COLUMNS} FROM {EPISODE_FROM}
                 WHERE e.tenant = $1 AND e.user_id = $2 AND e.task_type = $5 AND e.seq < $3
                 ORDER BY e.seq DESC LIMIT $4"
            ),
        };
        let mut from: i64 = if task_type.is_some() { i64::MAX } else { 0 };
        while found.len() < limit {
            let rows = match task_type {
                None => {
                    txn.query(&statement, &[&tenant, &user_id, &from, &batch])
                        .await?
                }
                Some(task) => {
                    txn.query(&statement, &[&tenant, &user_id, &from, &batch, &task])
                        .await?
                }
            };
            for row in &rows {
                from = row.get("seq");
                let episode = episode_from_row(row)?;
                if keep(&episode) {
                    found.push(episode);
                    if found.len() >= limit {
                        break;
                    }
                }
            }
            if (rows.len() as i64) < batch {
                break;
            }
        }
        txn.commit().await?;
        Ok(found)
    }

    /// Deletes an episode of `tenant` and destroys its key in one transaction; returns
    /// whether it existed.
    pub async fn delete_episode(&self, tenant: &str, id: u64) -> Result<bool> {
        validate_id("tenant", tenant)?;
        let Some(id) = signed(id) else {
            return Ok(false);
        };
        let deleted = self
            .delete_sealed_rows(
                tenant,
                "DELETE FROM episodes WHERE tenant = $1 AND id = $2 RETURNING key_id",
                &[&tenant, &id],
            )
            .await?;
        Ok(deleted == 1)
    }

    /// Deletes a user's episodes, all or (with `session_id`) those drawn from that session,
    /// destroying their keys, in one transaction; returns how many.
    pub async fn delete_user_episodes(
        &self,
        tenant: &str,
        user_id: &str,
        session_id: Option<&str>,
    ) -> Result<u64> {
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        self.delete_sealed_rows(
            tenant,
            DELETE_USER_EPISODES,
            &[&tenant, &user_id, &session_id],
        )
        .await
    }
}
