//! Hybrid recall over a store's messages: the indexing pipeline that keeps the keyword and
//! vector indexes in step with the store, and the queries that search them.
//!
//! The pipeline drains the store's outbox: for each batch of appended messages it indexes the
//! text for keywords at once, embeds it on the embedder's worker threads, stores the vectors
//! (so a rebuild never embeds again) and adds them to the vector index. Appends never wait for
//! any of this. A query waits, for a bounded time, until everything committed before it is
//! indexed (read-your-writes); if embedding is behind it answers from keywords for the newest
//! messages and says so.
//!
//! The keyword index is partitioned by the tenant and user owning each message's session, and
//! a query searches its scope's partition only (a scope is always one user's): its scores
//! come from that user's messages alone, so one tenant cannot tell from them how common a
//! word is in another's, and a query visits no one else's postings.
//!
//! The vector index is snapshotted to a file while the store's `vectors_version` is known:
//! on start the snapshot is used when the version still matches and the index is rebuilt
//! from the stored vectors otherwise. The keyword index is rebuilt from the messages: at
//! open, or with [`RecallOptions::keywords_in_background`] by a task beside the pipeline while
//! queries are answered (they wait a bounded time for it and otherwise say what is missing).
//! The HNSW graph is not part of the snapshot: beside the pipeline a builder grows it, without
//! holding the index lock, whenever the index needs one (after a start, past the threshold,
//! after an erasure compacted it); until then vector searches scan exactly.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use memlayer_embed::Embedder;
use memlayer_store::{
    Access, EmbeddingModel, Message, MessageKey, PendingEmbedding, Role, SessionRef, Store,
    StoreError, Timestamp, blocking,
};
use tokio::sync::watch;

mod check;

pub use check::IndexCheck;

use crate::background::pause;
use crate::keyword::KeywordPartitions;
use crate::{
    GraphBuilt, IdFilter, IndexError, RRF_K, Result, Retriever, VectorConfig, VectorIndex,
    build_graph_unlocked, reciprocal_rank_fusion, run_graph_builder,
};

/// Messages the keyword backfill analyses per hold of the write lock: 640 KB of 5 KB
/// messages, some 35 ms at the rate a start indexed them (288 MB in about 15 s), which is
/// the longest a search waits for it.
const KEYWORD_BACKFILL_PAGE: usize = 128;

/// How a [`Recall`] runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RecallOptions {
    /// Where the vector index snapshot lives; `None` keeps the index in memory only.
    pub snapshot_path: Option<PathBuf>,
    /// Most messages embedded per pipeline step.
    pub batch_messages: usize,
    /// Longest a query waits for earlier appends to be indexed before answering without them.
    pub read_your_writes_wait: Duration,
    /// Least time between two snapshots while the index keeps changing.
    pub snapshot_interval: Duration,
    /// Analyse the stored messages' text for the keyword index after [`Recall::open`], in
    /// [`Recall::run_pipeline`]'s backfill, instead of inside it. The analysis of every
    /// stored message was most of a large store's start (16 of 16.5 s at 570 MiB);
    /// `open` still reads every message for its session and filter fields.
    pub keywords_in_background: bool,
}

impl Default for RecallOptions {
    fn default() -> Self {
        Self {
            snapshot_path: None,
            batch_messages: 64,
            read_your_writes_wait: Duration::from_secs(2),
            snapshot_interval: Duration::from_secs(60),
            keywords_in_background: false,
        }
    }
}

impl RecallOptions {
    /// Options that snapshot the vector index to `path`.
    pub fn with_snapshot(mut self, path: impl Into<PathBuf>) -> Self {
        self.snapshot_path = Some(path.into());
        self
    }

    /// Options that index the stored messages' keywords in the background (see
    /// [`RecallOptions::keywords_in_background`]).
    pub fn with_keywords_in_background(mut self) -> Self {
        self.keywords_in_background = true;
        self
    }
}

/// Which messages a query searches, within what the query's [`Access`] reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One session of the tenant.
    Session {
        /// The session id.
        session_id: String,
    },
    /// Every session of a user, optionally only those with one agent.
    User {
        /// The user.
        user_id: String,
        /// Only this agent's sessions, when given.
        agent_id: Option<String>,
    },
}

