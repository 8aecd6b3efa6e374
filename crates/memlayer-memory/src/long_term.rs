//! Long-term memory: what an agent keeps about a user across conversations. `remember`
//! stores a memory with its embedding — or updates the one it repeats or contradicts,
//! keeping the replaced text in its history — `recall` finds the memories relevant to a
//! query (keywords and meaning, fused), and `forget` removes one.
//!
//! Scope: a memory with an agent is seen by that agent only; one without is seen by every
//! agent of the user. A user never sees another user's memories: every query is filtered by
//! tenant and user before ranking.
//!
//! The indexes live in memory, one partition per user, loaded from the store when a user's
//! memories are first needed (vectors are stored with each memory, so nothing is embedded
//! again) and kept within a budget of resident memories: past it, the partitions used least
//! recently leave memory, to be loaded again when next needed. Nothing is loaded at start:
//! rebuilding every partition held the start-up for 513 s and 8.5 GiB at a million memories
//! (docs/benchmarks.md). The HNSW graphs of large partitions are built in the background
//! ([`LongTermMemory::keep_graphs_built`]): until a partition has its graph its recalls scan
//! it exactly.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLockReadGuard, RwLockWriteGuard};

use memlayer_embed::Embedder;
use memlayer_index::{
    GraphBuilt, HybridIndex, HybridQuery, IndexLock, Recall, VectorConfig, VectorIndex,
    run_graph_builder,
};
use memlayer_store::{
    Access, Citation, Eraser, Memory, MemoryChange, MemoryKind, Removal, ReplacedText, Store,
    StoreError, Timestamp, UNKNOWN_SOURCE, blocking,
};
use serde::Serialize;

use crate::MemoryError;
use crate::loaders::Loaders;

/// Cosine similarity above which a new memory of the same kind and scope restates an
/// existing one: the existing one is updated instead of a copy being added.
/// all-MiniLM-L6-v2 puts paraphrases of one statement at 0.8–0.95 and different statements
/// about the same topic ("prefers email" / "prefers phone calls") at 0.7–0.85.
const SAME_STATEMENT: f32 = 0.88;
/// Cosine similarity above which a memory of the same kind and scope that shares its topic
/// (its key terms) is taken to be superseded: "prefers email" after "prefers phone calls".
const SAME_TOPIC: f32 = 0.70;
/// Most tags a memory keeps.
pub const MAX_TAGS: usize = 8;
/// Longest tag, in characters.
pub const MAX_TAG_LEN: usize = 32;
/// How often a remember is made again when an erasure changed the memory it updates meanwhile.
const REMEMBER_ATTEMPTS: usize = 3;

/// What to remember.
#[derive(Debug, Clone)]
pub struct RememberRequest {
    /// The tenant, and the sessions `source` may name: for a user-scoped caller, its own.
    pub access: Access,
    /// The user it is about.
    pub user_id: String,
    /// The agent it belongs to; `None`: every agent of the user.
    pub agent_id: Option<String>,
    /// The memory.
    pub text: String,
    /// Its kind.
    pub kind: MemoryKind,
    /// Short lowercase tags.
    pub tags: Vec<String>,
    /// The message it came from: `(session_id, index)`.
    pub source: Option<(String, u64)>,
    /// The caller's name for it. With a key, `remember` is a put: the memory under the key
    /// (in the user and agent scope) now says this, with this kind and these tags, or a new
    /// one is made under it; it never merges with a memory of another key or none. Without,
    /// a repeat or a correction of an unkeyed memory updates that one.
    pub key: Option<String>,
}

/// What `remember` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RememberAction {
    /// A new memory.
    Created,
    /// An existing memory now says this; its old text, when it had another, is in its
    /// history.
    Updated,
    /// An existing memory already said this (tags merged; with a key, same kind and tags).
    Unchanged,
}

/// A query over a user's memories.
#[derive(Debug, Clone)]
pub struct MemoryQuery {
    /// The tenant.
    pub tenant: String,
    /// Whose memories.
    pub user_id: String,
    /// The agent asking: it sees the user's memories without an agent and its own. `None`
    /// sees every memory of the user.
    pub agent_id: Option<String>,
    /// What to look for.
    pub query: String,
    /// How many at most.
    pub k: usize,
    /// Only these kinds, when given.
    pub kinds: Option<Vec<MemoryKind>>,
    /// Only memories with one of these tags, when given.
    pub tags: Option<Vec<String>>,
}

/// A recalled memory.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryHit {
    /// The memory.
    pub memory: Memory,
    /// Its fused score (higher is better).
    pub score: f32,
}

/// Who may see a memory, kept beside the indexes for filtering.
#[derive(Debug, Clone)]
struct Owner {
    tenant: String,
    user_id: String,
    agent_id: Option<String>,
    kind: MemoryKind,
    tags: Vec<String>,
    /// Named by a key: only a put of its key changes it.
    keyed: bool,
    /// The revision indexed.
    revision: u64,
}

impl Owner {
    fn of(memory: &Memory) -> Self {
        Self {
            tenant: memory.tenant.clone(),
            user_id: memory.user_id.clone(),
            agent_id: memory.agent_id.clone(),
            kind: memory.kind,
            tags: memory.tags.clone(),
            keyed: memory.key.is_some(),
            revision: memory.revision,
        }
    }
}

