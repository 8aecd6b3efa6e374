//! Sessions and what they hold: creating one, appending messages, recording runs, clearing,
//! searching, summaries, reading and listing — and the session half of erasure (deleting one
//! with everything it owns), which the [`crate::Eraser`] exposes.

use redb::{ReadableTable, Table, WriteTransaction};

use crate::data_keys::{DataKeys, KeyOwner};
use crate::model::{
    Access, Append, Appended, Message, NewMessage, NewRun, NewSession, Page, Role, Run,
    SearchQuery, Session, SessionFilter, SessionState, StoredSummary, Timestamp, validate_id,
};
use crate::model::{MAX_MESSAGES_PER_SESSION, MAX_SESSIONS, metadata_to_text};
use crate::record::{
    ERASED_DIGEST, IdempotencyRecord, MessageRecord, OutboxRecord, Record, RunRecord,
    SessionRecord, SummaryRecord, metadata_from_text,
};
use crate::sealing::{KeyRef, Opener, Sealer, summary_range};
use crate::snapshot::{SessionSnapshot, SessionVersion};
use crate::tables::{
    IDEMPOTENCY, MESSAGES, META, NEXT_OUTBOX_SEQ_KEY, NEXT_SID_KEY, OUTBOX, RUN_IDS, RUNS,
    SESSION_ACTIVITY, SESSION_COUNTS, SESSION_KEYS, SESSIONS, SUMMARIES, VECTORS, scope,
};
use crate::{Result, StoreError};

use crate::store::{Eraser, ReadTxn, Sessions, Store, wait};

