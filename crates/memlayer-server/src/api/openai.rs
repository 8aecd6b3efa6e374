//! An OpenAI-compatible chat endpoint with memory: `POST /v1/openai/chat/completions`, so an
//! OpenAI SDK pointed at `{server}/v1/openai` with a memlayer key gets memlayer's context in
//! every call. The conversation is named by headers; each call is a chat turn of the agent
//! (`memlayer_agent::Agent::start_chat`): the user's message stored, the context built as
//! `/v1/sessions/{id}/context` builds it, the configured `[agent_model]` called with the
//! client's system messages, tools and parameters, and the answer stored. This module only
//! maps OpenAI's request and answer shapes (whole or as `chat.completion.chunk` events) onto
//! that turn.

use std::convert::Infallible;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::FromRequestParts;
use axum::extract::State;
use axum::http::HeaderValue;
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use memlayer_agent::{ClientCall, RunEvent, RunOutcome, RunRequest};
use memlayer_llm::{ChatRequest, Message as ChatMessage, StreamDelta, ToolCall};
use memlayer_store::MAX_MESSAGES_PER_APPEND;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::api::runs::{TokenUsage, authorize, run_events};
use crate::extract::{ApiJson, Caller, header_text};
use crate::openapi::responses::errors;
use crate::{ApiError, AppState};

/// The conversation a call continues; a new one when absent. Sent back on every answer.
pub(crate) const SESSION_HEADER: &str = "x-memlayer-session";
/// The user speaking (a user-scoped key names its own user).
pub(crate) const USER_HEADER: &str = "x-memlayer-user";
/// The agent answering.
pub(crate) const AGENT_HEADER: &str = "x-memlayer-agent";

/// A chat completion request, as OpenAI's SDKs send it. Fields not listed (`top_p`, `stop`,
/// `response_format`, `seed`, …) are passed to the model as they are; `model`, which the SDKs
/// require, is not: the configured `[agent_model]` answers whatever it names.
#[derive(Deserialize, ToSchema)]
pub(crate) struct ChatCompletionRequest {
    /// The conversation as the client has it. The last `user` message is the new turn;
    /// `system` and `developer` messages are sent first, as they are; the earlier turns are
    /// replaced by memlayer's context (the session's own history, recalled turns, facts and
    /// memories); assistant and `tool` messages after it (the model's tool calls and their
    /// results) are sent after the context, in order. Every message is checked, even those
    /// the context replaces: text content only, a user message's not blank and without NUL,
    /// a `tool` message with its `tool_call_id`. At most 1,000 messages.
    messages: Vec<ClientMessage>,
    /// Answer with `chat.completion.chunk` server-sent events, ended by `data: [DONE]`.
    #[serde(default)]
    stream: bool,
    /// `include_usage`: a last chunk with the token counts, as OpenAI sends it.
    stream_options: Option<ChatStreamOptions>,
    /// The client's function tools, passed to the model unchanged; their calls come back
    /// for the client to run.
    #[schema(value_type = Option<Vec<Object>>)]
    tools: Option<Vec<Map<String, Value>>>,
    /// `none`, `auto`, `required` or the function to call; passed to the model unchanged.
    #[schema(value_type = Option<Object>)]
    tool_choice: Option<Value>,
    /// Most tokens to generate (`max_completion_tokens` is passed on as it is).
    max_tokens: Option<u32>,
    /// Sampling temperature, from 0 to 2 as OpenAI takes it.
    // A double, so that every number of that range is taken as written; narrowed to the
    // model request's f32 once checked.
    #[schema(minimum = 0, maximum = 2)]
    temperature: Option<f64>,
    /// Only 1: one answer is generated and stored.
    n: Option<u32>,
    /// The other parameters, passed on.
    #[serde(flatten)]
    #[schema(ignore)]
    other: Map<String, Value>,
}

