//! The `Store`: opening the file, the write operations (run on the writer thread) and the
//! reads (run on the caller's thread in a redb read transaction, never blocking writes).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, TryLockError};

use redb::{Database, ReadTransaction, ReadableDatabase, ReadableTable, WriteTransaction};

use crate::backend::Backend;
use crate::clean_close;
use crate::data_keys::{DataKeys, KeyOwner};
use crate::readers::{OpenRead, Readers};
use crate::tables::{FORMAT_VERSION, FORMAT_VERSION_KEY, META, NEXT_OUTBOX_SEQ_KEY, NEXT_SID_KEY};
use crate::writer::Writer;
use crate::{DiskFault, Result, StoreError};

/// How each commit reaches the disk. Every mode is durable (`fsync`) before a write is
/// acknowledged; they differ in what a crash costs. docs/storage-format.md explains the
/// choice and docs/benchmarks.md measures the modes side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum CommitMode {
    /// Two-phase commit plus the allocator state saved with every commit: reopening after a
    /// crash is almost instant, and no written content can forge a valid commit. The default.
    #[default]
    QuickRepair,
    /// Two-phase commit only: safe against crafted content, but reopening after a crash walks
    /// the whole file to repair it.
    TwoPhase,
    /// redb's default single-fsync commit, which trusts a checksum to detect a torn commit.
    SinglePhase,
}

/// The store file's page cache unless the options say otherwise: 256 MiB.
///
/// redb's own default is 1 GiB, and the check of every page at open fills it, so a store
/// file of a gigabyte or more held a gigabyte of the server's memory from its first second
/// on. The file's pages stay in the operating system's cache after they leave this one; a
/// miss costs a read from there, not from the disk.
pub const DEFAULT_CACHE_BYTES: usize = 256 * 1024 * 1024;

/// Settings fixed when a store is opened.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    /// How commits reach the disk.
    pub commit: CommitMode,
    /// Most bytes of the file's pages held in memory (read cache and write buffer together);
    /// [`DEFAULT_CACHE_BYTES`] unless set.
    pub cache_bytes: usize,
    /// Whether an open verifies every page even of a file unchanged since its clean close
    /// (`memlayer check`); see [`OpenCheck`].
    pub check_every_page: bool,
}

/// How an open found the store file sound before serving from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenCheck {
    /// There was no file: this open created it.
    Created,
    /// redb verified the checksum of every page of the committed trees (a walk of the whole
    /// file): after a crash, for a file changed since its clean close, without a stamp of one,
    /// or when the options ask for it.
    EveryPage,
    /// The file is the one memlayer closed cleanly, byte for byte: same file, length and
    /// times, and every 64 MiB's CRC-32 as recorded at the close (`clean_close.rs`).
    UnchangedSinceCleanClose,
}

impl std::fmt::Display for OpenCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Created => "created",
            Self::EveryPage => "every page verified",
            Self::UnchangedSinceCleanClose => "unchanged since its clean close",
        })
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            commit: CommitMode::default(),
            cache_bytes: DEFAULT_CACHE_BYTES,
            check_every_page: false,
        }
    }
}

impl StoreOptions {
    /// Options with the given commit mode.
    pub fn with_commit(mut self, commit: CommitMode) -> Self {
        self.commit = commit;
        self
    }

    /// Options with a page cache of at most `bytes`.
    pub fn with_cache_bytes(mut self, bytes: usize) -> Self {
        self.cache_bytes = bytes;
        self
    }

    /// Options whose open verifies every page whatever the last close recorded.
    pub fn with_check_every_page(mut self) -> Self {
        self.check_every_page = true;
        self
    }
}

/// Largest page a listing returns.
pub const MAX_PAGE_SIZE: usize = 100;

/// Most distinct words a session search may look for: each is one substring scan of every
/// message the search reads, so the words multiply its cost.
pub const MAX_SEARCH_WORDS: usize = 16;
/// Longest session search query, in characters.
pub const MAX_SEARCH_QUERY: usize = 1_000;

/// Longest a compaction waits for reads that were open when it started.
const COMPACTION_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// Longest a reopening waits for reads that were open when it started, holding up new ones
/// meanwhile; it is tried again a second later, so a short wait serves.
const REOPEN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A durable store of sessions, messages and runs in one redb file, or served by another
/// backend ([`Store::served_by`]: memlayer-postgres) behind the same handles.
///
/// Cheap to clone: clones share the database and the writer thread. Writes are `async` and
/// resolve once committed to disk; reads are synchronous and short (callers on an async
/// runtime run them on a blocking thread, see [`Store::read`]).
///
/// `Store` itself opens, probes, backs up and shuts down the file; the records are reached
/// through handles grouped by concern: [`Store::sessions`] (sessions, messages, runs,
/// summaries), [`Store::tenants`] (settings, retention, stats), [`Store::keys`],
/// [`Store::memories`] (long-term memories, session memories, episodes) and
/// [`Store::feed`] (the embedding pipeline's outbox and vectors). Whatever removes text is
/// behind the [`Eraser`], which one owner takes ([`Store::take_eraser`]): the erasure
/// coordinator.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    /// What keeps the records.
    served_by: ServedBy,
    /// Messages newly stored by `append` since the store was opened (replays not counted).
    appended_messages: AtomicU64,
    /// Whether the [`Eraser`] was taken: there is one, so every removal of text goes through
    /// its owner.
    eraser_taken: AtomicBool,
}

