//! A session's rolling summary, with the semantics of the redb store's `Sessions::summary`
//! and `Sessions::save_summary`: the same checks, the version check that keeps a summary of
//! a changed session out, and the rule that a summary never moves the checkpoint back.

use memlayer_store::{Access, SessionVersion, StoreError, StoredSummary, Timestamp};

use tokio_postgres::Row;

use crate::seal::{DataKey, Field, Place};
use crate::sessions::{WITH_KEY, key_from_row, locked_session_key, micros, unsigned};
use crate::{PgStore, PostgresError, Result};

impl PgStore {
    /// The session's rolling summary, if one was saved. One statement checks the session
    /// and reads the summary.
    pub async fn summary(
        &self,
        access: &Access,
        session_id: &str,
    ) -> Result<Option<StoredSummary>> {
        access.check_session(session_id)?;
        let tenant = access.tenant();
        let client = self.connection().await?;
        let Some(row) = client
            .query_opt(
                &format!(
                    "SELECT s.key_id, k.key, m.text, m.first_index, m.last_index, m.created_at
                     FROM {WITH_KEY}
                     LEFT JOIN summaries m ON m.tenant = s.tenant AND m.session_id = s.session_id
                     WHERE s.tenant = $1 AND s.session_id = $2
                       AND ($3::text IS NULL OR s.user_id = $3)"
                ),
                &[&tenant, &session_id, &access.user()],
            )
            .await?
        else {
            return Err(StoreError::session_not_found(session_id).into());
        };
        summary_from_row(&key_from_row(&row)?, tenant, session_id, &row)
    }

    /// Replaces the session's rolling summary with one covering `first_index..=last_index`,
    /// unless the current one (since the last clear) already reaches further. `read` is the
    /// version ([`PgStore::version`]) the summary was computed from; if the session changed
    /// since, [`StoreError::SessionChanged`] and nothing is saved. One transaction, under the
    /// session's row lock.
    pub async fn save_summary(
        &self,
        access: &Access,
        session_id: &str,
        read: SessionVersion,
        text: String,
        first_index: u64,
        last_index: u64,
    ) -> Result<()> {
        StoredSummary::check_new(access, session_id, &text)?;
        let tenant = access.tenant();
        let created_at = micros(Timestamp::now())?;
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        let Some((row, key)) = locked_session_key(
            &txn,
            "SELECT s.sid, s.erased, s.message_count, s.load_from, s.key_id,
                    m.first_index, m.last_index
             FROM sessions s
             LEFT JOIN summaries m ON m.tenant = s.tenant AND m.session_id = s.session_id
             WHERE s.tenant = $1 AND s.session_id = $2 AND ($3::text IS NULL OR s.user_id = $3)
             FOR UPDATE OF s",
            access,
            session_id,
        )
        .await?
        else {
            return Err(StoreError::session_not_found(session_id).into());
        };
        let version = SessionVersion::new(unsigned(row.get("sid"))?, unsigned(row.get("erased"))?);
        if version != read {
            return Err(StoreError::SessionChanged {
                session_id: session_id.to_owned(),
            }
            .into());
        }
        StoredSummary::check_range(first_index, last_index, unsigned(row.get("message_count"))?)?;
        let current = match (
            row.get::<_, Option<i64>>("first_index"),
            row.get::<_, Option<i64>>("last_index"),
        ) {
            (Some(first), Some(last)) => Some((unsigned(first)?, unsigned(last)?)),
            _ => None,
        };
        if StoredSummary::keeps_current(current, unsigned(row.get("load_from"))?, last_index) {
            return Ok(());
        }
        let place = Place {
            tenant,
            session_id,
            index: last_index,
            field: Field::Summary,
        };
        let sealed = key.seal(place, text.as_bytes())?;
        let (first, last) = (
            i64::try_from(first_index).unwrap_or(i64::MAX),
            i64::try_from(last_index).unwrap_or(i64::MAX),
        );
        txn.execute(
            "INSERT INTO summaries (tenant, session_id, text, first_index, last_index, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (tenant, session_id) DO UPDATE
             SET text = excluded.text, first_index = excluded.first_index,
                 last_index = excluded.last_index, created_at = excluded.created_at",
            &[&tenant, &session_id, &sealed, &first, &last, &created_at],
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }
}

/// The summary in `row` (columns `text`, `first_index`, `last_index`, `created_at` of
/// `summaries`, all null when the session has none), opened with the session's `key`.
pub(crate) fn summary_from_row(
    key: &DataKey,
    tenant: &str,
    session_id: &str,
    row: &Row,
) -> Result<Option<StoredSummary>> {
    let Some(sealed) = row.get::<_, Option<&[u8]>>("text") else {
        return Ok(None);
    };
    let last_index = unsigned(row.get("last_index"))?;
    let place = Place {
        tenant,
        session_id,
        index: last_index,
        field: Field::Summary,
    };
    let text = key.open(place, sealed)?;
    Ok(Some(StoredSummary {
        text: String::from_utf8(text).map_err(|err| PostgresError::Corrupted {
            what: "summary",
            detail: format!("not UTF-8: {err}"),
        })?,
        first_index: unsigned(row.get("first_index"))?,
        last_index,
        created_at: Timestamp::from_micros(unsigned(row.get("created_at"))?),
    }))
}
