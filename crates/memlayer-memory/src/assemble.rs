//! Context assembly: one turn's context built from the memory layers inside one token
//! budget, with a report of what went in, what was left out and why.
//!
//! The budget is the model's context window less a reserve for the prompt and the answer
//! (`window_reserve`, 10% by default). Pieces are admitted in priority order — instructions,
//! the newest exchange, known facts, long-term memories, lessons, session memory, the
//! conversation summary, older exchanges newest first, recalled messages, earlier-question
//! stubs — and each piece that does not fit is reported
//! as dropped. The output is then laid out in prompt order ([`Layer`]'s order, the window in
//! conversation order), so priorities decide *what* is kept, never *where* it appears.

use memlayer_store::{Memory, MemoryKind, Message, Timestamp};
use serde::Serialize;

use crate::MemoryError;
use crate::entities::FactSheet;
use crate::history::{Exchange, History, Window, message_tokens, saturating_sum};
use crate::lessons::Lessons;
use crate::render::{ContextMessage, Layer, capped_list, earlier_questions, role_name};
use crate::summary::Summary;
use crate::tokens::TokenEncoding;

/// How the window of recent history is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Every exchange, oldest dropped first when over budget.
    FullHistory,
    /// The last `max_turns` exchanges (or as many as `window_tokens` allows).
    SlidingWindow,
    /// The last `session_history_depth` exchanges in full, older questions as stubs.
    HistoryDepth,
    /// Facts, summary, recalled messages and a sliding window in one budget.
    Combined,
}

/// What happens to the history that does not fit the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overflow {
    /// The oldest exchanges are left out, whole (the default).
    #[default]
    Drop,
    /// The older part is summarised into one `[Conversation Summary]` message, persisted,
    /// and later loads start after it; the recent part keeps [`RECENT_SHARE`] of the budget.
    Summarize,
}

/// Share of the budget the recent part keeps when older turns are summarised. The rest
/// leaves room for the summary and for the conversation to grow before the next summary.
pub const RECENT_SHARE: f64 = 0.7;

/// Where recall looks for older messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecallScope {
    /// The current session only.
    Session,
    /// Every session of the same user with the same agent (the default): what a returning
    /// user said in an earlier conversation comes back. Another agent's sessions never do.
    #[default]
    User,
}

/// Exchanges a sliding window keeps when `max_turns` is not set.
pub const WINDOW_TURNS: usize = 10;
/// Exchanges a combined window keeps when `max_turns` is not set and the context recalls
/// (there is a query and `recall_k` is above 0). Recall brings back the older messages the
/// query needs and entity memory keeps the stated facts, so the window only has to carry the
/// thread of the conversation. On `memlayer eval planted` (2026-11-26) every window from 2 to
/// 10 exchanges finds all 20 planted facts; at the 60-exchange conversation's last turn 4
/// exchanges cost 8.9% of full history's tokens against 19.0% for 10. Two would cost 6.5%,
/// but the planted facts do not measure what the window is for — the last few answers a
/// follow-up question refers to ("and the second one?") — so the window stays at 4.
pub const RECALLING_WINDOW_TURNS: usize = 4;

/// Most older messages recall may add to one context.
pub const MAX_RECALL_K: usize = 50;
/// Most long-term memories one context may pre-load.
pub const MAX_MEMORIES: usize = 200;
/// Most recent lessons of a task type one context may show.
pub const MAX_LESSONS: usize = 50;

