//! The one error type of the PostgreSQL backend.

use memlayer_store::StoreError;

/// Everything that can go wrong in [`crate::PgStore`].
///
/// Caller mistakes (invalid ids and input, an unknown or another user's session, a taken id,
/// a reused idempotency key) are [`PostgresError::Store`] carrying the very
/// [`StoreError`] the redb store answers with, so that a caller — and later the server's one
/// error mapping — cannot tell the backends apart by their answers. The other variants are
/// failures of the database, the pool or the stored data.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The request was refused as the redb store refuses it; nothing was written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The database URL does not parse.
    #[error("invalid database URL: {source}")]
    Url {
        /// What the driver found wrong with it.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The connection pool could not be built.
    #[error("cannot build the connection pool: {source}")]
    BuildPool {
        /// Why.
        #[source]
        source: deadpool_postgres::BuildError,
    },
    /// No connection could be taken from the pool (connecting failed, or it timed out).
    #[error("no database connection: {source}")]
    Pool {
        /// Why.
        #[source]
        source: deadpool_postgres::PoolError,
    },
    /// A statement failed: connection lost, server error, a constraint.
    #[error("PostgreSQL failed: {source}")]
    Database {
        /// The driver's error, with the server's SQLSTATE when the server answered.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The database was migrated by a newer memlayer. Nothing was changed.
    #[error(
        "the database has schema version {found}, this memlayer knows up to {supported}; \
         upgrade memlayer to open it"
    )]
    NewerSchema {
        /// The newest version recorded in `schema_migrations`.
        found: i64,
        /// The newest version this build has migrations for.
        supported: i64,
    },
    /// A stored value does not decode or does not open under its session's key: the data was
    /// damaged or altered outside memlayer (a sealed value moved to another row fails here).
    #[error("corrupted {what}: {detail}")]
    Corrupted {
        /// Which kind of value.
        what: &'static str,
        /// Why it is refused.
        detail: String,
    },
    /// The operating system's random number generator failed (a new id).
    #[error("the operating system's random number generator failed: {source}")]
    Random {
        /// Why.
        #[source]
        source: getrandom::Error,
    },
    /// Concurrent appends to one session kept moving its next index for longer than an
    /// append retries; retrying later succeeds.
    #[error("session {session_id:?} is too busy: concurrent appends kept moving its next index")]
    Contention {
        /// The session.
        session_id: String,
    },
    /// A reclaim was refused: the server keeps copies of WAL or data that it cannot remove,
    /// so it could not promise that destroyed keys are in no file. Nothing was rewritten.
    #[error(
        "cannot reclaim destroyed keys: the server has {setting} = {found}, erasure needs \
         {required}"
    )]
    ErasureUnsafe {
        /// The setting (or the system view) that breaks the promise.
        setting: &'static str,
        /// Its value.
        found: String,
        /// What erasure needs instead.
        required: &'static str,
    },
    /// A reclaim was refused because transactions older than an erasure still run, and a
    /// rewrite keeps what they can see; retrying once they ended succeeds.
    #[error(
        "cannot reclaim destroyed keys yet: {transactions} older transactions still run \
         ({blockers})"
    )]
    ErasureBlocked {
        /// How many.
        transactions: usize,
        /// Which: each backend's process id, database, state and how long its transaction
        /// ran, for the operator to find it in `pg_stat_activity`.
        blockers: String,
    },
    /// A reclaim was refused because transactions kept a partition of `data_keys` that it
    /// must rewrite locked for as long as it waits; retrying once they ended succeeds.
    #[error("cannot reclaim destroyed keys yet: {partition} is held by {holders}")]
    KeysInUse {
        /// The partition.
        partition: String,
        /// Which backends hold it (as [`PostgresError::ErasureBlocked`] names them).
        holders: String,
    },
    /// A reclaim was refused because the database role may not rewrite a partition of
    /// `data_keys` (only its owner, the database's owner and superusers may).
    #[error("cannot reclaim destroyed keys: the role may not VACUUM {partition}")]
    ErasureNotPermitted {
        /// The partition.
        partition: String,
    },
    /// After the reclaim's checkpoints, `pg_wal` still holds segments written before it:
    /// something the settings check did not see keeps them. No receipt was given.
    #[error("cannot reclaim destroyed keys: {segments} old WAL segments were kept")]
    WalRetained {
        /// How many old segments remained.
        segments: i64,
    },
    /// The thread that drives the connections could not be started.
    #[error("cannot start the database I/O thread: {source}")]
    IoThread {
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The thread that drives the connections is gone (the store is being dropped).
    #[error("the database I/O thread is gone")]
    IoThreadGone,
    /// The throwaway test cluster could not be started or reached.
    #[cfg(any(test, feature = "test-cluster"))]
    #[error("test cluster: {0}")]
    TestCluster(String),
}

impl From<tokio_postgres::Error> for PostgresError {
    fn from(source: tokio_postgres::Error) -> Self {
        Self::Database { source }
    }
}

impl From<deadpool_postgres::PoolError> for PostgresError {
    fn from(source: deadpool_postgres::PoolError) -> Self {
        Self::Pool { source }
    }
}

/// Shorthand used throughout the crate.
pub type Result<T, E = PostgresError> = std::result::Result<T, E>;
