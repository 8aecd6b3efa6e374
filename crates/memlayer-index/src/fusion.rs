//! Reciprocal rank fusion: one ranking out of the keyword and vector rankings.

use std::collections::{HashMap, HashSet};

/// The constant `k` of reciprocal rank fusion in Cormack, Clarke and Büttcher (SIGIR 2009),
/// which most hybrid search engines use as their default.
pub const RRF_K: u32 = 60;

/// A retriever whose ranking takes part in a fusion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Retriever {
    /// BM25 over the text ([`crate::KeywordIndex`]).
    Keyword,
    /// Embedding similarity ([`crate::VectorIndex`]).
    Vector,
}

impl Retriever {
    const ALL: [Retriever; 2] = [Retriever::Keyword, Retriever::Vector];

    fn index(self) -> usize {
        match self {
            Retriever::Keyword => 0,
            Retriever::Vector => 1,
        }
    }
}

/// One id of a fused ranking.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused {
    /// The id the rankings agree on.
    pub id: u64,
    /// The sum over the rankings that contain the id of `1 / (k + rank)`.
    pub score: f32,
    /// The 1-based rank in each retriever's ranking, if it found the id.
    ranks: [Option<u32>; 2],
}

impl Fused {
    /// The 1-based rank `retriever` gave the id, if it found it.
    pub fn rank(&self, retriever: Retriever) -> Option<u32> {
        self.ranks[retriever.index()]
    }

    /// The retrievers that found the id.
    pub fn found_by(&self) -> impl Iterator<Item = Retriever> + '_ {
        Retriever::ALL
            .into_iter()
            .filter(|r| self.rank(*r).is_some())
    }
}

/// Fuses rankings (ids, best first) by reciprocal rank: each id scores `1 / (k + rank)` in
/// every ranking that contains it, ranks starting at 1, and the sums are sorted best first,
/// equal scores in id order.
///
/// Only ranks count, never the retrievers' scores, which are on incomparable scales (BM25 is
/// unbounded, cosine lies in [-1, 1]). An id repeated within one ranking counts at its best
/// rank. If two rankings come from the same retriever, both count and the better rank is
/// reported.
pub fn reciprocal_rank_fusion(rankings: &[(Retriever, &[u64])], k: u32) -> Vec<Fused> {
    let weighted: Vec<(Retriever, f64, &[u64])> = rankings
        .iter()
        .map(|&(retriever, ranking)| (retriever, 1.0, ranking))
        .collect();
    weighted_reciprocal_rank_fusion(&weighted, k)
}

