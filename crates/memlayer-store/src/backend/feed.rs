//! The embedding pipeline's side: appends waiting to be embedded, stored vectors, and the
//! look-ups the indexes need to rebuild themselves and to turn a hit back into a message.
//!
//! Positions and keys are the redb store's: a feed entry's `seq` is what the backend hands
//! out and takes back, a message is known to derived data by its [`MessageKey`] (the
//! session's surrogate key, never reused, and the message index), and
//! [`FeedBackend::outbox_head`] is a position such that every append committed before the
//! call is at or below it. A database where commits do not follow allocation order (a
//! PostgreSQL sequence) must choose positions that keep that promise (transaction ids below
//! the oldest running one).

use std::collections::BTreeSet;
use std::time::Duration;

use super::BoxFuture;
use crate::Result;
use crate::model::{
    Access, EmbeddingModel, FollowedFeed, FollowerRecord, Message, MessageKey, PendingEmbedding,
    Session, SessionRef, StoredVector,
};
use crate::store::Store;

/// [`Store::feed`] answered by a backend; each method's contract is the
/// [`crate::EmbeddingFeed`] method of the same name.
pub trait FeedBackend: Send + Sync {
    /// [`crate::EmbeddingFeed::pending_embeddings`].
    fn pending_embeddings(
        &self,
        max_messages: usize,
    ) -> BoxFuture<'_, Result<Vec<PendingEmbedding>>>;

    /// [`crate::EmbeddingFeed::pending_embedding_count`].
    fn pending_embedding_count(&self) -> BoxFuture<'_, Result<u64>>;

    /// [`crate::EmbeddingFeed::store_embeddings`].
    fn store_embeddings(
        &self,
        model: EmbeddingModel,
        done: Vec<u64>,
        vectors: Vec<(MessageKey, Vec<f32>)>,
    ) -> BoxFuture<'_, Result<()>>;

    /// [`crate::EmbeddingFeed::vector_model`].
    fn vector_model(&self) -> BoxFuture<'_, Result<Option<EmbeddingModel>>>;

    /// [`crate::EmbeddingFeed::vectors`].
    fn vectors(
        &self,
        after: Option<MessageKey>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<StoredVector>>>;

    /// [`crate::EmbeddingFeed::session_ref`].
    fn session_ref(&self, sid: u64) -> BoxFuture<'_, Result<Option<SessionRef>>>;

    /// [`crate::EmbeddingFeed::deleted_sessions`].
    fn deleted_sessions<'a>(
        &'a self,
        sids: &'a BTreeSet<u64>,
    ) -> BoxFuture<'a, Result<BTreeSet<u64>>>;

    /// [`crate::EmbeddingFeed::session_by_key`].
    fn session_by_key(&self, sid: u64) -> BoxFuture<'_, Result<Option<(SessionRef, Session)>>>;

    /// [`crate::EmbeddingFeed::session_key`].
    fn session_key<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>>>;

    /// [`crate::EmbeddingFeed::outbox_head`].
    fn outbox_head(&self) -> BoxFuture<'_, Result<u64>>;

    /// [`crate::EmbeddingFeed::vectors_version`].
    fn vectors_version(&self) -> BoxFuture<'_, Result<u64>>;

    /// [`crate::EmbeddingFeed::embedded_through`].
    fn embedded_through(&self) -> BoxFuture<'_, Result<u64>>;

    /// [`crate::EmbeddingFeed::embedded_after`].
    fn embedded_after(
        &self,
        after: u64,
        max_entries: usize,
    ) -> BoxFuture<'_, Result<Option<FollowedFeed>>>;

    /// [`crate::EmbeddingFeed::follower_seen`].
    fn follower_seen<'a>(
        &'a self,
        node: &'a str,
        followed: u64,
        lapse: Duration,
    ) -> BoxFuture<'a, Result<Option<FollowerRecord>>>;

    /// [`crate::EmbeddingFeed::followers_behind`].
    fn followers_behind<'a>(
        &'a self,
        position: u64,
        lapse: Duration,
        except: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>>>;

    /// [`crate::EmbeddingFeed::all_messages`].
    fn all_messages(
        &self,
        after: Option<MessageKey>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<(MessageKey, Message)>>>;

    /// [`crate::EmbeddingFeed::messages_by_key`].
    fn messages_by_key<'a>(
        &'a self,
        keys: &'a [MessageKey],
    ) -> BoxFuture<'a, Result<Vec<Option<Message>>>>;

    /// [`crate::EmbeddingFeed::reset_embeddings`].
    fn reset_embeddings(&self) -> BoxFuture<'_, Result<u64>>;
}

