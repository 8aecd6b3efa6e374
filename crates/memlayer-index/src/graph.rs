//! The HNSW graph (hnsw_rs) over the slots of the vector arena, and the distance it
//! navigates by.
//!
//! hnsw_rs has no deletion and no update: a point, once inserted, stays in the graph until
//! the graph is dropped. [`crate::VectorIndex`] therefore treats the graph as disposable: it
//! filters dead slots out at search time and builds a new graph when it compacts.

use hnsw_rs::prelude::{Distance, FilterT, Hnsw};

use crate::dot::dot;

/// The upper bound hnsw_rs puts on layers (`NB_LAYER_MAX`); it caps larger values itself.
const MAX_LAYERS: usize = 16;

/// Below this many points a parallel insert costs more in rayon scheduling than it saves.
const PARALLEL_INSERT_MIN: usize = 64;

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

    /// Adds points (vector, slot) to the graph; hnsw_rs copies the vectors.
    pub(crate) fn insert(&self, points: &[(&[f32], usize)]) {
        if points.len() >= PARALLEL_INSERT_MIN {
            self.hnsw.parallel_insert_slice(&points.to_vec());
        } else {
            for &point in points {
                self.hnsw.insert_slice(point);
            }
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
