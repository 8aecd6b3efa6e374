//! Recall on a store several nodes share: this node's record among the outbox's followers
//! (its heartbeat and how far it applied), the wait of an erasure for the other live nodes,
//! and whether this node has caught up after its record lapsed.
//!
//! A node's record is written by its pipeline, after a step applied entries and at least every
//! [`HEARTBEAT`] while idle, so a node is live exactly while it keeps following: one that died,
//! froze, or lost the database lapses after [`LAPSE`]. An erasure is acknowledged once no
//! other live node is behind its removal entries ([`Recall::wait_for_followers`]); once this
//! node's own record lapsed, receipts may have been issued without it, so it reports itself
//! not caught up ([`Recall::caught_up`]) from that moment (its own clock tells it) until it
//! recorded itself again and followed through what the store had embedded then (the
//! erasures among it included).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use memlayer_store::blocking;

use super::Recall;
use crate::{IndexError, Result};

/// How long after its last record a node stops being live (erasures stop waiting for it). Far
/// longer than a pipeline step takes: a batch of 64 messages embeds in about a second.
pub(super) const LAPSE: Duration = Duration::from_secs(10);
/// How often an idle node writes its record at least.
const HEARTBEAT: Duration = Duration::from_secs(2);
/// How long an erasure waits at most for the other live nodes: a node that died meanwhile
/// lapses within [`LAPSE`]; one live but still behind after this keeps the erasure pending,
/// and a later run finishes it.
const FOLLOWERS_WAIT: Duration = Duration::from_secs(12);
/// How often an erasure looks again while other nodes are behind.
const FOLLOWERS_POLL: Duration = Duration::from_millis(20);

impl Recall {
    /// Records this node's position among the followers of a shared store (nothing on a
    /// store with one process): after the position changed, or [`HEARTBEAT`] after the last
    /// record. A record that had lapsed makes this node catch up before [`Recall::caught_up`].
    pub(super) async fn report_followed(&self) -> Result<()> {
        let followed = self.inner.progress.borrow().vectors;
        let due = self
            .inner
            .reported
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none_or(|(at, position)| position != followed || at.elapsed() >= HEARTBEAT);
        if !due {
            return Ok(());
        }
        // Taken before the write: the database's time of the record is later, so this node
        // never counts itself live longer than the others do.
        let recording = Instant::now();
        let lapsed_here = self.record_lapsed();
        let this = self.clone();
        let record = blocking(move || {
            this.inner
                .store
                .feed()
                .follower_seen(&this.inner.node_id, followed, LAPSE)
        })
        .await?;
        if let Some(record) = &record {
            self.inner
                .live_nodes
                .store(record.live_nodes.max(1), Ordering::Relaxed);
            if record.lapsed || lapsed_here {
                // Kept until the target is read: the record just written is live again, so
                // the next one would not say that this one had lapsed.
                self.inner.catching_up.store(true, Ordering::SeqCst);
            }
        }
        if self.inner.catching_up.load(Ordering::SeqCst) {
            // An entry's position the follow reaches (`embedded_through` alone is a bound, no
            // entry's position): the head when every entry up to it is embedded, else a
            // bound below an entry the follow will pass.
            let store = self.inner.store.clone();
            let target = blocking(move || -> Result<_> {
                let feed = store.feed();
                Ok(feed.outbox_head()?.min(feed.embedded_through()?))
            })
            .await?;
            tracing::warn!(
                "this node stopped following the shared outbox for longer than its record \
                 lasts; erasures finished meanwhile did not wait for it, so it reports not \
                 ready until it caught up"
            );
            self.inner.catch_up_to.fetch_max(target, Ordering::SeqCst);
            self.inner.catching_up.store(false, Ordering::SeqCst);
        }
        // Last, so that `caught_up` sees a live record only once the catch-up it needs is set.
        *self
            .inner
            .reported
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some((recording, followed));
        Ok(())
    }

    /// Whether this node's last follower record on a shared store is older than [`LAPSE`]:
    /// the other nodes stopped waiting for it then. Known here at once, without the database:
    /// a node thawed after a freeze, or one whose pipeline stalled, is not caught up from
    /// that moment, before its next record says it lapsed.
    fn record_lapsed(&self) -> bool {
        self.inner.follows_others.load(Ordering::Relaxed)
            && self
                .inner
                .reported
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some_and(|(at, _)| at.elapsed() >= LAPSE)
    }

    /// How many nodes share the store, live by their follower records (this one included), as
    /// of this node's last record: 1 on a store with one process.
    pub fn live_nodes(&self) -> u64 {
        self.inner.live_nodes.load(Ordering::Relaxed)
    }

    /// Whether this node follows the shared store as closely as the other nodes count on:
    /// false from the moment its record lapsed until it recorded itself again and applied
    /// what was embedded then. Always true on a store with one process.
    pub fn caught_up(&self) -> bool {
        !self.record_lapsed()
            && !self.inner.catching_up.load(Ordering::SeqCst)
            && self.inner.progress.borrow().vectors >= self.inner.catch_up_to.load(Ordering::SeqCst)
    }

    /// On a store several processes share, waits (a bounded time, as a recall does) until
    /// this process applied every change committed before the call, other processes' memory
    /// writes included (see [`Recall::on_followed_removals`]); at once on a store with one
    /// process.
    pub async fn wait_for_followed(&self) -> Result<()> {
        if self.inner.follows_others.load(Ordering::Relaxed) {
            // Past the bound the answer goes without the newest changes, as a recall's does.
            self.wait_for_index().await?;
        }
        Ok(())
    }

    /// On a store several nodes share, waits until every other live node applied every entry
    /// in the outbox now (this node's erasures committed before the call among them: so
    /// their removals left every live node's indexes, graphs, snapshot and caches). Fails with
    /// [`IndexError::FollowersBehind`] when some are still behind after `FOLLOWERS_WAIT`.
    /// Returns at once on a store with one process.
    pub async fn wait_for_followers(&self) -> Result<()> {
        let store = self.inner.store.clone();
        let head = blocking(move || store.feed().outbox_head()).await?;
        let deadline = Instant::now() + FOLLOWERS_WAIT;
        loop {
            let this = self.clone();
            let behind = blocking(move || {
                this.inner
                    .store
                    .feed()
                    .followers_behind(head, LAPSE, &this.inner.node_id)
            })
            .await?;
            match behind {
                None | Some(0) => return Ok(()),
                Some(nodes) if Instant::now() >= deadline => {
                    return Err(IndexError::FollowersBehind { nodes });
                }
                Some(_) => tokio::time::sleep(FOLLOWERS_POLL).await,
            }
        }
    }
}
