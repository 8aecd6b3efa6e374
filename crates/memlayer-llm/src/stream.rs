//! Streamed completions: reading `data: {...}` chunks off the response body as they arrive,
//! handing out each piece of text or tool call, and adding them up into the same `Completion`
//! a plain call returns.
//!
//! `ChatStream` is pulled (`next_delta().await`) rather than fed by a spawned task: nothing
//! runs unless the caller asks, a slow reader slows the upstream through TCP instead of
//! filling a channel, and dropping the stream closes the connection, which is how a caller
//! cancels a generation.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::error::{LlmError, UpstreamError, chain};
use crate::sse::SseParser;
use crate::wire::{Completion, FinishReason, ToolCall, Usage, null_as_default};

/// One piece of a streamed answer, in the order the upstream sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamDelta {
    /// More text of the answer.
    Content(String),
    /// A piece of a tool call. The first piece of a call carries its `id` and `name`; the
    /// `arguments` of all its pieces, joined, are the call's arguments.
    ToolCall {
        /// Which call of this answer the piece belongs to, from 0.
        index: usize,
        /// The call's id, on its first piece.
        id: Option<String>,
        /// The function's name, on its first piece.
        name: Option<String>,
        /// The next part of the arguments' JSON text; may be empty.
        arguments: String,
    },
}

/// A completion being streamed. Read it with [`ChatStream::next_delta`] until `None`, then
/// call [`ChatStream::finish`] for the whole answer, or call `finish` at once to skip the
/// pieces.
pub struct ChatStream {
    response: reqwest::Response,
    parser: SseParser,
    /// Event payloads parsed from the body but not yet read.
    events: VecDeque<String>,
    /// Deltas of read events not yet handed out; one chunk can hold several.
    deltas: VecDeque<StreamDelta>,
    state: State,
    body_ended: bool,
    idle_timeout: Duration,
    /// To scrub an error event; see `error.rs`.
    api_key: Option<String>,
    started: Instant,
    answer: Answer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// `data: [DONE]` arrived: the answer is whole.
    Done,
    /// An error was returned; the answer will never be whole.
    Failed,
}

/// What the chunks read so far add up to.
#[derive(Debug, Default)]
struct Answer {
    id: String,
    model: String,
    /// `None` until a chunk carries `content` (even `""`), so an answer of only tool calls
    /// has no content, as in a plain completion.
    content: Option<String>,
    /// By the upstream's index, which need not start at 0 or be dense.
    tool_calls: BTreeMap<usize, ToolCall>,
    finish_reason: Option<FinishReason>,
    usage: Option<Usage>,
}

// By hand, because the derived one would print the API key.
impl fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatStream")
            .field("state", &self.state)
            .field("answer", &self.answer)
            .finish_non_exhaustive()
    }
}

impl ChatStream {
    pub(crate) fn new(
        response: reqwest::Response,
        idle_timeout: Duration,
        api_key: Option<String>,
        started: Instant,
    ) -> Self {
        Self {
            response,
            parser: SseParser::default(),
            events: VecDeque::new(),
            deltas: VecDeque::new(),
            state: State::Open,
            body_ended: false,
            idle_timeout,
            api_key,
            started,
            answer: Answer::default(),
        }
    }

    /// The next piece of the answer, or `None` once `data: [DONE]` has arrived.
    ///
    /// After an error the stream is over: later calls return `LlmError::StreamTruncated`.
    pub async fn next_delta(&mut self) -> Result<Option<StreamDelta>, LlmError> {
        let next = self.advance().await;
        if next.is_err() {
            self.state = State::Failed;
        }
        next
    }

    /// Reads the rest of the stream and returns the whole answer. Its `latency` runs from
    /// sending the request to `data: [DONE]`.
    pub async fn finish(mut self) -> Result<Completion, LlmError> {
        while self.next_delta().await?.is_some() {}
        let answer = self.answer;
        let completion = Completion {
            id: answer.id,
            model: answer.model,
            content: answer.content,
            tool_calls: answer.tool_calls.into_values().collect(),
            finish_reason: answer.finish_reason,
            usage: answer.usage,
            latency: self.started.elapsed(),
        };
        crate::client::log_finished(&completion, true);
        Ok(completion)
    }