/// The resident memories' vectors and texts, under one lock; keys are memory ids.
///
/// A partition is resident whole or not at all. It is read from the store and indexed
/// without the lock (other users' recalls go on meanwhile), then installed under the write
/// lock only if no change of the indexes happened since the read (`changes`); otherwise it
/// is read again under the write lock. Every change (after the store committed it) takes
/// that lock and counts itself, so an installed partition holds every change committed
/// before its read and every later change finds it resident. A change to a user whose
/// partition is not resident is left to the store: the next load reads it.
struct Indexes {
    dimension: usize,
    /// One hybrid index per resident user of each tenant, by tenant, then user. A recall
    /// searches only its user's partition: with every memory in one index, a user's recall
    /// ranked all users' memories and filtered them, and got slower with every user added
    /// (at 100,000 memories of 10 users, p95 31.5 ms against 3.1 ms with partitions;
    /// docs/benchmarks.md). A memory is in its owner's partition only. A partition left
    /// empty by a removal is dropped (and its tenant's map with its last user); one loaded
    /// empty stays, so asking again about a user without memories reads nothing.
    partitions: HashMap<String, HashMap<String, Partition>>,
    /// Every resident memory's owner and filter fields. A memory leaves `owners` and its
    /// partition together: the entry names the partition a removal must look in.
    owners: HashMap<u64, Owner>,
    /// How many resident memories the partitions may hold, each partition counting one more
    /// (so that users without memories cost something too).
    budget: usize,
    /// Ticks on every use of a partition: the least recently used leave first.
    clock: AtomicU64,
    /// Partitions loaded from the store, and evicted, since the start.
    loads: u64,
    evictions: u64,
    /// Changes of the indexes since the start (see [`LongTermMemory::change`]).
    changes: u64,
}

/// One user's resident memories.
struct Partition {
    index: HybridIndex,
    /// The [`Indexes::clock`] of its last use; updated under the read lock.
    last_used: AtomicU64,
}

/// The resident partitions' figures, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Residency {
    /// Memories whose indexes are in memory.
    pub memories: usize,
    /// Users whose partition is in memory.
    pub partitions: usize,
    /// The budget [`Residency::memories`] plus [`Residency::partitions`] is kept within.
    pub budget: usize,
    /// Partitions loaded from the store since the start.
    pub loads: u64,
    /// Partitions evicted to stay within the budget since the start.
    pub evictions: u64,
}

/// The default budget of resident memories. A server with a million messages and a million
/// memories of 100 users held 1.9 GiB after one recall of each user, 20 of them resident
/// (docs/benchmarks.md, "A start at a million messages and memories"); the resident vectors
/// are about 75 MB of that.
pub const DEFAULT_RESIDENT_MEMORIES: usize = 200_000;

/// Long-term memories over one store. Cheap to clone.
#[derive(Clone)]
pub struct LongTermMemory {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    embedder: Embedder,
    indexes: IndexLock<Indexes>,
    /// Serialises remembering, so two concurrent remembers of the same thing see each other
    /// and the second updates the first instead of adding a duplicate.
    remembering: tokio::sync::Mutex<()>,
    /// On a store several processes share: the recall whose follow of the store brings other
    /// processes' memory changes here ([`LongTermMemory::follow`]), and which a recall waits
    /// for (read-your-writes across processes).
    followed: OnceLock<Recall>,
    /// Where partitions are read and indexed (see [`Loaders`]).
    loaders: Loaders,
}

impl LongTermMemory {
    /// Opens the memories of `store`, embedding with `embedder`, with at most about
    /// `resident_budget` memories' indexes in memory (see [`Residency::budget`]; at least 1;
    /// the partition in use stays whatever its size, so one user with more memories than the
    /// budget is served alone). Loads nothing: each user's memories are loaded when first
    /// needed.
    pub fn open(store: Store, embedder: Embedder, resident_budget: usize) -> Self {
        let indexes = Indexes {
            dimension: embedder.identity().dimension,
            partitions: HashMap::new(),
            owners: HashMap::new(),
            budget: resident_budget.max(1),
            clock: AtomicU64::new(0),
            loads: 0,
            evictions: 0,
            changes: 0,
        };
        Self {
            inner: Arc::new(Inner {
                store,
                embedder,
                indexes: IndexLock::new(indexes),
                remembering: tokio::sync::Mutex::new(()),
                followed: OnceLock::new(),
                loaders: Loaders::start(),
            }),
        }
    }

    /// Follows, through `recall`'s follow of a store several processes share, what other
    /// processes remember, update and forget: a resident partition that lacks a change is
    /// dropped (loaded again when next needed), a deleted memory taken out at once; and a
    /// recall first waits, as a message recall does, until the changes committed before it
    /// were followed. Nothing changes on a store with one process. Call it once.
    pub fn follow(&self, recall: &Recall) {
        if self.inner.followed.set(recall.clone()).is_err() {
            return;
        }
        // Weak: these memories hold `recall`, whose hook must not hold them (and their store)
        // in turn, or neither would ever be dropped.
        let memories = Arc::downgrade(&self.inner);
        recall.on_followed_removals(move |removals| {
            if let Some(inner) = memories.upgrade() {
                Self { inner }.apply_followed(removals);
            }
        });
    }

    /// Drops from the resident partitions what other processes changed (see
    /// [`LongTermMemory::follow`]). Changes this process made itself are found indexed
    /// already, at their revision or a later one, and left alone.
    fn apply_followed(&self, removals: &[Removal]) {
        let changes: Vec<&MemoryChange> = removals
            .iter()
            .filter_map(|removal| match removal {
                Removal::Memory(change) => Some(change),
                Removal::Session(_) | Removal::Message(_) => None,
            })
            .collect();
        if changes.is_empty() {
            return;
        }
        let mut indexes = self.change();
        for change in changes {
            if indexes.partition(&change.tenant, &change.user_id).is_none() {
                continue;
            }
            let indexed = indexes.owners.get(&change.id).map(|owner| owner.revision);
            match (indexed, change.revision) {
                (Some(indexed), Some(written)) if indexed >= written => {}
                (None, None) => {}
                (Some(_), None) => indexes.remove(&[change.id]),
                // Stored or updated elsewhere: the partition is read again when next needed.
                (_, Some(_)) => indexes.evict(&change.tenant, &change.user_id),
            }
        }
    }

