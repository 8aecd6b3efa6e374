//! The HNSW graph (hnsw_rs) over the slots of the vector arena, and the distance it
//! navigates by.
//!
//! hnsw_rs has no deletion and no update: a point, once inserted, stays in the graph until
//! the graph is dropped. [`crate::VectorIndex`] therefore treats the graph as disposable: it
//! filters dead slots out at search time and builds a new graph when it compacts.
//!
//! Every insertion runs on [`BUILDERS`], threads of background priority: building graphs is
//! the indexes' upkeep, and under load the CPU belongs to requests first. In a profile of
//! 64 clients appending over HTTP, graph insertion on rayon's global pool took a quarter of
//! the server's CPU samples at the requests' priority (2026-11-27, docs/benchmarks.md).

use std::sync::LazyLock;

use hnsw_rs::prelude::{Distance, FilterT, Hnsw};

use crate::dot::dot;

/// The upper bound hnsw_rs puts on layers (`NB_LAYER_MAX`); it caps larger values itself.
const MAX_LAYERS: usize = 16;

/// Below this many points a parallel insert costs more in rayon scheduling than it saves.
const PARALLEL_INSERT_MIN: usize = 64;

/// The threads graphs are built on, one per core, at background priority
/// ([`memlayer_embed::lower_thread_priority`]). hnsw_rs's parallel insertion runs on
/// whichever rayon pool calls it. `None` if the threads could not be started: graphs are then
/// built on the calling thread.
static BUILDERS: LazyLock<Option<rayon::ThreadPool>> = LazyLock::new(|| {
    rayon::ThreadPoolBuilder::new()
        .thread_name(|index| format!("index-graph-{index}"))
        .start_handler(|_| memlayer_embed::lower_thread_priority())
        .build()
        .map_err(|err| tracing::warn!(error = %err, "no graph builder threads; building inline"))
        .ok()
});

/// `1 - dot`, clamped at zero, on L2-normalised vectors.
///
/// Rejected alternatives, measured while planning (docs in the crate root): hnsw_rs's
/// `DistCosine` sums in f64 without SIMD and made builds 1.7× slower; its `DistDot` asserts
/// `1 - dot >= 0` and panics when a vector is compared with itself and f32 rounding makes
/// the dot product slightly larger than one. The clamp is what makes self-comparison safe.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DotDistance;

impl Distance<f32> for DotDistance {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        (1.0 - dot(a, b)).max(0.0)
    }
}

/// Construction and search parameters of a graph.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GraphParams {
    pub(crate) max_connections: usize,
    pub(crate) ef_construction: usize,
    pub(crate) ef_search: usize,
}

/// An HNSW graph whose data ids are slots of the arena that built it.
pub(crate) struct Graph {
    hnsw: Hnsw<'static, f32, DotDistance>,
    ef_search: usize,
}

impl Graph {
    /// An empty graph sized for about `capacity` points (a hint: it grows past it).
    pub(crate) fn new(params: GraphParams, capacity: usize) -> Self {
        let hnsw = Hnsw::new(
            params.max_connections,
            capacity.max(1),
            MAX_LAYERS,
            params.ef_construction,
            DotDistance,
        );
        Self {
            hnsw,
            ef_search: params.ef_search,
        }
    }

    /// Adds points (vector, slot) to the graph on [`BUILDERS`]; hnsw_rs copies the vectors.
    /// Takes `&self`: hnsw_rs locks inside, so searches go on while the graph grows.
    pub(crate) fn insert(&self, points: &[(&[f32], usize)]) {
        let insert = || {
            if points.len() >= PARALLEL_INSERT_MIN {
                self.hnsw.parallel_insert_slice(&points.to_vec());
            } else {
                for &point in points {
                    self.hnsw.insert_slice(point);
                }
            }
        };
        match &*BUILDERS {
            Some(builders) => builders.install(insert),
            None => insert(),
        }
    }

    /// The slots of (at most) the `k` points nearest to `query` that pass `filter`, nearest
    /// first. The filter runs during the traversal, so it can hide dead slots without
    /// starving the result.
    pub(crate) fn search(
        &self,
        query: &[f32],
        k: usize,
        filter: Option<&dyn Fn(usize) -> bool>,
    ) -> Vec<usize> {
        let adapter = filter.map(|f| move |slot: &usize| f(*slot));
        let filter_t = adapter.as_ref().map(|a| a as &dyn FilterT);
        self.hnsw
            .search_filter(query, k, self.ef_search, filter_t)
            .into_iter()
            .map(|neighbour| neighbour.d_id)
            .collect()
    }

    /// How many points the graph holds, dead ones included.
    pub(crate) fn len(&self) -> usize {
        self.hnsw.get_nb_point()
    }
}

#[cfg(test)]
mod tests {
    use super::BUILDERS;

    #[test]
    fn graphs_are_built_at_background_priority() {
        let nice =
            || rustix::process::getpriority_process(Some(rustix::thread::gettid())).expect("nice");
        let here = nice();
        let builders = BUILDERS.as_ref().expect("the builder threads start");
        let there = builders.install(nice);
        assert!(
            there > here || here == 19,
            "a builder at nice {there}, the caller at {here}"
        );
    }
}
