//! The vector index: an exact scan over a contiguous arena for small scopes, an HNSW graph
//! over the same arena for large ones, tombstones and compaction for deletion, and snapshots.
//!
//! The graph is built apart from the index's changes: a large index that is loaded, grows
//! past the threshold or compacts has no graph and scans exactly until one is installed,
//! either at once ([`VectorIndex::build_graph`]) or by [`build_graph_unlocked`], which grows
//! it beside a locked index without holding the lock. Building 112,000 graph points took
//! about 150 s on this project's 2-core machines (docs/benchmarks.md); under an index-wide
//! lock that stopped every search for as long, at every start and every erasure.
//!
//! Vectors inserted once the graph exists join it the same way, never under the lock: they
//! form the index's head, the slots past the graph's, which searches scan exactly beside
//! the graph until [`build_graph_unlocked`] extends the graph over them. Extending under the
//! index's write lock made every search wait for the insertion of the pipeline's batch.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::dot::{check_unit, dot};
use crate::error::{IndexError, Result};
use crate::graph::{Graph, GraphParams};
use crate::lock::IndexLock;
use crate::snapshot;
use crate::topk::{IdFilter, TopK, sort_hits};

/// The largest dimension a configuration accepts; far above any sentence-embedding model,
/// and it keeps `dimension × 4` and the snapshot header field comfortably in range.
const MAX_DIMENSION: usize = 65_536;

/// How many live slots the selectivity estimate of a filter looks at.
const FILTER_SAMPLE: usize = 256;

/// Slots a graph build copies per read lock: about 3 MB of 384-d vectors, a copy short
/// enough not to hold up a writer waiting for the lock.
const GRAPH_CHUNK: usize = 2_048;

/// Source of [`VectorIndex`] generations. Process-wide, so that an index dropped and made
/// again (a user's emptied memory partition) never repeats a generation a build holds.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

fn next_generation() -> u64 {
    NEXT_GENERATION.fetch_add(1, Ordering::Relaxed)
}

/// Parameters of a [`VectorIndex`]. Build it with [`VectorConfig::new`] and change fields.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct VectorConfig {
    /// Length of every vector: 384 for all-MiniLM-L6-v2. Checked on insert and search.
    pub dimension: usize,
    /// Searches over at most this many candidate vectors scan them exactly; above it the
    /// index keeps an HNSW graph and searches through it. The default is where, on this
    /// project's 2-core machines, the graph became faster than the scan (see the crate root).
    pub hnsw_threshold: usize,
    /// HNSW `M`: links per node and layer (twice as many on layer 0). At most 256.
    pub max_connections: usize,
    /// HNSW candidate list size while building.
    pub ef_construction: usize,
    /// HNSW candidate list size while searching (raised to `k` when `k` is larger).
    pub ef_search: usize,
    /// The share of dead slots (removed or replaced vectors) above which the index compacts
    /// itself: dead slots slow filtered HNSW searches down, and the graph still holds copies
    /// of the erased vectors until it is rebuilt.
    pub max_tombstone_fraction: f32,
}