#[derive(Deserialize, ToSchema)]
pub(crate) struct ChatStreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// One message of the client's conversation.
#[derive(Deserialize, ToSchema)]
pub(crate) struct ClientMessage {
    role: ClientRole,
    /// `null` for an assistant message of only tool calls.
    content: Option<ChatContent>,
    name: Option<String>,
    /// An assistant message's tool calls, in OpenAI's shape.
    #[serde(default)]
    #[schema(value_type = Option<Vec<Object>>)]
    tool_calls: Vec<ToolCall>,
    /// A `tool` message's call.
    tool_call_id: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ClientRole {
    System,
    /// OpenAI's newer name for `system`; sent as `system`, which every server knows.
    Developer,
    User,
    Assistant,
    Tool,
}

/// Text, or an array of parts of which only `{"type": "text", "text"}` is taken.
#[derive(Deserialize, ToSchema)]
#[serde(untagged)]
pub(crate) enum ChatContent {
    Text(String),
    Parts(Vec<ChatContentPart>),
}

#[derive(Deserialize, ToSchema)]
pub(crate) struct ChatContentPart {
    /// `text`; other kinds (`image_url`, `input_audio`, `file`) are refused.
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

/// A client's request as a chat turn: the user's new message and the client's part of the
/// model call.
#[derive(Debug)]
struct Turn {
    question: String,
    call: ClientCall,
    stream: bool,
    include_usage: bool,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::invalid("invalid_messages", message)
}

impl ChatCompletionRequest {
    /// Checks the request and splits it (see `messages`). Nothing is stored before this
    /// succeeded.
    fn into_turn(self) -> Result<Turn, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::invalid(
                "invalid_value",
                "n must be 1: memlayer generates and stores one answer",
            ));
        }
        if self
            .temperature
            .is_some_and(|temperature| !(0.0..=2.0).contains(&temperature))
        {
            return Err(ApiError::invalid(
                "invalid_value",
                "temperature must be from 0 to 2",
            ));
        }
        if self.messages.len() > MAX_MESSAGES_PER_APPEND {
            return Err(invalid(format!(
                "at most {MAX_MESSAGES_PER_APPEND} messages per request"
            )));
        }
        let last_user = self
            .messages
            .iter()
            .rposition(|message| message.role == ClientRole::User)
            .ok_or_else(|| invalid("messages must hold a user message: the new turn"))?;
        let mut instructions = Vec::new();
        let mut tool_results = Vec::new();
        let mut question = String::new();
        for (position, message) in self.messages.into_iter().enumerate() {
            let text = message.checked_text()?;
            match (message.role, message.tool_call_id) {
                (ClientRole::System | ClientRole::Developer, _) => {
                    instructions.push(ChatMessage::system(text.unwrap_or_default()));
                }
                _ if position == last_user => question = text.unwrap_or_default(),
                // Earlier turns: the session's stored history stands for them.
                _ if position < last_user => {}
                (ClientRole::Tool, Some(id)) => {
                    tool_results.push(ChatMessage::tool_result(id, text.unwrap_or_default()));
                }
                // The assistant's messages after the question (no user message follows it).
                _ => tool_results.push(ChatMessage {
                    content: text,
                    name: message.name,
                    ..ChatMessage::assistant_tool_calls(message.tool_calls)
                }),
            }
        }
        let mut extra = self.other;
        // Passed as the client wrote them: `Tool` would drop fields such as `strict`.
        extra.extend(self.tools.map(|tools| {
            let tools = tools.into_iter().map(Value::Object).collect();
            ("tools".to_owned(), Value::Array(tools))
        }));
        extra.extend(
            self.tool_choice
                .map(|choice| ("tool_choice".to_owned(), choice)),
        );
        Ok(Turn {
            question,
            call: ClientCall {
                instructions,
                tool_results,
                parameters: ChatRequest {
                    max_tokens: self.max_tokens,
                    // In 0..=2, so narrowing keeps it (to the nearest f32).
                    temperature: self.temperature.map(|temperature| temperature as f32),
                    extra,
                    ..ChatRequest::default()
                },
            },
            stream: self.stream,
            include_usage: self
                .stream_options
                .is_some_and(|options| options.include_usage),
        })
    }
}

