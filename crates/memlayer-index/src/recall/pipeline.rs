//! The writer side of recall: the pipeline that drains the store's outbox into the keyword
//! and vector indexes, the keyword backfill after a start with
//! [`RecallOptions::keywords_in_background`], the builder of the vector index's graph, and
//! the vector snapshot (saved here, loaded by [`Recall::open`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::path::Path;
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use memlayer_store::{Message, MessageKey, PendingEmbedding, Store, blocking};
use tokio::sync::watch;

use super::{Indexes, Owner, Recall, RecallOptions, keywords_in_snapshot};
use crate::background::pause;
use crate::hybrid::KeywordPostings;
use crate::keyword::KeywordSection;
use crate::snapshot::SectionWriter;
use crate::{
    GraphBuilt, HybridIndex, IndexError, Result, VectorConfig, VectorIndex, run_graph_builder,
};

/// Messages the keyword backfill analyses per hold of the write lock: 640 KB of 5 KB
/// messages, some 35 ms at the rate a start indexed them (288 MB in about 15 s), which is
/// the longest a search waits for it.
const KEYWORD_BACKFILL_PAGE: usize = 128;

/// Appends whose vectors one commit stores at most (see [`Recall::embed_batch`]).
const STORED_PER_COMMIT: usize = 8;

