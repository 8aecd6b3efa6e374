//! The hybrid index: a [`VectorIndex`] beside keyword postings, searched together and fused
//! by reciprocal rank. Message recall ([`crate::Recall`]) holds one whose keyword side is
//! partitioned per tenant and user; long-term memory (`memlayer-memory`) holds one per tenant
//! and user, with a plain [`KeywordIndex`]. The fusion, how many candidates each side
//! proposes, and the graph-building hook exist here once.

use crate::{
    Fused, GraphBuilt, IdFilter, IndexLock, KeywordIndex, RRF_K, Result, Retriever, VectorIndex,
    build_graph_unlocked, reciprocal_rank_fusion,
};

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
/// keeps a copy of the vector.
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
    /// either held it. The vector's slot is zeroed at once; call [`Self::compact`] after the
    /// removals of an erasure.
    pub fn remove(&mut self, partition: &K::Partition, id: u64) -> bool {
        let text = self.keywords.remove(partition, id);
        self.vectors.remove(id) || text
    }

    /// Compacts the vector side (see [`VectorIndex::compact`]): the graph, which holds
    /// copies of removed vectors, goes with it.
    pub fn compact(&mut self) {
        self.vectors.compact();
    }

    /// Whether the vector side waits for its graph (see [`VectorIndex::needs_graph`]).
    pub fn needs_graph(&self) -> bool {
        self.vectors.needs_graph()
    }

    /// The (at most) `k` best documents for `text` and, when given, `vector`, among those
    /// that pass `filter`, best first: each side proposes `3k` (at least 10) candidates of
    /// `partition`, and the two rankings are fused by reciprocal rank ([`RRF_K`]). Each hit
    /// says at which rank each side found it ([`Fused::rank`]).
    pub fn search(
        &self,
        partition: &K::Partition,
        text: &str,
        vector: Option<&[f32]>,
        k: usize,
        filter: Option<IdFilter<'_>>,
    ) -> Result<Vec<Fused>> {
        // Each retriever proposes more than k so fusion can promote what both agree on.
        let candidates = k.saturating_mul(3).max(10);
        let ids = |hits: Vec<(u64, f32)>| hits.into_iter().map(|(id, _)| id).collect::<Vec<_>>();
        let by_keyword = ids(self.keywords.search(partition, text, candidates, filter));
        let by_vector = match vector {
            Some(vector) => ids(self.vectors.search(vector, candidates, filter)?),
            None => Vec::new(),
        };
        let mut fused = reciprocal_rank_fusion(
            &[
                (Retriever::Keyword, &by_keyword),
                (Retriever::Vector, &by_vector),
            ],
            RRF_K,
        );
        fused.truncate(k);
        Ok(fused)
    }

    /// Builds the graph of the hybrid index that `index` finds in `lock`'s value without
    /// holding the lock while it grows (see [`build_graph_unlocked`]); `index_mut` must find
    /// the same one. Searches scan exactly until the graph is installed.
    pub fn build_graph_unlocked<T>(
        lock: &IndexLock<T>,
        index: impl Fn(&T) -> Option<&Self>,
        index_mut: impl FnOnce(&mut T) -> Option<&mut Self>,
        cancelled: impl Fn() -> bool,
    ) -> GraphBuilt
    where
        K: 'static,
    {
        build_graph_unlocked(
            lock,
            |value| index(value).map(|hybrid| &hybrid.vectors),
            |value| index_mut(value).map(|hybrid| &mut hybrid.vectors),
            cancelled,
        )
    }
}
