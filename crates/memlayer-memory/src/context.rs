//! The context service: everything one turn's context needs, in one call. It reads the
//! session from its load checkpoint, applies the persisted summary, summarises overflow (and
//! persists the new checkpoint), recalls older messages for the query outside the window,
//! reads entity memory, and hands all of it to [`assemble`]. The HTTP endpoint and the
//! evaluation harness both call it, so what is evaluated is what is served.

use std::sync::Arc;

use memlayer_index::{Excluded, Recall, RecallQuery, Scope};
use memlayer_store::{
    Access, Message, MessageOutline, Role, SessionMemory, SessionSnapshot, SessionVersion, Store,
    StoreError, Timestamp, blocking,
};
use serde::Serialize;

use crate::MemoryError;
use crate::assemble::{
    Assembled, ContextSettings, LayerInputs, Overflow, RecallScope, RecalledMessage,
    SettingsOverrides, Strategy, assemble, sliding_window, summary_split,
};
use crate::entities::FactSheet;
use crate::fact_cache::{Cached, FactCache, SessionKey};
use crate::history::History;
use crate::lessons::{LessonQuery, build_lessons};
use crate::long_term::{LongTermMemory, MemoryQuery};
use crate::pii::redact_pii;
use crate::summary::{ExtractiveSummarizer, Summarizer, Summary, SummaryRequest};
use crate::tokens::TokenEncoding;

/// The marker session memory starts with in a context.
pub const SESSION_MEMORY_MARKER: &str = "[Earlier conversations with this user]";
/// Longest a session memory may grow; the oldest lines go first.
const SESSION_MEMORY_TOKENS: u32 = 600;

/// Most message indices a context reads back from the newest: a session appended to for
/// long without a summary or a clear would otherwise cost every turn a read of its whole
/// history. Ten thousand messages are far more than any budget shows; older ones stay
/// stored and are reached by recall and search.
const MAX_CONTEXT_MESSAGES: u64 = 10_000;

/// How often a context is built again when a message was erased while it was being built.
const BUILD_ATTEMPTS: usize = 3;

/// Share of the budget a summary may take. With `RECENT_SHARE` for the recent part, the
/// rest is left for facts, recalled messages and the conversation's growth.
const SUMMARY_SHARE: f64 = 0.2;

/// A request for one turn's context.
#[derive(Debug, Clone)]
pub struct ContextRequest {
    /// Whose sessions the request may read: the session must be within it.
    pub access: Access,
    /// The session.
    pub session_id: String,
    /// The new user message the context is for; recall searches older messages with it.
    pub query: Option<String>,
    /// This request's changes to the settings, laid over the defaults, the tenant's saved
    /// settings and those of the session's agent.
    pub overrides: SettingsOverrides,
}

/// How the summary of this context came about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SummaryNote {
    /// Whether this request wrote a new summary (older turns overflowed); `false` with a
    /// new summary that could not be saved because the disk refuses writes.
    pub written: bool,
    /// Which summariser wrote the summary in use.
    pub summarizer: &'static str,
    /// Why the configured summariser was not used, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
}

/// One turn's context with what the layers around the assembly reported.
#[derive(Debug, Clone)]
pub struct Built {
    /// The context and the assembly's report.
    pub assembled: Assembled,
    /// Every message recall brought, best first, whether or not it fit the budget (the
    /// report lists those that did).
    pub recalled: Vec<RecalledMessage>,
    /// Why recall may have missed something, when it may have.
    pub recall_degraded: Option<String>,
    /// Set when a summary was written by this request.
    pub summary: Option<SummaryNote>,
    /// The settings the context was built with.
    pub settings: ContextSettings,
}

/// Builds contexts over one store and its recall index. Cheap to clone.
#[derive(Clone)]
pub struct ContextBuilder {
    store: Store,
    recall: Recall,
    summarizer: Option<Arc<dyn Summarizer>>,
    memories: Option<LongTermMemory>,
    facts: FactCache,
    encoding: TokenEncoding,
}

