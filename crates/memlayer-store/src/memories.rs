//! Long-term memories: what an agent was asked to remember about a user across
//! conversations (facts, preferences, relationships, instructions), each with its embedding,
//! the message it came from, and the texts it superseded.
//!
//! The store keeps them and lists them by owner; deciding what is a duplicate, ranking and
//! pre-loading belong to the strategies crate.

use redb::{ReadTransaction, ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::ids::{next_seq, random_id, unused_id};
use crate::integrity::TablesCheck;
use crate::model::{Access, Timestamp, validate_id, validate_optional_id, validate_text};
use crate::record::Record;
use crate::sessions::read_session_record;
use crate::store::{Eraser, Memories, wait};
use crate::tables::{
    EVERY_AGENT, MEMORIES, MEMORY_KEYS, MEMORY_OWNERS, MEMORY_SOURCES, MESSAGES,
    NEXT_MEMORY_SEQ_KEY, SESSIONS, UNKNOWN_SOURCE,
};
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
    /// Counts the writes of the stored memory: an update must carry the revision it read
    /// ([`StoreError::MemoryChanged`] otherwise), so a memory an erasure rewrote meanwhile
    /// cannot get the erased text back from a stale copy. 0 before it is stored.
    pub revision: u64,
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
    /// Texts it replaced (a correction or an update), oldest first: the newest
    /// [`MAX_MEMORY_HISTORY`], each kept until the memory is erased, or until the message it
    /// came from is.
    pub history: Vec<ReplacedText>,
    /// Its embedding, so indexes can be rebuilt without embedding again.
    pub vector: Vec<f32>,
    /// The name its caller gave it (a keyed put), unique among the memories of its user and
    /// agent scope; it never changes, and it is erased with the memory.
    pub key: Option<String>,
}

/// Most replaced texts a memory keeps: saving one with more drops the oldest, so a memory
/// corrected again and again stays one bounded record (and its listing a bounded answer).
pub const MAX_MEMORY_HISTORY: usize = 20;

/// A text a memory said before it was corrected or updated.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplacedText {
    /// What the memory said.
    pub text: String,
    /// When it was replaced.
    pub replaced_at: Timestamp,
    /// The message it came from, if known: `(session_id, index)`. Erasing that message (or
    /// its session) takes the text out of the history.
    pub source: Option<(String, u64)>,
}

/// A citation of text that is no longer stored (see [`Store::orphaned_citations`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct OrphanedCitation {
    /// The memory's tenant.
    pub tenant: String,
    /// The memory citing the text.
    pub memory_id: u64,
    /// The session cited.
    pub session_id: String,
    /// The message cited, or `None` when the whole session is gone.
    pub index: Option<u64>,
}

/// What erasing a session's or a message's text did to one memory citing it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Citation {
    /// The memory came from the erased text: it was deleted (it was about `user_id`).
    Deleted {
        /// The user the memory was about, whose index partition held it.
        user_id: String,
    },
    /// Texts it had replaced came from the erased text: they left its history.
    Rewritten,
    /// Nothing of it came from the erased text (any more).
    Untouched,
}

/// Where a replaced text came from, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Cited {
    /// No message.
    Nothing,
    /// Message `index` of session `session_id`.
    Message(String, u64),
    /// Not recorded: the text was replaced before format 3. Any erasure in the tenant drops
    /// it (see [`UNKNOWN_SOURCE`]).
    Unknown,
}

impl Cited {
    fn of(source: &Option<(String, u64)>) -> Self {
        match source {
            Some((session, index)) => Self::Message(session.clone(), *index),
            None => Self::Nothing,
        }
    }

    fn session(&self) -> Option<&str> {
        match self {
            Self::Message(session, _) => Some(session),
            Self::Unknown => Some(UNKNOWN_SOURCE),
            Self::Nothing => None,
        }
    }

