//! One session read from one snapshot, in as many steps as the reader needs (the redb store's
//! `SessionSnapshot`): a read-only `REPEATABLE READ` transaction held on a pooled connection
//! for as long as the view lives, so that an outline and the contents read after it agree on
//! which messages exist.

use deadpool_postgres::Object;
use memlayer_store::{
    Access, Message, MessageOutline, Session, SessionVersion, StoredSummary, Timestamp,
};

use crate::seal::DataKey;
use crate::sessions::{
    SESSION_KEY_COLUMNS, WITH_KEY, bigint, key_from_row, message_from_row, open_content,
    role_from_code, session_from_row, unsigned,
};
use crate::summaries::summary_from_row;
use crate::{PgStore, PostgresError, Result};

/// A session as it was when the snapshot was taken ([`PgStore::snapshot`]); later writes
/// are not seen. It holds a connection of the pool: keep it only for the reads at hand.
pub struct PgSnapshot {
    txn: ReadOnly,
    tenant: String,
    session: Session,
    version: SessionVersion,
    key: DataKey,
}

impl std::fmt::Debug for PgSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgSnapshot")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// A snapshot of the session, or `None` if `access` reaches no session with that id.
    pub async fn snapshot(&self, access: &Access, session_id: &str) -> Result<Option<PgSnapshot>> {
        access.check_session(session_id)?;
        let txn = ReadOnly::begin(self.connection().await?).await?;
        let row = txn
            .client()
            .query_opt(
                &format!(
                    "SELECT {SESSION_KEY_COLUMNS}, s.sid, s.erased FROM {WITH_KEY}
                     WHERE s.tenant = $1 AND s.session_id = $2
                       AND ($3::text IS NULL OR s.user_id = $3)"
                ),
                &[&access.tenant(), &session_id, &access.user()],
            )
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let key = key_from_row(&row)?;
        Ok(Some(PgSnapshot {
            session: session_from_row(&row, access.tenant(), &key)?,
            version: SessionVersion::new(unsigned(row.get("sid"))?, unsigned(row.get("erased"))?),
            tenant: access.tenant().to_owned(),
            key,
            txn,
        }))
    }
}

impl PgSnapshot {
    /// The session record.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The version of the session this snapshot reads.
    pub fn version(&self) -> SessionVersion {
        self.version
    }

    /// Up to `limit` messages from index `from` on, in index order.
    pub async fn messages(&self, from: u64, limit: usize) -> Result<Vec<Message>> {
        let rows = self
            .txn
            .client()
            .query(
                "SELECT idx, role, content, metadata, \"timestamp\", token_count FROM messages
                 WHERE tenant = $1 AND session_id = $2 AND idx >= $3
                 ORDER BY idx LIMIT $4",
                &[
                    &self.tenant,
                    &self.session.id,
                    &bigint(from),
                    &bigint(limit as u64),
                ],
            )
            .await?;
        rows.iter().map(|row| self.message(row)).collect()
    }

    /// The outline of every message from index `from` on, in index order.
    pub async fn outline(&self, from: u64) -> Result<Vec<MessageOutline>> {
        let rows = self
            .txn
            .client()
            .query(
                "SELECT idx, role, \"timestamp\", token_count FROM messages
                 WHERE tenant = $1 AND session_id = $2 AND idx >= $3
                 ORDER BY idx",
                &[&self.tenant, &self.session.id, &bigint(from)],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let index = unsigned(row.get("idx"))?;
                Ok(MessageOutline {
                    index,
                    role: role_from_code(row.get("role"))?,
                    timestamp: Timestamp::from_micros(unsigned(row.get("timestamp"))?),
                    token_count: u32::try_from(row.get::<_, i64>("token_count")).map_err(|_| {
                        PostgresError::Corrupted {
                            what: "message",
                            detail: format!("token count of message {index} out of range"),
                        }
                    })?,
                })
            })
            .collect()
    }

    /// The messages at `indices` that exist, in the order asked.
    pub async fn messages_at(&self, indices: &[u64]) -> Result<Vec<Message>> {
        let wanted: Vec<i64> = indices.iter().map(|&index| bigint(index)).collect();
        let rows = self
            .txn
            .client()
            .query(
                "SELECT idx, role, content, metadata, \"timestamp\", token_count FROM messages
                 WHERE tenant = $1 AND session_id = $2 AND idx = ANY($3)",
                &[&self.tenant, &self.session.id, &wanted],
            )
            .await?;
        let mut found = rows
            .iter()
            .map(|row| self.message(row))
            .collect::<Result<Vec<_>>>()?;
        let position = |index: u64| indices.iter().position(|&asked| asked == index);
        found.sort_by_key(|message| position(message.index));
        Ok(found)
    }

    /// The session's rolling summary, if one was saved.
    pub async fn summary(&self) -> Result<Option<StoredSummary>> {
        let row = self
            .txn
            .client()
            .query_opt(
                "SELECT text, first_index, last_index, created_at FROM summaries
                 WHERE tenant = $1 AND session_id = $2",
                &[&self.tenant, &self.session.id],
            )
            .await?;
        match row {
            Some(row) => summary_from_row(&self.key, &self.tenant, &self.session.id, &row),
            None => Ok(None),
        }
    }

    fn message(&self, row: &tokio_postgres::Row) -> Result<Message> {
        let index = unsigned(row.get("idx"))?;
        let content = open_content(&self.key, &self.tenant, &self.session.id, index, row)?;
        message_from_row(&self.key, &self.tenant, &self.session.id, row, content)
    }
}

/// A connection in a read-only `REPEATABLE READ` transaction, which ends with it.
struct ReadOnly(Option<Object>);

impl ReadOnly {
    async fn begin(client: Object) -> Result<Self> {
        // Guarded before the statement: if it fails half-way, the drop still cleans up.
        let txn = Self(Some(client));
        txn.client()
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await?;
        Ok(txn)
    }

    fn client(&self) -> &Object {
        self.0
            .as_ref()
            .expect("the connection is taken only when the transaction is dropped")
    }
}

impl Drop for ReadOnly {
    /// Ends the transaction before the connection goes back to the pool, where the next
    /// caller must not find it open. That takes a round trip, so it runs on the runtime;
    /// without one the connection is closed instead of returned.
    fn drop(&mut self) {
        let Some(client) = self.0.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if client.batch_execute("ROLLBACK").await.is_err() {
                        drop(Object::take(client));
                    }
                });
            }
            Err(_) => drop(Object::take(client)),
        }
    }
}
