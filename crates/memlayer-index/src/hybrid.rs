//! The hybrid index: a [`VectorIndex`] beside keyword postings, searched together and fused
//! by reciprocal rank. Message recall ([`crate::Recall`]) holds one whose keyword side is
//! partitioned per tenant and user; long-term memory (`memlayer-memory`) holds one per tenant
//! and user, with a plain [`KeywordIndex`]. The fusion, how many candidates each side
//! proposes, what a document's neighbours lend it, and the graph-building hook exist here
//! once.
//!
//! The constants were fitted on the development half of LoCoMo (five long conversations in
//! one store, one user each, scored by evidence recall of the first hits; the figures are in
//! docs/benchmarks.md, "Recall quality").

use rustc_hash::FxHashMap;

use crate::{
    Fused, GraphBuilt, IdFilter, IndexLock, KeywordIndex, Result, Retriever, VectorIndex,
    build_graph_unlocked, weighted_reciprocal_rank_fusion,
};

/// How many candidates each side of a [`HybridIndex`] proposes to the fusion, whatever the
/// number of hits asked for: a pool that grew with `k` would let a document ranked low by
/// both sides overtake one ranked high by one side, so the first hits of a large `k` would
/// differ from a small `k`'s answer.
pub const CANDIDATES_PER_SIDE: usize = 150;

/// The constant of the hybrid search's reciprocal rank fusion. Cormack et al.'s 60
/// ([`crate::RRF_K`]) flattens the top of each side's ranking, so that over pools of 150 a
/// document both sides rank in the thirties overtakes one a side ranks first; 10 keeps the
/// sides' first hits first (LoCoMo development half, R@10 without neighbours: 59.0 at 60,
/// 61.9 at 20, 64.4 at 10 and at 5).
const FUSION_K: u32 = 10;

/// The weight of the vector side's ranks in the fusion, the keyword side's being 1: with
/// all-MiniLM-L6-v2 the keyword side is the stronger retriever on conversations (LoCoMo
/// development half, R@10 58.6 against 46.6), and 0.8 lifts the fused R@5 from 60.0 to 61.9
/// at an unchanged R@10 (72.1 and 72.0; 0.7 scores 62.4 and 71.9).
const VECTOR_WEIGHT: f64 = 0.8;

/// The share of its best neighbour's keyword score a document adds to its own: in a
/// conversation the turn that answers a question often shares no word with it while the
/// turn before or after does ("What did you adopt?" — "A puppy!"). With the vector share
/// below, R@10 went from 64.4 to 72.1 on LoCoMo's development half; shares from 0.3 to 0.5
/// on either side score within a point of it.
const KEYWORD_NEIGHBOUR_SHARE: f32 = 0.5;

/// The same for the similarity to the query's vector: a short reply ("Yes, last June!")
/// means little on its own, and its neighbour carries the meaning.
const VECTOR_NEIGHBOUR_SHARE: f32 = 0.3;

/// The documents read together with a document: for a message, the turns just before and
/// after it in its conversation. `None` where there is none.
pub type Neighbours<'a> = &'a dyn Fn(u64) -> [Option<u64>; 2];

/// What a [`HybridIndex::search`] looks for.
#[derive(Clone, Copy)]
pub struct HybridQuery<'a> {
    /// The words to match.
    pub text: &'a str,
    /// The text's embedding; without one only keywords are searched.
    pub vector: Option<&'a [f32]>,
    /// How many hits at most.
    pub k: usize,
    /// Which documents may be found (and may lend their scores to a neighbour).
    pub filter: Option<IdFilter<'a>>,
    /// When given, each side ranks a document by its own score plus a share of its best
    /// neighbour's, and a neighbour of a candidate is a candidate too.
    pub neighbours: Option<Neighbours<'a>>,
}

/// The keyword side of a [`HybridIndex`]: BM25 postings, in one index ([`KeywordIndex`]) or
/// in partitions that share nothing a score depends on (message recall's, per tenant and
/// user).
pub trait KeywordPostings {
    /// What names the postings a document is in: `()` for one [`KeywordIndex`], the
    /// partition's key for partitioned postings. A document is added, found and removed under
    /// the same partition.
    type Partition: ?Sized;

