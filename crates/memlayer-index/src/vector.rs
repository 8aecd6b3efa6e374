//! The vector index: an exact scan over a contiguous arena for small scopes, an HNSW graph
//! over the same arena for large ones, tombstones and compaction for deletion, and snapshots
//! that keep the graph.
//!
//! The graph ([`crate::graph`]) holds neighbour lists, never vectors, and grows inside the
//! index under its read lock: [`build_graph_unlocked`] inserts a few slots at a time while
//! searches go on, and searches scan exactly the slots it has not reached yet (the head).
//! Building 112,000 graph points took about 150 s on this project's 2-core machines
//! (docs/benchmarks.md), so the graph is kept: in the snapshot, and through compactions,
//! which repair it instead of dropping it.

use std::fmt;
use std::ops::Range;
use std::path::Path;

use rustc_hash::FxHashMap;

use crate::arena::Arena;
use crate::dot::check_unit;
use crate::error::{IndexError, Result};
use crate::graph::{self, Graph, GraphParams, Vectors};
use crate::keyword::KeywordSection;
use crate::lock::IndexLock;
use crate::snapshot;
use crate::topk::{IdFilter, TopK, sort_hits};

/// The largest dimension a configuration accepts; far above any sentence-embedding model,
/// and it keeps `dimension × 4` and the snapshot header field comfortably in range.
pub(crate) const MAX_DIMENSION: usize = 65_536;

/// How many live slots the selectivity estimate of a filter looks at.
const FILTER_SAMPLE: usize = 256;

/// Slots a graph build inserts per read lock: with ef_construction 200 about 2–3 ms each
/// per core, so a writer waiting for the lock (and the searches queued behind it) waits for
/// tens of milliseconds at most.
const GRAPH_CHUNK: usize = 16;

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
    /// itself: dead slots take arena memory and slow graph searches, which walk through
    /// them.
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
        // Neighbour lists are written with 16-bit counts, and every insertion's cost grows
        // with the square of M.
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

    pub(crate) fn graph_params(&self) -> GraphParams {
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
/// but the slot stays a node of the HNSW graph (which holds slots, never vectors) until
/// dead slots exceed [`VectorConfig::max_tombstone_fraction`], or [`compact`](Self::compact)
/// is called: then the arena is squeezed and the graph's lists renumbered and repaired.
///
/// Ids are hashed with rustc-hash's unkeyed Fx hash, which searches look up per candidate:
/// give it ids the program makes (memlayer's message keys, random memory ids), never ones an
/// untrusted caller picks, which could be chosen to collide.
///
/// Methods that change the index take `&mut self`; searches take `&self`, so an
/// `RwLock<VectorIndex>` (or an [`IndexLock`]) serves concurrent searches.
pub struct VectorIndex {
    config: VectorConfig,
    /// The id of each slot, dead slots included.
    ids: Vec<u64>,
    /// Every slot's vector, quantized ([`Arena`]); a dead slot's is all zeros.
    arena: Arena,
    /// Whether each slot is live.
    live: Vec<bool>,
    /// The slot of every live id. Invariant: `slot_of[id] == s` iff `live[s] && ids[s] == id`.
    slot_of: FxHashMap<u64, usize>,
    /// Present while the index has more than `hnsw_threshold` live vectors: one node per
    /// slot, the slots below [`Graph::covered`] linked. A dead slot stays a node (its vector
    /// zeroed) until [`unlink_removed`](Self::unlink_removed) or a compaction takes it out
    /// of every list.
    graph: Option<Graph>,
    /// Whether a slot died since the graph last let go of the dead ones.
    dead_in_graph: bool,
}

/// How [`build_graph_unlocked`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraphBuilt {
    /// The index's new graph now covers every vector.
    Installed,
    /// The index's graph took in the vectors added since it was built or last extended.
    Extended,
    /// The index's graph covers every vector, it is small enough to scan, or it is gone.
    NotNeeded,
    /// `cancelled` said stop; what was inserted stays in the graph.
    Cancelled,
}