    async fn advance(&mut self) -> Result<Option<StreamDelta>, LlmError> {
        loop {
            if let Some(delta) = self.deltas.pop_front() {
                return Ok(Some(delta));
            }
            match self.state {
                State::Open => {}
                State::Done => return Ok(None),
                State::Failed => return Err(LlmError::StreamTruncated),
            }
            if let Some(event) = self.events.pop_front() {
                self.read_event(&event)?;
                continue;
            }
            if self.body_ended {
                return Err(LlmError::StreamTruncated);
            }
            self.read_body().await?;
        }
    }

    /// Waits for the next piece of the body and parses the events it completes.
    async fn read_body(&mut self) -> Result<(), LlmError> {
        let chunk = tokio::time::timeout(self.idle_timeout, self.response.chunk())
            .await
            .map_err(|_| LlmError::Timeout {
                after: self.idle_timeout,
            })?
            .map_err(|error| LlmError::Transport(chain(&error)))?;
        let mut events = Vec::new();
        match chunk {
            Some(bytes) => self.parser.push(&bytes, &mut events),
            None => {
                self.parser.finish(&mut events);
                self.body_ended = true;
            }
        }
        self.events.extend(events);
        Ok(())
    }

    fn read_event(&mut self, data: &str) -> Result<(), LlmError> {
        if data.trim() == "[DONE]" {
            self.state = State::Done;
            return Ok(());
        }
        let chunk: WireChunk = serde_json::from_str(data)
            .map_err(|error| LlmError::Malformed(format!("stream chunk: {error}")))?;
        if let Some(error) = &chunk.error {
            return Err(LlmError::StreamError(UpstreamError::from_value(
                error,
                self.api_key.as_deref(),
            )));
        }
        let answer = &mut self.answer;
        if answer.id.is_empty() {
            answer.id = chunk.id;
        }
        if answer.model.is_empty() {
            answer.model = chunk.model;
        }
        // With `include_usage` the counts come in a last chunk with no choices; servers that
        // send `"usage": null` on the other chunks must not erase them.
        if chunk.usage.is_some() {
            answer.usage = chunk.usage;
        }
        // Only one choice is asked for; a server that sends others is not listened to.
        for choice in chunk.choices.into_iter().filter(|choice| choice.index == 0) {
            if choice.finish_reason.is_some() {
                answer.finish_reason = choice.finish_reason;
            }
            if let Some(text) = choice.delta.content {
                answer.content.get_or_insert_default().push_str(&text);
                if !text.is_empty() {
                    self.deltas.push_back(StreamDelta::Content(text));
                }
            }
            for (position, call) in choice.delta.tool_calls.into_iter().enumerate() {
                // Servers that omit the index send each call whole, one per array slot.
                let index = call.index.unwrap_or(position);
                let function = call.function.unwrap_or_default();
                let arguments = function.arguments.unwrap_or_default();
                let entry = answer.tool_calls.entry(index).or_insert_with(|| ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
                // The id and name come whole on a call's first piece (OpenAI, llama.cpp,
                // vLLM); a later repeat is ignored rather than appended.
                if let Some(id) = call.id.as_ref().filter(|_| entry.id.is_empty()) {
                    entry.id.clone_from(id);
                }
                if let Some(name) = function.name.as_ref().filter(|_| entry.name.is_empty()) {
                    entry.name.clone_from(name);
                }
                entry.arguments.push_str(&arguments);
                self.deltas.push_back(StreamDelta::ToolCall {
                    index,
                    id: call.id,
                    name: function.name,
                    arguments,
                });
            }
        }
        Ok(())
    }
}

/// One `chat.completion.chunk`, or an error object in its place.
#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    #[serde(default, deserialize_with = "null_as_default")]
    choices: Vec<WireChunkChoice>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct WireChunkChoice {
    #[serde(default)]
    index: usize,
    #[serde(default, deserialize_with = "null_as_default")]
    delta: WireDelta,
    #[serde(default)]
    finish_reason: Option<FinishReason>,
}

#[derive(Default, Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    tool_calls: Vec<WireToolCallDelta>,
}

#[derive(Deserialize)]
struct WireToolCallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunctionDelta>,
}

#[derive(Default, Deserialize)]
struct WireFunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}
