//! memlayer's HNSW graph (Malkov and Yashunin's hierarchical navigable small world) over the
//! slots of the vector arena: neighbour lists only, the vectors read from the arena.
//!
//! Why not a library's graph (hnsw_rs was used until issue 18): it keeps a copy of every
//! vector inside the graph, which doubled the vector index's memory, kept copies of erased
//! vectors until the whole graph was rebuilt (so every erasure dropped the graph and left
//! searches scanning exactly for as long as a rebuild took, ~30 s at 57,600 vectors), and
//! its dump holds those copies too, so graphs could not be kept across starts without
//! keeping erased vectors on disk. Here a node is its slot's neighbour lists: an erased
//! vector is zeroed in the arena and the graph holds nothing of it but the slot number, a
//! compaction takes dead slots out of the lists and repairs their neighbours in place
//! ([`Graph::compact`]), and the snapshot file keeps the lists beside the live vectors
//! ([`Graph::write`], [`Graph::read`]), so a start serves from the graph at once.
//!
//! Concurrency: a graph lives inside its [`crate::VectorIndex`] and grows under the index's
//! *read* lock, so searches go on while it grows; each neighbour list has its own mutex,
//! held only to copy or change that list. Slots below [`Graph::covered`] are in the graph;
//! the builder inserts the next ones in slot order, one chunk at a time (`building` keeps
//! builders from inserting the same slots), on [`BUILDERS`], threads of background priority:
//! building graphs is the indexes' upkeep, and under load the CPU belongs to requests first.
//! Everything that renumbers or drops nodes takes `&mut self` (the index's write lock).

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, OnceLock, PoisonError};

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::arena::Arena;
use crate::error::{IndexError, Result};
use crate::snapshot::read_exact;

/// Layers a node may reach: with M ≥ 2 a node reaches layer 16 with probability below
/// 2^-16, and the graph's descent costs one greedy step per layer.
pub(crate) const MAX_LEVEL: usize = 16;

/// Below this many slots a parallel insert costs more in rayon scheduling than it saves.
const PARALLEL_INSERT_MIN: usize = 8;

/// The threads graphs are built on, one per core, at background priority
/// ([`memlayer_embed::lower_thread_priority`]). `None` if the threads could not be started:
/// graphs are then built on the calling thread.
static BUILDERS: LazyLock<Option<rayon::ThreadPool>> = LazyLock::new(|| {
    rayon::ThreadPoolBuilder::new()
        .thread_name(|index| format!("index-graph-{index}"))
        .start_handler(|_| memlayer_embed::lower_thread_priority())
        .build()
        .map_err(|err| tracing::warn!(error = %err, "no graph builder threads; building inline"))
        .ok()
});

/// Construction and search parameters of a graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GraphParams {
    /// Links per node on the layers above 0; twice as many on layer 0.
    pub(crate) max_connections: usize,
    pub(crate) ef_construction: usize,
    pub(crate) ef_search: usize,
}

impl GraphParams {
    /// Most links a node keeps on `layer`.
    fn links(&self, layer: usize) -> usize {
        links(self.max_connections, layer)
    }
}

/// Most links a node keeps on `layer` in a graph of `max_connections`: twice as many on
/// layer 0, which every node is on.
fn links(max_connections: usize, layer: usize) -> usize {
    if layer == 0 {
        2 * max_connections
    } else {
        max_connections
    }
}

/// The vectors of the arena a graph is over; a dead slot is all zeros.
#[derive(Clone, Copy)]
pub(crate) struct Vectors<'a> {
    pub(crate) arena: &'a Arena,
}

/// What distances are measured from: a search's query, or a slot's own (quantized) vector
/// while the graph is built or repaired.
#[derive(Clone, Copy)]
pub(crate) enum Probe<'a> {
    Query(&'a [f32]),
    Slot(u32),
}

impl Vectors<'_> {
    /// `1 - cosine`, clamped at zero: the distance between L2-normalised vectors the graph
    /// navigates by. A dead (zeroed) slot is at distance 1 from everything.
    fn distance(&self, from: Probe<'_>, slot: u32) -> f32 {
        let similarity = match from {
            Probe::Query(query) => self.arena.similarity(query, slot as usize),
            Probe::Slot(base) => self.arena.similarity_of_slots(base as usize, slot as usize),
        };
        (1.0 - similarity).max(0.0)
    }
}

/// A node: its neighbour lists, layer 0 first; unset until the node is inserted.
#[derive(Default)]
struct Node {
    layers: OnceLock<Box<[Mutex<Vec<u32>>]>>,
    /// How many layer-0 lists hold this node: a node no list holds can no longer be found.
    /// Kept under the lists' locks, read without them (a race costs a protection, no more).
    linked_from: AtomicU32,
}

