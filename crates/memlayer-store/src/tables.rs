//! Table definitions and key layout. docs/storage-format.md describes the same in prose; keep
//! the two in step.

use redb::TableDefinition;

/// Store-wide settings and counters: `format_version`, `next_sid`, the sequences.
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// `(tenant, session_id)` → `SessionRecord`.
pub(crate) const SESSIONS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("sessions");

/// `(sid, index)` → `MessageRecord`. `sid` is the session's surrogate key, so one session's
/// turns are one contiguous range in index order.
pub(crate) const MESSAGES: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("messages");

/// `(sid, run_seq)` → `RunRecord`, in recording order.
pub(crate) const RUNS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("runs");

/// `(sid, idempotency_key)` → `IdempotencyRecord`.
pub(crate) const IDEMPOTENCY: TableDefinition<(u64, &str), &[u8]> =
    TableDefinition::new("idempotency");

/// Secondary index for listing: `(tenant, scope, bucket of updated_at, session_id)` → `()`.
/// Every session has one entry in each of its four scopes (see [`scopes`]), so a listing by
/// any filter combination is one range scan, newest activity last; within a bucket the
/// records order them (`activity.rs`).
pub(crate) const SESSION_ACTIVITY: TableDefinition<(&str, &str, u64, &str), ()> =
    TableDefinition::new("session_activity");

/// `(tenant, scope)` → number of sessions in the scope, so a listing's total is one read.
pub(crate) const SESSION_COUNTS: TableDefinition<(&str, &str), u64> =
    TableDefinition::new("session_counts");

pub(crate) const FORMAT_VERSION_KEY: &str = "format_version";
pub(crate) const NEXT_SID_KEY: &str = "next_sid";

/// The storage format this build writes. Opening a file with a larger value fails; a file
/// with a smaller one is migrated at open (`migrate.rs`).
pub(crate) const FORMAT_VERSION: u64 = 6;

/// The listing scope that matches a filter.
pub(crate) fn scope(user_id: Option<&str>, agent_id: Option<&str>) -> String {
    // `/` cannot occur in an id (see `validate_id`), which keeps these unambiguous.
    match (user_id, agent_id) {
        (None, None) => "*".to_owned(),
        (Some(user), None) => format!("u/{user}"),
        (None, Some(agent)) => format!("a/{agent}"),
        (Some(user), Some(agent)) => format!("ua/{user}/{agent}"),
    }
}

/// The four scopes a session is listed under.
pub(crate) fn scopes(user_id: &str, agent_id: &str) -> [String; 4] {
    [
        scope(None, None),
        scope(Some(user_id), None),
        scope(None, Some(agent_id)),
        scope(Some(user_id), Some(agent_id)),
    ]
}

/// `(sid, run_id)` → run sequence number, so run ids stay unique within a session.
pub(crate) const RUN_IDS: TableDefinition<(u64, &str), u64> = TableDefinition::new("run_ids");

/// `sid` → `(tenant, session_id)`: resolves a [`crate::MessageKey`] found by an index back to
/// its session.
pub(crate) const SESSION_KEYS: TableDefinition<u64, (&str, &str)> =
    TableDefinition::new("session_keys");

/// `seq` → `OutboxRecord`: appended messages not yet embedded. Written in the same
/// transaction as the messages, drained by the embedding worker.
pub(crate) const OUTBOX: TableDefinition<u64, &[u8]> = TableDefinition::new("outbox");

/// `(sid, index)` → `VectorRecord`: the embedding of a message, kept so indexes can be rebuilt
/// without embedding again.
pub(crate) const VECTORS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("vectors");

/// `model_id` → `ModelRecord`: the embedding models vectors were made with.
pub(crate) const MODELS: TableDefinition<u32, &[u8]> = TableDefinition::new("models");

pub(crate) const NEXT_OUTBOX_SEQ_KEY: &str = "next_outbox_seq";
pub(crate) const VECTORS_VERSION_KEY: &str = "vectors_version";

/// `sid` → `SummaryRecord`: the session's rolling summary and the message range it covers.
pub(crate) const SUMMARIES: TableDefinition<u64, &[u8]> = TableDefinition::new("summaries");