impl ContextBuilder {
    /// A builder reading `store`, recalling through `recall` (which must index that store),
    /// generated text counted with `encoding`, summarising with the extractive summariser.
    pub fn new(store: Store, recall: Recall, encoding: TokenEncoding) -> Self {
        let facts = FactCache::default();
        // What other nodes sharing the store erase leaves the fact sheets as it leaves the
        // indexes (this node's own erasures drop them through `fact_cache`).
        let following = facts.clone();
        recall.on_followed_removals(move |removals| following.forget_removed(removals));
        Self {
            store,
            recall,
            summarizer: None,
            memories: None,
            facts,
            encoding,
        }
    }

    /// The per-session fact sheets kept between turns; erasure drops entries from it.
    pub fn fact_cache(&self) -> &FactCache {
        &self.facts
    }

    /// Pre-loads the user's long-term memories relevant to the query into combined contexts.
    pub fn with_memories(mut self, memories: LongTermMemory) -> Self {
        self.memories = Some(memories);
        self
    }

    /// Summarises with `summarizer` instead; when it fails, the extractive summariser
    /// steps in and the context says so.
    pub fn with_summarizer(mut self, summarizer: Arc<dyn Summarizer>) -> Self {
        self.summarizer = Some(summarizer);
        self
    }

    /// The older messages recall brings for `query` outside the window `settings` keep, as a
    /// combined context with these settings (and no summary) would ask for them: up to
    /// `settings.recall_k`, in `settings.recall_scope`.
    pub async fn recall_outside_window(
        &self,
        access: &Access,
        session_id: &str,
        query: String,
        settings: &ContextSettings,
    ) -> Result<(Vec<RecalledMessage>, Option<String>), MemoryError> {
        let loaded = self.load(access, session_id).await?;
        let settings = settings.clone().for_turn(true);
        let in_window = window_indices(&loaded.messages, &settings);
        self.recall_beside_window(access, session_id, &loaded, in_window, &settings, query)
            .await
    }

    /// The session's entity memory: the facts its user stated since its load checkpoint.
    pub async fn facts(&self, access: &Access, session_id: &str) -> Result<FactSheet, MemoryError> {
        let loaded = self.load(access, session_id).await?;
        blocking(move || Ok(FactSheet::from_messages(&loaded.messages))).await
    }