/// Builds the graph of the index that `index` finds in `lock`'s value, or extends it over
/// the vectors added since, a chunk of `GRAPH_CHUNK` slots at a time under the lock's read
/// side: searches go on meanwhile (and scan exactly what the graph does not cover yet), and a
/// writer waits for one chunk at most. `cancelled` is asked between chunks.
pub fn build_graph_unlocked<T>(
    lock: &IndexLock<T>,
    index: impl Fn(&T) -> Option<&VectorIndex>,
    cancelled: impl Fn() -> bool,
) -> GraphBuilt {
    // The graph with work left, and whether it was complete before: under the read lock.
    fn work(index: &VectorIndex) -> Option<&Graph> {
        let graph = index.graph.as_ref()?;
        index.needs_graph_work().then_some(graph)
    }
    let outcome = {
        let guard = lock.read();
        match index(&guard).and_then(work) {
            Some(graph) if graph.is_complete() => GraphBuilt::Extended,
            Some(_) => GraphBuilt::Installed,
            None => return GraphBuilt::NotNeeded,
        }
    };
    loop {
        // Asked with the lock free: `cancelled` may take it.
        if cancelled() {
            return GraphBuilt::Cancelled;
        }
        let guard = lock.read();
        let Some(index) = index(&guard) else {
            return GraphBuilt::NotNeeded;
        };
        match work(index) {
            Some(graph) => index.insert_graph_chunk(graph, GRAPH_CHUNK),
            None => return outcome,
        }
    }
}

impl fmt::Debug for VectorIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VectorIndex")
            .field("config", &self.config)
            .field("live", &self.len())
            .field("tombstones", &self.tombstones())
            .field("graph", &self.graph)
            .finish()
    }
}