/// `(tenant, scope)` → JSON object: the settings document of a tenant (scope `*`) or of one
/// of its agents (scope `a/<agent_id>`). The store keeps it opaque; the strategies read it.
pub(crate) const SETTINGS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("settings");

/// The scope a settings document is saved under, after checking the ids: `*` for the
/// tenant's, `a/<agent_id>` for an agent's (both backends key documents by it).
pub fn settings_scope(tenant: &str, agent_id: Option<&str>) -> crate::Result<String> {
    crate::model::validate_id("tenant", tenant)?;
    if let Some(agent) = agent_id {
        crate::model::validate_id("agent_id", agent)?;
    }
    Ok(scope(None, agent_id))
}

/// `job_id` → JSON document: erasure jobs recorded and not yet finished. The erasure
/// coordinator defines the documents; a job is removed in the commit that writes its receipt.
pub(crate) const ERASURE_JOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("erasure_jobs");

/// `(tenant, job_id)` → JSON document: what an erasure removed (counts, ids, time, who
/// asked), never the content.
pub(crate) const ERASURE_RECEIPTS: TableDefinition<(&str, u64), &[u8]> =
    TableDefinition::new("erasure_receipts");

/// `tenant` → `(days, last_run_micros)`: conversation retention and when it last ran.
pub(crate) const RETENTION: TableDefinition<&str, (u32, u64)> = TableDefinition::new("retention");

/// `job_id` → sequence number: every erasure ever recorded, pending or finished (never
/// removed, like the receipts): new ids are checked against it, so a job id is never reused,
/// and the sequence orders pending jobs and receipts (ids are random, see `ids.rs`).
pub(crate) const ERASURE_IDS: TableDefinition<u64, u64> = TableDefinition::new("erasure_ids");

/// `(tenant, sequence)` → `job_id`: a tenant's receipts in the order their erasures were
/// recorded, so the newest are one reverse range.
pub(crate) const ERASURE_RECEIPT_SEQS: TableDefinition<(&str, u64), u64> =
    TableDefinition::new("erasure_receipt_seqs");

pub(crate) const NEXT_JOB_SEQ_KEY: &str = "next_job_seq";

/// `memory_id` → `MemoryRecord`: long-term memories with their embeddings.
pub(crate) const MEMORIES: TableDefinition<u64, &[u8]> = TableDefinition::new("memories");

/// `(tenant, user_id, memory_id)` → sequence number: a user's memories, for listing (in
/// sequence order: ids are random) and erasure.
pub(crate) const MEMORY_OWNERS: TableDefinition<(&str, &str, u64), u64> =
    TableDefinition::new("memory_owner_seqs");

pub(crate) const NEXT_MEMORY_SEQ_KEY: &str = "next_memory_seq";

/// `(tenant, session_id, memory_id)` → `()`: every session a memory cites, as its source or
/// as the source of a text it replaced, so erasing a session or a message finds every memory
/// holding text from it, whoever the memory is about. Session [`UNKNOWN_SOURCE`] lists the
/// memories holding replaced texts whose source a format-2 file did not record.
pub(crate) const MEMORY_SOURCES: TableDefinition<(&str, &str, u64), ()> =
    TableDefinition::new("memory_sources");

/// `(tenant, user_id, agent_id, key)` → `memory_id`: the memories a caller named by a key of
/// its own (a keyed put replaces the memory under its key, never merges it with another).
/// [`EVERY_AGENT`] stands for a memory of every agent of the user. Leaves with its memory.
pub(crate) const MEMORY_KEYS: TableDefinition<(&str, &str, &str, &str), u64> =
    TableDefinition::new("memory_keys");

/// The agent part of a [`MEMORY_KEYS`] entry for a memory every agent of the user sees: empty
/// is not a valid id, so no agent has it.
pub(crate) const EVERY_AGENT: &str = "";

/// The session id under which the store lists the memories holding replaced texts of unknown
/// source (see [`crate::Store::memories_citing`]). `*` is not a valid id, so no real session
/// has it.
pub const UNKNOWN_SOURCE: &str = "*";

