//! Open sessions by last activity, so the server can end the ones idle for too long without
//! scanning every session: "open and last active before T" is one range of `open_sessions`.
//! A session enters it when it is created, moves with its activity, and leaves it when it is
//! ended or deleted. An ended session stays ended: later activity does not reopen it.
//! Like the listing, entries are keyed by the [`bucket`] of the activity (see `activity.rs`),
//! and the sessions of the bucket a cutoff falls in are checked against their records.

use redb::{ReadableTable, WriteTransaction};

use crate::Result;
use crate::activity::{bucket, bucket_after, listed_record};
use crate::model::Access;
use crate::model::{Timestamp, validate_id};
use crate::record::SessionRecord;
use crate::sessions::read_session_record;
use crate::store::{Sessions, wait};
use crate::tables::{OPEN_SESSIONS, SESSIONS};

/// Lists a new session as open.
pub(crate) fn open(txn: &WriteTransaction, tenant: &str, session_id: &str, at: u64) -> Result<()> {
    txn.open_table(OPEN_SESSIONS)?
        .insert((bucket(at), tenant, session_id), ())?;
    Ok(())
}

/// Moves an open session's entry to its new activity time; an ended one stays out.
pub(crate) fn touch(
    txn: &WriteTransaction,
    tenant: &str,
    session_id: &str,
    from: u64,
    to: u64,
) -> Result<()> {
    let mut open = txn.open_table(OPEN_SESSIONS)?;
    if open.remove((bucket(from), tenant, session_id))?.is_some() {
        open.insert((bucket(to), tenant, session_id), ())?;
    }
    Ok(())
}

/// Takes a session out of the open ones (it was ended or deleted).
pub(crate) fn close(
    txn: &WriteTransaction,
    tenant: &str,
    session_id: &str,
    record: &SessionRecord,
) -> Result<()> {
    txn.open_table(OPEN_SESSIONS)?
        .remove((bucket(record.updated_at), tenant, session_id))?;
    Ok(())
}

impl Sessions<'_> {
    /// Takes up to `limit` open sessions last active before `cutoff` out of the open ones,
    /// oldest first, and returns them as `(tenant, session_id)`: the caller ends them. Taken
    /// in one commit, so two callers never end the same session.
    pub async fn take_idle_sessions(
        self,
        cutoff: Timestamp,
        limit: usize,
    ) -> Result<Vec<(String, String)>> {
        if let Some(backend) = self.store.backend() {
            return backend.sessions().take_idle_sessions(cutoff, limit).await;
        }
        self.store
            .write(move |txn| take(txn, cutoff.as_micros(), limit))
            .await
    }

    /// Marks a session ended: it leaves the open ones. Harmless for an unknown or ended one.
    pub async fn end_session_activity(self, access: &Access, session_id: &str) -> Result<()> {
        if let Some(backend) = self.store.backend() {
            return backend
                .sessions()
                .end_session_activity(access, session_id)
                .await;
        }
        access.validate()?;
        validate_id("session_id", session_id)?;
        let (access, session_id) = (access.clone(), session_id.to_owned());
        self.store
            .write(move |txn| {
                let sessions = txn.open_table(SESSIONS)?;
                let record = read_session_record(&sessions, &access, &session_id)?;
                match record {
                    Some(record) => close(txn, access.tenant(), &session_id, &record),
                    None => Ok(()),
                }
            })
            .await
    }

    /// The last activity of the open session that has been idle longest.
    pub fn oldest_open_activity(self) -> Result<Option<Timestamp>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.sessions().oldest_open_activity());
        }
        let txn = self.store.begin_read()?;
        let oldest = oldest(&txn.open_table(OPEN_SESSIONS)?, &txn.open_table(SESSIONS)?)?;
        Ok(oldest.map(Timestamp::from_micros))
    }
}

/// Takes up to `limit` open sessions last active before `cutoff` out of the open ones,
/// oldest first (ties by tenant and id), as `(tenant, session_id)`.
pub(crate) fn take(
    txn: &WriteTransaction,
    cutoff: u64,
    limit: usize,
) -> Result<Vec<(String, String)>> {
    let mut open = txn.open_table(OPEN_SESSIONS)?;
    let sessions = txn.open_table(SESSIONS)?;
    // Whole buckets, oldest first, until they hold `limit` sessions idle since before the
    // cutoff; then the oldest `limit` of those by their records.
    let mut taken = Vec::new();
    let mut last_bucket = None;
    for entry in open.range(..(bucket_after(cutoff), "", ""))? {
        let (key, _) = entry?;
        let (at, tenant, session_id) = key.value();
        if last_bucket != Some(at) && taken.len() >= limit {
            break;
        }
        last_bucket = Some(at);
        let record = listed_record(&sessions, tenant, session_id, "open sessions")?;
        // Only the cutoff's own bucket can hold sessions active after it.
        if record.updated_at < cutoff {
            taken.push((
                record.updated_at,
                at,
                tenant.to_owned(),
                session_id.to_owned(),
            ));
        }
    }
    taken.sort_unstable();
    taken.truncate(limit);
    for (_, at, tenant, session_id) in &taken {
        open.remove((*at, tenant.as_str(), session_id.as_str()))?;
    }
    Ok(taken
        .into_iter()
        .map(|(_, _, tenant, session_id)| (tenant, session_id))
        .collect())
}

/// The last activity of the open session idle longest: the earliest in the first bucket.
pub(crate) fn oldest(
    open: &impl ReadableTable<(u64, &'static str, &'static str), ()>,
    sessions: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
) -> Result<Option<u64>> {
    let mut oldest: Option<u64> = None;
    let mut first_bucket = None;
    for entry in open.iter()? {
        let (key, _) = entry?;
        let (at, tenant, session_id) = key.value();
        if *first_bucket.get_or_insert(at) != at {
            break;
        }
        let record = listed_record(sessions, tenant, session_id, "open sessions")?;
        oldest = Some(oldest.map_or(record.updated_at, |o| o.min(record.updated_at)));
    }
    Ok(oldest)
}

/// Format 5 keys the open sessions by bucket (see `activity::key_by_bucket`).
pub(crate) fn key_by_bucket(txn: &WriteTransaction) -> Result<()> {
    let mut open = txn.open_table(OPEN_SESSIONS)?;
    let mut exact = Vec::new();
    for entry in open.iter()? {
        let (key, _) = entry?;
        let (at, tenant, session_id) = key.value();
        if bucket(at) != at {
            exact.push((at, tenant.to_owned(), session_id.to_owned()));
        }
    }
    for (at, tenant, session_id) in exact {
        open.remove((at, tenant.as_str(), session_id.as_str()))?;
        open.insert((bucket(at), tenant.as_str(), session_id.as_str()), ())?;
    }
    Ok(())
}
