//! The chat-completions wire format: what callers build (`ChatRequest`, `Message`, `Tool`),
//! what they get back (`Completion`, `ToolCall`, `Usage`), and the private shapes of the JSON
//! bodies in between.
//!
//! Parsing is lenient where servers differ: unknown fields are ignored everywhere, and the
//! fields that llama.cpp, vLLM or Ollama leave out (`id`, `model`, `usage`, `finish_reason`,
//! a tool call's `id`) are optional. Only `choices` is required, because without it there is
//! no answer.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::LlmError;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions to the model.
    System,
    /// The person (or program) the model answers.
    User,
    /// The model.
    Assistant,
    /// The output of a tool the model called.
    Tool,
}

/// One message of the conversation sent to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// The text. `None` only for an assistant message that consists of tool calls; it is sent
    /// as `null`, which is what OpenAI documents for that case.
    pub content: Option<String>,
    /// An optional name distinguishing participants of the same role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// For a `Tool` message, the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For an `Assistant` message, the tools it called.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub tool_calls: Vec<ToolCall>,
}

impl Message {
    fn text(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: Some(content.into()),
            name: None,
            tool_call_id: None,
            tool_calls: Vec::new(),
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::text(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::text(Role::User, content)
    }

    /// An assistant message with text.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::text(Role::Assistant, content)
    }

    /// An assistant message that called tools, to send back before their results.
    pub fn assistant_tool_calls(tool_calls: Vec<ToolCall>) -> Self {
        Self {
            role: Role::Assistant,
            content: None,
            name: None,
            tool_call_id: None,
            tool_calls,
        }
    }

    /// The result of the tool call `tool_call_id`.
    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(tool_call_id.into()),
            ..Self::text(Role::Tool, content)
        }
    }
}

/// A call of a function tool, as the model returns it and as it is sent back in history:
/// `{"id", "type": "function", "function": {"name", "arguments"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WireToolCall", into = "WireToolCall")]
pub struct ToolCall {
    /// The call's id, which the tool's result refers to. Empty if the server sent none.
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments as a JSON text, exactly as the model wrote them: the model may write
    /// invalid JSON, so parsing them is the caller's decision.
    pub arguments: String,
}

/// A function the model may call: `{"type": "function", "function": {...}}` on the wire.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(into = "WireTool")]
pub struct Tool {
    /// The function's name.
    pub name: String,
    /// What it does, for the model.
    pub description: Option<String>,
    /// Its parameters as a JSON Schema object.
    pub parameters: serde_json::Value,
}

/// Whether and which tool the model must call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the default when tools are given).
    Auto,
    /// The model must not call a tool.
    None,
    /// The model must call at least one tool.
    Required,
    /// The model must call the named function.
    Function(String),
}

impl Serialize for ToolChoice {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => serializer.serialize_str("auto"),
            Self::None => serializer.serialize_str("none"),
            Self::Required => serializer.serialize_str("required"),
            Self::Function(name) => serde_json::json!({
                "type": "function",
                "function": { "name": name },
            })
            .serialize(serializer),
        }
    }
}

/// One chat-completion call. The model comes from the client's `LlmConfig`, and so do
/// `max_tokens` and `temperature` when they are `None` here.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatRequest {
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// The tools the model may call; none are sent when empty.
    pub tools: Vec<Tool>,
    /// Whether and which tool the model must call; the server's default when `None`.
    pub tool_choice: Option<ToolChoice>,
    /// The most tokens to generate.
    pub max_tokens: Option<u32>,
    /// The sampling temperature.
    pub temperature: Option<f32>,
    /// More body fields, sent as they are, for a caller passing on a client's own request:
    /// what this crate does not model (`top_p`, `stop`, `response_format`, a client's `tools`
    /// with fields `Tool` lacks, …). A field the request sets above (or the client's config
    /// or the stream's options) is never overridden by one of these.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl ChatRequest {
    /// A request with these messages and everything else from the config.
    pub fn new(messages: Vec<Message>) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }
}

/// Why the model stopped writing.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub enum FinishReason {
    /// It finished its answer (or hit a stop sequence).
    Stop,
    /// It hit `max_tokens` or the context length: the answer is cut off.
    Length,
    /// It called tools and waits for their results.
    ToolCalls,
    /// The provider's content filter removed output.
    ContentFilter,
    /// A reason this crate does not know, as sent.
    Other(String),
}

impl FinishReason {
    /// The reason as the wire format writes it.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ToolCalls => "tool_calls",
            Self::ContentFilter => "content_filter",
            Self::Other(reason) => reason,
        }
    }
}