impl Node {
    fn inserted(layers: Vec<Vec<u32>>) -> Self {
        let node = Self::default();
        let _ = node
            .layers
            .set(layers.into_iter().map(Mutex::new).collect());
        node
    }

    fn linked_from(&self) -> u32 {
        self.linked_from.load(Ordering::Relaxed)
    }

    fn link_added(&self) {
        self.linked_from.fetch_add(1, Ordering::Relaxed);
    }

    fn link_removed(&self) {
        let _ = self
            .linked_from
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// The node's highest layer, if it is in the graph.
    fn level(&self) -> Option<usize> {
        self.layers.get().map(|layers| layers.len() - 1)
    }

    /// The neighbour list of `layer`, if the node reaches it.
    fn layer(&self, layer: usize) -> Option<MutexGuard<'_, Vec<u32>>> {
        let list = self.layers.get()?.get(layer)?;
        Some(list.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The lists, out of their mutexes (for `&mut` work on the graph).
    fn into_lists(self) -> Option<Vec<Vec<u32>>> {
        let layers = self.layers.into_inner()?;
        Some(
            layers
                .into_vec()
                .into_iter()
                .map(|list| list.into_inner().unwrap_or_else(PoisonError::into_inner))
                .collect(),
        )
    }
}

/// Where searches enter the graph: a node of the highest layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    slot: u32,
    level: usize,
}

/// A slot at a distance, ordered by distance (then slot, so that ties are deterministic).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Near {
    distance: f32,
    slot: u32,
}

impl Eq for Near {}

/// `slots` with their distances to `base`, nearest first.
fn nearest_first(base: Probe<'_>, slots: &[u32], vectors: Vectors<'_>) -> Vec<Near> {
    let mut near: Vec<Near> = slots
        .iter()
        .map(|&slot| Near {
            distance: vectors.distance(base, slot),
            slot,
        })
        .collect();
    near.sort_unstable();
    near
}

impl Ord for Near {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.distance
            .total_cmp(&other.distance)
            .then(self.slot.cmp(&other.slot))
    }
}

impl PartialOrd for Near {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

/// The HNSW graph of one vector index: one [`Node`] per arena slot.
pub(crate) struct Graph {
    params: GraphParams,
    nodes: Vec<Node>,
    entry: Mutex<Option<Entry>>,
    /// Slots below it are in the graph (or were dead when the builder reached them).
    covered: AtomicUsize,
    /// Set once a build reached the last slot: until then the graph is still being built
    /// after a load, a compaction or crossing the size threshold, and most searches scan.
    complete: AtomicBool,
    /// Held by whoever inserts the next chunk.
    building: Mutex<()>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("slots", &self.nodes.len())
            .field("covered", &self.covered())
            .field("entry", &*self.entry())
            .finish_non_exhaustive()
    }
}

impl Graph {
    /// An empty graph over an arena of `slots` slots, none of them inserted yet.
    pub(crate) fn new(params: GraphParams, slots: usize) -> Self {
        Self {
            params,
            nodes: (0..slots).map(|_| Node::default()).collect(),
            entry: Mutex::new(None),
            covered: AtomicUsize::new(0),
            complete: AtomicBool::new(false),
            building: Mutex::new(()),
        }
    }

    /// Slots below this are in the graph; searches scan the slots from here on exactly.
    pub(crate) fn covered(&self) -> usize {
        self.covered.load(Ordering::Acquire)
    }

    /// Whether a build has reached the arena's last slot since the graph was made.
    pub(crate) fn is_complete(&self) -> bool {
        self.complete.load(Ordering::Acquire)
    }

    /// Makes room for the slots the arena grew by (`slots` in all), not inserted yet.
    pub(crate) fn grow(&mut self, slots: usize) {
        if slots > self.nodes.len() {
            self.nodes.resize_with(slots, Node::default);
        }
    }

    fn entry(&self) -> MutexGuard<'_, Option<Entry>> {
        self.entry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Inserts the next up to `chunk` slots after [`covered`](Self::covered), those
    /// `live` keeps, in parallel on [`BUILDERS`]; `level_of` gives a slot's layer count
    /// minus one.
    pub(crate) fn insert_chunk(
        &self,
        chunk: usize,
        vectors: Vectors<'_>,
        live: impl Fn(usize) -> bool + Sync,
        level_of: impl Fn(usize) -> usize + Sync,
    ) {
        let _building = self.building.lock().unwrap_or_else(PoisonError::into_inner);
        let start = self.covered();
        let end = start.saturating_add(chunk).min(self.nodes.len());
        let slots: Vec<u32> = (start..end)
            .filter(|&slot| live(slot))
            .map(|slot| slot as u32)
            .collect();
        let link = |slot: u32| {
            self.insert(slot, level_of(slot as usize), vectors);
            memlayer_embed::yield_to_requests();
        };
        let insert = || {
            if slots.len() >= PARALLEL_INSERT_MIN {
                slots.par_iter().for_each(|&slot| link(slot));
            } else {
                slots.iter().for_each(|&slot| link(slot));
            }
        };
        match &*BUILDERS {
            Some(builders) => builders.install(insert),
            None => insert(),
        }
        self.covered.store(end, Ordering::Release);
        if end == self.nodes.len() {
            self.complete.store(true, Ordering::Release);
        }
    }

