//! Long-term memories: what an agent was asked to remember about a user across
//! conversations (facts, preferences, relationships, instructions), each with its embedding,
//! the message it came from, and the texts it superseded.
//!
//! The store keeps them and lists them by owner; deciding what is a duplicate, ranking and
//! pre-loading belong to the strategies crate.

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use crate::ids::{next_seq, random_id, unused_id};
use crate::model::{Access, Timestamp, validate_id, validate_text};
use crate::record::Record;
use crate::store::{not_found, read_session_record};
use crate::tables::{MEMORIES, MEMORY_OWNERS, MESSAGES, NEXT_MEMORY_SEQ_KEY, SESSIONS};
use crate::{Result, Store, StoreError};

/// What kind of thing a memory records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// Something true about the user ("works at Acme").
    Fact,
    /// How the user likes things ("answers in bullet points").
    Preference,
    /// A person or thing related to the user ("Sam is their manager").
    Relationship,
    /// Something the user told the agent to always (or never) do.
    Instruction,
}

/// A long-term memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    /// Its id: unique in the store, random (it says nothing about other memories), below
    /// 2^53; 0 before it is stored.
    pub id: u64,
    /// The tenant.
    pub tenant: String,
    /// The user it is about.
    pub user_id: String,
    /// The agent it belongs to; `None`: visible to every agent of the user.
    pub agent_id: Option<String>,
    /// What is remembered.
    pub text: String,
    /// Its kind.
    pub kind: MemoryKind,
    /// A few short lowercase tags.
    pub tags: Vec<String>,
    /// The message it came from, if any: `(session_id, index)`.
    pub source: Option<(String, u64)>,
    /// When it was first remembered.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// Texts it replaced (a correction or an update), oldest first, with when they were
    /// replaced. Kept until the memory is erased.
    pub history: Vec<(String, Timestamp)>,
    /// Its embedding, so indexes can be rebuilt without embedding again.
    pub vector: Vec<f32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MemoryRecord {
    tenant: String,
    user_id: String,
    agent_id: Option<String>,
    text: String,
    kind: MemoryKind,
    tags: Vec<String>,
    source: Option<(String, u64)>,
    created_at: u64,
    updated_at: u64,
    history: Vec<(String, u64)>,
    vector: Vec<f32>,
}

impl Record for MemoryRecord {
    const VERSION: u8 = 1;
    const NAME: &'static str = "memory record";
}

impl MemoryRecord {
    fn into_memory(self, id: u64) -> Memory {
        Memory {
            id,
            tenant: self.tenant,
            user_id: self.user_id,
            agent_id: self.agent_id,
            text: self.text,
            kind: self.kind,
            tags: self.tags,
            source: self.source,
            created_at: Timestamp::from_micros(self.created_at),
            updated_at: Timestamp::from_micros(self.updated_at),
            history: self
                .history
                .into_iter()
                .map(|(text, at)| (text, Timestamp::from_micros(at)))
                .collect(),
            vector: self.vector,
        }
    }

    fn from_memory(memory: &Memory) -> Self {
        Self {
            tenant: memory.tenant.clone(),
            user_id: memory.user_id.clone(),
            agent_id: memory.agent_id.clone(),
            text: memory.text.clone(),
            kind: memory.kind,
            tags: memory.tags.clone(),
            source: memory.source.clone(),
            created_at: memory.created_at.as_micros(),
            updated_at: memory.updated_at.as_micros(),
            history: memory
                .history
                .iter()
                .map(|(text, at)| (text.clone(), at.as_micros()))
                .collect(),
            vector: memory.vector.clone(),
        }
    }
}

/// Checks that message `index` of session `session_id` is stored and within `sources`.
fn check_source(
    txn: &redb::WriteTransaction,
    sources: &Access,
    session_id: &str,
    index: u64,
) -> Result<()> {
    let record = read_session_record(&txn.open_table(SESSIONS)?, sources, session_id)?
        .ok_or_else(|| not_found(session_id))?;
    if txn
        .open_table(MESSAGES)?
        .get((record.sid, index))?
        .is_none()
    {
        return Err(StoreError::InvalidInput {
            field: "source",
            reason: format!("the session has no message {index} (never stored, or erased)"),
        });
    }
    Ok(())
}

impl Store {
    /// Saves a memory: a new one (id 0) gets a fresh random id; a stored one (its id) is
    /// replaced and keeps its place in its user's list. Returns the id.
    ///
    /// Fails with [`StoreError::Conflict`] when the id names no memory of the same tenant
    /// and user: one forgotten since it was read must not come back by being updated.
    ///
    /// A source must be a stored message, and a source the memory did not cite before must be
    /// in a session `sources` reaches (for a user-scoped caller, one of its own): checked in
    /// the saving transaction, so a memory cannot cite a message erased before it was saved
    /// (its erasure would have missed it) or a session another user created meanwhile.
    /// [`StoreError::SessionNotFound`] for an unknown session, [`StoreError::InvalidInput`]
    /// for an unknown message.
    pub async fn put_memory(&self, memory: Memory, sources: &Access) -> Result<u64> {
        self.put_memory_drawing(memory, sources, random_id).await
    }