    /// One turn's context for `request`.
    ///
    /// A summary is saved only if no message of the session was erased (and the session not
    /// deleted) since it was read; when one was, the context is built again from a new read,
    /// a few times at most.
    pub async fn build(&self, request: ContextRequest) -> Result<Built, MemoryError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.build_once(request.clone()).await {
                Err(MemoryError::Store(StoreError::SessionChanged { .. }))
                    if attempts < BUILD_ATTEMPTS => {}
                built => return built,
            }
        }
    }

    async fn build_once(&self, request: ContextRequest) -> Result<Built, MemoryError> {
        let ContextRequest {
            access,
            session_id,
            query,
            overrides,
        } = request;
        let tenant = access.tenant().to_owned();
        let query = query.filter(|q| !q.trim().is_empty());
        let Planned {
            loaded,
            settings,
            mut summary,
            mut history,
            split,
            mut in_window,
            facts,
        } = self
            .load_for_context(&access, &session_id, overrides, query.is_some())
            .await?;
        let combined = settings.strategy == Strategy::Combined;
        let mut note = None;
        if let Some(cut) = split {
            // Without a summary the history is every loaded message.
            let current = history.as_deref().unwrap_or(&loaded.messages);
            let (written, summary_note) = self
                .summarize(
                    &access,
                    &session_id,
                    &loaded,
                    summary.as_ref(),
                    &current[..cut],
                    &settings,
                )
                .await?;
            let after = after_summary(&loaded.messages, &written);
            in_window = window_indices(&after, &settings);
            history = Some(after);
            summary = Some(written);
            note = Some(summary_note);
        }

        let query_text = query.clone();
        let (recalled, recall_degraded) = match query {
            Some(query) if settings.recalls(true) => {
                self.recall_beside_window(
                    &access,
                    &session_id,
                    &loaded,
                    in_window,
                    &settings,
                    query,
                )
                .await?
            }
            _ => (Vec::new(), None),
        };

        let memories_on = settings.long_term_memory && settings.max_memories > 0;
        let memories = match (&self.memories, query_text) {
            (Some(long_term), Some(query)) if combined && memories_on => long_term
                .recall(MemoryQuery {
                    tenant: tenant.clone(),
                    user_id: loaded.user_id.clone(),
                    agent_id: Some(loaded.agent_id.clone()),
                    query,
                    k: settings.max_memories,
                    kinds: None,
                    tags: None,
                })
                .await?
                .into_iter()
                .map(|hit| hit.memory)
                .collect(),
            _ => Vec::new(),
        };

        // Session memory of earlier conversations; not one this session was merged into
        // (its own turns are in the window, the summary and recall).
        let session_memory = loaded
            .session_memory
            .filter(|m| combined && settings.session_memory && !m.sessions.contains(&session_id))
            .map(|m| m.text);
        let encoding = self.encoding;
        let fact_cache = self.facts.clone();
        let messages = loaded.messages;
        let used = settings.clone();
        let hits = recalled.clone();
        let store = self.store.clone();
        let (user_id, agent_id) = (loaded.user_id, loaded.agent_id);
        // Fact extraction and packing scale with the session's length: off the async workers.
        let assembled = blocking(move || {
            // Every fact since the load checkpoint, summarised turns included.
            let facts = facts.map(|(key, cached)| fact_cache.extend(&key, cached, &messages));
            // Lessons are a few short reads: taken here, beside the packing, they cost no
            // extra hop to the blocking pool.
            let lessons = if combined && settings.lessons {
                let query = LessonQuery {
                    tenant: &tenant,
                    user_id: &user_id,
                    agent_id: Some(&agent_id),
                    task_type: settings.task_type.as_deref(),
                    max_lessons: settings.max_lessons,
                    max_tokens: settings.lesson_tokens,
                };
                build_lessons(&store, &query, encoding)?
            } else {
                None
            };
            let layers = LayerInputs {
                summary: summary.as_ref(),
                facts: facts.as_deref(),
                recalled,
                memories,
                session_memory: session_memory.as_deref(),
                lessons: lessons.as_ref(),
            };
            let history = history.as_deref().unwrap_or(&messages);
            assemble(history, &layers, &settings, encoding)
        })
        .await?;
        Ok(Built {
            assembled,
            recalled: hits,
            recall_degraded,
            summary: note,
            settings: used,
        })
    }

    /// The session's messages from its load checkpoint, its owner and its summary.
    async fn load(&self, access: &Access, session_id: &str) -> Result<Loaded, MemoryError> {
        let store = self.store.clone();
        let (access, session_id) = (access.clone(), session_id.to_owned());
        blocking(move || {
            let snapshot = open_snapshot(&store, &access, &session_id)?;
            let messages = snapshot.messages(context_start(snapshot.session()), usize::MAX)?;
            Loaded::read(&store, access.tenant(), &snapshot, messages)
        })
        .await
    }

    /// What one turn's context needs of the session, from one snapshot: the settings laid
    /// over the saved ones, the outline of every message since the load checkpoint (those
    /// the fact cache keeps, and the store's for the rest), and the content of only the
    /// messages this context can show or has to read — instructions, the window, the
    /// messages the cache has not seen, and everything when a new summary is due or the
    /// strategy shows older turns. The other messages keep an empty content: the history's
    /// split into exchanges, the budget and the report need only their index, role and token
    /// count. Reading all 2,000 messages of a long session took 0.7 ms of a 2.9 ms turn, of
    /// which a 10-exchange window shows 20 (docs/benchmarks.md). `query` says whether the
    /// turn has one, which sizes an unset window (`ContextSettings::for_turn`).
    async fn load_for_context(
        &self,
        access: &Access,
        session_id: &str,
        overrides: SettingsOverrides,
        query: bool,
    ) -> Result<Planned, MemoryError> {
        let store = self.store.clone();
        let fact_cache = self.facts.clone();
        let encoding = self.encoding;
        let (access, session_id) = (access.clone(), session_id.to_owned());
        blocking(move || {
            // Taken before the read: an erasure after it makes the cache refuse what this
            // turn would store (see `FactCache::extend`).
            let epoch = fact_cache.epoch();
            let snapshot = open_snapshot(&store, &access, &session_id)?;
            let loaded = Loaded::read(&store, access.tenant(), &snapshot, Vec::new())?;
            let saved = [&loaded.tenant_settings, &loaded.agent_settings];
            let settings = ContextSettings::for_request(saved.into_iter().flatten(), &overrides)?
                .for_turn(query);
            let summarizing = settings.overflow == Overflow::Summarize;

            // The combined strategy keeps the session's facts and outlines between turns;
            // the outlines and content of what the entry does not cover are read here.
            let cache_key = SessionKey {
                tenant: access.tenant().to_owned(),
                session_id,
                epoch,
                user_id: loaded.user_id.clone(),
                sid: snapshot.sid(),
                load_from: loaded.load_from,
                erasures: snapshot.erasures(),
                message_count: snapshot.session().message_count,
            };
            let cached =
                (settings.strategy == Strategy::Combined).then(|| fact_cache.cached(&cache_key));
            let (kept, read_to): (&[MessageOutline], u64) = cached
                .as_ref()
                .map_or((&[], loaded.load_from), |c| (c.outlines(), c.read_to()));
            let mut messages: Vec<Message> = kept
                .iter()
                .copied()
                .chain(snapshot.outline(read_to)?)
                .map(outline_message)
                .collect();

            // A summary applies while overflow is summarised and it covers turns after the
            // session's load checkpoint (a clear starts the session afresh).
            let summary = loaded
                .summary
                .clone()
                .filter(|s| summarizing && s.first_index >= loaded.load_from);
            let summary_tokens = summary.as_ref().map_or(0, |s| encoding.count(&s.text));
            let shape = Shape::of(&messages, summary.as_ref(), summary_tokens, &settings);
            fill_content(&snapshot, &mut messages, shape.content_from.min(read_to))?;
            drop(snapshot);

            let history = summary.as_ref().map(|s| after_summary(&messages, s));
            Ok(Planned {
                loaded: Loaded { messages, ..loaded },
                settings,
                summary,
                history,
                split: shape.split,
                in_window: shape.in_window,
                facts: cached.map(|cached| (cache_key, cached)),
            })
        })
        .await
    }

    /// Folds `older` into the summary with the configured summariser (the extractive one if
    /// it fails) and persists it as the session's new checkpoint.
    async fn summarize(
        &self,
        access: &Access,
        session_id: &str,
        loaded: &Loaded,
        previous: Option<&Summary>,
        older: &[Message],
        settings: &ContextSettings,
    ) -> Result<(Summary, SummaryNote), MemoryError> {
        let last_older = older.last().map_or(0, |m| m.index);
        let facts =
            FactSheet::from_messages(loaded.messages.iter().filter(|m| m.index <= last_older));
        let max_tokens = (f64::from(settings.budget()) * SUMMARY_SHARE).floor() as u32;
        let (summary, mut note) = self
            .condense(previous, older, facts, max_tokens, settings.redact_pii)
            .await?;
        let saved = self
            .store
            .sessions()
            .save_summary(
                access,
                session_id,
                loaded.version,
                summary.text.clone(),
                summary.first_index,
                summary.last_index,
            )
            .await;
        match saved {
            Ok(_) => {}
            // The disk refuses writes: the summary serves this context unsaved (`written`
            // says so) and a later context summarises again. A context only reads what is
            // stored, and must not fail for want of disk space.
            Err(err) if err.disk_fault().is_some() => note.written = false,
            Err(err) => return Err(err.into()),
        }
        Ok((summary, note))
    }

    /// Runs the configured summariser over `messages` (the extractive one if none is
    /// configured or it fails), with personal data taken out first when `redact` says so.
    async fn condense(
        &self,
        previous: Option<&Summary>,
        messages: &[Message],
        facts: FactSheet,
        max_tokens: u32,
        redact: bool,
    ) -> Result<(Summary, SummaryNote), MemoryError> {
        // Instructions stay in the context on their own; they are not summarised. Personal
        // data is taken out before a summariser (possibly a remote model) sees the turns.
        let conversation: Vec<Message> = messages
            .iter()
            .filter(|m| m.role != Role::System)
            .map(|m| {
                let mut message = m.clone();
                if redact {
                    message.content = redact_pii(&message.content).into_owned();
                }
                message
            })
            .collect();
        let facts = if redact { facts.redacted() } else { facts };
        let request = SummaryRequest {
            previous,
            messages: &conversation,
            facts: &facts,
            max_tokens,
            encoding: self.encoding,
        };
        let extractive = ExtractiveSummarizer;
        let (summary, note) = match &self.summarizer {
            Some(configured) => match configured.summarize(request).await {
                Ok(summary) => (summary, (configured.name(), None)),
                Err(err) => {
                    tracing::warn!(error = %err.for_log(), "summariser failed; using the extractive one");
                    let summary = extractive.summarize(request).await?;
                    (summary, (extractive.name(), Some(err.to_string())))
                }
            },
            None => (
                extractive.summarize(request).await?,
                (extractive.name(), None),
            ),
        };
        // Whatever a model echoed back, no personal data is persisted in a summary.
        let summary = if redact {
            Summary {
                text: redact_pii(&summary.text).into_owned(),
                ..summary
            }
        } else {
            summary
        };
        Ok((
            summary,
            SummaryNote {
                written: true,
                summarizer: note.0,
                fallback_reason: note.1,
            },
        ))
    }

    /// Merges a finished conversation into the rolling summary of its user's conversations
    /// with its agent (session memory), which later conversations load as a layer. Merging
    /// the same session twice changes nothing. Call it off the request path: it summarises.
    /// The session is ended: the inactivity timeout leaves it alone from now on. A message
    /// erased while the merge ran makes it start again from a new read.
    pub async fn end_session(
        &self,
        access: &Access,
        session_id: &str,
    ) -> Result<SessionMemory, MemoryError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.end_session_once(access, session_id).await {
                Err(MemoryError::Store(StoreError::SessionChanged { .. }))
                    if attempts < BUILD_ATTEMPTS => {}
                ended => return ended,
            }
        }
    }

    async fn end_session_once(
        &self,
        access: &Access,
        session_id: &str,
    ) -> Result<SessionMemory, MemoryError> {
        let tenant = access.tenant();
        self.store
            .sessions()
            .end_session_activity(access, session_id)
            .await?;
        let loaded = self.load(access, session_id).await?;
        let store = self.store.clone();
        let (owner_tenant, user, agent) = (
            tenant.to_owned(),
            loaded.user_id.clone(),
            loaded.agent_id.clone(),
        );
        let current = blocking(move || {
            store
                .memories()
                .session_memory(&owner_tenant, &user, &agent)
        })
        .await?;
        if let Some(current) = &current
            && current.sessions.iter().any(|s| s == session_id)
        {
            return Ok(current.clone());
        }
        let Some(last) = loaded.messages.last().map(|m| m.index) else {
            return current.ok_or(MemoryError::NothingToSummarize);
        };
        let previous = current.as_ref().map(|memory| Summary {
            text: memory.text.clone(),
            first_index: 0,
            last_index: last,
        });
        let facts = FactSheet::from_messages(&loaded.messages);
        let (summary, _) = self
            .condense(
                previous.as_ref(),
                &loaded.messages,
                facts,
                SESSION_MEMORY_TOKENS,
                true,
            )
            .await?;
        // The summariser's header names a message range of one session; session memory
        // spans conversations.
        let body = summary.text.split_once('\n').map_or("", |(_, rest)| rest);
        let mut sessions = current.map(|m| m.sessions).unwrap_or_default();
        sessions.push(session_id.to_owned());
        let memory = SessionMemory {
            text: format!("{SESSION_MEMORY_MARKER}\n{body}"),
            sessions,
            updated_at: Timestamp::now(),
        };
        self.store
            .memories()
            .put_session_memory(
                tenant,
                &loaded.user_id,
                &loaded.agent_id,
                memory.clone(),
                (session_id, loaded.version),
            )
            .await?;
        Ok(memory)
    }

    /// The best `settings.recall_k` older messages for `query`, leaving out the window's
    /// messages (`in_window`).
    async fn recall_beside_window(
        &self,
        access: &Access,
        session_id: &str,
        loaded: &Loaded,
        in_window: Vec<u64>,
        settings: &ContextSettings,
        query: String,
    ) -> Result<(Vec<RecalledMessage>, Option<String>), MemoryError> {
        let scope = match settings.recall_scope {
            RecallScope::Session => Scope::Session {
                session_id: session_id.to_owned(),
            },
            RecallScope::User => Scope::User {
                user_id: loaded.user_id.clone(),
                agent_id: Some(loaded.agent_id.clone()),
            },
        };
        let recalled = self
            .recall
            .recall(RecallQuery {
                access: access.clone(),
                scope,
                query,
                k: settings.recall_k,
                roles: None,
                after: None,
                before: None,
                exclude: Some(Excluded {
                    session_id: session_id.to_owned(),
                    indices: in_window,
                }),
            })
            .await?;
        let hits = recalled
            .hits
            .into_iter()
            .map(|hit| RecalledMessage {
                current_session: hit.session.session_id == session_id,
                session_id: hit.session.session_id,
                message: hit.message,
                score: hit.score,
            })
            .collect();
        Ok((hits, recalled.degraded))
    }
}

