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
//! On a store several processes write (PostgreSQL), the outbox is shared: the pipeline embeds
//! the appends it claims, then follows every append any process embedded, in position order,
//! with its stored vectors. Every process's indexes thus hold every append, and the
//! read-your-writes head read by one bounds them all. A process that fell behind by more than
//! the store keeps entries rebuilds its indexes from the store.
//!
//! The keyword index is partitioned by the tenant and user owning each message's session, and
//! a query searches its scope's partition only (a scope is always one user's): its scores
//! come from that user's messages alone, so one tenant cannot tell from them how common a
//! word is in another's, and a query visits no one else's postings.
//!
//! The vector index — its live vectors and its HNSW graph's links — is snapshotted to a file
//! while the store's `vectors_version` is known: on start the snapshot is used as it is when
//! the version still matches, brought up to the stored vectors when it does not (keeping
//! its graph), and the index is rebuilt from the stored vectors without one. A save
//! holds the read side of the index lock (searches go on, changes wait) and a mutex of its
//! own (saves share one temporary file). Beside a store file the snapshot also holds the
//! keyword postings, which a start takes as they are for every message the store still has
//! (a message key is never reused, so its text cannot have changed), dropping the rest; the
//! texts it lacks are analysed from the messages: at open, or with
//! [`RecallOptions::keywords_in_background`] (past the first `TEXTS_INDEXED_AT_OPEN`) by a
//! task beside the pipeline while queries are answered (they wait a bounded time for it and
//! otherwise say what is missing). The stems are words of the messages, so none is written
//! beside a store that keeps text sealed (PostgreSQL).
//! Beside the pipeline a builder grows the graph, without holding the index lock, whenever
//! the index needs one (after a rebuild from the store, past the threshold); until then
//! vector searches scan exactly what it does not cover.
//!
//! This module holds the types, the indexes with their invariants, and [`Recall::open`].
//! The writer side is in `pipeline` (the outbox into the indexes, the keyword backfill, the
//! graph builder, the snapshot) and `forget` (erasure); the reader side in `query` (a
//! query's filter and the fused search); `check` compares the vector index with the store.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, PoisonError, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use memlayer_embed::Embedder;
use memlayer_store::{
    Access, EmbeddingModel, Message, MessageKey, Removal, Role, SessionRef, Store, Timestamp,
};
use tokio::sync::watch;

mod check;
mod followers;
mod forget;
mod pipeline;
mod query;

pub use check::IndexCheck;

use crate::hybrid::KeywordPostings;
use crate::keyword::{KeywordPartitions, PartitionKey};
use crate::{HybridIndex, IndexError, IndexLock, Result, VectorConfig, snapshot};
pub use pipeline::SnapshotLoad;
use pipeline::load_vectors;

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
    /// `open` still reads every message for its session and filter fields. Texts the
    /// snapshot's keyword section holds are not analysed again either way.
    pub keywords_in_background: bool,
    /// This process's name among the nodes following a store several processes share
    /// ([`memlayer_store::EmbeddingFeed::follower_seen`]): keep it across restarts, so that a
    /// restarted node replaces its own record. `None`: a new random name at every start.
    pub node_id: Option<String>,
}

impl Default for RecallOptions {
    fn default() -> Self {
        Self {
            snapshot_path: None,
            batch_messages: 64,
            read_your_writes_wait: Duration::from_secs(2),
            snapshot_interval: Duration::from_secs(60),
            keywords_in_background: false,
            node_id: None,
        }
    }
}

impl RecallOptions {
    /// Options that snapshot the vector index to `path`.
    pub fn with_snapshot(mut self, path: impl Into<PathBuf>) -> Self {
        self.snapshot_path = Some(path.into());
        self
    }

