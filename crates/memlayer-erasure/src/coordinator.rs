//! The coordinator: runs erasure jobs, resumes the ones a crash interrupted, and compacts
//! the store file once per batch of erasures.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use memlayer_index::Recall;
use memlayer_memory::{FactCache, LongTermMemory};
use memlayer_store::{
    Access, Eraser, MessageKey, Store, StoreError, Timestamp, blocking, validate_id,
};

use crate::ErasureError;
use crate::job::{Counts, ErasureRequest, JobDocument, Receipt, Target};

/// How often a compaction is tried when reads keep the file busy before the job is left
/// pending for the next start (or the next erasure) to finish.
const COMPACTION_ATTEMPTS: usize = 3;

/// Sessions a purge or a user's erasure erases at once.
const SESSIONS_AT_ONCE: usize = 64;

/// How long a node's claim on a job lasts unless renewed ([`Eraser::claim_job`]): nodes
/// sharing a store leave a job to its holder for this long after its last renewal, so a job
/// whose node died is another's within this and [`ORPHANS_CHECKED_EVERY`].
const LEASE: Duration = Duration::from_secs(15);
/// How often a running job's lease is renewed: a third of it, so two missed renewals (a
/// slow database) still do not let it run out.
const RENEW_EVERY: Duration = Duration::from_secs(5);
/// How often the maintenance task looks for pending jobs nobody runs.
pub(crate) const ORPHANS_CHECKED_EVERY: Duration = Duration::from_secs(5);
/// How often an erasure whose job another node runs looks for its receipt.
const RECEIPT_POLL: Duration = Duration::from_millis(100);

/// What erasing one session removed.
struct ErasedSession {
    /// The session's surrogate key when this erasure deleted it; `None` when another erasure
    /// deleted it meanwhile (and takes it out of the indexes).
    deleted: Option<u64>,
    session_id: String,
    counts: Counts,
}

/// An erasure [`Coordinator::start`] recorded and runs in the background.
pub struct RunningErasure {
    id: u64,
    done: tokio::task::JoinHandle<Result<Receipt, ErasureError>>,
}

impl RunningErasure {
    /// The erasure's id, which its receipt will carry.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The erasure's outcome if it ends within `limit`; `None` if it is still running (it
    /// goes on, and so does a later call). A failed erasure stays pending: the maintenance
    /// pass finishes it.
    pub async fn outcome_within(
        &mut self,
        limit: std::time::Duration,
    ) -> Option<Result<Receipt, ErasureError>> {
        let joined = tokio::time::timeout(limit, &mut self.done).await.ok()?;
        Some(joined.map_err(ErasureError::Task).and_then(|r| r))
    }

    /// The erasure's outcome, however long it takes (dropping this does not stop it).
    pub async fn outcome(self) -> Result<Receipt, ErasureError> {
        self.done.await.map_err(ErasureError::Task)?
    }
}

/// Where an erasure stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Recorded and not finished: running, or pending until the maintenance pass or the
    /// next start finishes it.
    Running,
    /// Finished, with its receipt.
    Done(Box<Receipt>),
}

/// Runs erasures over one store and its indexes. Cheap to clone.
#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

struct Inner {
    /// The store's one eraser: every removal of text in this process goes through it.
    /// Invariant: a job is recorded (`record_job`) before its first removal and finished
    /// (`finish_job`, with the receipt) only after the last one and the compaction, so a
    /// crash in between leaves it pending for `resume`, whose steps are all idempotent.
    eraser: Eraser,
    /// Invariant: keys leave the indexes only after the store deleted them; a pipeline batch
    /// read before the deletion finds the erasure begun when it adds them, and adds only what
    /// the store still has, so none is put back (and no erasure waits for the pipeline).
    recall: Recall,
    /// Invariant: memories citing an erased session or message are forgotten after the store
    /// deleted it, when nothing can cite it any more.
    memories: LongTermMemory,
    /// Entity facts kept per session between turns, dropped with what they came from.
    facts: FactCache,
    /// Tickets handed to erasures waiting for a compaction, and (under the mutex) the last
    /// ticket a finished compaction covers: erasures that finish their deletions while a
    /// compaction runs share the next one instead of each running their own. Invariant: an
    /// erasure is acknowledged only once a compaction that started after its deletions
    /// committed has finished (`compacted >= its ticket`).
    tickets: AtomicU64,
    compacted: tokio::sync::Mutex<u64>,
    /// Jobs running in this process, which `resume` must leave to their runner: one job
    /// never runs twice at once.
    running: std::sync::Mutex<HashSet<u64>>,
    /// This coordinator's name in job leases: on a store several nodes share, a job runs
    /// where its lease is held (`run_leased`), once.
    holder: String,
    /// Erasures finished (receipt written) since this coordinator was made.
    finished: AtomicU64,
    /// Signalled when a run fails and leaves its job pending, so that the maintenance task
    /// retries it soon rather than at its next scheduled pass: a database that was restarted
    /// sends no signal of its own when it answers again.
    left_pending: tokio::sync::Notify,
}