impl ClientMessage {
    /// The text content, once the rules every message keeps are checked: a user message
    /// has text that is not blank and holds no NUL (what the store takes), a `tool` message
    /// names its call.
    fn checked_text(&self) -> Result<Option<String>, ApiError> {
        let text = self.text()?;
        match self.role {
            ClientRole::User
                if text
                    .as_deref()
                    .is_none_or(|text| text.trim().is_empty() || text.contains('\0')) =>
            {
                Err(invalid(
                    "a user message needs text that is not blank and holds no NUL",
                ))
            }
            ClientRole::Tool if self.tool_call_id.is_none() => {
                Err(invalid("a tool message needs the tool_call_id it answers"))
            }
            _ => Ok(text),
        }
    }

    /// The text content; parts are joined by line breaks. Images, audio and files are
    /// refused: memlayer stores and recalls text.
    fn text(&self) -> Result<Option<String>, ApiError> {
        match &self.content {
            None => Ok(None),
            Some(ChatContent::Text(text)) => Ok(Some(text.clone())),
            Some(ChatContent::Parts(parts)) => {
                let texts = parts
                    .iter()
                    .map(|part| match (part.kind.as_str(), &part.text) {
                        ("text", Some(text)) => Ok(text.as_str()),
                        ("text", None) => Err(invalid("a text content part needs its `text`")),
                        (kind, _) => Err(invalid(format!(
                            "content parts must be text; `{kind}` is not supported"
                        ))),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(Some(texts.join("\n")))
            }
        }
    }
}

/// The conversation the headers name. Extracted before the caller: a request without them
/// is malformed whoever sends it, and says so before the key's tenant is compared.
pub(crate) struct Conversation {
    session_id: Option<String>,
    user_id: String,
    agent_id: String,
}

impl<S: Send + Sync> FromRequestParts<S> for Conversation {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let header =
            |name: &str| Ok::<_, ApiError>(header_text(&parts.headers, name)?.map(str::to_owned));
        let required = |name: &str| {
            header(name)?.ok_or_else(|| ApiError::BadRequest {
                code: "missing_header",
                message: format!("the {name} header is required"),
            })
        };
        Ok(Self {
            user_id: required(USER_HEADER)?,
            agent_id: required(AGENT_HEADER)?,
            session_id: header(SESSION_HEADER)?,
        })
    }
}

/// The answer, whole.
#[derive(Serialize, ToSchema)]
pub(crate) struct ChatCompletion {
    id: String,
    /// `chat.completion`.
    object: &'static str,
    /// Unix seconds.
    created: u64,
    /// The configured model's name.
    model: String,
    /// One choice.
    choices: Vec<ChatChoice>,
    usage: TokenUsage,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct ChatChoice {
    index: u32,
    message: ChatAnswer,
    /// `stop`, `length`, `tool_calls`, `content_filter`, or what the model said.
    finish_reason: String,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct ChatAnswer {
    /// `assistant`.
    role: &'static str,
    /// `null` when the model only called tools.
    content: Option<String>,
    /// The model's tool calls, for the client to run, in OpenAI's shape.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Option<Vec<Object>>)]
    tool_calls: Vec<ToolCall>,
}

/// What every object of one answer shares.
struct Reply {
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
}

impl Reply {
    fn new(model: String, include_usage: bool) -> Self {
        Self {
            id: format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_secs()),
            model,
            include_usage,
        }
    }

    fn completion(self, outcome: RunOutcome) -> ChatCompletion {
        let answer = outcome.answer;
        ChatCompletion {
            id: self.id,
            object: "chat.completion",
            created: self.created,
            model: self.model,
            choices: vec![ChatChoice {
                index: 0,
                finish_reason: finish_reason(&answer),
                message: ChatAnswer {
                    role: "assistant",
                    content: answer.content,
                    tool_calls: answer.tool_calls,
                },
            }],
            usage: outcome.usage.into(),
        }
    }

    fn chunk(&self, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }

    fn delta(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        self.chunk(json!([{ "index": 0, "delta": delta, "finish_reason": finish_reason }]))
    }

    /// The first chunk, as OpenAI starts every stream: the role.
    fn opening(&self) -> String {
        self.delta(json!({ "role": "assistant", "content": "" }), None)
            .to_string()
    }

    /// The `data` of the events for one event of the turn.
    fn events(&self, event: RunEvent) -> Vec<String> {
        match event {
            RunEvent::Delta(StreamDelta::Content(text)) => {
                vec![self.delta(json!({ "content": text }), None).to_string()]
            }
            RunEvent::Delta(StreamDelta::ToolCall {
                index,
                id,
                name,
                arguments,
            }) => {
                let mut call = json!({ "index": index, "function": { "arguments": arguments } });
                if let Some(id) = id {
                    call["id"] = json!(id);
                    call["type"] = json!("function");
                }
                if let Some(name) = name {
                    call["function"]["name"] = json!(name);
                }
                vec![
                    self.delta(json!({ "tool_calls": [call] }), None)
                        .to_string(),
                ]
            }
            // Only agent runs run tools themselves.
            RunEvent::ToolCall { .. } => Vec::new(),
            RunEvent::Finished(finished) => match *finished {
                Ok(outcome) => {
                    let reason = finish_reason(&outcome.answer);
                    let mut events = vec![self.delta(json!({}), Some(&reason)).to_string()];
                    if self.include_usage {
                        let mut usage = self.chunk(json!([]));
                        usage["usage"] = json!(TokenUsage::from(outcome.usage));
                        events.push(usage.to_string());
                    }
                    events.push("[DONE]".to_owned());
                    events
                }
                // The SDKs raise an error event's `error` as an API error; no `[DONE]` follows
                // a stream that did not end well.
                Err(err) => vec![json!(ApiError::from(err).body()).to_string()],
            },
        }
    }
}

fn finish_reason(answer: &memlayer_llm::Completion) -> String {
    match &answer.finish_reason {
        Some(reason) => reason.as_str().to_owned(),
        None if answer.tool_calls.is_empty() => "stop".to_owned(),
        None => "tool_calls".to_owned(),
    }
}

errors!(
    ChatCompletionsErrors = [
        KEYED,
        JSON_BODY,
        VALUE,
        SESSION,
        WRITES,
        RUN,
        crate::api::context::CHANGING_SESSION,
        &[
            fails(
                400,
                "missing_header",
                "`x-memlayer-user` or `x-memlayer-agent` is missing (answered before the key is looked at)"
            ),
            fails(
                422,
                "invalid_messages",
                "No user message, a blank one or one with NUL, content that is not text, a tool message without its `tool_call_id`, or more than 1,000 messages; nothing stored"
            )
        ]
    ]
);

/// Chat completion with memory
///
/// OpenAI's chat completions, for an OpenAI SDK with `base_url` `{server}/v1/openai` and a
/// memlayer key as its API key. The conversation is named by headers: `x-memlayer-user` (a
/// user-scoped key names its own user), `x-memlayer-agent`, and `x-memlayer-session` (a
/// new session when absent); the session's id comes back in `x-memlayer-session` on every
/// answer once the turn started. The last `user` message is the new turn and is stored
/// first (not again when it is the session's last, unanswered message: a retry, or the
/// results of the tools the model called); the context is built as
/// `/v1/sessions/{id}/context` builds it for that message with the agent's settings; the
/// configured `[agent_model]` is called with the client's `system`/`developer` messages
/// first, then the context (in place of the earlier turns the client sent), then the
/// assistant and tool messages that follow the user message, with the client's tools and parameters;
/// the answer is stored and returned in OpenAI's shape. An answer of only tool calls is not
/// stored: the client runs them and sends their results, and the turn's final answer is
/// stored; the tool calls and results are not. Each call is recorded in the session's runs
/// (`kind: chat_completion`). With `stream: true` the answer is `chat.completion.chunk`
/// events ending with `data: [DONE]`; a failure during the stream is a last `data:
/// {"error": {...}}` event. The answer is stored once the model finished it, whether or not
/// the client still listens: a client that disconnects does not cut the answer short. A
/// failing model leaves the user's message stored, no answer, and a `FAILED` run.
#[utoipa::path(
    post,
    path = "/v1/openai/chat/completions",
    tag = "openai",
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
    params(
        ("x-memlayer-session" = Option<String>, Header, description = "The session to continue, one of this user with this agent; a new one when absent"),
        ("x-memlayer-user" = String, Header, description = "The user speaking (a user-scoped key names its own user)"),
        ("x-memlayer-agent" = String, Header, description = "The agent answering: its saved settings shape the context"),
    ),
    request_body = ChatCompletionRequest,
    responses(
        (status = 200, description = "The answer, or its `chat.completion.chunk` events with `stream: true`",
            headers(("x-memlayer-session" = String, description = "The session of the turn")),
            content((ChatCompletion = "application/json"), (String = "text/event-stream"))),
        ChatCompletionsErrors,
    ),
)]
pub(crate) async fn chat_completions(
    State(state): State<AppState>,
    conversation: Conversation,
    Caller(caller): Caller,
    ApiJson(body): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let Conversation {
        session_id,
        user_id,
        agent_id,
    } = conversation;
    let turn = body.into_turn()?;
    authorize(&state, &caller, &user_id, session_id.as_deref()).await?;
    let request = RunRequest {
        tenant: caller.tenant().to_owned(),
        agent_id,
        user_id,
        session_id,
        message: turn.question,
    };
    let started = state.agent().start_chat(request, turn.call).await?;
    // Ids are visible ASCII, so always a valid header value.
    let session = HeaderValue::from_str(started.session_id()).ok();
    let model = state
        .config()
        .agent_model
        .as_ref()
        .map(|model| model.config().model.clone())
        .unwrap_or_default();
    let reply = Reply::new(model, turn.include_usage);
    let mut response = if turn.stream {
        let opening = futures_util::stream::iter([reply.opening()]);
        let events = run_events(state.agent().stream(started))
            .flat_map(move |event| futures_util::stream::iter(reply.events(event)));
        let events = opening
            .chain(events)
            .map(|data| Ok::<_, Infallible>(Event::default().data(data)));
        Sse::new(events)
            .keep_alive(KeepAlive::default())
            .into_response()
    } else {
        match state.agent().run(started).await {
            Ok(outcome) => Json(reply.completion(outcome)).into_response(),
            Err(err) => ApiError::from(err).into_response(),
        }
    };
    if let Some(session) = session {
        response.headers_mut().insert(SESSION_HEADER, session);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use memlayer_agent::{AgentError, RunEvent, RunOutcome};
    use memlayer_llm::{Completion, FinishReason, Role, StreamDelta, ToolCall, Usage};
    use memlayer_store::RunStatus;
    use serde_json::{Value, json};

    use super::{ChatCompletionRequest, Reply, Turn};

    fn turn(body: Value) -> Result<Turn, String> {
        let request: ChatCompletionRequest = serde_json::from_value(body).expect("parses");
        request.into_turn().map_err(|err| err.to_string())
    }

    fn messages(messages: Value) -> Result<Turn, String> {
        turn(json!({ "model": "gpt-x", "messages": messages }))
    }

    fn call() -> ToolCall {
        ToolCall {
            id: "call_1".into(),
            name: "weather".into(),
            arguments: r#"{"city":"Lyon"}"#.into(),
        }
    }

    #[test]
    fn system_messages_are_kept_earlier_turns_left_to_the_context() {
        let turn = messages(json!([
            { "role": "system", "content": "Be brief." },
            { "role": "user", "content": "Hi, I am Dana." },
            { "role": "assistant", "content": "Hello Dana." },
            { "role": "developer", "content": [{ "type": "text", "text": "Use metric" }, { "type": "text", "text": "units." }] },
            { "role": "user", "content": [{ "type": "text", "text": "Weather?" }] },
        ]))
        .unwrap();
        assert_eq!(turn.question, "Weather?");
        let instructions: Vec<_> = turn
            .call
            .instructions
            .iter()
            .map(|message| (message.role, message.content.as_deref().unwrap()))
            .collect();
        assert_eq!(
            instructions,
            [
                (Role::System, "Be brief."),
                (Role::System, "Use metric\nunits.")
            ]
        );
        assert!(turn.call.tool_results.is_empty());
        assert!(!turn.stream && !turn.include_usage);
    }

    #[test]
    fn tool_results_after_the_question_go_to_the_model() {
        let turn = messages(json!([
            { "role": "user", "content": "Weather in Lyon?" },
            { "role": "assistant", "content": null, "tool_calls": [
                { "id": "call_1", "type": "function", "function": { "name": "weather", "arguments": "{\"city\":\"Lyon\"}" } }
            ] },
            { "role": "tool", "tool_call_id": "call_1", "content": "12°C" },
        ]))
        .unwrap();
        assert_eq!(turn.question, "Weather in Lyon?");
        let results = &turn.call.tool_results;
        assert_eq!(results.len(), 2);
        assert_eq!(
            (results[0].role, &results[0].tool_calls, &results[0].content),
            (Role::Assistant, &vec![call()], &None)
        );
        assert_eq!(
            (
                results[1].role,
                results[1].tool_call_id.as_deref(),
                results[1].content.as_deref()
            ),
            (Role::Tool, Some("call_1"), Some("12°C"))
        );
    }

    #[test]
    fn an_assistant_message_after_the_question_goes_to_the_model_as_written() {
        let turn = messages(json!([
            { "role": "user", "content": "Name a colour." },
            { "role": "assistant", "content": "The colour is" },
        ]))
        .unwrap();
        let prefill = &turn.call.tool_results;
        assert_eq!(
            (
                prefill.len(),
                prefill[0].role,
                prefill[0].content.as_deref()
            ),
            (1, Role::Assistant, Some("The colour is"))
        );
    }

    #[test]
    fn the_clients_parameters_and_tools_are_passed_on_as_written() {
        let tools = json!([{ "type": "function", "function": { "name": "weather", "strict": true, "parameters": {} } }]);
        let turn = turn(json!({
            "model": "gpt-x",
            "messages": [{ "role": "user", "content": "Hi" }],
            "stream": true,
            "stream_options": { "include_usage": true },
            "tools": tools,
            "tool_choice": "required",
            "max_tokens": 64,
            "temperature": 0.2,
            "top_p": 0.5,
            "n": 1,
        }))
        .unwrap();
        assert!(turn.stream && turn.include_usage);
        let parameters = &turn.call.parameters;
        assert_eq!(
            (parameters.max_tokens, parameters.temperature),
            (Some(64), Some(0.2))
        );
        assert_eq!(
            Value::from(parameters.extra.clone()),
            json!({ "model": "gpt-x", "tools": tools, "tool_choice": "required", "top_p": 0.5 })
        );
    }

    #[test]
    fn requests_memlayer_cannot_take_are_refused() {
        let refused = |body: Value| turn(body).expect_err("refused");
        let user = json!({ "role": "user", "content": "Hi" });
        let with = |messages: Value| json!({ "model": "m", "messages": messages });
        for (body, expected) in [
            (with(json!([])), "user message"),
            (
                with(json!([{ "role": "system", "content": "Be brief." }])),
                "user message",
            ),
            (
                with(
                    json!([{ "role": "user", "content": [{ "type": "image_url", "image_url": { "url": "x" } }] }]),
                ),
                "`image_url` is not supported",
            ),
            (
                with(json!([{ "role": "user", "content": [{ "type": "text" }] }])),
                "needs its `text`",
            ),
            (
                with(json!([{ "role": "tool", "content": "12°C" }, user])),
                "tool_call_id",
            ),
            (
                with(json!([{ "role": "user", "content": " " }, user])),
                "not blank",
            ),
            (with(json!([{ "role": "user", "content": "a\0b" }])), "NUL"),
            (
                json!({ "model": "m", "messages": [user], "n": 2 }),
                "n must be 1",
            ),
            (
                json!({ "model": "m", "messages": [user], "temperature": 2.000001 }),
                "from 0 to 2",
            ),
            (
                json!({ "model": "m", "messages": [user], "temperature": -0.5 }),
                "from 0 to 2",
            ),
            (
                with(Value::Array(vec![user.clone(); 1_001])),
                "at most 1000 messages",
            ),
        ] {
            let message = refused(body);
            assert!(message.contains(expected), "{message}");
        }
    }

    fn outcome(answer: Completion) -> RunOutcome {
        RunOutcome {
            run_id: "run".into(),
            session_id: "s".into(),
            created_session: false,
            content: answer.content.clone().unwrap_or_default(),
            status: RunStatus::Completed,
            tool_calls: Vec::new(),
            usage: Usage {
                prompt_tokens: 7,
                completion_tokens: 3,
                total_tokens: 10,
            },
            answer,
        }
    }

    fn answer(content: Option<&str>, tool_calls: Vec<ToolCall>) -> Completion {
        Completion {
            id: "upstream-id".into(),
            model: "upstream-model".into(),
            content: content.map(str::to_owned),
            tool_calls,
            finish_reason: None,
            usage: None,
            latency: Duration::ZERO,
        }
    }

    fn reply(include_usage: bool) -> Reply {
        Reply {
            id: "chatcmpl-1".into(),
            created: 1_700_000_000,
            model: "fake-model".into(),
            include_usage,
        }
    }

    #[test]
    fn an_answer_has_openais_shape() {
        let text = reply(false).completion(outcome(answer(Some("Hi"), Vec::new())));
        assert_eq!(
            serde_json::to_value(text).unwrap(),
            json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000,
                "model": "fake-model",
                "choices": [{ "index": 0, "message": { "role": "assistant", "content": "Hi" }, "finish_reason": "stop" }],
                "usage": { "prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10 },
            })
        );
        let calls = reply(false).completion(outcome(Completion {
            finish_reason: Some(FinishReason::Other("tool_calls_custom".into())),
            ..answer(None, vec![call()])
        }));
        let choice = &serde_json::to_value(calls).unwrap()["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls_custom");
        assert_eq!(choice["message"]["content"], Value::Null);
        assert_eq!(
            choice["message"]["tool_calls"],
            json!([{ "id": "call_1", "type": "function", "function": { "name": "weather", "arguments": "{\"city\":\"Lyon\"}" } }])
        );
    }

    fn parsed(events: Vec<String>) -> Vec<Value> {
        events
            .iter()
            .map(|data| serde_json::from_str(data).unwrap_or_else(|_| json!(data)))
            .collect()
    }

    #[test]
    fn stream_events_are_openais_chunks() {
        let reply = reply(true);
        let opening: Value = serde_json::from_str(&reply.opening()).unwrap();
        assert_eq!(opening["object"], "chat.completion.chunk");
        assert_eq!(
            opening["choices"][0]["delta"],
            json!({ "role": "assistant", "content": "" })
        );
        let text = parsed(reply.events(RunEvent::Delta(StreamDelta::Content("Hel".into()))));
        assert_eq!(text[0]["choices"][0]["delta"], json!({ "content": "Hel" }));
        let first = parsed(reply.events(RunEvent::Delta(StreamDelta::ToolCall {
            index: 0,
            id: Some("call_1".into()),
            name: Some("weather".into()),
            arguments: String::new(),
        })));
        assert_eq!(
            first[0]["choices"][0]["delta"],
            json!({ "tool_calls": [{ "index": 0, "id": "call_1", "type": "function", "function": { "name": "weather", "arguments": "" } }] })
        );
        let piece = parsed(reply.events(RunEvent::Delta(StreamDelta::ToolCall {
            index: 0,
            id: None,
            name: None,
            arguments: "{\"ci".into(),
        })));
        assert_eq!(
            piece[0]["choices"][0]["delta"],
            json!({ "tool_calls": [{ "index": 0, "function": { "arguments": "{\"ci" } }] })
        );

        let finished = Ok(outcome(answer(Some("Hello"), Vec::new())));
        let end = parsed(reply.events(RunEvent::Finished(Box::new(finished))));
        assert_eq!(end.len(), 3, "{end:?}");
        assert_eq!(
            (
                &end[0]["choices"][0]["delta"],
                &end[0]["choices"][0]["finish_reason"]
            ),
            (&json!({}), &json!("stop"))
        );
        assert_eq!(end[1]["choices"], json!([]));
        assert_eq!(end[1]["usage"]["total_tokens"], 10);
        assert_eq!(end[2], "[DONE]");

        let failed = Err(AgentError::ModelNotConfigured);
        let error = parsed(reply.events(RunEvent::Finished(Box::new(failed))));
        assert_eq!(error.len(), 1);
        assert_eq!(error[0]["error"]["code"], "model_not_configured");
    }
}
