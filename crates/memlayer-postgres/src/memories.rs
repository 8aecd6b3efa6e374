//! Long-term memories: the `Memories` handle's memory methods and the eraser's, with the redb
//! store's semantics and errors.
//!
//! A memory's text, kind, tags, source, times, replaced texts and vector are one sealed body
//! under a data key of the memory's own (see migrations/0004_memories.sql for why, and when
//! it changes). Its owner, agent, key, revision and the messages it cites stay plain, for the
//! statements that check and list. Every check of a write (revision, owner, key, the cited
//! message) happens in the writing transaction, under row locks that make a concurrent
//! writer wait for its commit and then see it.

use std::collections::BTreeSet;

use memlayer_store::{
    Access, Citation, MAX_MEMORY_HISTORY, Memory, MemoryKind, OrphanedCitation, ReplacedText,
    StoreError, Timestamp, validate_id, validate_optional_id,
};
use serde::{Deserialize, Serialize};
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;

use crate::erasure::{destroy_keys, new_key};
use crate::seal::{DataKey, Field, Place};
use crate::sessions::{key_from_row, unsigned};
use crate::{PgStore, PostgresError, Result};

/// Most rows a listing reads per statement.
pub(crate) const BATCH: usize = 256;

/// How many times a write that lost a race it can retry (a new key taken first) retries.
const RETRIES: usize = 3;

/// The columns [`memory_from_row`] reads, of [`MEMORY_FROM`].
const MEMORY_COLUMNS: &str = "m.tenant, m.id, m.user_id, m.agent_id, m.key AS name, \
     m.revision, m.key_id, m.body, k.key";

/// Memories with their data keys.
const MEMORY_FROM: &str =
    "memories m JOIN data_keys k ON k.tenant = m.tenant AND k.key_id = m.key_id";

/// What a memory's sealed body holds.
#[derive(Serialize, Deserialize)]
struct Body {
    text: String,
    kind: MemoryKind,
    tags: Vec<String>,
    source: Option<(String, u64)>,
    created_at: u64,
    updated_at: u64,
    history: Vec<Replaced>,
    /// The embedding's bits, so every float comes back exactly.
    vector: Vec<u32>,
}

#[derive(Serialize, Deserialize)]
struct Replaced {
    text: String,
    replaced_at: u64,
    source: Option<(String, u64)>,
}

/// Where a memory's body is sealed: its tenant, its user (in the session's place: a
/// memory never changes user) and its id.
fn memory_place<'a>(tenant: &'a str, user_id: &'a str, id: u64) -> Place<'a> {
    Place {
        tenant,
        session_id: user_id,
        index: id,
        field: Field::Memory,
    }
}

fn seal_memory(key: &DataKey, memory: &Memory) -> Result<Vec<u8>> {
    let body = Body {
        text: memory.text.clone(),
        kind: memory.kind,
        tags: memory.tags.clone(),
        source: memory.source.clone(),
        created_at: memory.created_at.as_micros(),
        updated_at: memory.updated_at.as_micros(),
        history: memory
            .history
            .iter()
            .map(|entry| Replaced {
                text: entry.text.clone(),
                replaced_at: entry.replaced_at.as_micros(),
                source: entry.source.clone(),
            })
            .collect(),
        vector: memory.vector.iter().map(|f| f.to_bits()).collect(),
    };
    let json = serde_json::to_vec(&body).map_err(|err| corrupted("memory", err))?;
    key.seal(
        memory_place(&memory.tenant, &memory.user_id, memory.id),
        &json,
    )
}

pub(crate) fn corrupted(what: &'static str, err: impl std::fmt::Display) -> PostgresError {
    PostgresError::Corrupted {
        what,
        detail: err.to_string(),
    }
}

