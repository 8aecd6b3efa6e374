//! The domain records callers see: sessions, messages (turns) and runs, and what it takes to
//! create them. These types are independent of the on-disk encoding in `record`.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::{Result, StoreError};

/// Free-form JSON attached to a session, message or run (citations, thought process, …).
pub type Metadata = Map<String, Value>;

/// Metadata as stored: compact JSON text.
pub fn metadata_to_text(metadata: &Metadata) -> String {
    serde_json::to_string(metadata).expect("a JSON map always serialises")
}

/// Microseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The current wall-clock time.
    pub fn now() -> Self {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Self(u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX))
    }

    /// A timestamp from microseconds since the Unix epoch.
    pub fn from_micros(micros: u64) -> Self {
        Self(micros)
    }

    /// Microseconds since the Unix epoch.
    pub fn as_micros(self) -> u64 {
        self.0
    }
}

/// Who produced a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions to the model.
    System,
    /// The human (or calling program) speaking to the agent.
    User,
    /// The agent's answer.
    Assistant,
    /// Output of a tool the agent called.
    Tool,
}

/// Whether a session's last exchange is complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// No message yet, or the last message is not an unanswered user message.
    Active,
    /// The last stored message is a user message with no answer after it: the process that
    /// was generating the answer died or failed. The user message is kept; the client may retry.
    IncompleteTurn,
}

/// Whose sessions a call may touch: one tenant's, and for a caller acting for one end user
/// (a user-scoped API key, a tool call made in a user's conversation) only that user's.
///
/// Every store call that names a session checks it against the session record in the same
/// transaction that reads or writes it: another user's session is
/// [`StoreError::SessionNotFound`], exactly like one that does not exist. A check made before
/// the read (as the HTTP layer once did) let a session created, or deleted and created again,
/// by another user in between slip through.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Access {
    tenant: String,
    user: Option<String>,
}

impl Access {
    /// Every session of `tenant`: agent backends, tenant admins, and memlayer's own jobs.
    pub fn tenant_wide(tenant: impl Into<String>) -> Self {
        Self {
            tenant: tenant.into(),
            user: None,
        }
    }

    /// Only the sessions of `user_id` in `tenant`.
    pub fn one_user(tenant: impl Into<String>, user_id: impl Into<String>) -> Self {
        Self {
            tenant: tenant.into(),
            user: Some(user_id.into()),
        }
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The one user this access is limited to; `None` for the whole tenant.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// Whether something owned by `user_id` is within reach.
    pub fn sees(&self, user_id: &str) -> bool {
        self.user.as_deref().is_none_or(|own| own == user_id)
    }

    /// Checks the tenant id and the user id.
    pub fn validate(&self) -> Result<()> {
        validate_id("tenant", &self.tenant)?;
        if let Some(user) = &self.user {
            validate_id("user_id", user)?;
        }
        Ok(())
    }

    /// The checks before a call reads or writes the session `session_id` through this
    /// access: the access itself, then the session id.
    pub fn check_session(&self, session_id: &str) -> Result<()> {
        self.validate()?;
        validate_id("session_id", session_id)
    }
}

/// Who a new session belongs to. Required to create a session, explicitly or on first use.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NewSession {
    /// The end user the conversation is with.
    pub user_id: String,
    /// The agent holding the conversation.
    pub agent_id: String,
    /// Optional workflow the conversation runs in.
    pub flow_id: Option<String>,
    /// Caller-defined metadata.
    pub metadata: Metadata,
}

/// A stored session (conversation).
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// Caller-visible id, unique within the tenant.
    pub id: String,
    /// The end user.
    pub user_id: String,
    /// The agent.
    pub agent_id: String,
    /// Optional workflow.
    pub flow_id: Option<String>,
    /// When the session was created.
    pub created_at: Timestamp,
    /// Last activity: creation, or the newest append or run.
    pub updated_at: Timestamp,
    /// Caller-defined metadata.
    pub metadata: Metadata,
    /// Number of messages; also the index the next message gets.
    pub message_count: u64,
    /// Number of recorded runs.
    pub run_count: u64,
    /// Index from which context loads start: messages before it were cleared (kept for
    /// audit and search, left out of context).
    pub load_from: u64,
    /// Whether the last turn is complete.
    pub state: SessionState,
}

