//! What forgetting needs from storage: removing one message and what is stored beside it,
//! finding the sessions a user or a retention rule selects, and durable jobs with their
//! receipts, so an erasure interrupted by a crash finishes after the restart.
//!
//! The store does not decide what an erasure covers or in which order its steps run (the
//! erasure coordinator does); it offers idempotent steps. Jobs and receipts are JSON
//! documents the coordinator defines; the store only keeps them.

use std::collections::HashSet;
use std::time::Duration;

use redb::{ReadableTable, ReadableTableMetadata, WriteTransaction};
use serde_json::Value;

use crate::data_keys::{DataKeys, KeyOwner};
use crate::ids::{next_seq, random_id, unused_id};
use crate::model::{Access, MAX_MESSAGES_PER_SESSION, Timestamp, validate_id};
use crate::record::{ERASED_DIGEST, IdempotencyRecord, Record, RunRecord, SessionRecord};
use crate::sealing::{KeyRef, Sealer, rewrite_session, summary_range};
use crate::sessions::read_session_record;
use crate::store::{Eraser, Freed, Sessions, Tenants, wait};
use crate::tables::{
    ERASURE_IDS, ERASURE_JOBS, ERASURE_RECEIPT_SEQS, ERASURE_RECEIPTS, IDEMPOTENCY, MESSAGES,
    NEXT_JOB_SEQ_KEY, RETENTION, RUNS, SESSION_ACTIVITY, SESSION_COUNTS, SESSION_KEYS, SESSIONS,
    SUMMARIES, VECTORS, scope,
};
use crate::{Result, Store, StoreError};

/// What erasing one message removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageErased {
    /// The session's surrogate key, for removing the message from indexes.
    pub sid: u64,
    /// Whether the message was still stored (false: it was erased before).
    pub message: bool,
    /// Whether its vector was stored.
    pub vector: bool,
    /// Whether the session's summary covered it and was dropped.
    pub summary: bool,
    /// The session memories the session was merged into, dropped (merged again from what
    /// remains when the session next ends).
    pub session_memories: u64,
    /// The session's runs whose free text was dropped (see [`crate::Run::redacted`]).
    pub runs_redacted: u64,
}

impl MessageErased {
    /// The checks before erasing message `index` of a session, which every backend makes.
    pub fn check_request(access: &Access, session_id: &str, index: u64) -> Result<()> {
        access.check_session(session_id)?;
        if index >= MAX_MESSAGES_PER_SESSION {
            return Err(StoreError::InvalidInput {
                field: "index",
                reason: format!("must be below {MAX_MESSAGES_PER_SESSION}"),
            });
        }
        Ok(())
    }
}

/// A tenant's conversations at a glance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationStats {
    /// Sessions stored.
    pub total: u64,
    /// The session with the oldest last activity, and that activity's time.
    pub oldest: Option<(String, Timestamp)>,
}

/// A durable job as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredJob {
    /// Its id: random (it says nothing about other erasures), below 2^53, never reused.
    pub id: u64,
    /// The coordinator's description of it.
    pub document: Value,
}

/// Drops the free text of every run of session `sid`; returns how many runs had any.
///
/// The runs are taken out with one range removal and put back redacted: a redb page this
/// transaction already changed is edited in place, and shrinking one value after another
/// there would leave the old text in the page's slack (see `Store::write_alone`).
fn redact_runs(txn: &WriteTransaction, sid: u64) -> Result<u64> {
    let mut runs = txn.open_table(RUNS)?;
    let mut redacted = Vec::new();
    for entry in runs.range((sid, 0)..(sid + 1, 0))? {
        let (key, value) = entry?;
        let mut record = RunRecord::decode(value.value())?;
        if record.redact() {
            redacted.push((key.value().1, record));
        }
    }
    if let (Some((first, _)), Some((last, _))) = (redacted.first(), redacted.last()) {
        let doomed: HashSet<u64> = redacted.iter().map(|(seq, _)| *seq).collect();
        runs.retain_in((sid, *first)..=(sid, *last), |(_, seq), _| {
            !doomed.contains(&seq)
        })?;
        for (seq, record) in &redacted {
            runs.insert((sid, *seq), record.encode().as_slice())?;
        }
    }
    Ok(redacted.len() as u64)
}