    /// The resident partitions' figures now.
    pub fn residency(&self) -> Residency {
        let indexes = self.read();
        Residency {
            memories: indexes.owners.len(),
            partitions: indexes.partition_count(),
            budget: indexes.budget,
            loads: indexes.loads,
            evictions: indexes.evictions,
        }
    }

    /// Runs `search` on the partition of `tenant`'s `user_id`, loading it from the store
    /// first when it is not resident (and evicting others past the budget). A hit runs under
    /// the read lock; the search after a load under the write lock that installed it, so the
    /// partition cannot leave before it was searched.
    fn with_partition<T>(
        &self,
        tenant: &str,
        user_id: &str,
        search: impl FnOnce(&Indexes, &HybridIndex) -> T,
    ) -> Result<T, MemoryError> {
        let (changes, dimension) = {
            let indexes = self.read();
            if let Some(partition) = indexes.partition(tenant, user_id) {
                indexes.touch(partition);
                return Ok(search(&indexes, &partition.index));
            }
            (indexes.changes, indexes.dimension)
        };
        let loaded = self.load_unlocked(tenant, user_id, changes, dimension)?;
        let mut indexes = self.write();
        let evictions = indexes.evictions;
        self.install(&mut indexes, tenant, user_id, loaded)?;
        if indexes.evictions != evictions {
            self.inner.loaders.give_back_freed_memory();
        }
        let partition = indexes
            .partition(tenant, user_id)
            .expect("the partition was just installed, under the write lock");
        indexes.touch(partition);
        Ok(search(&indexes, &partition.index))
    }

    /// Reads `tenant`'s `user_id`'s memories from the store and indexes them, without the
    /// lock: other users' recalls and every change go on meanwhile. `changes` is what
    /// [`Indexes::changes`] said before the read.
    fn load_unlocked(
        &self,
        tenant: &str,
        user_id: &str,
        changes: u64,
        dimension: usize,
    ) -> Result<Loaded, MemoryError> {
        let (memories, index) = self.read_partition(tenant, user_id, dimension)?;
        Ok(Loaded {
            changes,
            memories,
            index,
        })
    }

    /// `tenant`'s `user_id`'s memories as the store holds them now, and a partition's index
    /// of them (their vectors go in as one batch), read and indexed on a loader thread.
    fn read_partition(
        &self,
        tenant: &str,
        user_id: &str,
        dimension: usize,
    ) -> Result<(Vec<Memory>, HybridIndex), MemoryError> {
        let (store, tenant, user_id) = (
            self.inner.store.clone(),
            tenant.to_owned(),
            user_id.to_owned(),
        );
        self.inner.loaders.run(move || {
            let memories = store.memories().user_memories(&tenant, &user_id)?;
            let mut index = HybridIndex::new(VectorIndex::new(VectorConfig::new(dimension))?);
            index.add(&(), &documents(memories.iter()))?;
            Ok((memories, index))
        })
    }

    /// Makes `loaded` the user's resident partition, unless one is resident already. Should
    /// a change have happened since its read, it may have been to this user while the
    /// partition was not resident (left to the store, so missing from what was read):
    /// then the partition is read again under the lock, which every change waits for.
    fn install(
        &self,
        indexes: &mut Indexes,
        tenant: &str,
        user_id: &str,
        loaded: Loaded,
    ) -> Result<(), MemoryError> {
        if indexes.partition(tenant, user_id).is_some() {
            return Ok(());
        }
        if indexes.changes == loaded.changes {
            indexes.install(tenant, user_id, loaded.index, &loaded.memories);
        } else {
            let (memories, index) = self.read_partition(tenant, user_id, indexes.dimension)?;
            indexes.install(tenant, user_id, index, &memories);
        }
        Ok(())
    }