    /// [`Store::put_memory`] with ids from `draw` (tests force collisions with it).
    pub(crate) async fn put_memory_drawing(
        &self,
        memory: Memory,
        sources: &Access,
        draw: impl FnMut() -> Result<u64> + Send + 'static,
    ) -> Result<u64> {
        validate_id("tenant", &memory.tenant)?;
        if sources.tenant() != memory.tenant {
            return Err(StoreError::InvalidInput {
                field: "tenant",
                reason: "a memory cites sessions of its own tenant only".into(),
            });
        }
        let sources = sources.clone();
        validate_id("user_id", &memory.user_id)?;
        if let Some(agent) = &memory.agent_id {
            validate_id("agent_id", agent)?;
        }
        validate_text("memory", &memory.text)?;
        self.write(move |txn| {
            if let Some((session_id, index)) = &memory.source {
                let cited_before = txn
                    .open_table(MEMORIES)?
                    .get(memory.id)?
                    .map(|value| MemoryRecord::decode(value.value()))
                    .transpose()?
                    .is_some_and(|stored| stored.source == memory.source);
                let reach = if cited_before {
                    Access::tenant_wide(&*memory.tenant)
                } else {
                    sources.clone()
                };
                check_source(txn, &reach, session_id, *index)?;
            }
            let mut memories = txn.open_table(MEMORIES)?;
            let mut owners = txn.open_table(MEMORY_OWNERS)?;
            let owner = (memory.tenant.as_str(), memory.user_id.as_str());
            let (id, seq) = if memory.id == 0 {
                let id = unused_id(draw, |id| Ok(memories.get(id)?.is_some()))?;
                (id, next_seq(txn, NEXT_MEMORY_SEQ_KEY)?)
            } else {
                let seq = owners
                    .get((owner.0, owner.1, memory.id))?
                    .map(|v| v.value());
                let Some(seq) = seq else {
                    return Err(StoreError::Conflict(format!(
                        "memory {} is not one of this user's memories (any more)",
                        memory.id
                    )));
                };
                (memory.id, seq)
            };
            let record = MemoryRecord::from_memory(&memory);
            memories.insert(id, record.encode().as_slice())?;
            owners.insert((owner.0, owner.1, id), seq)?;
            Ok(id)
        })
        .await
    }

    /// The memory with this id if it belongs to `tenant`.
    pub fn memory(&self, tenant: &str, id: u64) -> Result<Option<Memory>> {
        validate_id("tenant", tenant)?;
        let txn = self.begin_read()?;
        let table = txn.open_table(MEMORIES)?;
        let Some(value) = table.get(id)? else {
            return Ok(None);
        };
        let memory = MemoryRecord::decode(value.value())?.into_memory(id);
        Ok((memory.tenant == tenant).then_some(memory))
    }

    /// Every memory of a user, oldest (first remembered) first.
    pub fn user_memories(&self, tenant: &str, user_id: &str) -> Result<Vec<Memory>> {
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        let txn = self.begin_read()?;
        let owners = txn.open_table(MEMORY_OWNERS)?;
        let table = txn.open_table(MEMORIES)?;
        let mut listed = owners
            .range((tenant, user_id, 0)..=(tenant, user_id, u64::MAX))?
            .map(|entry| {
                let (key, seq) = entry?;
                Ok((seq.value(), key.value().2))
            })
            .collect::<Result<Vec<_>>>()?;
        listed.sort_unstable();
        listed
            .into_iter()
            .map(|(_, id)| {
                let value = table.get(id)?.ok_or_else(|| StoreError::Corrupted {
                    what: "memory owners",
                    detail: format!("memory {id} is listed but not stored"),
                })?;
                Ok(MemoryRecord::decode(value.value())?.into_memory(id))
            })
            .collect()
    }

    /// Up to `limit` memories of every tenant in id order after `after`: the pages an index
    /// rebuild reads. Ids are random, so id order is not creation order; the pages cover
    /// every memory stored before the first page was read and not deleted since.
    pub fn memories_after(&self, after: u64, limit: usize) -> Result<Vec<Memory>> {
        let txn = self.begin_read()?;
        let table = txn.open_table(MEMORIES)?;
        table
            .range(after.saturating_add(1)..)?
            .take(limit)
            .map(|entry| {
                let (id, value) = entry?;
                Ok(MemoryRecord::decode(value.value())?.into_memory(id.value()))
            })
            .collect()
    }

    /// Deletes a memory of `tenant`; returns whether it existed.
    pub async fn delete_memory(&self, tenant: &str, id: u64) -> Result<bool> {
        validate_id("tenant", tenant)?;
        let tenant = tenant.to_owned();
        self.write_alone(move |txn| {
            let mut table = txn.open_table(MEMORIES)?;
            let Some(record) = table
                .get(id)?
                .map(|value| MemoryRecord::decode(value.value()))
                .transpose()?
            else {
                return Ok(false);
            };
            if record.tenant != tenant {
                return Ok(false);
            }
            table.remove(id)?;
            txn.open_table(MEMORY_OWNERS)?.remove((
                record.tenant.as_str(),
                record.user_id.as_str(),
                id,
            ))?;
            Ok(true)
        })
        .await
    }
}