    /// Links `slot` into the graph with `level + 1` layers.
    fn insert(&self, slot: u32, level: usize, vectors: Vectors<'_>) {
        let node = &self.nodes[slot as usize];
        let lists = (0..=level)
            .map(|layer| Mutex::new(Vec::with_capacity(self.params.links(layer) + 1)))
            .collect();
        if node.layers.set(lists).is_err() {
            return;
        }
        let entry = {
            let mut entry = self.entry();
            match *entry {
                Some(entry) => entry,
                None => {
                    *entry = Some(Entry { slot, level });
                    return;
                }
            }
        };
        let query = Probe::Slot(slot);
        let mut nearest = self.descend(query, entry, level + 1, vectors);
        for layer in (0..=level.min(entry.level)).rev() {
            let found = self.search_layer(
                query,
                &nearest,
                self.params.ef_construction,
                layer,
                vectors,
                &|candidate| candidate != slot,
            );
            let chosen = select(&found, self.params.links(layer), vectors);
            self.join(slot, &chosen, layer, vectors);
            if !found.is_empty() {
                nearest = found;
            }
        }
        if level > entry.level {
            let mut entry = self.entry();
            if entry.is_none_or(|entry| level > entry.level) {
                *entry = Some(Entry { slot, level });
            }
        }
    }

    /// Makes `chosen` the `layer` neighbours of `slot`, and `slot` one of theirs. Another
    /// builder thread may have linked to `slot` on this layer already: it reaches `slot`
    /// through the layers above, joined first. So `slot`'s list is added to and pruned like
    /// any other, never just extended, which left lists past their links in a snapshot no
    /// load accepts (1 of 2 builds of 10,000 real vectors).
    fn join(&self, slot: u32, chosen: &[Near], layer: usize, vectors: Vectors<'_>) {
        for near in chosen {
            self.link(slot, near.slot, layer, vectors);
        }
        for near in chosen {
            self.link(near.slot, slot, layer, vectors);
        }
    }

    /// Adds `new` to the `layer` list of `slot`, pruning the list with the heuristic when it
    /// grows past its links. On layer 0 a node the pruning would leave in no list at all
    /// stays, in the place of a kept one that other lists hold too: in a dense cluster, where
    /// every node is nearly as far from its neighbours as from the rest, the heuristic alone
    /// left 25 of 4,000 nodes in no list (`every_vector_of_a_dense_cluster_stays_reachable`),
    /// and a search can only find a node through a list that holds it.
    fn link(&self, slot: u32, new: u32, layer: usize, vectors: Vectors<'_>) {
        let Some(mut list) = self.nodes[slot as usize].layer(layer) else {
            return;
        };
        if list.contains(&new) {
            return;
        }
        list.push(new);
        if layer == 0 {
            self.nodes[new as usize].link_added();
        }
        let links = self.params.links(layer);
        if list.len() <= links {
            return;
        }
        let candidates = nearest_first(Probe::Slot(slot), &list, vectors);
        let mut kept: Vec<u32> = select(&candidates, links, vectors)
            .into_iter()
            .map(|near| near.slot)
            .collect();
        if layer == 0 {
            let linked_from = |slot: u32| self.nodes[slot as usize].linked_from();
            for candidate in &candidates {
                let last_link = linked_from(candidate.slot) <= 1;
                if !last_link || kept.contains(&candidate.slot) {
                    continue;
                }
                // The farthest kept node that other lists hold too gives up its place.
                if let Some(place) = kept.iter().rposition(|&other| linked_from(other) > 1) {
                    kept[place] = candidate.slot;
                }
            }
            for &dropped in list.iter().filter(|slot| !kept.contains(slot)) {
                self.nodes[dropped as usize].link_removed();
            }
        }
        *list = kept;
    }

    /// The slots the graph still knows, for tests: nodes with lists, their neighbours and the
    /// entry.
    #[cfg(test)]
    pub(crate) fn known(&self) -> std::collections::BTreeSet<u32> {
        let mut known: std::collections::BTreeSet<u32> =
            self.entry().map(|e| e.slot).into_iter().collect();
        for (slot, node) in (0u32..).zip(&self.nodes) {
            let Some(level) = node.level() else {
                continue;
            };
            known.insert(slot);
            for layer in 0..=level {
                known.extend(node.layer(layer).into_iter().flat_map(|list| list.clone()));
            }
        }
        known
    }

