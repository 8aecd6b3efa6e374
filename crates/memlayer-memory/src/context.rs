//! The context service: everything one turn's context needs, in one call. It reads the
//! session from its load checkpoint, applies the persisted summary, summarises overflow (and
//! persists the new checkpoint), recalls older messages for the query outside the window,
//! reads entity memory, and hands all of it to [`assemble`]. The HTTP endpoint and the
//! evaluation harness both call it, so what is evaluated is what is served.

use std::sync::Arc;

use memlayer_index::{Excluded, Recall, RecallQuery, Scope};
use memlayer_store::{Message, Role, SessionMemory, Store, StoreError, Timestamp};
use serde::Serialize;

use crate::MemoryError;
use crate::assemble::{
    Assembled, ContextSettings, LayerInputs, Overflow, RecallScope, RecalledMessage,
    SettingsOverrides, Strategy, assemble, summary_split,
};
use crate::entities::FactSheet;
use crate::fact_cache::{FactCache, SessionKey};
use crate::history::{History, Window};
use crate::lessons::{LessonQuery, build_lessons};
use crate::long_term::{LongTermMemory, MemoryQuery};
use crate::pii::redact_pii;
use crate::summary::{ExtractiveSummarizer, Summarizer, Summary, SummaryRequest};
use crate::tokens::TokenEncoding;

/// The marker session memory starts with in a context.
pub const SESSION_MEMORY_MARKER: &str = "[Earlier conversations with this user]";
/// Longest a session memory may grow; the oldest lines go first.
const SESSION_MEMORY_TOKENS: u32 = 600;

/// Share of the budget a summary may take. With `RECENT_SHARE` for the recent part, the
/// rest is left for facts, recalled messages and the conversation's growth.
const SUMMARY_SHARE: f64 = 0.2;

/// A request for one turn's context.
#[derive(Debug, Clone)]
pub struct ContextRequest {
    /// The tenant.
    pub tenant: String,
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
    /// Whether this request wrote a new summary (older turns overflowed).
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
        Self {
            store,
            recall,
            summarizer: None,
            memories: None,
            facts: FactCache::default(),
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
        tenant: &str,
        session_id: &str,
        query: String,
        settings: &ContextSettings,
    ) -> Result<(Vec<RecalledMessage>, Option<String>), MemoryError> {
        let loaded = self.load(tenant, session_id).await?;
        self.recall_beside_window(
            tenant,
            session_id,
            &loaded,
            &loaded.messages,
            settings,
            query,
        )
        .await
    }

    /// The session's entity memory: the facts its user stated since its load checkpoint.
    pub async fn facts(&self, tenant: &str, session_id: &str) -> Result<FactSheet, MemoryError> {
        let loaded = self.load(tenant, session_id).await?;
        blocking(move || Ok(FactSheet::from_messages(&loaded.messages))).await
    }