/// The redb store as the feed's backend; reads run on the blocking pool ([`Store::read`]).
impl FeedBackend for Store {
    fn pending_embeddings(
        &self,
        max_messages: usize,
    ) -> BoxFuture<'_, Result<Vec<PendingEmbedding>>> {
        Box::pin(self.read(move |store| store.feed().pending_embeddings(max_messages)))
    }

    fn pending_embedding_count(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(self.read(|store| store.feed().pending_embedding_count()))
    }

    fn store_embeddings(
        &self,
        model: EmbeddingModel,
        done: Vec<u64>,
        vectors: Vec<(MessageKey, Vec<f32>)>,
    ) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.feed().store_embeddings(model, done, vectors))
    }

    fn vector_model(&self) -> BoxFuture<'_, Result<Option<EmbeddingModel>>> {
        Box::pin(self.read(|store| store.feed().vector_model()))
    }

    fn vectors(
        &self,
        after: Option<MessageKey>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<StoredVector>>> {
        Box::pin(self.read(move |store| store.feed().vectors(after, limit)))
    }

    fn session_ref(&self, sid: u64) -> BoxFuture<'_, Result<Option<SessionRef>>> {
        Box::pin(self.read(move |store| store.feed().session_ref(sid)))
    }

    fn deleted_sessions<'a>(
        &'a self,
        sids: &'a BTreeSet<u64>,
    ) -> BoxFuture<'a, Result<BTreeSet<u64>>> {
        let sids = sids.clone();
        Box::pin(self.read(move |store| store.feed().deleted_sessions(&sids)))
    }

    fn session_by_key(&self, sid: u64) -> BoxFuture<'_, Result<Option<(SessionRef, Session)>>> {
        Box::pin(self.read(move |store| store.feed().session_by_key(sid)))
    }

    fn session_key<'a>(
        &'a self,
        access: &'a Access,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>>> {
        let (access, session_id) = (access.clone(), session_id.to_owned());
        Box::pin(self.read(move |store| store.feed().session_key(&access, &session_id)))
    }

    fn outbox_head(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(self.read(|store| store.feed().outbox_head()))
    }

    fn vectors_version(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(self.read(|store| store.feed().vectors_version()))
    }

    fn embedded_through(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(self.read(|store| store.feed().embedded_through()))
    }

    fn embedded_after(
        &self,
        after: u64,
        max_entries: usize,
    ) -> BoxFuture<'_, Result<Option<FollowedFeed>>> {
        Box::pin(self.read(move |store| store.feed().embedded_after(after, max_entries)))
    }

    fn follower_seen<'a>(
        &'a self,
        node: &'a str,
        followed: u64,
        lapse: Duration,
    ) -> BoxFuture<'a, Result<Option<FollowerRecord>>> {
        let node = node.to_owned();
        Box::pin(self.read(move |store| store.feed().follower_seen(&node, followed, lapse)))
    }

    fn followers_behind<'a>(
        &'a self,
        position: u64,
        lapse: Duration,
        except: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>>> {
        let except = except.to_owned();
        Box::pin(self.read(move |store| store.feed().followers_behind(position, lapse, &except)))
    }

    fn all_messages(
        &self,
        after: Option<MessageKey>,
        limit: usize,
    ) -> BoxFuture<'_, Result<Vec<(MessageKey, Message)>>> {
        Box::pin(self.read(move |store| store.feed().all_messages(after, limit)))
    }

    fn messages_by_key<'a>(
        &'a self,
        keys: &'a [MessageKey],
    ) -> BoxFuture<'a, Result<Vec<Option<Message>>>> {
        let keys = keys.to_vec();
        Box::pin(self.read(move |store| store.feed().messages_by_key(&keys)))
    }

    fn reset_embeddings(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(self.feed().reset_embeddings())
    }
}