enum ServedBy {
    /// This crate's redb file.
    File(RedbFile),
    /// Another backend; every handle hands its calls to it.
    Backend {
        backend: Arc<dyn Backend>,
        /// Never sends: a backend's failures are each call's own, there is no file to
        /// reopen ([`Store::refusals`]).
        refusals: tokio::sync::watch::Sender<Option<StoreError>>,
    },
}

/// The redb file, its writer thread and the reads open on it.
struct RedbFile {
    /// Shared by readers and the writer thread; taken exclusively only by [`Eraser::compact`]
    /// and [`Store::recover`]. `None` only after a reopening failed: every read and write is
    /// refused then, with the failure that started it, until one succeeds.
    db: Arc<RwLock<Option<Database>>>,
    path: PathBuf,
    /// How [`Store::recover`] checks the disk and opens the file again.
    medium: Medium,
    commit: CommitMode,
    /// How the first open found the file sound.
    opened: OpenCheck,
    writer: Writer,
    /// Read transactions open now ([`ReadTxn`]). Invariant: [`Store::recover`] closes the
    /// database only while there is none, since the reopened database would not know of an
    /// older snapshot and could reuse the pages it still reads; a retired key is destroyed
    /// only once the reads begun before its retirement ended (or [`COMPACTION_WAIT`] passed:
    /// such a read is then told the session changed).
    readers: Arc<Readers>,
    /// Data keys (slot and owner) retired by committed erasures, destroyed by the next
    /// [`Eraser::compact`].
    retired: Mutex<Vec<(u64, KeyOwner)>>,
    /// The data keys of the file's sealed values (`data_keys.rs`), in a file of their own
    /// beside it: [`KEY_FILE_SUFFIX`].
    keys: Arc<DataKeys>,
    /// Whether an erasure committed since the last compaction left plain text in freed pages
    /// ([`Store::erase_alone`]). Set at the open of an existing file: an erasure may have
    /// committed before the process ended and its compaction not.
    plaintext_freed: AtomicBool,
}

impl Drop for RedbFile {
    /// Closes the file once every write is committed and, if redb closed it cleanly, stamps
    /// it so that the next open can skip the walk of every page (`clean_close.rs`). A stamp
    /// that cannot be written costs only that: the next open checks every page.
    fn drop(&mut self) {
        self.writer.shutdown();
        let db = self
            .db
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(db) = db
            && db.close().is_ok()
            && self.medium.stamps_clean_close
        {
            let _ = clean_close::record(&self.path);
        }
    }
}

/// A read transaction of the store, counted while it lives ([`RedbFile::readers`]), with
/// the key file its sealed values open under.
pub(crate) struct ReadTxn {
    txn: ReadTransaction,
    keys: Arc<DataKeys>,
    _open: OpenRead,
}

impl ReadTxn {
    /// The key file.
    pub(crate) fn keys(&self) -> &DataKeys {
        &self.keys
    }
}

impl std::ops::Deref for ReadTxn {
    type Target = ReadTransaction;

    fn deref(&self) -> &ReadTransaction {
        &self.txn
    }
}

/// Sessions, their messages, runs and summaries: [`Store::sessions`].
#[derive(Clone, Copy)]
pub struct Sessions<'a> {
    pub(crate) store: &'a Store,
}

/// Tenant-wide documents: saved settings, retention rules and conversation stats:
/// [`Store::tenants`].
#[derive(Clone, Copy)]
pub struct Tenants<'a> {
    pub(crate) store: &'a Store,
}

/// API keys: [`Store::keys`].
#[derive(Clone, Copy)]
pub struct Keys<'a> {
    pub(crate) store: &'a Store,
}

/// Long-term memories, session memories and episodes: [`Store::memories`].
#[derive(Clone, Copy)]
pub struct Memories<'a> {
    pub(crate) store: &'a Store,
}

/// What the embedding pipeline and the indexes read and write: the outbox of messages to
/// embed, their vectors, and messages and sessions by surrogate key: [`Store::feed`].
#[derive(Clone, Copy)]
pub struct EmbeddingFeed<'a> {
    pub(crate) store: &'a Store,
}

/// Every operation that removes text (erasing messages, sessions, memories, episodes,
/// session memories, compacting the file) and the erasure jobs' journal. There is one per
/// opened store, taken by its owner with [`Store::take_eraser`]: "only the erasure
/// coordinator removes text" is a fact of the types, not a convention.
#[derive(Clone)]
pub struct Eraser {
    pub(crate) store: Store,
}

