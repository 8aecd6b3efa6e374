//! memlayer's records in PostgreSQL, for operators who run memlayer on a database server
//! instead of its embedded redb file: the schema and its migrations, sessions and their
//! messages, runs and summaries, listings, search and idle sessions, content sealed under
//! per-session data keys (so that erasure can be crypto-shredding, see `seal`), the
//! change feed that derived data follows, and the embedding pipeline's side of it (queued
//! appends, sealed vectors, look-ups by surrogate key), tenants' settings (sealed under a
//! per-tenant key) and retention rules, API keys (only their SHA-256), memories, session
//! memories and episodes, and the erasure jobs' journal. `PgStore` serves a whole
//! `memlayer_store::Store` through its backend boundary (`Store::served_by`).
//!
//! It must not depend on HTTP, embeddings or indexes. Of memlayer's crates it uses only
//! `memlayer-store`, whose domain types (`Access`, `NewSession`, `Session`, `Append`,
//! `Appended`, `NewMessage`, `Message`, `NewRun`, `Run`, `StoredSummary`, `SessionVersion`,
//! `SessionFilter`, `Page`, `Timestamp`) and validation it reuses, and whose `StoreError` it
//! answers caller mistakes with, so that the two backends cannot drift apart in what they
//! accept or how they refuse it.

#![deny(missing_docs)]

mod backend;
mod backend_erasure;
mod backend_feed;
mod backend_memories;
mod backend_tenants;
mod embeddings;
mod episodes;
mod erasure;
mod error;
mod feed;
mod followers;
mod idle;
mod jobs;
mod keys;
mod memories;
mod migrate;
mod rekey;
mod runs;
mod seal;
mod session_memory;
mod sessions;
mod snapshot;
mod store;
mod summaries;
mod tenants;
#[cfg(any(test, feature = "test-cluster"))]
pub mod test_cluster;

pub use erasure::{Reclaimed, ServerSettings};
pub use error::{PostgresError, Result};
pub use feed::{Change, FeedCursor, FeedPage};
pub use migrate::SCHEMA_VERSION;
pub use snapshot::PgSnapshot;
pub use store::{DEFAULT_POOL_SIZE, POOL_WAIT, PgStore};

#[cfg(test)]
mod tests;
