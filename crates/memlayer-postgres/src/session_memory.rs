//! Session memories: one rolling summary per user and agent, with the sessions merged into
//! it, sealed under a data key of its own (see migrations/0004_memories.sql).

use memlayer_store::{
    SessionMemory, SessionVersion, StoreError, Timestamp, validate_id, validate_text,
};
use serde::{Deserialize, Serialize};

use crate::erasure::{destroy_keys, new_key};
use crate::memories::{corrupted, violates};
use crate::seal::{DataKey, Field, Place};
use crate::sessions::{key_from_row, unsigned};
use crate::{PgStore, Result};

/// Deletes the session memories of tenant `$1` and user `$2` into which session `$3` (or,
/// when NULL, any session) was merged, returning their keys for `delete_sealed_rows`.
pub(crate) const DROP_SESSION_MEMORIES: &str = "DELETE FROM session_memories
     WHERE tenant = $1 AND user_id = $2 AND ($3::text IS NULL OR $3 = ANY(sessions))
     RETURNING key_id";

#[derive(Serialize, Deserialize)]
struct Body {
    text: String,
    updated_at: u64,
}

/// Where a session memory is sealed: user ids hold no `/`, so "user/agent" names one scope.
fn seal_place<'a>(tenant: &'a str, scope: &'a str) -> Place<'a> {
    Place {
        tenant,
        session_id: scope,
        index: 0,
        field: Field::SessionMemory,
    }
}

impl PgStore {
    /// The session memory of a user with an agent.
    pub async fn session_memory(
        &self,
        tenant: &str,
        user_id: &str,
        agent_id: &str,
    ) -> Result<Option<SessionMemory>> {
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        validate_id("agent_id", agent_id)?;
        let client = self.connection().await?;
        let Some(row) = client
            .query_opt(
                "SELECT sm.sessions, sm.key_id, sm.body, k.key
                 FROM session_memories sm
                 JOIN data_keys k ON k.tenant = sm.tenant AND k.key_id = sm.key_id
                 WHERE sm.tenant = $1 AND sm.user_id = $2 AND sm.agent_id = $3",
                &[&tenant, &user_id, &agent_id],
            )
            .await?
        else {
            return Ok(None);
        };
        let scope = format!("{user_id}/{agent_id}");
        let json = key_from_row(&row)?.open(seal_place(tenant, &scope), row.get("body"))?;
        let body: Body =
            serde_json::from_slice(&json).map_err(|err| corrupted("session memory", err))?;
        Ok(Some(SessionMemory {
            text: body.text,
            sessions: row.get("sessions"),
            updated_at: Timestamp::from_micros(body.updated_at),
        }))
    }

    /// Saves the session memory of a user with an agent, `merged` being the session just
    /// merged into it and the version it was read at, as the redb store's
    /// `put_session_memory`: every merged session must still be the user's
    /// ([`StoreError::SessionNotFound`]) and `merged` at that version
    /// ([`StoreError::SessionChanged`]), checked in the saving transaction under a share
    /// lock of those sessions, so an erasure waits for the save (and then drops it) or the
    /// save sees the erasure.
    pub async fn put_session_memory(
        &self,
        tenant: &str,
        user_id: &str,
        agent_id: &str,
        memory: SessionMemory,
        merged: (&str, SessionVersion),
    ) -> Result<()> {
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        validate_id("agent_id", agent_id)?;
        validate_text("session memory", &memory.text)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self
                .try_put_session_memory(tenant, user_id, agent_id, &memory, merged)
                .await
            {
                // A concurrent first save of this scope won the insert: save over it.
                Err(err) if attempt < 3 && violates(&err, "session_memories_pkey") => {}
                other => return other,
            }
        }
    }

    async fn try_put_session_memory(
        &self,
        tenant: &str,
        user_id: &str,
        agent_id: &str,
        memory: &SessionMemory,
        merged: (&str, SessionVersion),
    ) -> Result<()> {
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        let rows = txn
            .query(
                "SELECT session_id, sid, erased FROM sessions
                 WHERE tenant = $1 AND user_id = $2 AND session_id = ANY($3)
                 FOR SHARE",
                &[&tenant, &user_id, &memory.sessions],
            )
            .await?;
        for session_id in &memory.sessions {
            let row = rows
                .iter()
                .find(|row| row.get::<_, &str>("session_id") == session_id)
                .ok_or_else(|| StoreError::session_not_found(session_id))?;
            if session_id == merged.0 {
                let version =
                    SessionVersion::new(unsigned(row.get("sid"))?, unsigned(row.get("erased"))?);
                if version != merged.1 {
                    return Err(StoreError::SessionChanged {
                        session_id: session_id.clone(),
                    }
                    .into());
                }
            }
        }
        let existing = txn
            .query_opt(
                "SELECT sm.sessions, sm.key_id, k.key
                 FROM session_memories sm
                 JOIN data_keys k ON k.tenant = sm.tenant AND k.key_id = sm.key_id
                 WHERE sm.tenant = $1 AND sm.user_id = $2 AND sm.agent_id = $3
                 FOR UPDATE OF sm",
                &[&tenant, &user_id, &agent_id],
            )
            .await?;
        // The key stays only while every session the stored text was merged from is still
        // listed: erasing any of them then destroys it with the new text.
        let (key, replace): (DataKey, bool) = match &existing {
            Some(row) => {
                let before: Vec<String> = row.get("sessions");
                if before.iter().all(|s| memory.sessions.contains(s)) {
                    (key_from_row(row)?, true)
                } else {
                    let key = new_key(&txn, tenant).await?;
                    destroy_keys(&txn, tenant, &[row.get("key_id")]).await?;
                    (key, true)
                }
            }
            None => (new_key(&txn, tenant).await?, false),
        };
        let scope = format!("{user_id}/{agent_id}");
        let body = Body {
            text: memory.text.clone(),
            updated_at: memory.updated_at.as_micros(),
        };
        let json = serde_json::to_vec(&body).map_err(|err| corrupted("session memory", err))?;
        let sealed = key.seal(seal_place(tenant, &scope), &json)?;
        let statement = if replace {
            "UPDATE session_memories SET sessions = $4, key_id = $5, body = $6
             WHERE tenant = $1 AND user_id = $2 AND agent_id = $3"
        } else {
            "INSERT INTO session_memories (tenant, user_id, agent_id, sessions, key_id, body)
             VALUES ($1, $2, $3, $4, $5, $6)"
        };
        txn.execute(
            statement,
            &[
                &tenant,
                &user_id,
                &agent_id,
                &memory.sessions,
                &key.id,
                &sealed,
            ],
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }

    /// Drops a user's session memories, all of them or (with `session_id`) those that
    /// session was merged into, destroying their keys in the same transaction; returns how
    /// many.
    pub async fn drop_session_memories(
        &self,
        tenant: &str,
        user_id: &str,
        session_id: Option<&str>,
    ) -> Result<u64> {
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        self.delete_sealed_rows(
            tenant,
            DROP_SESSION_MEMORIES,
            &[&tenant, &user_id, &session_id],
        )
        .await
    }
}