impl VectorConfig {
    /// The defaults for vectors of `dimension`: M 16, ef_construction 200, ef_search 64,
    /// compaction at 10% tombstones, and HNSW above 5,000 vectors (measured, see the crate
    /// root).
    pub const fn new(dimension: usize) -> Self {
        Self {
            dimension,
            hnsw_threshold: 5_000,
            max_connections: 16,
            ef_construction: 200,
            ef_search: 64,
            max_tombstone_fraction: 0.1,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let invalid = |field, reason: &str| {
            Err(IndexError::InvalidConfig {
                field,
                reason: reason.into(),
            })
        };
        if !(1..=MAX_DIMENSION).contains(&self.dimension) {
            return invalid("dimension", "must be between 1 and 65536");
        }
        // hnsw_rs terminates the process on more than 256 connections rather than failing.
        if !(2..=256).contains(&self.max_connections) {
            return invalid("max_connections", "must be between 2 and 256");
        }
        if self.ef_construction == 0 {
            return invalid("ef_construction", "must be at least 1");
        }
        if self.ef_search == 0 {
            return invalid("ef_search", "must be at least 1");
        }
        if !(0.0..=1.0).contains(&self.max_tombstone_fraction) {
            return invalid("max_tombstone_fraction", "must be between 0 and 1");
        }
        Ok(())
    }

    fn graph_params(&self) -> GraphParams {
        GraphParams {
            max_connections: self.max_connections,
            ef_construction: self.ef_construction,
            ef_search: self.ef_search,
        }
    }
}

/// Nearest-neighbour search over L2-normalised vectors by cosine similarity.
///
/// Vectors live in one contiguous arena of slots. Removing or replacing a vector kills its
/// slot: the id disappears from every search at once and the slot's components are zeroed,
/// but the slot stays so that the HNSW graph, which cannot delete, keeps valid data ids.
/// When dead slots exceed [`VectorConfig::max_tombstone_fraction`], and on
/// [`compact`](Self::compact), the arena is squeezed and the graph rebuilt from the live
/// vectors, which drops the graph's copies of erased vectors.
///
/// Methods that change the index take `&mut self`; searches take `&self`, so an
/// `RwLock<VectorIndex>` (or an [`IndexLock`]) serves concurrent searches.
pub struct VectorIndex {
    config: VectorConfig,
    /// The id of each slot, dead slots included.
    ids: Vec<u64>,
    /// `ids.len() × dimension` components; a dead slot's components are all zero.
    data: Vec<f32>,
    /// Whether each slot is live.
    live: Vec<bool>,
    /// The slot of every live id. Invariant: `slot_of[id] == s` iff `live[s] && ids[s] == id`.
    slot_of: HashMap<u64, usize>,
    /// Installed by a graph build once the index has more than `hnsw_threshold` live
    /// vectors; dropped by every compaction that squeezes the arena (it holds copies of the
    /// erased vectors) and when the index is small enough to scan. Shared with the build
    /// that extends it, which inserts without the index's lock. Invariant: it holds every
    /// slot below `graph_slots` that was live when it was inserted, its data id being the
    /// slot; it may also hold slots at or past `graph_slots` (an extension under way),
    /// which searches take from the head's scan instead.
    graph: Option<Arc<Graph>>,
    /// The slots the graph covers: `0..graph_slots`. The slots after it, the head, are
    /// scanned exactly by every search that goes through the graph. 0 without a graph.
    graph_slots: usize,
    /// Changes whenever a slot dies or the arena is squeezed: a graph built from vectors
    /// copied before may then hold a vector that is gone, or the wrong slots, and is not
    /// installed.
    generation: u64,
}

/// A graph being built or extended away from its index ([`VectorIndex::start_graph_work`]):
/// the graph so far, what it must still match in the index, and the first slot it has not
/// seen.
struct GraphBuild {
    graph: Arc<Graph>,
    kind: BuildKind,
    next_slot: usize,
}

/// What a [`GraphBuild`] makes, and so what makes it stale.
enum BuildKind {
    /// A new graph for an index of this generation: any slot dying meanwhile could leave an
    /// erased vector in it.
    New { generation: u64 },
    /// The index's installed graph, extended over its head. A slot dying meanwhile is a
    /// tombstone like those the graph already holds; a compaction drops the graph, which
    /// the extension then no longer finds installed.
    Extension,
}

/// Vectors copied out of an index for a [`GraphBuild`], to insert without the index's lock.
struct GraphChunk {
    dimension: usize,
    vectors: Vec<f32>,
    slots: Vec<usize>,
    /// The first slot after the chunk.
    end: usize,
    /// Whether the chunk reaches the index's last slot.
    last: bool,
}

impl GraphBuild {
    /// Whether the build still fits `index`: its chunks may be copied and its graph
    /// installed.
    fn is_current(&self, index: &VectorIndex) -> bool {
        match self.kind {
            BuildKind::New { generation } => generation == index.generation,
            BuildKind::Extension => index
                .graph
                .as_ref()
                .is_some_and(|graph| Arc::ptr_eq(graph, &self.graph)),
        }
    }

