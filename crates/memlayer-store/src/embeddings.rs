//! The store's side of the embedding pipeline: the outbox the append path fills, the vectors
//! the embedding worker stores, and the look-ups indexes need to rebuild themselves and to
//! turn a hit back into a message.
//!
//! Appends never wait for embeddings. `enqueue_for_embedding` (in `store`) writes an outbox
//! entry in the append's own transaction; a worker reads entries with
//! [`Store::pending_embeddings`], embeds them, and hands the vectors back with
//! [`Store::store_embeddings`], which stores them and removes the entries in one transaction.
//! A crash anywhere in between leaves the entries in the outbox, so they are embedded again.

use std::time::Duration;

use redb::{ReadableTable, ReadableTableMetadata, WriteTransaction};

use crate::model::{
    Access, EmbeddingModel, FollowedFeed, FollowerRecord, MessageKey, PendingEmbedding, SessionRef,
    StoredVector, Timestamp,
};
use crate::record::{ModelRecord, OutboxRecord, Record, SessionRecord, VectorRecord};
use crate::sealing::{Opener, Sealer, outline, retry_destroyed};
use crate::sessions::{
    enqueue_for_embedding, message_from_record, read_session_record, remove_range,
};
use crate::store::{EmbeddingFeed, wait};
use crate::tables::{
    MESSAGES, META, MODELS, NEXT_OUTBOX_SEQ_KEY, OUTBOX, SESSION_KEYS, SESSIONS, VECTORS,
    VECTORS_VERSION_KEY,
};
use crate::{Result, StoreError};

impl EmbeddingModel {
    /// Refuses vectors that are not of this model's dimension, before anything is stored.
    pub fn check_vectors(&self, vectors: &[(MessageKey, Vec<f32>)]) -> Result<()> {
        for (key, components) in vectors {
            if components.len() != self.dimension as usize {
                return Err(StoreError::InvalidInput {
                    field: "vector",
                    reason: format!(
                        "message {key:?} has {} components, the model {}",
                        components.len(),
                        self.dimension
                    ),
                });
            }
        }
        Ok(())
    }
}