impl Sessions<'_> {
    /// Creates a session under `session_id`, or under a new UUIDv4 (122 random bits, so
    /// nobody can guess it) when `None`. Session ids are unique in their tenant: an id in use
    /// is a [`StoreError::Conflict`] whoever's session holds it, and that is all it tells.
    pub async fn create_session(
        self,
        access: &Access,
        session_id: Option<&str>,
        new: NewSession,
    ) -> Result<Session> {
        if let Some(backend) = self.store.backend() {
            return backend
                .sessions()
                .create_session(access, session_id, new)
                .await;
        }
        let session_id = new.checked_session_id(access, session_id)?;
        let tenant = access.tenant().to_owned();
        let keys = self.store.data_keys()?;
        self.store
            .write(move |txn| {
                let mut sessions = txn.open_table(SESSIONS)?;
                if sessions
                    .get((tenant.as_str(), session_id.as_str()))?
                    .is_some()
                {
                    return Err(StoreError::session_id_taken(&session_id));
                }
                let (record, _) =
                    new_session_record(txn, &keys, &tenant, &session_id, &new, Timestamp::now())?;
                sessions.insert(
                    (tenant.as_str(), session_id.as_str()),
                    record.encode().as_slice(),
                )?;
                crate::activity::add(txn, &tenant, &session_id, &record)?;
                session_from_record(session_id, &record)
            })
            .await
    }

    /// Appends messages to a session, creating it first when `append.create` says who owns it.
    ///
    /// The messages get consecutive indices after the session's last message. The call returns
    /// once they are durably stored. With a user-scoped `access`, the session must be that
    /// user's (checked in the transaction that appends) and a session it creates too.
    pub async fn append(
        self,
        access: &Access,
        session_id: &str,
        append: Append,
    ) -> Result<Appended> {
        let appended = match self.store.backend() {
            Some(backend) => {
                backend
                    .sessions()
                    .append(access, session_id, append)
                    .await?
            }
            None => {
                append.check(access, session_id)?;
                let access = access.clone();
                let session_id = session_id.to_owned();
                let keys = self.store.data_keys()?;
                self.store
                    .write(move |txn| apply_append(txn, &keys, &access, &session_id, append))
                    .await?
            }
        };
        if !appended.replayed {
            self.store.count_appended(appended.count);
        }
        Ok(appended)
    }

    /// Records an agent execution in a session.
    pub async fn record_run(self, access: &Access, session_id: &str, run: NewRun) -> Result<Run> {
        if let Some(backend) = self.store.backend() {
            return backend.sessions().record_run(access, session_id, run).await;
        }
        run.check(access, session_id)?;
        let access = access.clone();
        let session_id = session_id.to_owned();
        let keys = self.store.data_keys()?;
        self.store
            .write(move |txn| apply_record_run(txn, &keys, &access, &session_id, run))
            .await
    }

    /// Starts later context loads after the session's current last message; the messages
    /// stay stored for audit and search. Returns the index loads now start from.
    pub async fn clear_session(self, access: &Access, session_id: &str) -> Result<u64> {
        if let Some(backend) = self.store.backend() {
            return backend.sessions().clear_session(access, session_id).await;
        }
        access.check_session(session_id)?;
        let access = access.clone();
        let session_id = session_id.to_owned();
        self.store
            .write(move |txn| {
                let mut sessions = txn.open_table(SESSIONS)?;
                let mut record = read_session_record(&sessions, &access, &session_id)?
                    .ok_or_else(|| StoreError::session_not_found(&session_id))?;
                let tenant = access.tenant();
                record.load_from = record.next_index;
                crate::activity::touch(txn, tenant, &session_id, &mut record, Timestamp::now())?;
                sessions.insert((tenant, session_id.as_str()), record.encode().as_slice())?;
                Ok(record.load_from)
            })
            .await
    }

    /// Up to `limit` messages of a session, newest first, whose content contains every word
    /// of `query` ignoring case: the whole history, cleared and summarised parts included.
    /// A query holds 1 to [`MAX_SEARCH_WORDS`](crate::MAX_SEARCH_WORDS) distinct words in at most
    /// [`MAX_SEARCH_QUERY`](crate::MAX_SEARCH_QUERY) characters ([`SearchQuery`]).
    pub fn search_messages(
        self,
        access: &Access,
        session_id: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Message>> {
        if let Some(backend) = self.store.backend() {
            return wait(
                backend
                    .sessions()
                    .search_messages(access, session_id, query, limit),
            );
        }
        let query = SearchQuery::parse(query)?;
        let (txn, record) = self.store.read_existing_session(access, session_id)?;
        let messages = txn.open_table(MESSAGES)?;
        let mut opener = Opener::new(txn.keys(), record.sid);
        let mut hits = Vec::new();
        for entry in messages
            .range((record.sid, 0)..(record.sid, record.next_index))?
            .rev()
        {
            if hits.len() >= limit {
                break;
            }
            let (key, value) = entry?;
            let index = key.value().1;
            let stored = opener.message(index, value.value())?;
            if query.matches(&stored.content) {
                hits.push(message_from_record(index, stored)?);
            }
        }
        Ok(hits)
    }

    /// The session's rolling summary, if one was saved.
    pub fn summary(self, access: &Access, session_id: &str) -> Result<Option<StoredSummary>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.sessions().summary(access, session_id));
        }
        self.store.existing_snapshot(access, session_id)?.summary()
    }

    /// Replaces the session's rolling summary with one covering `first_index..=last_index`,
    /// unless the current one (since the last clear) already reaches further. The covered
    /// messages stay stored; later context loads resume after `last_index`. `read` is the
    /// version the summary was computed from; if the session changed since,
    /// [`StoreError::SessionChanged`] and nothing is saved.
    pub async fn save_summary(
        self,
        access: &Access,
        session_id: &str,
        read: SessionVersion,
        text: String,
        first_index: u64,
        last_index: u64,
    ) -> Result<()> {
        if let Some(backend) = self.store.backend() {
            return backend
                .sessions()
                .save_summary(access, session_id, read, text, first_index, last_index)
                .await;
        }
        StoredSummary::check_new(access, session_id, &text)?;
        let access = access.clone();
        let session_id = session_id.to_owned();
        let keys = self.store.data_keys()?;
        self.store
            .write(move |txn| {
                let sessions = txn.open_table(SESSIONS)?;
                let record = read_session_record(&sessions, &access, &session_id)?
                    .ok_or_else(|| StoreError::session_not_found(&session_id))?;
                check_version(&record, read, &session_id)?;
                StoredSummary::check_range(first_index, last_index, record.next_index)?;
                let mut summaries = txn.open_table(SUMMARIES)?;
                // Two context requests may summarise the same turns at once; a summary never
                // moves the checkpoint back.
                let current = summaries
                    .get(record.sid)?
                    .map(|value| summary_range(value.value()))
                    .transpose()?;
                if StoredSummary::keeps_current(current, record.load_from, last_index) {
                    return Ok(());
                }
                let stored = SummaryRecord {
                    text,
                    first_index,
                    last_index,
                    created_at: Timestamp::now().as_micros(),
                };
                let sealer = Sealer::of(&keys, record.sid, record.key)?;
                summaries.insert(record.sid, sealer.summary(&stored)?.as_slice())?;
                Ok(())
            })
            .await
    }

    /// The session, or `None` if `access` reaches no session with that id.
    pub fn session(self, access: &Access, session_id: &str) -> Result<Option<Session>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.sessions().session(access, session_id));
        }
        access.validate()?;
        validate_id("session_id", session_id)?;
        let txn = self.store.begin_read()?;
        let sessions = txn.open_table(SESSIONS)?;
        read_session_record(&sessions, access, session_id)?
            .map(|record| session_from_record(session_id.to_owned(), &record))
            .transpose()
    }

    /// Up to `limit` messages of a session from index `from` on, in index order.
    pub fn messages(
        self,
        access: &Access,
        session_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Message>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.sessions().messages(access, session_id, from, limit));
        }
        self.store
            .existing_snapshot(access, session_id)?
            .messages(from, limit)
    }

    /// Up to `limit` runs of a session in the order they were recorded, from the `from`th
    /// (0-based) on. Runs are only ever removed with their session, so a run's position never
    /// changes: the next page starts `from` plus the runs returned.
    pub fn runs(
        self,
        access: &Access,
        session_id: &str,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Run>> {
        if let Some(backend) = self.store.backend() {
            return wait(backend.sessions().runs(access, session_id, from, limit));
        }
        let (txn, record) = self.store.read_existing_session(access, session_id)?;
        let runs = txn.open_table(RUNS)?;
        let from = from.min(record.next_run);
        let mut opener = Opener::new(txn.keys(), record.sid);
        runs.range((record.sid, from)..(record.sid, record.next_run))?
            .take(limit)
            .map(|entry| {
                let (key, value) = entry?;
                run_from_record(opener.run(key.value().1, value.value())?)
            })
            .collect()
    }

    /// One page of the sessions matching `filter` that `access` reaches, most recently
    /// active first. Pages are numbered from 0. Reads the listing index only, never the
    /// messages. A user-scoped access that names another user finds nothing, whether or not
    /// that user has sessions.
    pub fn list_sessions(
        self,
        access: &Access,
        filter: &SessionFilter,
        page: u64,
        page_size: usize,
    ) -> Result<Page<Session>> {
        if let Some(backend) = self.store.backend() {
            return wait(
                backend
                    .sessions()
                    .list_sessions(access, filter, page, page_size),
            );
        }
        let Some(listing) = filter.listing(access, page, page_size)? else {
            return Ok(Page {
                items: Vec::new(),
                total: 0,
            });
        };
        let tenant = access.tenant();
        let scope = scope(listing.user_id, listing.agent_id);
        let txn = self.store.begin_read()?;
        let total = txn
            .open_table(SESSION_COUNTS)?
            .get((tenant, scope.as_str()))?
            .map_or(0, |count| count.value());
        let activity = txn.open_table(SESSION_ACTIVITY)?;
        let sessions = txn.open_table(SESSIONS)?;
        let items = crate::activity::newest_first(
            &activity,
            &sessions,
            (tenant, scope.as_str()),
            listing.skip,
            listing.page_size,
        )?
        .into_iter()
        .map(|(session_id, record)| {
            // The scope is the access's own (`SessionFilter::listing`); checked all the same.
            if !access.sees(&record.user_id) {
                return Err(StoreError::Corrupted {
                    what: "session listing",
                    detail: format!("lists another user's session {session_id:?}"),
                });
            }
            session_from_record(session_id, &record)
        })
        .collect::<Result<_>>()?;
        Ok(Page { items, total })
    }
}