    /// Inserts the chunks `copy_chunk` copies, up to the index's last slot. `Err` says how it
    /// ended otherwise: `cancelled` said stop, or the index changed under it (no chunk).
    fn fill(
        &mut self,
        copy_chunk: impl Fn(&Self) -> Option<GraphChunk>,
        cancelled: impl Fn() -> bool,
    ) -> std::result::Result<(), GraphBuilt> {
        loop {
            if cancelled() {
                return Err(GraphBuilt::Cancelled);
            }
            let chunk = copy_chunk(self).ok_or(GraphBuilt::Superseded)?;
            let last = chunk.last;
            self.add(chunk);
            if last {
                return Ok(());
            }
        }
    }

    fn add(&mut self, chunk: GraphChunk) {
        let points: Vec<(&[f32], usize)> = chunk
            .vectors
            .chunks_exact(chunk.dimension)
            .zip(chunk.slots)
            .collect();
        self.graph.insert(&points);
        self.next_slot = chunk.end;
    }
}

/// How [`build_graph_unlocked`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphBuilt {
    /// The index now searches through its new graph.
    Installed,
    /// The index's graph took in the vectors added since it was built or last extended.
    Extended,
    /// The index has a graph, is small enough to scan, or is gone.
    NotNeeded,
    /// A vector was removed or the index compacted meanwhile, so the graph could hold an
    /// erased vector: it was dropped. The index still needs one; build again.
    Superseded,
    /// `cancelled` said stop.
    Cancelled,
}

/// Builds the graph of the index that `index` finds in `lock`'s value, or extends it over
/// the vectors added since, holding the lock only to copy a chunk of vectors (read) and to
/// install the graph or its new extent (write): searches and writers go on while the graph
/// grows, and searches scan exactly what it does not cover yet. `index_mut` must find the
/// same index as `index`. `cancelled` is asked between chunks.
pub fn build_graph_unlocked<T>(
    lock: &IndexLock<T>,
    index: impl Fn(&T) -> Option<&VectorIndex>,
    index_mut: impl FnOnce(&mut T) -> Option<&mut VectorIndex>,
    cancelled: impl Fn() -> bool,
) -> GraphBuilt {
    let Some(mut build) = index(&lock.read()).and_then(VectorIndex::start_graph_work) else {
        return GraphBuilt::NotNeeded;
    };
    let copy_chunk =
        |build: &GraphBuild| index(&lock.read()).and_then(|index| index.graph_chunk(build));
    if let Err(ended) = build.fill(copy_chunk, cancelled) {
        return ended;
    }
    let mut guard = lock.write();
    match index_mut(&mut guard) {
        None => GraphBuilt::NotNeeded,
        Some(index) => index.finish_graph_work(build),
    }
}

impl fmt::Debug for VectorIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VectorIndex")
            .field("config", &self.config)
            .field("live", &self.len())
            .field("tombstones", &self.tombstones())
            .field("graph", &self.graph.as_ref().map(|graph| graph.len()))
            .field("graph_slots", &self.graph_slots)
            .field("generation", &self.generation)
            .finish()
    }
}