/// A message to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    /// Who said it.
    pub role: Role,
    /// The text. May be empty (an assistant message that only calls tools).
    pub content: String,
    /// Tokens in `content`, counted by the caller's tokenizer.
    pub token_count: u32,
    /// When it was said; the append time if absent (imports keep their original times).
    pub timestamp: Option<Timestamp>,
    /// Citations, thought process, tool calls, …
    pub metadata: Metadata,
}

impl NewMessage {
    /// A message of `role` saying `content`, counted `token_count` tokens, stamped with the
    /// append time, without metadata.
    pub fn new(role: Role, content: impl Into<String>, token_count: u32) -> Self {
        Self {
            role,
            content: content.into(),
            token_count,
            timestamp: None,
            metadata: Metadata::new(),
        }
    }
}

/// A stored message (turn).
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Position in the session: 0, 1, 2, … without gaps.
    pub index: u64,
    /// Who said it.
    pub role: Role,
    /// The text.
    pub content: String,
    /// When it was said.
    pub timestamp: Timestamp,
    /// Tokens in `content`.
    pub token_count: u32,
    /// Citations, thought process, tool calls, …
    pub metadata: Metadata,
}

/// What an append should do.
#[derive(Debug, Clone, PartialEq)]
pub struct Append {
    /// The messages, stored in this order with consecutive indices.
    pub messages: Vec<NewMessage>,
    /// Creates the session on first use when given; without it an unknown session is an error.
    /// When the session exists, its owner must match.
    pub create: Option<NewSession>,
    /// A retried append with the same key returns the first append's result.
    pub idempotency_key: Option<String>,
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// Index of the first appended message; the others follow without gaps.
    pub first_index: u64,
    /// How many messages were appended.
    pub count: u64,
    /// True when this append created the session.
    pub created_session: bool,
    /// True when this is a retry answered from the idempotency record; nothing was written.
    pub replayed: bool,
}

impl Appended {
    /// The indices assigned to the appended messages.
    pub fn indices(&self) -> std::ops::Range<u64> {
        self.first_index..self.first_index + self.count
    }
}

/// Outcome of an agent execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunStatus {
    /// Still executing.
    Running,
    /// Finished with an answer.
    Completed,
    /// Failed; `error` says why.
    Failed,
    /// Stopped by the caller.
    Cancelled,
}

/// A run to record.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    /// Caller-supplied id, or a generated UUIDv4.
    pub run_id: Option<String>,
    /// Outcome.
    pub status: RunStatus,
    /// The final answer, if any.
    pub content: Option<String>,
    /// Tool calls the agent made, as JSON.
    pub tool_calls: Vec<Value>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// Anything else (token usage, latency, model).
    pub metadata: Metadata,
}

/// A recorded agent execution.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Run id, unique within the session.
    pub run_id: String,
    /// Outcome.
    pub status: RunStatus,
    /// The final answer, if any.
    pub content: Option<String>,
    /// Tool calls the agent made.
    pub tool_calls: Vec<Value>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// Anything else.
    pub metadata: Metadata,
    /// When it was recorded.
    pub created_at: Timestamp,
    /// Whether a message of the session was erased after the run was recorded: its content,
    /// error, tool calls and metadata were then dropped (a run's text is written from the
    /// conversation, and memlayer cannot tell which part came from which message).
    pub redacted: bool,
}

/// Which sessions to list. Both filters may be combined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFilter {
    /// Only this user's sessions.
    pub user_id: Option<String>,
    /// Only this agent's sessions.
    pub agent_id: Option<String>,
}

/// What one page of a session listing reads, once its request passed
/// [`SessionFilter::listing`]: the sessions of `user_id` (if given) and `agent_id` (if given)
/// in the access's tenant, most recently active first, skipping `skip` of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionListing<'a> {
    /// Only this user's sessions: the access's own user, or the filter's.
    pub user_id: Option<&'a str>,
    /// Only this agent's sessions.
    pub agent_id: Option<&'a str>,
    /// Sessions before the page (saturating: a page past the end is empty, however far).
    pub skip: usize,
    /// Sessions on the page, 1 to [`MAX_PAGE_SIZE`](crate::MAX_PAGE_SIZE).
    pub page_size: usize,
}