/// Marks a job as running for as long as it lives.
struct Running<'a> {
    jobs: &'a std::sync::Mutex<HashSet<u64>>,
    id: u64,
}

impl<'a> Running<'a> {
    /// `None` when the job is already running.
    fn claim(jobs: &'a std::sync::Mutex<HashSet<u64>>, id: u64) -> Option<Self> {
        let mut running = jobs.lock().unwrap_or_else(PoisonError::into_inner);
        running.insert(id).then_some(Self { jobs, id })
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
    }
}

impl Coordinator {
    /// A coordinator erasing with the store's `eraser`, from the indexes of `recall`, from the
    /// long-term `memories` (both over that store) and from the context builder's `facts`,
    /// holding job leases as `holder` (see [`Eraser::claim_job`]): a name kept across
    /// restarts lets a restarted node resume its own interrupted jobs at once, where another
    /// node waits for their lease to run out.
    pub fn new(
        eraser: Eraser,
        recall: Recall,
        memories: LongTermMemory,
        facts: FactCache,
        holder: String,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                eraser,
                recall,
                memories,
                facts,
                tickets: AtomicU64::new(0),
                compacted: tokio::sync::Mutex::new(0),
                running: std::sync::Mutex::new(HashSet::new()),
                holder,
                finished: AtomicU64::new(0),
                left_pending: tokio::sync::Notify::new(),
            }),
        }
    }

    /// The store erasures run against.
    pub fn store(&self) -> &Store {
        self.inner.eraser.store()
    }

    /// Runs one erasure to its end and returns its receipt. The job is recorded first: if
    /// the process dies before the receipt is written, [`Coordinator::resume`] finishes it.
    /// It runs as a task of its own, so a caller that stops waiting (a request past its
    /// timeout, a dropped tool call) does not cut it off part-way. A session or message that
    /// does not exist (any more) is not an error for the job itself; callers that want `404`
    /// for an unknown session check first.
    pub async fn erase(&self, request: ErasureRequest) -> Result<Receipt, ErasureError> {
        self.start(request).await?.outcome().await
    }

    /// Runs job `id`, which this coordinator just recorded, to its receipt: here, or, should
    /// another node have taken it first, there.
    async fn run_recorded(&self, id: u64, document: &JobDocument) -> Result<Receipt, ErasureError> {
        match self.run_leased(id, document, false).await? {
            Some(receipt) => Ok(receipt),
            None => {
                self.receipt_from_elsewhere(&document.request.tenant, id)
                    .await
            }
        }
    }

    /// The receipt of job `id`, which another node took before this one claimed it (its
    /// maintenance pass found it pending between the record and the claim), or finished
    /// before this one (whose lease had run out): waits for it.
    async fn receipt_from_elsewhere(&self, tenant: &str, id: u64) -> Result<Receipt, ErasureError> {
        loop {
            if let Some(Status::Done(receipt)) =
                self.status(&Access::tenant_wide(tenant), id).await?
            {
                return Ok(*receipt);
            }
            tokio::time::sleep(RECEIPT_POLL).await;
        }
    }

    /// How many erasures this coordinator finished (their receipts written) since it was
    /// made: the erasure counter of the metrics.
    pub fn finished(&self) -> u64 {
        self.inner.finished.load(Ordering::Relaxed)
    }

    /// Resolves when a run failed and left its job pending (at once if one did since the
    /// last call), for the maintenance task.
    pub(crate) async fn left_pending(&self) {
        self.inner.left_pending.notified().await;
    }

    /// How many jobs run in this process now.
    pub(crate) fn running_here(&self) -> u64 {
        let running = self
            .inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        running.len() as u64
    }

    /// How many erasure jobs are recorded and not finished (a store read): running, or
    /// waiting for a retry.
    pub fn pending(&self) -> Result<u64, ErasureError> {
        Ok(self.inner.eraser.pending_job_count()?)
    }

    /// Records an erasure and runs it in the background: unlike [`Coordinator::erase`], it
    /// goes on when the caller stops waiting (a purge of many conversations can outlast an
    /// HTTP request). Its receipt is then found with [`Coordinator::status`].
    pub async fn start(&self, request: ErasureRequest) -> Result<RunningErasure, ErasureError> {
        let (id, document) = self.record(request).await?;
        let this = self.clone();
        let done = tokio::spawn(async move {
            let _running = Running::claim(&this.inner.running, id);
            this.run_recorded(id, &document).await
        });
        Ok(RunningErasure { id, done })
    }

    /// Where erasure `id` stands; `None` unless `access` reaches it: an erasure of its
    /// tenant, and for a user-scoped access one that acted for that user only.
    pub async fn status(&self, access: &Access, id: u64) -> Result<Option<Status>, ErasureError> {
        let eraser = self.inner.eraser.clone();
        let owner = access.tenant().to_owned();
        let reaches = |tenant: &str, user: Option<&str>| {
            tenant == access.tenant() && access.user().is_none_or(|own| user == Some(own))
        };
        let (receipt, pending) = blocking(move || -> Result<_, StoreError> {
            // The pending job first: a job leaves the pending ones in the commit that writes
            // its receipt and never comes back, so one not pending at the first lookup has
            // its receipt by the second, or never existed.
            let pending = eraser.pending_job(id)?;
            let receipt = match pending {
                Some(_) => None,
                None => eraser.receipt(&owner, id)?,
            };
            Ok((receipt, pending))
        })
        .await?;
        if let Some(receipt) = receipt {
            let receipt = decode_receipt(receipt)?;
            return Ok(reaches(&receipt.tenant, receipt.user_id.as_deref())
                .then(|| Status::Done(Box::new(receipt))));
        }
        let Some(document) = pending else {
            return Ok(None);
        };
        let document: JobDocument =
            serde_json::from_value(document).map_err(|err| ErasureError::UnreadableJob {
                id,
                reason: err.to_string(),
            })?;
        let request = &document.request;
        Ok(reaches(&request.tenant, request.user_id.as_deref()).then_some(Status::Running))
    }

    /// Checks `request` and records it as a pending job.
    async fn record(&self, request: ErasureRequest) -> Result<(u64, JobDocument), ErasureError> {
        validate(&request)?;
        let document = JobDocument {
            request,
            requested_at: Timestamp::now().as_micros(),
        };
        let value = serde_json::to_value(&document).map_err(ErasureError::Encode)?;
        let id = self.inner.eraser.record_job(value).await?;
        Ok((id, document))
    }

    /// Finishes every job a crash left pending, oldest first. Run it at start, before
    /// serving.
    pub async fn resume(&self) -> Result<Vec<Receipt>, ErasureError> {
        let eraser = self.inner.eraser.clone();
        let pending = blocking(move || eraser.pending_jobs()).await?;
        let mut receipts = Vec::new();
        for job in pending {
            let Some(_running) = Running::claim(&self.inner.running, job.id) else {
                continue;
            };
            let document: JobDocument = serde_json::from_value(job.document).map_err(|err| {
                ErasureError::UnreadableJob {
                    id: job.id,
                    reason: err.to_string(),
                }
            })?;
            if let Some(receipt) = self.run_leased(job.id, &document, true).await? {
                receipts.push(receipt);
            }
        }
        Ok(receipts)
    }

    /// A tenant's receipts, newest first.
    pub async fn receipts(&self, tenant: &str, limit: usize) -> Result<Vec<Receipt>, ErasureError> {
        let eraser = self.inner.eraser.clone();
        let tenant = tenant.to_owned();
        let values = blocking(move || eraser.receipts(&tenant, limit)).await?;
        values.into_iter().map(decode_receipt).collect()
    }

    /// Runs the recorded job `id` to its end under this node's lease, renewed while it runs;
    /// `None` when another node's lease on it is live (that node runs it). A failure leaves
    /// it pending ([`ErasureError::Pending`]).
    async fn run_leased(
        &self,
        id: u64,
        document: &JobDocument,
        resumed: bool,
    ) -> Result<Option<Receipt>, ErasureError> {
        let pending = |source: ErasureError| {
            self.inner.left_pending.notify_one();
            ErasureError::Pending {
                id,
                source: Box::new(source),
            }
        };
        let eraser = &self.inner.eraser;
        let holder = self.inner.holder.as_str();
        if !eraser
            .claim_job(id, holder, LEASE)
            .await
            .map_err(|err| pending(err.into()))?
        {
            return Ok(None);
        }
        if resumed {
            tracing::info!(job = id, "resuming an interrupted erasure");
        }
        let renewing = async {
            loop {
                tokio::time::sleep(RENEW_EVERY).await;
                // A failed renewal is retried at the next; should the lease run out
                // meanwhile, another node may run the job beside this one: its steps are
                // idempotent, and the first to finish writes the one receipt.
                if let Err(err) = eraser.claim_job(id, holder, LEASE).await {
                    tracing::warn!(job = id, error = %err.for_log(), "renewing an erasure's lease failed");
                }
            }
        };
        tokio::select! {
            outcome = self.run_steps(id, document, resumed) => outcome.map(Some).map_err(pending),
            never = renewing => never,
        }
    }

    async fn run_steps(
        &self,
        id: u64,
        document: &JobDocument,
        resumed: bool,
    ) -> Result<Receipt, ErasureError> {
        let mut receipt = Receipt::begin(id, document, resumed);
        let tenant = document.request.tenant.as_str();
        let access = document.request.access();
        let mut erased_message = None;
        // Surrogate keys of the sessions this run deleted, for the indexes.
        let mut erased_sessions = Vec::new();
        match &document.request.target {
            Target::Message { session_id, index } => {
                let eraser = self.inner.eraser.clone();
                let owner = {
                    let (access, session_id) = (access.clone(), session_id.clone());
                    blocking(move || eraser.store().sessions().session(&access, &session_id))
                        .await?
                };
                if owner.is_some() {
                    // The session memories it was merged into, the runs' text and the
                    // idempotency digest go in the transaction that erases the message.
                    let erased = self
                        .inner
                        .eraser
                        .erase_message(&access, session_id, *index)
                        .await?;
                    receipt.counts.messages += u64::from(erased.message);
                    receipt.counts.vectors += u64::from(erased.vector);
                    receipt.counts.summaries += u64::from(erased.summary);
                    receipt.counts.session_memories += erased.session_memories;
                    receipt.counts.runs_redacted += erased.runs_redacted;
                    // After the message left the store, so no memory can cite it any more.
                    receipt.counts.memories += self
                        .inner
                        .memories
                        .forget_derived_from(&self.inner.eraser, tenant, session_id, Some(*index))
                        .await?;
                    let key = MessageKey::new(erased.sid, *index);
                    self.inner.recall.forget_message(tenant, key).await?;
                    erased_message = Some(key);
                }
            }
            Target::Session { session_id } => {
                erased_sessions.extend(
                    self.erase_sessions(&access, vec![session_id.clone()], &mut receipt)
                        .await?,
                );
            }
            Target::Memory { memory_id } => {
                let forgotten = self
                    .inner
                    .memories
                    .forget(&self.inner.eraser, tenant, *memory_id)
                    .await?;
                receipt.counts.memories += u64::from(forgotten);
            }
            Target::Episode { episode_id } => {
                let deleted = self
                    .inner
                    .eraser
                    .delete_episode(tenant, *episode_id)
                    .await?;
                receipt.counts.episodes += u64::from(deleted);
            }
            Target::User { user_id } => loop {
                // Sessions the user starts while the erasure runs are erased too.
                let eraser = self.inner.eraser.clone();
                let (owner_tenant, user) = (tenant.to_owned(), user_id.clone());
                let ids = blocking(move || eraser.user_session_ids(&owner_tenant, &user)).await?;
                receipt.counts.memories += self
                    .inner
                    .memories
                    .forget_user(&self.inner.eraser, tenant, user_id)
                    .await?;
                receipt.counts.session_memories += self
                    .inner
                    .eraser
                    .drop_session_memories(tenant, user_id, None)
                    .await?;
                receipt.counts.episodes += self
                    .inner
                    .eraser
                    .delete_user_episodes(tenant, user_id, None)
                    .await?;
                if ids.is_empty() {
                    break;
                }
                erased_sessions.extend(self.erase_sessions(&access, ids, &mut receipt).await?);
            },
            Target::InactiveSince { cutoff, .. } => {
                let eraser = self.inner.eraser.clone();
                let owner_tenant = tenant.to_owned();
                let cutoff = Timestamp::from_micros(*cutoff);
                let ids = blocking(move || eraser.sessions_inactive_before(&owner_tenant, cutoff))
                    .await?;
                erased_sessions.extend(self.erase_sessions(&access, ids, &mut receipt).await?);
            }
        }
        if resumed {
            // A crash between deleting a session (or a message) and the memories citing it
            // left citations of something no longer stored; this run no longer knows which.
            receipt.counts.memories += self
                .inner
                .memories
                .forget_orphaned(&self.inner.eraser)
                .await?;
            // And may have come between a commit and the destruction of the key it retired.
            self.inner.eraser.destroy_orphaned_keys().await?;
        }

        match &document.request.target {
            Target::Message { session_id, .. } | Target::Session { session_id } => {
                self.inner.facts.forget_session(tenant, session_id);
            }
            Target::User { user_id } => self.inner.facts.forget_user(tenant, user_id),
            Target::InactiveSince { .. } => self.inner.facts.clear(),
            Target::Memory { .. } | Target::Episode { .. } => {}
        }
        // The erased sessions leave the indexes once, here: one compaction and one snapshot
        // for the whole erasure, however many sessions. Until then a recall may find an
        // erased message in the index but not in the store, and skips it. A job that erases
        // sessions always rewrites the snapshot, even when a resumed run finds them already
        // gone, so no snapshot keeps their vectors. No waiting for the embedding backlog: a
        // batch the pipeline read before the deletions adds only what the store still has.
        let erases_sessions = matches!(
            document.request.target,
            Target::Session { .. } | Target::User { .. } | Target::InactiveSince { .. }
        );
        if erases_sessions && resumed {
            // By what the indexes hold: a resumed job finds the sessions it deleted before
            // the crash gone from the store and no longer knows their keys, yet a snapshot
            // saved before the crash may still hold their vectors. Only then is the scan of
            // every indexed key worth its cost.
            self.inner.recall.forget_deleted_sessions(tenant).await?;
        } else if erases_sessions {
            self.inner
                .recall
                .forget_sessions(tenant, erased_sessions)
                .await?;
        }
        if let Some(key) = erased_message {
            self.inner.recall.forget_message(tenant, key).await?;
        }
        self.compact().await?;
        // On a database several nodes share: the other live nodes took it out of theirs.
        self.inner.recall.wait_for_followers().await?;

        receipt.completed_at = Timestamp::now().as_micros();
        let value = serde_json::to_value(&receipt).map_err(ErasureError::Encode)?;
        if !self.inner.eraser.finish_job(id, tenant, value).await? {
            // Another node finished it first (this node's lease had run out): its receipt is
            // the job's one.
            return self.receipt_from_elsewhere(tenant, id).await;
        }
        self.inner.finished.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            job = id,
            sessions = receipt.counts.sessions,
            messages = receipt.counts.messages,
            "erasure complete"
        );
        Ok(receipt)
    }

    /// Erases the sessions `ids` of `tenant`, [`SESSIONS_AT_ONCE`] at a time, adding what
    /// they held to `receipt` (in the order of `ids`), and returns the surrogate keys of
    /// those it deleted. Sessions are independent of each other, so their reads and the
    /// long-term memories they drop are worked on concurrently while their deletions queue
    /// for the writer (each commits alone: erasing writes never share a commit).
    async fn erase_sessions(
        &self,
        access: &Access,
        ids: Vec<String>,
        receipt: &mut Receipt,
    ) -> Result<Vec<u64>, ErasureError> {
        let mut ids = ids.into_iter().enumerate().peekable();
        let mut done = Vec::new();
        while ids.peek().is_some() {
            let mut batch = tokio::task::JoinSet::new();
            for (position, session_id) in ids.by_ref().take(SESSIONS_AT_ONCE) {
                let (this, access) = (self.clone(), access.clone());
                batch.spawn(async move {
                    let erased = this.erase_session(&access, &session_id).await;
                    (position, erased)
                });
            }
            // An error drops the set, which cancels the rest; the job stays pending and is
            // finished by `resume`, as after a crash.
            while let Some(joined) = batch.join_next().await {
                let (position, session) = joined.map_err(ErasureError::Task)?;
                if let Some(session) = session? {
                    done.push((position, session));
                }
            }
        }
        done.sort_unstable_by_key(|(position, _)| *position);
        let mut sids = Vec::new();
        for (_, session) in done {
            receipt.counts.add(&session.counts);
            if let Some(sid) = session.deleted {
                receipt.session_ids.push(session.session_id);
                sids.push(sid);
            }
        }
        Ok(sids)
    }

    /// Deletes a session with everything it owns from the store; `None` when it was already
    /// gone. The caller takes it out of the recall indexes, once for all the sessions.
    async fn erase_session(
        &self,
        access: &Access,
        session_id: &str,
    ) -> Result<Option<ErasedSession>, ErasureError> {
        let tenant = access.tenant();
        let (reach, id) = (access.clone(), session_id.to_owned());
        let before = self
            .inner
            .eraser
            .store()
            .read(move |store| -> Result<_, StoreError> {
                let sessions = store.sessions();
                let session = sessions.session(&reach, &id)?;
                let summary = sessions.summary(&reach, &id).ok().flatten();
                Ok(session.map(|_| summary.is_some()))
            })
            .await?;
        let Some(summary) = before else {
            return Ok(None);
        };
        let mut counts = Counts {
            sessions: 1,
            summaries: u64::from(summary),
            ..Counts::default()
        };
        // The episodes drawn from the session and the session memories it was merged into go
        // in the commit that deletes it, so none recorded meanwhile survives.
        let deleted = match self.inner.eraser.delete_session(access, session_id).await {
            Ok(deleted) => {
                counts.messages = deleted.messages;
                counts.episodes = deleted.episodes;
                counts.session_memories = deleted.session_memories;
                Some(deleted.sid)
            }
            // Another erasure deleted it meanwhile and counts it; what this one removed
            // before that still counts here.
            Err(StoreError::SessionNotFound { .. }) => {
                counts.sessions = 0;
                counts.summaries = 0;
                None
            }
            Err(err) => return Err(err.into()),
        };
        // The memories citing it, whoever they are about, once it left the store: from then
        // on no memory can cite it (a remember checks its source in the saving transaction).
        counts.memories = self
            .inner
            .memories
            .forget_derived_from(&self.inner.eraser, tenant, session_id, None)
            .await?;
        Ok(Some(ErasedSession {
            deleted,
            session_id: session_id.to_owned(),
            counts,
        }))
    }

    /// Compacts the store file after this erasure's deletions, unless a compaction that
    /// started after them already ran.
    async fn compact(&self) -> Result<(), ErasureError> {
        let ticket = self.inner.tickets.fetch_add(1, Ordering::SeqCst) + 1;
        let mut compacted = self.inner.compacted.lock().await;
        if *compacted >= ticket {
            return Ok(());
        }
        // Every ticket handed out so far belongs to an erasure whose deletions committed
        // before this compaction starts.
        let covers = self.inner.tickets.load(Ordering::SeqCst);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let eraser = self.inner.eraser.clone();
            match blocking(move || eraser.compact()).await {
                Ok(_) => break,
                Err(StoreError::Busy(reason)) if attempt < COMPACTION_ATTEMPTS => {
                    tracing::warn!(%reason, attempt, "compaction postponed");
                }
                Err(err) => return Err(err.into()),
            }
        }
        *compacted = covers;
        Ok(())
    }
}

fn decode_receipt(value: serde_json::Value) -> Result<Receipt, ErasureError> {
    serde_json::from_value(value).map_err(|err| {
        ErasureError::Store(StoreError::Corrupted {
            what: "erasure receipt",
            detail: err.to_string(),
        })
    })
}

fn validate(request: &ErasureRequest) -> Result<(), ErasureError> {
    validate_id("tenant", &request.tenant)?;
    match &request.target {
        Target::Message { session_id, .. } | Target::Session { session_id } => {
            validate_id("session_id", session_id)?;
        }
        Target::User { user_id } => validate_id("user_id", user_id)?,
        Target::Memory { .. } | Target::Episode { .. } | Target::InactiveSince { .. } => {}
    }
    Ok(())
}