/// [`reciprocal_rank_fusion`] with a weight per ranking: an id scores
/// `weight / (k + rank)` in each, so a stronger retriever's ranks count for more.
pub fn weighted_reciprocal_rank_fusion(
    rankings: &[(Retriever, f64, &[u64])],
    k: u32,
) -> Vec<Fused> {
    // Scores are summed in f64 and rounded once, so the order of the rankings cannot change
    // a tie into an inequality.
    let mut sums: HashMap<u64, (f64, [Option<u32>; 2])> = HashMap::new();
    for &(retriever, weight, ranking) in rankings {
        let mut seen = HashSet::with_capacity(ranking.len());
        for (position, &id) in ranking.iter().enumerate() {
            if !seen.insert(id) {
                continue;
            }
            let rank = u32::try_from(position + 1).unwrap_or(u32::MAX);
            let (score, ranks) = sums.entry(id).or_default();
            *score += weight / (f64::from(k) + f64::from(rank));
            let best = &mut ranks[retriever.index()];
            *best = Some(best.map_or(rank, |r| r.min(rank)));
        }
    }
    let mut fused: Vec<Fused> = sums
        .into_iter()
        .map(|(id, (score, ranks))| Fused {
            id,
            score: score as f32,
            ranks,
        })
        .collect();
    fused.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f64) -> bool {
        (f64::from(a) - b).abs() < 1e-7
    }

    #[test]
    fn sums_reciprocal_ranks_and_records_who_found_what() {
        let keyword: &[u64] = &[7, 3, 9];
        let vector: &[u64] = &[3, 5];
        let fused = reciprocal_rank_fusion(
            &[(Retriever::Keyword, keyword), (Retriever::Vector, vector)],
            RRF_K,
        );
        let ids: Vec<u64> = fused.iter().map(|f| f.id).collect();
        // 3: 1/62 + 1/61 = 0.032522; 7: 1/61 = 0.016393; 5: 1/62 = 0.016129; 9: 1/63.
        assert_eq!(ids, vec![3, 7, 5, 9]);
        assert!(close(fused[0].score, 1.0 / 62.0 + 1.0 / 61.0));
        assert!(close(fused[1].score, 1.0 / 61.0));
        assert!(close(fused[2].score, 1.0 / 62.0));
        assert!(close(fused[3].score, 1.0 / 63.0));
        assert_eq!(fused[0].rank(Retriever::Keyword), Some(2));
        assert_eq!(fused[0].rank(Retriever::Vector), Some(1));
        assert_eq!(
            fused[0].found_by().collect::<Vec<_>>(),
            vec![Retriever::Keyword, Retriever::Vector]
        );
        assert_eq!(fused[2].rank(Retriever::Keyword), None);
        assert_eq!(
            fused[2].found_by().collect::<Vec<_>>(),
            vec![Retriever::Vector]
        );
    }

    #[test]
    fn equal_scores_are_ordered_by_id_and_k_is_honoured() {
        let keyword: &[u64] = &[8, 2];
        let vector: &[u64] = &[2, 8];
        let fused = reciprocal_rank_fusion(
            &[(Retriever::Keyword, keyword), (Retriever::Vector, vector)],
            1,
        );
        // Both: 1/(1+1) + 1/(1+2) = 0.8333.
        assert_eq!(fused.iter().map(|f| f.id).collect::<Vec<_>>(), vec![2, 8]);
        assert!(close(fused[0].score, 0.5 + 1.0 / 3.0));
        assert_eq!(fused[0].score, fused[1].score);
    }

    #[test]
    fn weights_scale_each_rankings_share() {
        let keyword: &[u64] = &[1, 2];
        let vector: &[u64] = &[2, 1];
        let fused = weighted_reciprocal_rank_fusion(
            &[
                (Retriever::Keyword, 1.0, keyword),
                (Retriever::Vector, 0.5, vector),
            ],
            10,
        );
        // 1: 1/11 + 0.5/12 = 0.13258; 2: 1/12 + 0.5/11 = 0.12879.
        assert_eq!(fused.iter().map(|f| f.id).collect::<Vec<_>>(), vec![1, 2]);
        assert!(close(fused[0].score, 1.0 / 11.0 + 0.5 / 12.0));
        assert!(close(fused[1].score, 1.0 / 12.0 + 0.5 / 11.0));
    }

    #[test]
    fn a_repeated_id_counts_once_at_its_best_rank() {
        let keyword: &[u64] = &[4, 4, 1];
        let fused = reciprocal_rank_fusion(&[(Retriever::Keyword, keyword)], RRF_K);
        assert_eq!(fused.len(), 2);
        assert_eq!(fused[0].id, 4);
        assert!(close(fused[0].score, 1.0 / 61.0));
        // 1 keeps its position-based rank 3: the duplicate still occupied rank 2.
        assert_eq!(fused[1].rank(Retriever::Keyword), Some(3));
    }

    #[test]
    fn two_rankings_of_one_retriever_both_count() {
        let first: &[u64] = &[1];
        let second: &[u64] = &[9, 1];
        let fused = reciprocal_rank_fusion(
            &[(Retriever::Vector, first), (Retriever::Vector, second)],
            RRF_K,
        );
        assert_eq!(fused[0].id, 1);
        assert!(close(fused[0].score, 1.0 / 61.0 + 1.0 / 62.0));
        assert_eq!(fused[0].rank(Retriever::Vector), Some(1));
    }

    #[test]
    fn no_rankings_fuse_to_nothing() {
        assert!(reciprocal_rank_fusion(&[], RRF_K).is_empty());
    }
}