/// Replaces the request digest of the idempotent appends of session `sid` that stored
/// message `index` with [`ERASED_DIGEST`].
fn forget_digests(txn: &WriteTransaction, sid: u64, index: u64) -> Result<()> {
    let mut table = txn.open_table(IDEMPOTENCY)?;
    let mut covering = Vec::new();
    for entry in table.range((sid, "")..(sid + 1, ""))? {
        let (key, value) = entry?;
        let record = IdempotencyRecord::decode(value.value())?;
        let stored = record.first_index..record.first_index + record.count;
        if stored.contains(&index) && record.request_digest != ERASED_DIGEST {
            covering.push((key.value().1.to_owned(), record));
        }
    }
    for (key, mut record) in covering {
        record.request_digest = ERASED_DIGEST;
        table.insert((sid, key.as_str()), record.encode().as_slice())?;
    }
    Ok(())
}

/// Seals every value session `record` keeps under a new data key, created (and synced) in the
/// key file before this transaction commits, after message erasure removed one: what the old
/// key sealed, wherever its bytes are left, is noise once the caller destroys it after the
/// commit. The runs' free text is dropped on the way (as [`redact_runs`] does, and for the
/// same reason), and every idempotency digest is forgotten (each was keyed with the old key;
/// see [`forget_digests`]). Returns how many runs had free text.
fn reseal(
    txn: &WriteTransaction,
    keys: &DataKeys,
    record: &mut SessionRecord,
    old: KeyRef,
) -> Result<u64> {
    let sid = record.sid;
    let generation = old.generation.checked_add(1).ok_or_else(|| {
        StoreError::Conflict("the session was re-keyed as often as it can be".into())
    })?;
    let (slot, data_key) = keys
        .create(&[KeyOwner { sid, generation }])?
        .pop()
        .expect("one key for one owner");
    let new = KeyRef { slot, generation };
    let redacted = rewrite_session(txn, keys, sid, &Sealer::new(sid, new, data_key), true)?;
    forget_session_digests(txn, sid)?;
    record.key = Some(new);
    Ok(redacted)
}

/// Replaces the request digest of every idempotent append of session `sid` with
/// [`ERASED_DIGEST`]: the digests were keyed with a key the session no longer has.
pub(crate) fn forget_session_digests(txn: &WriteTransaction, sid: u64) -> Result<()> {
    let mut digests = txn.open_table(IDEMPOTENCY)?;
    let forgotten = digests
        .range((sid, "")..(sid + 1, ""))?
        .map(|entry| {
            let (key, value) = entry?;
            let mut record = IdempotencyRecord::decode(value.value())?;
            record.request_digest = ERASED_DIGEST;
            Ok((key.value().1.to_owned(), record))
        })
        .collect::<Result<Vec<_>>>()?;
    for (key, record) in forgotten {
        digests.insert((sid, key.as_str()), record.encode().as_slice())?;
    }
    Ok(())
}

impl Store {
    /// [`Store::record_job`] with ids from `draw` (tests force collisions with it).
    pub(crate) async fn record_job_drawing(
        &self,
        document: Value,
        draw: impl FnMut() -> Result<u64> + Send + 'static,
    ) -> Result<u64> {
        let bytes = serde_json::to_vec(&document).map_err(|err| StoreError::InvalidInput {
            field: "job",
            reason: err.to_string(),
        })?;
        self.write(move |txn| {
            // Against every id ever issued, not only the pending ones: a finished job's id
            // names its receipt for good.
            let mut ids = txn.open_table(ERASURE_IDS)?;
            let id = unused_id(draw, |id| Ok(ids.get(id)?.is_some()))?;
            ids.insert(id, next_seq(txn, NEXT_JOB_SEQ_KEY)?)?;
            txn.open_table(ERASURE_JOBS)?.insert(id, bytes.as_slice())?;
            Ok(id)
        })
        .await
    }
}

