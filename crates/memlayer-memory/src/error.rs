//! The one error type of the memory crate.

/// What can go wrong while configuring or assembling context.
#[derive(Debug, thiserror::Error)]
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
    /// A request's setting would loosen a policy its tenant's or agent's saved settings set
    /// (turning off PII redaction): valid on its own, refused against what is saved.
    #[error("{field} conflicts with the saved settings: {reason}")]
    LoosensPolicy {
        /// The setting.
        field: &'static str,
        /// Why, and how to allow it.
        reason: String,
    },
    /// A field of a memory configuration document is invalid.
    #[error("invalid {field}: {reason}")]
    InvalidMemoryConfig {
        /// Its path in the document, e.g. `types[1].config.max_memories`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A memory configuration document names a memory type memlayer does not have.
    #[error(
        "unknown memory type {id:?} at {field}; expected working_memory, long_term or episodic"
    )]
    UnknownMemoryType {
        /// Its path in the document.
        field: String,
        /// The id given.
        id: String,
    },
    /// A summariser was given no messages.
    #[error("nothing to summarise")]
    NothingToSummarize,
    /// A summariser behind a model failed; the caller falls back to the extractive one.
    #[error("the summariser failed: {reason}")]
    Summarizer {
        /// Why, in general words a client may read (the model's own are the operator's).
        reason: String,
        /// The model client's error, when the call itself failed.
        #[source]
        source: Option<memlayer_llm::LlmError>,
    },
    /// Reading or writing the store failed.
    #[error(transparent)]
    Store(#[from] memlayer_store::StoreError),
    /// Recall failed.
    #[error(transparent)]
    Index(#[from] memlayer_index::IndexError),
    /// The embedding model failed.
    #[error("embedding failed: {0}")]
    Embedding(#[source] memlayer_embed::EmbedError),
    /// The embedding model answered a text with no vector.
    #[error("embedding failed: the model returned no vector")]
    NoVector,
}

impl MemoryError {
    /// The error for a log line: its message without the values clients chose or stored (a
    /// setting's value, a document's keys, ids; see [`memlayer_store::StoreError::for_log`]).
    pub fn for_log(&self) -> String {
        match self {
            Self::UnknownEncoding(_) => "unknown token encoding".to_owned(),
            Self::InvalidSetting { field, .. } => format!("invalid {field}"),
            Self::LoosensPolicy { field, .. } => format!("{field} conflicts with saved settings"),
            Self::InvalidMemoryConfig { .. } => "invalid memory configuration".to_owned(),
            Self::UnknownMemoryType { .. } => "unknown memory type".to_owned(),
            Self::Store(store) => store.for_log(),
            Self::Index(index) => index.for_log(),
            // A summariser's reason is written for clients, without the model's own words.
            Self::NothingToSummarize
            | Self::Summarizer { .. }
            | Self::Embedding(_)
            | Self::NoVector => self.to_string(),
        }
    }
}
