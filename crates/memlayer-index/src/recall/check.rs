//! The consistency check of the vector index against the store: what an operator runs after a
//! crash (`memlayer check`) and what the crash test asserts after every recovery.

use std::collections::HashSet;

use memlayer_store::MessageKey;

use super::Recall;
use crate::Result;

/// Two vectors of the same text are equally similar to a query: a tie with the vector itself
/// counts as finding it first. Scores are exact dot products of unit vectors, so the only
/// difference between a vector's score against itself and against its copy is rounding.
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
    /// Stored vectors that, asked of the index, are not their own best match.
    pub not_found_first: Vec<MessageKey>,
}

impl IndexCheck {
    /// The index holds exactly the stored vectors and each one finds itself first.
    pub fn is_consistent(&self) -> bool {
        self.missing.is_empty() && self.orphaned.is_empty() && self.not_found_first.is_empty()
    }
}

impl Recall {
    /// Compares the vector index, as loaded or as the pipeline left it, with the vectors in
    /// the store: the same set of ids, and every stored vector found first when the index
    /// is searched for it (through the graph when there is one, as queries are).
    ///
    /// Builds the graph first if the index needs one, as the server does after a start.
    /// Reads every stored vector and searches for each: it is meant for operators and tests,
    /// not for a request path.
    pub fn check_index(&self) -> Result<IndexCheck> {
        self.build_graph(|| false);
        let indexes = self.read();
        let mut check = IndexCheck {
            indexed: indexes.vectors.len(),
            ..IndexCheck::default()
        };
        let mut stored_ids = HashSet::new();
        let mut after = None;
        loop {
            let page = self.inner.store.vectors(after, 4_096)?;
            let Some(last) = page.last() else { break };
            after = Some(last.key);
            for stored in &page {
                let id = stored.key.as_u64();
                stored_ids.insert(id);
                if !indexes.vectors.contains(id) {
                    check.missing.push(stored.key);
                    continue;
                }
                let own_score = crate::dot::dot(&stored.components, &stored.components);
                let best = indexes.vectors.search(&stored.components, 1, None)?;
                let found = best.first().is_some_and(|&(best_id, score)| {
                    best_id == id || (score - own_score).abs() <= TIE
                });
                if !found {
                    check.not_found_first.push(stored.key);
                }
            }
        }
        check.stored = stored_ids.len();
        check.orphaned = indexes
            .vectors
            .ids()
            .filter(|id| !stored_ids.contains(id))
            .map(MessageKey::from_u64)
            .collect();
        Ok(check)
    }
}
