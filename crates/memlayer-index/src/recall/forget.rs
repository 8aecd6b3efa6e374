//! Forgetting: erasure takes messages and whole sessions out of the indexes and their slots
//! out of the vector graph, empties the tenant's part of the embedder's cache and rewrites the
//! snapshot, after the store deleted them.

use std::collections::BTreeSet;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use memlayer_store::{MessageKey, Removal, blocking};

use super::{Indexes, Recall};
use crate::Result;

impl Recall {
    /// Removes every message of the sessions with surrogate keys `sids` (of `tenant`) from
    /// the indexes, and rewrites the snapshot without them. Call it after the store deleted
    /// the sessions. Many sessions at once cost one pass over the graph and one snapshot: a
    /// purge that called this once per session rewrote the whole snapshot (and rebuilt the
    /// graph) per session.
    pub async fn forget_sessions(&self, tenant: &str, sids: Vec<u64>) -> Result<()> {
        self.forget(&[tenant], sids.clone(), move |indexes| {
            sids.iter()
                .flat_map(|&sid| indexes.session_keys(sid))
                .collect()
        })
        .await
    }

    /// Takes every session the store no longer has out of the indexes and rewrites the
    /// snapshot. An erasure resumed after a crash finds its sessions already deleted from the
    /// store and so no longer knows their keys, while a snapshot saved in between may still
    /// hold their vectors: this finds them by what the indexes hold, not by what the job
    /// remembers. It reads every indexed key, so erasures that know their sessions call
    /// [`Recall::forget_sessions`] instead. `tenant` is the erasing tenant, whose cached
    /// vectors go (see [`Recall::forget_message`]).
    pub async fn forget_deleted_sessions(&self, tenant: &str) -> Result<()> {
        let this = self.clone();
        let deleted = blocking(move || -> Result<_> {
            let indexed: BTreeSet<u64> = {
                let indexes = this.read();
                indexes
                    .hybrid
                    .vectors()
                    .ids()
                    .chain(indexes.docs.keys().copied())
                    .map(|id| MessageKey::from_u64(id).session())
                    .collect()
            };
            // One read transaction for every session, not one each. A deleted session's key
            // is never reused, so the answer stays true until the removal below.
            Ok(this.inner.store.feed().deleted_sessions(&indexed)?)
        })
        .await?;
        self.forget(
            &[tenant],
            deleted.iter().copied().collect(),
            move |indexes| {
                let keys: BTreeSet<u64> = indexes
                    .hybrid
                    .vectors()
                    .ids()
                    .chain(indexes.docs.keys().copied())
                    .filter(|&id| deleted.contains(&MessageKey::from_u64(id).session()))
                    .collect();
                keys.into_iter().collect()
            },
        )
        .await
    }

    /// Removes one message of `tenant` from the indexes and rewrites the snapshot without it.
    /// Call it after the store erased the message.
    pub async fn forget_message(&self, tenant: &str, key: MessageKey) -> Result<()> {
        self.forget(&[tenant], Vec::new(), move |_| vec![key.as_u64()])
            .await
    }