    /// Remembers `request`: a new memory, or an update of the one under its key, or (without
    /// a key) of the unkeyed one of the same user, scope and kind that it repeats or
    /// supersedes.
    pub async fn remember(
        &self,
        request: RememberRequest,
    ) -> Result<(Memory, RememberAction), MemoryError> {
        let tags = normalise_tags(&request.tags)?;
        let text = request.text.trim().to_owned();
        if text.is_empty() {
            return Err(MemoryError::InvalidSetting {
                field: "text",
                reason: "must not be empty".into(),
            });
        }
        let vector = self
            .inner
            .embedder
            .embed(request.access.tenant(), vec![text.clone()])
            .await
            .map_err(MemoryError::Embedding)?
            .pop()
            .ok_or(MemoryError::NoVector)?;
        let _one_at_a_time = self.inner.remembering.lock().await;
        // An erasure may forget or rewrite the memory this restates between the read and the
        // save; the store refuses the stale update, and it is made again from a new read.
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.remember_once(&request, &text, &tags, &vector).await {
                Err(MemoryError::Store(StoreError::MemoryChanged { .. }))
                    if attempts < REMEMBER_ATTEMPTS => {}
                remembered => return remembered,
            }
        }
    }

    async fn remember_once(
        &self,
        request: &RememberRequest,
        text: &str,
        tags: &[String],
        vector: &[f32],
    ) -> Result<(Memory, RememberAction), MemoryError> {
        let existing = {
            let (this, request) = (self.clone(), request.clone());
            let (text, vector) = (text.to_owned(), vector.to_vec());
            // Off the async workers: the lookup reads the store, and a user whose partition is
            // not resident has it loaded and indexed first.
            blocking(move || this.restated(&request, &text, &vector)).await?
        };
        let now = Timestamp::now();
        let (memory, action) = match existing {
            Some(mut memory) => {
                let (same_text, same_labels) = if request.key.is_some() {
                    // A put says what the memory is now: its kind and tags too.
                    let same_labels = memory.kind == request.kind && memory.tags == tags;
                    memory.kind = request.kind;
                    memory.tags = tags.to_vec();
                    (memory.text == text, same_labels)
                } else {
                    // New tags join the stored ones up to the same bound as a new memory's.
                    for tag in tags {
                        if !memory.tags.contains(tag) && memory.tags.len() < MAX_TAGS {
                            memory.tags.push(tag.clone());
                        }
                    }
                    (memory.text.eq_ignore_ascii_case(text), true)
                };
                let action = if same_text && same_labels {
                    RememberAction::Unchanged
                } else if same_text {
                    RememberAction::Updated
                } else {
                    let old = std::mem::replace(&mut memory.text, text.to_owned());
                    // The replaced text keeps its source, so erasing that message takes it
                    // out of the history too.
                    memory.history.push(ReplacedText {
                        text: old,
                        replaced_at: now,
                        source: memory.source.take(),
                    });
                    memory.vector = vector.to_vec();
                    memory.source = request.source.clone().or(memory
                        .history
                        .last()
                        .and_then(|replaced| replaced.source.clone()));
                    RememberAction::Updated
                };
                memory.updated_at = now;
                (memory, action)
            }
            None => (
                Memory {
                    id: 0,
                    revision: 0,
                    tenant: request.access.tenant().to_owned(),
                    user_id: request.user_id.clone(),
                    agent_id: request.agent_id.clone(),
                    text: text.to_owned(),
                    kind: request.kind,
                    tags: tags.to_vec(),
                    source: request.source.clone(),
                    created_at: now,
                    updated_at: now,
                    history: Vec::new(),
                    vector: vector.to_vec(),
                    key: request.key.clone(),
                },
                RememberAction::Created,
            ),
        };
        let id = self
            .inner
            .store
            .memories()
            .put_memory(memory.clone(), &request.access)
            .await?;
        let memory = Memory {
            id,
            revision: memory.revision + 1,
            ..memory
        };
        let mut indexes = self.change();
        indexes.add(&memory)?;
        indexes.evict_past_budget(&[(&memory.tenant, &memory.user_id)]);
        drop(indexes);
        Ok((memory, action))
    }

    /// The memory `request` restates: the one under its key, or else
    /// [`Self::closest_in_scope`].
    fn restated(
        &self,
        request: &RememberRequest,
        text: &str,
        vector: &[f32],
    ) -> Result<Option<Memory>, MemoryError> {
        match &request.key {
            Some(key) => Ok(self.inner.store.memories().memory_by_key(
                request.access.tenant(),
                &request.user_id,
                request.agent_id.as_deref(),
                key,
            )?),
            None => self.closest_in_scope(request, text, vector),
        }
    }

    /// The memory of the same tenant, user, scope and kind that `text` repeats or
    /// supersedes, if any.
    fn closest_in_scope(
        &self,
        request: &RememberRequest,
        text: &str,
        vector: &[f32],
    ) -> Result<Option<Memory>, MemoryError> {
        let tenant = request.access.tenant();
        let candidates =
            self.with_partition(tenant, &request.user_id, |indexes, partition| {
                let same_scope = |id: u64| {
                    indexes.owners.get(&id).is_some_and(|owner| {
                        !owner.keyed
                            && owner.agent_id == request.agent_id
                            && owner.kind == request.kind
                    })
                };
                partition.vectors().search(vector, 5, Some(&same_scope))
            })??;
        for (id, similarity) in candidates {
            if similarity < SAME_TOPIC {
                break;
            }
            let Some(memory) = self.inner.store.memories().memory(tenant, id)? else {
                continue;
            };
            if similarity >= SAME_STATEMENT || shares_key_terms(&memory.text, text) {
                return Ok(Some(memory));
            }
        }
        Ok(None)
    }

    /// The memories relevant to `query.query`, best first, among those the asker may see.
    pub async fn recall(&self, query: MemoryQuery) -> Result<Vec<MemoryHit>, MemoryError> {
        // An asking agent that could match nothing (an empty id) is a mistake to report, not
        // an answer without the agent's memories.
        memlayer_store::validate_optional_id("agent_id", query.agent_id.as_deref())?;
        // Tags are stored normalised: a filter is too, and one a memory could not have is
        // refused as remembering it would be.
        let tags = query.tags.as_deref().map(normalise_tags).transpose()?;
        let query = MemoryQuery { tags, ..query };
        if query.k == 0 || query.query.trim().is_empty() {
            return Ok(Vec::new());
        }
        if let Some(recall) = self.inner.followed.get() {
            recall.wait_for_followed().await?;
        }
        let vector = self
            .inner
            .embedder
            .embed(&query.tenant, vec![query.query.clone()])
            .await
            .map_err(MemoryError::Embedding)?
            .pop();
        let this = self.clone();
        blocking(move || this.search(&query, vector.as_deref())).await
    }

    fn search(
        &self,
        query: &MemoryQuery,
        vector: Option<&[f32]>,
    ) -> Result<Vec<MemoryHit>, MemoryError> {
        let fused =
            self.with_partition(&query.tenant, &query.user_id, |indexes, partition| {
                let visible = |id: u64| {
                    indexes.owners.get(&id).is_some_and(|owner| {
                        visible_to(query.agent_id.as_deref(), owner.agent_id.as_deref())
                            && query
                                .kinds
                                .as_ref()
                                .is_none_or(|kinds| kinds.contains(&owner.kind))
                            && query
                                .tags
                                .as_ref()
                                .is_none_or(|tags| tags.iter().any(|tag| owner.tags.contains(tag)))
                    })
                };
                partition.search(
                    &(),
                    HybridQuery {
                        text: &query.query,
                        vector,
                        k: query.k,
                        filter: Some(&visible),
                        neighbours: None,
                    },
                )
            })??;
        let mut hits = Vec::new();
        for hit in fused {
            if let Some(memory) = self.inner.store.memories().memory(&query.tenant, hit.id)? {
                hits.push(MemoryHit {
                    memory,
                    score: hit.score,
                });
            }
        }
        Ok(hits)
    }

    /// Up to `limit` memories of a user the asker may see (all of them with `agent_id`
    /// `None`), oldest first, from the one after memory `after`.
    pub fn list(
        &self,
        tenant: &str,
        user_id: &str,
        agent_id: Option<&str>,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Memory>, MemoryError> {
        memlayer_store::validate_optional_id("agent_id", agent_id)?;
        Ok(self
            .inner
            .store
            .memories()
            .user_memories_page(tenant, user_id, after, limit, |m| {
                visible_to(agent_id, m.agent_id.as_deref())
            })?)
    }

    /// The memory with this id in `tenant`.
    pub fn get(&self, tenant: &str, id: u64) -> Result<Option<Memory>, MemoryError> {
        Ok(self.inner.store.memories().memory(tenant, id)?)
    }

    /// Removes a memory from the store (with `eraser`, the store's) and the indexes; returns
    /// whether it existed. The erasure coordinator calls it and then compacts the store file.
    pub async fn forget(
        &self,
        eraser: &Eraser,
        tenant: &str,
        id: u64,
    ) -> Result<bool, MemoryError> {
        Ok(self.forget_all(eraser, tenant, vec![id]).await? == 1)
    }

    /// Removes every memory of a user; returns how many there were.
    pub async fn forget_user(
        &self,
        eraser: &Eraser,
        tenant: &str,
        user_id: &str,
    ) -> Result<u64, MemoryError> {
        let ids = self.user_memory_ids(tenant, user_id, |_| true)?;
        self.forget_all(eraser, tenant, ids).await
    }

    /// Takes what any memory of `tenant` holds of a session (`index` `None`) or of one of its
    /// messages out of it, whoever the memory is about: the memories remembered from there
    /// are deleted, replaced texts from there leave the others' histories. Also drops the
    /// replaced texts of unknown source a file from before sources were recorded holds (any
    /// erasure might concern them). Call it after the session or message left the store:
    /// from then on no memory can cite it any more (`Store::put_memory` checks the source in
    /// its transaction), so nothing remembered meanwhile escapes. Returns how many memories
    /// were deleted.
    pub async fn forget_derived_from(
        &self,
        eraser: &Eraser,
        tenant: &str,
        session_id: &str,
        index: Option<u64>,
    ) -> Result<u64, MemoryError> {
        let mut deleted = Vec::new();
        for (session, index) in [(session_id, index), (UNKNOWN_SOURCE, None)] {
            let (owner, cited) = (tenant.to_owned(), session.to_owned());
            let ids = self
                .inner
                .store
                .read(move |store| store.memories().memories_citing(&owner, &cited))
                .await?;
            for id in ids {
                let citation = eraser.forget_citation(tenant, id, session, index).await?;
                if let Citation::Deleted { .. } = citation {
                    deleted.push(id);
                }
            }
        }
        self.drop_from_indexes(tenant, &deleted);
        Ok(deleted.len() as u64)
    }

    /// [`LongTermMemory::forget_derived_from`] for every citation of a session or message no
    /// longer stored: what an erasure interrupted between deleting it and its memories left.
    /// Reads every citation; the erasure coordinator runs it when it resumes a job.
    pub async fn forget_orphaned(&self, eraser: &Eraser) -> Result<u64, MemoryError> {
        let orphans = self
            .inner
            .store
            .read(|store| store.memories().orphaned_citations())
            .await?;
        let mut deleted = 0;
        for orphan in orphans {
            let citation = eraser
                .forget_citation(
                    &orphan.tenant,
                    orphan.memory_id,
                    &orphan.session_id,
                    orphan.index,
                )
                .await?;
            if let Citation::Deleted { .. } = citation {
                self.drop_from_indexes(&orphan.tenant, &[orphan.memory_id]);
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    fn user_memory_ids(
        &self,
        tenant: &str,
        user_id: &str,
        keep: impl Fn(&Memory) -> bool,
    ) -> Result<Vec<u64>, MemoryError> {
        Ok(self
            .inner
            .store
            .memories()
            .user_memories(tenant, user_id)?
            .iter()
            .filter(|memory| keep(memory))
            .map(|memory| memory.id)
            .collect())
    }

    /// Deletes `ids` from the store, then takes them out of the indexes in one pass: each
    /// partition's vector graph lets go of the removed slots once (or is dropped, when the
    /// partition falls below the threshold, and [`LongTermMemory::keep_graphs_built`] builds
    /// it again when it grows past), not once per memory. Returns how
    /// many existed.
    async fn forget_all(
        &self,
        eraser: &Eraser,
        tenant: &str,
        ids: Vec<u64>,
    ) -> Result<u64, MemoryError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut existed = 0;
        for &id in &ids {
            existed += u64::from(eraser.delete_memory(tenant, id).await?);
        }
        self.drop_from_indexes(tenant, &ids);
        Ok(existed)
    }

    /// Takes memories the store deleted out of the indexes, and empties the tenant's part of
    /// the embedder's cache (it keeps vectors by the hash of their text).
    fn drop_from_indexes(&self, tenant: &str, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        self.change().remove(ids);
        self.inner.embedder.clear_cache(tenant);
    }

    /// Builds the HNSW graph of every partition that needs one, one partition at a time and
    /// without holding the index lock while a graph grows, until `shutdown` resolves (a
    /// build in progress stops at its next chunk). Spawn it beside the server.
    pub async fn keep_graphs_built(self, shutdown: impl Future<Output = ()>) {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let this = self.clone();
        let builder = tokio::spawn(async move {
            run_graph_builder(
                stopped,
                || {
                    let wanted = self.read().partitions_where(HybridIndex::needs_graph_work);
                    (!wanted.is_empty()).then_some(wanted)
                },
                move |wanted, cancelled| this.build_graphs_of(&wanted, cancelled),
                |partitions, took| {
                    if partitions > 0 {
                        tracing::info!(
                            partitions,
                            seconds = took.as_secs_f64(),
                            "memory graphs built"
                        );
                    }
                },
            )
            .await;
        });
        shutdown.await;
        let _ = stop.send(true);
        let _ = builder.await;
    }

    /// How many users' partitions wait for their graph (their recalls scan exactly until
    /// [`LongTermMemory::keep_graphs_built`] installs it).
    pub fn graphs_pending(&self) -> usize {
        self.read().partitions_where(HybridIndex::needs_graph).len()
    }

    /// Builds now every graph a partition needs (what
    /// [`LongTermMemory::keep_graphs_built`] does in the background) and returns how many it
    /// installed. For tools and benchmarks that want the graphs before they search.
    pub fn build_graphs(&self) -> usize {
        let wanted = self.read().partitions_where(HybridIndex::needs_graph);
        self.build_graphs_of(&wanted, || false)
    }

    /// Builds or extends the graphs of the `wanted` (tenant, user) partitions one after
    /// another, without holding the index lock while a graph grows; returns how many it
    /// installed.
    fn build_graphs_of(&self, wanted: &[(String, String)], cancelled: impl Fn() -> bool) -> usize {
        let mut installed = 0;
        for (tenant, user_id) in wanted {
            let outcome = HybridIndex::build_graph_unlocked(
                &self.inner.indexes,
                |indexes| indexes.partition(tenant, user_id).map(|p| &p.index),
                &cancelled,
            );
            match outcome {
                GraphBuilt::Installed => installed += 1,
                GraphBuilt::Cancelled => break,
                GraphBuilt::Extended | GraphBuilt::NotNeeded => {}
            }
        }
        installed
    }

    fn read(&self) -> RwLockReadGuard<'_, Indexes> {
        self.inner.indexes.read()
    }

    fn write(&self) -> RwLockWriteGuard<'_, Indexes> {
        self.inner.indexes.write()
    }

    /// The write lock, for a change of the indexes after the store committed it: counted,
    /// so that a partition read from the store before it is not installed without it.
    fn change(&self) -> RwLockWriteGuard<'_, Indexes> {
        let mut indexes = self.write();
        indexes.changes += 1;
        indexes
    }
}

