//! The one error type of the storage crate.

use std::sync::Arc;

/// Everything that can go wrong in [`crate::Store`].
///
/// The variants split into caller mistakes (`InvalidId`, `InvalidInput`, `SessionNotFound`,
/// `MessageNotFound`, `MemoryNotFound`, `Conflict`), which never change stored data, and storage failures (`Storage`, `Corrupted`,
/// `NewerFormat`, `Closed`, `WritesRefused`). Of the storage failures, those the disk caused
/// say so through [`StoreError::disk_fault`], so that a full disk can be told from a bug.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// An identifier (tenant, session, user, agent, flow, run, idempotency key) is malformed.
    #[error("invalid {kind}: {reason}")]
    InvalidId {
        /// Which identifier, e.g. `session_id`.
        kind: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A value other than an identifier is out of range or malformed.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The session does not exist in this tenant.
    #[error("session {session_id:?} not found")]
    SessionNotFound {
        /// The id that was looked up.
        session_id: String,
    },
    /// The session has no message at this index (never stored, or erased).
    #[error("the session has no message {index} (never stored, or erased)")]
    MessageNotFound {
        /// The index that was looked up.
        index: u64,
    },
    /// The user has no memory with this id (never remembered, forgotten, or another's).
    #[error("no memory {id} of this user (never remembered, or forgotten)")]
    MemoryNotFound {
        /// The id that was looked up.
        id: u64,
    },
    /// The session changed since it was read (a message was erased, or the session was
    /// deleted, perhaps created again under the same id): what was computed from the read is
    /// not saved. Reading again and recomputing succeeds.
    #[error("session {session_id:?} changed while it was being read")]
    SessionChanged {
        /// The session's id.
        session_id: String,
    },
    /// The memory changed since it was read (forgotten, or rewritten by an erasure): the
    /// update is not saved. Reading it again and redoing the update succeeds.
    #[error("memory {memory_id} changed while it was being updated")]
    MemoryChanged {
        /// The memory's id.
        memory_id: u64,
    },
    /// The request contradicts what is stored (existing id, other owner, reused key).
    #[error("{0}")]
    Conflict(String),
    /// The database file was written by a newer memlayer.
    #[error(
        "the data file uses storage format {found}, this memlayer reads up to {supported}; \
         upgrade memlayer to open it"
    )]
    NewerFormat {
        /// The format version found in the file or record.
        found: u32,
        /// The newest version this build understands.
        supported: u32,
    },
    /// A stored value could not be decoded: the file is damaged.
    #[error("corrupted {what}: {detail}")]
    Corrupted {
        /// Which kind of record.
        what: &'static str,
        /// Why it could not be decoded.
        detail: String,
    },
    /// The store file failed redb's integrity check when it was opened: it was truncated or
    /// altered outside memlayer. Nothing was read from it or written to it.
    #[error(
        "the store file {} is damaged ({detail}); memlayer will not serve from it. Restore \
         it from a backup, or move it away to start with an empty store",
        path.display()
    )]
    DamagedFile {
        /// The file that failed the check.
        path: std::path::PathBuf,
        /// What redb found.
        detail: String,
    },
    /// The key file beside the store file (the data keys sealed values open under) could
    /// not be read or written.
    #[error("key file {}: {source}", path.display())]
    KeyFile {
        /// The key file.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A sealed value's data key was destroyed: an erasure took what it sealed after this
    /// read's snapshot was taken.
    #[error("the data key in slot {slot} was destroyed")]
    KeyDestroyed {
        /// The key's slot in the key file.
        slot: u64,
    },
    /// A backup could not be written to its file.
    #[error("cannot write the backup: {0}")]
    Backup(Arc<std::io::Error>),
    /// redb reported an error (I/O, lock, space).
    #[error("storage error: {0}")]
    Storage(Arc<redb::Error>),
    /// The store was shut down; no more writes are accepted.
    #[error("the store is shut down")]
    Closed,
    /// The disk failed a write (`cause`) and redb refuses every write since, until the file is
    /// reopened ([`crate::Store::recover`]). This write was refused before it began: nothing
    /// of it is stored. Reads go on.
    #[error("the store refuses writes since a write failed: {cause}")]
    WritesRefused {
        /// The failure that made the store refuse writes.
        #[source]
        cause: Box<StoreError>,
    },
    /// A maintenance operation (compaction) could not run now; retrying later may succeed.
    #[error("the store is busy: {0}")]
    Busy(String),
    /// The operating system's random number generator failed (creating an API key).
    #[error("the operating system's random number generator failed: {0}")]
    Random(String),
    /// Work run on the blocking pool did not finish: it panicked, or the runtime is shutting
    /// down ([`crate::blocking`]).
    #[error("a blocking task did not finish: {source}")]
    Task {
        /// Why.
        #[source]
        source: Arc<tokio::task::JoinError>,
    },
    /// The backend serving the store failed ([`crate::backend`]): the database could not be
    /// reached, a statement failed, or a stored value does not decode there. Caller mistakes
    /// never take this form; a backend answers them with the redb store's variants.
    #[error("the store's backend failed: {source}")]
    Backend {
        /// The backend's own error.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// The operation belongs to the embedded file and a store served by a backend has no
    /// such thing (a file backup, disk space); says what to use instead.
    #[error("not available on a store served by a backend: {0}")]
    Unsupported(&'static str),
}

impl StoreError {
    /// The answer for a session `access` does not reach: missing, or another user's, which
    /// must look the same.
    pub fn session_not_found(session_id: &str) -> Self {
        Self::SessionNotFound {
            session_id: session_id.to_owned(),
        }
    }

    /// The answer for a session id in use, whoever's session holds it: a user-scoped caller
    /// learns that the id is taken and nothing else about the session.
    pub fn session_id_taken(session_id: &str) -> Self {
        Self::Conflict(format!(
            "session id {session_id:?} is taken; choose another, or let memlayer generate one"
        ))
    }

    /// The answer for a run id already used in the session.
    pub fn run_id_taken(run_id: &str, session_id: &str) -> Self {
        Self::Conflict(format!(
            "run {run_id:?} already exists in session {session_id:?}"
        ))
    }

    /// The answer for an idempotency key already used for a different request.
    pub fn idempotency_key_reused(key: &str) -> Self {
        Self::Conflict(format!(
            "idempotency key {key:?} was used for a different request"
        ))
    }

    /// The answer for an append that would take a session past
    /// [`MAX_MESSAGES_PER_SESSION`](crate::MAX_MESSAGES_PER_SESSION) messages.
    pub fn session_full(session_id: &str) -> Self {
        Self::InvalidInput {
            field: "messages",
            reason: format!(
                "session {session_id:?} would exceed {} messages",
                crate::MAX_MESSAGES_PER_SESSION
            ),
        }
    }

    /// The error for a log line: its message without the values clients chose or stored — the
    /// ids and field values caller mistakes quote, the content of a record that does not
    /// decode — which logs must never carry.
    pub fn for_log(&self) -> String {
        match self {
            Self::InvalidId { kind, .. } => format!("invalid {kind}"),
            Self::InvalidInput { field, .. } => format!("invalid {field}"),
            Self::SessionNotFound { .. } => "session not found".to_owned(),
            Self::MessageNotFound { .. } => "message not found".to_owned(),
            Self::MemoryNotFound { .. } => "memory not found".to_owned(),
            Self::SessionChanged { .. } => "the session changed while it was read".to_owned(),
            Self::MemoryChanged { .. } => "the memory changed while it was updated".to_owned(),
            Self::Conflict(_) => "conflict with the stored state".to_owned(),
            Self::Corrupted { what, .. } => format!("corrupted {what}"),
            Self::WritesRefused { cause } => format!(
                "the store refuses writes since a write failed: {}",
                cause.for_log()
            ),
            Self::NewerFormat { .. }
            | Self::DamagedFile { .. }
            | Self::KeyFile { .. }
            | Self::KeyDestroyed { .. }
            | Self::Backup(_)
            | Self::Storage(_)
            | Self::Closed
            | Self::Busy(_)
            | Self::Random(_)
            | Self::Task { .. }
            | Self::Unsupported(_) => self.to_string(),
            // A backend's message may quote a statement's values.
            Self::Backend { .. } => "the store's backend failed".to_owned(),
        }
    }

    /// Whether the disk caused this error, and how: a full disk is fixed by freeing space,
    /// any other I/O error by the device coming back. `None` for everything else (caller
    /// mistakes, damaged records, bugs).
    pub fn disk_fault(&self) -> Option<DiskFault> {
        match self {
            Self::WritesRefused { cause } => cause.disk_fault().or(Some(DiskFault::Failed)),
            Self::Storage(err) => match &**err {
                redb::Error::Io(io) => Some(DiskFault::of(io)),
                // An earlier write failed and redb keeps refusing: that one said why.
                redb::Error::PreviousIo => Some(DiskFault::Failed),
                _ => None,
            },
            Self::Backup(io) | Self::KeyFile { source: io, .. } => Some(DiskFault::of(io)),
            _ => None,
        }
    }

    /// True for errors that leave the current write transaction unusable.
    ///
    /// Caller mistakes are detected before a job writes anything, so they can share a
    /// transaction with other jobs; storage errors abort the whole group commit.
    pub(crate) fn aborts_transaction(&self) -> bool {
        matches!(
            self,
            Self::Storage(_)
                | Self::KeyFile { .. }
                | Self::Corrupted { .. }
                | Self::NewerFormat { .. }
                | Self::DamagedFile { .. }
        )
    }
}

/// How the disk under the store failed ([`StoreError::disk_fault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiskFault {
    /// No space left on the device, or the user's quota is used up: freeing space fixes it.
    Full,
    /// Any other I/O error: the device failed or went away.
    Failed,
}

impl DiskFault {
    fn of(io: &std::io::Error) -> Self {
        use std::io::ErrorKind;
        match io.kind() {
            ErrorKind::StorageFull | ErrorKind::QuotaExceeded => Self::Full,
            _ => Self::Failed,
        }
    }
}

macro_rules! from_redb {
    ($($ty:ty),* $(,)?) => {$(
        impl From<$ty> for StoreError {
            fn from(err: $ty) -> Self {
                Self::Storage(Arc::new(err.into()))
            }
        }
    )*};
}

from_redb!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::CompactionError,
);

/// Shorthand used throughout the crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