/// A session as one context reads it.
struct Loaded {
    session_memory: Option<SessionMemory>,
    tenant_settings: Option<SettingsOverrides>,
    agent_settings: Option<SettingsOverrides>,
    user_id: String,
    agent_id: String,
    /// Where the context reads from: the session's load checkpoint, or later
    /// ([`context_start`]).
    load_from: u64,
    /// The session's version in the read: derived data is saved only while it holds.
    version: SessionVersion,
    /// From the load checkpoint on. In a context's load only the messages it needs carry
    /// their content (see `ContextBuilder::load_for_context`).
    messages: Vec<Message>,
    summary: Option<Summary>,
}

impl Loaded {
    /// Everything but the messages, from `snapshot` and the saved settings.
    fn read(
        store: &Store,
        tenant: &str,
        snapshot: &SessionSnapshot,
        messages: Vec<Message>,
    ) -> Result<Self, MemoryError> {
        let session = snapshot.session();
        let summary = snapshot.summary()?.map(|s| Summary {
            text: s.text,
            first_index: s.first_index,
            last_index: s.last_index,
        });
        Ok(Self {
            session_memory: store.memories().session_memory(
                tenant,
                &session.user_id,
                &session.agent_id,
            )?,
            tenant_settings: store.tenants().settings(tenant, None)?,
            agent_settings: store.tenants().settings(tenant, Some(&session.agent_id))?,
            user_id: session.user_id.clone(),
            agent_id: session.agent_id.clone(),
            load_from: context_start(session),
            version: snapshot.version(),
            messages,
            summary,
        })
    }
}

