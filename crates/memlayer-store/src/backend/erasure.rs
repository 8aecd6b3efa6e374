//! What removes text, and the erasure jobs' journal: [`crate::Eraser`] answered by a
//! backend. Only the erasure coordinator holds one, so the redb store implements it on its
//! [`Eraser`] (taken once per store), never on [`crate::Store`].
//!
//! [`EraserBackend::compact`] is where a backend makes erased bytes unrecoverable from its
//! files (redb rewrites its file; a database that never zeroes deleted rows destroys keys
//! and rewrites what held them); an erasure is acknowledged only after it.

use std::time::Duration;

use serde_json::Value;

use super::BoxFuture;
use crate::Result;
use crate::erasure::{MessageErased, StoredJob};
use crate::memories::Citation;
use crate::model::{Access, Timestamp};
use crate::sessions::SessionDeleted;
use crate::store::Eraser;

/// The eraser's operations; each method's contract is the [`crate::Eraser`] method of the
/// same name.
pub trait EraserBackend: Send + Sync {
    /// [`crate::Eraser::erase_message`].
    fn erase_message<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        index: u64,
    ) -> BoxFuture<'a, Result<MessageErased>>;

    /// [`crate::Eraser::delete_session`].
    fn delete_session<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<SessionDeleted>>;

    /// [`crate::Eraser::user_session_ids`].
    fn user_session_ids<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>>>;

    /// [`crate::Eraser::sessions_inactive_before`].
    fn sessions_inactive_before<'a>(
        &'a self,
        tenant: &'a str,
        cutoff: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<String>>>;

    /// [`crate::Eraser::forget_citation`].
    fn forget_citation<'a>(
        &'a self,
        tenant: &'a str,
        id: u64,
        session_id: &'a str,
        index: Option<u64>,
    ) -> BoxFuture<'a, Result<Citation>>;

    /// [`crate::Eraser::delete_memory`].
    fn delete_memory<'a>(&'a self, tenant: &'a str, id: u64) -> BoxFuture<'a, Result<bool>>;

    /// [`crate::Eraser::delete_episode`].
    fn delete_episode<'a>(&'a self, tenant: &'a str, id: u64) -> BoxFuture<'a, Result<bool>>;

    /// [`crate::Eraser::delete_user_episodes`].
    fn delete_user_episodes<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        session_id: Option<&'a str>,
    ) -> BoxFuture<'a, Result<u64>>;

    /// [`crate::Eraser::drop_session_memories`].
    fn drop_session_memories<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        session_id: Option<&'a str>,
    ) -> BoxFuture<'a, Result<u64>>;

    /// [`crate::Eraser::compact`].
    fn compact(&self) -> BoxFuture<'_, Result<bool>>;

    /// [`crate::Eraser::record_job`].
    fn record_job(&self, document: Value) -> BoxFuture<'_, Result<u64>>;

    /// [`crate::Eraser::pending_job_count`].
    fn pending_job_count(&self) -> BoxFuture<'_, Result<u64>>;

    /// [`crate::Eraser::pending_jobs`].
    fn pending_jobs(&self) -> BoxFuture<'_, Result<Vec<StoredJob>>>;

    /// [`crate::Eraser::pending_job`].
    fn pending_job(&self, id: u64) -> BoxFuture<'_, Result<Option<Value>>>;

    /// [`crate::Eraser::claim_job`].
    fn claim_job<'a>(
        &'a self,
        id: u64,
        holder: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool>>;

    /// [`crate::Eraser::finish_job`].
    fn finish_job<'a>(
        &'a self,
        id: u64,
        tenant: &'a str,
        receipt: Value,
    ) -> BoxFuture<'a, Result<bool>>;

    /// [`crate::Eraser::receipts`].
    fn receipts<'a>(&'a self, tenant: &'a str, limit: usize) -> BoxFuture<'a, Result<Vec<Value>>>;

    /// [`crate::Eraser::receipt`].
    fn receipt<'a>(&'a self, tenant: &'a str, id: u64) -> BoxFuture<'a, Result<Option<Value>>>;
}

