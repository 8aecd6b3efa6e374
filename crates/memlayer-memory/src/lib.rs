//! Context assembly: deciding, every turn, which part of a session's past goes back into the
//! prompt, inside a token budget. Today it owns token counting, which the write path uses to
//! store a count with every message; the strategies (windows, history depth, summaries,
//! entity memory, retrieval, the combined budget manager) arrive with the strategies issue.
//!
//! It may depend on `memlayer-store`, `memlayer-embed` and `memlayer-index`; it must not
//! depend on erasure, HTTP or the binary.

#![deny(missing_docs)]

mod error;
mod tokens;

pub use error::MemoryError;
pub use tokens::TokenEncoding;