    /// Options naming this process `node_id` among the followers of a shared store (see
    /// [`RecallOptions::node_id`]).
    pub fn with_node_id(mut self, node_id: impl Into<String>) -> Self {
        self.node_id = Some(node_id.into());
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

/// The most hits one recall answers with: within the fusion's fixed candidate pools, so any
/// `k` up to it gets the first `k` hits of the same ranking.
pub const MAX_RECALL_HITS: usize = 50;
const _: () = assert!(MAX_RECALL_HITS <= crate::CANDIDATES_PER_SIDE);

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
    vectors: u64,
    backfilled: bool,
}

/// What the indexes need to know about a message to filter it.
#[derive(Debug, Clone, Copy)]
struct Doc {
    role: Role,
    timestamp: Timestamp,
}

/// Texts a start whose snapshot held keywords analyses at open, of messages stored after
/// the snapshot's save (appends during the last minute before a stop); past them the
/// backfill takes over after the start. About 15 µs each at the rate the backfill analysed
/// a million short chat messages (15.5 s, docs/benchmarks.md): at most a third of a second.
const TEXTS_INDEXED_AT_OPEN: usize = 20_000;

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

/// Whether snapshots beside `store` hold the keyword section. Stems are words of the
/// messages: only beside a store that keeps text in plain too (a file), never beside one
/// that keeps it sealed (PostgreSQL).
fn keywords_in_snapshot(store: &Store) -> bool {
    store.path().is_some()
}

impl PartitionKey for TenantUser {
    fn parts(&self) -> [&str; 2] {
        [&self.tenant, &self.user_id]
    }