/// `prefix` → `KeyRecord`: API keys (see `keys.rs`). A record holds the SHA-256 of its key,
/// never the key.
pub(crate) const API_KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("api_keys");

/// `(tenant, prefix)` → `()`: a tenant's keys, for listing.
pub(crate) const API_KEY_TENANTS: TableDefinition<(&str, &str), ()> =
    TableDefinition::new("api_key_tenants");

/// `(tenant, user_id, agent_id)` → `SessionMemoryRecord`: the rolling summary of a user's
/// finished conversations with an agent, with the sessions merged into it.
pub(crate) const SESSION_MEMORIES: TableDefinition<(&str, &str, &str), &[u8]> =
    TableDefinition::new("session_memories");

/// `episode_id` → `EpisodeRecord`: episodes (an attempt at a task, its outcome, reflection
/// and lesson).
pub(crate) const EPISODES: TableDefinition<u64, &[u8]> = TableDefinition::new("episodes");

/// `(tenant, user_id, episode_id)` → sequence number: a user's episodes, for listing (in
/// sequence order: ids are random) and erasure.
pub(crate) const EPISODE_OWNERS: TableDefinition<(&str, &str, u64), u64> =
    TableDefinition::new("episode_owner_seqs");

/// `(tenant, user_id, task_type, sequence)` → `episode_id`: a user's episodes by task type in
/// recording order, so the most recent lessons of one type are one reverse range.
pub(crate) const EPISODE_TASKS: TableDefinition<(&str, &str, &str, u64), u64> =
    TableDefinition::new("episode_task_seqs");

pub(crate) const NEXT_EPISODE_SEQ_KEY: &str = "next_episode_seq";

/// `(bucket of updated_at, tenant, session_id)` → `()`: sessions not yet ended, by last
/// activity, so the ones idle for too long are one range (see `idle.rs`).
pub(crate) const OPEN_SESSIONS: TableDefinition<(u64, &str, &str), ()> =
    TableDefinition::new("open_sessions");

/// Something done to each table of the store in turn (created at open, copied by a backup).
pub(crate) trait TableVisitor {
    fn visit<K: redb::Key + 'static, V: redb::Value + 'static>(
        &mut self,
        table: TableDefinition<K, V>,
    ) -> crate::Result<()>;
}

/// Visits every table of the store: the one list of them, so that a new table is created at
/// open and included in backups by adding it here.
pub(crate) fn for_each_table(visitor: &mut impl TableVisitor) -> crate::Result<()> {
    visitor.visit(META)?;
    visitor.visit(SESSIONS)?;
    visitor.visit(MESSAGES)?;
    visitor.visit(RUNS)?;
    visitor.visit(RUN_IDS)?;
    visitor.visit(IDEMPOTENCY)?;
    visitor.visit(SESSION_ACTIVITY)?;
    visitor.visit(SESSION_COUNTS)?;
    visitor.visit(SESSION_KEYS)?;
    visitor.visit(OUTBOX)?;
    visitor.visit(VECTORS)?;
    visitor.visit(MODELS)?;
    visitor.visit(SUMMARIES)?;
    visitor.visit(SETTINGS)?;
    visitor.visit(ERASURE_JOBS)?;
    visitor.visit(ERASURE_RECEIPTS)?;
    visitor.visit(ERASURE_IDS)?;
    visitor.visit(ERASURE_RECEIPT_SEQS)?;
    visitor.visit(RETENTION)?;
    visitor.visit(MEMORIES)?;
    visitor.visit(MEMORY_OWNERS)?;
    visitor.visit(MEMORY_SOURCES)?;
    visitor.visit(MEMORY_KEYS)?;
    visitor.visit(SESSION_MEMORIES)?;
    visitor.visit(API_KEYS)?;
    visitor.visit(API_KEY_TENANTS)?;
    visitor.visit(EPISODES)?;
    visitor.visit(EPISODE_OWNERS)?;
    visitor.visit(EPISODE_TASKS)?;
    visitor.visit(OPEN_SESSIONS)
}
