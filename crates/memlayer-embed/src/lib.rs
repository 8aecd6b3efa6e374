//! Local text embeddings: turns message text into L2-normalised vectors with an ONNX
//! sentence-transformers model (all-MiniLM-L6-v2, int8 weights, 384 dimensions) run by ONNX
//! Runtime, with no network at build or run time.
//!
//! The ONNX Runtime library and the model are files on disk ([`Assets`]), installed by
//! `cargo xtask setup` or shipped in the release bundle. An [`Embedder`] runs the model on its
//! own worker threads, so async callers never block, one text per forward pass by default
//! (`EmbedderOptions::max_batch`), a request's texts ahead of the indexing pipeline's and on
//! threads of higher scheduling priority ([`Priority`]), and caches vectors by the text's hash within the
//! caller's namespace (its tenant). Every vector is tagged by the [`ModelIdentity`] that made it, so vectors of
//! different models are never mixed.
//!
//! It depends on no other memlayer crate: it knows texts and vectors, not where they are
//! stored, indexed or erased.

#![deny(missing_docs)]

mod assets;
mod cache;
mod embedder;
mod error;
mod model;
mod pool;
mod runtime;

pub use assets::Assets;
pub use cache::CacheStats;
pub use embedder::{Embedder, EmbedderOptions};
pub use error::EmbedError;
pub use model::ModelIdentity;
pub use pool::{Priority, QueueDepths, lower_thread_priority, yield_to_requests};

#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

#[cfg(test)]
mod tests;
