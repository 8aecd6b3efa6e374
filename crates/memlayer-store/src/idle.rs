//! Open sessions by last activity, so the server can end the ones idle for too long without
//! scanning every session: "open and last active before T" is one range of `open_sessions`.
//! A session enters it when it is created, moves with its activity, and leaves it when it is
//! ended or deleted. An ended session stays ended: later activity does not reopen it.

use redb::{ReadableTable, WriteTransaction};

use crate::Result;
use crate::model::Access;
use crate::model::{Timestamp, validate_id};
use crate::record::SessionRecord;
use crate::sessions::read_session_record;
use crate::store::{Sessions, wait};
use crate::tables::{OPEN_SESSIONS, SESSIONS};

/// Lists a new session as open.
pub(crate) fn open(txn: &WriteTransaction, tenant: &str, session_id: &str, at: u64) -> Result<()> {
    txn.open_table(OPEN_SESSIONS)?
        .insert((at, tenant, session_id), ())?;
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
    if open.remove((from, tenant, session_id))?.is_some() {
        open.insert((to, tenant, session_id), ())?;
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
        .remove((record.updated_at, tenant, session_id))?;
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
            .write(move |txn| {
                let mut open = txn.open_table(OPEN_SESSIONS)?;
                let mut taken = Vec::new();
                for entry in open.range(..(cutoff.as_micros(), "", ""))?.take(limit) {
                    let (key, _) = entry?;
                    let (at, tenant, session_id) = key.value();
                    taken.push((at, tenant.to_owned(), session_id.to_owned()));
                }
                for (at, tenant, session_id) in &taken {
                    open.remove((*at, tenant.as_str(), session_id.as_str()))?;
                }
                Ok(taken
                    .into_iter()
                    .map(|(_, tenant, session_id)| (tenant, session_id))
                    .collect())
            })
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
        let open = txn.open_table(OPEN_SESSIONS)?;
        Ok(open
            .first()?
            .map(|(key, _)| Timestamp::from_micros(key.value().0)))
    }
}