/// Everything that shapes a context. Defaults follow the product documents.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextSettings {
    /// How the window is chosen.
    pub strategy: Strategy,
    /// The model's context window in tokens.
    pub context_window: u32,
    /// Fraction of the context window kept free for the prompt and the answer. A double, so
    /// that every number the API's range admits is checked as written.
    pub window_reserve: f64,
    /// Exchanges (turn pairs) a sliding window keeps. Unset, the window adapts:
    /// [`WINDOW_TURNS`], or [`RECALLING_WINDOW_TURNS`] for a combined context that recalls
    /// (see [`ContextSettings::for_turn`]).
    pub max_turns: Option<usize>,
    /// A sliding window by tokens instead of turns, when set.
    pub window_tokens: Option<u32>,
    /// Exchanges history depth keeps in full (1–100).
    pub session_history_depth: usize,
    /// What happens to history over the budget.
    pub overflow: Overflow,
    /// Older messages recall may add to a combined context when there is a query (0–50).
    pub recall_k: usize,
    /// Where recall looks.
    pub recall_scope: RecallScope,
    /// Long-term memories a combined context pre-loads for the query (0–200).
    pub max_memories: usize,
    /// Most tokens the long-term memories may take.
    pub memory_tokens: u32,
    /// Whether a combined context pre-loads long-term memories at all.
    pub long_term_memory: bool,
    /// Whether a combined context loads the session memory of the user's earlier
    /// conversations with the agent.
    pub session_memory: bool,
    /// Whether a combined context shows lessons from the user's earlier episodes.
    pub lessons: bool,
    /// The kind of task the next turn is about: its recent lessons join the standing ones.
    pub task_type: Option<String>,
    /// Most recent lessons of the task type a context shows (0–50); standing lessons are
    /// shown besides.
    pub max_lessons: usize,
    /// Most tokens the lessons may take.
    pub lesson_tokens: u32,
    /// Replace e-mail addresses, phone numbers, card numbers, SSNs and IBANs in summaries
    /// (and in what a summarising model is sent) with placeholders. The values stay in entity
    /// memory, which is erased with the messages; a persisted summary should not hold them.
    pub redact_pii: bool,
}

impl Default for ContextSettings {
    fn default() -> Self {
        Self {
            strategy: Strategy::Combined,
            context_window: 8_192,
            window_reserve: 0.1,
            max_turns: None,
            window_tokens: None,
            session_history_depth: 20,
            overflow: Overflow::Drop,
            recall_k: 4,
            recall_scope: RecallScope::User,
            max_memories: 50,
            memory_tokens: 1_000,
            long_term_memory: true,
            session_memory: true,
            lessons: true,
            task_type: None,
            max_lessons: 5,
            lesson_tokens: 500,
            redact_pii: true,
        }
    }
}

/// A partial settings document: the keys of [`ContextSettings`] to change, as JSON.
pub type SettingsOverrides = serde_json::Map<String, serde_json::Value>;

