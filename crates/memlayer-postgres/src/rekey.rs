//! Erasing one message: the session moves to a new data key.
//!
//! Deleting the message's row is not enough (see `erasure`): its sealed content stays in
//! dead tuples, WAL and full-page images, and the session's key, which still opens the rest
//! of the conversation, opens it too. So [`PgStore::erase_message`] deletes the message and
//! what was made from it, then, in the same transaction, re-seals everything of the session
//! that remains (its metadata, messages, vectors, runs and summary) under a new key and
//! destroys the old one. After the next reclaim no copy of the erased content can be opened.
//!
//! The session's row lock orders it with every writer that seals under the session's key
//! (appends check the key in the statement that takes the row; runs, summaries and stored
//! vectors lock the row, then read the key in a later statement), so nothing is sealed under
//! the old key after the re-key commits.
//!
//! The idempotency digests are keyed with the session's key (`idempotency_digest`), so
//! the old rows' digests mean nothing once it is destroyed. They cannot be keyed again
//! without the requests, so the re-key erases every digest of the session: a replay under
//! one of its idempotency keys answers the first result whatever its body, as the redb store
//! does for the erased message's append only.

use memlayer_store::{Access, MessageErased, StoreError};
use tokio_postgres::Transaction;
use tokio_postgres::types::ToSql;

use crate::erasure::{delete_sealed_rows_in, destroy_keys, new_key};
use crate::seal::{DataKey, Field, Place};
use crate::session_memory::DROP_SESSION_MEMORIES;
use crate::sessions::{bigint, locked_session_key, unsigned};
use crate::{PgStore, Result};

/// How many rows of a table the re-key reads, re-seals and writes back per statement.
const RESEAL_BATCH: i64 = 512;

/// A table whose rows hold values sealed under their session's key.
struct SealedTable {
    table: &'static str,
    /// The column holding the index each value is sealed for.
    index: &'static str,
    /// The sealed columns (NULL where a value is absent), and what each holds.
    columns: &'static [(&'static str, Field)],
    /// What every row is written back holding instead of its values, column by column; `None`
    /// keeps the values.
    replaced_by: Option<&'static [Option<&'static [u8]>]>,
}

const MESSAGES: SealedTable = SealedTable {
    table: "messages",
    index: "idx",
    columns: &[("content", Field::Content), ("metadata", Field::Metadata)],
    replaced_by: None,
};

const VECTORS: SealedTable = SealedTable {
    table: "embedding_vectors",
    index: "idx",
    columns: &[("components", Field::Vector)],
    replaced_by: None,
};

const RUNS: SealedTable = SealedTable {
    table: "runs",
    index: "position",
    columns: &[
        ("content", Field::RunContent),
        ("tool_calls", Field::RunToolCalls),
        ("error", Field::RunError),
        ("metadata", Field::RunMetadata),
    ],
    // Redacted: no free text (see `memlayer_store::Run::redacted`); the caller marks them.
    replaced_by: Some(&[None, Some(b"[]"), None, Some(b"{}")]),
};

const SUMMARY: SealedTable = SealedTable {
    table: "summaries",
    index: "last_index",
    columns: &[("text", Field::Summary)],
    replaced_by: None,
};

impl PgStore {
    /// Erases message `index` of a session with what was made from it, with the redb
    /// store's semantics ([`memlayer_store::Eraser::erase_message`]): its vector, the summary
    /// covering it, the session memories the session was merged into, its runs' free text
    /// and the idempotency digests; the session's `erased` count moves on, so what was read
    /// before cannot be saved after. Then the session moves to a new key (module
    /// documentation). One transaction; a retry after it committed finds the message gone
    /// and only redacts runs recorded since.
    pub async fn erase_message(
        &self,
        access: &Access,
        session_id: &str,
        index: u64,
    ) -> Result<MessageErased> {
        MessageErased::check_request(access, session_id, index)?;
        let tenant = access.tenant();
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        let Some((row, old_key)) = locked_session_key(
            &txn,
            "SELECT sid, user_id, key_id, metadata FROM sessions
             WHERE tenant = $1 AND session_id = $2 AND ($3::text IS NULL OR user_id = $3)
             FOR UPDATE",
            access,
            session_id,
        )
        .await?
        else {
            return Err(StoreError::session_not_found(session_id).into());
        };
        let user_id: String = row.get("user_id");
        let at = bigint(index);
        let place = [&tenant as &(dyn ToSql + Sync), &session_id, &at];
        let vector = txn
            .execute(
                "DELETE FROM embedding_vectors WHERE tenant = $1 AND session_id = $2 AND idx = $3",
                &place,
            )
            .await?
            > 0;
        let message = txn
            .execute(
                "DELETE FROM messages WHERE tenant = $1 AND session_id = $2 AND idx = $3",
                &place,
            )
            .await?
            > 0;
        let summary = txn
            .execute(
                "DELETE FROM summaries WHERE tenant = $1 AND session_id = $2
                   AND $3 BETWEEN first_index AND last_index",
                &place,
            )
            .await?
            > 0;
        let session_memories = delete_sealed_rows_in(
            &txn,
            tenant,
            DROP_SESSION_MEMORIES,
            &[&tenant, &user_id, &Some(session_id)],
        )
        .await?;
        let runs_redacted = txn
            .execute(
                "UPDATE runs SET redacted = true
                 WHERE tenant = $1 AND session_id = $2 AND NOT redacted",
                &[&tenant, &session_id],
            )
            .await?;
        let session = SessionRows {
            txn: &txn,
            tenant,
            session_id,
        };
        if message {
            let new_key = new_key(&txn, tenant).await?;
            session.reseal(&MESSAGES, &old_key, &new_key).await?;
            session.reseal(&VECTORS, &old_key, &new_key).await?;
            session.reseal(&RUNS, &old_key, &new_key).await?;
            session.reseal(&SUMMARY, &old_key, &new_key).await?;
            session
                .move_to(row.get("metadata"), &old_key, &new_key)
                .await?;
            destroy_keys(&txn, tenant, &[old_key.id]).await?;
        } else if runs_redacted > 0 {
            session.reseal(&RUNS, &old_key, &old_key).await?;
        }
        txn.commit().await?;
        // After the commit: until then the old key was the session's.
        self.known.forget(tenant, session_id);
        Ok(MessageErased {
            sid: unsigned(row.get("sid"))?,
            message,
            vector,
            summary,
            session_memories,
            runs_redacted,
        })
    }
}

