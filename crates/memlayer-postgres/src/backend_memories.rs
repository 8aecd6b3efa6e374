//! `PgStore` as a [`MemoryBackend`]: each method answers with its inherent method of the same
//! name (`memories.rs`, `session_memory.rs`, `episodes.rs`), caller mistakes as the very
//! [`StoreError`] they carry.

use memlayer_store::{
    Access, BoxFuture, Episode, Memory, MemoryBackend, OrphanedCitation, SessionMemory,
    SessionVersion,
};

use crate::PgStore;
use crate::backend::store;

impl MemoryBackend for PgStore {
    fn put_memory<'a>(
        &'a self,
        memory: Memory,
        sources: &'a Access,
    ) -> BoxFuture<'a, memlayer_store::Result<u64>> {
        Box::pin(async move { store(self.put_memory(memory, sources).await) })
    }

    fn memories_citing<'a>(
        &'a self,
        tenant: &'a str,
        session_id: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<u64>>> {
        Box::pin(async move { store(self.memories_citing(tenant, session_id).await) })
    }

    fn orphaned_citations(&self) -> BoxFuture<'_, memlayer_store::Result<Vec<OrphanedCitation>>> {
        Box::pin(async move { store(self.orphaned_citations().await) })
    }

    fn memory<'a>(
        &'a self,
        tenant: &'a str,
        id: u64,
    ) -> BoxFuture<'a, memlayer_store::Result<Option<Memory>>> {
        Box::pin(async move { store(self.memory(tenant, id).await) })
    }

    fn memory_by_key<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        agent_id: Option<&'a str>,
        key: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<Option<Memory>>> {
        Box::pin(async move { store(self.memory_by_key(tenant, user_id, agent_id, key).await) })
    }

    fn user_memories<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<Memory>>> {
        Box::pin(async move { store(self.user_memories(tenant, user_id).await) })
    }

    fn user_memories_page<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        after: Option<u64>,
        limit: usize,
        keep: &'a (dyn Fn(&Memory) -> bool + Sync),
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<Memory>>> {
        Box::pin(async move {
            store(
                self.user_memories_page(tenant, user_id, after, limit, keep)
                    .await,
            )
        })
    }

    fn memories_after(
        &self,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'_, memlayer_store::Result<Vec<Memory>>> {
        Box::pin(async move { store(self.memories_after(after, limit).await) })
    }

    fn session_memory<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        agent_id: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<Option<SessionMemory>>> {
        Box::pin(async move { store(self.session_memory(tenant, user_id, agent_id).await) })
    }

    fn put_session_memory<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        agent_id: &'a str,
        memory: SessionMemory,
        merged: (&'a str, SessionVersion),
    ) -> BoxFuture<'a, memlayer_store::Result<()>> {
        Box::pin(async move {
            store(
                self.put_session_memory(tenant, user_id, agent_id, memory, merged)
                    .await,
            )
        })
    }

    fn put_episode(&self, episode: Episode) -> BoxFuture<'_, memlayer_store::Result<u64>> {
        Box::pin(async move { store(self.put_episode(episode).await) })
    }

    fn episode<'a>(
        &'a self,
        tenant: &'a str,
        id: u64,
    ) -> BoxFuture<'a, memlayer_store::Result<Option<Episode>>> {
        Box::pin(async move { store(self.episode(tenant, id).await) })
    }

    fn user_episodes<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<Episode>>> {
        Box::pin(async move { store(self.user_episodes(tenant, user_id).await) })
    }

    fn recent_episodes<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        task_type: &'a str,
        limit: usize,
        keep: &'a (dyn Fn(&Episode) -> bool + Sync),
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<Episode>>> {
        Box::pin(async move {
            store(
                self.recent_episodes(tenant, user_id, task_type, limit, keep)
                    .await,
            )
        })
    }
}