    /// The slots of inserted nodes no layer-0 list holds, but the entry (for tests of the
    /// graph's shape).
    #[cfg(test)]
    pub(crate) fn unlinked(&self) -> Vec<u32> {
        let entry = self.entry().map(|entry| entry.slot);
        let held = layer_zero_holders(&self.nodes);
        (0..self.nodes.len() as u32)
            .filter(|&slot| self.nodes[slot as usize].level().is_some() && held[slot as usize] == 0)
            .filter(|&slot| Some(slot) != entry)
            .collect()
    }

    /// The `ef` nodes of `layer` nearest to `query` that `keep` accepts, nearest first,
    /// found from `seeds` (the beam search of the HNSW paper, with a filter: nodes it refuses
    /// are still walked through, never returned).
    fn search_layer(
        &self,
        query: Probe<'_>,
        seeds: &[Near],
        ef: usize,
        layer: usize,
        vectors: Vectors<'_>,
        keep: &dyn Fn(u32) -> bool,
    ) -> Vec<Near> {
        let mut visited = Visited::with_capacity(ef * self.params.links(layer));
        // Nearest first (through Reverse) and farthest first.
        let mut candidates: BinaryHeap<std::cmp::Reverse<Near>> = BinaryHeap::new();
        let mut found: BinaryHeap<Near> = BinaryHeap::new();
        for &seed in seeds {
            if visited.insert(seed.slot) {
                candidates.push(std::cmp::Reverse(seed));
                if keep(seed.slot) {
                    found.push(seed);
                }
            }
        }
        while found.len() > ef {
            found.pop();
        }
        let mut neighbours = Vec::with_capacity(self.params.links(layer) + 1);
        while let Some(std::cmp::Reverse(current)) = candidates.pop() {
            if found.len() >= ef
                && found
                    .peek()
                    .is_some_and(|far| current.distance > far.distance)
            {
                break;
            }
            neighbours.clear();
            if let Some(list) = self.nodes[current.slot as usize].layer(layer) {
                neighbours.extend_from_slice(&list);
            }
            for &next in &neighbours {
                if !visited.insert(next) {
                    continue;
                }
                let near = Near {
                    distance: vectors.distance(query, next),
                    slot: next,
                };
                let worth = found.len() < ef || found.peek().is_some_and(|far| near < *far);
                if worth {
                    candidates.push(std::cmp::Reverse(near));
                    if keep(next) {
                        found.push(near);
                        if found.len() > ef {
                            found.pop();
                        }
                    }
                }
            }
        }
        found.into_sorted_vec()
    }

    /// The node nearest to `query` a greedy walk finds from `entry` down to layer `lowest`
    /// (the layers above a search's or an insertion's own), as the seed below them.
    fn descend(
        &self,
        query: Probe<'_>,
        entry: Entry,
        lowest: usize,
        vectors: Vectors<'_>,
    ) -> Vec<Near> {
        let mut nearest = vec![Near {
            distance: vectors.distance(query, entry.slot),
            slot: entry.slot,
        }];
        for layer in (lowest..=entry.level).rev() {
            nearest = self.search_layer(query, &nearest, 1, layer, vectors, &|_| true);
        }
        nearest
    }

    /// The slots of (at most) the `k` nodes nearest to `query` that `keep` accepts, nearest
    /// first; the search keeps `max(ef_search, k)` candidates.
    pub(crate) fn search(
        &self,
        query: &[f32],
        k: usize,
        vectors: Vectors<'_>,
        keep: &dyn Fn(u32) -> bool,
    ) -> Vec<u32> {
        let Some(entry) = *self.entry() else {
            return Vec::new();
        };
        let query = Probe::Query(query);
        let nearest = self.descend(query, entry, 1, vectors);
        let ef = self.params.ef_search.max(k);
        let mut found = self.search_layer(query, &nearest, ef, 0, vectors, keep);
        found.truncate(k);
        found.into_iter().map(|near| near.slot).collect()
    }

