//! Agent runs and the memory tools. A run takes one user message to an answer: it stores the
//! message, assembles the turn's context with the agent's saved settings (`ContextBuilder`,
//! exactly as the `/context` endpoint does), asks the configured OpenAI-compatible model
//! (`memlayer-llm`), executes the memory tools the model calls (remember, recall, forget,
//! session search, clear) as the session's user in a bounded loop, and stores the answer and
//! a run record (status, tool calls, token usage, latency). A failed model call leaves the
//! user's message stored and a failed run recorded.
//!
//! It sits above `memlayer-erasure` because forgetting a memory is an erasure, and below the
//! server, which owns the HTTP shapes: tool outcomes are written as JSON by a function the
//! server supplies, so a run and the tool-call endpoint answer the model alike.

#![deny(missing_docs)]

mod error;
mod run;
mod tools;

#[cfg(test)]
mod tests;

pub use error::AgentError;
pub use run::{
    Agent, ClientCall, MAX_TOOL_ROUNDS, RenderTool, RunEvent, RunOutcome, RunRequest, Turn,
};
pub use tools::{
    MAX_MEMORY_HITS, MAX_SEARCH_HITS, ParsedCall, SESSION_SEARCH_INSTRUCTION, ToolOutcome, Tools,
    definitions, parse_call,
};
