//! Group commit: one thread owns every write transaction.
//!
//! Writers hand a job to the writer thread and wait for its reply. The thread takes every job
//! that is waiting, applies them all in one redb write transaction and commits once, so under
//! load many requests share one fsync; with a single client each job commits alone and
//! waits no longer than its own commit. A reply is sent only after the commit is durable, or
//! with the error that made it fail. redb allows one write transaction at a time anyway, so a
//! single owner costs no parallelism and gives appends a total order (gapless indices).
//!
//! Erasing jobs are the exception: each commits in a transaction of its own (see
//! [`Writer::submit_alone`]).

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;

use redb::{Database, WriteTransaction};
use tokio::sync::{oneshot, watch};

use crate::data_keys::DataKeys;
use crate::{CommitMode, Result, StoreError};

/// Most jobs in one commit. Bounds the latency a job can add to the others in its group.
const MAX_JOBS_PER_COMMIT: usize = 512;

/// A unit of work for the writer thread.
trait Job: Send {
    /// Runs the job inside the shared transaction. Returns the error when the job failed in a
    /// way that leaves the transaction unusable, so the whole group must be aborted.
    fn apply(&mut self, txn: &WriteTransaction) -> Option<StoreError>;
    /// Replies to the waiting caller once the group's fate is known.
    fn finish(self: Box<Self>, group_failure: Option<&StoreError>);
    /// Whether the job must have its transaction to itself.
    fn alone(&self) -> bool;
}

struct TypedJob<F, T> {
    alone: bool,
    work: Option<F>,
    outcome: Option<Result<T>>,
    reply: oneshot::Sender<Result<T>>,
}

impl<F, T> Job for TypedJob<F, T>
where
    F: FnOnce(&WriteTransaction) -> Result<T> + Send,
    T: Send,
{
    fn apply(&mut self, txn: &WriteTransaction) -> Option<StoreError> {
        let work = self.work.take().expect("a job is applied once");
        let outcome = work(txn);
        let abort = match &outcome {
            Err(err) if err.aborts_transaction() => Some(err.clone()),
            _ => None,
        };
        self.outcome = Some(outcome);
        abort
    }

    fn finish(self: Box<Self>, group_failure: Option<&StoreError>) {
        let result = match group_failure {
            Some(err) => Err(err.clone()),
            None => self
                .outcome
                .expect("a job is applied before its group commits"),
        };
        // The caller may have given up waiting (its request was cancelled); the write still
        // happened, and a retry with the same idempotency key finds it.
        let _ = self.reply.send(result);
    }

    fn alone(&self) -> bool {
        self.alone
    }
}

/// Handle to the writer thread.
pub(crate) struct Writer {
    jobs: Mutex<Option<Sender<Box<dyn Job>>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Counts successful commits, so derived-data workers wake up when there is news
    /// instead of polling.
    commits: watch::Receiver<u64>,
    /// The failure after which redb refuses every write transaction, while it does: after an
    /// I/O error redb answers `PreviousIo` to each until the file is reopened. Jobs are then
    /// refused before they begin, with that failure as the cause (a full disk must not look
    /// like a bug), and the readiness probe says so (it used to report ready while every
    /// write failed).
    broken: Arc<watch::Sender<Option<StoreError>>>,
    commit: CommitMode,
}