    /// The graph after the arena was squeezed: `moved[old]` is the new slot of each live old
    /// slot, `None` for the dead ones, and `vectors` is the squeezed arena. Dead nodes leave
    /// every list; a node that lost neighbours to them takes their neighbours as candidates
    /// and keeps the best by the heuristic, so the graph stays navigable without a rebuild.
    pub(crate) fn compact(self, moved: &[Option<u32>], vectors: Vectors<'_>) -> Self {
        let params = self.params;
        let covered = self.covered();
        let complete = self.is_complete();
        let entry = *self.entry();
        let old: Vec<Option<Vec<Vec<u32>>>> =
            self.nodes.into_iter().map(Node::into_lists).collect();
        let renumber = |slot: u32| moved.get(slot as usize).copied().flatten();
        let mut nodes = Vec::with_capacity(moved.iter().flatten().count());
        for (slot, lists) in old.iter().enumerate() {
            let Some(new_slot) = moved[slot] else {
                continue;
            };
            let Some(lists) = lists else {
                nodes.push(Node::default());
                continue;
            };
            let repaired = lists
                .iter()
                .enumerate()
                .map(|(layer, list)| {
                    let lost_list = |neighbour: u32| {
                        old[neighbour as usize]
                            .as_ref()
                            .and_then(|lists| lists.get(layer))
                            .map(Vec::as_slice)
                    };
                    repair_list(list, new_slot, layer, renumber, lost_list, params, vectors)
                })
                .collect();
            nodes.push(Node::inserted(repaired));
        }
        let entry = match entry.and_then(|entry| renumber(entry.slot).map(|slot| (entry, slot))) {
            Some((entry, slot)) => Some(Entry {
                slot,
                level: entry.level,
            }),
            None => highest(&nodes),
        };
        let covered = moved[..covered.min(moved.len())].iter().flatten().count();
        count_links(&nodes);
        Self {
            params,
            nodes,
            entry: Mutex::new(entry),
            covered: AtomicUsize::new(covered),
            complete: AtomicBool::new(complete),
            building: Mutex::new(()),
        }
    }

    /// Takes the slots `live` marks dead out of the graph in place: their nodes leave it,
    /// and every list that held one is repaired as [`compact`](Self::compact) repairs it.
    /// Slots keep their numbers, so the arena stays as it is and the cost is one pass over
    /// the lists, where `compact` makes every node anew over a squeezed arena.
    pub(crate) fn unlink(&mut self, live: &[bool], vectors: Vectors<'_>) {
        let params = self.params;
        let is_live = |slot: u32| live.get(slot as usize).copied().unwrap_or(false);
        let mut dead_lists: FxHashMap<u32, Vec<Vec<u32>>> = FxHashMap::default();
        for (slot, node) in (0u32..).zip(self.nodes.iter_mut()) {
            if !is_live(slot)
                && let Some(lists) = std::mem::take(node).into_lists()
            {
                dead_lists.insert(slot, lists);
            }
        }
        let mut changed = !dead_lists.is_empty();
        for (slot, node) in (0u32..).zip(self.nodes.iter_mut()) {
            let Some(layers) = node.layers.get_mut() else {
                continue;
            };
            for (layer, list) in layers.iter_mut().enumerate() {
                let list = list.get_mut().unwrap_or_else(PoisonError::into_inner);
                if list.iter().all(|&neighbour| is_live(neighbour)) {
                    continue;
                }
                let lost_list = |neighbour: u32| {
                    dead_lists
                        .get(&neighbour)
                        .and_then(|lists| lists.get(layer))
                        .map(Vec::as_slice)
                };
                let renumber = |slot: u32| is_live(slot).then_some(slot);
                *list = repair_list(list, slot, layer, renumber, lost_list, params, vectors);
                changed = true;
            }
        }
        let entry = self.entry.get_mut().unwrap_or_else(PoisonError::into_inner);
        if entry.is_some_and(|entry| !is_live(entry.slot)) {
            *entry = highest(&self.nodes);
        }
        if changed {
            count_links(&self.nodes);
        }
    }

    /// Writes the graph in the snapshot's numbering: `ordinal[slot]` is a live slot's record
    /// number, `None` for a dead one. Only the covered live slots are written, as records
    /// `0..g`, each as its level (`u8`) and per layer a count (`u16`) and the neighbours'
    /// record numbers (`u32`), after a header of `g` (`u64`), `max_connections` (`u32`) and
    /// the entry's record number (`u32`, `u32::MAX` when `g` is 0). Links to slots not
    /// written are left out.
    pub(crate) fn write(&self, out: &mut dyn Write, ordinal: &[Option<u32>]) -> io::Result<()> {
        let covered = self.covered().min(ordinal.len());
        let written = ordinal[..covered].iter().flatten().count();
        let entry = self
            .entry()
            .and_then(|entry| ordinal.get(entry.slot as usize).copied().flatten())
            .filter(|&record| (record as usize) < written)
            .or_else(|| {
                // The entry died: the written node of the highest level enters.
                (0..covered)
                    .filter_map(|slot| Some((self.nodes[slot].level()?, ordinal[slot]?)))
                    .max_by_key(|&(level, record)| (level, std::cmp::Reverse(record)))
                    .map(|(_, record)| record)
            });
        out.write_all(&(written as u64).to_le_bytes())?;
        out.write_all(&(self.params.max_connections as u32).to_le_bytes())?;
        out.write_all(&entry.unwrap_or(u32::MAX).to_le_bytes())?;
        let mut bytes = Vec::new();
        for slot in (0..covered).filter(|&slot| ordinal[slot].is_some()) {
            bytes.clear();
            let layers = self.nodes[slot].layers.get().map_or(&[][..], |l| &l[..]);
            // A live covered slot is always inserted; an empty node is written as level 0
            // without links rather than shifting every record number after it.
            bytes.push(layers.len().saturating_sub(1) as u8);
            if layers.is_empty() {
                bytes.extend_from_slice(&0u16.to_le_bytes());
            }
            for list in layers {
                let list = list.lock().unwrap_or_else(PoisonError::into_inner);
                let kept: Vec<u32> = list
                    .iter()
                    .filter_map(|&neighbour| ordinal.get(neighbour as usize).copied().flatten())
                    .filter(|&record| (record as usize) < written)
                    .collect();
                bytes.extend_from_slice(&(kept.len() as u16).to_le_bytes());
                for record in kept {
                    bytes.extend_from_slice(&record.to_le_bytes());
                }
            }
            out.write_all(&bytes)?;
        }
        Ok(())
    }

