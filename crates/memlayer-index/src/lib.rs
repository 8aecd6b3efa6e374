//! Vector (HNSW and exact) and keyword (BM25) indexes over stored messages and memories, and
//! the hybrid recall that fuses them.
//!
//! Empty until the embeddings issue fills it. It may depend on `memlayer-store` and
//! `memlayer-embed`; the indexes are derived data that can always be rebuilt from the store.
//! It must not depend on context strategies, erasure or HTTP.

#![deny(missing_docs)]