/// One session's rows, in the re-keying transaction.
struct SessionRows<'a> {
    txn: &'a Transaction<'a>,
    tenant: &'a str,
    session_id: &'a str,
}

impl SessionRows<'_> {
    /// Opens every value of `table` in the session under `from` and writes it back sealed
    /// under `to`, in batches (or, for a table with `replaced_by`, writes that instead).
    async fn reseal(&self, table: &SealedTable, from: &DataKey, to: &DataKey) -> Result<()> {
        let columns: Vec<&str> = table.columns.iter().map(|(name, _)| *name).collect();
        let select = format!(
            "SELECT {index}, {columns} FROM {table}
             WHERE tenant = $1 AND session_id = $2 AND {index} > $3
             ORDER BY {index} LIMIT $4",
            index = table.index,
            columns = columns.join(", "),
            table = table.table,
        );
        let update = format!(
            "UPDATE {table} t SET {sets}
             FROM unnest($3::bigint[], {arrays}) AS u(at, {columns})
             WHERE t.tenant = $1 AND t.session_id = $2 AND t.{index} = u.at",
            table = table.table,
            index = table.index,
            sets = columns
                .iter()
                .map(|c| format!("{c} = u.{c}"))
                .collect::<Vec<_>>()
                .join(", "),
            arrays = (0..columns.len())
                .map(|n| format!("${}::bytea[]", n + 4))
                .collect::<Vec<_>>()
                .join(", "),
            columns = columns.join(", "),
        );
        let mut after = -1_i64;
        loop {
            let rows = self
                .txn
                .query(
                    &select,
                    &[&self.tenant, &self.session_id, &after, &RESEAL_BATCH],
                )
                .await?;
            let Some(last) = rows.last() else {
                return Ok(());
            };
            after = last.get(0);
            let mut indices = Vec::with_capacity(rows.len());
            let mut sealed: Vec<Vec<Option<Vec<u8>>>> =
                vec![Vec::with_capacity(rows.len()); columns.len()];
            for row in &rows {
                let at: i64 = row.get(0);
                let index = unsigned(at)?;
                indices.push(at);
                for (n, (_, field)) in table.columns.iter().enumerate() {
                    let place = |key: &DataKey, value: &[u8]| -> Result<Vec<u8>> {
                        key.seal(self.place(index, *field), value)
                    };
                    let value: Option<Vec<u8>> = if let Some(replaced_by) = table.replaced_by {
                        replaced_by[n].map(|plain| place(to, plain)).transpose()?
                    } else {
                        row.get::<_, Option<&[u8]>>(n + 1)
                            .map(|stored| {
                                let plain = from.open(self.place(index, *field), stored)?;
                                place(to, &plain)
                            })
                            .transpose()?
                    };
                    sealed[n].push(value);
                }
            }
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![&self.tenant, &self.session_id];
            params.push(&indices);
            params.extend(sealed.iter().map(|column| column as &(dyn ToSql + Sync)));
            self.txn.execute(&update, &params).await?;
            if rows.len() < RESEAL_BATCH as usize {
                return Ok(());
            }
        }
    }

    /// Re-seals the session's metadata (`sealed_metadata`, as read under the row lock) under
    /// `to` and makes `to` the session's key; the erasure counts as a change of the session
    /// (its `erased` moves on).
    async fn move_to(&self, sealed_metadata: &[u8], from: &DataKey, to: &DataKey) -> Result<()> {
        let place = self.place(0, Field::SessionMetadata);
        let metadata = to.seal(place, &from.open(place, sealed_metadata)?)?;
        self.txn
            .execute(
                "UPDATE sessions SET key_id = $3, metadata = $4, erased = erased + 1
                 WHERE tenant = $1 AND session_id = $2",
                &[&self.tenant, &self.session_id, &to.id, &metadata],
            )
            .await?;
        self.txn
            .execute(
                "UPDATE idempotency SET digest = NULL WHERE tenant = $1 AND session_id = $2",
                &[&self.tenant, &self.session_id],
            )
            .await?;
        Ok(())
    }

    fn place(&self, index: u64, field: Field) -> Place<'_> {
        Place {
            tenant: self.tenant,
            session_id: self.session_id,
            index,
            field,
        }
    }
}