impl Eraser {
    /// Erases message `index` of a session, in one transaction with everything stored beside
    /// it or made from it: its vector; the session's summary if that covers it (regenerated
    /// from what remains the next time a context overflows); the user's session memories the
    /// session was merged into; the free text of the session's runs; and the digest of the
    /// idempotent append that stored it (a replay of that key then answers its first result
    /// whatever its body, so the key cannot confirm a guess of the erased text). It counts
    /// the erasure in the session ([`SessionSnapshot::erasures`](crate::SessionSnapshot::erasures)),
    /// so derived data computed from an earlier read is refused. Idempotent: erasing an
    /// erased message changes nothing. The session keeps its other messages and their
    /// indices.
    pub async fn erase_message(
        &self,
        access: &Access,
        session_id: &str,
        index: u64,
    ) -> Result<MessageErased> {
        if let Some(backend) = self.store.backend() {
            return backend
                .eraser()
                .erase_message(access, session_id, index)
                .await;
        }
        MessageErased::check_request(access, session_id, index)?;
        let (access, session_id) = (access.clone(), session_id.to_owned());
        let keys = self.store.data_keys()?;
        let (erased, retired) = self
            .store
            .erase_alone(move |txn| {
                let mut sessions = txn.open_table(SESSIONS)?;
                let mut record = read_session_record(&sessions, &access, &session_id)?
                    .ok_or_else(|| StoreError::session_not_found(&session_id))?;
                let sid = record.sid;
                let message = txn.open_table(MESSAGES)?.remove((sid, index))?.is_some();
                let vector = txn.open_table(VECTORS)?.remove((sid, index))?.is_some();
                if vector {
                    crate::embeddings::bump_vectors_version(txn)?;
                }
                let session_memories = crate::session_memory::remove_session_memories(
                    txn,
                    access.tenant(),
                    &record.user_id,
                    Some(&session_id),
                )?;
                let covers = txn
                    .open_table(SUMMARIES)?
                    .get(sid)?
                    .map(|value| summary_range(value.value()))
                    .transpose()?
                    .is_some_and(|(first, last)| (first..=last).contains(&index));
                if covers {
                    txn.open_table(SUMMARIES)?.remove(sid)?;
                }
                let (runs_redacted, retired) = match (record.key, message) {
                    (Some(old), true) => {
                        let redacted = reseal(txn, &keys, &mut record, old)?;
                        (redacted, Some(old))
                    }
                    // Erased before: the re-key then already redacted and forgot.
                    (Some(_), false) => (0, None),
                    (None, _) => {
                        let redacted = redact_runs(txn, sid)?;
                        forget_digests(txn, sid, index)?;
                        (redacted, None)
                    }
                };
                if message {
                    // Whoever read the session before must not trust that read any more.
                    record.erased += 1;
                    sessions.insert(
                        (access.tenant(), session_id.as_str()),
                        record.encode().as_slice(),
                    )?;
                }
                let erased = MessageErased {
                    sid,
                    message,
                    vector,
                    summary: covers,
                    session_memories,
                    runs_redacted,
                };
                // A session memory is plain text; so is all of a session stored before the
                // file sealed (no key), and whatever a message erased before left.
                let freed = if retired.is_some() && session_memories == 0 {
                    Freed::Sealed
                } else {
                    Freed::PlainText
                };
                Ok(((erased, retired), freed))
            })
            .await?;
        if let Some(old) = retired {
            // Committed: every value of the session is sealed under the new key now; the old
            // one goes at the compaction that ends the erasure, once earlier reads are over.
            self.store.retire_key(old.slot, old.owner(erased.sid))?;
        }
        Ok(erased)
    }

