//! Context assembly: deciding, every turn, which part of a session's past goes back into the
//! prompt, inside a token budget. It owns token counting (the write path stores a count with
//! every message), the history windows (exchanges kept or dropped whole, by turns or
//! tokens), entity memory, summarisers and their persisted checkpoints, the budget manager
//! that packs every layer into one budget with a report, long-term memories per user
//! ([`LongTermMemory`]), episodic lessons ([`build_lessons`]), and [`ContextBuilder`], which reads the store, recalls and assembles
//! one turn's context in one call.
//!
//! It may depend on `memlayer-store`, `memlayer-embed`, `memlayer-index` and `memlayer-llm`;
//! it must not depend on erasure, HTTP or the binary.

#![deny(missing_docs)]

mod assemble;
mod context;
mod entities;
mod error;
mod fact_cache;
mod history;
mod idle;
mod json;
mod lessons;
mod llm_summary;
mod loaders;
mod long_term;
mod memory_config;
mod pii;
mod render;
mod summary;
mod tokens;

pub use assemble::{
    Assembled, ContextSettings, DropReason, Dropped, LayerInputs, LayerTokens, MAX_LESSONS,
    MAX_MEMORIES, MAX_RECALL_K, Overflow, RECALLING_WINDOW_TURNS, RECENT_SHARE, RecallScope,
    RecalledMessage, RecalledRef, Report, SettingsOverrides, Strategy, WINDOW_TURNS, assemble,
    sliding_window, summary_split,
};
pub use context::{Built, ContextBuilder, ContextRequest, SESSION_MEMORY_MARKER, SummaryNote};
pub use entities::{Fact, FactEntry, FactSheet, extract};
pub use error::MemoryError;
pub use fact_cache::FactCache;
pub use history::{Exchange, History, MESSAGE_OVERHEAD_TOKENS, Window, message_tokens};
pub use idle::{end_idle_sessions, run_idle_sessions};
pub use json::whole_floats_to_integers;
pub use lessons::{LESSONS_MARKER, LessonQuery, Lessons, build_lessons, list_episodes};
pub use llm_summary::LlmSummarizer;
pub use long_term::{
    DEFAULT_RESIDENT_MEMORIES, LongTermMemory, MAX_TAG_LEN, MAX_TAGS, MemoryHit, MemoryQuery,
    RememberAction, RememberRequest, Residency,
};
pub use memory_config::{MEMORY_TYPES, MemoryConfig, MemoryType};
pub use pii::redact_pii;
pub use render::{
    ChatMessage, ContextMessage, Layer, OutputFormat, Rendered, earlier_questions, render,
};
pub use summary::{
    ExtractiveSummarizer, SUMMARY_MARKER, Summarizer, Summary, SummaryFuture, SummaryRequest,
    summarize_extractive,
};
pub use tokens::TokenEncoding;