/// What a context's load decided besides the messages.
struct Planned {
    loaded: Loaded,
    /// The defaults with the tenant's, the agent's and the request's settings laid over.
    settings: ContextSettings,
    /// The summary in use, when overflow is summarised.
    summary: Option<Summary>,
    /// The history after `summary`; `None` when there is no summary and the history is
    /// every loaded message.
    history: Option<Vec<Message>>,
    /// Where the history splits into a part to summarise and a recent part, when it
    /// overflows and overflow is summarised.
    split: Option<usize>,
    /// The indices of the window's messages, which recall leaves out.
    in_window: Vec<u64>,
    /// The facts and outlines kept from earlier turns, for the combined strategy, with the
    /// snapshot they were checked against.
    facts: Option<(SessionKey, Cached)>,
}

/// The first message index a context of `session` reads: its load checkpoint (a clear or a
/// summary), but no more than [`MAX_CONTEXT_MESSAGES`] indices back from the newest.
fn context_start(session: &memlayer_store::Session) -> u64 {
    session
        .load_from
        .max(session.message_count.saturating_sub(MAX_CONTEXT_MESSAGES))
}

fn open_snapshot(
    store: &Store,
    access: &Access,
    session_id: &str,
) -> Result<SessionSnapshot, MemoryError> {
    store
        .sessions()
        .snapshot(access, session_id)?
        .ok_or_else(|| {
            StoreError::SessionNotFound {
                session_id: session_id.to_owned(),
            }
            .into()
        })
}