impl ContextSettings {
    /// The settings that result from laying `overrides` over the defaults in order (the
    /// tenant's, the agent's, the request's): a key in a later document replaces the same
    /// key in an earlier one. Unknown keys, wrong types and out-of-range values are refused;
    /// a whole number written as a float counts as an integer, as in JSON Schema.
    pub fn layered<'a>(
        overrides: impl IntoIterator<Item = &'a SettingsOverrides>,
    ) -> Result<Self, MemoryError> {
        let serde_json::Value::Object(mut merged) =
            serde_json::to_value(Self::default()).expect("settings serialise to JSON")
        else {
            unreachable!("settings serialise to a JSON object")
        };
        for document in overrides {
            merged.extend(document.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let mut merged = serde_json::Value::Object(merged);
        crate::whole_floats_to_integers(&mut merged);
        let settings: Self =
            serde_json::from_value(merged).map_err(|err| MemoryError::InvalidSetting {
                field: "settings",
                reason: err.to_string(),
            })?;
        settings.validate()?;
        Ok(settings)
    }

    /// The settings of one request: `request` laid over the saved documents (the tenant's,
    /// then the agent's) like [`ContextSettings::layered`], except that a request may tighten
    /// the saved policy but never loosen it. Policy is `redact_pii`: a request may turn
    /// redaction on, and turn it off only where a saved document did, so a caller cannot
    /// have personal data written into a persisted summary against the tenant's settings.
    pub fn for_request<'a>(
        saved: impl IntoIterator<Item = &'a SettingsOverrides> + Clone,
        request: &'a SettingsOverrides,
    ) -> Result<Self, MemoryError> {
        const REDACT_PII: &str = "redact_pii";
        if request.get(REDACT_PII) == Some(&serde_json::Value::Bool(false)) {
            let saved_redacts = saved
                .clone()
                .into_iter()
                .filter_map(|document| document.get(REDACT_PII))
                .last()
                .map_or(Self::default().redact_pii, |value| {
                    value.as_bool() != Some(false)
                });
            if saved_redacts {
                return Err(MemoryError::LoosensPolicy {
                    field: REDACT_PII,
                    reason: "a request may not turn off the PII redaction its tenant's or \
                             agent's settings ask for; save `redact_pii: false` there to allow \
                             it"
                    .into(),
                });
            }
        }
        Self::layered(saved.into_iter().chain([request]))
    }

    /// Checks every value's range.
    pub fn validate(&self) -> Result<(), MemoryError> {
        let invalid = |field: &'static str, reason: &str| {
            Err(MemoryError::InvalidSetting {
                field,
                reason: reason.to_owned(),
            })
        };
        if !(1..=100).contains(&self.session_history_depth) {
            return invalid("session_history_depth", "must be between 1 and 100");
        }
        if !(0.0..0.9).contains(&self.window_reserve) {
            return invalid("window_reserve", "must be at least 0 and below 0.9");
        }
        if !(256..=10_000_000).contains(&self.context_window) {
            return invalid(
                "context_window",
                "must be between 256 and 10,000,000 tokens",
            );
        }
        if self
            .max_turns
            .is_some_and(|turns| !(1..=1_000).contains(&turns))
        {
            return invalid("max_turns", "must be between 1 and 1,000");
        }
        if self.window_tokens == Some(0) {
            return invalid("window_tokens", "must be positive");
        }
        if self.recall_k > MAX_RECALL_K {
            return invalid("recall_k", "must be at most 50");
        }
        if self.max_memories > MAX_MEMORIES {
            return invalid("max_memories", "must be at most 200");
        }
        if self.max_lessons > MAX_LESSONS {
            return invalid("max_lessons", "must be at most 50");
        }
        if let Some(task_type) = &self.task_type
            && let Err(err) = memlayer_store::validate_id("task_type", task_type)
        {
            return invalid("task_type", &err.to_string());
        }
        Ok(())
    }

    /// These settings for one turn, the window made definite: an unset `max_turns` becomes
    /// [`RECALLING_WINDOW_TURNS`] when the turn is a combined context that recalls (`query`
    /// is given and `recall_k` is above 0), else [`WINDOW_TURNS`]. A set value is kept.
    pub fn for_turn(mut self, query: bool) -> Self {
        let recalls = self.recalls(query);
        self.max_turns.get_or_insert(if recalls {
            RECALLING_WINDOW_TURNS
        } else {
            WINDOW_TURNS
        });
        self
    }

    /// Whether a context with these settings recalls older messages: a combined one with a
    /// query and `recall_k` above 0.
    pub fn recalls(&self, query: bool) -> bool {
        query && self.strategy == Strategy::Combined && self.recall_k > 0
    }

    /// Exchanges the sliding window keeps: `max_turns`, or [`WINDOW_TURNS`] when unset and
    /// not made definite by [`ContextSettings::for_turn`].
    pub fn window_turns(&self) -> usize {
        self.max_turns.unwrap_or(WINDOW_TURNS)
    }

    /// Tokens the assembled context may use.
    pub fn budget(&self) -> u32 {
        (f64::from(self.context_window) * (1.0 - self.window_reserve)).floor() as u32
    }
}

/// What the layers above the window bring to a turn.
#[derive(Debug, Clone, Default)]
pub struct LayerInputs<'a> {
    /// The summary of turns before `messages`, put in whatever the strategy (the caller passes
    /// one only when overflow is summarised).
    pub summary: Option<&'a Summary>,
    /// The session's entity memory, for the combined strategy.
    pub facts: Option<&'a FactSheet>,
    /// Older messages recalled for the current query, best first.
    pub recalled: Vec<RecalledMessage>,
    /// The user's long-term memories relevant to the query, best first.
    pub memories: Vec<Memory>,
    /// The summary of the user's earlier conversations with the agent (session memory).
    pub session_memory: Option<&'a str>,
    /// Lessons from the user's earlier episodes.
    pub lessons: Option<&'a Lessons>,
}

/// A message recall brought back for the current query.
#[derive(Debug, Clone, PartialEq)]
pub struct RecalledMessage {
    /// The session it belongs to.
    pub session_id: String,
    /// Whether that is the session the context is for.
    pub current_session: bool,
    /// The message.
    pub message: Message,
    /// Its fused recall score (higher is better).
    pub score: f32,
}

