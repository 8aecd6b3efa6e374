//! The one error type of the index crate.

use std::io;

/// Everything that can go wrong in the indexes of this crate.
///
/// `DimensionMismatch`, `InvalidVector` and `InvalidConfig` are caller mistakes and leave the
/// index unchanged. `Corrupted` means a snapshot file cannot be trusted: the indexes are
/// derived data, so the caller discards the file and rebuilds from the store. `Io` is a
/// failure of the file system while saving or loading.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// A vector or query has another dimension than the index.
    #[error("vector has dimension {found}, the index expects {expected}")]
    DimensionMismatch {
        /// The dimension the index was configured with.
        expected: usize,
        /// The length of the slice that was passed.
        found: usize,
    },
    /// A vector or query is not finite or not L2-normalised.
    #[error("invalid vector: {0}")]
    InvalidVector(String),
    /// A configuration value is out of range.
    #[error("invalid index configuration: {field} {reason}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A snapshot file is truncated, damaged, of an unknown format or written for another
    /// configuration; rebuild the index from the store.
    #[error("corrupted snapshot: {0}")]
    Corrupted(String),
    /// Reading or writing a snapshot failed.
    #[error("snapshot I/O error: {0}")]
    Io(#[from] io::Error),
    /// The store's vectors were made by another embedding model than the one configured.
    #[error(
        "the store holds vectors of model {stored}, but the configured model is {configured}; \
         run `memlayer reindex` to embed every message again with the configured model"
    )]
    ModelMismatch {
        /// The model of the stored vectors.
        stored: String,
        /// The model the server was started with.
        configured: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] memlayer_store::StoreError),
    /// Embedding failed.
    #[error(transparent)]
    Embed(#[from] memlayer_embed::EmbedError),
    /// Other live nodes sharing the store have not applied this node's latest changes (an
    /// erasure's removals) within the wait: the caller leaves its work pending and retries.
    #[error("{nodes} other node(s) sharing the store have not applied the latest erasure yet")]
    FollowersBehind {
        /// How many live nodes were still behind.
        nodes: u64,
    },
    /// An embedding task of the indexing pipeline panicked or was cancelled.
    #[error("indexing pipeline: an embedding task failed: {0}")]
    Pipeline(#[source] tokio::task::JoinError),
}

impl IndexError {
    /// The error for a log line: its message without the values clients chose or stored
    /// (see [`memlayer_store::StoreError::for_log`]).
    pub fn for_log(&self) -> String {
        match self {
            Self::Store(store) => store.for_log(),
            Self::DimensionMismatch { .. }
            | Self::InvalidVector(_)
            | Self::InvalidConfig { .. }
            | Self::Corrupted(_)
            | Self::Io(_)
            | Self::ModelMismatch { .. }
            | Self::Embed(_)
            | Self::FollowersBehind { .. }
            | Self::Pipeline(_) => self.to_string(),
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = IndexError> = std::result::Result<T, E>;
