//! The one error type of the memory crate.

/// What can go wrong while configuring or assembling context.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// A token encoding name that memlayer does not know.
    #[error("unknown token encoding {0:?} (expected cl100k_base or o200k_base)")]
    UnknownEncoding(String),
    /// A context setting is out of range.
    #[error("invalid {field}: {reason}")]
    InvalidSetting {
        /// The setting.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}