/// A recall request.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallQuery {
    /// Whose messages may be searched: a tenant's, or only one user's sessions in it. A
    /// session (or user) outside it is not found, as if it did not exist.
    pub access: Access,
    /// Which of those messages.
    pub scope: Scope,
    /// What to look for.
    pub query: String,
    /// How many hits at most.
    pub k: usize,
    /// Only messages with one of these roles, when given.
    pub roles: Option<Vec<Role>>,
    /// Only messages at or after this time.
    pub after: Option<Timestamp>,
    /// Only messages before this time.
    pub before: Option<Timestamp>,
    /// Messages to leave out: typically the turns already in a context's window.
    pub exclude: Option<Excluded>,
}

/// Messages of one session a recall leaves out. Naming the session matters in a user scope,
/// where the same index exists in every session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excluded {
    /// The session the indices belong to.
    pub session_id: String,
    /// The indices of its messages to leave out.
    pub indices: Vec<u64>,
}

/// One recalled message.
#[derive(Debug, Clone, PartialEq)]
pub struct RecallHit {
    /// The session it belongs to.
    pub session: SessionRef,
    /// The message.
    pub message: Message,
    /// Its fused score (reciprocal rank fusion; higher is better).
    pub score: f32,
    /// Its 1-based rank among keyword results, if the keyword index found it.
    pub keyword_rank: Option<u32>,
    /// Its 1-based rank among vector results, if the vector index found it.
    pub vector_rank: Option<u32>,
}

/// The answer to a [`RecallQuery`].
#[derive(Debug, Clone, PartialEq)]
pub struct Recalled {
    /// Best first.
    pub hits: Vec<RecallHit>,
    /// Why the answer may be incomplete, when it may: embedding was behind, or the query
    /// could not be embedded and only keywords were searched.
    pub degraded: Option<String>,
}

/// How far the pipeline has got, as outbox sequence numbers: every append up to
/// `keywords` is in the keyword index, up to `vectors` in the vector index; and whether the
/// messages stored before the start are all in the keyword index (`backfilled`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Progress {
    keywords: u64,
    vectors: u64,
    backfilled: bool,
}

/// Which messages a query may find, beyond what the indexes hold.
struct Filter {
    /// The sessions its scope covers.
    allowed: HashSet<u64>,
    /// The keyword partition holding them: a scope is one user's. `None` when the scope
    /// covers nothing indexed.
    keywords: Option<TenantUser>,
    /// The session key and message indices it excludes.
    excluded: Option<(u64, HashSet<u64>)>,
}

/// What the indexes need to know about a message to filter it.
#[derive(Debug, Clone, Copy)]
struct Doc {
    role: Role,
    timestamp: Timestamp,
}

/// A user of a tenant: whose messages one keyword partition holds. Every scope lies within
/// one user's sessions, so a search reads one partition, and its scores depend on that
/// user's messages alone: not on other tenants' texts, nor on how many there are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TenantUser {
    tenant: String,
    user_id: String,
}

/// Who a session belongs to, for scope filters, keyword partitions and naming hits.
#[derive(Debug, Clone)]
struct Owner {
    at: SessionRef,
    /// The keyword partition of the session's messages. Its tenant repeats `at`'s: kept
    /// whole, indexing a message names its partition without building a key.
    user: TenantUser,
    agent_id: String,
}

struct Indexes {
    vectors: VectorIndex,
    /// Partitioned by the owner of each message's session. A session's owner stays in
    /// `owners` as long as any of its messages is in here, so a removal can name the
    /// partition.
    keywords: KeywordPartitions<TenantUser>,
    docs: BTreeMap<u64, Doc>,
    owners: HashMap<u64, Owner>,
    /// The vector index changed since the last snapshot.
    dirty: bool,
}

struct Inner {
    store: Store,
    embedder: Embedder,
    model: EmbeddingModel,
    options: RecallOptions,
    indexes: RwLock<Indexes>,
    progress: watch::Sender<Progress>,
}

/// Hybrid recall over one store. Cheap to clone.
#[derive(Clone)]
pub struct Recall {
    inner: Arc<Inner>,
}