    fn from_parts([tenant, user_id]: [String; 2]) -> Self {
        Self { tenant, user_id }
    }
}

impl Owner {
    /// The owner of session `sid` as `store` has it, or `None` if the session is gone.
    fn in_store(store: &Store, sid: u64) -> Result<Option<Self>> {
        Ok(store.feed().session_by_key(sid)?.map(|(at, session)| Self {
            user: TenantUser {
                tenant: at.tenant.clone(),
                user_id: session.user_id,
            },
            at,
            agent_id: session.agent_id,
        }))
    }
}

/// What recall searches, all under one lock. Every key is a message key
/// ([`MessageKey::as_u64`]).
struct Indexes {
    /// One vector index for every message, keyword postings partitioned by the owner of each
    /// message's session (`owners[session].user`).
    ///
    /// A vector enters only while `docs` has its key (a batch embedded while its session was
    /// deleted stays out). A text is in its owner's partition only, and only while `docs`
    /// has its key: the backfill adds only what `docs` still holds, so a page read before an
    /// erasure cannot put a text back. A key leaves both sides and `docs` under the same hold
    /// of the lock, and its slot leaves the vector graph's lists before it is released (its
    /// components were zeroed at its removal), so no search passes through an erased vector.
    hybrid: HybridIndex<KeywordPartitions<TenantUser>>,
    /// Every message the indexes have seen and not forgotten, with its filter fields: what
    /// "the index still has" means to the pipeline and the backfill.
    docs: BTreeMap<u64, Doc>,
    /// By session key: learnt with a session's first message, and removed only after all of
    /// its messages left `docs` and `hybrid`: the entry names their keyword partition, so a
    /// removal without it could not find their texts. Every key in `docs` has its owner.
    owners: HashMap<u64, Owner>,
    /// The vector index changed since the last snapshot. Cleared under the read side of
    /// the lock, by the save, which changes nothing else.
    dirty: AtomicBool,
}

struct Inner {
    store: Store,
    embedder: Embedder,
    model: EmbeddingModel,
    options: RecallOptions,
    indexes: IndexLock<Indexes>,
    /// Held through a snapshot save or removal (see `pipeline::with_snapshot_file`).
    snapshot_save: Mutex<()>,
    progress: watch::Sender<Progress>,
    /// Told when a query waits for appends the indexes lack: on a store other processes
    /// write, the pipeline then looks for them at once instead of at its next poll.
    awaited: tokio::sync::Notify,
    /// This process's name among the followers of a shared store (see `followers`).
    node_id: String,
    /// Whether the store is shared: its feed was followed (`embedded_after` answered).
    follows_others: AtomicBool,
    /// The live nodes as this process's last follower record counted them (see
    /// [`Recall::live_nodes`]).
    live_nodes: AtomicU64,
    /// When this process last recorded its position among the followers, and which.
    reported: Mutex<Option<(Instant, u64)>>,
    /// The position this process must have applied to be caught up (see
    /// [`Recall::caught_up`]): raised when its follower record is found lapsed.
    catch_up_to: AtomicU64,
    /// Set from finding the follower record lapsed until `catch_up_to` is raised for it.
    catching_up: AtomicBool,
    /// Told what this process followed of other processes' erasures and memory changes, for
    /// what is kept beside the indexes (see [`Recall::on_followed_removals`]).
    removal_hooks: Mutex<Vec<RemovalHook>>,
    /// How many erasures (this process's, or followed from others) began taking messages
    /// out of the indexes. Raised after the store deleted them and before the indexes lose
    /// them: a pipeline step that read messages before an erasure finds it changed when it
    /// adds them, and adds only what the store still has (see `Recall::index_texts`), so
    /// no erasure has to wait for the pipeline.
    erasures_begun: AtomicU64,
    /// What [`Recall::open`] made of the vector snapshot.
    snapshot_at_open: SnapshotLoad,
}

/// A handler of what another process erased or changed (see [`Recall::on_followed_removals`]).
type RemovalHook = Box<dyn Fn(&[Removal]) + Send + Sync>;

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
        let node_id = options
            .node_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        // Recorded before the load at the start of the outbox: erasures committing from now
        // on wait for this node, whose load may read what they erase, until it followed them.
        store.feed().follower_seen(&node_id, 0, followers::LAPSE)?;
        // Here, where no save of this process can be writing it (a rebuild of a lapsed node
        // loads the snapshot again beside the erasures' saves).
        if let Some(path) = &options.snapshot_path
            && snapshot::remove_unfinished(path)?
        {
            tracing::info!("removed the unfinished vector snapshot a stopped save left");
        }
        let with_keywords = !options.keywords_in_background;
        let (indexes, vectors, snapshot_at_open, backfilled) =
            Indexes::load(&store, &options, identity.dimension, with_keywords)?;
        let progress = Progress {
            vectors,
            backfilled,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                store,
                embedder,
                model,
                options,
                indexes: IndexLock::new(indexes),
                snapshot_save: Mutex::new(()),
                progress: watch::channel(progress).0,
                awaited: tokio::sync::Notify::new(),
                node_id,
                follows_others: AtomicBool::new(false),
                live_nodes: AtomicU64::new(1),
                reported: Mutex::new(None),
                catching_up: AtomicBool::new(false),
                catch_up_to: AtomicU64::new(0),
                removal_hooks: Mutex::new(Vec::new()),
                erasures_begun: AtomicU64::new(0),
                snapshot_at_open,
            }),
        })
    }

    /// What the start made of the vector snapshot: loaded as saved, brought up to the store,
    /// unusable (and why) or absent. `memlayer check` reports it.
    pub fn snapshot_at_open(&self) -> &SnapshotLoad {
        &self.inner.snapshot_at_open
    }

    /// Number of messages with a vector in the index.
    pub fn indexed_vectors(&self) -> usize {
        self.read().hybrid.vectors().len()
    }

    /// Whether messages stored before the start still wait for the keyword backfill (see
    /// [`RecallOptions::keywords_in_background`]).
    pub fn keywords_pending(&self) -> bool {
        !self.inner.progress.borrow().backfilled
    }

    /// Whether the vector index waits for its graph (see [`crate::VectorIndex::needs_graph`]):
    /// vector searches scan every vector until the pipeline's builder installs it.
    pub fn graph_pending(&self) -> bool {
        self.read().hybrid.needs_graph()
    }

    /// The embedder queries and the pipeline use, for other indexes over the same model.
    pub fn embedder(&self) -> &Embedder {
        &self.inner.embedder
    }

    /// Has `hook` told of every erasure and memory change this process follows from other
    /// processes sharing the store (its own as well, which the hook finds applied already),
    /// so that what is kept beside the indexes drops what was erased as the indexes do. A hook
    /// must not hold what holds this recall (the two would never be dropped).
    pub fn on_followed_removals(&self, hook: impl Fn(&[Removal]) + Send + Sync + 'static) {
        self.inner
            .removal_hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(hook));
    }

    fn read(&self) -> RwLockReadGuard<'_, Indexes> {
        self.inner.indexes.read()
    }

    fn write(&self) -> RwLockWriteGuard<'_, Indexes> {
        self.inner.indexes.write()
    }
}