/// [`StoreError::SessionChanged`] unless `record` is the session at version `read`.
pub(crate) fn check_version(
    record: &SessionRecord,
    read: SessionVersion,
    session_id: &str,
) -> Result<()> {
    if SessionVersion::of(record) == read {
        Ok(())
    } else {
        Err(StoreError::SessionChanged {
            session_id: session_id.to_owned(),
        })
    }
}

/// The record of a session `access` reaches: `None` when the tenant has no such session or
/// it is another user's. Every read or write that names a session looks it up here, in its
/// own transaction, so the ownership check and the access are one atomic step.
pub(crate) fn read_session_record(
    sessions: &impl ReadableTable<(&'static str, &'static str), &'static [u8]>,
    access: &Access,
    session_id: &str,
) -> Result<Option<SessionRecord>> {
    Ok(sessions
        .get((access.tenant(), session_id))?
        .map(|value| SessionRecord::decode(value.value()))
        .transpose()?
        .filter(|record| access.sees(&record.user_id)))
}

/// A new session's record, and the sealer of its values under its first data key, created
/// (and synced) in the key file before the transaction that stores the record commits.
fn new_session_record(
    txn: &WriteTransaction,
    keys: &DataKeys,
    tenant: &str,
    session_id: &str,
    new: &NewSession,
    now: Timestamp,
) -> Result<(SessionRecord, Sealer)> {
    let mut meta = txn.open_table(META)?;
    let sid = meta.get(NEXT_SID_KEY)?.map_or(1, |v| v.value());
    if sid >= MAX_SESSIONS {
        return Err(StoreError::InvalidInput {
            field: "session",
            reason: format!("this store has created all {MAX_SESSIONS} sessions it can hold"),
        });
    }
    meta.insert(NEXT_SID_KEY, sid + 1)?;
    txn.open_table(SESSION_KEYS)?
        .insert(sid, (tenant, session_id))?;
    let owner = KeyOwner { sid, generation: 0 };
    let (slot, data_key) = keys.create(&[owner])?.pop().expect("one key for one owner");
    let key = KeyRef {
        slot,
        generation: owner.generation,
    };
    let record = SessionRecord {
        sid,
        user_id: new.user_id.clone(),
        agent_id: new.agent_id.clone(),
        flow_id: new.flow_id.clone(),
        created_at: now.as_micros(),
        updated_at: now.as_micros(),
        metadata: metadata_to_text(&new.metadata),
        next_index: 0,
        next_run: 0,
        last_role: None,
        load_from: 0,
        erased: 0,
        key: Some(key),
    };
    Ok((record, Sealer::new(sid, key, data_key)))
}

