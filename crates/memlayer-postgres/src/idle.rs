//! Idle sessions, with the semantics of the redb store's `idle.rs`: a session is open from
//! its creation until it is ended (taken as idle, or ended by request) or deleted, and an
//! ended session stays ended whatever activity follows. Open sessions are the rows with
//! `ended = false`, indexed by last activity (`open_sessions`), so finding the idle ones
//! reads only them.

use memlayer_store::{Access, Timestamp};

use crate::sessions::unsigned;
use crate::{PgStore, Result};

impl PgStore {
    /// Ends up to `limit` open sessions last active before `cutoff`, oldest first (ties by
    /// tenant, then session id), and returns them as `(tenant, session_id)`: the caller
    /// finishes them. Several nodes may call it at once: a session another caller is taking
    /// (or an append is writing) is skipped, not waited for, and one taken is ended in the
    /// same statement, so no two callers get the same session.
    pub async fn take_idle_sessions(
        &self,
        cutoff: Timestamp,
        limit: usize,
    ) -> Result<Vec<(String, String)>> {
        // Stored times fit a bigint; any later cutoff finds what the largest one finds.
        let cutoff = i64::try_from(cutoff.as_micros()).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.connection().await?;
        let rows = client
            .query(
                "WITH idle AS (
                     SELECT tenant, session_id FROM sessions
                     WHERE NOT ended AND updated_at < $1
                     ORDER BY updated_at, tenant COLLATE \"C\", session_id COLLATE \"C\"
                     LIMIT $2
                     FOR UPDATE SKIP LOCKED
                 ), taken AS (
                     UPDATE sessions SET ended = true
                     FROM idle
                     WHERE sessions.tenant = idle.tenant AND sessions.session_id = idle.session_id
                       AND NOT sessions.ended
                     RETURNING sessions.tenant, sessions.session_id, sessions.updated_at
                 )
                 SELECT tenant, session_id FROM taken
                 ORDER BY updated_at, tenant COLLATE \"C\", session_id COLLATE \"C\"",
                &[&cutoff, &limit],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| (row.get("tenant"), row.get("session_id")))
            .collect())
    }

    /// Marks a session ended: it leaves the open ones. Harmless for an unknown, another
    /// user's or an ended one.
    pub async fn end_session_activity(&self, access: &Access, session_id: &str) -> Result<()> {
        access.check_session(session_id)?;
        let client = self.connection().await?;
        client
            .execute(
                "UPDATE sessions SET ended = true
                 WHERE tenant = $1 AND session_id = $2 AND ($3::text IS NULL OR user_id = $3)
                   AND NOT ended",
                &[&access.tenant(), &session_id, &access.user()],
            )
            .await?;
        Ok(())
    }

    /// The last activity of the open session that has been idle longest.
    pub async fn oldest_open_activity(&self) -> Result<Option<Timestamp>> {
        let client = self.connection().await?;
        let row = client
            .query_one("SELECT min(updated_at) FROM sessions WHERE NOT ended", &[])
            .await?;
        row.get::<_, Option<i64>>(0)
            .map(|at| Ok(Timestamp::from_micros(unsigned(at)?)))
            .transpose()
    }
}