    /// Destroys every data key no session names, and returns how many: a crash between an
    /// erasure's commit and the destruction of the key it retired left one, as did a crash
    /// between a key's creation and the commit that was to name it. A resumed erasure runs it.
    pub async fn destroy_orphaned_keys(&self) -> Result<u64> {
        if self.store.backend().is_some() {
            return Ok(0);
        }
        let keys = self.store.data_keys()?;
        // On the writer thread: every key a write creates is named in that write's
        // transaction, which this one sees or follows.
        self.store
            .write(move |txn| {
                let names = txn.open_table(SESSION_KEYS)?;
                let sessions = txn.open_table(SESSIONS)?;
                let mut orphans = Vec::new();
                for (slot, owner) in keys.owners()? {
                    let named = match names.get(owner.sid)? {
                        Some(name) => {
                            let (tenant, session_id) = name.value();
                            let all = Access::tenant_wide(tenant);
                            read_session_record(&sessions, &all, session_id)?
                                .and_then(|record| record.key)
                                == Some(KeyRef {
                                    slot,
                                    generation: owner.generation,
                                })
                        }
                        None => false,
                    };
                    if !named {
                        orphans.push((slot, owner));
                    }
                }
                keys.destroy(&orphans)?;
                Ok(orphans.len() as u64)
            })
            .await
    }

