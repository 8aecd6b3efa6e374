//! Runs (agent executions) of a session, with the semantics of the redb store's
//! `Sessions::record_run` and `Sessions::runs`: the same checks, run ids unique per session,
//! recording order kept, another user's session not found.

use memlayer_store::{Access, NewRun, Run, RunStatus, StoreError, Timestamp, metadata_to_text};
use tokio_postgres::Row;

use crate::seal::{DataKey, Field, Place};
use crate::sessions::{
    WITH_KEY, key_from_row, locked_session_key, metadata_from_bytes, micros, unsigned,
};
use crate::{PgStore, PostgresError, Result};

impl PgStore {
    /// Records an agent execution in a session, after its runs so far; a run id in use in
    /// the session is a [`StoreError::Conflict`]. Counts as activity. Its texts are sealed
    /// for its position under the session's data key.
    pub async fn record_run(&self, access: &Access, session_id: &str, run: NewRun) -> Result<Run> {
        run.check(access, session_id)?;
        let tenant = access.tenant();
        let run_id = run
            .run_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let now = Timestamp::now();
        let created_at = micros(now)?;
        let mut client = self.connection().await?;
        let txn = client.transaction().await?;
        // The row lock keeps the session's other runs out until the commit: positions stay
        // dense, and the id check below holds.
        let Some((session, key)) = locked_session_key(
            &txn,
            "SELECT run_count, key_id FROM sessions
             WHERE tenant = $1 AND session_id = $2 AND ($3::text IS NULL OR user_id = $3)
             FOR UPDATE",
            access,
            session_id,
        )
        .await?
        else {
            return Err(StoreError::session_not_found(session_id).into());
        };
        let taken = txn
            .query_opt(
                "SELECT 1 FROM runs WHERE tenant = $1 AND session_id = $2 AND run_id = $3",
                &[&tenant, &session_id, &run_id],
            )
            .await?;
        if taken.is_some() {
            return Err(StoreError::run_id_taken(&run_id, session_id).into());
        }
        let position: i64 = session.get("run_count");
        let index = unsigned(position)?;
        let place = |field| Place {
            tenant,
            session_id,
            index,
            field,
        };
        let seal_optional = |field, text: &Option<String>| {
            text.as_ref()
                .map(|text| key.seal(place(field), text.as_bytes()))
                .transpose()
        };
        let tool_calls = serde_json::to_string(&run.tool_calls).expect("JSON values serialise");
        txn.execute(
            "INSERT INTO runs (tenant, session_id, position, run_id, status, content, tool_calls,
                               error, metadata, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            &[
                &tenant,
                &session_id,
                &position,
                &run_id,
                &status_code(run.status),
                &seal_optional(Field::RunContent, &run.content)?,
                &key.seal(place(Field::RunToolCalls), tool_calls.as_bytes())?,
                &seal_optional(Field::RunError, &run.error)?,
                &key.seal(
                    place(Field::RunMetadata),
                    metadata_to_text(&run.metadata).as_bytes(),
                )?,
                &created_at,
            ],
        )
        .await?;
        txn.execute(
            "UPDATE sessions
             SET run_count = run_count + 1, updated_at = greatest(updated_at, $3)
             WHERE tenant = $1 AND session_id = $2",
            &[&tenant, &session_id, &created_at],
        )
        .await?;
        txn.commit().await?;
        Ok(Run {
            run_id,
            status: run.status,
            content: run.content,
            tool_calls: run.tool_calls,
            error: run.error,
            metadata: run.metadata,
            created_at: now,
            redacted: false,
        })
    }

    /// Up to `limit` runs of a session in the order they were recorded, from the `from`th
    /// (0-based) on. Runs are only ever removed with their session, so a run's position never
    /// changes: the next page starts `from` plus the runs returned. One statement.
    pub async fn runs(
        &self,
        access: &Access,
        session_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Run>> {
        access.check_session(session_id)?;
        let tenant = access.tenant();
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let client = self.connection().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT s.key_id, k.key, r.position, r.run_id, r.status, r.content,
                            r.tool_calls, r.error, r.metadata, r.created_at, r.redacted
                     FROM {WITH_KEY}
                     LEFT JOIN LATERAL (
                         SELECT * FROM runs
                         WHERE runs.tenant = s.tenant AND runs.session_id = s.session_id
                           AND runs.position >= $4
                         ORDER BY runs.position
                         LIMIT $5
                     ) r ON true
                     WHERE s.tenant = $1 AND s.session_id = $2
                       AND ($3::text IS NULL OR s.user_id = $3)
                     ORDER BY r.position"
                ),
                &[&tenant, &session_id, &access.user(), &from, &limit],
            )
            .await?;
        let Some(first) = rows.first() else {
            return Err(StoreError::session_not_found(session_id).into());
        };
        let key = key_from_row(first)?;
        rows.iter()
            .filter(|row| row.get::<_, Option<i64>>("position").is_some())
            .map(|row| run_from_row(&key, tenant, session_id, row))
            .collect()
    }
}

/// The run in `row`, opened.
fn run_from_row(key: &DataKey, tenant: &str, session_id: &str, row: &Row) -> Result<Run> {
    let position = unsigned(row.get("position"))?;
    let open = |field, column: &str| -> Result<Option<Vec<u8>>> {
        row.get::<_, Option<&[u8]>>(column)
            .map(|sealed| {
                let place = Place {
                    tenant,
                    session_id,
                    index: position,
                    field,
                };
                key.open(place, sealed)
            })
            .transpose()
    };
    let text = |bytes: Option<Vec<u8>>| {
        bytes
            .map(|bytes| {
                String::from_utf8(bytes).map_err(|err| PostgresError::Corrupted {
                    what: "run",
                    detail: format!("text of run {position} is not UTF-8: {err}"),
                })
            })
            .transpose()
    };
    let tool_calls = open(Field::RunToolCalls, "tool_calls")?.unwrap_or_default();
    let metadata = open(Field::RunMetadata, "metadata")?.unwrap_or_default();
    Ok(Run {
        run_id: row.get("run_id"),
        status: status_from_code(row.get("status"))?,
        content: text(open(Field::RunContent, "content")?)?,
        tool_calls: serde_json::from_slice(&tool_calls).map_err(|err| {
            PostgresError::Corrupted {
                what: "run",
                detail: format!("tool calls of run {position}: {err}"),
            }
        })?,
        error: text(open(Field::RunError, "error")?)?,
        metadata: metadata_from_bytes(&metadata)?,
        created_at: Timestamp::from_micros(unsigned(row.get("created_at"))?),
        redacted: row.get("redacted"),
    })
}

/// Run statuses as stored; never renumber.
fn status_code(status: RunStatus) -> i16 {
    match status {
        RunStatus::Running => 0,
        RunStatus::Completed => 1,
        RunStatus::Failed => 2,
        RunStatus::Cancelled => 3,
    }
}

fn status_from_code(code: i16) -> Result<RunStatus> {
    Ok(match code {
        0 => RunStatus::Running,
        1 => RunStatus::Completed,
        2 => RunStatus::Failed,
        3 => RunStatus::Cancelled,
        other => {
            return Err(PostgresError::Corrupted {
                what: "run",
                detail: format!("unknown status {other}"),
            });
        }
    })
}