impl Recall {
    /// Builds the indexes from `store` (using the vector snapshot when it is still exact) and
    /// returns a handle whose [`Recall::run_pipeline`] must be spawned to keep them current.
    ///
    /// Fails with [`IndexError::ModelMismatch`] when the store's vectors were made by another
    /// model than `embedder`'s.
    pub fn open(store: Store, embedder: Embedder, options: RecallOptions) -> Result<Self> {
        let identity = embedder.identity();
        let model = EmbeddingModel {
            name: identity.name.clone(),
            sha256: identity.sha256.clone(),
            dimension: u32::try_from(identity.dimension).unwrap_or(u32::MAX),
        };
        if let Some(stored) = store.feed().vector_model()?
            && stored != model
        {
            return Err(IndexError::ModelMismatch {
                stored: format!("{} ({})", stored.name, stored.sha256),
                configured: format!("{} ({})", model.name, model.sha256),
            });
        }
        let config = VectorConfig::new(identity.dimension);
        let vectors = load_vectors(&store, &options, config)?;
        let mut indexes = Indexes {
            vectors,
            keywords: KeywordPartitions::default(),
            docs: BTreeMap::new(),
            owners: HashMap::new(),
            dirty: false,
        };
        let with_keywords = !options.keywords_in_background;
        let mut after = None;
        loop {
            let page = store.feed().all_messages(after, 4_096)?;
            let Some((last, _)) = page.last() else { break };
            after = Some(*last);
            for (key, message) in &page {
                indexes.add_message(&store, *key, message, with_keywords)?;
            }
        }
        // Every committed append is now keyword-indexed; vectors exist for all but the
        // appends still in the outbox.
        let head = store.feed().outbox_head()?;
        let first_pending = store.feed().pending_embeddings(1)?.first().map(|p| p.seq);
        let progress = Progress {
            keywords: head,
            vectors: first_pending.map_or(head, |seq| seq - 1),
            backfilled: with_keywords,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                store,
                embedder,
                model,
                options,
                indexes: RwLock::new(indexes),
                progress: watch::channel(progress).0,
            }),
        })
    }

    /// Number of messages with a vector in the index.
    pub fn indexed_vectors(&self) -> usize {
        self.read().vectors.len()
    }

    /// Whether messages stored before the start still wait for the keyword backfill (see
    /// [`RecallOptions::keywords_in_background`]).
    pub fn keywords_pending(&self) -> bool {
        !self.inner.progress.borrow().backfilled
    }

    /// Whether the vector index waits for its graph (see [`VectorIndex::needs_graph`]):
    /// vector searches scan every vector until the pipeline's builder installs it.
    pub fn graph_pending(&self) -> bool {
        self.read().vectors.needs_graph()
    }

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
            match self.step().await {
                // A backlog must not hold up a shutdown: what is left stays in the outbox
                // and the next start indexes it.
                Ok(true) => tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    () = std::future::ready(()) => {}
                },
                Ok(false) => {
                    if self.read().dirty
                        && last_snapshot.elapsed() >= self.inner.options.snapshot_interval
                    {
                        self.save_snapshot().await;
                        last_snapshot = Instant::now();
                    }
                    tokio::select! {
                        () = &mut shutdown => break,
                        changed = commits.changed() => if changed.is_err() { break },
                        // A commit may have happened between the empty read and the wait.
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
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
    fn backfill_page(&self, page: &[(MessageKey, Message)]) {
        let mut indexes = self.write();
        let indexes = &mut *indexes;
        for (key, message) in page {
            let id = key.as_u64();
            // A message in `docs` has its session's owner.
            let Some(owner) = indexes.owners.get(&key.session()) else {
                continue;
            };
            if indexes.docs.contains_key(&id) && !indexes.keywords.contains(&owner.user, id) {
                indexes.keywords.add(&owner.user, id, &message.content);
            }
        }
    }

    /// Builds the vector index's graph whenever it needs one, until `stop` turns true. After
    /// a start it waits for the keyword backfill: without the graph vector searches are only
    /// slower, without the keywords recall misses messages, and the two shared the cores
    /// (keywords complete after 28–30 s instead of 17 s at 57,600 messages).
    async fn keep_graph_built(self, stop: watch::Receiver<bool>) {
        let this = self.clone();
        run_graph_builder(
            stop,
            || (!self.keywords_pending() && self.read().vectors.needs_graph()).then_some(()),
            move |(), cancelled| this.build_graph(cancelled),
            |outcome, took| match outcome {
                GraphBuilt::Installed => tracing::info!(
                    vectors = self.indexed_vectors(),
                    seconds = took.as_secs_f64(),
                    "vector index graph built"
                ),
                // An erasure compacted the index meanwhile: the builder starts over.
                GraphBuilt::Superseded => {
                    tracing::debug!("vector index changed during the graph build; again");
                }
                GraphBuilt::NotNeeded | GraphBuilt::Cancelled => {}
            },
        )
        .await;
    }

    /// Builds the vector index's graph if it needs one, without holding the index lock
    /// while it grows (see [`build_graph_unlocked`]).
    fn build_graph(&self, cancelled: impl Fn() -> bool) -> GraphBuilt {
        build_graph_unlocked(
            &self.inner.indexes,
            |indexes| Some(&indexes.vectors),
            |indexes| Some(&mut indexes.vectors),
            cancelled,
        )
    }

    /// Indexes one batch from the outbox. Returns false when the outbox was empty.
    async fn step(&self) -> Result<bool> {
        let this = self.clone();
        let batch = blocking(move || -> Result<_> {
            let batch = this
                .inner
                .store
                .feed()
                .pending_embeddings(this.inner.options.batch_messages)?;
            // Keywords first: they cost microseconds, and a query that cannot wait for the
            // embeddings still finds the newest messages by their words.
            let mut indexes = this.write();
            for pending in &batch {
                for (key, message) in &pending.messages {
                    indexes.add_text(&this.inner.store, *key, message)?;
                }
            }
            Ok(batch)
        })
        .await?;
        let Some(last_seq) = batch.last().map(|p| p.seq) else {
            return Ok(false);
        };
        self.inner
            .progress
            .send_modify(|progress| progress.keywords = progress.keywords.max(last_seq));

        let keyed = self.embed_by_tenant(&batch).await?;
        let done = batch.iter().map(|pending| pending.seq).collect();
        self.inner
            .store
            .feed()
            .store_embeddings(self.inner.model.clone(), done, keyed.clone())
            .await?;
        let this = self.clone();
        blocking(move || -> Result<_> {
            let mut indexes = this.write();
            // A session deleted while its messages were being embedded is gone from the
            // store; its vectors were dropped there and must not enter the index either.
            let live: Vec<(u64, &[f32])> = keyed
                .iter()
                .filter(|(key, _)| indexes.docs.contains_key(&key.as_u64()))
                .map(|(key, vector)| (key.as_u64(), vector.as_slice()))
                .collect();
            indexes.vectors.insert_batch(live)?;
            indexes.dirty = true;
            Ok(())
        })
        .await?;
        self.inner
            .progress
            .send_modify(|progress| progress.vectors = progress.vectors.max(last_seq));
        Ok(true)
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
                let vectors = embedder.embed(&tenant, texts).await?;
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

    /// Removes every message of the sessions with surrogate keys `sids` (of `tenant`) from
    /// the indexes, and rewrites the snapshot without them. Call it after the store deleted
    /// the sessions. Many sessions at once cost one compaction and one snapshot: a purge that
    /// called this once per session rewrote the whole snapshot (and rebuilt the graph) per
    /// session.
    pub async fn forget_sessions(&self, tenant: &str, sids: Vec<u64>) -> Result<()> {
        self.forget(tenant, sids.clone(), move |indexes| {
            sids.iter()
                .flat_map(|&sid| indexes.docs.range(MessageKey::session_range(sid)))
                .map(|(key, _)| *key)
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
                    .vectors
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
        self.forget(tenant, deleted.iter().copied().collect(), move |indexes| {
            let keys: BTreeSet<u64> = indexes
                .vectors
                .ids()
                .chain(indexes.docs.keys().copied())
                .filter(|&id| deleted.contains(&MessageKey::from_u64(id).session()))
                .collect();
            keys.into_iter().collect()
        })
        .await
    }

    /// Removes one message of `tenant` from the indexes and rewrites the snapshot without it.
    /// Call it after the store erased the message.
    pub async fn forget_message(&self, tenant: &str, key: MessageKey) -> Result<()> {
        self.forget(tenant, Vec::new(), move |_| vec![key.as_u64()])
            .await
    }

    /// Removes the keys `select` picks from both indexes, then the owners of `sessions`,
    /// compacts the vector index so that not even its graph keeps a copy of an erased
    /// vector, empties `tenant`'s part of the embedder's cache (which holds vectors by the
    /// hash of their text; the erased texts were embedded under their tenant, and only
    /// there), and saves the snapshot. Erasure calls it again after the pipeline caught up,
    /// so a batch in flight cannot put a key back: removal is idempotent.
    async fn forget(
        &self,
        tenant: &str,
        sessions: Vec<u64>,
        select: impl FnOnce(&Indexes) -> Vec<u64> + Send + 'static,
    ) -> Result<()> {
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
            indexes.vectors.compact();
            indexes.dirty = true;
            Ok(())
        })
        .await?;
        self.inner.embedder.clear_cache(tenant);
        self.save_snapshot().await;
        Ok(())
    }

    /// The embedder queries and the pipeline use, for other indexes over the same model.
    pub fn embedder(&self) -> &Embedder {
        &self.inner.embedder
    }

    /// Searches `query.scope` by keywords and by meaning and fuses the two rankings.
    pub async fn recall(&self, query: RecallQuery) -> Result<Recalled> {
        // Embedded first: a query embedded before comes from the embedder's cache at once,
        // and the read-your-writes head read after it still covers every append committed
        // before the call.
        let (embedded, embedding_failed) = match self
            .inner
            .embedder
            .embed(query.access.tenant(), vec![query.query.clone()])
            .await
        {
            Ok(mut vectors) => (vectors.pop(), None),
            Err(err) => (
                None,
                Some(format!(
                    "the query could not be embedded ({err}); only keywords were searched"
                )),
            ),
        };
        // When the index has caught up with the store, as it almost always has, one trip
        // to the blocking pool answers: under load every trip waits for a thread.
        let this = self.clone();
        let flow = blocking(move || -> Result<_> {
            let head = this.inner.store.feed().outbox_head()?;
            if this.indexed_up_to(head) {
                let filter = this.filter(&query)?;
                let recalled =
                    this.search(&query, &filter, embedded.as_deref(), embedding_failed)?;
                return Ok(ControlFlow::Break(recalled));
            }
            Ok(ControlFlow::Continue((
                head,
                query,
                embedded,
                embedding_failed,
            )))
        })
        .await?;
        let (head, query, embedded, embedding_failed) = match flow {
            ControlFlow::Continue(behind) => behind,
            ControlFlow::Break(recalled) => return Ok(recalled),
        };
        let degraded = embedding_failed.or(self.wait_for_head(head).await?);
        let this = self.clone();
        // The filter is made after the wait: a scope covers the sessions the index has seen.
        blocking(move || -> Result<_> {
            let filter = this.filter(&query)?;
            this.search(&query, &filter, embedded.as_deref(), degraded)
        })
        .await
    }

    /// The sessions a query's scope covers, their keyword partition, and the messages it
    /// excludes.
    fn filter(&self, query: &RecallQuery) -> Result<Filter> {
        let (allowed, keywords) = self.scope_sessions(query)?;
        Ok(Filter {
            allowed,
            keywords,
            excluded: self.excluded_keys(&query.access, query.exclude.as_ref())?,
        })
    }

    /// The session key and message indices an exclusion names; `None` when it names
    /// nothing that exists.
    fn excluded_keys(
        &self,
        access: &Access,
        exclude: Option<&Excluded>,
    ) -> Result<Option<(u64, HashSet<u64>)>> {
        let Some(exclude) = exclude else {
            return Ok(None);
        };
        let sid = self
            .inner
            .store
            .feed()
            .session_key(access, &exclude.session_id)?;
        Ok(sid.map(|sid| (sid, exclude.indices.iter().copied().collect())))
    }

    /// Waits until every append committed before the call is indexed, or the configured
    /// time passes; says what is missing if it does.
    pub async fn wait_for_index(&self) -> Result<Option<String>> {
        let store = self.inner.store.clone();
        let head = blocking(move || store.feed().outbox_head()).await?;
        self.wait_for_head(head).await
    }

    /// Whether every outbox entry up to `head` is in the vector index, and every message
    /// stored before the start in the keyword index.
    fn indexed_up_to(&self, head: u64) -> bool {
        let progress = self.inner.progress.borrow();
        progress.vectors >= head && progress.backfilled
    }

    /// Waits until every outbox entry up to `head` is indexed, or the configured time
    /// passes; says what is missing if it does.
    async fn wait_for_head(&self, head: u64) -> Result<Option<String>> {
        let mut progress = self.inner.progress.subscribe();
        // The guard `wait_for` returns must not live across the next await (it is not Send).
        let caught_up = matches!(
            tokio::time::timeout(
                self.inner.options.read_your_writes_wait,
                progress.wait_for(|p| p.vectors >= head && p.backfilled),
            )
            .await,
            Ok(Ok(_))
        );
        if caught_up {
            return Ok(None);
        }
        if !self.inner.progress.borrow().backfilled {
            return Ok(Some(
                "the keyword index is still being rebuilt after the start: messages stored \
                 before it were searched by meaning only"
                    .to_owned(),
            ));
        }
        let store = self.inner.store.clone();
        let pending = blocking(move || store.feed().pending_embedding_count()).await?;
        Ok(Some(format!(
            "{pending} recent append(s) are not embedded yet; they were searched by keywords only"
        )))
    }

    /// The sessions a scope covers, and the keyword partition they are in: none of a user
    /// the query's access does not reach.
    fn scope_sessions(&self, query: &RecallQuery) -> Result<(HashSet<u64>, Option<TenantUser>)> {
        let access = &query.access;
        match &query.scope {
            Scope::Session { session_id } => {
                let sid = self
                    .inner
                    .store
                    .feed()
                    .session_key(access, session_id)?
                    .ok_or_else(|| {
                        IndexError::Store(StoreError::SessionNotFound {
                            session_id: session_id.clone(),
                        })
                    })?;
                // Unknown until the index has seen a message of the session, and it has none.
                let partition = self.read().owners.get(&sid).map(|owner| owner.user.clone());
                Ok((HashSet::from([sid]), partition))
            }
            Scope::User { user_id, .. } if !access.sees(user_id) => Ok((HashSet::new(), None)),
            Scope::User { user_id, agent_id } => {
                let user = TenantUser {
                    tenant: access.tenant().to_owned(),
                    user_id: user_id.clone(),
                };
                let sessions = self
                    .read()
                    .owners
                    .iter()
                    .filter(|(_, owner)| {
                        owner.user == user
                            && agent_id
                                .as_ref()
                                .is_none_or(|agent| &owner.agent_id == agent)
                    })
                    .map(|(sid, _)| *sid)
                    .collect();
                Ok((sessions, Some(user)))
            }
        }
    }

    fn search(
        &self,
        query: &RecallQuery,
        filter: &Filter,
        embedded: Option<&[f32]>,
        degraded: Option<String>,
    ) -> Result<Recalled> {
        let Filter {
            allowed: sessions,
            excluded,
            ..
        } = filter;
        let indexes = self.read();
        let admits = |raw: u64| {
            let key = MessageKey::from_u64(raw);
            sessions.contains(&key.session())
                && !excluded.as_ref().is_some_and(|(sid, indices)| {
                    key.session() == *sid && indices.contains(&key.index())
                })
                && indexes.docs.get(&raw).is_some_and(|doc| {
                    query
                        .roles
                        .as_ref()
                        .is_none_or(|roles| roles.contains(&doc.role))
                        && query.after.is_none_or(|after| doc.timestamp >= after)
                        && query.before.is_none_or(|before| doc.timestamp < before)
                })
        };
        // Each retriever proposes more than k so fusion can promote what both agree on.
        let candidates = query.k.saturating_mul(3).max(10);
        let ids = |hits: Vec<(u64, f32)>| hits.into_iter().map(|(id, _)| id).collect::<Vec<_>>();
        let by_keyword = ids(indexes.keyword_hits(filter, &query.query, candidates, &admits));
        let by_vector = match embedded {
            Some(vector) => ids(indexes.vectors.search(vector, candidates, Some(&admits))?),
            None => Vec::new(),
        };
        let fused = reciprocal_rank_fusion(
            &[
                (Retriever::Keyword, &by_keyword),
                (Retriever::Vector, &by_vector),
            ],
            RRF_K,
        );
        let fused: Vec<_> = fused.into_iter().take(query.k).collect();
        let keys: Vec<MessageKey> = fused.iter().map(|f| MessageKey::from_u64(f.id)).collect();
        let messages = self.inner.store.feed().messages_by_key(&keys)?;
        let hits = fused
            .iter()
            .zip(keys)
            .zip(messages)
            .filter_map(|((fused, key), message)| {
                Some(RecallHit {
                    session: indexes.owners.get(&key.session())?.at.clone(),
                    message: message?,
                    score: fused.score,
                    keyword_rank: fused.rank(Retriever::Keyword),
                    vector_rank: fused.rank(Retriever::Vector),
                })
            })
            .collect();
        Ok(Recalled { hits, degraded })
    }

    async fn save_snapshot(&self) {
        let Some(path) = self.inner.options.snapshot_path.clone() else {
            return;
        };
        let this = self.clone();
        let saved = blocking(move || -> Result<_> {
            // The version is read before the index: a change racing the save makes the
            // snapshot look older than it is, which only costs a rebuild, never a wrong load.
            let version = this.inner.store.feed().vectors_version()?;
            let mut indexes = this.write();
            indexes.vectors.save(&path, version)?;
            indexes.dirty = false;
            Ok(())
        })
        .await;
        if let Err(err) = saved {
            tracing::warn!(error = %err.for_log(), "could not save the vector index snapshot");
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Indexes> {
        self.inner
            .indexes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Indexes> {
        self.inner
            .indexes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Indexes {
    /// The (at most) `k` best keyword matches of `query` that `admits` lets through, from
    /// the partition of `filter`'s scope only: other users' messages are neither scored nor
    /// part of the statistics the scores come from.
    fn keyword_hits(
        &self,
        filter: &Filter,
        query: &str,
        k: usize,
        admits: IdFilter<'_>,
    ) -> Vec<(u64, f32)> {
        match &filter.keywords {
            Some(partition) => self.keywords.search(partition, query, k, Some(admits)),
            None => Vec::new(),
        }
    }

    /// Takes message `key` out of every index.
    fn remove_message(&mut self, key: u64) {
        self.docs.remove(&key);
        // A message without its session's owner was never keyword-indexed.
        if let Some(owner) = self.owners.get(&MessageKey::from_u64(key).session()) {
            self.keywords.remove(&owner.user, key);
        }
        self.vectors.remove(key);
    }

    /// Adds a message's text and filter fields, learning its session's owner on first sight.
    fn add_text(&mut self, store: &Store, key: MessageKey, message: &Message) -> Result<()> {
        self.add_message(store, key, message, true)
    }

    /// Adds a message's filter fields, and its text `with_keywords`, learning its session's
    /// owner on first sight.
    fn add_message(
        &mut self,
        store: &Store,
        key: MessageKey,
        message: &Message,
        with_keywords: bool,
    ) -> Result<()> {
        let owner = match self.owners.entry(key.session()) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                // A message whose session is already gone (deleted meanwhile) is not indexed.
                let Some((at, session)) = store.feed().session_by_key(key.session())? else {
                    return Ok(());
                };
                let user = TenantUser {
                    tenant: at.tenant.clone(),
                    user_id: session.user_id,
                };
                entry.insert(Owner {
                    at,
                    user,
                    agent_id: session.agent_id,
                })
            }
        };
        if with_keywords {
            self.keywords
                .add(&owner.user, key.as_u64(), &message.content);
        }
        self.docs.insert(
            key.as_u64(),
            Doc {
                role: message.role,
                timestamp: message.timestamp,
            },
        );
        Ok(())
    }
}

/// The vector index from its snapshot when the store's vectors have not changed since it
/// was taken, else rebuilt from the stored vectors.
fn load_vectors(
    store: &Store,
    options: &RecallOptions,
    config: VectorConfig,
) -> Result<VectorIndex> {
    let version = store.feed().vectors_version()?;
    if let Some(path) = &options.snapshot_path
        && path.exists()
    {
        match VectorIndex::load(path, config.clone()) {
            Ok((index, covered)) if covered == version => return Ok(index),
            Ok(_) => tracing::info!("vector snapshot is stale; rebuilding from the store"),
            Err(err) => {
                tracing::warn!(error = %err.for_log(), "vector snapshot unusable; rebuilding")
            }
        }
    }
    let mut index = VectorIndex::new(config)?;
    let mut after = None;
    loop {
        let page = store.feed().vectors(after, 4_096)?;
        let Some(last) = page.last() else { break };
        after = Some(last.key);
        index.insert_batch(
            page.iter()
                .map(|stored| (stored.key.as_u64(), stored.components.as_slice())),
        )?;
    }
    Ok(index)
}

#[cfg(test)]
mod tests;
