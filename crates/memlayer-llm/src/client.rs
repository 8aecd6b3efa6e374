//! The HTTP client: building the request body from a `ChatRequest` and the config, posting it,
//! enforcing the timeout, and turning each way a call can fail into one `LlmError`.

use std::time::Instant;

use crate::config::LlmConfig;
use crate::error::{LlmError, UpstreamError, chain};
use crate::stream::ChatStream;
use crate::wire::{ChatRequest, Completion, StreamOptions, WireRequest, WireResponse};

/// A client for one OpenAI-compatible upstream. Cheap to clone: clones share one connection
/// pool.
#[derive(Debug, Clone)]
pub struct ChatClient {
    http: reqwest::Client,
    /// `{base_url}/chat/completions`, checked once in `new`.
    endpoint: reqwest::Url,
    config: LlmConfig,
}

impl ChatClient {
    /// A client for the upstream `config` describes. Fails with `InvalidConfig` if the base
    /// URL, model or timeout cannot work; nothing is sent.
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        let endpoint = config.endpoint()?;
        // No client-wide timeout: `complete` bounds the whole call, and a stream bounds each
        // wait, which a single reqwest deadline could not express.
        let http = reqwest::Client::builder()
            .build()
            .map_err(|error| LlmError::InvalidConfig(chain(&error)))?;
        Ok(Self {
            http,
            endpoint,
            config,
        })
    }

    /// The configuration the client was built from.
    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// Asks for a completion and waits for the whole answer, at most the configured timeout.
    pub async fn complete(&self, request: &ChatRequest) -> Result<Completion, LlmError> {
        let started = Instant::now();
        let body = self.body(request, false);
        let call = async {
            let response = self.send(&body).await?;
            let bytes = response
                .bytes()
                .await
                .map_err(|error| LlmError::Transport(chain(&error)))?;
            let answer: WireResponse = serde_json::from_slice(&bytes)
                .map_err(|error| LlmError::Malformed(error.to_string()))?;
            answer.into_completion(started.elapsed())
        };
        let completion = tokio::time::timeout(self.config.timeout, call)
            .await
            .map_err(|_| LlmError::Timeout {
                after: self.config.timeout,
            })??;
        log_finished(&completion, false);
        Ok(completion)
    }

    /// Asks for a streamed completion and returns once the upstream has accepted it (at most
    /// the configured timeout). The stream then allows the same timeout between chunks.
    ///
    /// The request asks for usage in the last chunk (`stream_options.include_usage`);
    /// servers that do not send it leave `Completion::usage` empty.
    pub async fn stream(&self, request: &ChatRequest) -> Result<ChatStream, LlmError> {
        let started = Instant::now();
        let body = self.body(request, true);
        let response = tokio::time::timeout(self.config.timeout, self.send(&body))
            .await
            .map_err(|_| LlmError::Timeout {
                after: self.config.timeout,
            })??;
        Ok(ChatStream::new(
            response,
            self.config.timeout,
            self.config.api_key.clone(),
            started,
        ))
    }

    /// The JSON body: the request's fields and the config's, then the request's `extra`
    /// fields that none of those set.
    fn body(&self, request: &ChatRequest, stream: bool) -> serde_json::Value {
        let wire = WireRequest {
            model: &self.config.model,
            messages: &request.messages,
            max_tokens: request.max_tokens.or(self.config.max_tokens),
            temperature: request.temperature.or(self.config.temperature),
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
            tools: &request.tools,
            tool_choice: request.tool_choice.as_ref(),
        };
        // A struct with string keys and no maps of other keys: serialising it cannot fail.
        let mut body = serde_json::to_value(wire).unwrap_or_default();
        if let serde_json::Value::Object(fields) = &mut body {
            for (name, value) in &request.extra {
                fields.entry(name.as_str()).or_insert_with(|| value.clone());
            }
        }
        body
    }

    /// Posts the body and returns the response if its status is a success.
    async fn send(&self, body: &serde_json::Value) -> Result<reqwest::Response, LlmError> {
        let mut post = self.http.post(self.endpoint.clone()).json(body);
        if let Some(key) = &self.config.api_key {
            // `bearer_auth` marks the header sensitive, so reqwest and hyper never log it.
            post = post.bearer_auth(key);
        }
        let response = post.send().await.map_err(|error| {
            if error.is_connect() {
                LlmError::Connect {
                    endpoint: self.endpoint.to_string(),
                    reason: chain(&error),
                }
            } else {
                LlmError::Transport(chain(&error))
            }
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        // The status alone is still worth reporting if the body cannot be read.
        let body = response.bytes().await.unwrap_or_default();
        Err(LlmError::Status {
            status: status.as_u16(),
            error: UpstreamError::from_body(&body, self.config.api_key.as_deref()),
        })
    }
}

/// Logs a finished completion: its shape and cost, never its content.
pub(crate) fn log_finished(completion: &Completion, streamed: bool) {
    tracing::debug!(
        model = %completion.model,
        streamed,
        latency_ms = completion.latency.as_millis(),
        finish_reason = ?completion.finish_reason,
        completion_tokens = completion.usage.map(|usage| usage.completion_tokens),
        "chat completion finished"
    );
}