    /// Indexes `text` as document `id` of `partition`, replacing the text it had there.
    fn add(&mut self, partition: &Self::Partition, id: u64, text: &str);

    /// Removes document `id` from `partition`; returns whether it was indexed there.
    fn remove(&mut self, partition: &Self::Partition, id: u64) -> bool;

    /// Whether document `id` is indexed in `partition`.
    fn contains(&self, partition: &Self::Partition, id: u64) -> bool;

    /// The (at most) `k` best BM25 matches of `query` in `partition` that pass `filter`, as
    /// `(id, score)`, best first, scored with that partition's statistics alone.
    fn search(
        &self,
        partition: &Self::Partition,
        query: &str,
        k: usize,
        filter: Option<IdFilter<'_>>,
    ) -> Vec<(u64, f32)>;
}

impl KeywordPostings for KeywordIndex {
    type Partition = ();

    fn add(&mut self, (): &(), id: u64, text: &str) {
        KeywordIndex::add(self, id, text);
    }

    fn remove(&mut self, (): &(), id: u64) -> bool {
        KeywordIndex::remove(self, id)
    }

    fn contains(&self, (): &(), id: u64) -> bool {
        KeywordIndex::contains(self, id)
    }

    fn search(
        &self,
        (): &(),
        query: &str,
        k: usize,
        filter: Option<IdFilter<'_>>,
    ) -> Vec<(u64, f32)> {
        KeywordIndex::search(self, query, k, filter)
    }
}

/// Documents `(u64 id, text, vector)` searched by keywords and by meaning at once.
///
/// A document's text and vector may enter at different times (message recall indexes the
/// text at once and the vector once it is embedded), but leave together: [`Self::remove`]
/// takes both out, and an erasure then calls [`Self::compact`] so that not even the graph
/// keeps the vector's slot.
#[derive(Debug)]
pub struct HybridIndex<K = KeywordIndex> {
    vectors: VectorIndex,
    keywords: K,
}

impl<K: KeywordPostings> HybridIndex<K> {
    /// `vectors` beside empty keyword postings.
    pub fn new(vectors: VectorIndex) -> Self
    where
        K: Default,
    {
        Self {
            vectors,
            keywords: K::default(),
        }
    }

    /// The vector side.
    pub fn vectors(&self) -> &VectorIndex {
        &self.vectors
    }

    /// The vector side, to add vectors that arrive after their text.
    pub fn vectors_mut(&mut self) -> &mut VectorIndex {
        &mut self.vectors
    }

    /// The keyword side.
    pub fn keywords(&self) -> &K {
        &self.keywords
    }

    /// The keyword side, to add texts whose vectors arrive later or were loaded already.
    pub fn keywords_mut(&mut self) -> &mut K {
        &mut self.keywords
    }

    /// Adds `documents` `(id, text, vector)` to `partition`. The vectors go in as one batch:
    /// an index with a graph extends it in parallel, where one insert at a time would extend
    /// it serially. Fails, adding nothing, when a vector does not fit the index.
    pub fn add(
        &mut self,
        partition: &K::Partition,
        documents: &[(u64, &str, &[f32])],
    ) -> Result<()> {
        self.vectors
            .insert_batch(documents.iter().map(|&(id, _, vector)| (id, vector)))?;
        for &(id, text, _) in documents {
            self.keywords.add(partition, id, text);
        }
        Ok(())
    }

    /// Takes document `id` out of both sides (its text out of `partition`); returns whether
    /// either held it. The vector's slot is zeroed at once; call [`Self::unlink_removed`] after
    /// the removals of an erasure.
    pub fn remove(&mut self, partition: &K::Partition, id: u64) -> bool {
        let text = self.keywords.remove(partition, id);
        self.vectors.remove(id) || text
    }

    /// Takes removed vectors' slots out of the vector side's graph in place (see
    /// [`VectorIndex::unlink_removed`]).
    pub fn unlink_removed(&mut self) {
        self.vectors.unlink_removed();
    }