/// A recalled message in a report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecalledRef {
    /// The session it belongs to.
    pub session_id: String,
    /// Its index there.
    pub index: u64,
    /// Its recall score.
    pub score: f32,
}

/// Why a piece of history is not in the context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Outside the strategy's window (and not brought back as a stub, summary or recall).
    OutsideWindow,
    /// It did not fit the token budget.
    OverBudget,
}

/// A piece left out, with the stored messages it stands for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dropped {
    /// Its layer.
    pub layer: Layer,
    /// The stored messages it stands for.
    pub sources: Vec<u64>,
    /// Its cost in tokens.
    pub tokens: u32,
    /// Why it is not in.
    pub reason: DropReason,
}

/// Tokens spent per layer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerTokens {
    /// The layer.
    pub layer: Layer,
    /// Its pieces in the context.
    pub pieces: usize,
    /// Their tokens.
    pub tokens: u32,
}

/// What an assembly did and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The strategy used.
    pub strategy: Strategy,
    /// Tokens the context could use.
    pub budget: u32,
    /// Tokens it uses: the sum of every included piece (equal to a recount of the output).
    pub total_tokens: u32,
    /// Per layer, in prompt order.
    pub layers: Vec<LayerTokens>,
    /// Indices of the stored messages in the window, in order.
    pub window: Vec<u64>,
    /// What was left out.
    pub dropped: Vec<Dropped>,
    /// The message range the summary covers, when one was used.
    pub summary: Option<(u64, u64)>,
    /// Facts rendered.
    pub facts: usize,
    /// Recalled messages included, with their scores.
    pub recalled: Vec<RecalledRef>,
    /// Ids of the long-term memories included.
    pub memories: Vec<u64>,
    /// Ids of the episodes whose lessons are included.
    pub lessons: Vec<u64>,
}

/// A turn's context and its report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assembled {
    /// The context in prompt order.
    pub messages: Vec<ContextMessage>,
    /// What went in and what did not.
    pub report: Report,
}

/// Builds one turn's context from `messages` (the session from its load checkpoint on,
/// oldest first) and the other layers.
pub fn assemble(
    messages: &[Message],
    layers: &LayerInputs<'_>,
    settings: &ContextSettings,
    encoding: TokenEncoding,
) -> Result<Assembled, MemoryError> {
    settings.validate()?;
    let history = History::new(messages);
    let window = match settings.strategy {
        Strategy::FullHistory => Window::full(&history),
        Strategy::SlidingWindow | Strategy::Combined => sliding_window(&history, settings),
        Strategy::HistoryDepth => Window::last_turns(&history, settings.session_history_depth),
    };
    let combined = settings.strategy == Strategy::Combined;
    let mut packer = Packer::new(settings.budget());

    // Instructions are never dropped, even past the budget: a report saying so is better
    // than an agent that forgot its rules.
    for message in &history.system {
        packer.force(ContextMessage {
            role: message.role,
            content: message.content.clone(),
            layer: Layer::Instructions,
            turn: None,
            sources: vec![message.index],
            tokens: message_tokens(message),
        });
    }
    let mut recent = window.recent.iter().rev();
    if let Some(newest) = recent.next() {
        packer.offer_exchange(newest);
    }
    let facts = layers.facts.filter(|sheet| combined && !sheet.is_empty());
    if let Some(sheet) = facts
        && let Some(text) = sheet.render()
    {
        packer.offer(ContextMessage::generated(
            Layer::Facts,
            text,
            sheet.sources(),
            encoding,
        ));
    }
    let memories = if combined {
        offer_memories(
            &mut packer,
            &layers.memories,
            settings.memory_tokens,
            encoding,
        )
    } else {
        Vec::new()
    };
    let lessons = match layers.lessons {
        Some(lessons) if combined => {
            let piece = ContextMessage::generated(
                Layer::Lessons,
                lessons.text.clone(),
                Vec::new(),
                encoding,
            );
            if packer.offer(piece) {
                lessons.episodes.clone()
            } else {
                Vec::new()
            }
        }
        _ => Vec::new(),
    };
    if combined && let Some(text) = layers.session_memory {
        packer.offer(ContextMessage::generated(
            Layer::SessionMemory,
            text.to_owned(),
            Vec::new(),
            encoding,
        ));
    }
    let summary = layers.summary;
    let summary_used = summary.and_then(|summary| {
        let sources = (summary.first_index..=summary.last_index).collect();
        packer
            .offer(ContextMessage::generated(
                Layer::Summary,
                summary.text.clone(),
                sources,
                encoding,
            ))
            .then_some((summary.first_index, summary.last_index))
    });
    for exchange in recent {
        packer.offer_exchange(exchange);
    }
    let mut recalled = Vec::new();
    if combined {
        let in_window: Vec<u64> = packer.window_sources();
        for hit in &layers.recalled {
            let message = &hit.message;
            if hit.current_session && in_window.contains(&message.index) {
                continue;
            }
            // Sources name messages of the current session; a message of another session
            // is identified by the report's recalled list instead.
            let (content, sources) = if hit.current_session {
                let content = format!(
                    "Relevant earlier message ({}, #{}): {}",
                    role_name(message.role),
                    message.index,
                    message.content
                );
                (content, vec![message.index])
            } else {
                let content = format!(
                    "Relevant message from an earlier conversation ({}, {}): {}",
                    role_name(message.role),
                    calendar_date(message.timestamp),
                    message.content
                );
                (content, Vec::new())
            };
            let piece = ContextMessage::generated(Layer::Retrieved, content, sources, encoding);
            if packer.offer(piece) {
                recalled.push(RecalledRef {
                    session_id: hit.session_id.clone(),
                    index: message.index,
                    score: hit.score,
                });
            }
        }
    }
    if settings.strategy == Strategy::HistoryDepth
        && let Some(stubs) = earlier_questions(&window.older, encoding)
    {
        packer.offer(stubs);
    } else {
        for exchange in &window.older {
            packer.leave_out(exchange, DropReason::OutsideWindow);
        }
    }
    Ok(packer.finish(
        settings.strategy,
        summary_used,
        facts.map_or(0, |f| f.entries().len()),
        recalled,
        memories,
        lessons,
    ))
}