fn apply_append(
    txn: &WriteTransaction,
    keys: &DataKeys,
    access: &Access,
    session_id: &str,
    append: Append,
) -> Result<Appended> {
    // Every check comes before the first write: a rejected append shares the transaction with
    // other requests and must leave no trace in it.
    let tenant = access.tenant();
    let mut sessions = txn.open_table(SESSIONS)?;
    let existing = read_session_record(&sessions, access, session_id)?;
    let digest = append
        .idempotency_key
        .as_ref()
        .map(|_| append.request_digest());
    if let Some(record) = &existing {
        if let Some(owner) = &append.create
            && (owner.user_id != record.user_id || owner.agent_id != record.agent_id)
        {
            return Err(StoreError::session_id_taken(session_id));
        }
        if let (Some(key), Some(digest)) = (&append.idempotency_key, digest)
            && let Some(previous) = txn
                .open_table(IDEMPOTENCY)?
                .get((record.sid, key.as_str()))?
        {
            let previous = IdempotencyRecord::decode(previous.value())?;
            let digest = Sealer::of(keys, record.sid, record.key)?.request_digest(digest);
            if previous.request_digest != digest && previous.request_digest != ERASED_DIGEST {
                return Err(StoreError::idempotency_key_reused(key));
            }
            return Ok(Appended {
                first_index: previous.first_index,
                count: previous.count,
                created_session: previous.created_session,
                replayed: true,
            });
        }
        if record.next_index + append.messages.len() as u64 > MAX_MESSAGES_PER_SESSION {
            return Err(StoreError::session_full(session_id));
        }
    }
    let now = Timestamp::now();
    let (mut record, sealer, created_session) = match existing {
        Some(record) => {
            let sealer = Sealer::of(keys, record.sid, record.key)?;
            (record, sealer, false)
        }
        // Another user's session under this id: taken, as for any other owner.
        None if sessions.get((tenant, session_id))?.is_some() => {
            return Err(match append.create {
                Some(_) => StoreError::session_id_taken(session_id),
                None => StoreError::session_not_found(session_id),
            });
        }
        None => match &append.create {
            Some(owner) => {
                let (record, sealer) =
                    new_session_record(txn, keys, tenant, session_id, owner, now)?;
                crate::activity::add(txn, tenant, session_id, &record)?;
                (record, sealer, true)
            }
            None => return Err(StoreError::session_not_found(session_id)),
        },
    };

    let first_index = record.next_index;
    let count = append.messages.len() as u64;
    {
        let mut messages = txn.open_table(MESSAGES)?;
        for (offset, message) in append.messages.into_iter().enumerate() {
            let index = first_index + offset as u64;
            record.last_role = Some(message.role);
            let stored = sealer.message(index, &message_record(message, now))?;
            messages.insert((record.sid, index), stored.as_slice())?;
        }
    }
    record.next_index += count;
    enqueue_for_embedding(txn, record.sid, first_index, count)?;
    crate::activity::touch(txn, tenant, session_id, &mut record, now)?;
    if let (Some(key), Some(request_digest)) = (&append.idempotency_key, digest) {
        let outcome = IdempotencyRecord {
            request_digest: sealer.request_digest(request_digest),
            first_index,
            count,
            created_session,
        };
        txn.open_table(IDEMPOTENCY)?
            .insert((record.sid, key.as_str()), outcome.encode().as_slice())?;
    }
    sessions.insert((tenant, session_id), record.encode().as_slice())?;
    Ok(Appended {
        first_index,
        count,
        created_session,
        replayed: false,
    })
}