/// A message standing for its outline: no content, no metadata.
fn outline_message(outline: MessageOutline) -> Message {
    Message {
        index: outline.index,
        role: outline.role,
        content: String::new(),
        timestamp: outline.timestamp,
        token_count: outline.token_count,
        metadata: Default::default(),
    }
}

/// What a context will show of a session, decided on its messages' outlines.
#[derive(Debug)]
struct Shape {
    /// Where the history splits for a new summary, when it overflows and overflow is
    /// summarised.
    split: Option<usize>,
    /// The indices of the window's messages, which recall leaves out.
    in_window: Vec<u64>,
    /// The first index whose content the context may show (instructions aside): the
    /// window's first message, or the first message when older turns are shown as stubs,
    /// as the full history, or summarised.
    content_from: u64,
}

impl Shape {
    /// The shape of a context over `messages` (the session from its load checkpoint on),
    /// with `summary` in use costing `summary_tokens`.
    fn of(
        messages: &[Message],
        summary: Option<&Summary>,
        summary_tokens: u32,
        settings: &ContextSettings,
    ) -> Self {
        let after = summary.map(|s| after_summary(messages, s));
        let history = after.as_deref().unwrap_or(messages);
        let split = match settings.overflow {
            Overflow::Summarize => summary_split(history, summary_tokens, settings),
            Overflow::Drop => None,
        };
        let in_window = window_indices(history, settings);
        let shows_older = split.is_some()
            || !matches!(
                settings.strategy,
                Strategy::SlidingWindow | Strategy::Combined
            );
        let content_from = match messages.first() {
            Some(first) if shows_older => first.index,
            _ => in_window.first().copied().unwrap_or(u64::MAX),
        };
        Self {
            split,
            in_window,
            content_from,
        }
    }
}