impl SessionFilter {
    /// The checks before `access` lists page `page` (from 0) of `page_size` sessions matching
    /// this filter, and what the page reads. `None` when it finds nothing whatever is stored:
    /// a user-scoped access that names another user finds nothing, whether or not that user
    /// has sessions.
    pub fn listing<'a>(
        &'a self,
        access: &'a Access,
        page: u64,
        page_size: usize,
    ) -> Result<Option<SessionListing<'a>>> {
        access.validate()?;
        validate_optional_id("user_id", self.user_id.as_deref())?;
        validate_optional_id("agent_id", self.agent_id.as_deref())?;
        if !(1..=crate::MAX_PAGE_SIZE).contains(&page_size) {
            return Err(StoreError::InvalidInput {
                field: "page_size",
                reason: format!("must be between 1 and {}", crate::MAX_PAGE_SIZE),
            });
        }
        let user_id = match (access.user(), self.user_id.as_deref()) {
            (Some(own), Some(named)) if own != named => return Ok(None),
            (own, named) => own.or(named),
        };
        Ok(Some(SessionListing {
            user_id,
            agent_id: self.agent_id.as_deref(),
            skip: usize::try_from(page)
                .unwrap_or(usize::MAX)
                .saturating_mul(page_size),
            page_size,
        }))
    }
}

/// A session search's query, checked: 1 to [`MAX_SEARCH_WORDS`](crate::MAX_SEARCH_WORDS)
/// distinct words in at most [`MAX_SEARCH_QUERY`](crate::MAX_SEARCH_QUERY) characters. A
/// message matches when its content contains every word, ignoring case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchQuery {
    words: Vec<String>,
}

impl SearchQuery {
    /// `query` split into its distinct lowercase words, or why it is refused.
    pub fn parse(query: &str) -> Result<Self> {
        let invalid = |reason: String| StoreError::InvalidInput {
            field: "query",
            reason,
        };
        if query.chars().count() > crate::MAX_SEARCH_QUERY {
            return Err(invalid(format!(
                "must be at most {} characters",
                crate::MAX_SEARCH_QUERY
            )));
        }
        let mut words: Vec<String> = query.split_whitespace().map(str::to_lowercase).collect();
        words.sort_unstable();
        words.dedup();
        if words.is_empty() {
            return Err(invalid("must contain a word".into()));
        }
        if words.len() > crate::MAX_SEARCH_WORDS {
            return Err(invalid(format!(
                "must contain at most {} distinct words",
                crate::MAX_SEARCH_WORDS
            )));
        }
        Ok(Self { words })
    }

    /// Whether `content` contains every word, ignoring case.
    pub fn matches(&self, content: &str) -> bool {
        let content = content.to_lowercase();
        self.words
            .iter()
            .all(|word| content.contains(word.as_str()))
    }
}

/// One page of a listing and the size of the whole listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The items on this page.
    pub items: Vec<T>,
    /// How many items the listing has in all.
    pub total: u64,
}

/// A message's identity in derived data (vectors, indexes): the session's surrogate key in
/// the high 40 bits and the message index in the low 24. Stable for the life of the message;
/// never reused, because surrogate keys are not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct MessageKey(u64);

/// Most messages one session can hold (the width of the index part of a [`MessageKey`]).
pub const MAX_MESSAGES_PER_SESSION: u64 = 1 << INDEX_BITS;
const INDEX_BITS: u32 = 24;
/// Sessions a store can ever create (the width of the session part of a [`MessageKey`]).
pub(crate) const MAX_SESSIONS: u64 = 1 << (64 - INDEX_BITS);

impl MessageKey {
    /// The key of message `index` of the session with surrogate key `sid`.
    pub fn new(sid: u64, index: u64) -> Self {
        debug_assert!(sid < MAX_SESSIONS && index < MAX_MESSAGES_PER_SESSION);
        Self((sid << INDEX_BITS) | index)
    }