/// A user's partition read from the store and indexed without the lock, and the count of
/// changes before the read (see [`Indexes`]).
struct Loaded {
    changes: u64,
    memories: Vec<Memory>,
    index: HybridIndex,
}

/// `memories` as the hybrid index takes them.
fn documents<'a>(memories: impl Iterator<Item = &'a Memory>) -> Vec<(u64, &'a str, &'a [f32])> {
    memories
        .map(|memory| (memory.id, memory.text.as_str(), memory.vector.as_slice()))
        .collect()
}

impl Indexes {
    fn partition(&self, tenant: &str, user_id: &str) -> Option<&Partition> {
        self.partitions.get(tenant)?.get(user_id)
    }

    fn partition_mut(&mut self, tenant: &str, user_id: &str) -> Option<&mut HybridIndex> {
        Some(&mut self.partitions.get_mut(tenant)?.get_mut(user_id)?.index)
    }

    fn partition_count(&self) -> usize {
        self.partitions.values().map(HashMap::len).sum()
    }

    /// Marks `partition` as just used.
    fn touch(&self, partition: &Partition) {
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        partition.last_used.store(now, Ordering::Relaxed);
    }

    /// The (tenant, user) of every partition whose index passes `wanted`.
    fn partitions_where(&self, wanted: impl Fn(&HybridIndex) -> bool) -> Vec<(String, String)> {
        self.partitions
            .iter()
            .flat_map(|(tenant, users)| {
                users
                    .iter()
                    .filter(|(_, partition)| wanted(&partition.index))
                    .map(move |(user_id, _)| (tenant.clone(), user_id.clone()))
            })
            .collect()
    }

