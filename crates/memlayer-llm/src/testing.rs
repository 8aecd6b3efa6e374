//! A fake upstream for tests (feature `test-upstream`): a real HTTP server on 127.0.0.1 that
//! answers `POST /v1/chat/completions` in the OpenAI wire format with scripted replies, and
//! records every request it receives so a test can check what the client sent.
//!
//! It is a server rather than a mock trait so that tests exercise the real client, its
//! serialization, headers, timeouts and stream parsing, exactly as they meet a real model.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::config::LlmConfig;
use crate::wire::ToolCall;

/// The one path the fake answers; `base_url()` ends in `/v1`.
const COMPLETIONS_PATH: &str = "/v1/chat/completions";

/// A fake OpenAI-compatible server on an ephemeral 127.0.0.1 port. It stops when dropped.
///
/// ```no_run
/// # async fn example() -> Result<(), memlayer_llm::LlmError> {
/// use memlayer_llm::{ChatClient, ChatRequest, FakeUpstream, Message, Reply};
///
/// let upstream = FakeUpstream::start().await;
/// upstream.push(Reply::text("Hello!"));
/// let client = ChatClient::new(upstream.config())?;
/// let answer = client.complete(&ChatRequest::new(vec![Message::user("Hi")])).await?;
/// assert_eq!(answer.content.as_deref(), Some("Hello!"));
/// assert_eq!(upstream.requests()[0].body["messages"][0]["content"], "Hi");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct FakeUpstream {
    address: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<RecordedRequest>>,
}

impl Shared {
    fn replies(&self) -> std::sync::MutexGuard<'_, VecDeque<Reply>> {
        // A test that panicked while holding the lock has failed already; its data is fine.
        self.replies.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn requests(&self) -> std::sync::MutexGuard<'_, Vec<RecordedRequest>> {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl FakeUpstream {
    /// Binds 127.0.0.1:0 and starts serving on the current tokio runtime.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound: a test cannot run without one.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("the fake upstream could not bind a port on 127.0.0.1");
        let address = listener
            .local_addr()
            .expect("a bound listener has an address");
        let shared = Arc::new(Shared::default());
        let app = axum::Router::new().fallback({
            let shared = Arc::clone(&shared);
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                answer(Arc::clone(&shared), method, uri, headers, body)
            }
        });
        let server = tokio::spawn(async move {
            // Serving only ends with an I/O error on the listener, which the test then sees as
            // a failed connection.
            let _ = axum::serve(listener, app).await;
        });
        Self {
            address,
            shared,
            server,
        }
    }

    /// The base URL to configure a client with, `http://127.0.0.1:{port}/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// A config for this upstream: model `fake-model`, no key, and a 10 s timeout so that a
    /// hanging test fails instead of waiting for the default.
    pub fn config(&self) -> LlmConfig {
        LlmConfig {
            timeout: Duration::from_secs(10),
            ..LlmConfig::new(self.base_url(), "fake-model")
        }
    }

    /// Queues a reply. Requests to the completions path take the queued replies in order; one
    /// that finds the queue empty is answered with HTTP 500 and an OpenAI error body.
    pub fn push(&self, reply: Reply) -> &Self {
        self.shared.replies().push_back(reply);
        self
    }

    /// Every request received so far, to any path, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests().clone()
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A request the fake upstream received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// The HTTP method, e.g. `POST`.
    pub method: String,
    /// The path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The headers as (lowercase name, value) pairs; values that are not UTF-8 are left out.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON, or `Value::Null` if it was not JSON.
    pub body: Value,
}