    /// Reads the `len` bytes of a graph [`write`](Self::write) wrote from `source`, over an
    /// arena of `slots` slots of which the first `g` are its nodes; every count, level and
    /// link is checked. `Ok(None)` when it was built with other parameters (the index builds a
    /// new one).
    pub(crate) fn read(
        source: impl Read,
        len: u64,
        slots: usize,
        params: GraphParams,
    ) -> Result<Option<Self>> {
        let corrupted = |detail: &str| IndexError::Corrupted(format!("graph: {detail}"));
        let mut reader = Reader {
            source,
            remaining: len,
        };
        let written = usize::try_from(reader.u64()?)
            .ok()
            .filter(|&written| written <= slots)
            .ok_or_else(|| corrupted("more nodes than vectors"))?;
        let max_connections = reader.u32()? as usize;
        let entry = reader.u32()?;
        let mut levels = Vec::with_capacity(written);
        let mut lists: Vec<Vec<Vec<u32>>> = Vec::with_capacity(written);
        for _ in 0..written {
            let level = usize::from(reader.u8()?);
            if level > MAX_LEVEL {
                return Err(corrupted("a level above the most a node may have"));
            }
            let mut layers = Vec::with_capacity(level + 1);
            for layer in 0..=level {
                let count = usize::from(reader.u16()?);
                if count > links(max_connections, layer) {
                    return Err(corrupted("a node with more links than allowed"));
                }
                let list = reader.u32s(count)?;
                if list.iter().any(|&neighbour| neighbour as usize >= written) {
                    return Err(corrupted("a link to a node that is not there"));
                }
                layers.push(list);
            }
            levels.push(level);
            lists.push(layers);
        }
        if reader.remaining != 0 {
            return Err(corrupted("bytes after the last node"));
        }
        // A link on a layer must lead to a node that reaches that layer.
        for layers in &lists {
            for (layer, list) in layers.iter().enumerate() {
                if list
                    .iter()
                    .any(|&neighbour| levels[neighbour as usize] < layer)
                {
                    return Err(corrupted("a link to a node below its layer"));
                }
            }
        }
        let entry = match (written, entry) {
            (0, u32::MAX) => None,
            (0, _) => return Err(corrupted("an entry into an empty graph")),
            (_, entry) if entry as usize >= written => {
                return Err(corrupted("an entry that is not a node"));
            }
            (_, entry) if levels.iter().any(|&level| level > levels[entry as usize]) => {
                return Err(corrupted("an entry below the highest layer"));
            }
            (_, entry) => Some(Entry {
                slot: entry,
                level: levels[entry as usize],
            }),
        };
        if max_connections != params.max_connections {
            return Ok(None);
        }
        let mut nodes: Vec<Node> = lists.into_iter().map(Node::inserted).collect();
        nodes.resize_with(slots, Node::default);
        count_links(&nodes);
        Ok(Some(Self {
            params,
            nodes,
            entry: Mutex::new(entry),
            covered: AtomicUsize::new(written),
            complete: AtomicBool::new(written == slots),
            building: Mutex::new(()),
        }))
    }
}