/// The sliding window of `settings` (by tokens when `window_tokens` is set, else by turns):
/// the window of the sliding and combined strategies, and what recall leaves out.
pub fn sliding_window<'a>(history: &History<'a>, settings: &ContextSettings) -> Window<'a> {
    match settings.window_tokens {
        Some(tokens) => Window::last_tokens(history, tokens),
        None => Window::last_turns(history, settings.window_turns()),
    }
}

/// Where a history over the budget splits into an older part to summarise and a recent part
/// kept in full: the position in `messages` of the first recent message, or `None` when
/// everything fits and nothing needs summarising. `summary_tokens` is what the current
/// summary already costs. The recent part gets [`RECENT_SHARE`] of the budget left after
/// the instructions, in whole exchanges; the newest exchange always stays recent.
pub fn summary_split(
    messages: &[Message],
    summary_tokens: u32,
    settings: &ContextSettings,
) -> Option<usize> {
    let history = History::new(messages);
    let instructions = saturating_sum(history.system.iter().map(|m| message_tokens(m)));
    let exchanges = saturating_sum(history.exchanges.iter().map(Exchange::tokens));
    let budget = settings.budget();
    if u64::from(instructions) + u64::from(summary_tokens) + u64::from(exchanges)
        <= u64::from(budget)
    {
        return None;
    }
    let recent_budget =
        (f64::from(budget.saturating_sub(instructions)) * RECENT_SHARE).floor() as u32;
    let mut used = 0u32;
    let mut first_recent = history.exchanges.len();
    for (position, exchange) in history.exchanges.iter().enumerate().rev() {
        used = used.saturating_add(exchange.tokens());
        if used > recent_budget && position + 1 < history.exchanges.len() {
            break;
        }
        first_recent = position;
    }
    if first_recent == 0 {
        return None;
    }
    let first = history.exchanges[first_recent].messages.first()?;
    messages.iter().position(|m| m.index == first.index)
}

/// Offers the `Long-term memories:` block, best memories first, as many as fit
/// `max_tokens`; returns the ids of those included.
fn offer_memories(
    packer: &mut Packer,
    memories: &[Memory],
    max_tokens: u32,
    encoding: TokenEncoding,
) -> Vec<u64> {
    let lines = memories.iter().map(|memory| {
        let line = format!("- ({}) {}", kind_name(memory.kind), memory.text);
        (memory.id, line)
    });
    let Some((text, ids)) = capped_list("Long-term memories:", lines, max_tokens, encoding) else {
        return Vec::new();
    };
    let piece = ContextMessage::generated(Layer::Memories, text, Vec::new(), encoding);
    if packer.offer(piece) { ids } else { Vec::new() }
}

