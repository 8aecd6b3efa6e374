//! Calling a language model: the wire format and the HTTP client for OpenAI-compatible chat
//! completions (`POST {base_url}/chat/completions`), as served by OpenAI, the llama.cpp
//! server, vLLM and Ollama's `/v1`. It owns the configuration of one upstream (`LlmConfig`),
//! the request and response types, plain and streamed (server-sent events) completions, the
//! mapping of transport and upstream failures to one error type, and — behind the
//! `test-upstream` feature — a fake upstream that speaks the same wire format over real HTTP
//! on 127.0.0.1.
//!
//! It depends on no other memlayer crate and knows nothing about sessions, messages at rest or
//! storage: callers turn their records into `Message`s and decide what to do with the answer.

#![deny(missing_docs)]

mod client;
mod config;
mod error;
mod sse;
mod stream;
#[cfg(any(test, feature = "test-upstream"))]
mod testing;
mod wire;

#[cfg(test)]
mod tests;

pub use client::ChatClient;
pub use config::LlmConfig;
pub use error::{LlmError, UpstreamError};
pub use stream::{ChatStream, StreamDelta};
#[cfg(any(test, feature = "test-upstream"))]
pub use testing::{FakeUpstream, RecordedRequest, Reply};
pub use wire::{
    ChatRequest, Completion, FinishReason, Message, Role, Tool, ToolCall, ToolChoice, Usage,
};