    /// Makes `index` of `memories`, all of `tenant`'s `user_id` as the store held them, the
    /// user's resident partition, then evicts others past the budget.
    fn install(&mut self, tenant: &str, user_id: &str, index: HybridIndex, memories: &[Memory]) {
        let partition = Partition {
            index,
            last_used: AtomicU64::new(self.clock.fetch_add(1, Ordering::Relaxed)),
        };
        self.partitions
            .entry(tenant.to_owned())
            .or_default()
            .insert(user_id.to_owned(), partition);
        self.loads += 1;
        for memory in memories {
            self.owners.insert(memory.id, Owner::of(memory));
        }
        self.evict_past_budget(&[(tenant, user_id)]);
    }

    /// Indexes `memory`, stored now, in its user's resident partition; a memory of a user
    /// whose partition is not resident is left to the store.
    fn add(&mut self, memory: &Memory) -> Result<(), MemoryError> {
        let Some(partition) = self.partition_mut(&memory.tenant, &memory.user_id) else {
            return Ok(());
        };
        partition.add(&(), &documents(std::iter::once(memory)))?;
        self.owners.insert(memory.id, Owner::of(memory));
        Ok(())
    }

    /// Evicts the least recently used partitions, other than `keep`'s, while the resident
    /// memories and partitions are more than the budget. Finding the oldest reads every
    /// partition's clock: a load costs that scan, a hit nothing.
    fn evict_past_budget(&mut self, keep: &[(&str, &str)]) {
        while self.owners.len() + self.partition_count() > self.budget {
            let oldest = self
                .partitions
                .iter()
                .flat_map(|(tenant, users)| users.iter().map(move |(user, p)| (tenant, user, p)))
                .filter(|(tenant, user, _)| !keep.contains(&(tenant.as_str(), user.as_str())))
                .min_by_key(|(_, _, partition)| partition.last_used.load(Ordering::Relaxed))
                .map(|(tenant, user, _)| (tenant.clone(), user.clone()));
            let Some((tenant, user_id)) = oldest else {
                return;
            };
            self.evict(&tenant, &user_id);
            self.evictions += 1;
        }
    }