/// The memory in `row` ([`MEMORY_COLUMNS`]) and its data key.
fn memory_from_row(row: &Row) -> Result<(Memory, DataKey)> {
    let key = key_from_row(row)?;
    let tenant: String = row.get("tenant");
    let id = unsigned(row.get("id"))?;
    let user_id: String = row.get("user_id");
    let json = key.open(memory_place(&tenant, &user_id, id), row.get("body"))?;
    let body: Body = serde_json::from_slice(&json).map_err(|err| corrupted("memory", err))?;
    let memory = Memory {
        id,
        revision: unsigned(row.get("revision"))?,
        tenant,
        user_id,
        agent_id: row.get("agent_id"),
        text: body.text,
        kind: body.kind,
        tags: body.tags,
        source: body.source,
        created_at: Timestamp::from_micros(body.created_at),
        updated_at: Timestamp::from_micros(body.updated_at),
        history: body
            .history
            .into_iter()
            .map(|entry| ReplacedText {
                text: entry.text,
                replaced_at: Timestamp::from_micros(entry.replaced_at),
                source: entry.source,
            })
            .collect(),
        vector: body.vector.into_iter().map(f32::from_bits).collect(),
        key: row.get("name"),
    };
    Ok((memory, key))
}

/// Every message `memory` cites: its source and its replaced texts' sources.
fn cited(memory: &Memory) -> BTreeSet<(String, u64)> {
    memory
        .history
        .iter()
        .filter_map(|entry| entry.source.clone())
        .chain(memory.source.clone())
        .collect()
}

/// A stored id or index as PostgreSQL's bigint holds it, `None` past its range (no such row).
pub(crate) fn signed(value: u64) -> Option<i64> {
    i64::try_from(value).ok()
}

/// A random id below 2^53 and above 0, as the redb store draws them.
pub(crate) fn random_id() -> Result<i64> {
    loop {
        let mut bytes = [0; 8];
        getrandom::fill(&mut bytes).map_err(|source| PostgresError::Random { source })?;
        let id = u64::from_le_bytes(bytes) >> 11;
        if id != 0 {
            return Ok(id as i64);
        }
    }
}

/// Whether `err` is a unique violation of index `constraint`.
pub(crate) fn violates(err: &PostgresError, constraint: &str) -> bool {
    let PostgresError::Database { source } = err else {
        return false;
    };
    source.as_db_error().is_some_and(|db| {
        *db.code() == SqlState::UNIQUE_VIOLATION && db.constraint() == Some(constraint)
    })
}

/// Checks, in `txn`, that message `index` of session `session_id` is stored and reached by
/// `user` (`None`: tenant-wide), and locks both rows against deletion until the commit.
async fn check_source(
    txn: &tokio_postgres::Transaction<'_>,
    tenant: &str,
    user: Option<&str>,
    session_id: &str,
    index: u64,
) -> Result<()> {
    let session = txn
        .query_opt(
            "SELECT 1 FROM sessions
             WHERE tenant = $1 AND session_id = $2 AND ($3::text IS NULL OR user_id = $3)
             FOR KEY SHARE",
            &[&tenant, &session_id, &user],
        )
        .await?;
    if session.is_none() {
        return Err(StoreError::session_not_found(session_id).into());
    }
    let message = match signed(index) {
        None => None,
        Some(idx) => {
            txn.query_opt(
                "SELECT 1 FROM messages WHERE tenant = $1 AND session_id = $2 AND idx = $3
                 FOR KEY SHARE",
                &[&tenant, &session_id, &idx],
            )
            .await?
        }
    };
    if message.is_none() {
        return Err(StoreError::MessageNotFound { index }.into());
    }
    Ok(())
}

/// Replaces the citations of memory `id` with `cited`.
async fn index_citations(
    txn: &tokio_postgres::Transaction<'_>,
    tenant: &str,
    id: i64,
    cited: &BTreeSet<(String, u64)>,
    replace: bool,
) -> Result<()> {
    if replace {
        txn.execute(
            "DELETE FROM memory_citations WHERE tenant = $1 AND id = $2",
            &[&tenant, &id],
        )
        .await?;
    }
    let (sessions, indices): (Vec<&str>, Vec<i64>) = cited
        .iter()
        .filter_map(|(session, index)| Some((session.as_str(), signed(*index)?)))
        .unzip();
    if !sessions.is_empty() {
        txn.execute(
            "INSERT INTO memory_citations (tenant, session_id, id, idx)
             SELECT $1, c.session_id, $2, c.idx FROM unnest($3::text[], $4::bigint[])
                 AS c(session_id, idx)
             ON CONFLICT DO NOTHING",
            &[&tenant, &id, &sessions, &indices],
        )
        .await?;
    }
    Ok(())
}