impl From<String> for FinishReason {
    fn from(reason: String) -> Self {
        match reason.as_str() {
            "stop" => Self::Stop,
            "length" => Self::Length,
            // `function_call` is the name from before tools replaced functions.
            "tool_calls" | "function_call" => Self::ToolCalls,
            "content_filter" => Self::ContentFilter,
            _ => Self::Other(reason),
        }
    }
}

/// Tokens counted by the upstream. A count the server left out is zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt.
    #[serde(default)]
    pub prompt_tokens: u32,
    /// Tokens generated.
    #[serde(default)]
    pub completion_tokens: u32,
    /// Their sum, as the server reported it.
    #[serde(default)]
    pub total_tokens: u32,
}

/// The model's answer to one `ChatRequest`.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The completion's id; empty if the server sent none.
    pub id: String,
    /// The model that answered, as the server names it; empty if it sent none.
    pub model: String,
    /// The text of the answer. `None` when the model only called tools.
    pub content: Option<String>,
    /// The tools the model called, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped; `None` if the server did not say.
    pub finish_reason: Option<FinishReason>,
    /// Token counts, if the server sent them.
    pub usage: Option<Usage>,
    /// From sending the request to having the whole answer.
    pub latency: Duration,
}

/// The body of a request. Built per call from a `ChatRequest` and the config, so the caller's
/// request never has to carry the model name.
#[derive(Serialize)]
pub(crate) struct WireRequest<'a> {
    pub(crate) model: &'a str,
    pub(crate) messages: &'a [Message],
    // `max_tokens` rather than OpenAI's newer `max_completion_tokens`: every compatible server
    // understands it, and OpenAI still accepts it for chat models.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) temperature: Option<f32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "<[Tool]>::is_empty")]
    pub(crate) tools: &'a [Tool],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool_choice: Option<&'a ToolChoice>,
}

#[derive(Serialize)]
pub(crate) struct StreamOptions {
    pub(crate) include_usage: bool,
}

/// The body of a non-streamed answer. `object` and `created` are not read: nothing here needs
/// them and some servers omit them.
#[derive(Deserialize)]
pub(crate) struct WireResponse {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: WireAnswer,
    #[serde(default)]
    finish_reason: Option<FinishReason>,
}

/// The message of a choice. Its `role` is always the assistant's, so it is not read.
#[derive(Deserialize)]
struct WireAnswer {
    #[serde(default)]
    content: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    tool_calls: Vec<ToolCall>,
}

impl WireResponse {
    /// The first choice as a `Completion`. Only one is asked for (`n` is never sent), so
    /// later choices, if a server sent any, are ignored.
    pub(crate) fn into_completion(self, latency: Duration) -> Result<Completion, LlmError> {
        let choice = self
            .choices
            .into_iter()
            .next()
            .ok_or(LlmError::EmptyChoices)?;
        Ok(Completion {
            id: self.id,
            model: self.model,
            content: choice.message.content,
            tool_calls: choice.message.tool_calls,
            finish_reason: choice.finish_reason,
            usage: self.usage,
            latency,
        })
    }
}

#[derive(Serialize, Deserialize)]
struct WireToolCall {
    #[serde(default)]
    id: String,
    #[serde(rename = "type", default = "function_type")]
    kind: String,
    function: WireFunctionCall,
}

#[derive(Serialize, Deserialize)]
struct WireFunctionCall {
    name: String,
    #[serde(default, deserialize_with = "arguments_text")]
    arguments: String,
}

fn function_type() -> String {
    "function".to_owned()
}

impl From<WireToolCall> for ToolCall {
    fn from(call: WireToolCall) -> Self {
        Self {
            id: call.id,
            name: call.function.name,
            arguments: call.function.arguments,
        }
    }
}

impl From<ToolCall> for WireToolCall {
    fn from(call: ToolCall) -> Self {
        Self {
            id: call.id,
            kind: function_type(),
            function: WireFunctionCall {
                name: call.name,
                arguments: call.arguments,
            },
        }
    }
}

#[derive(Serialize)]
struct WireTool {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction,
}

#[derive(Serialize)]
struct WireFunction {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    parameters: serde_json::Value,
}

impl From<Tool> for WireTool {
    fn from(tool: Tool) -> Self {
        Self {
            kind: "function",
            function: WireFunction {
                name: tool.name,
                description: tool.description,
                parameters: tool.parameters,
            },
        }
    }
}

/// Arguments are a JSON text in the OpenAI format, but some servers send the object itself;
/// both become text so callers see one shape.
fn arguments_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(deserializer)? {
        serde_json::Value::String(text) => text,
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    })
}

/// Servers disagree on an absent list: missing, `null` and `[]` all mean none.
pub(crate) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}