/// The redb store's eraser; its reads and the compaction run on the blocking pool.
impl EraserBackend for Eraser {
    fn erase_message<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        index: u64,
    ) -> BoxFuture<'a, Result<MessageErased>> {
        Box::pin(Eraser::erase_message(self, access, session_id, index))
    }

    fn delete_session<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<SessionDeleted>> {
        Box::pin(Eraser::delete_session(self, access, session_id))
    }

    fn user_session_ids<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        let (eraser, tenant, user_id) = (self.clone(), tenant.to_owned(), user_id.to_owned());
        Box::pin(crate::blocking(move || {
            eraser.user_session_ids(&tenant, &user_id)
        }))
    }

    fn sessions_inactive_before<'a>(
        &'a self,
        tenant: &'a str,
        cutoff: Timestamp,
    ) -> BoxFuture<'a, Result<Vec<String>>> {
        let (eraser, tenant) = (self.clone(), tenant.to_owned());
        Box::pin(crate::blocking(move || {
            eraser.sessions_inactive_before(&tenant, cutoff)
        }))
    }

    fn forget_citation<'a>(
        &'a self,
        tenant: &'a str,
        id: u64,
        session_id: &'a str,
        index: Option<u64>,
    ) -> BoxFuture<'a, Result<Citation>> {
        Box::pin(Eraser::forget_citation(self, tenant, id, session_id, index))
    }

    fn delete_memory<'a>(&'a self, tenant: &'a str, id: u64) -> BoxFuture<'a, Result<bool>> {
        Box::pin(Eraser::delete_memory(self, tenant, id))
    }

    fn delete_episode<'a>(&'a self, tenant: &'a str, id: u64) -> BoxFuture<'a, Result<bool>> {
        Box::pin(Eraser::delete_episode(self, tenant, id))
    }

    fn delete_user_episodes<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        session_id: Option<&'a str>,
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(Eraser::delete_user_episodes(
            self, tenant, user_id, session_id,
        ))
    }

    fn drop_session_memories<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        session_id: Option<&'a str>,
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(Eraser::drop_session_memories(
            self, tenant, user_id, session_id,
        ))
    }

    fn compact(&self) -> BoxFuture<'_, Result<bool>> {
        let eraser = self.clone();
        Box::pin(crate::blocking(move || eraser.compact()))
    }

    fn record_job(&self, document: Value) -> BoxFuture<'_, Result<u64>> {
        Box::pin(Eraser::record_job(self, document))
    }

    fn pending_job_count(&self) -> BoxFuture<'_, Result<u64>> {
        let eraser = self.clone();
        Box::pin(crate::blocking(move || eraser.pending_job_count()))
    }

    fn pending_jobs(&self) -> BoxFuture<'_, Result<Vec<StoredJob>>> {
        let eraser = self.clone();
        Box::pin(crate::blocking(move || eraser.pending_jobs()))
    }

    fn pending_job(&self, id: u64) -> BoxFuture<'_, Result<Option<Value>>> {
        let eraser = self.clone();
        Box::pin(crate::blocking(move || eraser.pending_job(id)))
    }

    fn claim_job<'a>(
        &'a self,
        id: u64,
        holder: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(Eraser::claim_job(self, id, holder, lease))
    }

    fn finish_job<'a>(
        &'a self,
        id: u64,
        tenant: &'a str,
        receipt: Value,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(Eraser::finish_job(self, id, tenant, receipt))
    }

    fn receipts<'a>(&'a self, tenant: &'a str, limit: usize) -> BoxFuture<'a, Result<Vec<Value>>> {
        let (eraser, tenant) = (self.clone(), tenant.to_owned());
        Box::pin(crate::blocking(move || eraser.receipts(&tenant, limit)))
    }

    fn receipt<'a>(&'a self, tenant: &'a str, id: u64) -> BoxFuture<'a, Result<Option<Value>>> {
        let (eraser, tenant) = (self.clone(), tenant.to_owned());
        Box::pin(crate::blocking(move || eraser.receipt(&tenant, id)))
    }
}