impl RecordedRequest {
    /// The value of header `name` (any case), if it was sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(header, _)| header.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// A scripted reply of the fake upstream.
///
/// `text`, `text_chunks` and `tool_calls` are answers that follow the request: a JSON
/// `chat.completion` normally, a stream of `chat.completion.chunk` events ending in
/// `data: [DONE]` when the request has `"stream": true` (with a usage chunk when it asks for
/// `stream_options.include_usage`). `error` and `raw` are sent as they are.
#[derive(Debug, Clone)]
pub struct Reply {
    kind: ReplyKind,
    /// Before the response headers.
    delay: Duration,
    /// Before each event of a streamed answer.
    chunk_delay: Duration,
}

#[derive(Debug, Clone)]
enum ReplyKind {
    Answer {
        /// The text, in the pieces a stream sends; empty for an answer of tool calls.
        pieces: Vec<String>,
        tool_calls: Vec<ToolCall>,
    },
    Raw {
        status: StatusCode,
        content_type: String,
        body: String,
    },
}

impl Reply {
    fn new(kind: ReplyKind) -> Self {
        Self {
            kind,
            delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
        }
    }

    /// An answer with this text, streamed word by word.
    pub fn text(content: &str) -> Self {
        let mut pieces = Vec::new();
        let mut rest = content;
        while !rest.is_empty() {
            // Each piece is a run of spaces and the word after it, like a tokenizer's tokens.
            let word_start = rest.len() - rest.trim_start().len();
            let end = rest[word_start..]
                .find(char::is_whitespace)
                .map_or(rest.len(), |offset| word_start + offset);
            pieces.push(rest[..end].to_owned());
            rest = &rest[end..];
        }
        Self::text_chunks(pieces)
    }

    /// An answer whose text is these pieces joined, streamed one piece per chunk.
    pub fn text_chunks<I, S>(pieces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(ReplyKind::Answer {
            pieces: pieces.into_iter().map(Into::into).collect(),
            tool_calls: Vec::new(),
        })
    }

    /// An answer that calls these tools, with `finish_reason` `tool_calls`.
    pub fn tool_calls(calls: Vec<ToolCall>) -> Self {
        Self::new(ReplyKind::Answer {
            pieces: Vec::new(),
            tool_calls: calls,
        })
    }

    /// An HTTP error with an OpenAI error body `{"error": {"message", "type", "code"}}`.
    pub fn error(status: u16, message: &str, kind: &str, code: Option<&str>) -> Self {
        let body = json!({ "error": { "message": message, "type": kind, "code": code } });
        Self::raw(status, "application/json", &body.to_string())
    }

    /// Exactly this status, content type and body, e.g. another server's dialect, a
    /// malformed body, or a hand-written event stream.
    ///
    /// # Panics
    ///
    /// If `status` is not a valid HTTP status code (100–999).
    pub fn raw(status: u16, content_type: &str, body: &str) -> Self {
        Self::new(ReplyKind::Raw {
            status: StatusCode::from_u16(status).expect("a valid HTTP status code"),
            content_type: content_type.to_owned(),
            body: body.to_owned(),
        })
    }

    /// Waits this long before sending the response headers.
    pub fn after(self, delay: Duration) -> Self {
        Self { delay, ..self }
    }

    /// In a streamed answer, waits this long before each event.
    pub fn with_chunk_delay(self, chunk_delay: Duration) -> Self {
        Self {
            chunk_delay,
            ..self
        }
    }
}

async fn answer(
    shared: Arc<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers: headers
            .iter()
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
            .collect(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    shared.requests().push(request.clone());

    if method != Method::POST || uri.path() != COMPLETIONS_PATH {
        return error_response(StatusCode::NOT_FOUND, "no such endpoint");
    }
    let Some(reply) = shared.replies().pop_front() else {
        return error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the fake upstream has no reply scripted for this request",
        );
    };
    tokio::time::sleep(reply.delay).await;
    match reply.kind {
        ReplyKind::Raw {
            status,
            content_type,
            body,
        } => response(status, &content_type, Body::from(body)),
        ReplyKind::Answer { pieces, tool_calls } => {
            let answer = Answer::new(&request.body, pieces, tool_calls);
            if request.body["stream"] == true {
                answer.stream(&request.body, reply.chunk_delay)
            } else {
                response(
                    StatusCode::OK,
                    "application/json",
                    Body::from(answer.whole().to_string()),
                )
            }
        }
    }
}

fn response(status: StatusCode, content_type: &str, body: Body) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(body)
        .expect("status and content type are valid")
}

fn error_response(status: StatusCode, message: &str) -> Response {
    let body = json!({ "error": { "message": message, "type": "fake_upstream", "code": null } });
    response(status, "application/json", Body::from(body.to_string()))
}