/// The `layer` list `list` of the node now at `slot`, renumbered by `renumber` and without
/// the neighbours it maps to `None`. A list that lost one takes that neighbour's own list on
/// the layer (`lost_list`) as candidates and keeps the best by the heuristic, so the graph
/// stays navigable without a rebuild. `vectors` is the arena in the new numbering.
fn repair_list<'l>(
    list: &[u32],
    slot: u32,
    layer: usize,
    renumber: impl Fn(u32) -> Option<u32>,
    lost_list: impl Fn(u32) -> Option<&'l [u32]>,
    params: GraphParams,
    vectors: Vectors<'_>,
) -> Vec<u32> {
    let mut candidates: Vec<u32> = Vec::with_capacity(list.len());
    let mut lost = false;
    for &neighbour in list {
        match renumber(neighbour) {
            Some(kept) => candidates.push(kept),
            None => {
                lost = true;
                candidates.extend(
                    lost_list(neighbour)
                        .into_iter()
                        .flatten()
                        .filter_map(|&theirs| renumber(theirs))
                        .filter(|&theirs| theirs != slot),
                );
            }
        }
    }
    if !lost {
        return candidates;
    }
    candidates.sort_unstable();
    candidates.dedup();
    let near = nearest_first(Probe::Slot(slot), &candidates, vectors);
    select(&near, params.links(layer), vectors)
        .into_iter()
        .map(|near| near.slot)
        .collect()
}

/// Sets every node's count of the layer-0 lists that hold it, after the lists were made
/// whole (a compaction, a load).
fn count_links(nodes: &[Node]) {
    for (node, count) in nodes.iter().zip(layer_zero_holders(nodes)) {
        node.linked_from.store(count, Ordering::Relaxed);
    }
}

/// How many layer-0 lists hold each node.
fn layer_zero_holders(nodes: &[Node]) -> Vec<u32> {
    let mut counts = vec![0u32; nodes.len()];
    for node in nodes {
        if let Some(list) = node.layer(0) {
            for &other in list.iter() {
                counts[other as usize] += 1;
            }
        }
    }
    counts
}

/// The node of the highest level, to enter by.
fn highest(nodes: &[Node]) -> Option<Entry> {
    nodes
        .iter()
        .enumerate()
        .filter_map(|(slot, node)| Some((node.level()?, slot)))
        .max_by_key(|&(level, slot)| (level, std::cmp::Reverse(slot)))
        .map(|(level, slot)| Entry {
            slot: slot as u32,
            level,
        })
}

/// The HNSW paper's neighbour selection heuristic (its algorithm 4, keeping pruned
/// connections): from `candidates`, nearest first, keeps each one nearer to the base than to
/// every one already kept, up to `links`, then fills what is left with the nearest of the
/// others. The first part spreads links in different directions, which lets a greedy search
/// cross between clusters; the fill keeps nodes among many near-identical vectors (repeated
/// texts embed identically) connected to more than one or two of them.
fn select(candidates: &[Near], links: usize, vectors: Vectors<'_>) -> Vec<Near> {
    let mut kept: Vec<Near> = Vec::with_capacity(links);
    let mut pruned: Vec<Near> = Vec::new();
    for &candidate in candidates {
        if kept.len() >= links {
            break;
        }
        if kept.iter().all(|other| {
            vectors.distance(Probe::Slot(candidate.slot), other.slot) > candidate.distance
        }) {
            kept.push(candidate);
        } else {
            pruned.push(candidate);
        }
    }
    let room = links - kept.len();
    kept.extend(pruned.into_iter().take(room));
    kept
}

/// The slots a search has seen: an open-addressing set of `u32`, sized to the search.
struct Visited {
    table: Vec<u32>,
    len: usize,
}

impl Visited {
    /// Marks an empty place; slot `u32::MAX` cannot occur (arenas hold fewer slots).
    const EMPTY: u32 = u32::MAX;

    fn with_capacity(expected: usize) -> Self {
        Self {
            table: vec![Self::EMPTY; (expected * 2).next_power_of_two().max(64)],
            len: 0,
        }
    }

    /// Adds `slot`; returns whether it was new.
    fn insert(&mut self, slot: u32) -> bool {
        if 2 * (self.len + 1) > self.table.len() {
            let doubled = vec![Self::EMPTY; self.table.len() * 2];
            let old = std::mem::replace(&mut self.table, doubled);
            self.len = 0;
            for slot in old.into_iter().filter(|&slot| slot != Self::EMPTY) {
                self.insert(slot);
            }
        }
        let mask = self.table.len() - 1;
        // Fibonacci hashing spreads consecutive slots over the table.
        let mut place = (slot.wrapping_mul(0x9E37_79B9) as usize) & mask;
        loop {
            match self.table[place] {
                Self::EMPTY => {
                    self.table[place] = slot;
                    self.len += 1;
                    return true;
                }
                seen if seen == slot => return false,
                _ => place = (place + 1) & mask,
            }
        }
    }
}

/// The graph's section, read as little-endian fields from the snapshot as it streams in;
/// running out is corruption.
struct Reader<R> {
    source: R,
    /// Bytes of the section not read yet: no field is read past its end.
    remaining: u64,
}

