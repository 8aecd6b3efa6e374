//! Vector (exact scan and HNSW) and keyword (BM25) indexes over stored messages and
//! memories, and the reciprocal rank fusion that combines them for hybrid recall.
//!
//! The index structures are derived data keyed by `u64` ids that the caller maps to messages
//! or memories; they can always be rebuilt from the store. A [`HybridIndex`] holds the two
//! side by side and searches them together (3k candidates each, fused by reciprocal rank);
//! message recall and long-term memory both search through one, behind an [`IndexLock`].
//! [`Recall`] wires them to the store and the embedder: an indexing pipeline that drains the
//! store's outbox, and hybrid queries over a session or a user's sessions. The crate may depend on `memlayer-store` and
//! `memlayer-embed` only; strategies, erasure and HTTP build on it. Erasure reaches these
//! indexes through [`VectorIndex::remove`] + [`VectorIndex::compact`] and
//! [`KeywordIndex::remove`], after which the erased vector or text is held by neither
//! index (the compaction drops the graph with its copies) nor written to any later snapshot.
//!
//! Hybrid recall over two messages, with 3-dimensional vectors standing in for embeddings:
//!
//! ```
//! use memlayer_index::{
//!     KeywordIndex, RRF_K, Retriever, VectorConfig, VectorIndex, reciprocal_rank_fusion,
//! };
//!
//! let mut keyword = KeywordIndex::default();
//! let mut vector = VectorIndex::new(VectorConfig::new(3))?;
//! keyword.add(1, "I booked the flight to Lisbon, order ORD-2291.");
//! vector.insert(1, &[0.6, 0.8, 0.0])?;
//! keyword.add(2, "Remind me to water the plants.");
//! vector.insert(2, &[0.0, 0.6, 0.8])?;
//!
//! let ids = |hits: Vec<(u64, f32)>| hits.into_iter().map(|(id, _)| id).collect::<Vec<_>>();
//! let by_text = ids(keyword.search("booking ORD-2291", 10, None));
//! let by_meaning = ids(vector.search(&[0.0, 1.0, 0.0], 10, None)?);
//! let fused = reciprocal_rank_fusion(
//!     &[(Retriever::Keyword, &by_text), (Retriever::Vector, &by_meaning)],
//!     RRF_K,
//! );
//! assert_eq!(fused[0].id, 1);
//! assert_eq!(fused[0].rank(Retriever::Keyword), Some(1));
//! assert_eq!(fused[1].found_by().collect::<Vec<_>>(), [Retriever::Vector]);
//! # Ok::<(), memlayer_index::IndexError>(())
//! ```
//!
//! Decisions, with the measurements behind them (release builds, 2 cores):
//!
//! - **Exact scan up to 5,000 vectors, HNSW above** ([`VectorConfig::hnsw_threshold`]).
//!   With 384-d clustered *synthetic* vectors (`benches/`), k 10, ef_search 64, one query
//!   thread, on a 2-core machine shared with other builds (so ±30%): the exact scan took
//!   17 µs at 250 vectors, 130 µs at 2k, 250–290 µs at 4k, 530–720 µs at 8k and 640–920 µs
//!   at 10k; HNSW took 50–65, 185–330, 290–430, 400–600 and 460–715 µs, at recall@10 ≥
//!   0.99: a break-even between 4k and 8k. On *real* all-MiniLM-L6-v2 embeddings of chat
//!   text (`cargo xtask bench-index`, two runs on 2026-11-23 on the shared machine, see
//!   `docs/benchmarks.md`) HNSW wins earlier: the scan took 91, 172–200, 433–509 and
//!   717–856 µs at 1k, 2k, 5k and 8k, HNSW 114–152, 139–173, 330–455 and 482–616 µs at
//!   recall@10 ≥ 0.995, so the break-even lies between 1k and 2k. The threshold stays at
//!   5k all the same: at 5k the scan is only 1.1–1.3× slower, it is exact, and an index
//!   that never grows past it never pays for a graph (building one for 5k vectors took
//!   1.4–3.4 s on 2 threads, and it doubles the memory: hnsw_rs keeps its own copy of every
//!   vector). Queries far from every stored cluster are HNSW's weak spot (recall@10 fell to
//!   0.66 at 10k synthetic vectors for queries drawn from other clusters).
//! - **Own snapshot format, graph built after load, apart from the index.** hnsw_rs's
//!   `file_dump` reloads a graph far faster than rebuilding it (10k vectors: 0.12 s against
//!   7–11 s; planning measured 2.5 s against 150 s at 100k), but its files hold every point
//!   ever inserted, erased ones included, until the graph is rebuilt; its loader trusts the
//!   file (a damaged one can panic or allocate what it claims); and the loaded graph borrows
//!   its `HnswIo`. The snapshot therefore holds only the live vectors with a checksum. The
//!   graph is built after a load, and after every compaction (an erasure drops the graph,
//!   which holds copies of the erased vectors), by [`build_graph_unlocked`] beside the locked
//!   index while searches scan exactly: building it under the index lock, as before, held
//!   every search for ~150 s after a start or an erasure at 112,000 vectors. Persisting a
//!   graph dumped right after a compaction would shorten the unindexed time after a start.
//! - **Filters pick the path.** With a graph, a filter is first evaluated on a stride sample
//!   of 256 slots; if it probably passes no more than `hnsw_threshold` vectors the scan
//!   answers exactly. hnsw_rs's filtered search keeps expanding until `ef` points pass the
//!   filter, so under a selective filter it visits most of the graph, one random memory
//!   access at a time, where the scan streams through the arena.
//! - **Distance** `max(0, 1 - dot)`: see `graph.rs` for why not hnsw_rs's own distances.

#![deny(missing_docs)]

mod analyzer;
mod background;
mod dot;
mod error;
mod fusion;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod graph;
mod hybrid;
mod keyword;
mod lock;
mod recall;
mod snapshot;
mod topk;
mod vector;

pub use analyzer::Analyzer;
pub use background::run_graph_builder;
pub use error::{IndexError, Result};
pub use fusion::{Fused, RRF_K, Retriever, reciprocal_rank_fusion};
pub use hybrid::{HybridIndex, KeywordPostings};
pub use keyword::KeywordIndex;
pub use lock::IndexLock;
pub use recall::{
    Excluded, IndexCheck, Recall, RecallHit, RecallOptions, RecallQuery, Recalled, Scope,
};
pub use topk::IdFilter;
pub use vector::{GraphBuilt, VectorConfig, VectorIndex, build_graph_unlocked};