/// Queues messages for the embedding worker, in the transaction that stores them, so no
/// committed message can miss its embedding (a crash between the two is impossible).
pub(crate) fn enqueue_for_embedding(
    txn: &WriteTransaction,
    sid: u64,
    first_index: u64,
    count: u64,
) -> Result<()> {
    let mut meta = txn.open_table(META)?;
    let seq = meta.get(NEXT_OUTBOX_SEQ_KEY)?.map_or(1, |v| v.value());
    meta.insert(NEXT_OUTBOX_SEQ_KEY, seq + 1)?;
    let entry = OutboxRecord {
        sid,
        first_index,
        count,
    };
    txn.open_table(OUTBOX)?
        .insert(seq, entry.encode().as_slice())?;
    Ok(())
}

fn apply_record_run(
    txn: &WriteTransaction,
    keys: &DataKeys,
    access: &Access,
    session_id: &str,
    run: NewRun,
) -> Result<Run> {
    let tenant = access.tenant();
    let mut sessions = txn.open_table(SESSIONS)?;
    let mut record = read_session_record(&sessions, access, session_id)?
        .ok_or_else(|| StoreError::session_not_found(session_id))?;
    let run_id = run
        .run_id
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let mut run_ids = txn.open_table(RUN_IDS)?;
    if run_ids.get((record.sid, run_id.as_str()))?.is_some() {
        return Err(StoreError::run_id_taken(&run_id, session_id));
    }
    let now = Timestamp::now();
    let seq = record.next_run;
    let stored = RunRecord {
        run_id,
        status: run.status,
        content: run.content,
        tool_calls: serde_json::to_string(&run.tool_calls).expect("JSON values serialise"),
        error: run.error,
        metadata: metadata_to_text(&run.metadata),
        created_at: now.as_micros(),
        redacted: false,
    };
    run_ids.insert((record.sid, stored.run_id.as_str()), seq)?;
    let sealed = Sealer::of(keys, record.sid, record.key)?.run(seq, &stored)?;
    txn.open_table(RUNS)?
        .insert((record.sid, seq), sealed.as_slice())?;
    record.next_run += 1;
    crate::activity::touch(txn, tenant, session_id, &mut record, now)?;
    sessions.insert((tenant, session_id), record.encode().as_slice())?;
    run_from_record(stored)
}