    /// Whether erasing session `session_id` (message `index`, or all with `None`) erases it.
    fn erased_by(&self, session_id: &str, index: Option<u64>) -> bool {
        match self {
            Self::Message(session, at) => {
                session == session_id && index.is_none_or(|index| index == *at)
            }
            Self::Unknown => session_id == UNKNOWN_SOURCE,
            Self::Nothing => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct HistoryRecord {
    text: String,
    replaced_at: u64,
    source: Cited,
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
    /// Version 2: each replaced text with its source (version 1 kept none).
    history: Vec<HistoryRecord>,
    vector: Vec<f32>,
    /// Version 2: counts the record's writes.
    revision: u64,
    /// Version 3: the key a keyed put named it by (listed in `MEMORY_KEYS`).
    key: Option<String>,
}

/// Version 2 of [`MemoryRecord`]: no key.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
pub(crate) struct MemoryRecordV2 {
    tenant: String,
    user_id: String,
    agent_id: Option<String>,
    text: String,
    kind: MemoryKind,
    tags: Vec<String>,
    source: Option<(String, u64)>,
    created_at: u64,
    updated_at: u64,
    history: Vec<HistoryRecord>,
    vector: Vec<f32>,
    revision: u64,
}

impl From<MemoryRecordV2> for MemoryRecord {
    fn from(v2: MemoryRecordV2) -> Self {
        Self {
            tenant: v2.tenant,
            user_id: v2.user_id,
            agent_id: v2.agent_id,
            text: v2.text,
            kind: v2.kind,
            tags: v2.tags,
            source: v2.source,
            created_at: v2.created_at,
            updated_at: v2.updated_at,
            history: v2.history,
            vector: v2.vector,
            revision: v2.revision,
            key: None,
        }
    }
}

/// Version 1 of [`MemoryRecord`]: replaced texts without their source, no revision.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
pub(crate) struct MemoryRecordV1 {
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
    const VERSION: u8 = 3;
    const NAME: &'static str = "memory record";

    fn upgrade(version: u8, body: &[u8]) -> Result<Self> {
        match version {
            1 => {
                let v1: MemoryRecordV1 = crate::record::decode_body(Self::NAME, body)?;
                Ok(v1.into_v2().into())
            }
            2 => {
                let v2: MemoryRecordV2 = crate::record::decode_body(Self::NAME, body)?;
                Ok(v2.into())
            }
            _ => Err(StoreError::Corrupted {
                what: Self::NAME,
                detail: format!("unknown record version {version}"),
            }),
        }
    }
}

impl MemoryRecordV1 {
    fn into_v2(self) -> MemoryRecordV2 {
        MemoryRecordV2 {
            tenant: self.tenant,
            user_id: self.user_id,
            agent_id: self.agent_id,
            text: self.text,
            kind: self.kind,
            tags: self.tags,
            source: self.source,
            created_at: self.created_at,
            updated_at: self.updated_at,
            history: self
                .history
                .into_iter()
                .map(|(text, replaced_at)| HistoryRecord {
                    text,
                    replaced_at,
                    source: Cited::Unknown,
                })
                .collect(),
            vector: self.vector,
            revision: 0,
        }
    }
}

impl MemoryRecord {
    /// The record as version 2 wrote it, for tests of files written before keys.
    #[cfg(test)]
    pub(crate) fn as_version_2(&self) -> MemoryRecordV2 {
        MemoryRecordV2 {
            tenant: self.tenant.clone(),
            user_id: self.user_id.clone(),
            agent_id: self.agent_id.clone(),
            text: self.text.clone(),
            kind: self.kind,
            tags: self.tags.clone(),
            source: self.source.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            history: self.history.clone(),
            vector: self.vector.clone(),
            revision: self.revision,
        }
    }

    /// The record as version 1 wrote it, for tests of files written before version 2.
    #[cfg(test)]
    pub(crate) fn as_version_1(&self) -> MemoryRecordV1 {
        MemoryRecordV1 {
            tenant: self.tenant.clone(),
            user_id: self.user_id.clone(),
            agent_id: self.agent_id.clone(),
            text: self.text.clone(),
            kind: self.kind,
            tags: self.tags.clone(),
            source: self.source.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
            history: self
                .history
                .iter()
                .map(|entry| (entry.text.clone(), entry.replaced_at))
                .collect(),
            vector: self.vector.clone(),
        }
    }

    fn into_memory(self, id: u64) -> Memory {
        Memory {
            id,
            revision: self.revision,
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
                .map(|entry| ReplacedText {
                    text: entry.text,
                    replaced_at: Timestamp::from_micros(entry.replaced_at),
                    source: match entry.source {
                        Cited::Message(session, index) => Some((session, index)),
                        Cited::Nothing | Cited::Unknown => None,
                    },
                })
                .collect(),
            vector: self.vector,
            key: self.key,
        }
    }

    /// The record of `memory`, replacing `stored` (if any). History is append-only: the
    /// sources of the texts `stored` already had are kept as stored (a text of unknown
    /// source stays unknown rather than becoming sourceless).
    fn from_memory(memory: &Memory, stored: Option<&MemoryRecord>) -> Result<Self> {
        let kept = stored.map_or(&[][..], |stored| &stored.history[..]);
        let prefix = kept.len() <= memory.history.len()
            && kept
                .iter()
                .zip(&memory.history)
                .all(|(kept, new)| kept.text == new.text);
        if !prefix {
            return Err(StoreError::MemoryChanged {
                memory_id: memory.id,
            });
        }
        let mut history: Vec<HistoryRecord> = memory
            .history
            .iter()
            .enumerate()
            .map(|(position, entry)| HistoryRecord {
                text: entry.text.clone(),
                replaced_at: entry.replaced_at.as_micros(),
                source: kept
                    .get(position)
                    .map_or_else(|| Cited::of(&entry.source), |kept| kept.source.clone()),
            })
            .collect();
        history.drain(..history.len().saturating_sub(MAX_MEMORY_HISTORY));
        Ok(Self {
            tenant: memory.tenant.clone(),
            user_id: memory.user_id.clone(),
            agent_id: memory.agent_id.clone(),
            text: memory.text.clone(),
            kind: memory.kind,
            tags: memory.tags.clone(),
            source: memory.source.clone(),
            created_at: memory.created_at.as_micros(),
            updated_at: memory.updated_at.as_micros(),
            history,
            vector: memory.vector.clone(),
            revision: stored.map_or(1, |stored| stored.revision + 1),
            key: memory.key.clone(),
        })
    }

    /// The sessions the record cites (its source and its replaced texts' sources).
    fn cited_sessions(&self) -> std::collections::BTreeSet<&str> {
        let source = self.source.as_ref().map(|(session, _)| session.as_str());
        self.history
            .iter()
            .filter_map(|entry| entry.source.session())
            .chain(source)
            .collect()
    }
}

/// Lists every session `record` (memory `id`) cites in [`MEMORY_SOURCES`], replacing what
/// `old` (the record it replaces) listed.
fn index_citations(
    txn: &WriteTransaction,
    id: u64,
    old: Option<&MemoryRecord>,
    record: Option<&MemoryRecord>,
) -> Result<()> {
    let mut table = txn.open_table(MEMORY_SOURCES)?;
    let new = record.map(MemoryRecord::cited_sessions).unwrap_or_default();
    if let Some(old) = old {
        for session in old.cited_sessions().difference(&new) {
            table.remove((old.tenant.as_str(), *session, id))?;
        }
    }
    if let Some(record) = record {
        for session in &new {
            table.insert((record.tenant.as_str(), *session, id), ())?;
        }
    }
    Ok(())
}

/// Removes memory `id` (stored as `record`) from its owner's list and the citations.
fn remove_owner_and_citations(
    txn: &WriteTransaction,
    id: u64,
    record: &MemoryRecord,
) -> Result<()> {
    txn.open_table(MEMORY_OWNERS)?
        .remove((record.tenant.as_str(), record.user_id.as_str(), id))?;
    if let Some(key) = &record.key {
        txn.open_table(MEMORY_KEYS)?
            .remove(key_entry(record, key))?;
    }
    index_citations(txn, id, Some(record), None)
}

/// The [`MEMORY_KEYS`] key of a memory stored as `record` under `key`.
fn key_entry<'a>(record: &'a MemoryRecord, key: &'a str) -> (&'a str, &'a str, &'a str, &'a str) {
    let agent = record.agent_id.as_deref().unwrap_or(EVERY_AGENT);
    (&record.tenant, &record.user_id, agent, key)
}

/// Builds [`MEMORY_SOURCES`] for a file written before it existed (format 2): every stored
/// memory's citations, its replaced texts under [`UNKNOWN_SOURCE`].
pub(crate) fn index_sources(txn: &WriteTransaction) -> Result<()> {
    let memories = txn.open_table(MEMORIES)?;
    for entry in memories.iter()? {
        let (id, value) = entry?;
        let record = MemoryRecord::decode(value.value())?;
        index_citations(txn, id.value(), None, Some(&record))?;
    }
    Ok(())
}

/// Checks that message `index` of session `session_id` is stored and within `sources`.
fn check_source(
    txn: &redb::WriteTransaction,
    sources: &Access,
    session_id: &str,
    index: u64,
) -> Result<()> {
    let record = read_session_record(&txn.open_table(SESSIONS)?, sources, session_id)?
        .ok_or_else(|| StoreError::session_not_found(session_id))?;
    if txn
        .open_table(MESSAGES)?
        .get((record.sid, index))?
        .is_none()
    {
        return Err(StoreError::MessageNotFound { index });
    }
    Ok(())
}

impl Memory {
    /// The checks before a memory is stored, citing sessions `sources` reaches: ids, its
    /// text, and a tenant of its own.
    pub fn check(&self, sources: &Access) -> Result<()> {
        validate_id("tenant", &self.tenant)?;
        if sources.tenant() != self.tenant {
            return Err(StoreError::InvalidInput {
                field: "tenant",
                reason: "a memory cites sessions of its own tenant only".into(),
            });
        }
        validate_id("user_id", &self.user_id)?;
        validate_optional_id("agent_id", self.agent_id.as_deref())?;
        validate_text("memory", &self.text)?;
        if let Some(key) = &self.key {
            validate_id("key", key)?;
        }
        Ok(())
    }
}

impl Store {
    /// [`Store::put_memory`] with ids from `draw` (tests force collisions with it).
    pub(crate) async fn put_memory_drawing(
        &self,
        memory: Memory,
        sources: &Access,
        draw: impl FnMut() -> Result<u64> + Send + 'static,
    ) -> Result<u64> {
        memory.check(sources)?;
        let sources = sources.clone();
        self.write(move |txn| {
            let changed = || StoreError::MemoryChanged {
                memory_id: memory.id,
            };
            let stored = if memory.id == 0 {
                None
            } else {
                let stored = txn
                    .open_table(MEMORIES)?
                    .get(memory.id)?
                    .map(|value| MemoryRecord::decode(value.value()))
                    .transpose()?
                    .filter(|stored| {
                        stored.tenant == memory.tenant && stored.user_id == memory.user_id
                    })
                    .ok_or_else(changed)?;
                if stored.revision != memory.revision {
                    return Err(changed());
                }
                if stored.key.is_some() || memory.key.is_some() {
                    // The key entry names the memory's scope: neither may move.
                    let same = stored.key == memory.key && stored.agent_id == memory.agent_id;
                    if !same {
                        return Err(StoreError::InvalidInput {
                            field: "key",
                            reason: "a keyed memory keeps its key and agent".into(),
                        });
                    }
                }
                Some(stored)
            };
            if let Some((session_id, index)) = &memory.source {
                let cited_before = stored
                    .as_ref()
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
            let (id, seq) = match &stored {
                None => {
                    let id = unused_id(draw, |id| Ok(memories.get(id)?.is_some()))?;
                    (id, next_seq(txn, NEXT_MEMORY_SEQ_KEY)?)
                }
                Some(_) => {
                    let seq = owners
                        .get((owner.0, owner.1, memory.id))?
                        .map(|v| v.value())
                        .ok_or_else(changed)?;
                    (memory.id, seq)
                }
            };
            let record = MemoryRecord::from_memory(&memory, stored.as_ref())?;
            if let (None, Some(key)) = (&stored, &record.key) {
                let mut keys = txn.open_table(MEMORY_KEYS)?;
                // Another memory took the key since the caller looked it up: it must read
                // that one and update it instead.
                if let Some(taken) = keys.get(key_entry(&record, key))? {
                    return Err(StoreError::MemoryChanged {
                        memory_id: taken.value(),
                    });
                }
                keys.insert(key_entry(&record, key), id)?;
            }
            memories.insert(id, record.encode().as_slice())?;
            owners.insert((owner.0, owner.1, id), seq)?;
            index_citations(txn, id, stored.as_ref(), Some(&record))?;
            Ok(id)
        })
        .await
    }
}

impl Memories<'_> {
    /// Saves a memory: a new one (id 0) gets a fresh random id; a stored one (its id) is
    /// replaced and keeps its place in its user's list. Returns the id.
    ///
    /// Fails with [`StoreError::MemoryChanged`] when the id names no memory of the same tenant
    /// and user, or one at another revision: a memory forgotten since it was read must not
    /// come back by being updated, nor one whose history an erasure rewrote get the erased
    /// text back.
    ///
    /// A source must be a stored message, and a source the memory did not cite before must be
    /// in a session `sources` reaches (for a user-scoped caller, one of its own): checked in
    /// the saving transaction, so a memory cannot cite a message erased before it was saved
    /// (its erasure would have missed it) or a session another user created meanwhile.
    /// [`StoreError::SessionNotFound`] for an unknown session, [`StoreError::InvalidInput`]
    /// for an unknown message.
    pub async fn put_memory(self, memory: Memory, sources: &Access) -> Result<u64> {
        if let Some(backend) = self.store.backend() {
            return backend.memories().put_memory(memory, sources).await;
        }
        self.store
            .put_memory_drawing(memory, sources, random_id)
            .await
    }

    /// The memories of `tenant` that cite session `session_id` (as their source or as the
    /// source of a replaced text), whoever they are about; with `*`, those
    /// holding replaced texts of unknown source.
    pub fn memories_citing(self, tenant: &str, session_id: &str) -> Result<Vec<u64>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.memories().memories_citing(tenant, session_id));
        }
        let txn = self.store.begin_read()?;
        let table = txn.open_table(MEMORY_SOURCES)?;
        table
            .range((tenant, session_id, 0)..=(tenant, session_id, u64::MAX))?
            .map(|entry| Ok(entry?.0.value().2))
            .collect()
    }

    /// Citations of sessions or messages that are no longer stored: what an erasure that
    /// stopped between deleting a session (or a message) and its memories left behind. Reads
    /// every citation: run it when resuming an interrupted erasure.
    pub fn orphaned_citations(self) -> Result<Vec<OrphanedCitation>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.memories().orphaned_citations());
        }
        let txn = self.store.begin_read()?;
        let citations = txn.open_table(MEMORY_SOURCES)?;
        let sessions = txn.open_table(SESSIONS)?;
        let messages = txn.open_table(MESSAGES)?;
        let memories = txn.open_table(MEMORIES)?;
        let mut orphans = Vec::new();
        for entry in citations.iter()? {
            let (key, ()) = entry.map(|(key, _)| (key, ()))?;
            let (tenant, session_id, id) = key.value();
            if session_id == UNKNOWN_SOURCE {
                continue;
            }
            let all = Access::tenant_wide(tenant);
            let Some(session) = read_session_record(&sessions, &all, session_id)? else {
                orphans.push(OrphanedCitation {
                    tenant: tenant.to_owned(),
                    memory_id: id,
                    session_id: session_id.to_owned(),
                    index: None,
                });
                continue;
            };
            let Some(value) = memories.get(id)? else {
                continue;
            };
            let record = MemoryRecord::decode(value.value())?;
            let sources = record
                .history
                .iter()
                .filter_map(|entry| match &entry.source {
                    Cited::Message(session, index) => Some((session.as_str(), *index)),
                    Cited::Nothing | Cited::Unknown => None,
                });
            let current = record
                .source
                .as_ref()
                .map(|(session, index)| (session.as_str(), *index));
            for (_, index) in sources.chain(current).filter(|(s, _)| *s == session_id) {
                if messages.get((session.sid, index))?.is_none() {
                    orphans.push(OrphanedCitation {
                        tenant: tenant.to_owned(),
                        memory_id: id,
                        session_id: session_id.to_owned(),
                        index: Some(index),
                    });
                }
            }
        }
        Ok(orphans)
    }

    /// The memory with this id if it belongs to `tenant`.
    pub fn memory(self, tenant: &str, id: u64) -> Result<Option<Memory>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.memories().memory(tenant, id));
        }
        validate_id("tenant", tenant)?;
        let txn = self.store.begin_read()?;
        let table = txn.open_table(MEMORIES)?;
        let Some(value) = table.get(id)? else {
            return Ok(None);
        };
        let memory = MemoryRecord::decode(value.value())?.into_memory(id);
        Ok((memory.tenant == tenant).then_some(memory))
    }

    /// The memory of a user and agent scope (`None`: the user's memories of every agent) that
    /// a keyed put named `key`, if any.
    pub fn memory_by_key(
        self,
        tenant: &str,
        user_id: &str,
        agent_id: Option<&str>,
        key: &str,
    ) -> Result<Option<Memory>> {
        if let Some(backend) = self.store.backend() {
            return wait(
                backend
                    .memories()
                    .memory_by_key(tenant, user_id, agent_id, key),
            );
        }
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        validate_optional_id("agent_id", agent_id)?;
        validate_id("key", key)?;
        let txn = self.store.begin_read()?;
        let agent = agent_id.unwrap_or(EVERY_AGENT);
        let Some(id) = txn
            .open_table(MEMORY_KEYS)?
            .get((tenant, user_id, agent, key))?
            .map(|id| id.value())
        else {
            return Ok(None);
        };
        let value = txn
            .open_table(MEMORIES)?
            .get(id)?
            .ok_or_else(|| StoreError::Corrupted {
                what: "memory keys",
                detail: format!("memory {id} has a key but is not stored"),
            })?;
        Ok(Some(MemoryRecord::decode(value.value())?.into_memory(id)))
    }

    /// Every memory of a user, oldest (first remembered) first.
    pub fn user_memories(self, tenant: &str, user_id: &str) -> Result<Vec<Memory>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.memories().user_memories(tenant, user_id));
        }
        self.user_memories_page(tenant, user_id, None, usize::MAX, |_| true)
    }

    /// Up to `limit` memories of a user that `keep` accepts, oldest first, from the one after
    /// memory `after` (from the first with `None`). Decodes only the memories it offers to
    /// `keep`. Fails with [`StoreError::MemoryNotFound`] when `after` is not one of the user's
    /// memories (any more). The cursor is a memory id rather than the memory's sequence number
    /// because those numbers count every tenant's memories: as cursors they would show a
    /// tenant how busy the others are.
    pub fn user_memories_page(
        self,
        tenant: &str,
        user_id: &str,
        after: Option<u64>,
        limit: usize,
        keep: impl Fn(&Memory) -> bool + Sync,
    ) -> Result<Vec<Memory>> {
        if let Some(backend) = self.store.backend() {
            return wait(
                backend
                    .memories()
                    .user_memories_page(tenant, user_id, after, limit, &keep),
            );
        }
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        let txn = self.store.begin_read()?;
        let owners = txn.open_table(MEMORY_OWNERS)?;
        let table = txn.open_table(MEMORIES)?;
        let start = match after {
            None => 0,
            Some(id) => owners
                .get((tenant, user_id, id))?
                .map(|seq| seq.value() + 1)
                .ok_or(StoreError::MemoryNotFound { id })?,
        };
        // The listing is keyed by id, which is random: the user's sequence numbers are read
        // (keys only) and sorted to find the page.
        let mut listed = owners
            .range((tenant, user_id, 0)..=(tenant, user_id, u64::MAX))?
            .filter_map(|entry| match entry {
                Ok((key, seq)) => (seq.value() >= start).then(|| Ok((seq.value(), key.value().2))),
                Err(err) => Some(Err(err.into())),
            })
            .collect::<Result<Vec<_>>>()?;
        listed.sort_unstable();
        let mut page = Vec::new();
        for (_, id) in listed {
            if page.len() >= limit {
                break;
            }
            let value = table.get(id)?.ok_or_else(|| StoreError::Corrupted {
                what: "memory owners",
                detail: format!("memory {id} is listed but not stored"),
            })?;
            let memory = MemoryRecord::decode(value.value())?.into_memory(id);
            if keep(&memory) {
                page.push(memory);
            }
        }
        Ok(page)
    }

    /// Up to `limit` memories of every tenant in id order after `after`: the pages an index
    /// rebuild reads. Ids are random, so id order is not creation order; the pages cover
    /// every memory stored before the first page was read and not deleted since.
    pub fn memories_after(self, after: u64, limit: usize) -> Result<Vec<Memory>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.memories().memories_after(after, limit));
        }
        let txn = self.store.begin_read()?;
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
}