    /// Whether the vector side waits for its graph (see [`VectorIndex::needs_graph`]).
    pub fn needs_graph(&self) -> bool {
        self.vectors.needs_graph()
    }

    /// Whether the vector side has graph work (see [`VectorIndex::needs_graph_work`]).
    pub fn needs_graph_work(&self) -> bool {
        self.vectors.needs_graph_work()
    }

    /// The (at most) `query.k` best documents of `partition` for `query.text` and, when
    /// given, `query.vector`, among those that pass `query.filter`, best first: each side
    /// proposes [`CANDIDATES_PER_SIDE`] (or `k`, if more) candidates, re-ranked with what
    /// their neighbours lend when `query.neighbours` is given, and the two rankings are fused
    /// by reciprocal rank. Each hit says at which rank each side found it ([`Fused::rank`]).
    ///
    /// The pools do not grow with `k`, so for every `k` up to [`CANDIDATES_PER_SIDE`] the
    /// answer is the first `k` of one ranking: asking for more never reorders the top.
    pub fn search(&self, partition: &K::Partition, query: HybridQuery<'_>) -> Result<Vec<Fused>> {
        let depth = CANDIDATES_PER_SIDE.max(query.k);
        let by_keyword = self
            .keywords
            .search(partition, query.text, depth, query.filter);
        let by_vector = match query.vector {
            Some(vector) => self.vectors.search(vector, depth, query.filter)?,
            None => Vec::new(),
        };
        let (by_keyword, by_vector) = match query.neighbours {
            None => (ids(&by_keyword), ids(&by_vector)),
            Some(neighbours) => {
                let keyword_scores: FxHashMap<u64, f32> = by_keyword.iter().copied().collect();
                let keyword = with_neighbours(
                    &by_keyword,
                    neighbours,
                    query.filter,
                    |id| keyword_scores.get(&id).copied(),
                    KEYWORD_NEIGHBOUR_SHARE,
                    depth,
                );
                let vector = match query.vector {
                    Some(vector) => with_neighbours(
                        &by_vector,
                        neighbours,
                        query.filter,
                        |id| self.vectors.similarity(id, vector),
                        VECTOR_NEIGHBOUR_SHARE,
                        depth,
                    ),
                    None => Vec::new(),
                };
                (keyword, vector)
            }
        };
        let mut fused = weighted_reciprocal_rank_fusion(
            &[
                (Retriever::Keyword, 1.0, &by_keyword),
                (Retriever::Vector, VECTOR_WEIGHT, &by_vector),
            ],
            FUSION_K,
        );
        fused.truncate(query.k);
        Ok(fused)
    }

    /// Builds the graph of the hybrid index that `index` finds in `lock`'s value a chunk at a
    /// time under the lock's read side (see [`build_graph_unlocked`]). Searches scan exactly
    /// what the graph does not cover yet.
    pub fn build_graph_unlocked<T>(
        lock: &IndexLock<T>,
        index: impl Fn(&T) -> Option<&Self>,
        cancelled: impl Fn() -> bool,
    ) -> GraphBuilt
    where
        K: 'static,
    {
        build_graph_unlocked(
            lock,
            |value| index(value).map(|hybrid| &hybrid.vectors),
            cancelled,
        )
    }
}

fn ids(hits: &[(u64, f32)]) -> Vec<u64> {
    hits.iter().map(|&(id, _)| id).collect()
}