    /// Takes `tenant`'s `user_id`'s partition, if resident, out of memory with its owners.
    fn evict(&mut self, tenant: &str, user_id: &str) {
        let Some(users) = self.partitions.get_mut(tenant) else {
            return;
        };
        let Some(partition) = users.remove(user_id) else {
            return;
        };
        if users.is_empty() {
            self.partitions.remove(tenant);
        }
        for id in partition.index.vectors().ids() {
            self.owners.remove(&id);
        }
    }

    /// Takes `ids` out of their users' resident partitions (others are not in memory); each
    /// partition touched lets go of the removed slots once, and one left empty is dropped.
    fn remove(&mut self, ids: &[u64]) {
        let mut touched = std::collections::BTreeSet::new();
        for id in ids {
            let Some(owner) = self.owners.remove(id) else {
                continue;
            };
            if let Some(partition) = self.partition_mut(&owner.tenant, &owner.user_id) {
                partition.remove(&(), *id);
                touched.insert((owner.tenant, owner.user_id));
            }
        }
        for (tenant, user_id) in touched {
            let Some(users) = self.partitions.get_mut(&tenant) else {
                continue;
            };
            if let Some(partition) = users.get_mut(&user_id) {
                partition.index.unlink_removed();
                if partition.index.vectors().is_empty() {
                    users.remove(&user_id);
                }
            }
            if users.is_empty() {
                self.partitions.remove(&tenant);
            }
        }
    }
}

/// Whether an agent (`None`: anyone asking for the user) may see what belongs to `owner`
/// (`None`: every agent of the user). Memories and episodes share the rule.
pub(crate) fn visible_to(asker: Option<&str>, owner: Option<&str>) -> bool {
    match (asker, owner) {
        (None, _) | (_, None) => true,
        (Some(asker), Some(owner)) => asker == owner,
    }
}

/// Tags lowercased, trimmed, deduplicated and checked.
fn normalise_tags(tags: &[String]) -> Result<Vec<String>, MemoryError> {
    let mut out: Vec<String> = Vec::new();
    for tag in tags {
        let tag = tag.trim();
        // Counted before lowercasing, which may lengthen a word ('İ' becomes two characters).
        if tag.is_empty()
            || tag.chars().count() > MAX_TAG_LEN
            || tag.chars().any(char::is_whitespace)
        {
            return Err(MemoryError::InvalidSetting {
                field: "tags",
                reason: format!("a tag is one word of 1 to {MAX_TAG_LEN} characters"),
            });
        }
        let tag = tag.to_lowercase();
        if !out.contains(&tag) {
            out.push(tag);
        }
    }
    if out.len() > MAX_TAGS {
        return Err(MemoryError::InvalidSetting {
            field: "tags",
            reason: format!("at most {MAX_TAGS} tags"),
        });
    }
    Ok(out)
}

/// Words that say nothing about a memory's topic.
const STOP_WORDS: &[&str] = &[
    "the", "a", "an", "and", "or", "to", "of", "in", "on", "at", "by", "for", "with", "is", "are",
    "was", "be", "i", "my", "me", "user", "users", "their", "they", "he", "she", "his", "her",
    "likes", "like", "prefers", "prefer", "wants", "want", "not", "no", "does", "do", "always",
    "never", "should", "be", "it", "that", "this", "than", "rather", "instead",
];

/// Whether two memories talk about the same thing: they share a content word (not a stop
/// word), compared by a 5-letter stem so "contacted" and "contact" match.
fn shares_key_terms(a: &str, b: &str) -> bool {
    let terms = |text: &str| -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .map(str::to_lowercase)
            .filter(|w| w.len() > 2 && !STOP_WORDS.contains(&w.as_str()))
            .map(|w| w.chars().take(5).collect())
            .collect()
    };
    let first = terms(a);
    terms(b).iter().any(|term| first.contains(term))
}

#[cfg(test)]
mod tests {
    use memlayer_store::{Access, MemoryKind, Store};

