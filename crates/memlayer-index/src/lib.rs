//! Vector (exact scan and HNSW) and keyword (BM25) indexes over stored messages and
//! memories, and the reciprocal rank fusion that combines them for hybrid recall.
//!
//! The index structures are derived data keyed by `u64` ids that the caller maps to messages
//! or memories; they can always be rebuilt from the store. A [`HybridIndex`] holds the two
//! side by side and searches them together (a fixed pool of candidates each, fused by reciprocal rank);
//! message recall and long-term memory both search through one, behind an [`IndexLock`].
//! [`Recall`] wires them to the store and the embedder: an indexing pipeline that drains the
//! store's outbox, and hybrid queries over a session or a user's sessions. The crate may depend on `memlayer-store` and
//! `memlayer-embed` only; strategies, erasure and HTTP build on it. Erasure reaches these
//! indexes through [`VectorIndex::remove`] + [`VectorIndex::unlink_removed`] and
//! [`KeywordIndex::remove`], after which the erased vector or text is held by neither
//! index (the removal zeroes the vector's slot, the graph holds no vectors and lets go of
//! the slot) nor written to any later snapshot.
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
//! Decisions (the measurements behind them are in docs/benchmarks.md, "Index design
//! decisions"):
//!
//! - **Exact scan up to 5,000 vectors, HNSW above** ([`VectorConfig::hnsw_threshold`]): at
//!   5k the scan is only a little slower on real embeddings, it is exact, and an index that
//!   never grows past it never pays for a graph (time to build it, memory for its links).
//!   Queries far from every stored cluster are HNSW's weak spot.
//! - **Own HNSW graph, kept in the snapshot and through erasures** (`graph.rs`, issue 18).
//!   hnsw_rs, used before, copied every vector into its graph: twice the memory, erased
//!   vectors kept until a rebuild (so every erasure dropped the graph and searches scanned
//!   exactly for as long as a rebuild took), and a dump that held them too, with a loader
//!   that trusts the file. memlayer's graph holds neighbour lists over the arena's slots,
//!   grows under the index's read lock a chunk at a time ([`build_graph_unlocked`]) while
//!   searches scan what it does not cover yet, is repaired in place after an erasure, and is
//!   written to the checksummed snapshot beside the live vectors and checked link by link
//!   when loaded.
//! - **Filters pick the path.** With a graph, a filter is first evaluated on a stride sample
//!   of 256 slots; if it probably passes no more than `hnsw_threshold` vectors the scan
//!   answers exactly. A filtered graph search keeps expanding until `ef` points pass the
//!   filter, so under a selective filter it visits most of the graph, one random memory
//!   access at a time, where the scan streams through the arena.
//! - **Distance** `max(0, 1 - dot)` on L2-normalised vectors: a cosine distance without
//!   the norms, clamped because f32 rounding can put a vector's dot product with itself
//!   slightly above one.

#![deny(missing_docs)]

mod analyzer;
mod arena;
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
pub use fusion::{
    Fused, RRF_K, Retriever, reciprocal_rank_fusion, weighted_reciprocal_rank_fusion,
};
pub use hybrid::{CANDIDATES_PER_SIDE, HybridIndex, HybridQuery, KeywordPostings, Neighbours};
pub use keyword::KeywordIndex;
pub use lock::IndexLock;
pub use recall::{
    Excluded, IndexCheck, MAX_RECALL_HITS, Recall, RecallHit, RecallOptions, RecallQuery, Recalled,
    Scope, SnapshotLoad,
};
pub use topk::IdFilter;
pub use vector::{GraphBuilt, VectorConfig, VectorIndex, build_graph_unlocked};
