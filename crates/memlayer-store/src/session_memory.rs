//! Session memory: one rolling summary per (user, agent) of their finished conversations,
//! loaded into the next conversation's context. The store keeps it with the list of
//! sessions merged into it, so erasing one of them can drop what was derived from it.

use redb::{ReadableTable, WriteTransaction};
use serde::{Deserialize, Serialize};

use crate::model::Access;
use crate::model::{Timestamp, validate_id, validate_text};
use crate::record::Record;
use crate::sessions::{check_version, read_session_record};
use crate::snapshot::SessionVersion;
use crate::store::{Eraser, Memories, wait};
use crate::tables::{SESSION_MEMORIES, SESSIONS};
use crate::{Result, StoreError};

/// The rolling summary of a user's conversations with one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMemory {
    /// The summary.
    pub text: String,
    /// The sessions merged into it, oldest first.
    pub sessions: Vec<String>,
    /// When it last changed.
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SessionMemoryRecord {
    text: String,
    sessions: Vec<String>,
    updated_at: u64,
}

impl Record for SessionMemoryRecord {
    const VERSION: u8 = 1;
    const NAME: &'static str = "session memory record";
}

impl Memories<'_> {
    /// The session memory of a user with an agent.
    pub fn session_memory(
        self,
        tenant: &str,
        user_id: &str,
        agent_id: &str,
    ) -> Result<Option<SessionMemory>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.memories().session_memory(tenant, user_id, agent_id));
        }
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        validate_id("agent_id", agent_id)?;
        let txn = self.store.begin_read()?;
        let table = txn.open_table(SESSION_MEMORIES)?;
        table
            .get((tenant, user_id, agent_id))?
            .map(|value| {
                let record = SessionMemoryRecord::decode(value.value())?;
                Ok(SessionMemory {
                    text: record.text,
                    sessions: record.sessions,
                    updated_at: Timestamp::from_micros(record.updated_at),
                })
            })
            .transpose()
    }

    /// Saves the session memory of a user with an agent, with `merged` the session just
    /// merged into it and the version it was read at. Every session it was merged from must
    /// still be one of the user's ([`StoreError::SessionNotFound`] otherwise), and `merged`
    /// still at that version ([`StoreError::SessionChanged`]), or nothing is saved: checked
    /// in the saving transaction, so a merge that read a session or a message erased before
    /// it saved cannot bring the erased text back.
    ///
    /// [`StoreError::SessionNotFound`]: crate::StoreError::SessionNotFound
    /// [`StoreError::SessionChanged`]: crate::StoreError::SessionChanged
    pub async fn put_session_memory(
        self,
        tenant: &str,
        user_id: &str,
        agent_id: &str,
        memory: SessionMemory,
        merged: (&str, SessionVersion),
    ) -> Result<()> {
        if let Some(backend) = self.store.backend() {
            return backend
                .memories()
                .put_session_memory(tenant, user_id, agent_id, memory, merged)
                .await;
        }
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        validate_id("agent_id", agent_id)?;
        validate_text("session memory", &memory.text)?;
        let key = (tenant.to_owned(), user_id.to_owned(), agent_id.to_owned());
        let (merged_id, merged_version) = (merged.0.to_owned(), merged.1);
        let record = SessionMemoryRecord {
            text: memory.text,
            sessions: memory.sessions,
            updated_at: memory.updated_at.as_micros(),
        };
        self.store
            .write(move |txn| {
                let sessions = txn.open_table(SESSIONS)?;
                let owner = Access::one_user(&*key.0, &*key.1);
                for session_id in &record.sessions {
                    let session = read_session_record(&sessions, &owner, session_id)?
                        .ok_or_else(|| StoreError::session_not_found(session_id))?;
                    if *session_id == merged_id {
                        check_version(&session, merged_version, session_id)?;
                    }
                }
                txn.open_table(SESSION_MEMORIES)?.insert(
                    (key.0.as_str(), key.1.as_str(), key.2.as_str()),
                    record.encode().as_slice(),
                )?;
                Ok(())
            })
            .await
    }
}

impl Eraser {
    /// Drops a user's session memories: all of them, or (with `session_id`) those a session
    /// was merged into. Returns how many were dropped.
    pub async fn drop_session_memories(
        &self,
        tenant: &str,
        user_id: &str,
        session_id: Option<&str>,
    ) -> Result<u64> {
        if let Some(backend) = self.store.backend() {
            return backend
                .eraser()
                .drop_session_memories(tenant, user_id, session_id)
                .await;
        }
        self.store
            .remove_user_rows(tenant, user_id, session_id, remove_session_memories)
            .await
    }
}

/// Removes a user's session memories, or (with `session_id`) those that session was merged
/// into, in `txn`.
pub(crate) fn remove_session_memories(
    txn: &WriteTransaction,
    tenant: &str,
    user_id: &str,
    session_id: Option<&str>,
) -> Result<u64> {
    let mut table = txn.open_table(SESSION_MEMORIES)?;
    let mut doomed = std::collections::HashSet::new();
    for entry in table.range((tenant, user_id, "")..)? {
        let (key, value) = entry?;
        let (t, u, agent) = key.value();
        if t != tenant || u != user_id {
            break;
        }
        let record = SessionMemoryRecord::decode(value.value())?;
        if session_id.is_none_or(|id| record.sessions.iter().any(|merged| merged == id)) {
            doomed.insert(agent.to_owned());
        }
    }
    // One range removal, not one `remove` each (see `Store::write_alone`).
    if let (Some(first), Some(last)) = (doomed.iter().min(), doomed.iter().max()) {
        table.retain_in(
            (tenant, user_id, first.as_str())..=(tenant, user_id, last.as_str()),
            |(_, _, agent), _| !doomed.contains(agent),
        )?;
    }
    Ok(doomed.len() as u64)
}