impl Eraser {
    /// Takes what memory `id` holds of session `session_id` (of its message `index` with
    /// `Some`) out of it: the whole memory when it came from there, else the replaced texts
    /// that did. With `*` as the session, every replaced text of unknown
    /// source. Commits alone (it removes text).
    pub async fn forget_citation(
        &self,
        tenant: &str,
        id: u64,
        session_id: &str,
        index: Option<u64>,
    ) -> Result<Citation> {
        if let Some(backend) = self.store.backend() {
            return backend
                .eraser()
                .forget_citation(tenant, id, session_id, index)
                .await;
        }
        let (tenant, session_id) = (tenant.to_owned(), session_id.to_owned());
        self.store
            .write_alone(move |txn| {
                let mut memories = txn.open_table(MEMORIES)?;
                let Some(mut record) = memories
                    .get(id)?
                    .map(|value| MemoryRecord::decode(value.value()))
                    .transpose()?
                    .filter(|record| record.tenant == tenant)
                else {
                    return Ok(Citation::Untouched);
                };
                let from_source = record.source.as_ref().is_some_and(|(session, at)| {
                    *session == session_id && index.is_none_or(|index| index == *at)
                });
                if from_source {
                    memories.remove(id)?;
                    drop(memories);
                    remove_owner_and_citations(txn, id, &record)?;
                    return Ok(Citation::Deleted {
                        user_id: record.user_id,
                    });
                }
                let old = record.clone();
                record
                    .history
                    .retain(|entry| !entry.source.erased_by(&session_id, index));
                if record.history.len() == old.history.len() {
                    return Ok(Citation::Untouched);
                }
                record.revision += 1;
                memories.insert(id, record.encode().as_slice())?;
                drop(memories);
                index_citations(txn, id, Some(&old), Some(&record))?;
                Ok(Citation::Rewritten)
            })
            .await
    }

