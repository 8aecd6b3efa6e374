//! `PgStore` as the eraser's backend ([`EraserBackend`]) and as a whole store's
//! ([`Backend`]): each eraser method answers with its inherent method of the same name
//! (`erasure.rs`, `rekey.rs`, `memories.rs`, `episodes.rs`, `session_memory.rs`, `jobs.rs`);
//! `compact` is [`PgStore::reclaim_destroyed_keys`].

use std::time::Duration;

use memlayer_store::{
    Access, Backend, BoxFuture, Citation, EraserBackend, FeedBackend, KeyBackend, MemoryBackend,
    MessageErased, SessionBackend, SessionDeleted, StoredJob, TenantBackend, Timestamp,
};
use serde_json::Value;

use crate::PgStore;
use crate::backend::store;

impl EraserBackend for PgStore {
    fn erase_message<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
        index: u64,
    ) -> BoxFuture<'a, memlayer_store::Result<MessageErased>> {
        Box::pin(async move { store(self.erase_message(access, session_id, index).await) })
    }

    fn delete_session<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<SessionDeleted>> {
        Box::pin(async move { store(self.delete_session(access, session_id).await) })
    }

    fn user_session_ids<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<String>>> {
        Box::pin(async move { store(self.user_session_ids(tenant, user_id).await) })
    }

    fn sessions_inactive_before<'a>(
        &'a self,
        tenant: &'a str,
        cutoff: Timestamp,
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<String>>> {
        Box::pin(async move { store(self.sessions_inactive_before(tenant, cutoff).await) })
    }

    fn forget_citation<'a>(
        &'a self,
        tenant: &'a str,
        id: u64,
        session_id: &'a str,
        index: Option<u64>,
    ) -> BoxFuture<'a, memlayer_store::Result<Citation>> {
        Box::pin(async move { store(self.forget_citation(tenant, id, session_id, index).await) })
    }

    fn delete_memory<'a>(
        &'a self,
        tenant: &'a str,
        id: u64,
    ) -> BoxFuture<'a, memlayer_store::Result<bool>> {
        Box::pin(async move { store(self.delete_memory(tenant, id).await) })
    }

    fn delete_episode<'a>(
        &'a self,
        tenant: &'a str,
        id: u64,
    ) -> BoxFuture<'a, memlayer_store::Result<bool>> {
        Box::pin(async move { store(self.delete_episode(tenant, id).await) })
    }

    fn delete_user_episodes<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        session_id: Option<&'a str>,
    ) -> BoxFuture<'a, memlayer_store::Result<u64>> {
        Box::pin(async move { store(self.delete_user_episodes(tenant, user_id, session_id).await) })
    }

    fn drop_session_memories<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        session_id: Option<&'a str>,
    ) -> BoxFuture<'a, memlayer_store::Result<u64>> {
        Box::pin(async move {
            store(
                self.drop_session_memories(tenant, user_id, session_id)
                    .await,
            )
        })
    }

    /// Reclaims the keys erasures destroyed; "anything moved" is "any key reclaimed".
    fn compact(&self) -> BoxFuture<'_, memlayer_store::Result<bool>> {
        Box::pin(async move { store(self.reclaim_destroyed_keys().await).map(|r| r.keys > 0) })
    }

    fn record_job(&self, document: Value) -> BoxFuture<'_, memlayer_store::Result<u64>> {
        Box::pin(async move { store(self.record_job(document).await) })
    }

    fn pending_job_count(&self) -> BoxFuture<'_, memlayer_store::Result<u64>> {
        Box::pin(async move { store(self.pending_job_count().await) })
    }

    fn pending_jobs(&self) -> BoxFuture<'_, memlayer_store::Result<Vec<StoredJob>>> {
        Box::pin(async move { store(self.pending_jobs().await) })
    }

    fn pending_job(&self, id: u64) -> BoxFuture<'_, memlayer_store::Result<Option<Value>>> {
        Box::pin(async move { store(self.pending_job(id).await) })
    }

    fn claim_job<'a>(
        &'a self,
        id: u64,
        holder: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, memlayer_store::Result<bool>> {
        Box::pin(async move { store(self.claim_job(id, holder, lease).await) })
    }

    fn finish_job<'a>(
        &'a self,
        id: u64,
        tenant: &'a str,
        receipt: Value,
    ) -> BoxFuture<'a, memlayer_store::Result<bool>> {
        Box::pin(async move { store(self.finish_job(id, tenant, receipt).await) })
    }

    fn receipts<'a>(
        &'a self,
        tenant: &'a str,
        limit: usize,
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<Value>>> {
        Box::pin(async move { store(self.receipts(tenant, limit).await) })
    }

    fn receipt<'a>(
        &'a self,
        tenant: &'a str,
        id: u64,
    ) -> BoxFuture<'a, memlayer_store::Result<Option<Value>>> {
        Box::pin(async move { store(self.receipt(tenant, id).await) })
    }
}

impl Backend for PgStore {
    fn sessions(&self) -> &dyn SessionBackend {
        self
    }

    fn tenants(&self) -> &dyn TenantBackend {
        self
    }

    fn keys(&self) -> &dyn KeyBackend {
        self
    }

    fn memories(&self) -> &dyn MemoryBackend {
        self
    }

    fn feed(&self) -> &dyn FeedBackend {
        self
    }

    fn eraser(&self) -> &dyn EraserBackend {
        self
    }

    fn commits(&self) -> tokio::sync::watch::Receiver<u64> {
        self.commits.subscribe()
    }

    fn check_ready(&self) -> BoxFuture<'_, memlayer_store::Result<()>> {
        Box::pin(async move { store(self.check_ready().await) })
    }

    fn shutdown(&self) {
        self.close();
    }
}