impl VectorIndex {
    /// An empty index.
    pub fn new(config: VectorConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            ids: Vec::new(),
            arena: Arena::new(config.dimension),
            live: Vec::new(),
            slot_of: FxHashMap::default(),
            graph: None,
            dead_in_graph: false,
            config,
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

    /// Whether searches over the whole index go through a complete HNSW graph (one that a
    /// build took to the last slot; vectors added since are scanned until it is extended).
    pub fn has_graph(&self) -> bool {
        self.graph.as_ref().is_some_and(Graph::is_complete)
    }

    /// Whether the index is large enough for a graph and its graph is not complete yet (it
    /// grew past the threshold, or a snapshot without one was loaded): searches scan what the
    /// graph does not cover, which is right but slower, until
    /// [`build_graph`](Self::build_graph) or [`build_graph_unlocked`] completes it.
    pub fn needs_graph(&self) -> bool {
        self.wants_graph() && !self.has_graph()
    }

    /// Whether [`build_graph_unlocked`] has work: slots the graph does not cover yet.
    pub fn needs_graph_work(&self) -> bool {
        self.graph
            .as_ref()
            .is_some_and(|graph| graph.covered() < self.ids.len())
    }

    /// Builds the graph now if the index needs one, or extends it over every vector added
    /// since. Holds `&mut self` for as long as it takes (seconds per 10,000 vectors); an
    /// index shared behind a lock is better served by [`build_graph_unlocked`].
    pub fn build_graph(&mut self) {
        if let Some(graph) = &self.graph {
            self.insert_graph_chunk(graph, usize::MAX);
        }
    }

    /// Inserts the next `chunk` slots the graph does not cover yet into it.
    fn insert_graph_chunk(&self, graph: &Graph, chunk: usize) {
        let max_connections = self.config.max_connections;
        graph.insert_chunk(
            chunk,
            self.vectors(),
            |slot| self.live[slot],
            |slot| graph::level_of(self.ids[slot], max_connections),
        );
    }

    /// The dead slots the graph still knows (see [`Graph::known`]).
    #[cfg(test)]
    pub(crate) fn dead_slots_in_graph(&self) -> Vec<u32> {
        self.graph.as_ref().map_or_else(Vec::new, |graph| {
            graph
                .known()
                .into_iter()
                .filter(|&slot| !self.live[slot as usize])
                .collect()
        })
    }

    /// The slots of graph nodes no layer-0 list holds (see [`Graph::unlinked`]).
    #[cfg(test)]
    pub(crate) fn unlinked_graph_nodes(&self) -> Vec<u32> {
        self.graph.as_ref().map(Graph::unlinked).unwrap_or_default()
    }

    fn vectors(&self) -> Vectors<'_> {
        Vectors { arena: &self.arena }
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
                if self.arena.holds(slot, vector) {
                    continue;
                }
                self.kill(slot);
            }
            self.slot_of.insert(id, self.ids.len());
            self.ids.push(id);
            self.live.push(true);
            self.arena.push(vector);
        }
        self.maintain();
        Ok(())
    }

    /// Removes the vector of `id`; returns whether there was one.
    ///
    /// The id is gone from searches and its components are zeroed at once: the graph holds
    /// no copy of a vector, only the slot, which stays a node (at distance 1 from everything)
    /// until a compaction takes it out of every neighbour list. If the removal takes the
    /// tombstones past [`VectorConfig::max_tombstone_fraction`], this call compacts.
    pub fn remove(&mut self, id: u64) -> bool {
        let Some(slot) = self.slot_of.remove(&id) else {
            return false;
        };
        self.kill(slot);
        self.maintain();
        true
    }

    /// Takes the slots of removed vectors out of the graph in place (as [`compact`] repairs
    /// the lists around them), so that no search passes through them, and leaves them in
    /// the arena, zeroed since their removal, until the tombstones pass
    /// [`VectorConfig::max_tombstone_fraction`] and a removal compacts. What an erasure runs
    /// under the index's write lock: one pass over the graph's lists where `compact` makes
    /// the graph anew and moves the arena (33 times as long at 100,000 vectors,
    /// docs/benchmarks.md). An index small enough to scan drops its graph. A no-op when no
    /// slot died since the last call.
    ///
    /// [`compact`]: Self::compact
    pub fn unlink_removed(&mut self) {
        if !self.dead_in_graph {
            return;
        }
        self.dead_in_graph = false;
        let graph = self.graph.take().filter(|_| self.wants_graph());
        if let Some(mut graph) = graph {
            graph.unlink(&self.live, self.vectors());
            self.graph = Some(graph);
        }
    }

    /// Squeezes dead slots out of the arena and out of the graph's neighbour lists: a node
    /// that linked to a dead one takes that node's neighbours as candidates and keeps the
    /// best, so the graph keeps serving, repaired rather than rebuilt. Afterwards the index
    /// holds neither an erased vector nor an erased slot. An index small enough to scan
    /// drops its graph.
    pub fn compact(&mut self) {
        if self.tombstones() == 0 {
            if !self.wants_graph() {
                self.graph = None;
            }
            self.fit_graph();
            return;
        }
        let mut moved = Vec::with_capacity(self.ids.len());
        let mut kept = 0;
        for slot in 0..self.ids.len() {
            if self.live[slot] {
                if kept != slot {
                    self.ids[kept] = self.ids[slot];
                    self.arena.move_slot(slot, kept);
                }
                moved.push(Some(kept as u32));
                kept += 1;
            } else {
                moved.push(None);
            }
        }
        // The tail now holds only copies of vectors that moved down; `truncate` clears it
        // anyway so the spare capacity keeps nothing.
        self.arena.truncate(kept);
        self.ids.truncate(kept);
        self.live.clear();
        self.live.resize(kept, true);
        self.slot_of = self
            .ids
            .iter()
            .enumerate()
            .map(|(slot, &id)| (id, slot))
            .collect();
        let graph = self.graph.take();
        if self.wants_graph() {
            self.graph = graph.map(|graph| graph.compact(&moved, self.vectors()));
        }
        self.dead_in_graph = false;
        self.fit_graph();
    }

    /// The (at most) `k` vectors most similar to `query` among those whose id passes
    /// `filter`, as `(id, cosine similarity)`, best first; equal scores in id order.
    ///
    /// Small candidate sets are scanned exactly. With a graph, a filter is estimated on a
    /// sample of the index: when few vectors pass it the exact scan is both faster and exact,
    /// and graph traversal under a selective filter would visit most of the graph anyway.
    /// Otherwise the graph is searched with the filter applied during the traversal, which is
    /// approximate: recall@10 ≥ 0.95 on clustered synthetic data at the defaults, 0.99 on
    /// 50k real MiniLM vectors (docs/benchmarks.md). Scores are the query's dot products with
    /// the stored vectors as quantized ([`crate::arena`]), the same whichever way a vector
    /// was found.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        filter: Option<IdFilter<'_>>,
    ) -> Result<Vec<(u64, f32)>> {
        self.check_vector(query)?;
        // The graph search keeps `k` candidates: an "everything" k must not size its heaps.
        let k = k.min(self.len());
        match &self.graph {
            Some(graph)
                if graph.covered() > 0
                    && self.estimated_candidates(filter) > self.config.hnsw_threshold =>
            {
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
            .map(|&slot| self.arena.similarity(query, slot))
    }

    /// Writes the live vectors and the graph's links between them to a snapshot at `path`,
    /// atomically, recording that it covers the store up to `covered_sequence`. Removed
    /// vectors are never written, compacted or not, nor are links to their slots.
    pub fn save(&self, path: impl AsRef<Path>, covered_sequence: u64) -> Result<()> {
        self.save_with(path.as_ref(), covered_sequence, None)
    }

    /// [`save`](Self::save), with a keyword section written beside the vectors when given.
    pub(crate) fn save_with(
        &self,
        path: &Path,
        covered_sequence: u64,
        keywords: Option<snapshot::SectionWriter<'_>>,
    ) -> Result<()> {
        let records = (0..self.ids.len())
            .filter(|&slot| self.live[slot])
            .map(|slot| (self.ids[slot], self.arena.get(slot)));
        let graph = self.graph.as_ref().map(|graph| {
            let mut next = 0u32;
            let ordinal: Vec<Option<u32>> = self
                .live
                .iter()
                .map(|&live| {
                    live.then(|| {
                        next += 1;
                        next - 1
                    })
                })
                .collect();
            Box::new(move |out: &mut dyn std::io::Write| graph.write(out, &ordinal))
                as snapshot::SectionWriter<'_>
        });
        snapshot::write(
            path,
            self.config.dimension,
            covered_sequence,
            self.len(),
            records,
            snapshot::Sections { keywords, graph },
        )
    }

    /// Loads a snapshot written by [`save`](Self::save) and returns the index with the
    /// sequence it covers; the caller replays newer store entries on top.
    ///
    /// A truncated, damaged, unknown or differently dimensioned file is
    /// [`IndexError::Corrupted`]: rebuild from the store then. The graph comes back with
    /// the vectors (a snapshot of the first format has none; nor does one written with other
    /// graph parameters): an index large enough for one that is without it, or whose graph
    /// did not cover every vector, [`needs_graph_work`](Self::needs_graph_work) after loading.
    pub fn load(path: impl AsRef<Path>, config: VectorConfig) -> Result<(Self, u64)> {
        let (index, covered, _) = Self::load_with_keywords(path.as_ref(), config)?;
        Ok((index, covered))
    }

    /// [`load`](Self::load), with the keyword section the file holds, if any.
    pub(crate) fn load_with_keywords(
        path: &Path,
        config: VectorConfig,
    ) -> Result<(Self, u64, Option<KeywordSection>)> {
        config.validate()?;
        let mut snapshot = snapshot::read(path, &config)?;
        let keywords = snapshot.keywords.take();
        let (index, covered) = Self::from_snapshot(snapshot, config)?;
        Ok((index, covered, keywords))
    }

    /// The index holding a verified snapshot's vectors (`config` already validated).
    pub(crate) fn from_snapshot(
        snapshot: snapshot::Snapshot,
        config: VectorConfig,
    ) -> Result<(Self, u64)> {
        let mut slot_of =
            FxHashMap::with_capacity_and_hasher(snapshot.ids.len(), Default::default());
        for (slot, &id) in snapshot.ids.iter().enumerate() {
            if slot_of.insert(id, slot).is_some() {
                return Err(IndexError::Corrupted(format!("id {id} occurs twice")));
            }
        }
        let mut index = Self {
            config,
            live: vec![true; snapshot.ids.len()],
            ids: snapshot.ids,
            arena: snapshot.arena,
            slot_of,
            graph: snapshot.graph,
            dead_in_graph: false,
        };
        if !index.wants_graph() {
            index.graph = None;
        }
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

    fn kill(&mut self, slot: usize) {
        self.live[slot] = false;
        self.dead_in_graph = true;
        self.arena.clear(slot);
    }

    fn wants_graph(&self) -> bool {
        self.len() > self.config.hnsw_threshold
    }

    /// Compacts when tombstones pass their limit, and fits the graph to the arena.
    fn maintain(&mut self) {
        let too_many_dead = self.tombstones() as f64
            > f64::from(self.config.max_tombstone_fraction) * self.ids.len() as f64;
        if too_many_dead {
            self.compact();
        }
        self.fit_graph();
    }

    /// Gives an index past the threshold a graph to build, and its graph a node for every
    /// slot.
    fn fit_graph(&mut self) {
        let slots = self.ids.len();
        let wanted = self.wants_graph();
        match &mut self.graph {
            Some(graph) => graph.grow(slots),
            None if wanted => self.graph = Some(Graph::new(self.config.graph_params(), slots)),
            None => {}
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
        for slot in slots {
            let id = self.ids[slot];
            if self.live[slot] && filter.is_none_or(|f| f(id)) {
                top.push(id, self.arena.similarity(query, slot));
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
        // The graph answers for the slots it covered when the search began, the exact scan
        // for the head's: a slot the builder inserts meanwhile is counted once.
        let covered = graph.covered().min(self.ids.len());
        let keep = |slot: u32| {
            let slot = slot as usize;
            slot < covered && self.live[slot] && filter.is_none_or(|f| f(self.ids[slot]))
        };
        let mut hits: Vec<(u64, f32)> = graph
            .search(query, k, self.vectors(), &keep)
            .into_iter()
            .map(|slot| {
                (
                    self.ids[slot as usize],
                    self.arena.similarity(query, slot as usize),
                )
            })
            .collect();
        if covered < self.ids.len() {
            hits.extend(self.scan_slots(covered..self.ids.len(), query, k, filter));
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