/// One side's candidates `pool` (scored, best first) and their admitted neighbours, ranked
/// by their own score plus `share` of their best admitted neighbour's (a negative one lends
/// nothing), best first, equal scores in id order, at most `depth`. `score` answers for any
/// document, `None` when the side does not hold it (a document outside the keyword pool
/// scores nothing: it is below the pool's last).
fn with_neighbours(
    pool: &[(u64, f32)],
    neighbours: Neighbours<'_>,
    filter: Option<IdFilter<'_>>,
    score: impl Fn(u64) -> Option<f32>,
    share: f32,
    depth: usize,
) -> Vec<u64> {
    let admitted = |id: &u64| filter.is_none_or(|admits| admits(*id));
    let around = |id: u64| neighbours(id).into_iter().flatten().filter(admitted);
    let mut candidates: Vec<u64> = pool
        .iter()
        .flat_map(|&(id, _)| std::iter::once(id).chain(around(id)))
        .collect();
    candidates.sort_unstable();
    candidates.dedup();
    // Each document is scored once, though it is met as a candidate and again as either
    // neighbour's neighbour: a vector's score is a dot product.
    let mut scores: FxHashMap<u64, Option<f32>> = FxHashMap::default();
    let mut score_of = |id: u64| *scores.entry(id).or_insert_with(|| score(id));
    let mut ranked: Vec<(u64, f32)> = candidates
        .into_iter()
        .map(|id| {
            let lent = around(id).filter_map(&mut score_of).fold(0.0_f32, f32::max);
            (id, score_of(id).unwrap_or(0.0) + share * lent)
        })
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(depth);
    ids(&ranked)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::VectorConfig;

    /// Ids 1 to 5 in a row, as the turns of one conversation.
    fn in_a_row(id: u64) -> [Option<u64>; 2] {
        let valid = |n: u64| (1..=5).contains(&n).then_some(n);
        [id.checked_sub(1).and_then(valid), valid(id + 1)]
    }

    #[test]
    fn neighbours_of_candidates_join_the_ranking_with_a_share_of_their_score() {
        let pool = [(1, 2.0), (5, 1.0)];
        let scores: HashMap<u64, f32> = pool.into_iter().collect();
        let score = |id| scores.get(&id).copied();
        // 2 borrows half of 1's score, 4 half of 5's; 2 and 5 tie and rank in id order.
        assert_eq!(
            with_neighbours(&pool, &in_a_row, None, score, 0.5, 10),
            [1, 2, 5, 4]
        );
        // A document the filter refuses is neither found nor lends its score.
        let not_two = |id: u64| id != 2;
        assert_eq!(
            with_neighbours(&pool, &in_a_row, Some(&not_two), score, 0.5, 10),
            [1, 5, 4]
        );
        assert_eq!(
            with_neighbours(&pool, &in_a_row, None, score, 0.5, 2),
            [1, 2]
        );
    }

    #[test]
    fn a_reply_is_found_through_the_question_before_it() {
        let mut index: HybridIndex =
            HybridIndex::new(VectorIndex::new(VectorConfig::new(2)).unwrap());
        let unit = |angle: f32| [angle.cos(), angle.sin()];
        let documents = [
            (1, "Which pet did you adopt last spring?", unit(0.1)),
            (2, "A puppy, she is called Miso!", unit(1.0)),
            (3, "The fence still needs paint.", unit(1.4)),
            (4, "We should adopt a new paint colour.", unit(1.2)),
            (5, "Tomorrow then.", unit(1.3)),
        ];
        let documents: Vec<(u64, &str, &[f32])> = documents
            .iter()
            .map(|(id, text, vector)| (*id, *text, vector.as_slice()))
            .collect();
        index.add(&(), &documents).unwrap();
        let query_vector = unit(0.0);
        let search = |k: usize, neighbours: Option<Neighbours<'_>>| -> Vec<u64> {
            let query = HybridQuery {
                text: "adopt pet",
                vector: Some(&query_vector),
                k,
                filter: None,
                neighbours,
            };
            index
                .search(&(), query)
                .unwrap()
                .iter()
                .map(|hit| hit.id)
                .collect()
        };
        // Alone, the reply shares no word with the query: the other mention of adopting wins.
        assert_eq!(search(2, None), [1, 4]);
        // Read with the question before it, it comes second.
        assert_eq!(search(2, Some(&in_a_row)), [1, 2]);
        // Asking for more adds hits after the first ones, never before them.
        let all = search(5, Some(&in_a_row));
        assert_eq!(all[..2], search(2, Some(&in_a_row)));
        assert_eq!(all.len(), 5);
    }
}