impl VectorIndex {
    /// An empty index.
    pub fn new(config: VectorConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            ids: Vec::new(),
            data: Vec::new(),
            live: Vec::new(),
            slot_of: HashMap::new(),
            graph: None,
            graph_slots: 0,
            generation: next_generation(),
        })
    }

    /// The configuration the index was built with.
    pub fn config(&self) -> &VectorConfig {
        &self.config
    }

    /// How many vectors the index holds.
    pub fn len(&self) -> usize {
        self.slot_of.len()
    }

    /// Whether the index holds no vector.
    pub fn is_empty(&self) -> bool {
        self.slot_of.is_empty()
    }

    /// Whether `id` has a vector in the index.
    pub fn contains(&self, id: u64) -> bool {
        self.slot_of.contains_key(&id)
    }

    /// The ids of every vector in the index, in no particular order.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.slot_of.keys().copied()
    }

    /// How many removed or replaced vectors still occupy a slot until the next compaction.
    pub fn tombstones(&self) -> usize {
        self.ids.len() - self.slot_of.len()
    }

    /// Whether searches over the whole index go through the HNSW graph.
    pub fn has_graph(&self) -> bool {
        self.graph.is_some()
    }

    /// Whether the index is large enough for a graph and has none (it was loaded, grew past
    /// the threshold or compacted): searches scan exactly, which is right but slower, until
    /// [`build_graph`](Self::build_graph) or [`build_graph_unlocked`] installs one.
    pub fn needs_graph(&self) -> bool {
        self.graph.is_none() && self.wants_graph()
    }

    /// Whether [`build_graph_unlocked`] has work: a graph to build, or vectors added since
    /// the graph was built to extend it over.
    pub fn needs_graph_work(&self) -> bool {
        self.needs_graph() || (self.graph.is_some() && self.graph_slots < self.ids.len())
    }

    /// Builds the graph now if the index needs one, or extends it over every vector added
    /// since. Holds `&mut self` for as long as it takes (seconds per 10,000 vectors); an
    /// index shared behind a lock is better served by [`build_graph_unlocked`].
    pub fn build_graph(&mut self) {
        let Some(mut build) = self.start_graph_work() else {
            return;
        };
        // Nothing changes under `&mut self`: every chunk fits and the build is installed.
        if build
            .fill(|build| self.graph_chunk(build), || false)
            .is_ok()
        {
            self.finish_graph_work(build);
        }
    }

    /// The graph work this index needs, if any: an empty graph to build, or its graph to
    /// extend over the head.
    fn start_graph_work(&self) -> Option<GraphBuild> {
        if self.needs_graph() {
            return Some(GraphBuild {
                graph: Arc::new(Graph::new(self.config.graph_params(), self.len())),
                kind: BuildKind::New {
                    generation: self.generation,
                },
                next_slot: 0,
            });
        }
        let graph = self.graph.as_ref()?;
        (self.graph_slots < self.ids.len()).then(|| GraphBuild {
            graph: Arc::clone(graph),
            kind: BuildKind::Extension,
            next_slot: self.graph_slots,
        })
    }

    /// Copies of the next live vectors `build` lacks, or `None` if the index changed under
    /// it (a graph built on would be wrong, or hold an erased vector).
    fn graph_chunk(&self, build: &GraphBuild) -> Option<GraphChunk> {
        if !build.is_current(self) {
            return None;
        }
        let end = (build.next_slot + GRAPH_CHUNK).min(self.ids.len());
        let slots: Vec<usize> = (build.next_slot..end)
            .filter(|&slot| self.live[slot])
            .collect();
        let vectors = slots
            .iter()
            .flat_map(|&slot| self.vector(slot))
            .copied()
            .collect();
        Some(GraphChunk {
            dimension: self.config.dimension,
            vectors,
            slots,
            end,
            last: end == self.ids.len(),
        })
    }

    /// Makes `build`'s graph the index's, or its extent the graph's, unless the index
    /// changed under it or no longer needs a graph. The slots added since its last chunk
    /// stay in the head, for the next extension.
    fn finish_graph_work(&mut self, build: GraphBuild) -> GraphBuilt {
        if !build.is_current(self) {
            return GraphBuilt::Superseded;
        }
        match build.kind {
            BuildKind::New { .. } if !self.needs_graph() => GraphBuilt::NotNeeded,
            BuildKind::New { .. } => {
                self.graph = Some(build.graph);
                self.graph_slots = build.next_slot;
                GraphBuilt::Installed
            }
            BuildKind::Extension => {
                self.graph_slots = build.next_slot;
                GraphBuilt::Extended
            }
        }
    }

    /// Adds the vector of `id`, replacing the one it had.
    ///
    /// Fails, leaving the index unchanged, if the vector has the wrong dimension or is not
    /// finite and L2-normalised.
    pub fn insert(&mut self, id: u64, vector: &[f32]) -> Result<()> {
        self.insert_batch([(id, vector)])
    }

    /// Adds many vectors at once, to the head: searches scan them exactly until
    /// [`build_graph_unlocked`] takes them into the graph. An id that occurs twice keeps its
    /// last vector.
    ///
    /// Every vector is checked first: if one is invalid, none is added.
    pub fn insert_batch<'a>(
        &mut self,
        items: impl IntoIterator<Item = (u64, &'a [f32])>,
    ) -> Result<()> {
        let items: Vec<(u64, &[f32])> = items.into_iter().collect();
        for (_, vector) in &items {
            self.check_vector(vector)?;
        }
        for (id, vector) in items {
            if let Some(&slot) = self.slot_of.get(&id) {
                // Re-inserting an unchanged vector (a replay after loading a snapshot) would
                // only create a tombstone.
                if self.vector(slot) == vector {
                    continue;
                }
                self.kill(slot);
            }
            self.slot_of.insert(id, self.ids.len());
            self.ids.push(id);
            self.live.push(true);
            self.data.extend_from_slice(vector);
        }
        self.maintain();
        Ok(())
    }

    /// Removes the vector of `id`; returns whether there was one.
    ///
    /// The id is gone from searches and its components are zeroed at once. Copies in the
    /// HNSW graph last until the next compaction: call [`compact`](Self::compact) when the
    /// vector must be erased from memory. If the removal takes the tombstones past
    /// [`VectorConfig::max_tombstone_fraction`], this call compacts, which drops the graph.
    pub fn remove(&mut self, id: u64) -> bool {
        let Some(slot) = self.slot_of.remove(&id) else {
            return false;
        };
        self.kill(slot);
        self.maintain();
        true
    }

    /// Squeezes dead slots out of the arena and drops the HNSW graph, which holds copies of
    /// the erased vectors: afterwards no erased vector is held by the index. A large index
    /// then scans exactly until a graph is built again ([`needs_graph`](Self::needs_graph)).
    /// Without tombstones there is nothing to erase: the graph is only dropped if the index
    /// is small enough to scan.
    pub fn compact(&mut self) {
        if self.tombstones() == 0 {
            if !self.wants_graph() {
                self.graph = None;
                self.graph_slots = 0;
            }
            return;
        }
        self.generation = next_generation();
        let dimension = self.config.dimension;
        let mut kept = 0;
        for slot in 0..self.ids.len() {
            if self.live[slot] {
                if kept != slot {
                    self.ids[kept] = self.ids[slot];
                    self.data
                        .copy_within(slot * dimension..(slot + 1) * dimension, kept * dimension);
                }
                kept += 1;
            }
        }
        // The tail now holds only copies of vectors that moved down; clear it anyway so the
        // spare capacity keeps nothing.
        self.data[kept * dimension..].fill(0.0);
        self.ids.truncate(kept);
        self.data.truncate(kept * dimension);
        self.live.clear();
        self.live.resize(kept, true);
        self.slot_of = self
            .ids
            .iter()
            .enumerate()
            .map(|(slot, &id)| (id, slot))
            .collect();
        // Dropping the old graph frees its copies of the erased vectors (an extension under
        // way holds it until it finds it gone, at its next chunk).
        self.graph = None;
        self.graph_slots = 0;
    }

    /// The (at most) `k` vectors most similar to `query` among those whose id passes
    /// `filter`, as `(id, cosine similarity)`, best first; equal scores in id order.
    ///
    /// Small candidate sets are scanned exactly. With a graph, a filter is estimated on a
    /// sample of the index: when few vectors pass it the exact scan is both faster and exact,
    /// and graph traversal under a selective filter would visit most of the graph anyway.
    /// Otherwise the graph is searched with the filter applied during the traversal, which is
    /// approximate: recall@10 ≥ 0.99 on clustered synthetic data at the defaults, 0.98 on
    /// 100k real MiniLM vectors. Scores are always the exact dot products.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        filter: Option<IdFilter<'_>>,
    ) -> Result<Vec<(u64, f32)>> {
        self.check_vector(query)?;
        // hnsw_rs sizes its candidate heaps by k: an "everything" k must not reach it.
        let k = k.min(self.len());
        match &self.graph {
            Some(graph) if self.estimated_candidates(filter) > self.config.hnsw_threshold => {
                Ok(self.search_graph(graph, query, k, filter))
            }
            _ => Ok(self.scan(query, k, filter)),
        }
    }

    /// Like [`search`](Self::search) but always an exact scan of every live vector.
    pub fn search_exact(
        &self,
        query: &[f32],
        k: usize,
        filter: Option<IdFilter<'_>>,
    ) -> Result<Vec<(u64, f32)>> {
        self.check_vector(query)?;
        Ok(self.scan(query, k, filter))
    }

    /// The cosine similarity of `query` to document `id`'s vector, if the index holds one.
    /// The query must have the index's dimension (as [`search`](Self::search) checks).
    pub fn similarity(&self, id: u64, query: &[f32]) -> Option<f32> {
        self.slot_of
            .get(&id)
            .map(|&slot| dot(query, self.vector(slot)))
    }

    /// Writes the live vectors to a snapshot at `path`, atomically, recording that it covers
    /// the store up to `covered_sequence`. Removed vectors are never written, compacted or
    /// not.
    pub fn save(&self, path: impl AsRef<Path>, covered_sequence: u64) -> Result<()> {
        let records = (0..self.ids.len())
            .filter(|&slot| self.live[slot])
            .map(|slot| (self.ids[slot], self.vector(slot)));
        snapshot::write(
            path.as_ref(),
            self.config.dimension,
            covered_sequence,
            self.len(),
            records,
        )
    }

    /// Loads a snapshot written by [`save`](Self::save) and returns the index with the
    /// sequence it covers; the caller replays newer store entries on top.
    ///
    /// A truncated, damaged, unknown or differently dimensioned file is
    /// [`IndexError::Corrupted`]: rebuild from the store then. The snapshot holds no graph:
    /// an index large enough for one [`needs_graph`](Self::needs_graph) after loading.
    pub fn load(path: impl AsRef<Path>, config: VectorConfig) -> Result<(Self, u64)> {
        config.validate()?;
        let snapshot = snapshot::read(path.as_ref(), config.dimension)?;
        Self::from_snapshot(snapshot, config)
    }

    /// The index holding a verified snapshot's vectors (`config` already validated).
    pub(crate) fn from_snapshot(
        snapshot: snapshot::Snapshot,
        config: VectorConfig,
    ) -> Result<(Self, u64)> {
        let mut slot_of = HashMap::with_capacity(snapshot.ids.len());
        for (slot, &id) in snapshot.ids.iter().enumerate() {
            if slot_of.insert(id, slot).is_some() {
                return Err(IndexError::Corrupted(format!("id {id} occurs twice")));
            }
        }
        let mut index = Self {
            config,
            live: vec![true; snapshot.ids.len()],
            ids: snapshot.ids,
            data: snapshot.data,
            slot_of,
            graph: None,
            graph_slots: 0,
            generation: next_generation(),
        };
        index.maintain();
        Ok((index, snapshot.covered_sequence))
    }

    fn check_vector(&self, vector: &[f32]) -> Result<()> {
        if vector.len() != self.config.dimension {
            return Err(IndexError::DimensionMismatch {
                expected: self.config.dimension,
                found: vector.len(),
            });
        }
        check_unit(vector).map_err(IndexError::InvalidVector)
    }

    fn vector(&self, slot: usize) -> &[f32] {
        let dimension = self.config.dimension;
        &self.data[slot * dimension..(slot + 1) * dimension]
    }

    fn kill(&mut self, slot: usize) {
        self.generation = next_generation();
        self.live[slot] = false;
        let dimension = self.config.dimension;
        self.data[slot * dimension..(slot + 1) * dimension].fill(0.0);
    }

    fn wants_graph(&self) -> bool {
        self.len() > self.config.hnsw_threshold
    }

    /// Compacts when tombstones pass their limit.
    fn maintain(&mut self) {
        let too_many_dead = self.tombstones() as f64
            > f64::from(self.config.max_tombstone_fraction) * self.ids.len() as f64;
        if too_many_dead {
            self.compact();
        }
    }

    /// How many live vectors probably pass `filter`, from a stride sample of the slots.
    /// A stride rather than random sample keeps searches deterministic; ids that cluster in
    /// slot order (one recent conversation) are still counted in proportion.
    fn estimated_candidates(&self, filter: Option<IdFilter<'_>>) -> usize {
        let Some(filter) = filter else {
            return self.len();
        };
        let step = (self.ids.len() / FILTER_SAMPLE).max(1);
        let (mut sampled, mut passed) = (0usize, 0usize);
        for slot in (0..self.ids.len()).step_by(step) {
            if self.live[slot] {
                sampled += 1;
                passed += usize::from(filter(self.ids[slot]));
            }
        }
        if sampled == 0 {
            return 0;
        }
        self.len() * passed / sampled
    }

    fn scan(&self, query: &[f32], k: usize, filter: Option<IdFilter<'_>>) -> Vec<(u64, f32)> {
        self.scan_slots(0..self.ids.len(), query, k, filter)
    }

    /// The exact top `k` of the live vectors in `slots` that pass `filter`.
    fn scan_slots(
        &self,
        slots: Range<usize>,
        query: &[f32],
        k: usize,
        filter: Option<IdFilter<'_>>,
    ) -> Vec<(u64, f32)> {
        let mut top = TopK::new(k);
        let dimension = self.config.dimension;
        let vectors =
            self.data[slots.start * dimension..slots.end * dimension].chunks_exact(dimension);
        for ((&id, &live), vector) in self.ids[slots.clone()]
            .iter()
            .zip(&self.live[slots])
            .zip(vectors)
        {
            if live && filter.is_none_or(|f| f(id)) {
                top.push(id, dot(query, vector));
            }
        }
        top.into_sorted()
    }

    fn search_graph(
        &self,
        graph: &Graph,
        query: &[f32],
        k: usize,
        filter: Option<IdFilter<'_>>,
    ) -> Vec<(u64, f32)> {
        if k == 0 {
            return Vec::new();
        }
        // The graph answers for its slots, the exact scan for the head's.
        let keep = |slot: usize| {
            slot < self.graph_slots && self.live[slot] && filter.is_none_or(|f| f(self.ids[slot]))
        };
        // Without dead slots, caller filter or points past `graph_slots` the graph search
        // may stop early; hnsw_rs explores further whenever a filter is given, so pass one
        // only when needed. A slot that was dead when the graph was extended is a tombstone
        // still, so a graph holding a point past its slots is one whose size differs.
        let slot_filter: Option<&dyn Fn(usize) -> bool> =
            if filter.is_some() || self.tombstones() > 0 || graph.len() != self.graph_slots {
                Some(&keep)
            } else {
                None
            };
        let mut hits: Vec<(u64, f32)> = graph
            .search(query, k, slot_filter)
            .into_iter()
            .filter(|&slot| keep(slot))
            .map(|slot| (self.ids[slot], dot(query, self.vector(slot))))
            .collect();
        if self.graph_slots < self.ids.len() {
            hits.extend(self.scan_slots(self.graph_slots..self.ids.len(), query, k, filter));
            sort_hits(&mut hits);
            hits.truncate(k);
        } else {
            sort_hits(&mut hits);
        }
        hits
    }
}

#[cfg(test)]
mod tests;