    /// The key as a plain integer, for index structures.
    pub fn as_u64(self) -> u64 {
        self.0
    }

    /// The key an index returned.
    pub fn from_u64(raw: u64) -> Self {
        Self(raw)
    }

    /// Every raw key a message of session `sid` can have, for range look-ups in indexes.
    pub fn session_range(sid: u64) -> std::ops::Range<u64> {
        (sid << INDEX_BITS)..((sid + 1) << INDEX_BITS)
    }

    /// The session's surrogate key.
    pub fn session(self) -> u64 {
        self.0 >> INDEX_BITS
    }

    /// The message's index in its session.
    pub fn index(self) -> u64 {
        self.0 & (MAX_MESSAGES_PER_SESSION - 1)
    }
}

/// Identity of the embedding model that made a vector. The store refuses to hold vectors of
/// two models at once: they are not comparable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddingModel {
    /// Human-readable name, e.g. `all-MiniLM-L6-v2-quantized`.
    pub name: String,
    /// SHA-256 of the model file, hex.
    pub sha256: String,
    /// Components per vector.
    pub dimension: u32,
}

/// Where a session lives and who owns it, found from its surrogate key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRef {
    /// The tenant.
    pub tenant: String,
    /// The session id.
    pub session_id: String,
}

/// An append still waiting to be embedded.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingEmbedding {
    /// Its position in the outbox; pass it back to [`crate::Store::store_embeddings`].
    pub seq: u64,
    /// The session it belongs to, or `None` if the session was deleted since.
    pub session: Option<SessionRef>,
    /// The messages to embed, with their keys. Empty if the session was deleted since.
    pub messages: Vec<(MessageKey, Message)>,
}

/// An append whose vectors are stored, as an index following a store shared by several
/// processes reads it ([`crate::EmbeddingFeed::embedded_after`]): whichever process embedded
/// it, the follower indexes it without embedding it again.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddedAppend {
    /// The append: its position, session and messages (those not erased since).
    pub append: PendingEmbedding,
    /// The stored vectors of its messages.
    pub vectors: Vec<(MessageKey, Vec<f32>)>,
}

/// What a follower of a shared store reads after its position
/// ([`crate::EmbeddingFeed::embedded_after`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FollowedFeed {
    /// The embedded appends after the position, in position order, up to the first one not
    /// embedded yet.
    pub appends: Vec<EmbeddedAppend>,
    /// What was erased or changed among those entries: to be taken out of the indexes and
    /// of what is kept in memory beside them.
    pub removals: Vec<Removal>,
    /// The position of the last entry read, appends and removals alike: once the follower
    /// applied them, it has applied every entry up to it. `None` when there was nothing new.
    pub through: Option<u64>,
    /// Whether entries after the position were pruned before the follower read them: its
    /// indexes miss those changes until they are rebuilt from the store.
    pub missed: bool,
}

/// What a node learns when it records its follow position
/// ([`crate::EmbeddingFeed::follower_seen`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerRecord {
    /// Its previous record was older than the lapse: erasures may have finished without
    /// waiting for it.
    pub lapsed: bool,
    /// The nodes live now, this one included.
    pub live_nodes: u64,
}

/// What another process erased or changed, as a follower of a shared store reads it: what
/// a copy kept in memory from before must drop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The session with this surrogate key was deleted, every message with it.
    Session(u64),
    /// One message was erased.
    Message(MessageKey),
    /// A long-term memory was stored, updated or deleted: a copy of its user's memories
    /// without that revision is stale.
    Memory(MemoryChange),
}

/// A long-term memory another process wrote or deleted (see [`Removal::Memory`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryChange {
    /// Its tenant.
    pub tenant: String,
    /// Its user.
    pub user_id: String,
    /// Its id.
    pub id: u64,
    /// The revision written; `None` when it was deleted.
    pub revision: Option<u64>,
}

/// A stored embedding.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredVector {
    /// The message it embeds.
    pub key: MessageKey,
    /// Who said the message.
    pub role: Role,
    /// When the message was said.
    pub timestamp: Timestamp,
    /// The vector.
    pub components: Vec<f32>,
}

