//! What the searches of both indexes share: the id filter they accept, and the selection of
//! the best `k` scored ids with a bounded binary heap.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// A filter over ids, evaluated for every candidate of a search; `true` keeps it.
pub type IdFilter<'a> = &'a dyn Fn(u64) -> bool;

/// A scored id ordered by score, then by *smaller* id: equal scores rank in id order, so
/// every search returns the same list for the same index whatever the scan order was.
#[derive(Debug, Clone, Copy)]
struct Scored {
    score: f32,
    id: u64,
}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.id.cmp(&self.id))
    }
}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Scored {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Scored {}

/// Keeps the `k` best of the scores pushed into it in O(n log k) time and O(k) memory.
#[derive(Debug)]
pub(crate) struct TopK {
    k: usize,
    // A min-heap (through `Reverse`) whose top is the worst kept candidate: a new score only
    // has to beat that one to get in.
    heap: BinaryHeap<Reverse<Scored>>,
}

impl TopK {
    pub(crate) fn new(k: usize) -> Self {
        // k comes from callers and may be huge ("everything"); the heap grows as needed.
        Self {
            k,
            heap: BinaryHeap::with_capacity(k.min(1024)),
        }
    }

    pub(crate) fn push(&mut self, id: u64, score: f32) {
        let candidate = Scored { score, id };
        if self.heap.len() < self.k {
            self.heap.push(Reverse(candidate));
        } else if let Some(mut worst) = self.heap.peek_mut()
            && candidate > worst.0
        {
            *worst = Reverse(candidate);
        }
    }

    /// The kept ids, best first.
    pub(crate) fn into_sorted(self) -> Vec<(u64, f32)> {
        // `Reverse` inverts the order, so ascending order of the heap is best first.
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse(s)| (s.id, s.score))
            .collect()
    }
}

/// Sorts hits best first with the same tie-break as [`TopK`].
pub(crate) fn sort_hits(hits: &mut [(u64, f32)]) {
    hits.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_best_k_best_first_with_ties_in_id_order() {
        let mut top = TopK::new(3);
        for (id, score) in [(1, 0.5), (2, 0.9), (3, 0.1), (4, 0.9), (5, 0.7), (6, 0.2)] {
            top.push(id, score);
        }
        assert_eq!(top.into_sorted(), vec![(2, 0.9), (4, 0.9), (5, 0.7)]);
    }

    #[test]
    fn k_zero_keeps_nothing() {
        let mut top = TopK::new(0);
        top.push(1, 1.0);
        assert!(top.into_sorted().is_empty());
    }

    #[test]
    fn sort_hits_agrees_with_top_k() {
        let mut hits = vec![(9, 0.3), (2, 0.3), (5, 0.8)];
        sort_hits(&mut hits);
        assert_eq!(hits, vec![(5, 0.8), (2, 0.3), (9, 0.3)]);
    }
}
