//! `PgStore` as the embedding feed's backend (`memlayer_store::FeedBackend`): each method
//! answers with its inherent method of the same name (src/embeddings.rs), errors as in
//! src/backend.rs.

use std::collections::BTreeSet;
use std::time::Duration;

use memlayer_store::{
    Access, BoxFuture, EmbeddingModel, FeedBackend, FollowedFeed, FollowerRecord, Message,
    MessageKey, PendingEmbedding, Session, SessionRef, StoredVector,
};

use crate::PgStore;
use crate::backend::store;

impl FeedBackend for PgStore {
    fn pending_embeddings(
        &self,
        max_messages: usize,
    ) -> BoxFuture<'_, memlayer_store::Result<Vec<PendingEmbedding>>> {
        Box::pin(async move { store(self.pending_embeddings(max_messages).await) })
    }

    fn pending_embedding_count(&self) -> BoxFuture<'_, memlayer_store::Result<u64>> {
        Box::pin(async move { store(self.pending_embedding_count().await) })
    }

    fn store_embeddings(
        &self,
        model: EmbeddingModel,
        done: Vec<u64>,
        vectors: Vec<(MessageKey, Vec<f32>)>,
    ) -> BoxFuture<'_, memlayer_store::Result<()>> {
        Box::pin(async move { store(self.store_embeddings(model, done, vectors).await) })
    }

    fn vector_model(&self) -> BoxFuture<'_, memlayer_store::Result<Option<EmbeddingModel>>> {
        Box::pin(async move { store(self.vector_model().await) })
    }

    fn vectors(
        &self,
        after: Option<MessageKey>,
        limit: usize,
    ) -> BoxFuture<'_, memlayer_store::Result<Vec<StoredVector>>> {
        Box::pin(async move { store(self.vectors(after, limit).await) })
    }

    fn session_ref(&self, sid: u64) -> BoxFuture<'_, memlayer_store::Result<Option<SessionRef>>> {
        Box::pin(async move { store(self.session_ref(sid).await) })
    }

    fn deleted_sessions<'a>(
        &'a self,
        sids: &'a BTreeSet<u64>,
    ) -> BoxFuture<'a, memlayer_store::Result<BTreeSet<u64>>> {
        Box::pin(async move { store(self.deleted_sessions(sids).await) })
    }

    fn session_by_key(
        &self,
        sid: u64,
    ) -> BoxFuture<'_, memlayer_store::Result<Option<(SessionRef, Session)>>> {
        Box::pin(async move { store(self.session_by_key(sid).await) })
    }

    fn session_key<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<Option<u64>>> {
        Box::pin(async move { store(self.session_key(access, session_id).await) })
    }

    fn outbox_head(&self) -> BoxFuture<'_, memlayer_store::Result<u64>> {
        Box::pin(async move { store(self.outbox_head().await) })
    }

    fn embedded_through(&self) -> BoxFuture<'_, memlayer_store::Result<u64>> {
        Box::pin(async move { store(self.embedded_through().await) })
    }

    fn embedded_after(
        &self,
        after: u64,
        max_entries: usize,
    ) -> BoxFuture<'_, memlayer_store::Result<Option<FollowedFeed>>> {
        Box::pin(async move { store(self.embedded_after(after, max_entries).await).map(Some) })
    }

    fn vectors_version(&self) -> BoxFuture<'_, memlayer_store::Result<u64>> {
        Box::pin(async move { store(self.vectors_version().await) })
    }

    fn follower_seen<'a>(
        &'a self,
        node: &'a str,
        followed: u64,
        lapse: Duration,
    ) -> BoxFuture<'a, memlayer_store::Result<Option<FollowerRecord>>> {
        Box::pin(async move { store(self.follower_seen(node, followed, lapse).await).map(Some) })
    }

    fn followers_behind<'a>(
        &'a self,
        position: u64,
        lapse: Duration,
        except: &'a str,
    ) -> BoxFuture<'a, memlayer_store::Result<Option<u64>>> {
        Box::pin(
            async move { store(self.followers_behind(position, lapse, except).await).map(Some) },
        )
    }

    fn all_messages(
        &self,
        after: Option<MessageKey>,
        limit: usize,
    ) -> BoxFuture<'_, memlayer_store::Result<Vec<(MessageKey, Message)>>> {
        Box::pin(async move { store(self.all_messages(after, limit).await) })
    }

    fn messages_by_key<'a>(
        &'a self,
        keys: &'a [MessageKey],
    ) -> BoxFuture<'a, memlayer_store::Result<Vec<Option<Message>>>> {
        Box::pin(async move { store(self.messages_by_key(keys).await) })
    }

    fn reset_embeddings(&self) -> BoxFuture<'_, memlayer_store::Result<u64>> {
        Box::pin(async move { store(self.reset_embeddings().await) })
    }
}