/// What one attempt of a put ended with.
enum Put {
    Saved(u64),
    /// A concurrent put took the key first: its memory is to be named.
    KeyTaken,
}

impl PgStore {
    /// Saves a memory as the redb store's `Memories::put_memory` does: a new one (id 0) gets a
    /// fresh random id and revision 1; a stored one is replaced at the revision it carries and
    /// keeps its place. Refusals as there ([`StoreError::MemoryChanged`] for a stale or
    /// foreign memory or a taken key, [`StoreError::SessionNotFound`] and
    /// [`StoreError::MessageNotFound`] for a source out of reach). One transaction.
    pub async fn put_memory(&self, memory: Memory, sources: &Access) -> Result<u64> {
        memory.check(sources)?;
        for _ in 0..RETRIES {
            match self.try_put_memory(&memory, sources).await {
                Ok(Put::Saved(id)) => return Ok(id),
                Ok(Put::KeyTaken) => {
                    if let Some(taken) = self.keyed_id(&memory).await? {
                        return Err(StoreError::MemoryChanged { memory_id: taken }.into());
                    }
                    // Taken, then deleted again before we looked: try once more.
                }
                Err(err) => return Err(err),
            }
        }
        // Every attempt found the key taken by a memory deleted again before it looked.
        Err(StoreError::MemoryChanged {
            memory_id: memory.id,
        }
        .into())
    }

    /// The id of the memory holding `memory`'s key in its scope.
    async fn keyed_id(&self, memory: &Memory) -> Result<Option<u64>> {
        let client = self.connection().await?;
        let row = client
            .query_opt(
                "SELECT id FROM memories
                 WHERE tenant = $1 AND user_id = $2 AND coalesce(agent_id, '') = coalesce($3, '')
                   AND key = $4",
                &[
                    &memory.tenant,
                    &memory.user_id,
                    &memory.agent_id,
                    &memory.key,
                ],
            )
            .await?;
        row.map(|row| unsigned(row.get(0))).transpose()
    }