/// Pages of the shared outbox a pipeline step follows at most (see [`Recall::follow`]).
const FOLLOWED_PAGES: usize = 16;
impl Recall {
    /// Runs the indexing pipeline, and the builder of the vector index's graph beside it,
    /// until `shutdown` resolves, then saves a snapshot. Spawn it on the async runtime that
    /// serves requests; its heavy steps run on blocking threads.
    pub async fn run_pipeline(self, shutdown: impl Future<Output = ()>) {
        let (stop_graphs, graphs_stopped) = watch::channel(false);
        let backfill = (!self.inner.progress.borrow().backfilled)
            .then(|| tokio::spawn(self.clone().backfill_keywords(graphs_stopped.clone())));
        let graphs = tokio::spawn(self.clone().keep_graph_built(graphs_stopped));
        let mut commits = self.inner.store.commits();
        let mut last_snapshot = Instant::now();
        tokio::pin!(shutdown);
        loop {
            let stepped = self.step().await;
            // Only a node that keeps following is live to the other nodes.
            if stepped.is_ok()
                && let Err(err) = self.report_followed().await
            {
                tracing::warn!(error = %err.for_log(), "recording this node's follow position failed");
            }
            match stepped {
                // A backlog must not hold up a shutdown: what is left stays in the outbox
                // and the next start indexes it.
                Ok(true) => tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    () = std::future::ready(()) => {}
                },
                Ok(false) => {
                    if self.read().dirty.load(Ordering::Relaxed)
                        && last_snapshot.elapsed() >= self.inner.options.snapshot_interval
                    {
                        self.save_snapshot().await;
                        last_snapshot = Instant::now();
                    }
                    tokio::select! {
                        () = &mut shutdown => break,
                        changed = commits.changed() => if changed.is_err() { break },
                        () = self.inner.awaited.notified() => {}
                        // A commit may have happened between the empty read and the wait.
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
                // The disk refuses writes: every retry would fail the same way until the store
                // is reopened, so the pipeline waits for that (what is indexed stays searchable).
                Err(_) if self.inner.store.refusals().borrow().is_some() => {
                    tracing::info!("indexing paused until the store takes writes again");
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = self.inner.store.writable() => {}
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err.for_log(), "indexing step failed; retrying");
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(Duration::from_millis(500)) => {}
                    }
                }
            }
        }
        // A build in progress stops at its next chunk, the backfill at its next page;
        // neither is saved anyway.
        let _ = stop_graphs.send(true);
        let _ = graphs.await;
        if let Some(backfill) = backfill {
            let _ = backfill.await;
        }
        self.save_snapshot().await;
    }

    /// Adds every stored message's text to the keyword index (the messages were opened
    /// without it), a page at a time under the write lock, until done or `stop` turns true.
    ///
    /// A message is added only while the index still has it (`docs`): an erasure removes it
    /// from `docs` and the keyword index under the same lock, so a page read before an
    /// erasure cannot put its text back afterwards; and one erased in the store whose
    /// removal from the index comes later is removed then, text and all.
    async fn backfill_keywords(self, mut stop: watch::Receiver<bool>) {
        let started = Instant::now();
        while !*stop.borrow() {
            let this = self.clone();
            let stopping = stop.clone();
            // From the first message on every attempt: pages already added are skipped.
            let done = blocking(move || -> Result<_> {
                let mut after = None;
                loop {
                    if *stopping.borrow() {
                        return Ok(false);
                    }
                    let page = this
                        .inner
                        .store
                        .feed()
                        .all_messages(after, KEYWORD_BACKFILL_PAGE)?;
                    let Some((last, _)) = page.last() else {
                        return Ok(true);
                    };
                    after = Some(*last);
                    this.backfill_page(&page);
                }
            })
            .await;
            match done {
                Ok(true) => {
                    self.inner
                        .progress
                        .send_modify(|progress| progress.backfilled = true);
                    tracing::info!(
                        seconds = started.elapsed().as_secs_f64(),
                        "keyword index backfilled with the stored messages"
                    );
                    return;
                }
                Ok(false) => return,
                Err(err) => {
                    tracing::error!(
                        error = %err.for_log(),
                        "the keyword index could not be backfilled; retrying in 30 s \
                         (keyword recall misses messages stored before this start meanwhile)"
                    );
                    pause(&mut stop, Duration::from_secs(30)).await;
                }
            }
        }
    }

    /// Adds the text of the messages of `page` (read from the store before) that the index
    /// still has and has not indexed by keywords yet.
    pub(super) fn backfill_page(&self, page: &[(MessageKey, Message)]) {
        let mut indexes = self.write();
        let indexes = &mut *indexes;
        for (key, message) in page {
            let id = key.as_u64();
            // A message in `docs` has its session's owner.
            let Some(owner) = indexes.owners.get(&key.session()) else {
                continue;
            };
            let keywords = indexes.hybrid.keywords_mut();
            if indexes.docs.contains_key(&id) && !keywords.contains(&owner.user, id) {
                keywords.add(&owner.user, id, &message.content);
                *indexes.dirty.get_mut() = true;
            }
        }
    }

    /// Builds the vector index's graph whenever it needs one, and extends it over the
    /// vectors the pipeline adds, until `stop` turns true. After
    /// a start it waits for the keyword backfill: without the graph vector searches are only
    /// slower, without the keywords recall misses messages, and the two shared the cores
    /// (keywords complete after 28–30 s instead of 17 s at 57,600 messages).
    async fn keep_graph_built(self, stop: watch::Receiver<bool>) {
        let this = self.clone();
        run_graph_builder(
            stop,
            || (!self.keywords_pending() && self.read().hybrid.needs_graph_work()).then_some(()),
            move |(), cancelled| this.build_graph(cancelled),
            |outcome, took| match outcome {
                GraphBuilt::Installed => tracing::info!(
                    vectors = self.indexed_vectors(),
                    seconds = took.as_secs_f64(),
                    "vector index graph built"
                ),
                GraphBuilt::Extended | GraphBuilt::NotNeeded | GraphBuilt::Cancelled => {}
            },
        )
        .await;
    }

    /// Builds or extends the vector index's graph, a chunk at a time under the index lock's
    /// read side (see [`HybridIndex::build_graph_unlocked`]).
    pub(super) fn build_graph(&self, cancelled: impl Fn() -> bool) -> GraphBuilt {
        HybridIndex::build_graph_unlocked(
            &self.inner.indexes,
            |indexes| Some(&indexes.hybrid),
            cancelled,
        )
    }

    /// Embeds one batch from the outbox and, on a store several processes write, applies
    /// what every process embedded since the last step. Returns false when there was nothing
    /// to do.
    async fn step(&self) -> Result<bool> {
        let embedded = self.embed_batch().await?;
        let applied = match self.follow().await? {
            Some(followed) => followed,
            // One writer: its batches are every append, in order.
            None => embedded,
        };
        if let Some(last_seq) = applied {
            self.inner
                .progress
                .send_modify(|progress| progress.vectors = progress.vectors.max(last_seq));
        }
        Ok(embedded.is_some() || applied.is_some())
    }

    /// Embeds the oldest appends waiting (on a shared store: those this process claimed),
    /// indexes them, and stores their vectors. Returns the last position of the batch, `None`
    /// when nothing waited.
    async fn embed_batch(&self) -> Result<Option<u64>> {
        let this = self.clone();
        let batch = blocking(move || -> Result<_> {
            let read_at = this.erasures_begun();
            let batch = this
                .inner
                .store
                .feed()
                .pending_embeddings(this.inner.options.batch_messages)?;
            // Keywords first: they cost microseconds, and a query that cannot wait for the
            // embeddings still finds the newest messages by their words.
            this.index_texts(batch.iter(), read_at)?;
            Ok(batch)
        })
        .await?;
        let Some(last_seq) = batch.last().map(|p| p.seq) else {
            return Ok(None);
        };
        let mut keyed: HashMap<MessageKey, Vec<f32>> =
            self.embed_by_tenant(&batch).await?.into_iter().collect();
        // A few appends' vectors per commit: a commit writes about four pages per append's
        // vectors, and a request's commit waits for the one in progress (a whole batch's
        // took some 3 ms, one appending client's p99). Each part is indexed once stored, so
        // a failure of a later part leaves none stored but not indexed.
        for part in batch.chunks(STORED_PER_COMMIT) {
            let done = part.iter().map(|pending| pending.seq).collect();
            let vectors: Vec<_> = part
                .iter()
                .flat_map(|pending| &pending.messages)
                .filter_map(|(key, _)| keyed.remove_entry(key))
                .collect();
            self.inner
                .store
                .feed()
                .store_embeddings(self.inner.model.clone(), done, vectors.clone())
                .await?;
            let this = self.clone();
            blocking(move || this.index_vectors(&vectors)).await?;
        }
        Ok(Some(last_seq))
    }

    /// On a store several processes write, applies what changed after the position applied
    /// so far, up to [`FOLLOWED_PAGES`] pages: indexes the appends, whoever embedded them
    /// (this process's own again: adding is idempotent), and takes out what other processes
    /// erased, once for all the pages (a purge's thousands of removals cost one pass over the
    /// graph and one snapshot). Returns the last position applied (`None`: nothing new); `None` for
    /// a store with one writer. Rebuilds the indexes from the store when entries this process
    /// did not apply were pruned.
    async fn follow(&self) -> Result<Option<Option<u64>>> {
        let page = self.inner.options.batch_messages;
        let mut after = self.inner.progress.borrow().vectors;
        let mut through = None;
        let mut removals = Vec::new();
        for _ in 0..FOLLOWED_PAGES {
            let this = self.clone();
            let read_at = self.erasures_begun();
            let followed =
                blocking(move || this.inner.store.feed().embedded_after(after, page)).await?;
            let Some(followed) = followed else {
                return Ok(None);
            };
            self.inner
                .follows_others
                .store(true, std::sync::atomic::Ordering::Relaxed);
            if followed.missed {
                return self.rebuild().await.map(|covered| Some(Some(covered)));
            }
            let Some(last) = followed.through else {
                break;
            };
            let read = followed.appends.len() + followed.removals.len();
            let this = self.clone();
            let appends = followed.appends;
            blocking(move || {
                let vectors: Vec<_> = appends
                    .iter()
                    .flat_map(|embedded| embedded.vectors.iter().cloned())
                    .collect();
                this.index_texts(appends.iter().map(|e| &e.append), read_at)?;
                this.index_vectors(&vectors)
            })
            .await?;
            removals.extend(followed.removals);
            (after, through) = (last, Some(last));
            // A short page: caught up for now.
            if read < page {
                break;
            }
        }
        if !removals.is_empty() {
            self.forget_removed(removals).await?;
        }
        Ok(Some(through))
    }

    /// Indexes the messages of `appends`, texts and filter fields. They were read from the
    /// store when [`Recall::erasures_begun`] said `read_at`: should an erasure have begun
    /// since, it may have deleted some of them after the read and taken them out of the
    /// indexes already, so only those the store still has are added, as read after it
    /// began. Without this an erasure had to wait for the pipeline to catch up, up to the
    /// read-your-writes bound, and went ahead regardless once that passed.
    ///
    /// The owners of sessions new to the indexes are read before the lock is taken, as is
    /// the store again: a store in a database answers over the network, and nothing may wait
    /// for it under the index lock (a request blocked on the lock can hold the very runtime
    /// worker that answer needs). A session unknown here but not read above was forgotten
    /// meanwhile: its messages are not indexed.
    pub(super) fn index_texts<'a>(
        &self,
        appends: impl Iterator<Item = &'a PendingEmbedding>,
        mut read_at: u64,
    ) -> Result<()> {
        let mut messages: Vec<(MessageKey, &Message)> = appends
            .flat_map(|pending| {
                pending
                    .messages
                    .iter()
                    .map(|(key, message)| (*key, message))
            })
            .collect();
        loop {
            let unknown: BTreeSet<u64> = {
                let indexes = self.read();
                messages
                    .iter()
                    .map(|(key, _)| key.session())
                    .filter(|sid| !indexes.owners.contains_key(sid))
                    .collect()
            };
            let mut owners = unknown
                .into_iter()
                .map(|sid| Ok((sid, Owner::in_store(&self.inner.store, sid)?)))
                .collect::<Result<HashMap<_, _>>>()?;
            let mut indexes = self.write();
            // Under the lock: an erasure that begins later takes out what is added here.
            let begun = self.erasures_begun();
            if begun == read_at {
                for (key, message) in &messages {
                    indexes.add_message(*key, message, true, || {
                        Ok(owners.remove(&key.session()).flatten())
                    })?;
                }
                return Ok(());
            }
            drop(indexes);
            let keys: Vec<MessageKey> = messages.iter().map(|(key, _)| *key).collect();
            let stored = self.inner.store.feed().messages_by_key(&keys)?;
            messages = messages
                .into_iter()
                .zip(stored)
                .filter_map(|(message, stored)| stored.map(|_| message))
                .collect();
            read_at = begun;
        }
    }

    /// Adds `vectors` of the messages the indexes have: not the vector of a message erased
    /// while it was being embedded (the store dropped it too).
    fn index_vectors(&self, vectors: &[(MessageKey, Vec<f32>)]) -> Result<()> {
        if vectors.is_empty() {
            return Ok(());
        }
        let mut indexes = self.write();
        let live: Vec<(u64, &[f32])> = vectors
            .iter()
            .filter(|(key, _)| indexes.docs.contains_key(&key.as_u64()))
            .map(|(key, vector)| (key.as_u64(), vector.as_slice()))
            .collect();
        indexes.hybrid.vectors_mut().insert_batch(live)?;
        *indexes.dirty.get_mut() = true;
        Ok(())
    }

    /// Builds the indexes again from the store and puts them in place of these, after this
    /// process missed entries of a shared outbox (it fell behind by more than the store keeps
    /// them). Returns the position the new indexes cover.
    async fn rebuild(&self) -> Result<u64> {
        tracing::warn!(
            "this node fell behind the shared embedding outbox by more than it keeps; \
             rebuilding the recall indexes from the store"
        );
        let started = Instant::now();
        let this = self.clone();
        let covered = blocking(move || -> Result<_> {
            let dimension = usize::try_from(this.inner.model.dimension).unwrap_or(usize::MAX);
            loop {
                let read_at = this.erasures_begun();
                let (mut fresh, covered, ..) =
                    Indexes::load(&this.inner.store, &this.inner.options, dimension, true)?;
                *fresh.dirty.get_mut() = true;
                let mut indexes = this.write();
                // An erasure that began during the load took its messages out of the old
                // indexes, and the load may have read them before the store deleted them.
                if this.erasures_begun() == read_at {
                    *indexes = fresh;
                    return Ok(covered);
                }
            }
        })
        .await?;
        // Not `max`: the new indexes cover what they loaded, which may be less than the
        // position the old ones claimed.
        self.inner.progress.send_modify(|progress| {
            progress.vectors = covered;
            progress.backfilled = true;
        });
        tracing::info!(
            seconds = started.elapsed().as_secs_f64(),
            "recall indexes rebuilt"
        );
        Ok(covered)
    }

    /// Embeds the messages of `batch`, each under its session's tenant (the embedder's cache
    /// namespace), the tenants' requests side by side so the workers share them. Messages of
    /// sessions deleted since they were queued were not read, and get no vector.
    async fn embed_by_tenant(
        &self,
        batch: &[PendingEmbedding],
    ) -> Result<Vec<(MessageKey, Vec<f32>)>> {
        let mut by_tenant: BTreeMap<&str, (Vec<MessageKey>, Vec<String>)> = BTreeMap::new();
        for pending in batch {
            let Some(session) = &pending.session else {
                continue;
            };
            let (keys, texts) = by_tenant.entry(session.tenant.as_str()).or_default();
            for (key, message) in &pending.messages {
                keys.push(*key);
                texts.push(message.content.clone());
            }
        }
        let mut requests = tokio::task::JoinSet::new();
        for (tenant, (keys, texts)) in by_tenant {
            let (embedder, tenant) = (self.inner.embedder.clone(), tenant.to_owned());
            requests.spawn(async move {
                let vectors = embedder.embed_in_background(&tenant, texts).await?;
                Ok::<_, IndexError>(keys.into_iter().zip(vectors).collect::<Vec<_>>())
            });
        }
        let mut keyed = Vec::new();
        while let Some(embedded) = requests.join_next().await {
            let embedded = embedded.map_err(IndexError::Pipeline)?;
            keyed.extend(embedded?);
        }
        Ok(keyed)
    }

    /// Removes the snapshot file, if there is one.
    pub(super) async fn remove_snapshot(&self) -> Result<()> {
        self.with_snapshot_file(|_, path| match std::fs::remove_file(path) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err.into()),
            _ => Ok(()),
        })
        .await
    }

    /// Saves the snapshot, and logs when it could not.
    pub(super) async fn save_snapshot(&self) {
        if let Err(err) = self.try_save_snapshot().await {
            tracing::warn!(error = %err.for_log(), "could not save the vector index snapshot");
        }
    }

    /// Saves the snapshot of the index as it is now, and says why it could not.
    pub(super) async fn try_save_snapshot(&self) -> Result<()> {
        self.try_save_snapshot_with(true).await
    }

    /// [`Recall::try_save_snapshot`], `with_keywords` or with the keyword section left out
    /// (an erasure's save: see `Recall::forget`).
    pub(super) async fn try_save_snapshot_with(&self, with_keywords: bool) -> Result<()> {
        self.with_snapshot_file(move |this, path| {
            // The version is read before the index: a change racing the save makes the
            // snapshot look older than it is, which only costs bringing it up to the store's
            // vectors at the next start, never a wrong load.
            let version = this.inner.store.feed().vectors_version()?;
            // The read side: searches go on while the file is written (at 50,000 vectors it
            // is 84 MB); changes wait, so the index saved is the one `dirty` speaks of.
            let indexes = this.read();
            let allowed = keywords_in_snapshot(&this.inner.store);
            let keywords = (with_keywords && allowed).then(|| {
                let keywords = indexes.hybrid.keywords();
                Box::new(move |out: &mut dyn std::io::Write| keywords.write_section(out))
                    as SectionWriter<'_>
            });
            indexes
                .hybrid
                .vectors()
                .save_with(path, version, keywords)?;
            // A file saved without the keywords it could hold is behind the index: the next
            // save writes them.
            let left_out = allowed && !with_keywords;
            indexes.dirty.store(left_out, Ordering::Relaxed);
            Ok(())
        })
        .await
    }

    /// Runs `work` on the snapshot's path off the async workers, one at a time: every save
    /// writes the same temporary file, and two at once would mix their bytes in it or rename
    /// it from under each other (or a removal race a rename). Nothing without a path.
    async fn with_snapshot_file(
        &self,
        work: impl FnOnce(&Self, &Path) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        let Some(path) = self.inner.options.snapshot_path.clone() else {
            return Ok(());
        };
        let this = self.clone();
        blocking(move || {
            let _one_at_a_time = this
                .inner
                .snapshot_save
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            work(&this, &path)
        })
        .await
    }
}

