//! What an erasure is asked to do (the job, recorded before it runs) and what it did (the
//! receipt, kept after). Both are stored as JSON; a receipt names ids and counts, never
//! content.

use memlayer_store::{Access, Timestamp};
use serde::{Deserialize, Serialize};

/// What to erase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// One message of a session.
    Message {
        /// The session.
        session_id: String,
        /// The message's index.
        index: u64,
    },
    /// A session and everything it owns.
    Session {
        /// The session.
        session_id: String,
    },
    /// One long-term memory.
    Memory {
        /// The memory's id.
        memory_id: u64,
    },
    /// One episode (and its lesson).
    Episode {
        /// The episode's id.
        episode_id: u64,
    },
    /// Every session, long-term memory and episode of a user in the tenant.
    User {
        /// The user.
        user_id: String,
    },
    /// Every session whose last activity is older than the cutoff (a purge or retention).
    InactiveSince {
        /// The age in days that selected them (0: every session).
        older_than_days: u32,
        /// Sessions with activity before this time (microseconds since the epoch).
        cutoff: u64,
    },
}

/// An erasure to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErasureRequest {
    /// The tenant whose data is erased.
    pub tenant: String,
    /// What.
    pub target: Target,
    /// Who asked (an API key's name, `retention`, `admin`); recorded in the receipt.
    pub requested_by: String,
    /// Set when the erasure acts for one user (a user-scoped key): a session or message of
    /// another user is then not found, checked in the transaction that deletes it, so a
    /// session re-created by someone else after the request was checked is left alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
}

impl ErasureRequest {
    /// What the erasure's store steps may reach.
    pub(crate) fn access(&self) -> Access {
        match &self.user_id {
            Some(user) => Access::one_user(&*self.tenant, &**user),
            None => Access::tenant_wide(&*self.tenant),
        }
    }
}

/// A job as stored: the request and when it was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobDocument {
    pub(crate) request: ErasureRequest,
    pub(crate) requested_at: u64,
}

/// How many records of each kind an erasure removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Sessions.
    pub sessions: u64,
    /// Messages.
    pub messages: u64,
    /// Stored vectors.
    pub vectors: u64,
    /// Summaries dropped (a summary covering an erased message is regenerated from what
    /// remains when next needed).
    pub summaries: u64,
    /// Long-term memories.
    #[serde(default)]
    pub memories: u64,
    /// Session memories (rolling summaries of a user's conversations with an agent) that an
    /// erased session or message had been merged into; the next finished conversation
    /// starts a new one.
    #[serde(default)]
    pub session_memories: u64,
    /// Episodes (with their lessons): the user's, or those drawn from an erased session.
    #[serde(default)]
    pub episodes: u64,
    /// Runs of a session one of whose messages was erased, their free text dropped
    /// (content, error, tool calls, metadata; id, status and time stay).
    #[serde(default)]
    pub runs_redacted: u64,
}

impl Counts {
    /// Adds `other`'s figures to these.
    pub(crate) fn add(&mut self, other: &Counts) {
        self.sessions += other.sessions;
        self.messages += other.messages;
        self.vectors += other.vectors;
        self.summaries += other.summaries;
        self.memories += other.memories;
        self.session_memories += other.session_memories;
        self.episodes += other.episodes;
        self.runs_redacted += other.runs_redacted;
    }
}

/// What an erasure did: kept after it completes, listed by the admin API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// The job's id.
    pub id: u64,
    /// The tenant.
    pub tenant: String,
    /// What was asked.
    pub target: Target,
    /// Who asked.
    pub requested_by: String,
    /// The one user it acted for (a user-scoped key's), whose key may read the receipt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// When it was asked (RFC 3339 is the API's business; microseconds here).
    pub requested_at: u64,
    /// When it completed.
    pub completed_at: u64,
    /// What was removed.
    pub counts: Counts,
    /// The sessions removed entirely.
    pub session_ids: Vec<String>,
    /// Whether the job was interrupted (a crash) and completed after a restart, or by
    /// another node sharing the store; its counts then cover only the part done after.
    pub resumed: bool,
}

impl Receipt {
    pub(crate) fn begin(id: u64, document: &JobDocument, resumed: bool) -> Self {
        Self {
            id,
            tenant: document.request.tenant.clone(),
            target: document.request.target.clone(),
            requested_by: document.request.requested_by.clone(),
            user_id: document.request.user_id.clone(),
            requested_at: document.requested_at,
            completed_at: 0,
            counts: Counts::default(),
            session_ids: Vec::new(),
            resumed,
        }
    }

    /// When it completed.
    pub fn completed(&self) -> Timestamp {
        Timestamp::from_micros(self.completed_at)
    }
}
