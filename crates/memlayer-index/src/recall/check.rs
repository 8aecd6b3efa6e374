//! The consistency check of the vector index against the store: what an operator runs after a
//! crash (`memlayer check`) and what the crash test asserts after every recovery.

use std::collections::HashSet;

use memlayer_store::MessageKey;

use super::Recall;
use crate::Result;

/// How many of a stored vector's nearest neighbours, asked of the index, must include it.
/// Not one: the graph search is approximate, and in a dense cluster a vector's own search
/// can rank a near neighbour first (at 112,000 seeded vectors 15% were not their own first
/// hit, and none missing or orphaned). A vector the graph cannot reach at all is not among
/// its first ten either.
const WITHIN: usize = 10;
/// Two vectors of the same text are equally similar to a query: a hit that ties with the
/// vector itself counts as finding it. Both scores are the index's own (the stored vector
/// against its quantized copy and against the copy's twin), so equal vectors score equally;
/// the margin only absorbs summation order.
const TIE: f32 = 1e-5;

/// What [`Recall::check_index`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IndexCheck {
    /// Vectors in the store.
    pub stored: usize,
    /// Vectors in the in-memory index.
    pub indexed: usize,
    /// Stored vectors the index lacks.
    pub missing: Vec<MessageKey>,
    /// Index entries with no stored vector behind them (an erased message, say).
    pub orphaned: Vec<MessageKey>,
    /// Stored vectors that, asked of the index, are not among their own ten nearest
    /// neighbours (nor tie with one): the index cannot find them.
    pub unreachable: Vec<MessageKey>,
}

impl IndexCheck {
    /// The index holds exactly the stored vectors and each one finds itself.
    pub fn is_consistent(&self) -> bool {
        self.missing.is_empty() && self.orphaned.is_empty() && self.unreachable.is_empty()
    }
}

impl Recall {
    /// Compares the vector index, as loaded or as the pipeline left it, with the vectors in
    /// the store: the same set of ids, and every stored vector among the ten nearest when the
    /// index is searched for it (through the graph when there is one, as queries are).
    ///
    /// Builds the graph first if the index needs one, as the server does after a start.
    /// Reads every stored vector and searches for each: it is meant for operators and tests,
    /// not for a request path.
    pub fn check_index(&self) -> Result<IndexCheck> {
        self.build_graph(|| false);
        let indexes = self.read();
        let mut check = IndexCheck {
            indexed: indexes.hybrid.vectors().len(),
            ..IndexCheck::default()
        };
        let mut stored_ids = HashSet::new();
        let mut after = None;
        loop {
            let page = self.inner.store.feed().vectors(after, 4_096)?;
            let Some(last) = page.last() else { break };
            after = Some(last.key);
            for stored in &page {
                let id = stored.key.as_u64();
                stored_ids.insert(id);
                if !indexes.hybrid.vectors().contains(id) {
                    check.missing.push(stored.key);
                    continue;
                }
                let vectors = indexes.hybrid.vectors();
                let own_score = vectors
                    .similarity(id, &stored.components)
                    .unwrap_or(f32::NAN);
                let nearest = vectors.search(&stored.components, WITHIN, None)?;
                let found = nearest
                    .iter()
                    .any(|&(hit, score)| hit == id || (score - own_score).abs() <= TIE);
                if !found {
                    check.unreachable.push(stored.key);
                }
            }
        }
        check.stored = stored_ids.len();
        check.orphaned = indexes
            .hybrid
            .vectors()
            .ids()
            .filter(|id| !stored_ids.contains(id))
            .map(MessageKey::from_u64)
            .collect();
        Ok(check)
    }
}