impl Store {
    /// Opens the store at `path` with the default options, creating the file if it does not
    /// exist.
    ///
    /// Fails with [`StoreError::NewerFormat`] if a newer memlayer wrote the file, with
    /// [`StoreError::DamagedFile`] if the file is truncated or altered (every page's checksum
    /// is verified first, unless the file is byte for byte the one memlayer closed cleanly:
    /// [`OpenCheck`]), and with [`StoreError::Storage`] if another process has it open.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, StoreOptions::default())
    }

    /// Opens the store at `path` with `options`; see [`Store::open`].
    pub fn open_with(path: impl AsRef<Path>, options: StoreOptions) -> Result<Self> {
        let path = path.as_ref().to_owned();
        let (db, opened) = match create_new(&path, &options)? {
            Some(db) => (db, OpenCheck::Created),
            None => {
                let opened = if options.check_every_page {
                    clean_close::remove(&path).map_err(io_error)?;
                    OpenCheck::EveryPage
                } else if clean_close::take(&path) {
                    OpenCheck::UnchangedSinceCleanClose
                } else {
                    OpenCheck::EveryPage
                };
                let db = builder(&options, opened == OpenCheck::EveryPage)
                    .create(&path)
                    .map_err(|err| damaged(&path, err))?;
                (db, opened)
            }
        };
        let medium = Medium::file(&path, &options);
        Self::start(db, path, medium, options, opened)
    }

    /// Opens a store on `backend` instead of a file, with the same checks, initialisation and
    /// writer thread as [`Store::open_with`]: the fault-injection tests (`faults.rs`) run the
    /// production write path over a disk that fails or loses power on cue. `name` stands for
    /// the file in errors and in [`Store::path`]. [`Store::recover`] probes the disk with
    /// `probe` and reopens the store on another clone of `backend`.
    #[cfg(test)]
    pub(crate) fn open_with_backend<B>(
        name: &Path,
        backend: B,
        probe: impl Fn() -> std::io::Result<()> + Send + Sync + 'static,
        options: StoreOptions,
    ) -> Result<Self>
    where
        B: redb::StorageBackend + Clone + Sync,
    {
        let db = builder(&options, true)
            .create_with_backend(backend.clone())
            .map_err(|err| damaged(name, err))?;
        let (reopened, reopened_with) = (name.to_owned(), options.clone());
        let medium = Medium {
            open: Box::new(move || {
                builder(&reopened_with, true)
                    .create_with_backend(backend.clone())
                    .map_err(|err| damaged(&reopened, err))
            }),
            probe: Box::new(probe),
            stamps_clean_close: false,
        };
        Self::start(db, name.to_owned(), medium, options, OpenCheck::EveryPage)
    }

    /// Checks and initialises an opened database and starts the writer thread.
    fn start(
        db: Database,
        path: PathBuf,
        medium: Medium,
        options: StoreOptions,
        opened: OpenCheck,
    ) -> Result<Self> {
        prepare(&db, options.commit)?;
        let key_file = sibling(&path, KEY_FILE_SUFFIX);
        if opened == OpenCheck::Created {
            // Keys of a store file that is gone name sessions of no file: never reused.
            match std::fs::remove_file(&key_file) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                    return Err(StoreError::KeyFile {
                        path: key_file,
                        source: err.into(),
                    });
                }
                _ => {}
            }
        }
        let keys = Arc::new(DataKeys::open(&key_file)?);
        let db = Arc::new(RwLock::new(Some(db)));
        let writer =
            Writer::spawn(Arc::clone(&db), options.commit, Arc::clone(&keys)).map_err(|err| {
                StoreError::InvalidInput {
                    field: "writer thread",
                    reason: err.to_string(),
                }
            })?;
        Ok(Self::with(ServedBy::File(RedbFile {
            db,
            path,
            medium,
            commit: options.commit,
            opened,
            writer,
            readers: Arc::default(),
            retired: Mutex::default(),
            keys,
            plaintext_freed: AtomicBool::new(opened != OpenCheck::Created),
        })))
    }

    /// A store whose records `backend` keeps: every handle, the eraser and the lifecycle
    /// calls go to it, with the same answers as from a file. What only a file has (a file
    /// backup, disk space, reopening after a disk fault, compaction of the file) answers
    /// [`StoreError::Unsupported`] or has nothing to do.
    ///
    /// The handles' synchronous reads wait for the backend's answer on the calling thread:
    /// call them on the blocking pool ([`Store::read`]) of a multi-threaded Tokio runtime,
    /// as callers of the file store already do.
    pub fn served_by(backend: Arc<dyn Backend>) -> Self {
        let (refusals, _) = tokio::sync::watch::channel(None);
        Self::with(ServedBy::Backend { backend, refusals })
    }

    fn with(served_by: ServedBy) -> Self {
        Self {
            inner: Arc::new(Inner {
                served_by,
                appended_messages: AtomicU64::new(0),
                eraser_taken: AtomicBool::new(false),
            }),
        }
    }

    /// The redb file, or [`StoreError::Unsupported`] naming `what` for a store served by a
    /// backend.
    fn file(&self, what: &'static str) -> Result<&RedbFile> {
        match &self.inner.served_by {
            ServedBy::File(file) => Ok(file),
            ServedBy::Backend { .. } => Err(StoreError::Unsupported(what)),
        }
    }

    /// The backend serving this store, if another than the file.
    pub(crate) fn backend(&self) -> Option<&dyn Backend> {
        match &self.inner.served_by {
            ServedBy::File(_) => None,
            ServedBy::Backend { backend, .. } => Some(&**backend),
        }
    }

    /// Sessions, messages, runs and summaries.
    pub fn sessions(&self) -> Sessions<'_> {
        Sessions { store: self }
    }

    /// Tenant-wide settings, retention rules and stats.
    pub fn tenants(&self) -> Tenants<'_> {
        Tenants { store: self }
    }

    /// API keys.
    pub fn keys(&self) -> Keys<'_> {
        Keys { store: self }
    }

    /// Long-term memories, session memories and episodes.
    pub fn memories(&self) -> Memories<'_> {
        Memories { store: self }
    }

    /// The embedding pipeline's outbox and vectors.
    pub fn feed(&self) -> EmbeddingFeed<'_> {
        EmbeddingFeed { store: self }
    }

    /// The store's one [`Eraser`], for whoever takes it first (the erasure coordinator).
    /// Fails with [`StoreError::Conflict`] once taken, also through clones of this store.
    pub fn take_eraser(&self) -> Result<Eraser> {
        if self.inner.eraser_taken.swap(true, Ordering::AcqRel) {
            return Err(StoreError::Conflict(
                "the store's eraser is taken: one erasure coordinator erases from a store".into(),
            ));
        }
        Ok(Eraser {
            store: self.clone(),
        })
    }

    /// The eraser without taking it, for this crate's tests and fuzz model, which erase from
    /// stores they opened themselves.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn eraser(&self) -> Eraser {
        Eraser {
            store: self.clone(),
        }
    }

    /// Runs `read` on the blocking pool: store reads are short but may touch the disk, and an
    /// async runtime's workers must stay free.
    pub async fn read<T, E, F>(&self, read: F) -> std::result::Result<T, E>
    where
        F: FnOnce(&Store) -> std::result::Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let store = self.clone();
        blocking(move || read(&store)).await
    }

    /// A read transaction: a consistent snapshot, for the read paths of every module.
    pub(crate) fn begin_read(&self) -> Result<ReadTxn> {
        let file = self.file(FILE_ONLY)?;
        let db = file.db.read().unwrap_or_else(PoisonError::into_inner);
        Self::begin_read_of(file, &db)
    }

    /// Retires `owner`'s data key in `slot` after an erasure committed: the next
    /// [`Eraser::compact`] destroys it.
    pub(crate) fn retire_key(&self, slot: u64, owner: KeyOwner) -> Result<()> {
        let file = self.file(FILE_ONLY)?;
        file.retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((slot, owner));
        Ok(())
    }

    /// The key file, for the writes that seal.
    pub(crate) fn data_keys(&self) -> Result<Arc<DataKeys>> {
        Ok(Arc::clone(&self.file(FILE_ONLY)?.keys))
    }

    /// [`Self::begin_read`] if it need not wait: `None` while a reopening holds the file
    /// ([`Self::recover`]), which may take as long as redb's repair. For the reads an async
    /// worker makes itself.
    pub(crate) fn try_begin_read(&self) -> Result<Option<ReadTxn>> {
        let file = self.file(FILE_ONLY)?;
        let db = match file.db.try_read() {
            Ok(db) => db,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(None),
        };
        Self::begin_read_of(file, &db).map(Some)
    }

    /// Holds the file as a reopening does, until the guard drops: for tests of what waits.
    #[cfg(test)]
    pub(crate) fn hold_as_reopening(&self) -> std::sync::RwLockWriteGuard<'_, Option<Database>> {
        let file = self.file(FILE_ONLY).expect("a store file");
        file.db.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn begin_read_of(file: &RedbFile, db: &Option<Database>) -> Result<ReadTxn> {
        let db = db.as_ref().ok_or_else(|| file.writer.refusal())?;
        // Counted under the lock, so that a reopening, which holds it exclusively, sees every
        // read that began before it.
        let open = file.readers.begin();
        Ok(ReadTxn {
            txn: db.begin_read()?,
            keys: Arc::clone(&file.keys),
            _open: open,
        })
    }

    /// Runs `work` on the writer thread and waits until it is durably committed.
    pub(crate) async fn write<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&WriteTransaction) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.file(FILE_ONLY)?.writer.submit(work).await
    }

    /// Runs an erasing `work` on the writer thread in a transaction of its own (see
    /// [`Writer::submit_alone`] for why) and waits until it is durably committed. Within it,
    /// remove several entries of one table with one range removal (`retain_in`), which
    /// rebuilds each page once, never with one `remove` after another.
    ///
    /// What it removes is taken to be plain text, which stays in freed pages until the next
    /// [`Eraser::compact`]; [`Self::erase_alone`] is for erasures that may not need one.
    pub(crate) async fn write_alone<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&WriteTransaction) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.erase_alone(move |txn| work(txn).map(|done| (done, Freed::PlainText)))
            .await
    }

    /// [`Self::write_alone`] for an erasure that says what it left in freed pages: plain text
    /// (a compaction must overwrite it) or only values sealed under keys it destroys.
    pub(crate) async fn erase_alone<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&WriteTransaction) -> Result<(T, Freed)> + Send + 'static,
        T: Send + 'static,
    {
        let file = self.file(FILE_ONLY)?;
        let (done, freed) = file.writer.submit_alone(work).await?;
        if freed == Freed::PlainText {
            // After the commit: a compaction that cleared the mark before it would not have
            // covered these deletions.
            file.plaintext_freed.store(true, Ordering::SeqCst);
        }
        Ok(done)
    }

    /// Changes after every successful commit: derived-data workers (the embedding pipeline)
    /// wait on it instead of polling.
    pub fn commits(&self) -> tokio::sync::watch::Receiver<u64> {
        match &self.inner.served_by {
            ServedBy::File(file) => file.writer.commits(),
            ServedBy::Backend { backend, .. } => backend.commits(),
        }
    }

    /// Adds `count` newly stored messages to [`Store::appended_messages`].
    pub(crate) fn count_appended(&self, count: u64) {
        self.inner
            .appended_messages
            .fetch_add(count, Ordering::Relaxed);
    }

    /// Messages appended (durably, replays of an idempotency key not counted) since this
    /// store was opened: the append counter of the metrics.
    pub fn appended_messages(&self) -> u64 {
        self.inner.appended_messages.load(Ordering::Relaxed)
    }

    /// The file this store lives in; `None` when a backend serves it.
    pub fn path(&self) -> Option<&Path> {
        self.file(FILE_ONLY).ok().map(|file| file.path.as_path())
    }

    /// How the open found the file sound; `None` when a backend serves the store.
    pub fn open_check(&self) -> Option<OpenCheck> {
        self.file(FILE_ONLY).ok().map(|file| file.opened)
    }

    /// Commits every write already submitted, then refuses new ones with
    /// [`StoreError::Closed`]. Reads keep working.
    pub fn shutdown(&self) {
        match &self.inner.served_by {
            ServedBy::File(file) => file.writer.shutdown(),
            ServedBy::Backend { backend, .. } => backend.shutdown(),
        }
    }

    /// Succeeds when the file can be read and writes are still accepted (readiness probe).
    /// After an I/O error redb refuses every write until the file is reopened; this then
    /// fails with [`StoreError::WritesRefused`], whose cause says what the disk did.
    pub fn check_ready(&self) -> Result<()> {
        let file = match &self.inner.served_by {
            ServedBy::File(file) => file,
            ServedBy::Backend { backend, .. } => return wait(backend.check_ready()),
        };
        if !file.writer.is_open() {
            return Err(StoreError::Closed);
        }
        if let Some(err) = file.writer.broken() {
            return Err(err);
        }
        self.begin_read()?.open_table(META)?;
        Ok(())
    }

    /// The store file's size and the free space of its file system: cheap (two system
    /// calls), so it can be read at every scrape and probe.
    pub fn disk_space(&self) -> Result<DiskSpace> {
        let file = self.file("disk space is the database server's to watch")?;
        let store_bytes = std::fs::metadata(&file.path).map_err(io_error)?.len();
        let dir = match file.path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let fs = rustix::fs::statvfs(dir).map_err(|err| io_error(err.into()))?;
        Ok(DiskSpace {
            store_bytes,
            free_bytes: fs.f_bavail.saturating_mul(fs.f_frsize),
            size_bytes: fs.f_blocks.saturating_mul(fs.f_frsize),
        })
    }

    /// The reason the store refuses writes, `Some` from a disk failure until
    /// [`Store::recover`] reopened the file; watch it to pause work that writes.
    pub fn refusals(&self) -> tokio::sync::watch::Receiver<Option<StoreError>> {
        match &self.inner.served_by {
            ServedBy::File(file) => file.writer.refusals(),
            ServedBy::Backend { refusals, .. } => refusals.subscribe(),
        }
    }

    /// Resolves once the store accepts writes: at once while it does, else when
    /// [`Store::recover`] reopened it. Background workers that write wait here instead of
    /// failing over and over while the disk is full.
    pub async fn writable(&self) {
        // The sender lives as long as the store; without it nothing is refused any more.
        let _ = self.refusals().wait_for(Option::is_none).await;
    }

    /// After a disk failure made the store refuse writes, checks whether the disk takes
    /// writes again and if so reopens the file and resumes writes; call it again and again
    /// (every second, say) while the store refuses writes.
    ///
    /// redb refuses every write after an I/O error until its file is reopened, so this
    /// closes the database and opens it again, the way a start does: every page's checksum
    /// verified, the format checked, a commit written. Reads and writes wait meanwhile, and
    /// it waits for reads already open (the reopened database would not know of their
    /// snapshots and could reuse their pages); one open for longer than 2 s makes it answer
    /// [`Recovery::Waiting`] and let go. First a probe: a 1 MiB file beside the store
    /// is written, synced and removed, so that a disk still full or failing is found without
    /// closing anything.
    ///
    /// Answers [`Recovery::Waiting`] while the disk still refuses writes (the probe failed,
    /// or the reopening ran out of space again: the probe found too little), and fails when
    /// reopening failed otherwise: the device failed on the store file itself, or the file
    /// does not pass its checks. The store then refuses every read and write (with the
    /// failure that started it), and only a restart, which checks the file again, can help.
    pub fn recover(&self) -> Result<Recovery> {
        let ServedBy::File(file) = &self.inner.served_by else {
            // A backend refuses nothing for good: each call fails or succeeds on its own.
            return Ok(Recovery::Writable);
        };
        if file.writer.broken().is_none() {
            return Ok(Recovery::Writable);
        }
        if let Err(err) = (file.medium.probe)() {
            return Ok(Recovery::Waiting(io_error(err)));
        }
        let mut db = file.db.write().unwrap_or_else(PoisonError::into_inner);
        // No read begins while the lock is held, so those open drain; reads are short. A
        // long one (a backup streaming) makes this try again at the next call.
        let deadline = std::time::Instant::now() + REOPEN_WAIT;
        while file.readers.open() > 0 {
            if std::time::Instant::now() >= deadline {
                return Ok(Recovery::Waiting(StoreError::Busy(
                    "reads stayed open; the store is reopened once they end".into(),
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        // Closing releases the file's lock, so it can be opened again; it must come first.
        drop(db.take());
        let reopened = (file.medium.open)().and_then(|database| {
            prepare(&database, file.commit)?;
            Ok(database)
        });
        match reopened {
            Ok(database) => {
                *db = Some(database);
                file.writer.resume();
                Ok(Recovery::Writable)
            }
            Err(err) if err.disk_fault() == Some(DiskFault::Full) => Ok(Recovery::Waiting(err)),
            Err(err) => Err(err),
        }
    }
}

/// Space on the file system that holds the store, read now ([`Store::disk_space`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskSpace {
    /// Bytes the store file takes.
    pub store_bytes: u64,
    /// Bytes this process may still write on the file system (what `df` calls available:
    /// without the blocks reserved for root).
    pub free_bytes: u64,
    /// The file system's size in bytes.
    pub size_bytes: u64,
}

impl DiskSpace {
    /// The share of the file system still free, from 0 to 1 (1 for an empty or odd one).
    pub fn free_share(&self) -> f64 {
        if self.size_bytes == 0 {
            return 1.0;
        }
        self.free_bytes as f64 / self.size_bytes as f64
    }
}

/// What [`Store::recover`] found.
#[derive(Debug)]
pub enum Recovery {
    /// The store accepts writes: it never refused them, or its file was reopened.
    Writable,
    /// The disk still refuses writes, for this reason; try again later.
    Waiting(StoreError),
}

/// How a store's file is opened again and its disk checked, for [`Store::recover`].
struct Medium {
    /// Opens the database with the checks of a start (checksums verified).
    open: Box<dyn Fn() -> Result<Database> + Send + Sync>,
    /// Succeeds when the disk takes a write and a sync.
    probe: Box<dyn Fn() -> std::io::Result<()> + Send + Sync>,
    /// Whether a clean close leaves a stamp beside the file (`clean_close.rs`): a file in
    /// the file system, not a test's simulated disk.
    stamps_clean_close: bool,
}

/// What an erasure left in the pages it freed ([`Store::erase_alone`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Freed {
    /// Plain text: bytes to overwrite by compacting the file.
    PlainText,
    /// Only values sealed under keys the erasure destroys once it committed.
    Sealed,
}

/// The key file's name is the store file's with this added.
pub(crate) const KEY_FILE_SUFFIX: &str = ".keys";

/// Bytes the disk probe writes: room for the reopening's repair and the first commits after
/// it, so that a disk with a few pages free is not reopened only to fill up again at once.
const PROBE_BYTES: usize = 1 << 20;
/// The probe file's name is the store file's with this added.
const PROBE_SUFFIX: &str = ".probe";

impl Medium {
    /// The store file at `path`: it is opened, never created (a file that vanished must not
    /// come back empty), and the disk is probed beside it.
    fn file(path: &Path, options: &StoreOptions) -> Self {
        let (opened, probed) = (path.to_owned(), sibling(path, PROBE_SUFFIX));
        let options = options.clone();
        Self {
            open: Box::new(move || {
                builder(&options, true)
                    .open(&opened)
                    .map_err(|err| damaged(&opened, err))
            }),
            probe: Box::new(move || {
                use std::io::Write;
                let written = std::fs::File::create(&probed).and_then(|mut file| {
                    file.write_all(&vec![0; PROBE_BYTES])?;
                    file.sync_all()
                });
                let removed = std::fs::remove_file(&probed);
                written.and(removed)
            }),
            stamps_clean_close: true,
        }
    }
}

/// `path` with `suffix` added to its file name.
pub(crate) fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

impl Eraser {
    /// The store this eraser erases from.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Rewrites the file so that the pages deletions freed are overwritten or cut off: redb
    /// does not zero a freed page, so until compaction an erased message's bytes stay in the
    /// file. New reads and writes wait while it runs; reads already open are waited for (at
    /// most `COMPACTION_WAIT`), after which it fails with [`StoreError::Busy`] and can be
    /// retried. Returns whether anything was moved. Nothing to do (no wait) when every
    /// erasure since the last compaction left only sealed values whose keys it destroyed.
    pub fn compact(&self) -> Result<bool> {
        let file = match &self.store.inner.served_by {
            ServedBy::File(file) => file,
            ServedBy::Backend { backend, .. } => return wait(backend.eraser().compact()),
        };
        if let Some(refusal) = file.writer.broken() {
            return Err(refusal);
        }
        let retired =
            std::mem::take(&mut *file.retired.lock().unwrap_or_else(PoisonError::into_inner));
        if !retired.is_empty() {
            // Reads begun before an erasure may still open what the retired key sealed; later
            // ones find the session under its new key.
            if !file.readers.wait_for_earlier(COMPACTION_WAIT) {
                file.retired
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend(retired);
                return Err(StoreError::Busy(
                    "reads stayed open during a key's destruction".into(),
                ));
            }
            if let Err(err) = file.keys.destroy(&retired) {
                file.retired
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend(retired);
                return Err(err);
            }
        }
        if !file.plaintext_freed.swap(false, Ordering::SeqCst) {
            // Every erasure since the last compaction left only values sealed under the keys
            // just destroyed.
            return Ok(false);
        }
        let compacted = Self::compact_file(file);
        if compacted.is_err() {
            file.plaintext_freed.store(true, Ordering::SeqCst);
        }
        compacted
    }

    fn compact_file(file: &RedbFile) -> Result<bool> {
        let mut db = file.db.write().unwrap_or_else(PoisonError::into_inner);
        let db = db.as_mut().ok_or_else(|| file.writer.refusal())?;
        let deadline = std::time::Instant::now() + COMPACTION_WAIT;
        // One call: redb repeats its rounds until one moves nothing, so a second call only
        // walks every page again to find nothing to move (at a million messages that walk
        // is seconds during which no read or write can begin).
        loop {
            match db.compact() {
                Ok(moved) => return Ok(moved),
                Err(redb::CompactionError::TransactionInProgress)
                    if std::time::Instant::now() < deadline =>
                {
                    // No new transaction can begin while the lock is held, so the open ones
                    // drain; reads are short.
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                Err(redb::CompactionError::TransactionInProgress) => {
                    return Err(StoreError::Busy(
                        "reads stayed open during compaction".into(),
                    ));
                }
                Err(err) => {
                    let err: StoreError = err.into();
                    file.writer.note_failure(db, &err);
                    return Err(err);
                }
            }
        }
    }
}

/// Tells a damaged file (redb's checksum or layout checks failed, the file is shorter than its
/// header says, or it is not a redb file) from other open failures such as a lock held by
/// another process.
fn damaged(path: &Path, err: redb::DatabaseError) -> StoreError {
    use std::io::ErrorKind;
    let detail = match &err {
        redb::DatabaseError::Storage(redb::StorageError::Corrupted(detail)) => detail.clone(),
        redb::DatabaseError::Storage(redb::StorageError::Io(io))
            if matches!(io.kind(), ErrorKind::InvalidData | ErrorKind::UnexpectedEof) =>
        {
            io.to_string()
        }
        _ => return err.into(),
    };
    StoreError::DamagedFile {
        path: path.to_owned(),
        detail,
    }
}

/// Creates the store file at `path` if there is none, or returns `None`.
///
/// redb writes a new file in several steps; an I/O error or a crash between them left a file
/// that every later open refused as damaged (found by the fault-injection tests), so memlayer
/// would not start again until someone deleted it. The file is therefore built and
/// initialised under a temporary name and linked into place only then: `path` either does not
/// exist or holds an initialised store. A hard link, not a rename, so that of two processes
/// creating the same store at once one finds the other's file instead of replacing it.
fn create_new(path: &Path, options: &StoreOptions) -> Result<Option<Database>> {
    let partial = sibling(path, ".new");
    // Left by a creation that did not finish (or a second name of a finished one); it never
    // held an acknowledged write.
    remove_if_present(&partial)?;
    // Left by a disk probe a crash interrupted (`Store::recover`): zeros, never data.
    remove_if_present(&sibling(path, PROBE_SUFFIX))?;
    if path.try_exists().map_err(io_error)? {
        return Ok(None);
    }
    let db = builder(options, false)
        .create(&partial)
        .map_err(|err| damaged(&partial, err))?;
    initialise(&db, options.commit)?;
    let linked = std::fs::hard_link(&partial, path);
    std::fs::remove_file(&partial).map_err(io_error)?;
    match linked {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => return Ok(None),
        Err(err) => return Err(io_error(err)),
    }
    // The new name must be durable before the first write is acknowledged.
    sync_parent(path).map_err(io_error)?;
    Ok(Some(db))
}

/// Makes a creation, rename or removal of a name in `path`'s directory durable. Only Unix
/// syncs a directory; elsewhere a directory cannot be opened as a file.
pub(crate) fn sync_parent(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        std::fs::File::open(parent)?.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(io_error(err)),
        _ => Ok(()),
    }
}

fn io_error(err: std::io::Error) -> StoreError {
    redb::StorageError::Io(err).into()
}

/// How every store is opened. A plain open trusts a file that was closed cleanly and may panic
/// on one damaged since; `check_every_page` verifies every page's checksum first, so a damaged
/// file is refused with an error instead of served. The check reads the whole file: it is
/// left out only for a file created by this open or unchanged since memlayer closed it
/// ([`OpenCheck`]).
fn builder(options: &StoreOptions, check_every_page: bool) -> redb::Builder {
    let mut builder = Database::builder();
    builder
        .set_check_integrity_on_open(check_every_page)
        .set_cache_size(options.cache_bytes);
    builder
}

/// Checks an opened database and initialises or migrates it: what every open does, at start
/// and when [`Store::recover`] reopens the file.
fn prepare(db: &Database, commit: CommitMode) -> Result<()> {
    check_format(db)?;
    initialise(db, commit)
}

fn check_format(db: &Database) -> Result<()> {
    let txn = db.begin_read()?;
    let meta = match txn.open_table(META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(err) => return Err(err.into()),
    };
    match meta.get(FORMAT_VERSION_KEY)?.map(|v| v.value()) {
        Some(found) if found > FORMAT_VERSION => Err(StoreError::NewerFormat {
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: FORMAT_VERSION as u32,
        }),
        _ => Ok(()),
    }
}

/// Creates the tables and the format marker of a new file, and migrates a file of an older
/// format; a no-op on an existing file of this build's format.
fn initialise(db: &Database, commit: CommitMode) -> Result<()> {
    let txn = crate::writer::begin(db, commit)?;
    let found = {
        let mut meta = txn.open_table(META)?;
        let found = meta.get(FORMAT_VERSION_KEY)?.map(|version| version.value());
        if found.is_none() {
            meta.insert(FORMAT_VERSION_KEY, FORMAT_VERSION)?;
            meta.insert(NEXT_SID_KEY, 1)?;
            meta.insert(NEXT_OUTBOX_SEQ_KEY, 1)?;
        }
        found
    };
    crate::tables::for_each_table(&mut CreateTables(&txn))?;
    if let Some(found) = found.filter(|&found| found < FORMAT_VERSION) {
        crate::migrate::migrate(&txn, found)?;
    }
    txn.commit()?;
    Ok(())
}

/// Creates each table a fresh store lacks, so that reads never meet a missing table.
struct CreateTables<'a>(&'a WriteTransaction);

impl crate::tables::TableVisitor for CreateTables<'_> {
    fn visit<K: redb::Key + 'static, V: redb::Value + 'static>(
        &mut self,
        table: redb::TableDefinition<K, V>,
    ) -> Result<()> {
        self.0.open_table(table)?;
        Ok(())
    }
}