impl<R: Read> Reader<R> {
    /// Takes `bytes.len()` bytes of what remains into `bytes`.
    fn fill(&mut self, bytes: &mut [u8]) -> Result<()> {
        self.remaining = self
            .remaining
            .checked_sub(bytes.len() as u64)
            .ok_or_else(|| IndexError::Corrupted("graph: the file ends inside a node".into()))?;
        read_exact(&mut self.source, bytes)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut field = [0u8; N];
        self.fill(&mut field)?;
        Ok(field)
    }

    /// `count` `u32`s in one read: a graph holds tens of links per node, and a load reads
    /// every one of them.
    fn u32s(&mut self, count: usize) -> Result<Vec<u32>> {
        let mut bytes = vec![0u8; 4 * count];
        self.fill(&mut bytes)?;
        Ok(bytes
            .as_chunks::<4>()
            .0
            .iter()
            .map(|bytes| u32::from_le_bytes(*bytes))
            .collect())
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take()?))
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take()?))
    }
}

/// The layer count minus one of the node of vector `id`, drawn from the exponential
/// distribution of the HNSW paper (`mL = 1 / ln M`) by a hash of the id, so that a graph
/// built again from the same vectors gives each the same level.
pub(crate) fn level_of(id: u64, max_connections: usize) -> usize {
    // splitmix64: a full-period mix of the id.
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // Uniform in (0, 1]: never 0, whose logarithm is infinite.
    let uniform = ((z >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let level = -uniform.ln() / (max_connections as f64).ln();
    (level as usize).min(MAX_LEVEL)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::{BUILDERS, Graph, GraphParams, Probe, Vectors, Visited, level_of, nearest_first};
    use crate::arena::Arena;

    #[test]
    fn a_node_linked_to_before_it_joins_keeps_at_most_its_links() {
        // Seven unit vectors around a circle; slot 6 is being inserted with two layers. The
        // builder thread inserting slot 5 reached it through layer 1 and linked it to slot 5
        // on layer 0 before slot 6 joined its own four nearest there.
        let mut arena = Arena::new(4);
        for slot in 0..7u8 {
            let angle = f32::from(slot) * 0.3;
            arena.push(&[angle.cos(), angle.sin(), 0.0, 0.0]);
        }
        let vectors = Vectors { arena: &arena };
        let params = GraphParams {
            max_connections: 2,
            ef_construction: 16,
            ef_search: 16,
        };
        let graph = Graph::new(params, 7);
        for slot in 0..6 {
            graph.insert(slot, 0, vectors);
        }
        let lists = vec![Mutex::new(Vec::new()), Mutex::new(Vec::new())];
        assert!(graph.nodes[6].layers.set(lists.into()).is_ok());
        graph.link(6, 5, 0, vectors);
        let nearest = nearest_first(Probe::Slot(6), &[0, 1, 2, 3, 4], vectors);
        graph.join(6, &nearest[..params.links(0)], 0, vectors);

        let list = graph.nodes[6]
            .layer(0)
            .expect("slot 6 is on layer 0")
            .clone();
        let mut distinct = list.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), list.len(), "a neighbour twice: {list:?}");
        assert!(
            list.len() <= params.links(0),
            "{} links past the {} a load accepts: {list:?}",
            list.len(),
            params.links(0)
        );
    }

    #[test]
    fn graphs_are_built_at_background_priority() {
        // The calling thread's scheduling policy (0 is SCHED_OTHER, 5 SCHED_IDLE).
        let policy = || {
            let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("procfs");
            memlayer_embed::test_support::scheduling_policy(&stat)
        };
        let builders = BUILDERS.as_ref().expect("the builder threads start");
        assert_eq!(policy(), Some(0), "the test runs at normal priority");
        assert_eq!(
            builders.install(policy),
            Some(5),
            "a builder runs at SCHED_IDLE"
        );
    }

    #[test]
    fn levels_fall_off_by_the_connection_count() {
        let levels: Vec<usize> = (0..100_000).map(|id| level_of(id, 16)).collect();
        let above = |level| levels.iter().filter(|&&l| l >= level).count();
        // P(level ≥ 1) = 1/16, P(level ≥ 2) = 1/256.
        assert!((5_500..7_000).contains(&above(1)), "{}", above(1));
        assert!((250..550).contains(&above(2)), "{}", above(2));
        assert_eq!(level_of(42, 16), level_of(42, 16));
    }

    #[test]
    fn the_visited_set_grows_and_answers_once_per_slot() {
        let mut visited = Visited::with_capacity(1);
        for slot in (0..5_000).map(|n| n * 7) {
            assert!(visited.insert(slot));
        }
        for slot in (0..5_000).map(|n| n * 7) {
            assert!(!visited.insert(slot));
        }
        assert!(visited.insert(1));
    }
}
