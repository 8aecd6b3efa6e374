//! Durable storage of memlayer's domain records — tenants' sessions (conversations), their
//! messages (turns) and runs (agent executions), summaries, settings, API keys, long-term
//! memories, session memories, episodes, the embedding outbox and vectors, and the erasure
//! journal — in a single redb file.
//!
//! This crate owns the on-disk format (tables, key layout, versioned record encoding, see
//! docs/storage-format.md), the write path (a group-committing writer thread: a write is
//! acknowledged only after its transaction is durably committed) and consistent reads
//! (MVCC snapshots that never block writes). Its API is grouped into handles by concern
//! ([`Store::sessions`], [`Store::tenants`], [`Store::keys`], [`Store::memories`],
//! [`Store::feed`]); everything that removes text is behind the one [`Eraser`] of a store. It
//! must not depend on HTTP, embeddings, vector indexes or context strategies, nor on any other
//! memlayer crate.

#![deny(missing_docs)]

mod activity;
mod backend;
mod backup;
mod clean_close;
#[cfg(any(test, feature = "conformance"))]
#[doc(hidden)]
pub mod conformance;
mod data_keys;
mod embeddings;
mod episodes;
mod erasure;
mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod idle;
mod ids;
mod integrity;
mod keys;
mod memories;
mod migrate;
mod model;
mod readers;
mod record;
pub mod seal;
mod sealing;
mod session_memory;
mod sessions;
mod snapshot;
mod store;
mod tables;
mod tenants;
mod writer;

pub use backend::{
    Backend, BoxFuture, EraserBackend, FeedBackend, KeyBackend, MemoryBackend, SessionBackend,
    SessionView, TenantBackend,
};
pub use backup::Backup;
pub use episodes::{Episode, MAX_EPISODE_TEXT, MAX_LESSON_TEXT, Outcome};
pub use erasure::{ConversationStats, MessageErased, StoredJob};
pub use error::{DiskFault, Result, StoreError};
pub use integrity::TablesCheck;
pub use keys::{
    ApiKey, BOOTSTRAP_TENANT, Bootstrap, CONFIGURED_KEY_PREFIX, IssuedKey, KEY_SCHEME,
    KeyRejection, KeyRole, MAX_KEY_NAME_LEN, MIN_CONFIGURED_KEY_LEN, NewKey, OPERATOR_TENANT,
    fresh_key_material, generated_key_prefix, issued_key_text, key_digest, validate_configured_key,
    well_formed_key,
};
pub use memories::{
    Citation, MAX_MEMORY_HISTORY, Memory, MemoryKind, OrphanedCitation, ReplacedText,
};
pub use model::{
    Access, Append, Appended, EmbeddedAppend, EmbeddingModel, FollowedFeed, FollowerRecord,
    MAX_ID_LEN, MAX_MESSAGES_PER_APPEND, MAX_MESSAGES_PER_SESSION, MemoryChange, Message,
    MessageKey, Metadata, NewMessage, NewRun, NewSession, Page, PendingEmbedding, Removal, Role,
    Run, RunStatus, SearchQuery, Session, SessionFilter, SessionListing, SessionRef, SessionState,
    StoredSummary, StoredVector, Timestamp, metadata_to_text, validate_id, validate_optional_id,
    validate_text,
};
pub use session_memory::SessionMemory;
pub use sessions::SessionDeleted;
pub use snapshot::{MessageOutline, SessionSnapshot, SessionVersion};
pub use store::{
    CommitMode, DEFAULT_CACHE_BYTES, DiskSpace, EmbeddingFeed, Eraser, Keys, MAX_PAGE_SIZE,
    MAX_SEARCH_QUERY, MAX_SEARCH_WORDS, Memories, OpenCheck, Recovery, Sessions, Store,
    StoreOptions, Tenants, blocking,
};
pub use tables::{UNKNOWN_SOURCE, settings_scope};

#[cfg(test)]
mod faults;
#[cfg(test)]
mod tests;