/// A session's persisted rolling summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSummary {
    /// The summary text.
    pub text: String,
    /// Index of the first message it covers.
    pub first_index: u64,
    /// Index of the last message it covers; context loads resume after it.
    pub last_index: u64,
    /// When it was written.
    pub created_at: Timestamp,
}

impl StoredSummary {
    /// The checks before `access` saves `text` as the summary of `session_id`, before the
    /// session is read.
    pub fn check_new(access: &Access, session_id: &str, text: &str) -> Result<()> {
        access.check_session(session_id)?;
        validate_text("summary", text)
    }

    /// Refuses a summary of `first_index..=last_index` unless those are messages of a
    /// session holding `message_count`.
    pub fn check_range(first_index: u64, last_index: u64, message_count: u64) -> Result<()> {
        if first_index > last_index || last_index >= message_count {
            return Err(StoreError::InvalidInput {
                field: "summary range",
                reason: format!(
                    "{first_index}..={last_index} is not within the session's {message_count} \
                     messages"
                ),
            });
        }
        Ok(())
    }

    /// Whether the session's current summary, covering `current` (`first_index`,
    /// `last_index`), stays instead of a new one reaching `last_index`: two context requests
    /// may summarise the same turns at once, and a summary never moves the checkpoint back —
    /// unless the current one predates the last clear (starts before `load_from`).
    pub fn keeps_current(current: Option<(u64, u64)>, load_from: u64, last_index: u64) -> bool {
        current.is_some_and(|(first, last)| last > last_index && first >= load_from)
    }
}

/// Longest identifier accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;
/// Most messages in one append.
pub const MAX_MESSAGES_PER_APPEND: usize = 1_000;

/// Checks an identifier: 1 to [`MAX_ID_LEN`] characters from `A–Z a–z 0–9 . _ - : @ +`.
///
/// The narrow alphabet is deliberate: ids appear in URLs, logs and composite index keys, where
/// `/` separates parts (see `keys::scopes`), so no id may contain it, a NUL, a space or any
/// non-ASCII character.
pub fn validate_id(kind: &'static str, id: &str) -> Result<()> {
    let invalid = |reason: String| Err(StoreError::InvalidId { kind, reason });
    if id.is_empty() {
        return invalid("must not be empty".into());
    }
    if id.len() > MAX_ID_LEN {
        return invalid(format!("must be at most {MAX_ID_LEN} characters"));
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '@' | '+')))
    {
        return invalid(format!(
            "character {bad:?} is not allowed (use A-Z a-z 0-9 . _ - : @ +)"
        ));
    }
    if id == "." || id == ".." {
        return invalid("must not be . or ..".into());
    }
    Ok(())
}

/// [`validate_id`] for an id that may be absent (a filter, an optional owner).
pub fn validate_optional_id(kind: &'static str, id: Option<&str>) -> Result<()> {
    id.map_or(Ok(()), |id| validate_id(kind, id))
}

/// Checks free text (message content, run content, memories): no NUL characters.
pub fn validate_text(field: &'static str, text: &str) -> Result<()> {
    if text.contains('\0') {
        return Err(StoreError::InvalidInput {
            field,
            reason: "must not contain NUL characters".into(),
        });
    }
    Ok(())
}

impl NewSession {
    /// The checks before creating a session for this owner under `session_id`, or under a
    /// new UUIDv4 (122 random bits, so nobody can guess it) when `None`, which it returns:
    /// `access`, that it may create the session, the id and the owner.
    pub fn checked_session_id(&self, access: &Access, session_id: Option<&str>) -> Result<String> {
        access.validate()?;
        self.check_creator(access)?;
        let session_id = match session_id {
            Some(id) => {
                validate_id("session_id", id)?;
                id.to_owned()
            }
            None => uuid::Uuid::new_v4().to_string(),
        };
        self.validate()?;
        Ok(session_id)
    }