/// A scripted answer to one request, rendered as a whole body or as chunks.
struct Answer {
    model: String,
    created: u64,
    pieces: Vec<String>,
    tool_calls: Vec<ToolCall>,
    usage: Value,
}

impl Answer {
    fn new(request: &Value, pieces: Vec<String>, tool_calls: Vec<ToolCall>) -> Self {
        // Words stand in for tokens: enough for tests to see counts that follow the text.
        let words = |text: &str| text.split_whitespace().count();
        let prompt_tokens: usize = request["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|message| message["content"].as_str())
            .map(words)
            .sum();
        let completion_tokens = words(&pieces.concat())
            + tool_calls
                .iter()
                .map(|call| words(&call.arguments))
                .sum::<usize>();
        Self {
            model: request["model"].as_str().unwrap_or_default().to_owned(),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_secs()),
            pieces,
            tool_calls,
            usage: json!({
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }),
        }
    }

    fn finish_reason(&self) -> &'static str {
        if self.tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }
    }

    /// The `chat.completion` body, as OpenAI sends it.
    fn whole(&self) -> Value {
        let mut message = json!({ "role": "assistant", "content": null, "refusal": null });
        if self.tool_calls.is_empty() {
            message["content"] = json!(self.pieces.concat());
        } else {
            message["tool_calls"] = json!(self.tool_calls);
        }
        json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": null,
                "finish_reason": self.finish_reason(),
            }],
            "usage": self.usage,
            "system_fingerprint": "fp_fake",
        })
    }

    /// The event stream, as OpenAI sends it: a role chunk, content or tool call chunks, a
    /// chunk with the finish reason, the usage chunk if asked for, and `[DONE]`.
    fn stream(self, request: &Value, chunk_delay: Duration) -> Response {
        let include_usage = request["stream_options"]["include_usage"] == true;
        let first_content = if self.tool_calls.is_empty() {
            json!("")
        } else {
            Value::Null
        };
        let mut deltas = vec![(
            json!({ "role": "assistant", "content": first_content }),
            None,
        )];
        deltas.extend(
            self.pieces
                .iter()
                .map(|piece| (json!({ "content": piece }), None)),
        );
        for (index, call) in self.tool_calls.iter().enumerate() {
            deltas.push((
                json!({ "tool_calls": [{
                    "index": index,
                    "id": call.id,
                    "type": "function",
                    "function": { "name": call.name, "arguments": "" },
                }] }),
                None,
            ));
            // Arguments arrive in pieces; split at a character boundary near the middle.
            let middle = (0..=call.arguments.len() / 2)
                .rev()
                .find(|&at| call.arguments.is_char_boundary(at))
                .unwrap_or(0);
            let (head, tail) = call.arguments.split_at(middle);
            for part in [head, tail] {
                deltas.push((
                    json!({ "tool_calls": [{ "index": index, "function": { "arguments": part } }] }),
                    None,
                ));
            }
        }
        deltas.push((json!({}), Some(self.finish_reason())));

        let mut events: Vec<String> = deltas
            .into_iter()
            .map(|(delta, finish_reason)| {
                let mut chunk = self.chunk(json!([{
                    "index": 0,
                    "delta": delta,
                    "logprobs": null,
                    "finish_reason": finish_reason,
                }]));
                // With `include_usage`, OpenAI sends `"usage": null` on every other chunk.
                if include_usage {
                    chunk["usage"] = Value::Null;
                }
                chunk.to_string()
            })
            .collect();
        if include_usage {
            let mut chunk = self.chunk(json!([]));
            chunk["usage"] = self.usage.clone();
            events.push(chunk.to_string());
        }
        events.push("[DONE]".to_owned());

        let body = futures_util::stream::iter(events).then(move |event| async move {
            tokio::time::sleep(chunk_delay).await;
            Ok::<_, Infallible>(format!("data: {event}\n\n"))
        });
        response(StatusCode::OK, "text/event-stream", Body::from_stream(body))
    }

    fn chunk(&self, choices: Value) -> Value {
        json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
        })
    }
}