/// Deletes the session; returns what went with it and the key its values were sealed under,
/// for the caller to destroy once this commits.
fn apply_delete_session(
    txn: &WriteTransaction,
    access: &Access,
    session_id: &str,
) -> Result<(SessionDeleted, Option<KeyRef>)> {
    let tenant = access.tenant();
    let mut sessions = txn.open_table(SESSIONS)?;
    let record = read_session_record(&sessions, access, session_id)?
        .ok_or_else(|| StoreError::session_not_found(session_id))?;
    sessions.remove((tenant, session_id))?;
    crate::activity::remove(txn, tenant, session_id, &record)?;
    let sid = record.sid;
    let messages = remove_range(&mut txn.open_table(MESSAGES)?, (sid, 0)..(sid + 1, 0))?;
    remove_range(&mut txn.open_table(RUNS)?, (sid, 0)..(sid + 1, 0))?;
    remove_str_range(&mut txn.open_table(RUN_IDS)?, sid)?;
    remove_str_range(&mut txn.open_table(IDEMPOTENCY)?, sid)?;
    remove_range(&mut txn.open_table(VECTORS)?, (sid, 0)..(sid + 1, 0))?;
    crate::embeddings::bump_vectors_version(txn)?;
    txn.open_table(SESSION_KEYS)?.remove(sid)?;
    txn.open_table(SUMMARIES)?.remove(sid)?;
    // The session's outbox entries stay: they hold no text (a `sid`, an index and a count),
    // and the embedding worker drops each when it meets it, finding neither the session nor
    // its messages. Removing them here needed an index by session written beside every
    // append, which cost appends more than anything else they write to the outbox.
    let episodes =
        crate::episodes::remove_user_episodes(txn, tenant, &record.user_id, Some(session_id))?;
    let session_memories = crate::session_memory::remove_session_memories(
        txn,
        tenant,
        &record.user_id,
        Some(session_id),
    )?;
    let deleted = SessionDeleted {
        sid,
        messages,
        episodes,
        session_memories,
    };
    Ok((deleted, record.key))
}

/// What deleting a session removed besides the session itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionDeleted {
    /// The session's surrogate key, for removing its messages from indexes.
    pub sid: u64,
    /// How many messages it still held (those erased before are not counted again).
    pub messages: u64,
    /// How many episodes drawn from the session were deleted with it.
    pub episodes: u64,
    /// How many of the user's session memories the session was merged into were dropped
    /// with it (a memory summarising several conversations goes whole, and is merged again
    /// from those that remain).
    pub session_memories: u64,
}

impl Store {
    /// Runs `remove` on a user's rows of one kind in one commit: all of them, or (with
    /// `session_id`) those drawn from that session. Returns how many were removed.
    pub(crate) async fn remove_user_rows(
        &self,
        tenant: &str,
        user_id: &str,
        session_id: Option<&str>,
        remove: fn(&WriteTransaction, &str, &str, Option<&str>) -> Result<u64>,
    ) -> Result<u64> {
        validate_id("tenant", tenant)?;
        validate_id("user_id", user_id)?;
        let (tenant, user_id) = (tenant.to_owned(), user_id.to_owned());
        let session_id = session_id.map(str::to_owned);
        self.write_alone(move |txn| remove(txn, &tenant, &user_id, session_id.as_deref()))
            .await
    }
}

pub(crate) fn remove_range(
    table: &mut Table<'_, (u64, u64), &'static [u8]>,
    range: std::ops::Range<(u64, u64)>,
) -> Result<u64> {
    let mut removed = 0;
    table.retain_in(range, |_, _| {
        removed += 1;
        false
    })?;
    Ok(removed)
}