    use super::{LongTermMemory, MemoryQuery, RememberRequest, Residency};

    const TENANT: &str = "t";

    fn remember(user: &str, text: &str) -> RememberRequest {
        RememberRequest {
            access: Access::tenant_wide(TENANT),
            user_id: user.into(),
            agent_id: None,
            text: text.into(),
            kind: MemoryKind::Fact,
            tags: Vec::new(),
            source: None,
            key: None,
        }
    }

    async fn recalled(memories: &LongTermMemory, user: &str, query: &str) -> Vec<String> {
        let query = MemoryQuery {
            tenant: TENANT.into(),
            user_id: user.into(),
            agent_id: None,
            query: query.into(),
            k: 5,
            kinds: None,
            tags: None,
        };
        let hits = memories.recall(query).await.unwrap();
        assert!(hits.iter().all(|hit| hit.memory.user_id == user));
        hits.into_iter().map(|hit| hit.memory.text).collect()
    }

    fn resident(memories: &LongTermMemory) -> (usize, usize, u64, u64) {
        let Residency {
            memories,
            partitions,
            loads,
            evictions,
            ..
        } = memories.residency();
        (memories, partitions, loads, evictions)
    }

    /// Nothing is loaded at open; a user's partition is loaded whole when first needed, the
    /// least recently used leave past the budget, and what changed while a partition was out
    /// of memory (a memory forgotten, one remembered) is what the next load finds.
    #[tokio::test]
    async fn partitions_load_when_needed_and_leave_past_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
        let embedder = memlayer_embed::test_support::shared_embedder();
        let eraser = store.take_eraser().unwrap();
        let everything = LongTermMemory::open(store.clone(), embedder.clone(), 1_000);
        let mut tea = 0;
        for (user, text) in [
            ("ann", "Drinks green tea every morning"),
            ("ann", "Lives in Lyon near the river"),
            ("bob", "Works night shifts as a nurse"),
            ("bob", "Has a dog called Biscuit"),
        ] {
            let (memory, _) = everything.remember(remember(user, text)).await.unwrap();
            if text.contains("tea") {
                tea = memory.id;
            }
        }

        // A start: nothing resident. The budget (5) holds one user's two memories and
        // partition, not two users'.
        let memories = LongTermMemory::open(store.clone(), embedder, 5);
        assert_eq!(resident(&memories), (0, 0, 0, 0));
        assert_eq!(
            recalled(&memories, "ann", "what does she drink?").await[0],
            "Drinks green tea every morning"
        );
        assert_eq!(resident(&memories), (2, 1, 1, 0));
        assert_eq!(
            recalled(&memories, "bob", "pets").await[0],
            "Has a dog called Biscuit"
        );
        assert_eq!(resident(&memories), (2, 1, 2, 1), "ann's partition left");

        // Forgotten while ann is not resident, remembered for carl who never was: the next
        // loads read the store as it is.
        assert!(memories.forget(&eraser, TENANT, tea).await.unwrap());
        let remembered = memories.remember(remember("carl", "Plays the cello")).await;
        remembered.unwrap();
        let ann = recalled(&memories, "ann", "what does she drink?").await;
        assert_eq!(ann, ["Lives in Lyon near the river"]);
        assert_eq!(
            recalled(&memories, "carl", "music").await,
            ["Plays the cello"]
        );
        // A user without memories costs a partition, and is not read again while resident.
        assert!(recalled(&memories, "dana", "anything").await.is_empty());
        let (_, _, loads, _) = resident(&memories);
        assert!(recalled(&memories, "dana", "anything").await.is_empty());
        assert_eq!(resident(&memories).2, loads);
        // Loaded: ann, bob, carl (for the remember), ann again (evicting bob), dana.
        assert_eq!(resident(&memories), (2, 3, 5, 2));
        store.shutdown();
    }

    /// A partition is read from the store without the lock; one read before a change and
    /// installed after it is read again, so a memory forgotten in between (while the
    /// partition was not resident, so the change was left to the store) is not in it.
    #[tokio::test]
    async fn a_partition_read_before_a_change_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
        let embedder = memlayer_embed::test_support::shared_embedder();
        let eraser = store.take_eraser().unwrap();
        let everything = LongTermMemory::open(store.clone(), embedder.clone(), 1_000);
        let (tea, _) = everything
            .remember(remember("ann", "Drinks green tea every morning"))
            .await
            .unwrap();
        let lyon = everything.remember(remember("ann", "Lives in Lyon near the river"));
        lyon.await.unwrap();

        let memories = LongTermMemory::open(store.clone(), embedder, 1_000);
        // A recall of ann's reads her memories...
        let (changes, dimension) = {
            let indexes = memories.read();
            (indexes.changes, indexes.dimension)
        };
        let loaded = memories
            .load_unlocked(TENANT, "ann", changes, dimension)
            .unwrap();
        // ... one of them is forgotten meanwhile ...
        assert!(memories.forget(&eraser, TENANT, tea.id).await.unwrap());
        // ... and then the recall installs what it read.
        memories
            .install(&mut memories.write(), TENANT, "ann", loaded)
            .unwrap();
        {
            let indexes = memories.read();
            let ann = &indexes.partition(TENANT, "ann").unwrap().index;
            assert!(
                !ann.vectors().contains(tea.id) && !indexes.owners.contains_key(&tea.id),
                "the forgotten memory is in the installed partition"
            );
            assert_eq!(ann.vectors().len(), 1);
        }
        assert_eq!(
            recalled(&memories, "ann", "what does she drink?").await,
            ["Lives in Lyon near the river"]
        );
        store.shutdown();
    }
}
