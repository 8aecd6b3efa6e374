//! The one error type of the erasure crate.

use memlayer_index::IndexError;
use memlayer_store::StoreError;

/// What can go wrong while erasing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErasureError {
    /// The request is invalid (the message named, the days given).
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// Which part of the request.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The store failed; the job stays pending and resumes.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The indexes failed; the job stays pending and resumes.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// Long-term memory failed; the job stays pending and resumes.
    #[error(transparent)]
    Memory(#[from] memlayer_memory::MemoryError),
    /// A stored job could not be read back.
    #[error("unreadable erasure job {id}: {reason}")]
    UnreadableJob {
        /// Its id.
        id: u64,
        /// Why.
        reason: String,
    },
    /// A task erasing part of the job panicked or was cancelled.
    #[error("a background task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// A job or its receipt could not be encoded for the store.
    #[error("could not encode an erasure record: {0}")]
    Encode(#[source] serde_json::Error),
    /// The job was recorded, then a step failed (`source`): it stays pending, and the
    /// maintenance pass or the next start finishes it (at once when the store takes writes
    /// again after a disk fault). Its status is `Running` until then.
    #[error("erasure {id} is recorded and not finished yet: {source}")]
    Pending {
        /// The job's id, which its receipt will carry.
        id: u64,
        /// Why it did not finish now.
        #[source]
        source: Box<ErasureError>,
    },
}

impl ErasureError {
    /// The error for a log line: its message without the values clients chose or stored (see
    /// [`memlayer_store::StoreError::for_log`]); an unreadable job's reason may quote the ids
    /// the job names.
    pub fn for_log(&self) -> String {
        match self {
            Self::Invalid { field, .. } => format!("invalid {field}"),
            Self::Store(store) => store.for_log(),
            Self::Index(index) => index.for_log(),
            Self::Memory(memory) => memory.for_log(),
            Self::UnreadableJob { id, .. } => format!("unreadable erasure job {id}"),
            Self::Task(_) | Self::Encode(_) => self.to_string(),
            Self::Pending { id, source } => {
                format!(
                    "erasure {id} is recorded and not finished yet: {}",
                    source.for_log()
                )
            }
        }
    }
}