    /// Deletes a memory of `tenant`; returns whether it existed.
    pub async fn delete_memory(&self, tenant: &str, id: u64) -> Result<bool> {
        if let Some(backend) = self.store.backend() {
            return backend.eraser().delete_memory(tenant, id).await;
        }
        validate_id("tenant", tenant)?;
        let tenant = tenant.to_owned();
        self.store
            .write_alone(move |txn| {
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
                drop(table);
                remove_owner_and_citations(txn, id, &record)?;
                Ok(true)
            })
            .await
    }
}

/// The memories' part of [`Memories::check_tables`].
pub(crate) fn check_memory_tables(txn: &ReadTransaction, check: &mut TablesCheck) -> Result<()> {
    let memories = txn.open_table(MEMORIES)?;
    let owners = txn.open_table(MEMORY_OWNERS)?;
    let keys = txn.open_table(MEMORY_KEYS)?;
    let sources = txn.open_table(MEMORY_SOURCES)?;
    let stored = |id: u64| -> Result<Option<MemoryRecord>> {
        memories
            .get(id)?
            .map(|value| MemoryRecord::decode(value.value()))
            .transpose()
    };
    for entry in memories.iter()? {
        let (id, value) = entry?;
        let id = id.value();
        check.memories += 1;
        let record = match MemoryRecord::decode(value.value()) {
            Ok(record) => record,
            Err(err) => {
                check.problem(format!("memory {id}: {err}"));
                continue;
            }
        };
        if owners
            .get((record.tenant.as_str(), record.user_id.as_str(), id))?
            .is_none()
        {
            check.problem(format!("memory {id} is not listed in memory_owner_seqs"));
        }
        if let Some(key) = &record.key
            && keys
                .get(key_entry(&record, key))?
                .map(|listed| listed.value())
                != Some(id)
        {
            check.problem(format!(
                "memory {id}: its key does not name it in memory_keys"
            ));
        }
        for session in record.cited_sessions() {
            if sources
                .get((record.tenant.as_str(), session, id))?
                .is_none()
            {
                check.problem(format!(
                    "memory {id}: a session it cites is not listed in memory_sources"
                ));
            }
        }
    }
    for entry in owners.iter()? {
        let (key, _) = entry?;
        let (tenant, user_id, id) = key.value();
        check.listing(
            "memory_owner_seqs",
            "memory",
            id,
            stored(id),
            |record| record.tenant == tenant && record.user_id == user_id,
            "an owner it does not have",
        );
    }
    for entry in keys.iter()? {
        let (listed, id) = entry?;
        let (tenant, user_id, agent, key) = listed.value();
        let id = id.value();
        check.listing(
            "memory_keys",
            "memory",
            id,
            stored(id),
            |record| {
                record.key.as_deref() == Some(key)
                    && key_entry(record, key) == (tenant, user_id, agent, key)
            },
            "a key or scope it does not have",
        );
    }
    for entry in sources.iter()? {
        let (listed, _) = entry?;
        let (tenant, session, id) = listed.value();
        check.listing(
            "memory_sources",
            "memory",
            id,
            stored(id),
            |record| record.tenant == tenant && record.cited_sessions().contains(session),
            "a session it does not cite",
        );
    }
    Ok(())
}