    /// Takes out of the indexes what another process sharing the store erased (see
    /// [`memlayer_store::EmbeddingFeed::embedded_after`]), as [`Recall::forget_sessions`] and
    /// [`Recall::forget_message`] do for this process's erasures, and rewrites the snapshot.
    pub(super) async fn forget_removed(&self, removals: Vec<Removal>) -> Result<()> {
        // Even when the indexes hold none of it: a batch read before the other process
        // erased may be about to add it.
        self.erasure_begins();
        // Off the async workers: a hook may wait for its cache's lock.
        let (this, told) = (self.clone(), removals.clone());
        blocking(move || -> Result<()> {
            for hook in this
                .inner
                .removal_hooks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
            {
                hook(&told);
            }
            Ok(())
        })
        .await?;
        let sessions: Vec<u64> = removals
            .iter()
            .filter_map(|removal| match removal {
                Removal::Session(sid) => Some(*sid),
                Removal::Message(_) | Removal::Memory(_) => None,
            })
            .collect();
        // What the indexes hold of what was erased, and the tenants whose cached vectors go.
        // Nothing, for this process's own erasures (taken out already): then there is nothing
        // to compact or to save again.
        let (held, tenants) = {
            let indexes = self.read();
            let mut held = false;
            let mut tenants = BTreeSet::new();
            for removal in &removals {
                let sid = match removal {
                    // Every message the indexes have has its session's owner.
                    Removal::Session(sid) => {
                        held |= indexes.owners.contains_key(sid);
                        *sid
                    }
                    Removal::Message(key) => {
                        held |= indexes.holds(key.as_u64());
                        key.session()
                    }
                    // Not in these indexes: the hooks told whoever keeps memories.
                    Removal::Memory(_) => continue,
                };
                if let Some(owner) = indexes.owners.get(&sid) {
                    tenants.insert(owner.at.tenant.clone());
                }
            }
            (held, tenants)
        };
        if !held {
            return Ok(());
        }
        let tenants: Vec<&str> = tenants.iter().map(String::as_str).collect();
        self.forget(&tenants, sessions, move |indexes| {
            removals
                .iter()
                .flat_map(|removal| -> Vec<u64> {
                    match removal {
                        Removal::Session(sid) => indexes.session_keys(*sid).collect(),
                        Removal::Message(key) => vec![key.as_u64()],
                        Removal::Memory(_) => Vec::new(),
                    }
                })
                .collect()
        })
        .await
    }

    /// Removes the keys `select` picks from both indexes (an erased vector's components are
    /// zeroed at once), then the owners of `sessions`, takes the erased slots out of the
    /// vector graph so that no search passes through them, empties the `tenants`' part of
    /// the embedder's cache (which holds vectors by the hash of their text; the erased texts
    /// were embedded under their tenant, and only there), and saves the snapshot. Erasure
    /// calls it again after the pipeline caught up, so a batch in flight cannot put a key
    /// back: removal is idempotent.
    async fn forget(
        &self,
        tenants: &[&str],
        sessions: Vec<u64>,
        select: impl FnOnce(&Indexes) -> Vec<u64> + Send + 'static,
    ) -> Result<()> {
        self.erasure_begins();
        let this = self.clone();
        blocking(move || -> Result<_> {
            let mut indexes = this.write();
            let keys = select(&indexes);
            for key in keys {
                indexes.remove_message(key);
            }
            // Only now: a message's keyword partition is its session owner's.
            for sid in &sessions {
                indexes.owners.remove(sid);
            }
            indexes.hybrid.unlink_removed();
            *indexes.dirty.get_mut() = true;
            Ok(())
        })
        .await?;
        for tenant in tenants {
            self.inner.embedder.clear_cache(tenant);
        }
        // The snapshot on disk holds the erased vectors and words until a save replaces it.
        // Should the save fail, the old file goes (a start then rebuilds from the store);
        // should that fail too, so does the erasure, which is retried. The save leaves the
        // keyword section out, so that the receipt waits for the vectors and the graph only
        // (the section grew the file by two fifths at a million short messages); the next
        // periodic save or stop writes it again, and a crash before that costs the next
        // start its keyword backfill.
        if let Err(err) = self.try_save_snapshot_with(false).await {
            tracing::warn!(
                error = %err.for_log(),
                "could not save the vector index snapshot after an erasure; removing it"
            );
            self.remove_snapshot().await?;
        }
        Ok(())
    }

    /// Tells pipeline steps in flight that an erasure begins. Call it after the store
    /// deleted what is erased and before the indexes lose it (see `Inner::erasures_begun`).
    fn erasure_begins(&self) {
        self.inner.erasures_begun.fetch_add(1, Ordering::SeqCst);
    }

    /// How many erasures began so far: read it before reading messages to index, and pass
    /// it to [`Recall::index_texts`] with them.
    pub(super) fn erasures_begun(&self) -> u64 {
        self.inner.erasures_begun.load(Ordering::SeqCst)
    }
}