/// Reads into `messages` (outlines of `snapshot`, in index order) the content of every
/// message from index `from` on and of every instruction before it: instructions are in
/// every context.
fn fill_content(
    snapshot: &SessionSnapshot,
    messages: &mut [Message],
    from: u64,
) -> Result<(), MemoryError> {
    let start = messages.partition_point(|m| m.index < from);
    let instructions: Vec<u64> = messages[..start]
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.index)
        .collect();
    let tail = match messages.get(start) {
        Some(first) => snapshot.messages(first.index, usize::MAX)?,
        None => Vec::new(),
    };
    // The outlines describe this snapshot (those the fact cache kept were checked against
    // it, the others were read from it), so every message read here has its outline.
    for message in snapshot.messages_at(&instructions)?.into_iter().chain(tail) {
        if let Ok(position) = messages.binary_search_by_key(&message.index, |m| m.index) {
            messages[position] = message;
        }
    }
    Ok(())
}

/// The indices of the messages the sliding window of `settings` keeps of `history`, which
/// recall leaves out.
fn window_indices(history: &[Message], settings: &ContextSettings) -> Vec<u64> {
    sliding_window(&History::new(history), settings)
        .recent
        .iter()
        .flat_map(|exchange| exchange.messages.iter().map(|m| m.index))
        .collect()
}