    async fn try_put_memory(&self, memory: &Memory, sources: &Access) -> Result<Put> {
        let tenant = memory.tenant.as_str();
        let changed = || -> PostgresError {
            StoreError::MemoryChanged {
                memory_id: memory.id,
            }
            .into()
        };
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        let stored = if memory.id == 0 {
            None
        } else {
            let id = signed(memory.id).ok_or_else(changed)?;
            let row = txn
                .query_opt(
                    &format!(
                        "SELECT {MEMORY_COLUMNS} FROM {MEMORY_FROM}
                         WHERE m.tenant = $1 AND m.id = $2 FOR UPDATE OF m"
                    ),
                    &[&tenant, &id],
                )
                .await?
                .ok_or_else(changed)?;
            let (stored, key) = memory_from_row(&row)?;
            if stored.user_id != memory.user_id || stored.revision != memory.revision {
                return Err(changed());
            }
            if (stored.key.is_some() || memory.key.is_some())
                && (stored.key != memory.key || stored.agent_id != memory.agent_id)
            {
                return Err(StoreError::InvalidInput {
                    field: "key",
                    reason: "a keyed memory keeps its key and agent".into(),
                }
                .into());
            }
            Some((stored, key))
        };
        if let Some((session_id, index)) = &memory.source {
            let cited_before = stored
                .as_ref()
                .is_some_and(|(stored, _)| stored.source == memory.source);
            let user = if cited_before { None } else { sources.user() };
            check_source(&txn, tenant, user, session_id, *index).await?;
        }
        // History is append-only: the texts stored keep their place and their sources.
        let kept = stored
            .as_ref()
            .map_or(&[][..], |(stored, _)| &stored.history[..]);
        let prefix = kept.len() <= memory.history.len()
            && kept
                .iter()
                .zip(&memory.history)
                .all(|(kept, new)| kept.text == new.text);
        if !prefix {
            return Err(changed());
        }
        let mut history: Vec<ReplacedText> = memory
            .history
            .iter()
            .enumerate()
            .map(|(position, entry)| ReplacedText {
                source: kept
                    .get(position)
                    .map_or_else(|| entry.source.clone(), |kept| kept.source.clone()),
                ..entry.clone()
            })
            .collect();
        history.drain(..history.len().saturating_sub(MAX_MEMORY_HISTORY));
        let mut record = Memory {
            history,
            revision: stored.as_ref().map_or(1, |(stored, _)| stored.revision + 1),
            ..memory.clone()
        };
        let now_cited = cited(&record);
        let revision = i64::try_from(record.revision).map_err(|_| changed())?;

        let Some((stored, old_key)) = stored else {
            // One new memory of a user at a time, until the commit: a user's memories then
            // commit in `seq` order, so a page read after memory X never misses one saved
            // later with a lower `seq` (redb serializes every write; this, the user's).
            txn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 0))",
                &[&tenant, &memory.user_id],
            )
            .await?;
            if memory.key.is_some()
                && let Some(row) = txn
                    .query_opt(
                        "SELECT id FROM memories
                         WHERE tenant = $1 AND user_id = $2
                           AND coalesce(agent_id, '') = coalesce($3, '') AND key = $4",
                        &[&tenant, &memory.user_id, &memory.agent_id, &memory.key],
                    )
                    .await?
            {
                // Another memory took the key since the caller looked it up: it must read that
                // one and update it instead.
                return Err(StoreError::MemoryChanged {
                    memory_id: unsigned(row.get(0))?,
                }
                .into());
            }
            let key = new_key(&txn, tenant).await?;
            let id = loop {
                let id = random_id()?;
                record.id = id as u64;
                let body = seal_memory(&key, &record)?;
                let inserted = txn
                    .execute(
                        "INSERT INTO memories
                             (tenant, id, user_id, agent_id, key, revision, key_id, body)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                         ON CONFLICT (id) DO NOTHING",
                        &[
                            &tenant,
                            &id,
                            &record.user_id,
                            &record.agent_id,
                            &record.key,
                            &revision,
                            &key.id,
                            &body,
                        ],
                    )
                    .await;
                match inserted {
                    Ok(1) => break id,
                    Ok(_) => continue,
                    Err(err) => {
                        let err = PostgresError::from(err);
                        if violates(&err, "memory_keys") {
                            return Ok(Put::KeyTaken);
                        }
                        return Err(err);
                    }
                }
            };
            index_citations(&txn, tenant, id, &now_cited, false).await?;
            txn.commit().await?;
            return Ok(Put::Saved(id as u64));
        };

        // A message the memory stops citing must not stay readable under a key its erasure
        // would no longer destroy: the memory moves to a new key then.
        let key = if cited(&stored).is_subset(&now_cited) {
            old_key
        } else {
            let key = new_key(&txn, tenant).await?;
            destroy_keys(&txn, tenant, &[old_key.id]).await?;
            key
        };
        let id = stored.id as i64;
        let body = seal_memory(&key, &record)?;
        txn.execute(
            "UPDATE memories SET agent_id = $3, revision = $4, key_id = $5, body = $6
             WHERE tenant = $1 AND id = $2",
            &[&tenant, &id, &record.agent_id, &revision, &key.id, &body],
        )
        .await?;
        index_citations(&txn, tenant, id, &now_cited, true).await?;
        txn.commit().await?;
        Ok(Put::Saved(stored.id))
    }

    /// The memories of `tenant` citing session `session_id` (as their source or a replaced
    /// text's), whoever they are about, in id order.
    pub async fn memories_citing(&self, tenant: &str, session_id: &str) -> Result<Vec<u64>> {
        let client = self.connection().await?;
        client
            .query(
                "SELECT DISTINCT id FROM memory_citations
                 WHERE tenant = $1 AND session_id = $2 ORDER BY id",
                &[&tenant, &session_id],
            )
            .await?
            .iter()
            .map(|row| unsigned(row.get(0)))
            .collect()
    }

    /// Citations of every tenant of sessions or messages no longer stored: what an erasure
    /// interrupted between deleting text and forgetting its citations left behind.
    pub async fn orphaned_citations(&self) -> Result<Vec<OrphanedCitation>> {
        let client = self.connection().await?;
        client
            .query(
                "SELECT DISTINCT c.tenant, c.session_id, c.id,
                        CASE WHEN s.session_id IS NULL THEN NULL ELSE c.idx END AS idx
                 FROM memory_citations c
                 LEFT JOIN sessions s ON s.tenant = c.tenant AND s.session_id = c.session_id
                 LEFT JOIN messages m ON m.tenant = c.tenant AND m.session_id = c.session_id
                     AND m.idx = c.idx
                 WHERE s.session_id IS NULL OR m.idx IS NULL
                 ORDER BY c.tenant, c.session_id, c.id, idx",
                &[],
            )
            .await?
            .iter()
            .map(|row| {
                Ok(OrphanedCitation {
                    tenant: row.get("tenant"),
                    memory_id: unsigned(row.get("id"))?,
                    session_id: row.get("session_id"),
                    index: row.get::<_, Option<i64>>("idx").map(unsigned).transpose()?,
                })
            })
            .collect()
    }

    /// The memory with this id if it belongs to `tenant`.
    pub async fn memory(&self, tenant: &str, id: u64) -> Result<Option<Memory>> {
        validate_id("tenant", tenant)?;
        let Some(id) = signed(id) else {
            return Ok(None);
        };
        let client = self.connection().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {MEMORY_COLUMNS} FROM {MEMORY_FROM} WHERE m.tenant = $1 AND m.id = $2"
                ),
                &[&tenant, &id],
            )
            .await?;
        row.map(|row| Ok(memory_from_row(&row)?.0)).transpose()
    }

    /// The memory of a user and agent scope (`None`: every agent's) that a keyed put named
    /// `key`.
    pub async fn memory_by_key(
        &self,
        tenant: &str,
        user_id: &str,
        agent_id: Option<&str>,
        key: &str,
    ) -> Result<Option<Memory>> {
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        validate_optional_id("agent_id", agent_id)?;
        validate_id("key", key)?;
        let client = self.connection().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {MEMORY_COLUMNS} FROM {MEMORY_FROM}
                     WHERE m.tenant = $1 AND m.user_id = $2
                       AND coalesce(m.agent_id, '') = coalesce($3, '') AND m.key = $4"
                ),
                &[&tenant, &user_id, &agent_id, &key],
            )
            .await?;
        row.map(|row| Ok(memory_from_row(&row)?.0)).transpose()
    }

    /// Every memory of a user, oldest first (read in bounded batches of one snapshot).
    pub async fn user_memories(&self, tenant: &str, user_id: &str) -> Result<Vec<Memory>> {
        self.user_memories_page(tenant, user_id, None, usize::MAX, &|_| true)
            .await
    }

    /// Up to `limit` memories of a user that `keep` accepts, oldest (first saved) first,
    /// from the one after memory `after`; [`StoreError::MemoryNotFound`] when `after` is not
    /// one of the user's memories. Reads batches of one snapshot until `limit` are kept or
    /// none are left, opening only the memories it offers to `keep`.
    pub async fn user_memories_page(
        &self,
        tenant: &str,
        user_id: &str,
        after: Option<u64>,
        limit: usize,
        keep: &(dyn Fn(&Memory) -> bool + Sync),
    ) -> Result<Vec<Memory>> {
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        let mut client = self.connection().await?;
        let txn = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await?;
        let mut from: i64 = match after {
            None => 0,
            Some(id) => {
                let not_found = || StoreError::MemoryNotFound { id };
                let row = txn
                    .query_opt(
                        "SELECT seq FROM memories WHERE tenant = $1 AND user_id = $2 AND id = $3",
                        &[&tenant, &user_id, &signed(id).ok_or_else(not_found)?],
                    )
                    .await?
                    .ok_or_else(not_found)?;
                row.get(0)
            }
        };
        let batch = limit.clamp(16, BATCH) as i64;
        let mut page = Vec::new();
        while page.len() < limit {
            let rows = txn
                .query(
                    &format!(
                        "SELECT {MEMORY_COLUMNS}, m.seq FROM {MEMORY_FROM}
                         WHERE m.tenant = $1 AND m.user_id = $2 AND m.seq > $3
                         ORDER BY m.seq LIMIT $4"
                    ),
                    &[&tenant, &user_id, &from, &batch],
                )
                .await?;
            for row in &rows {
                from = row.get("seq");
                let memory = memory_from_row(row)?.0;
                if keep(&memory) {
                    page.push(memory);
                    if page.len() >= limit {
                        break;
                    }
                }
            }
            if (rows.len() as i64) < batch {
                break;
            }
        }
        txn.commit().await?;
        Ok(page)
    }

    /// Up to `limit` memories of every tenant in id order after `after`: the pages an index
    /// rebuild reads.
    pub async fn memories_after(&self, after: u64, limit: usize) -> Result<Vec<Memory>> {
        let Some(after) = signed(after) else {
            return Ok(Vec::new());
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.connection().await?;
        client
            .query(
                &format!(
                    "SELECT {MEMORY_COLUMNS} FROM {MEMORY_FROM} WHERE m.id > $1
                     ORDER BY m.id LIMIT $2"
                ),
                &[&after, &limit],
            )
            .await?
            .iter()
            .map(|row| Ok(memory_from_row(row)?.0))
            .collect()
    }

    /// Takes what memory `id` holds of session `session_id` (of its message `index` with
    /// `Some`) out of it, as the redb eraser's `forget_citation`: the whole memory when it
    /// came from there (its key destroyed), else the replaced texts that did (the kept ones
    /// sealed under a new key, the old key destroyed, the revision counted). One transaction;
    /// the destroyed keys await [`PgStore::reclaim_destroyed_keys`].
    pub async fn forget_citation(
        &self,
        tenant: &str,
        id: u64,
        session_id: &str,
        index: Option<u64>,
    ) -> Result<Citation> {
        let Some(row_id) = signed(id) else {
            return Ok(Citation::Untouched);
        };
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        let Some(row) = txn
            .query_opt(
                &format!(
                    "SELECT {MEMORY_COLUMNS} FROM {MEMORY_FROM}
                     WHERE m.tenant = $1 AND m.id = $2 FOR UPDATE OF m"
                ),
                &[&tenant, &row_id],
            )
            .await?
        else {
            return Ok(Citation::Untouched);
        };
        let (mut memory, old_key) = memory_from_row(&row)?;
        let erased = |source: &Option<(String, u64)>| {
            source.as_ref().is_some_and(|(session, at)| {
                session == session_id && index.is_none_or(|index| index == *at)
            })
        };
        if erased(&memory.source) {
            txn.execute(
                "DELETE FROM memories WHERE tenant = $1 AND id = $2",
                &[&tenant, &row_id],
            )
            .await?;
            destroy_keys(&txn, tenant, &[old_key.id]).await?;
            txn.commit().await?;
            return Ok(Citation::Deleted {
                user_id: memory.user_id,
            });
        }
        let before = memory.history.len();
        memory.history.retain(|entry| !erased(&entry.source));
        if memory.history.len() == before {
            return Ok(Citation::Untouched);
        }
        memory.revision += 1;
        let revision = i64::try_from(memory.revision).map_err(|err| corrupted("memory", err))?;
        let key = new_key(&txn, tenant).await?;
        let body = seal_memory(&key, &memory)?;
        txn.execute(
            "UPDATE memories SET revision = $3, key_id = $4, body = $5
             WHERE tenant = $1 AND id = $2",
            &[&tenant, &row_id, &revision, &key.id, &body],
        )
        .await?;
        destroy_keys(&txn, tenant, &[old_key.id]).await?;
        index_citations(&txn, tenant, row_id, &cited(&memory), true).await?;
        txn.commit().await?;
        Ok(Citation::Rewritten)
    }

    /// Deletes a memory of `tenant` and destroys its key in one transaction; returns whether
    /// it existed.
    pub async fn delete_memory(&self, tenant: &str, id: u64) -> Result<bool> {
        validate_id("tenant", tenant)?;
        let Some(id) = signed(id) else {
            return Ok(false);
        };
        let deleted = self
            .delete_sealed_rows(
                tenant,
                "DELETE FROM memories WHERE tenant = $1 AND id = $2 RETURNING key_id",
                &[&tenant, &id],
            )
            .await?;
        Ok(deleted == 1)
    }
}