    /// One turn's context for `request`.
    pub async fn build(&self, request: ContextRequest) -> Result<Built, MemoryError> {
        let ContextRequest {
            tenant,
            session_id,
            query,
            overrides,
        } = request;
        let loaded = self.load(&tenant, &session_id).await?;
        let saved = [&loaded.tenant_settings, &loaded.agent_settings];
        let settings = ContextSettings::layered(saved.into_iter().flatten().chain([&overrides]))?;
        let combined = settings.strategy == Strategy::Combined;
        let summarizing = settings.overflow == Overflow::Summarize;

        // A summary applies while overflow is summarised and it covers turns after the
        // session's load checkpoint (a clear starts the session afresh).
        let load_from = loaded.load_from;
        let mut summary = loaded
            .summary
            .clone()
            .filter(|s| summarizing && s.first_index >= load_from);
        let mut history = after_summary(&loaded.messages, summary.as_ref());
        let mut note = None;
        if summarizing {
            let summary_tokens = summary.as_ref().map_or(0, |s| self.encoding.count(&s.text));
            if let Some(cut) = summary_split(&history, summary_tokens, &settings) {
                let (written, summary_note) = self
                    .summarize(
                        &tenant,
                        &session_id,
                        &loaded.messages,
                        summary.as_ref(),
                        &history[..cut],
                        &settings,
                    )
                    .await?;
                history = after_summary(&loaded.messages, Some(&written));
                summary = Some(written);
                note = Some(summary_note);
            }
        }

        let query = query.filter(|q| !q.trim().is_empty());
        let query_text = query.clone();
        let (recalled, recall_degraded) = match query {
            Some(query) if combined && settings.recall_k > 0 => {
                self.recall_beside_window(&tenant, &session_id, &loaded, &history, &settings, query)
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
        let created_at = loaded.created_at;
        let user_id = loaded.user_id.clone();
        let used = settings.clone();
        let hits = recalled.clone();
        let store = self.store.clone();
        let agent_id = loaded.agent_id;
        // Fact extraction and packing scale with the session's length: off the async workers.
        let assembled = blocking(move || {
            // Every fact since the load checkpoint, summarised turns included.
            let facts = combined.then(|| {
                let key = SessionKey {
                    tenant: &tenant,
                    session_id: &session_id,
                    user_id: &user_id,
                    created_at,
                    load_from,
                };
                fact_cache.facts(&key, &messages)
            });
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
                facts: facts.as_ref(),
                recalled,
                memories,
                session_memory: session_memory.as_deref(),
                lessons: lessons.as_ref(),
            };
            assemble(&history, &layers, &settings, encoding)
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
    async fn load(&self, tenant: &str, session_id: &str) -> Result<Loaded, MemoryError> {
        let store = self.store.clone();
        let (tenant, session_id) = (tenant.to_owned(), session_id.to_owned());
        blocking(move || {
            let Some(session) = store.session(&tenant, &session_id)? else {
                return Err(StoreError::SessionNotFound { session_id }.into());
            };
            let messages = store.messages(&tenant, &session_id, session.load_from, usize::MAX)?;
            let summary = store.summary(&tenant, &session_id)?.map(|s| Summary {
                text: s.text,
                first_index: s.first_index,
                last_index: s.last_index,
            });
            Ok(Loaded {
                created_at: session.created_at,
                session_memory: store.session_memory(
                    &tenant,
                    &session.user_id,
                    &session.agent_id,
                )?,
                tenant_settings: store.settings(&tenant, None)?,
                agent_settings: store.settings(&tenant, Some(&session.agent_id))?,
                user_id: session.user_id,
                agent_id: session.agent_id,
                load_from: session.load_from,
                messages,
                summary,
            })
        })
        .await
    }

    /// Folds `older` into the summary with the configured summariser (the extractive one if
    /// it fails) and persists it as the session's new checkpoint.
    async fn summarize(
        &self,
        tenant: &str,
        session_id: &str,
        all: &[Message],
        previous: Option<&Summary>,
        older: &[Message],
        settings: &ContextSettings,
    ) -> Result<(Summary, SummaryNote), MemoryError> {
        let last_older = older.last().map_or(0, |m| m.index);
        let facts = FactSheet::from_messages(all.iter().filter(|m| m.index <= last_older));
        let max_tokens = (f64::from(settings.budget()) * SUMMARY_SHARE).floor() as u32;
        let (summary, note) = self
            .condense(previous, older, facts, max_tokens, settings.redact_pii)
            .await?;
        self.store
            .save_summary(
                tenant,
                session_id,
                summary.text.clone(),
                summary.first_index,
                summary.last_index,
            )
            .await?;
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
                    tracing::warn!(error = %err, "summariser failed; using the extractive one");
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
    /// The session is ended: the inactivity timeout leaves it alone from now on.
    pub async fn end_session(
        &self,
        tenant: &str,
        session_id: &str,
    ) -> Result<SessionMemory, MemoryError> {
        self.store.end_session_activity(tenant, session_id).await?;
        let loaded = self.load(tenant, session_id).await?;
        let store = self.store.clone();
        let (owner_tenant, user, agent) = (
            tenant.to_owned(),
            loaded.user_id.clone(),
            loaded.agent_id.clone(),
        );
        let current =
            blocking(move || Ok(store.session_memory(&owner_tenant, &user, &agent)?)).await?;
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
            .put_session_memory(tenant, &loaded.user_id, &loaded.agent_id, memory.clone())
            .await?;
        Ok(memory)
    }

    /// The best `settings.recall_k` older messages for `query`, leaving out what the window
    /// already holds.
    async fn recall_beside_window(
        &self,
        tenant: &str,
        session_id: &str,
        loaded: &Loaded,
        history: &[Message],
        settings: &ContextSettings,
        query: String,
    ) -> Result<(Vec<RecalledMessage>, Option<String>), MemoryError> {
        let split = History::new(history);
        let window = match settings.window_tokens {
            Some(tokens) => Window::last_tokens(&split, tokens),
            None => Window::last_turns(&split, settings.max_turns),
        };
        let in_window = window
            .recent
            .iter()
            .flat_map(|exchange| exchange.messages.iter().map(|m| m.index))
            .collect();
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
                tenant: tenant.to_owned(),
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
    created_at: Timestamp,
    session_memory: Option<SessionMemory>,
    tenant_settings: Option<SettingsOverrides>,
    agent_settings: Option<SettingsOverrides>,
    user_id: String,
    agent_id: String,
    load_from: u64,
    /// From the load checkpoint on.
    messages: Vec<Message>,
    summary: Option<Summary>,
}

/// The messages a context's history holds once `summary` stands for the older ones: every
/// instruction (they are never summarised away) and every message after the summary.
fn after_summary(messages: &[Message], summary: Option<&Summary>) -> Vec<Message> {
    let Some(summary) = summary else {
        return messages.to_vec();
    };
    messages
        .iter()
        .filter(|m| m.role == Role::System || m.index > summary.last_index)
        .cloned()
        .collect()
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, MemoryError> + Send + 'static,
) -> Result<T, MemoryError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| MemoryError::Task(err.to_string()))?
}