/// Removes every `(sid, _)` key of a table keyed by `(sid, string)`.
fn remove_str_range<V: redb::Value + 'static>(
    table: &mut Table<'_, (u64, &'static str), V>,
    sid: u64,
) -> Result<()> {
    table.retain_in((sid, "")..(sid + 1, ""), |_, _| false)?;
    Ok(())
}

fn message_record(message: NewMessage, now: Timestamp) -> MessageRecord {
    MessageRecord {
        role: message.role,
        content: message.content,
        timestamp: message.timestamp.unwrap_or(now).as_micros(),
        token_count: message.token_count,
        metadata: metadata_to_text(&message.metadata),
    }
}

pub(crate) fn session_from_record(id: String, record: &SessionRecord) -> Result<Session> {
    Ok(Session {
        id,
        user_id: record.user_id.clone(),
        agent_id: record.agent_id.clone(),
        flow_id: record.flow_id.clone(),
        created_at: Timestamp::from_micros(record.created_at),
        updated_at: Timestamp::from_micros(record.updated_at),
        metadata: metadata_from_text(SessionRecord::NAME, &record.metadata)?,
        message_count: record.next_index,
        run_count: record.next_run,
        load_from: record.load_from,
        state: if record.last_role == Some(Role::User) {
            SessionState::IncompleteTurn
        } else {
            SessionState::Active
        },
    })
}

pub(crate) fn message_from_record(index: u64, record: MessageRecord) -> Result<Message> {
    Ok(Message {
        index,
        role: record.role,
        metadata: metadata_from_text(MessageRecord::NAME, &record.metadata)?,
        content: record.content,
        timestamp: Timestamp::from_micros(record.timestamp),
        token_count: record.token_count,
    })
}

fn run_from_record(record: RunRecord) -> Result<Run> {
    let tool_calls =
        serde_json::from_str(&record.tool_calls).map_err(|err| StoreError::Corrupted {
            what: RunRecord::NAME,
            detail: format!("tool calls: {err}"),
        })?;
    Ok(Run {
        metadata: metadata_from_text(RunRecord::NAME, &record.metadata)?,
        run_id: record.run_id,
        status: record.status,
        content: record.content,
        tool_calls,
        error: record.error,
        created_at: Timestamp::from_micros(record.created_at),
        redacted: record.redacted,
    })
}

impl Store {
    pub(crate) fn existing_snapshot(
        &self,
        access: &Access,
        session_id: &str,
    ) -> Result<SessionSnapshot> {
        self.sessions()
            .snapshot(access, session_id)?
            .ok_or_else(|| StoreError::session_not_found(session_id))
    }

    pub(crate) fn read_existing_session(
        &self,
        access: &Access,
        session_id: &str,
    ) -> Result<(ReadTxn, SessionRecord)> {
        access.validate()?;
        validate_id("session_id", session_id)?;
        let txn = self.begin_read()?;
        let record = read_session_record(&txn.open_table(SESSIONS)?, access, session_id)?
            .ok_or_else(|| StoreError::session_not_found(session_id))?;
        Ok((txn, record))
    }
}

impl Eraser {
    /// Deletes a session with everything it owns, the episodes drawn from it included; returns
    /// its surrogate key, so derived indexes can drop the session's entries, and how many
    /// episodes went with it.
    ///
    /// The episodes go in the same transaction as the session record: `put_episode` checks
    /// its source session in its own transaction, so an episode is either recorded before
    /// this commit (and deleted by it) or refused after it. Deleting them in a commit of their
    /// own before this one let an episode recorded in between survive the erasure.
    pub async fn delete_session(
        &self,
        access: &Access,
        session_id: &str,
    ) -> Result<SessionDeleted> {
        if let Some(backend) = self.store.backend() {
            return backend.eraser().delete_session(access, session_id).await;
        }
        access.validate()?;
        validate_id("session_id", session_id)?;
        let access = access.clone();
        let session_id = session_id.to_owned();
        let (deleted, key) = self
            .store
            .write_alone(move |txn| apply_delete_session(txn, &access, &session_id))
            .await?;
        if let Some(key) = key {
            self.store.retire_key(key.slot, key.owner(deleted.sid))?;
        }
        Ok(deleted)
    }
}