/// The messages a context's history holds once `summary` stands for the older ones: every
/// instruction (they are never summarised away) and every message after the summary.
fn after_summary(messages: &[Message], summary: &Summary) -> Vec<Message> {
    messages
        .iter()
        .filter(|m| m.role == Role::System || m.index > summary.last_index)
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{Just, any, prop, prop_assert, prop_assert_eq, prop_oneof, proptest};
    use proptest::strategy::Strategy as Generator;

    use super::*;
    use crate::render::Layer;

    const ENCODING: TokenEncoding = TokenEncoding::Cl100kBase;

    fn arb_conversation() -> impl Generator<Value = Vec<Message>> {
        let role = prop_oneof![
            1 => Just(Role::System),
            4 => Just(Role::User),
            4 => Just(Role::Assistant),
            1 => Just(Role::Tool),
        ];
        // Gaps in the indices stand for erased messages; the first index for a cleared start.
        proptest::collection::vec((role, "[a-z ]{0,60}", 1u64..3), 0..40).prop_map(|lines| {
            let mut index = 3;
            lines
                .into_iter()
                .map(|(role, content, step)| {
                    index += step;
                    Message {
                        index,
                        role,
                        token_count: ENCODING.count(&content),
                        content,
                        timestamp: Timestamp::from_micros(index),
                        metadata: Default::default(),
                    }
                })
                .collect()
        })
    }

    fn arb_settings() -> impl Generator<Value = ContextSettings> {
        (
            prop_oneof![
                Just(Strategy::FullHistory),
                Just(Strategy::SlidingWindow),
                Just(Strategy::HistoryDepth),
                Just(Strategy::Combined)
            ],
            256u32..1_500,
            1usize..8,
            prop::option::of(20u32..300),
            any::<bool>(),
        )
            .prop_map(
                |(strategy, context_window, turns, window_tokens, summarize)| ContextSettings {
                    strategy,
                    context_window,
                    max_turns: Some(turns),
                    window_tokens,
                    session_history_depth: turns,
                    overflow: if summarize {
                        Overflow::Summarize
                    } else {
                        Overflow::Drop
                    },
                    ..ContextSettings::default()
                },
            )
    }

    proptest! {
        /// A context assembled from messages whose content was read only where the shape
        /// says (the window onwards, and instructions) is the context assembled from every
        /// message in full: the outlines stand in for everything the context does not show.
        #[test]
        fn outlines_outside_the_shape_change_nothing(
            messages in arb_conversation(),
            settings in arb_settings(),
            summary_end in proptest::option::of(0usize..40),
        ) {
            // A summary of the first messages, as a steady-state summarised session has.
            let summary = summary_end
                .filter(|_| settings.overflow == Overflow::Summarize)
                .and_then(|end| messages.get(..end.min(messages.len()))?.last())
                .map(|last| Summary {
                    text: "[Conversation Summary] earlier turns".to_owned(),
                    first_index: messages[0].index,
                    last_index: last.index,
                });
            let summary_tokens = summary.as_ref().map_or(0, |s| ENCODING.count(&s.text));
            let shape = Shape::of(&messages, summary.as_ref(), summary_tokens, &settings);
            let outlined: Vec<Message> = messages
                .iter()
                .map(|m| {
                    if m.role == Role::System || m.index >= shape.content_from {
                        m.clone()
                    } else {
                        outline_message(MessageOutline {
                            index: m.index,
                            role: m.role,
                            timestamp: m.timestamp,
                            token_count: m.token_count,
                        })
                    }
                })
                .collect();
            let reshaped =
                Shape::of(&outlined, summary.as_ref(), summary_tokens, &settings);
            prop_assert_eq!(
                (reshaped.split, &reshaped.in_window, reshaped.content_from),
                (shape.split, &shape.in_window, shape.content_from)
            );
            if shape.split.is_some() {
                // A summary is due: the summariser reads every message.
                prop_assert!(messages.first().is_none_or(|m| m.index >= shape.content_from));
            }
            let assembled = |messages: &[Message]| {
                let history = summary
                    .as_ref()
                    .map(|s| after_summary(messages, s))
                    .unwrap_or_else(|| messages.to_vec());
                let layers = LayerInputs {
                    summary: summary.as_ref(),
                    ..LayerInputs::default()
                };
                assemble(&history, &layers, &settings, ENCODING).unwrap()
            };
            let full = assembled(&messages);
            prop_assert_eq!(&assembled(&outlined), &full);
            // The window recall leaves out is the window the context shows.
            if settings.strategy == Strategy::Combined {
                let window: Vec<u64> = full
                    .messages
                    .iter()
                    .filter(|m| m.layer == Layer::Window)
                    .flat_map(|m| m.sources.iter().copied())
                    .collect();
                prop_assert!(window.iter().all(|i| shape.in_window.contains(i)));
            }
        }
    }
}