    /// Ids of every session of a user in a tenant.
    pub fn user_session_ids(&self, tenant: &str, user_id: &str) -> Result<Vec<String>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.eraser().user_session_ids(tenant, user_id));
        }
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        let txn = self.store.begin_read()?;
        let user = scope(Some(user_id), None);
        crate::activity::session_ids(&txn.open_table(SESSION_ACTIVITY)?, (tenant, user.as_str()))
    }

    /// Ids of every session of a tenant whose last activity is before `cutoff`, oldest
    /// first.
    pub fn sessions_inactive_before(&self, tenant: &str, cutoff: Timestamp) -> Result<Vec<String>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.eraser().sessions_inactive_before(tenant, cutoff));
        }
        validate_id("tenant", tenant)?;
        let txn = self.store.begin_read()?;
        let all = scope(None, None);
        Ok(crate::activity::active_before(
            &txn.open_table(SESSION_ACTIVITY)?,
            &txn.open_table(SESSIONS)?,
            (tenant, all.as_str()),
            cutoff.as_micros(),
        )?
        .into_iter()
        .map(|(_, session_id)| session_id)
        .collect())
    }

    /// Records a job durably and returns its id. Record it before the first step runs, so a
    /// crash in the middle leaves it pending.
    pub async fn record_job(&self, document: Value) -> Result<u64> {
        if let Some(backend) = self.store.backend() {
            return backend.eraser().record_job(document).await;
        }
        self.store.record_job_drawing(document, random_id).await
    }

    /// How many jobs are recorded and not finished (a gauge for metrics).
    pub fn pending_job_count(&self) -> Result<u64> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.eraser().pending_job_count());
        }
        Ok(self.store.begin_read()?.open_table(ERASURE_JOBS)?.len()?)
    }

    /// Jobs recorded and not finished, oldest (first recorded) first.
    pub fn pending_jobs(&self) -> Result<Vec<StoredJob>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.eraser().pending_jobs());
        }
        let txn = self.store.begin_read()?;
        let jobs = txn.open_table(ERASURE_JOBS)?;
        let ids = txn.open_table(ERASURE_IDS)?;
        let mut pending = jobs
            .iter()?
            .map(|entry| {
                let (id, value) = entry?;
                let id = id.value();
                let job = StoredJob {
                    id,
                    document: decode_json("erasure job", value.value())?,
                };
                let seq = job_seq(&ids, id)?.ok_or_else(|| StoreError::Corrupted {
                    what: "erasure ids",
                    detail: format!("pending erasure {id} was never recorded"),
                })?;
                Ok((seq, job))
            })
            .collect::<Result<Vec<_>>>()?;
        pending.sort_unstable_by_key(|(seq, _)| *seq);
        Ok(pending.into_iter().map(|(_, job)| job).collect())
    }

    /// Whether `holder` may run job `id` now, taking (or renewing) its lease for `lease`:
    /// `false` once it finished, or while another holder's lease is live. Nodes sharing a
    /// store run each job once this way, and a job whose holder died is another's once its
    /// lease ran out. A redb file is held by one process, whose coordinator runs a job once
    /// by itself: here a job is claimable while it is pending.
    pub async fn claim_job(&self, id: u64, holder: &str, lease: Duration) -> Result<bool> {
        if let Some(backend) = self.store.backend() {
            return backend.eraser().claim_job(id, holder, lease).await;
        }
        let eraser = self.clone();
        crate::blocking(move || Ok(eraser.pending_job(id)?.is_some())).await
    }

    /// Ends job `id` and keeps its receipt under `tenant`, in one commit: a job is either
    /// pending or has a receipt, never both or neither. Answers `false`, keeping the first
    /// receipt, when the job had finished already (a holder whose lease ran out finishing
    /// after another node did): a job has exactly one receipt.
    pub async fn finish_job(&self, id: u64, tenant: &str, receipt: Value) -> Result<bool> {
        if let Some(backend) = self.store.backend() {
            return backend.eraser().finish_job(id, tenant, receipt).await;
        }
        validate_id("tenant", tenant)?;
        let bytes = serde_json::to_vec(&receipt).map_err(|err| StoreError::InvalidInput {
            field: "receipt",
            reason: err.to_string(),
        })?;
        let tenant = tenant.to_owned();
        self.store
            .write(move |txn| {
                let seq = job_seq(&txn.open_table(ERASURE_IDS)?, id)?.ok_or_else(|| {
                    StoreError::InvalidInput {
                        field: "job",
                        reason: format!("erasure {id} was never recorded"),
                    }
                })?;
                if txn.open_table(ERASURE_JOBS)?.remove(id)?.is_none() {
                    return Ok(false);
                }
                txn.open_table(ERASURE_RECEIPTS)?
                    .insert((tenant.as_str(), id), bytes.as_slice())?;
                txn.open_table(ERASURE_RECEIPT_SEQS)?
                    .insert((tenant.as_str(), seq), id)?;
                Ok(true)
            })
            .await
    }

    /// A tenant's erasure receipts, newest (last recorded) first, at most `limit`.
    pub fn receipts(&self, tenant: &str, limit: usize) -> Result<Vec<Value>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.eraser().receipts(tenant, limit));
        }
        validate_id("tenant", tenant)?;
        let txn = self.store.begin_read()?;
        let order = txn.open_table(ERASURE_RECEIPT_SEQS)?;
        let receipts = txn.open_table(ERASURE_RECEIPTS)?;
        order
            .range((tenant, 0)..=(tenant, u64::MAX))?
            .rev()
            .take(limit)
            .map(|entry| {
                let id = entry?.1.value();
                let receipt = receipts
                    .get((tenant, id))?
                    .ok_or_else(|| StoreError::Corrupted {
                        what: "erasure receipts",
                        detail: format!("receipt {id} is listed but not stored"),
                    })?;
                decode_json("erasure receipt", receipt.value())
            })
            .collect()
    }

    /// Job `id` while it is pending: its document, whatever its tenant.
    pub fn pending_job(&self, id: u64) -> Result<Option<Value>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.eraser().pending_job(id));
        }
        let txn = self.store.begin_read()?;
        let jobs = txn.open_table(ERASURE_JOBS)?;
        jobs.get(id)?
            .map(|value| decode_json("erasure job", value.value()))
            .transpose()
    }

    /// The receipt of job `id` of `tenant`, once it finished.
    pub fn receipt(&self, tenant: &str, id: u64) -> Result<Option<Value>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.eraser().receipt(tenant, id));
        }
        validate_id("tenant", tenant)?;
        let txn = self.store.begin_read()?;
        let receipts = txn.open_table(ERASURE_RECEIPTS)?;
        receipts
            .get((tenant, id))?
            .map(|value| decode_json("erasure receipt", value.value()))
            .transpose()
    }
}