impl Indexes {
    /// The keys of the messages of session `sid` the indexes have.
    fn session_keys(&self, sid: u64) -> impl Iterator<Item = u64> + '_ {
        self.docs
            .range(MessageKey::session_range(sid))
            .map(|(key, _)| *key)
    }

    /// Whether any index holds message `key`.
    fn holds(&self, key: u64) -> bool {
        self.docs.contains_key(&key) || self.hybrid.vectors().contains(key)
    }

    /// The indexes of every message `store` holds, the vectors from the snapshot while it is
    /// exact, the texts from the snapshot's keyword section where it has them, and
    /// `with_keywords` every other text too (otherwise up to [`TEXTS_INDEXED_AT_OPEN`] of
    /// them); the outbox position they cover (every entry up to it has its vectors in them),
    /// what became of the snapshot, and whether every text is in the keyword index.
    fn load(
        store: &Store,
        options: &RecallOptions,
        dimension: usize,
        with_keywords: bool,
    ) -> Result<(Self, u64, SnapshotLoad, bool)> {
        // Before the vectors: what was embedded by then is in what they load.
        let covered = store.feed().embedded_through()?;
        let (vectors, snapshot, keywords) =
            load_vectors(store, options, VectorConfig::new(dimension))?;
        let mut hybrid = HybridIndex::new(vectors);
        // One found beside a store that keeps text sealed is not used.
        let keywords = keywords.filter(|_| keywords_in_snapshot(store));
        let mut texts_at_open = if keywords.is_some() {
            TEXTS_INDEXED_AT_OPEN
        } else {
            0
        };
        if let Some(keywords) = keywords {
            *hybrid.keywords_mut() = keywords.into_partitions();
        }
        let mut indexes = Self {
            hybrid,
            docs: BTreeMap::new(),
            owners: HashMap::new(),
            dirty: AtomicBool::new(snapshot != SnapshotLoad::Current),
        };
        let mut after = None;
        loop {
            let page = store.feed().all_messages(after, 4_096)?;
            let Some((last, _)) = page.last() else { break };
            after = Some(*last);
            for (key, message) in &page {
                let with_text = with_keywords || texts_at_open > 0;
                if indexes.add_message(*key, message, with_text, || {
                    Owner::in_store(store, key.session())
                })? && !with_keywords
                {
                    texts_at_open -= 1;
                }
            }
        }
        // What the snapshot holds of messages the store no longer has (erased after its
        // save, before a crash) goes before anything is served; so does a text in another
        // partition than its session's owner's.
        let Self {
            hybrid,
            docs,
            owners,
            ..
        } = &mut indexes;
        hybrid.keywords_mut().retain(|partition, id| {
            docs.contains_key(&id)
                && owners
                    .get(&MessageKey::from_u64(id).session())
                    .is_some_and(|owner| owner.user == *partition)
        });
        let backfilled = with_keywords || hybrid.keywords().documents() == docs.len();
        Ok((indexes, covered, snapshot, backfilled))
    }

    /// Takes message `key` out of every index.
    fn remove_message(&mut self, key: u64) {
        self.docs.remove(&key);
        // A message without its session's owner was never keyword-indexed.
        match self.owners.get(&MessageKey::from_u64(key).session()) {
            Some(owner) => self.hybrid.remove(&owner.user, key),
            None => self.hybrid.vectors_mut().remove(key),
        };
    }

    /// Adds a message's filter fields, and its text `with_keywords`, learning its session's
    /// owner on first sight from `owner` (`None`: the session is gone, deleted meanwhile, and
    /// the message is not indexed). Returns whether its text was added (it was not there).
    fn add_message(
        &mut self,
        key: MessageKey,
        message: &Message,
        with_keywords: bool,
        owner: impl FnOnce() -> Result<Option<Owner>>,
    ) -> Result<bool> {
        let owner = match self.owners.entry(key.session()) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                let Some(owner) = owner()? else {
                    return Ok(false);
                };
                entry.insert(owner)
            }
        };
        // Once: a node following a shared store meets its own appends again, a start the
        // texts its snapshot held.
        let keywords = self.hybrid.keywords_mut();
        let added = with_keywords && !keywords.contains(&owner.user, key.as_u64());
        if added {
            keywords.add(&owner.user, key.as_u64(), &message.content);
            *self.dirty.get_mut() = true;
        }
        self.docs.insert(
            key.as_u64(),
            Doc {
                role: message.role,
                timestamp: message.timestamp,
            },
        );
        Ok(added)
    }
}

#[cfg(test)]
mod tests;
