//! Long-term memories, session memories and episodes (what removes them is the eraser's).

use super::BoxFuture;
use crate::Result;
use crate::episodes::Episode;
use crate::memories::{Memory, OrphanedCitation};
use crate::model::Access;
use crate::session_memory::SessionMemory;
use crate::snapshot::SessionVersion;
use crate::store::Store;

/// Long-term memories, session memories and episodes: [`Store::memories`] answered by a
/// backend. Each method's contract is the handle's method of the same name
/// ([`crate::Memories`]). A filter (`keep`) is borrowed where the handle's is generic; as
/// there, `limit` counts only what it keeps.
pub trait MemoryBackend: Send + Sync {
    /// [`crate::Memories::put_memory`].
    fn put_memory<'a>(&'a self, memory: Memory, sources: &'a Access) -> BoxFuture<'a, Result<u64>>;

    /// [`crate::Memories::memories_citing`].
    fn memories_citing<'a>(
        &'a self,
        tenant: &'a str,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<u64>>>;

    /// [`crate::Memories::orphaned_citations`]: every tenant's.
    fn orphaned_citations(&self) -> BoxFuture<'_, Result<Vec<OrphanedCitation>>>;

    /// [`crate::Memories::memory`].
    fn memory<'a>(&'a self, tenant: &'a str, id: u64) -> BoxFuture<'a, Result<Option<Memory>>>;

    /// [`crate::Memories::memory_by_key`].
    fn memory_by_key<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        agent_id: Option<&'a str>,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Memory>>>;

    /// [`crate::Memories::user_memories`].
    fn user_memories<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Memory>>>;

    /// [`crate::Memories::user_memories_page`].
    fn user_memories_page<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        after: Option<u64>,
        limit: usize,
        keep: &'a (dyn Fn(&Memory) -> bool + Sync),
    ) -> BoxFuture<'a, Result<Vec<Memory>>>;

    /// [`crate::Memories::memories_after`]: every tenant's.
    fn memories_after(&self, after: u64, limit: usize) -> BoxFuture<'_, Result<Vec<Memory>>>;

    /// [`crate::Memories::session_memory`].
    fn session_memory<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        agent_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SessionMemory>>>;

    /// [`crate::Memories::put_session_memory`].
    fn put_session_memory<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        agent_id: &'a str,
        memory: SessionMemory,
        merged: (&'a str, SessionVersion),
    ) -> BoxFuture<'a, Result<()>>;

    /// [`crate::Memories::put_episode`].
    fn put_episode(&self, episode: Episode) -> BoxFuture<'_, Result<u64>>;

    /// [`crate::Memories::episode`].
    fn episode<'a>(&'a self, tenant: &'a str, id: u64) -> BoxFuture<'a, Result<Option<Episode>>>;

    /// [`crate::Memories::user_episodes`].
    fn user_episodes<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Episode>>>;

    /// [`crate::Memories::recent_episodes`].
    fn recent_episodes<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        task_type: &'a str,
        limit: usize,
        keep: &'a (dyn Fn(&Episode) -> bool + Sync),
    ) -> BoxFuture<'a, Result<Vec<Episode>>>;
}

/// The redb store as a memory backend. Its reads run on the blocking pool ([`Store::read`]),
/// as its callers run them, except the filtered pages: a borrowed filter cannot move to the
/// blocking pool, so those run where they are awaited (they are short reads, and their
/// callers run them so today).
impl MemoryBackend for Store {
    fn put_memory<'a>(&'a self, memory: Memory, sources: &'a Access) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.memories().put_memory(memory, sources))
    }

    fn memories_citing<'a>(
        &'a self,
        tenant: &'a str,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<u64>>> {
        let (tenant, session_id) = (tenant.to_owned(), session_id.to_owned());
        Box::pin(self.read(move |store| store.memories().memories_citing(&tenant, &session_id)))
    }

    fn orphaned_citations(&self) -> BoxFuture<'_, Result<Vec<OrphanedCitation>>> {
        Box::pin(self.read(|store| store.memories().orphaned_citations()))
    }

    fn memory<'a>(&'a self, tenant: &'a str, id: u64) -> BoxFuture<'a, Result<Option<Memory>>> {
        let tenant = tenant.to_owned();
        Box::pin(self.read(move |store| store.memories().memory(&tenant, id)))
    }

    fn memory_by_key<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        agent_id: Option<&'a str>,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Memory>>> {
        let (tenant, user_id) = (tenant.to_owned(), user_id.to_owned());
        let (agent_id, key) = (agent_id.map(str::to_owned), key.to_owned());
        Box::pin(self.read(move |store| {
            store
                .memories()
                .memory_by_key(&tenant, &user_id, agent_id.as_deref(), &key)
        }))
    }

    fn user_memories<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Memory>>> {
        let (tenant, user_id) = (tenant.to_owned(), user_id.to_owned());
        Box::pin(self.read(move |store| store.memories().user_memories(&tenant, &user_id)))
    }

    fn user_memories_page<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        after: Option<u64>,
        limit: usize,
        keep: &'a (dyn Fn(&Memory) -> bool + Sync),
    ) -> BoxFuture<'a, Result<Vec<Memory>>> {
        Box::pin(async move {
            self.memories()
                .user_memories_page(tenant, user_id, after, limit, keep)
        })
    }

    fn memories_after(&self, after: u64, limit: usize) -> BoxFuture<'_, Result<Vec<Memory>>> {
        Box::pin(self.read(move |store| store.memories().memories_after(after, limit)))
    }

    fn session_memory<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        agent_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<SessionMemory>>> {
        let (tenant, user_id, agent_id) =
            (tenant.to_owned(), user_id.to_owned(), agent_id.to_owned());
        Box::pin(self.read(move |store| {
            store
                .memories()
                .session_memory(&tenant, &user_id, &agent_id)
        }))
    }

    fn put_session_memory<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        agent_id: &'a str,
        memory: SessionMemory,
        merged: (&'a str, SessionVersion),
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(
            self.memories()
                .put_session_memory(tenant, user_id, agent_id, memory, merged),
        )
    }

    fn put_episode(&self, episode: Episode) -> BoxFuture<'_, Result<u64>> {
        Box::pin(self.memories().put_episode(episode))
    }

    fn episode<'a>(&'a self, tenant: &'a str, id: u64) -> BoxFuture<'a, Result<Option<Episode>>> {
        let tenant = tenant.to_owned();
        Box::pin(self.read(move |store| store.memories().episode(&tenant, id)))
    }

    fn user_episodes<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Episode>>> {
        let (tenant, user_id) = (tenant.to_owned(), user_id.to_owned());
        Box::pin(self.read(move |store| store.memories().user_episodes(&tenant, &user_id)))
    }

    fn recent_episodes<'a>(
        &'a self,
        tenant: &'a str,
        user_id: &'a str,
        task_type: &'a str,
        limit: usize,
        keep: &'a (dyn Fn(&Episode) -> bool + Sync),
    ) -> BoxFuture<'a, Result<Vec<Episode>>> {
        Box::pin(async move {
            self.memories()
                .recent_episodes(tenant, user_id, task_type, limit, keep)
        })
    }
}