/// What a start made of the vector snapshot (see [`Recall::snapshot_at_open`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotLoad {
    /// None configured, or no file: the index was built from the stored vectors.
    Absent,
    /// Loaded as saved, graph included: the store's vectors had not changed since.
    Current,
    /// Loaded, then brought up to the store's vectors, which changed after it was saved (a
    /// stop came between a change and the next save).
    Stale,
    /// Not loaded, for the reason given (a failed check: a truncated or damaged file, a
    /// link or count out of bounds): the index was rebuilt from the stored vectors, and the
    /// next save overwrites the file.
    Unusable(String),
}

/// The vector index a start serves from, and what it made of the snapshot. The
/// snapshot's when the store's vectors have not changed since it was taken. After a change
/// (a crash before the next save) the snapshot brought up to the stored vectors: an
/// unchanged vector keeps its slot and its graph links, vectors stored since join the
/// graph's head (the builder links them), and vectors no longer stored are removed and
/// compacted out, arena and graph, before anything is served. Rebuilt from the stored
/// vectors when there is no usable snapshot.
pub(super) fn load_vectors(
    store: &Store,
    options: &RecallOptions,
    config: VectorConfig,
) -> Result<(VectorIndex, SnapshotLoad, Option<KeywordSection>)> {
    let version = store.feed().vectors_version()?;
    let mut stale = None;
    let mut outcome = SnapshotLoad::Absent;
    let mut keywords = None;
    if let Some(path) = &options.snapshot_path
        && path.exists()
    {
        match VectorIndex::load_with_keywords(path, config.clone()) {
            Ok((index, covered, saved)) if covered == version => {
                return Ok((index, SnapshotLoad::Current, saved));
            }
            Ok((index, _, saved)) => {
                tracing::info!("vector snapshot is stale; bringing it up to the stored vectors");
                stale = Some(index);
                outcome = SnapshotLoad::Stale;
                keywords = saved;
            }
            Err(err) => {
                let reason = err.for_log();
                tracing::warn!(error = %reason, "vector snapshot unusable; rebuilding");
                outcome = SnapshotLoad::Unusable(reason);
            }
        }
    }
    // The ids the store holds, gathered only to take what it no longer holds out of a
    // stale snapshot.
    let mut stored = stale.as_ref().map(|_| Vec::new());
    let mut index = match stale {
        Some(index) => index,
        None => VectorIndex::new(config)?,
    };
    let mut after = None;
    loop {
        let page = store.feed().vectors(after, 4_096)?;
        let Some(last) = page.last() else { break };
        after = Some(last.key);
        if let Some(stored) = &mut stored {
            stored.extend(page.iter().map(|vector| vector.key.as_u64()));
        }
        index.insert_batch(
            page.iter()
                .map(|stored| (stored.key.as_u64(), stored.components.as_slice())),
        )?;
    }
    if let Some(mut stored) = stored {
        stored.sort_unstable();
        let gone: Vec<u64> = index
            .ids()
            .filter(|id| stored.binary_search(id).is_err())
            .collect();
        for id in gone {
            index.remove(id);
        }
        index.compact();
    }
    Ok((index, outcome, keywords))
}