impl EmbeddingFeed<'_> {
    /// The oldest appends waiting to be embedded: whole outbox entries, oldest first, until
    /// at least `max_messages` messages or `max_messages` entries are collected (always at
    /// least one entry if any). An entry of a session deleted since has no session and no
    /// messages; the entry cap bounds a read after a purge left thousands of them.
    ///
    /// A store several processes write (a database) claims the entries it answers for this
    /// process for a while, so that processes share the work: no call answers them again
    /// until their vectors are stored or the claim runs out. The redb file answers them
    /// again until they are stored.
    pub fn pending_embeddings(self, max_messages: usize) -> Result<Vec<PendingEmbedding>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.feed().pending_embeddings(max_messages));
        }
        retry_destroyed(|| self.read_pending(max_messages))
    }

    fn read_pending(self, max_messages: usize) -> Result<Vec<PendingEmbedding>> {
        let txn = self.store.begin_read()?;
        let outbox = txn.open_table(OUTBOX)?;
        let keys = txn.open_table(SESSION_KEYS)?;
        let messages = txn.open_table(MESSAGES)?;
        let mut pending = Vec::new();
        let mut collected = 0;
        for entry in outbox.iter()? {
            if collected.max(pending.len()) >= max_messages.max(1) {
                break;
            }
            let (seq, value) = entry?;
            let record = OutboxRecord::decode(value.value())?;
            let session = keys.get(record.sid)?.map(|names| {
                let (tenant, session_id) = names.value();
                SessionRef {
                    tenant: tenant.to_owned(),
                    session_id: session_id.to_owned(),
                }
            });
            let mut batch = Vec::new();
            let end = record.first_index + record.count;
            let mut opener = Opener::new(txn.keys(), record.sid);
            for item in messages.range((record.sid, record.first_index)..(record.sid, end))? {
                let (key, value) = item?;
                let (sid, index) = key.value();
                let message = message_from_record(index, opener.message(index, value.value())?)?;
                batch.push((MessageKey::new(sid, index), message));
            }
            collected += batch.len();
            pending.push(PendingEmbedding {
                seq: seq.value(),
                session,
                messages: batch,
            });
        }
        Ok(pending)
    }

    /// How many appends wait in the outbox (a gauge for metrics and back-pressure).
    pub fn pending_embedding_count(self) -> Result<u64> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.feed().pending_embedding_count());
        }
        Ok(self.store.begin_read()?.open_table(OUTBOX)?.len()?)
    }

    /// Stores the vectors `model` made for outbox entries `done`, and removes those entries,
    /// in one transaction. Vectors of messages deleted in the meantime are dropped.
    ///
    /// Fails with [`StoreError::Conflict`] if the store holds vectors of another model: they
    /// are not comparable, and `memlayer reindex` must replace them first.
    pub async fn store_embeddings(
        self,
        model: EmbeddingModel,
        done: Vec<u64>,
        vectors: Vec<(MessageKey, Vec<f32>)>,
    ) -> Result<()> {
        if let Some(backend) = self.store.backend() {
            return backend.feed().store_embeddings(model, done, vectors).await;
        }
        model.check_vectors(&vectors)?;
        let keys = self.store.data_keys()?;
        self.store
            .write(move |txn| {
                let model_id = register_model(txn, &model)?;
                let messages = txn.open_table(MESSAGES)?;
                let mut table = txn.open_table(VECTORS)?;
                for (key, components) in vectors {
                    let Some(message) = messages.get((key.session(), key.index()))? else {
                        continue;
                    };
                    let outline = outline(message.value())?;
                    let record = VectorRecord {
                        model: model_id,
                        role: outline.role,
                        timestamp: outline.timestamp,
                        components,
                    };
                    // Sealed under the key its message is sealed under: the session's current
                    // one, since a re-key seals all of a session's values again at once.
                    let sealer = Sealer::of(&keys, key.session(), outline.key)?;
                    let stored = sealer.vector(key.index(), &record)?;
                    table.insert((key.session(), key.index()), stored.as_slice())?;
                }
                let mut outbox = txn.open_table(OUTBOX)?;
                for seq in done {
                    outbox.remove(seq)?;
                }
                bump_vectors_version(txn)
            })
            .await
    }

    /// The model the stored vectors were made with, if any vector is stored.
    pub fn vector_model(self) -> Result<Option<EmbeddingModel>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.feed().vector_model());
        }
        let txn = self.store.begin_read()?;
        let models = txn.open_table(MODELS)?;
        let Some(entry) = models.iter()?.next() else {
            return Ok(None);
        };
        let record = ModelRecord::decode(entry?.1.value())?;
        Ok(Some(EmbeddingModel {
            name: record.name,
            sha256: record.sha256,
            dimension: record.dimension,
        }))
    }

    /// Up to `limit` stored vectors in key order, starting after `after`: the pages an index
    /// rebuild reads.
    pub fn vectors(self, after: Option<MessageKey>, limit: usize) -> Result<Vec<StoredVector>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.feed().vectors(after, limit));
        }
        self.walk(VECTORS, after, limit, |opener, key, value| {
            let record = opener.vector(key.index(), value)?;
            Ok(StoredVector {
                key,
                role: record.role,
                timestamp: Timestamp::from_micros(record.timestamp),
                components: record.components,
            })
        })
    }

    /// Up to `limit` values of `table` (keyed by message) in key order, starting after
    /// `after`, each opened by `read` with an opener at its session; from a new snapshot when
    /// an erasure destroyed a key the first one needed.
    fn walk<T>(
        self,
        table: redb::TableDefinition<(u64, u64), &'static [u8]>,
        after: Option<MessageKey>,
        limit: usize,
        mut read: impl FnMut(&mut Opener<'_>, MessageKey, &[u8]) -> Result<T>,
    ) -> Result<Vec<T>> {
        retry_destroyed(|| {
            let txn = self.store.begin_read()?;
            let table = txn.open_table(table)?;
            let mut opener = Opener::new(txn.keys(), 0);
            keys_after(&table, after)?
                .take(limit)
                .map(|entry| {
                    let (key, value) = entry?;
                    let (sid, index) = key.value();
                    read(opener.of(sid), MessageKey::new(sid, index), value.value())
                })
                .collect()
        })
    }

    /// The session a key's message belongs to, or `None` if it was deleted.
    pub fn session_ref(self, sid: u64) -> Result<Option<SessionRef>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.feed().session_ref(sid));
        }
        let txn = self.store.begin_read()?;
        let keys = txn.open_table(SESSION_KEYS)?;
        Ok(keys.get(sid)?.map(|names| {
            let (tenant, session_id) = names.value();
            SessionRef {
                tenant: tenant.to_owned(),
                session_id: session_id.to_owned(),
            }
        }))
    }

    /// Which of the surrogate keys `sids` belong to no session any more, read in one
    /// transaction.
    pub fn deleted_sessions(
        self,
        sids: &std::collections::BTreeSet<u64>,
    ) -> Result<std::collections::BTreeSet<u64>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.feed().deleted_sessions(sids));
        }
        let txn = self.store.begin_read()?;
        let keys = txn.open_table(SESSION_KEYS)?;
        let mut deleted = std::collections::BTreeSet::new();
        for &sid in sids {
            if keys.get(sid)?.is_none() {
                deleted.insert(sid);
            }
        }
        Ok(deleted)
    }

    /// The session with surrogate key `sid` and where it lives, or `None` if it was deleted.
    pub fn session_by_key(self, sid: u64) -> Result<Option<(SessionRef, crate::Session)>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.feed().session_by_key(sid));
        }
        let Some(at) = self.session_ref(sid)? else {
            return Ok(None);
        };
        Ok(self
            .store
            .sessions()
            .session(&Access::tenant_wide(&*at.tenant), &at.session_id)?
            .map(|session| (at, session)))
    }

    /// The surrogate key of a session `access` reaches (the session part of its messages'
    /// keys).
    pub fn session_key(self, access: &Access, session_id: &str) -> Result<Option<u64>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.feed().session_key(access, session_id));
        }
        let txn = self.store.begin_read()?;
        let sessions = txn.open_table(SESSIONS)?;
        Ok(read_session_record(&sessions, access, session_id)?.map(|record| record.sid))
    }

    /// The sequence number of the newest outbox entry ever written (0 before the first).
    /// An index that has applied every entry up to it has seen every committed append.
    pub fn outbox_head(self) -> Result<u64> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.feed().outbox_head());
        }
        let txn = self.store.begin_read()?;
        next_outbox_seq(&txn).map(|next| next - 1)
    }

    /// A position at or below which every outbox entry's vectors are stored (those of
    /// messages not erased since): an index that loads the stored vectors after reading it
    /// has applied every entry up to it. Read it before loading them.
    pub fn embedded_through(self) -> Result<u64> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.feed().embedded_through());
        }
        let txn = self.store.begin_read()?;
        if let Some((seq, _)) = txn.open_table(OUTBOX)?.first()? {
            return Ok(seq.value() - 1);
        }
        next_outbox_seq(&txn).map(|next| next - 1)
    }

    /// For a store several processes write (a database), what changed after position
    /// `after`, in position order, at most `max_entries` entries, stopping before the first
    /// append not embedded yet: the appends, whoever embedded them, with their stored
    /// vectors, and the erasures. `None` for a store with one writer (the redb file), whose
    /// pipeline's own batches ([`Self::pending_embeddings`]) are every append and whose
    /// process does every erasure.
    pub fn embedded_after(self, after: u64, max_entries: usize) -> Result<Option<FollowedFeed>> {
        match self.store.backend() {
            Some(backend) => wait(backend.feed().embedded_after(after, max_entries)),
            None => Ok(None),
        }
    }

    /// For a store several processes follow (a database): records that node `node` applied
    /// every entry up to `followed`, now by the store's clock (a heartbeat: a node is live while
    /// its record is younger than `lapse`), and answers whether its previous record was older
    /// than `lapse` (erasures may have finished without waiting for it) and how many nodes
    /// are live. `None` for a store with one process (the redb file), which keeps no such
    /// record.
    pub fn follower_seen(
        self,
        node: &str,
        followed: u64,
        lapse: Duration,
    ) -> Result<Option<FollowerRecord>> {
        match self.store.backend() {
            Some(backend) => wait(backend.feed().follower_seen(node, followed, lapse)),
            None => Ok(None),
        }
    }

    /// For a store several processes follow: how many nodes other than `except`, live by
    /// `lapse` (see [`Self::follower_seen`]), have not applied every entry up to `position`.
    /// `None` for a store with one process.
    pub fn followers_behind(
        self,
        position: u64,
        lapse: Duration,
        except: &str,
    ) -> Result<Option<u64>> {
        match self.store.backend() {
            Some(backend) => wait(backend.feed().followers_behind(position, lapse, except)),
            None => Ok(None),
        }
    }

    /// A counter that changes whenever the set of stored vectors does. An index snapshot
    /// taken at one value is exact while the store still has it.
    pub fn vectors_version(self) -> Result<u64> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.feed().vectors_version());
        }
        let txn = self.store.begin_read()?;
        Ok(txn
            .open_table(META)?
            .get(VECTORS_VERSION_KEY)?
            .map_or(0, |v| v.value()))
    }

    /// Up to `limit` messages of every session in key order, starting after `after`: the
    /// pages a keyword index rebuild reads.
    pub fn all_messages(
        self,
        after: Option<MessageKey>,
        limit: usize,
    ) -> Result<Vec<(MessageKey, crate::Message)>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.feed().all_messages(after, limit));
        }
        self.walk(MESSAGES, after, limit, |opener, key, value| {
            let stored = opener.message(key.index(), value)?;
            Ok((key, message_from_record(key.index(), stored)?))
        })
    }

    /// The messages behind index hits, in the order given; `None` for a message that no
    /// longer exists.
    pub fn messages_by_key(self, keys: &[MessageKey]) -> Result<Vec<Option<crate::Message>>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.feed().messages_by_key(keys));
        }
        retry_destroyed(|| {
            let txn = self.store.begin_read()?;
            let messages = txn.open_table(MESSAGES)?;
            let mut opener = Opener::new(txn.keys(), 0);
            keys.iter()
                .map(|key| {
                    messages
                        .get((key.session(), key.index()))?
                        .map(|value| {
                            let opener = opener.of(key.session());
                            let stored = opener.message(key.index(), value.value())?;
                            message_from_record(key.index(), stored)
                        })
                        .transpose()
                })
                .collect()
        })
    }

    /// Deletes every vector and queues every message for embedding again: `memlayer reindex`,
    /// after the embedding model changed. Returns how many messages were queued.
    pub async fn reset_embeddings(self) -> Result<u64> {
        if let Some(backend) = self.store.backend() {
            return backend.feed().reset_embeddings().await;
        }
        self.store
            .write(|txn| {
                remove_range(&mut txn.open_table(VECTORS)?, (0, 0)..(u64::MAX, 0))?;
                bump_vectors_version(txn)?;
                txn.open_table(MODELS)?.retain(|_, _| false)?;
                txn.open_table(OUTBOX)?.retain(|_, _| false)?;
                let sessions: Vec<(u64, u64)> = txn
                    .open_table(SESSIONS)?
                    .iter()?
                    .map(|entry| {
                        let record = SessionRecord::decode(entry?.1.value())?;
                        Ok((record.sid, record.next_index))
                    })
                    .collect::<Result<_>>()?;
                let mut queued = 0;
                for (sid, count) in sessions {
                    if count > 0 {
                        enqueue_for_embedding(txn, sid, 0, count)?;
                        queued += count;
                    }
                }
                Ok(queued)
            })
            .await
    }
}

