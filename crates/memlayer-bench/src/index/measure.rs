//! Timing a search over every query, on one thread and split over two, and comparing its
//! answers with the exact ones.
//!
//! Each pass runs `ROUNDS` times and the fastest counts, as in `embed`: on a shared
//! machine the fastest round is the one least disturbed by other work. Latency percentiles
//! come from the single-thread pass of that round.

use std::collections::HashSet;
use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::anyhow;

use crate::report::percentile;

pub(crate) const ROUNDS: usize = 3;
/// Threads of the parallel pass: the machine's two cores, which a server's concurrent
/// recalls would share.
pub(crate) const THREADS: usize = 2;

/// A search answer: `(id, score)`, best first.
pub(crate) type Hits = Vec<(u64, f32)>;

/// What timing one search over every query found.
pub(crate) struct Timing {
    /// The answers, query by query.
    pub(crate) hits: Vec<Hits>,
    /// Wall time of the fastest pass over every query on one thread.
    pub(crate) one_thread: Duration,
    /// Wall time of the fastest pass with the queries split over `THREADS` threads.
    pub(crate) threads: Duration,
    /// Each query's latency in the fastest single-thread pass, sorted.
    pub(crate) latencies: Vec<Duration>,
}

impl Timing {
    pub(crate) fn queries_per_second(&self, elapsed: Duration) -> f64 {
        self.hits.len() as f64 / elapsed.as_secs_f64()
    }

    /// The `p`th percentile latency in microseconds.
    pub(crate) fn latency_us(&self, p: f64) -> f64 {
        percentile(&self.latencies, p).map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
    }
}

/// Runs `search` over every query: the answers, then `ROUNDS` rounds of a timed pass on one
/// thread and one on `THREADS`.
pub(crate) fn time<S>(queries: &[&[f32]], search: S) -> anyhow::Result<Timing>
where
    S: Fn(&[f32]) -> memlayer_index::Result<Hits> + Sync,
{
    let mut timing = Timing {
        hits: Vec::with_capacity(queries.len()),
        one_thread: Duration::MAX,
        threads: Duration::MAX,
        latencies: Vec::new(),
    };
    for query in queries {
        timing.hits.push(search(query)?);
    }
    for _ in 0..ROUNDS {
        let mut latencies = Vec::with_capacity(queries.len());
        let start = Instant::now();
        for query in queries {
            let began = Instant::now();
            black_box(search(query)?);
            latencies.push(began.elapsed());
        }
        let elapsed = start.elapsed();
        if elapsed < timing.one_thread {
            timing.one_thread = elapsed;
            latencies.sort_unstable();
            timing.latencies = latencies;
        }

        let share = queries.len().div_ceil(THREADS);
        let start = Instant::now();
        std::thread::scope(|scope| {
            let workers: Vec<_> = queries
                .chunks(share)
                .map(|part| {
                    scope.spawn(|| {
                        part.iter()
                            .try_for_each(|query| search(query).map(|hits| drop(black_box(hits))))
                    })
                })
                .collect();
            workers.into_iter().try_for_each(|worker| {
                worker
                    .join()
                    .map_err(|_| anyhow!("a search thread panicked"))?
                    .map_err(anyhow::Error::from)
            })
        })?;
        timing.threads = timing.threads.min(start.elapsed());
    }
    Ok(timing)
}

/// Recall@k of `found` against the exact answers `truth`, mean over queries: the share of
/// each exact top-k that was found.
pub(crate) fn recall(truth: &[Hits], found: &[Hits]) -> f64 {
    let per_query = truth.iter().zip(found).map(|(truth, found)| {
        let found: HashSet<u64> = found.iter().map(|&(id, _)| id).collect();
        let hit = truth.iter().filter(|(id, _)| found.contains(id)).count();
        hit as f64 / truth.len().max(1) as f64
    });
    per_query.sum::<f64>() / truth.len().max(1) as f64
}

/// Like [`recall`], but a found hit scoring at least the exact k-th score counts too (as
/// ann-benchmarks counts by distance): duplicate texts have identical vectors, and which of
/// two tied duplicates makes the top k is arbitrary. Both sides must be scored alike (the
/// index's searches both score the stored vectors; against the f32 vectors, found ids are
/// scored again in f32), so ties are exact.
pub(crate) fn recall_with_ties(truth: &[Hits], found: &[Hits]) -> f64 {
    let per_query = truth.iter().zip(found).map(|(truth, found)| {
        let Some(&(_, kth)) = truth.last() else {
            return 1.0;
        };
        let hit = found.iter().filter(|&&(_, score)| score >= kth).count();
        hit.min(truth.len()) as f64 / truth.len() as f64
    });
    per_query.sum::<f64>() / truth.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_is_the_mean_share_of_exact_hits_found() {
        let truth = vec![vec![(1, 0.9), (2, 0.8)], vec![(3, 0.9), (4, 0.8)]];
        let found = vec![vec![(2, 0.8), (1, 0.9)], vec![(3, 0.9), (5, 0.7)]];
        assert!((recall(&truth, &found) - 0.75).abs() < 1e-12);
    }

    #[test]
    fn recall_with_ties_accepts_an_equally_scored_stand_in() {
        let truth = vec![vec![(1, 0.9), (2, 0.8)]];
        let found = vec![vec![(1, 0.9), (7, 0.8)]];
        assert!((recall(&truth, &found) - 0.5).abs() < 1e-12);
        assert!((recall_with_ties(&truth, &found) - 1.0).abs() < 1e-12);
        let worse = vec![vec![(1, 0.9), (8, 0.7)]];
        assert!((recall_with_ties(&truth, &worse) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn times_every_query_on_both_passes() {
        let queries: Vec<&[f32]> = vec![&[1.0], &[0.5], &[0.25]];
        let timing = time(&queries, |query| Ok(vec![(0, query[0])])).unwrap();
        assert_eq!(
            timing.hits,
            [vec![(0, 1.0)], vec![(0, 0.5)], vec![(0, 0.25)]]
        );
        assert_eq!(timing.latencies.len(), 3);
        assert!(timing.one_thread < Duration::MAX && timing.threads < Duration::MAX);
    }
}