impl Writer {
    /// Starts the writer of `db`; the jobs create data keys in `keys`, which it syncs before
    /// each commit.
    pub(crate) fn spawn(
        db: Arc<RwLock<Option<Database>>>,
        commit: CommitMode,
        keys: Arc<DataKeys>,
    ) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel();
        let (committed, commits) = watch::channel(0);
        let broken = Arc::new(watch::Sender::new(None));
        let thread_broken = Arc::clone(&broken);
        let thread = std::thread::Builder::new()
            .name("memlayer-writer".into())
            .spawn(move || run(&db, commit, &keys, &queue, &committed, &thread_broken))?;
        Ok(Self {
            broken,
            commit,
            jobs: Mutex::new(Some(jobs)),
            thread: Mutex::new(Some(thread)),
            commits,
        })
    }

    /// Queues `work` and waits until its transaction is durably committed.
    pub(crate) async fn submit<F, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&WriteTransaction) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.queue(work, false).await
    }

    /// Like [`Writer::submit`], but `work` runs in a transaction no other job shares, so every
    /// page it changes was committed before it. That matters to erasures: redb edits a page
    /// its transaction already wrote in place, and a removal there shifts the entries after
    /// it left without clearing the bytes it vacates, so an erased value (or a copy of one)
    /// could stay in a live page. A page committed before is rebuilt from the entries that
    /// stay, on a page zeroed when allocated.
    pub(crate) async fn submit_alone<F, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(&WriteTransaction) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.queue(work, true).await
    }

    async fn queue<F, T>(&self, work: F, alone: bool) -> Result<T>
    where
        F: FnOnce(&WriteTransaction) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (reply, outcome) = oneshot::channel();
        let job = Box::new(TypedJob {
            alone,
            work: Some(work),
            outcome: None,
            reply,
        });
        {
            let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
            let sender = jobs.as_ref().ok_or(StoreError::Closed)?;
            sender.send(job).map_err(|_| StoreError::Closed)?;
        }
        outcome.await.map_err(|_| StoreError::Closed)?
    }

    /// A receiver that sees the number of commits so far change after each commit.
    pub(crate) fn commits(&self) -> watch::Receiver<u64> {
        self.commits.clone()
    }

    /// [`StoreError::WritesRefused`] while redb refuses every write transaction.
    pub(crate) fn broken(&self) -> Option<StoreError> {
        refused(&self.broken)
    }

    /// The error for an access to a database that is closed because reopening it failed.
    pub(crate) fn refusal(&self) -> StoreError {
        self.broken().unwrap_or(StoreError::Closed)
    }

    /// The reason writes are refused while they are, for those who wait for them to resume.
    pub(crate) fn refusals(&self) -> watch::Receiver<Option<StoreError>> {
        self.broken.subscribe()
    }

    /// The database was reopened: jobs are applied again.
    pub(crate) fn resume(&self) {
        self.broken.send_replace(None);
    }

    /// After a write (a compaction) failed with `failure`, asks redb whether it still commits,
    /// and remembers the failure if it does not. Runs only after failures, and with no other
    /// write transaction open (on the writer thread, or in compaction, which holds the
    /// database exclusively), so the probe never waits.
    pub(crate) fn note_failure(&self, db: &Database, failure: &StoreError) {
        probe(db, self.commit, failure, &self.broken);
    }

    /// False once [`Writer::shutdown`] has begun.
    pub(crate) fn is_open(&self) -> bool {
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Stops accepting jobs, lets the thread commit everything already queued, and waits.
    pub(crate) fn shutdown(&self) {
        drop(
            self.jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn run(
    db: &RwLock<Option<Database>>,
    commit: CommitMode,
    keys: &DataKeys,
    queue: &Receiver<Box<dyn Job>>,
    committed: &watch::Sender<u64>,
    broken: &watch::Sender<Option<StoreError>>,
) {
    // A job that must commit alone, received while a group was being gathered: it starts
    // the next group, of one.
    let mut held: Option<Box<dyn Job>> = None;
    loop {
        let first = match held.take() {
            Some(job) => job,
            None => match queue.recv() {
                Ok(job) => job,
                Err(_) => break,
            },
        };
        let mut group = vec![first];
        while !group[0].alone() && group.len() < MAX_JOBS_PER_COMMIT {
            match queue.try_recv() {
                Ok(job) if job.alone() => {
                    held = Some(job);
                    break;
                }
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        // The database is shared for the whole group: compaction and reopening, which need it
        // exclusively, wait until no write transaction is live.
        let database = db.read().unwrap_or_else(PoisonError::into_inner);
        let committed_ok = match (refused(broken), database.as_ref()) {
            (None, Some(database)) => commit_group(database, commit, keys, group, broken),
            (refusal, _) => {
                let refusal = refusal.unwrap_or(StoreError::Closed);
                for job in group {
                    job.finish(Some(&refusal));
                }
                false
            }
        };
        drop(database);
        if committed_ok {
            committed.send_modify(|count| *count += 1);
        }
    }
}

/// Commits an empty transaction, and if that fails too, remembers `failure` as the reason
/// every write is refused. Beginning one is not enough: after an I/O error redb still begins
/// transactions and refuses only when they write (the fault-injection tests found the
/// readiness probe answering ready then). `failure` rather than the probe's own error, which
/// is redb's `PreviousIo` and no longer says whether the disk is full.
fn probe(
    db: &Database,
    commit: CommitMode,
    failure: &StoreError,
    broken: &watch::Sender<Option<StoreError>>,
) {
    if begin(db, commit).and_then(|txn| Ok(txn.commit()?)).is_err() {
        broken.send_if_modified(|broken| {
            let first = broken.is_none();
            if first {
                *broken = Some(failure.clone());
            }
            first
        });
    }
}

/// The error that refuses a job while redb refuses every write.
fn refused(broken: &watch::Sender<Option<StoreError>>) -> Option<StoreError> {
    broken
        .borrow()
        .as_ref()
        .map(|cause| StoreError::WritesRefused {
            cause: Box::new(cause.clone()),
        })
}

/// Applies and commits a group, answers its jobs, and says whether the commit succeeded.
fn commit_group(
    db: &Database,
    commit: CommitMode,
    keys: &DataKeys,
    mut group: Vec<Box<dyn Job>>,
    broken: &watch::Sender<Option<StoreError>>,
) -> bool {
    let failure = apply_and_commit(db, commit, keys, &mut group).err();
    if let Some(failure) = &failure {
        // Before the replies: a caller told of the failure finds the readiness probe agreeing.
        probe(db, commit, failure, broken);
    }
    for job in group {
        job.finish(failure.as_ref());
    }
    failure.is_none()
}

fn apply_and_commit(
    db: &Database,
    commit: CommitMode,
    keys: &DataKeys,
    group: &mut [Box<dyn Job>],
) -> Result<()> {
    let txn = begin(db, commit)?;
    for job in group.iter_mut() {
        if let Some(err) = job.apply(&txn) {
            // Dropping the transaction aborts it; an explicit abort could only fail the same way.
            drop(txn);
            return Err(err);
        }
    }
    // The keys the group created reach the disk before the commit that names them, all in
    // one sync.
    keys.sync()?;
    txn.commit()?;
    Ok(())
}

/// Begins a write transaction that commits the way `commit` says. Every write transaction of
/// the store begins here, the one that initialises the file at start included, so no commit
/// is weaker than the configured mode. Durability stays redb's default, `Immediate`: `commit()`
/// returns only after `fsync`.
pub(crate) fn begin(db: &Database, commit: CommitMode) -> Result<WriteTransaction> {
    let mut txn = db.begin_write()?;
    match commit {
        CommitMode::QuickRepair => txn.set_quick_repair(true),
        CommitMode::TwoPhase => txn.set_two_phase_commit(true),
        CommitMode::SinglePhase => {}
    }
    Ok(txn)
}