    /// Whether `access` may create a session for this owner: a user-scoped access creates
    /// sessions for its own user only.
    pub fn check_creator(&self, access: &Access) -> Result<()> {
        if access.sees(&self.user_id) {
            Ok(())
        } else {
            Err(StoreError::InvalidInput {
                field: "user_id",
                reason: "a user-scoped caller creates sessions for its own user only".into(),
            })
        }
    }

    /// The checks [`Store::create_session`](crate::Store::create_session) and a creating
    /// append run on the owner before anything is queued.
    pub fn validate(&self) -> Result<()> {
        validate_id("user_id", &self.user_id)?;
        validate_id("agent_id", &self.agent_id)?;
        if let Some(flow) = &self.flow_id {
            validate_id("flow_id", flow)?;
        }
        Ok(())
    }
}

impl Append {
    /// The checks before `access` appends to `session_id`: the access, the id, the append
    /// itself ([`Append::validate`]) and that `access` may create the session it would
    /// create.
    pub fn check(&self, access: &Access, session_id: &str) -> Result<()> {
        access.validate()?;
        validate_id("session_id", session_id)?;
        self.validate()?;
        if let Some(owner) = &self.create {
            owner.check_creator(access)?;
        }
        Ok(())
    }

    /// What tells a retried append from a different one under the same idempotency key:
    /// the first 16 bytes of a SHA-256 over every field of every message, length-prefixed so
    /// that field boundaries are unambiguous.
    pub fn request_digest(&self) -> [u8; 16] {
        let mut hasher = Sha256::new();
        for message in &self.messages {
            let metadata = metadata_to_text(&message.metadata);
            let timestamp = message.timestamp.map_or(0, Timestamp::as_micros);
            hasher.update([message.role as u8]);
            hasher.update((message.content.len() as u64).to_le_bytes());
            hasher.update(message.content.as_bytes());
            hasher.update(message.token_count.to_le_bytes());
            hasher.update(timestamp.to_le_bytes());
            hasher.update((metadata.len() as u64).to_le_bytes());
            hasher.update(metadata.as_bytes());
        }
        let digest = hasher.finalize();
        let mut out = [0; 16];
        out.copy_from_slice(&digest[..16]);
        out
    }

    /// The checks [`Store::append`](crate::Store::append) runs before anything is queued:
    /// message count, content, the owner of a session it creates, the idempotency key.
    pub fn validate(&self) -> Result<()> {
        if self.messages.is_empty() {
            return Err(StoreError::InvalidInput {
                field: "messages",
                reason: "at least one message is required".into(),
            });
        }
        if self.messages.len() > MAX_MESSAGES_PER_APPEND {
            return Err(StoreError::InvalidInput {
                field: "messages",
                reason: format!("at most {MAX_MESSAGES_PER_APPEND} messages per append"),
            });
        }
        for message in &self.messages {
            validate_text("content", &message.content)?;
        }
        if let Some(create) = &self.create {
            create.validate()?;
        }
        if let Some(key) = &self.idempotency_key {
            validate_id("idempotency_key", key)?;
        }
        Ok(())
    }
}

impl NewRun {
    /// The checks before `access` records this run in `session_id`: the access, the id and
    /// the run itself ([`NewRun::validate`]).
    pub fn check(&self, access: &Access, session_id: &str) -> Result<()> {
        access.check_session(session_id)?;
        self.validate()
    }

    /// The checks [`Store::record_run`](crate::Store::record_run) runs before anything is
    /// queued.
    pub fn validate(&self) -> Result<()> {
        if let Some(id) = &self.run_id {
            validate_id("run_id", id)?;
        }
        if let Some(content) = &self.content {
            validate_text("content", content)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_accept_the_documented_alphabet() {
        for ok in [
            "a",
            "user-123",
            "alice@example.com",
            "s:1.2_3+x",
            &"x".repeat(128),
        ] {
            assert!(validate_id("id", ok).is_ok(), "{ok:?} should be accepted");
        }
    }

    #[test]
    fn ids_reject_separators_controls_and_traversal() {
        for bad in [
            "",
            "a/b",
            "..",
            ".",
            "a b",
            "nul\0",
            "é",
            &"x".repeat(129),
            "a\\b",
        ] {
            assert!(
                validate_id("id", bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
    }
}
