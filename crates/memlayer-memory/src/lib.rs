//! Context assembly: deciding, every turn, which part of a session's past goes back into the
//! prompt, inside a token budget. It owns token counting (the write path stores a count with
//! every message) and the history windows: exchanges that are kept or dropped whole, the
//! sliding window by turns or tokens, and dropping overflow under a budget. Summaries,
//! entity memory, retrieval and the combined budget manager arrive with the strategies issue.
//!
//! It may depend on `memlayer-store`, `memlayer-embed` and `memlayer-index`; it must not
//! depend on erasure, HTTP or the binary.

#![deny(missing_docs)]

mod assemble;
mod entities;
mod error;
mod history;
mod render;
mod summary;
mod tokens;

pub use assemble::{
    Assembled, ContextSettings, DropReason, Dropped, LayerInputs, LayerTokens, Report, Strategy,
    assemble,
};
pub use entities::{Fact, FactEntry, FactSheet, extract};
pub use error::MemoryError;
pub use history::{Exchange, History, MESSAGE_OVERHEAD_TOKENS, Window, message_tokens};
pub use render::{
    ChatMessage, ContextMessage, Layer, OutputFormat, Rendered, earlier_questions, render,
};
pub use summary::{SUMMARY_MARKER, Summary, summarize_extractive};
pub use tokens::TokenEncoding;