fn kind_name(kind: MemoryKind) -> &'static str {
    match kind {
        MemoryKind::Fact => "fact",
        MemoryKind::Preference => "preference",
        MemoryKind::Relationship => "relationship",
        MemoryKind::Instruction => "instruction",
    }
}

/// `YYYY-MM-DD` (UTC) of a stored timestamp: when an earlier conversation said something.
fn calendar_date(timestamp: Timestamp) -> String {
    let nanos = i128::from(timestamp.as_micros()) * 1_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .map(|at| at.date().to_string())
        .unwrap_or_else(|_| "unknown date".to_owned())
}

/// Admits pieces in priority order while they fit.
struct Packer {
    budget: u32,
    used: u32,
    included: Vec<ContextMessage>,
    dropped: Vec<Dropped>,
}

impl Packer {
    fn new(budget: u32) -> Self {
        Self {
            budget,
            used: 0,
            included: Vec::new(),
            dropped: Vec::new(),
        }
    }

    fn force(&mut self, piece: ContextMessage) {
        self.used += piece.tokens;
        self.included.push(piece);
    }

    /// Admits `piece` if it fits; reports it dropped otherwise. Returns whether it is in.
    fn offer(&mut self, piece: ContextMessage) -> bool {
        if self.used + piece.tokens <= self.budget {
            self.force(piece);
            true
        } else {
            self.dropped.push(Dropped {
                layer: piece.layer,
                sources: piece.sources,
                tokens: piece.tokens,
                reason: DropReason::OverBudget,
            });
            false
        }
    }

    /// Admits a whole exchange or none of it.
    fn offer_exchange(&mut self, exchange: &Exchange<'_>) {
        if self.used + exchange.tokens() <= self.budget {
            for piece in ContextMessage::from_exchange(exchange) {
                self.force(piece);
            }
        } else {
            self.leave_out(exchange, DropReason::OverBudget);
        }
    }

    fn leave_out(&mut self, exchange: &Exchange<'_>, reason: DropReason) {
        self.dropped.push(Dropped {
            layer: Layer::Window,
            sources: exchange.messages.iter().map(|m| m.index).collect(),
            tokens: exchange.tokens(),
            reason,
        });
    }

    fn window_sources(&self) -> Vec<u64> {
        self.included
            .iter()
            .filter(|piece| piece.layer == Layer::Window)
            .flat_map(|piece| piece.sources.iter().copied())
            .collect()
    }

    fn finish(
        mut self,
        strategy: Strategy,
        summary: Option<(u64, u64)>,
        facts: usize,
        recalled: Vec<RecalledRef>,
        memories: Vec<u64>,
        lessons: Vec<u64>,
    ) -> Assembled {
        // Prompt order: by layer, and within the window by position in the conversation.
        // Pieces of the other layers keep the order they were admitted in (best first).
        self.included.sort_by_key(|piece| {
            let position = match piece.layer {
                Layer::Window | Layer::Instructions => piece.sources.first().copied().unwrap_or(0),
                _ => 0,
            };
            (piece.layer, position)
        });
        self.dropped
            .sort_by_key(|d| d.sources.first().copied().unwrap_or(0));
        let mut layers: Vec<LayerTokens> = Vec::new();
        for piece in &self.included {
            match layers.last_mut() {
                Some(last) if last.layer == piece.layer => {
                    last.pieces += 1;
                    last.tokens += piece.tokens;
                }
                _ => layers.push(LayerTokens {
                    layer: piece.layer,
                    pieces: 1,
                    tokens: piece.tokens,
                }),
            }
        }
        let window = self.window_sources();
        Assembled {
            report: Report {
                strategy,
                budget: self.budget,
                total_tokens: self.used,
                layers,
                window,
                dropped: self.dropped,
                summary,
                facts,
                recalled,
                memories,
                lessons,
            },
            messages: self.included,
        }
    }
}

#[cfg(test)]
mod tests;