/// Marks the set of stored vectors as changed (see [`Store::vectors_version`]).
pub(crate) fn bump_vectors_version(txn: &WriteTransaction) -> Result<()> {
    let mut meta = txn.open_table(META)?;
    let version = meta.get(VECTORS_VERSION_KEY)?.map_or(0, |v| v.value());
    meta.insert(VECTORS_VERSION_KEY, version + 1)?;
    Ok(())
}

/// The model's key in the `models` table, adding it if the store has no vectors yet.
fn register_model(txn: &WriteTransaction, model: &EmbeddingModel) -> Result<u32> {
    let mut models = txn.open_table(MODELS)?;
    if let Some(entry) = models.iter()?.next() {
        let (id, value) = entry?;
        let known = ModelRecord::decode(value.value())?;
        if known.sha256 != model.sha256 || known.dimension != model.dimension {
            return Err(StoreError::Conflict(format!(
                "the store holds vectors of model {} ({}), not {} ({}); run `memlayer reindex` \
                 to embed every message again with the new model",
                known.name, known.sha256, model.name, model.sha256
            )));
        }
        return Ok(id.value());
    }
    let record = ModelRecord {
        name: model.name.clone(),
        sha256: model.sha256.clone(),
        dimension: model.dimension,
    };
    models.insert(1, record.encode().as_slice())?;
    Ok(1)
}

/// The entries of a table keyed by `(sid, index)` after `after` (all of them for `None`):
/// the pages a rebuild reads.
fn keys_after<'t>(
    table: &'t redb::ReadOnlyTable<(u64, u64), &'static [u8]>,
    after: Option<MessageKey>,
) -> Result<redb::Range<'t, (u64, u64), &'static [u8]>> {
    Ok(match after {
        Some(key) => table.range((key.session(), key.index() + 1)..)?,
        None => table.range::<(u64, u64)>(..)?,
    })
}

/// The sequence number the next outbox entry gets.
fn next_outbox_seq(txn: &redb::ReadTransaction) -> Result<u64> {
    Ok(txn
        .open_table(META)?
        .get(NEXT_OUTBOX_SEQ_KEY)?
        .map_or(1, |v| v.value()))
}