impl Tenants<'_> {
    /// How many sessions a tenant has and which was active least recently.
    pub fn conversation_stats(self, tenant: &str) -> Result<ConversationStats> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.tenants().conversation_stats(tenant));
        }
        validate_id("tenant", tenant)?;
        let all = scope(None, None);
        let txn = self.store.begin_read()?;
        let total = txn
            .open_table(SESSION_COUNTS)?
            .get((tenant, all.as_str()))?
            .map_or(0, |count| count.value());
        let activity = txn.open_table(SESSION_ACTIVITY)?;
        let sessions = txn.open_table(SESSIONS)?;
        let oldest = crate::activity::oldest(&activity, &sessions, (tenant, all.as_str()))?
            .map(|(at, session_id)| (session_id, Timestamp::from_micros(at)));
        Ok(ConversationStats { total, oldest })
    }

    /// Sets (or with `None` removes) a tenant's conversation retention in days.
    pub async fn set_retention(self, tenant: &str, days: Option<u32>) -> Result<()> {
        if let Some(backend) = self.store.backend() {
            return backend.tenants().set_retention(tenant, days).await;
        }
        validate_id("tenant", tenant)?;
        let tenant = tenant.to_owned();
        self.store
            .write(move |txn| {
                let mut table = txn.open_table(RETENTION)?;
                match days {
                    Some(days) => {
                        let last_run = table.get(tenant.as_str())?.map_or(0, |v| v.value().1);
                        table.insert(tenant.as_str(), (days, last_run))?;
                    }
                    None => {
                        table.remove(tenant.as_str())?;
                    }
                }
                Ok(())
            })
            .await
    }

    /// Every tenant's retention: `(tenant, days, last run)`.
    pub fn retention_rules(self) -> Result<Vec<(String, u32, Timestamp)>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.tenants().retention_rules());
        }
        let txn = self.store.begin_read()?;
        let table = txn.open_table(RETENTION)?;
        table
            .iter()?
            .map(|entry| {
                let (tenant, value) = entry?;
                let (days, last_run) = value.value();
                Ok((
                    tenant.value().to_owned(),
                    days,
                    Timestamp::from_micros(last_run),
                ))
            })
            .collect()
    }

    /// Records that a tenant's retention rule runs at `at`, only while its last run is still
    /// `last_run` (as [`Self::retention_rules`] read it): true for the one caller that claimed
    /// this run, whichever process it is in, so a run that fell due runs once; false for a
    /// tenant without a rule.
    pub async fn claim_retention(
        self,
        tenant: &str,
        last_run: Timestamp,
        at: Timestamp,
    ) -> Result<bool> {
        if let Some(backend) = self.store.backend() {
            return backend
                .tenants()
                .claim_retention(tenant, last_run, at)
                .await;
        }
        validate_id("tenant", tenant)?;
        let tenant = tenant.to_owned();
        self.store
            .write(move |txn| {
                let mut table = txn.open_table(RETENTION)?;
                let rule = table.get(tenant.as_str())?.map(|v| v.value());
                match rule {
                    Some((days, ran)) if ran == last_run.as_micros() => {
                        table.insert(tenant.as_str(), (days, at.as_micros()))?;
                        Ok(true)
                    }
                    _ => Ok(false),
                }
            })
            .await
    }
}

impl Sessions<'_> {
    /// Whether `access` reaches the session (an erasure may run after it was deleted).
    pub fn session_exists(self, access: &Access, session_id: &str) -> Result<bool> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.sessions().session_exists(access, session_id));
        }
        access.validate()?;
        validate_id("session_id", session_id)?;
        let txn = self.store.begin_read()?;
        let sessions = txn.open_table(SESSIONS)?;
        Ok(read_session_record(&sessions, access, session_id)?.is_some())
    }
}

/// The sequence number job `id` was recorded under, if it was.
fn job_seq(ids: &impl ReadableTable<u64, u64>, id: u64) -> Result<Option<u64>> {
    Ok(ids.get(id)?.map(|seq| seq.value()))
}

fn decode_json(what: &'static str, bytes: &[u8]) -> Result<Value> {
    serde_json::from_slice(bytes).map_err(|err| StoreError::Corrupted {
        what,
        detail: err.to_string(),
    })
}