/// What a store served by a backend answers for the operations of the file alone.
const FILE_ONLY: &str = "the redb file's own operation (on a database server, use its tools)";

/// Waits on the calling thread for a backend's answer to one of the handles' synchronous
/// calls. On the blocking pool (where those calls belong, [`Store::read`]) this simply
/// blocks; on a worker of a multi-threaded runtime it first hands the worker's other tasks
/// away. Other threads have no runtime to drive the backend, and get
/// [`StoreError::Unsupported`].
pub(crate) fn wait<T>(answer: crate::backend::BoxFuture<'_, Result<T>>) -> Result<T> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let unsupported = StoreError::Unsupported(
        "a store served by a backend is read from a multi-threaded Tokio runtime",
    );
    let handle = Handle::try_current().map_err(|_| unsupported.clone())?;
    if handle.runtime_flavor() != RuntimeFlavor::MultiThread {
        return Err(unsupported);
    }
    tokio::task::block_in_place(|| handle.block_on(answer))
}

/// Runs blocking `work` (store reads, index updates, model inference) on the blocking pool and
/// waits for it. A task that could not finish (it panicked, or the runtime is shutting down)
/// is [`StoreError::Task`].
pub async fn blocking<T, E>(
    work: impl FnOnce() -> std::result::Result<T, E> + Send + 'static,
) -> std::result::Result<T, E>
where
    T: Send + 'static,
    E: From<StoreError> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|source| StoreError::Task {
            source: Arc::new(source),
        })?
}
