//! The one error type of the crate, and the parsing of the upstream's own error object.
//!
//! No error carries the API key: the key travels only in a header marked sensitive, the base
//! URL may not hold credentials (see `LlmConfig`), and text that comes back from the upstream
//! is scrubbed of the key before it is kept, because some servers echo what they were sent.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// How much of a non-JSON error body is kept: enough to recognise a proxy's error page,
/// not so much that an error message becomes a document.
const BODY_EXCERPT_CHARS: usize = 300;

/// Everything that can go wrong when calling the model.
///
/// `InvalidConfig` is the operator's mistake and is returned before anything is sent.
/// `Timeout`, `Connect` and `Transport` are failures to reach the upstream or to hear back
/// from it, worth retrying later. `Status` and `StreamError` are the upstream refusing or
/// failing the request (a 429 or 5xx may be retried, a 4xx usually not). `Malformed`,
/// `EmptyChoices` and `StreamTruncated` mean the upstream answered something that is not a
/// usable chat completion.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The configuration cannot work, e.g. a base URL that does not parse.
    #[error("invalid LLM configuration: {0}")]
    InvalidConfig(String),
    /// The upstream did not answer (or, in a stream, went silent) for longer than the
    /// configured timeout.
    #[error("the LLM upstream did not answer within {}s", .after.as_secs_f64())]
    Timeout {
        /// The configured timeout that ran out.
        after: Duration,
    },
    /// No connection could be made, e.g. nothing listens at the configured address.
    #[error("could not connect to the LLM upstream at {endpoint}: {reason}")]
    Connect {
        /// The URL the client tried to reach.
        endpoint: String,
        /// What the transport reported, with its causes.
        reason: String,
    },
    /// The connection failed after it was made, e.g. it was reset while reading the body.
    #[error("request to the LLM upstream failed: {0}")]
    Transport(String),
    /// The upstream answered with an HTTP error status.
    #[error("the LLM upstream answered HTTP {status}: {error}")]
    Status {
        /// The HTTP status code.
        status: u16,
        /// The upstream's error object, or the start of the body if it sent none.
        error: UpstreamError,
    },
    /// The upstream reported an error inside a stream that had started successfully.
    #[error("the LLM upstream failed during the stream: {0}")]
    StreamError(UpstreamError),
    /// The body is not a chat completion (or a stream chunk is not a completion chunk).
    #[error("malformed response from the LLM upstream: {0}")]
    Malformed(String),
    /// The completion has no choices, so there is no answer to return.
    #[error("the LLM upstream returned no choices")]
    EmptyChoices,
    /// The stream ended (or broke) before `data: [DONE]`, so the answer may be incomplete.
    #[error("the LLM stream ended before `data: [DONE]`")]
    StreamTruncated,
}

impl LlmError {
    /// What went wrong, in words for whoever reads the failed run or the context it was for
    /// (a user's own key included): what failed, never where the upstream is, what it answered
    /// or what it was sent. Those belong to the operator and go to the log ([`Self::for_log`]).
    pub fn public_reason(&self) -> String {
        match self {
            Self::InvalidConfig(_) => "the model is not configured correctly".to_owned(),
            Self::Timeout { .. } => "the model did not answer in time".to_owned(),
            Self::Connect { .. } | Self::Transport(_) => {
                "the model upstream could not be reached".to_owned()
            }
            Self::Status { status, .. } => format!("the model upstream answered {status}"),
            Self::StreamError(_) => "the model upstream failed during its answer".to_owned(),
            Self::Malformed(_) | Self::EmptyChoices | Self::StreamTruncated => {
                "the model upstream's answer was malformed or incomplete".to_owned()
            }
        }
    }

    /// The error for the operator's log: its message without what the upstream said in its
    /// error messages or its malformed bodies, which may quote the conversation it was sent;
    /// the upstream's address and the error's type and code stay.
    pub fn for_log(&self) -> String {
        match self {
            Self::Status { status, error } => {
                format!("the LLM upstream answered HTTP {status}{}", error.codes())
            }
            Self::StreamError(error) => {
                format!("the LLM upstream failed during the stream{}", error.codes())
            }
            Self::Malformed(_) => "malformed response from the LLM upstream".to_owned(),
            Self::InvalidConfig(_)
            | Self::Timeout { .. }
            | Self::Connect { .. }
            | Self::Transport(_)
            | Self::EmptyChoices
            | Self::StreamTruncated => self.to_string(),
        }
    }
}

/// The error object of the OpenAI format, `{"error": {"message", "type", "code"}}`.
///
/// `code` is a string at OpenAI (`"invalid_api_key"`) and a number at llama.cpp (`400`);
/// both are kept as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamError {
    /// The upstream's message, or the start of the body when it sent no error object.
    pub message: String,
    /// The error `type`, e.g. `invalid_request_error`.
    pub kind: Option<String>,
    /// The error `code`, e.g. `rate_limit_exceeded`.
    pub code: Option<String>,
}

impl fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        f.write_str(&self.codes())
    }
}

impl UpstreamError {
    /// ` (type, code)`, ` (one of them)` or nothing.
    fn codes(&self) -> String {
        match (&self.kind, &self.code) {
            (Some(kind), Some(code)) => format!(" ({kind}, {code})"),
            (Some(one), None) | (None, Some(one)) => format!(" ({one})"),
            (None, None) => String::new(),
        }
    }

    /// Reads an error body: the OpenAI error object when there is one, otherwise an excerpt
    /// of the body as text. `api_key` is removed from everything kept.
    pub(crate) fn from_body(body: &[u8], api_key: Option<&str>) -> Self {
        let mut error = match serde_json::from_slice::<ErrorBody>(body) {
            Ok(ErrorBody { error: Some(error) }) => Self::from_wire(error),
            _ => Self {
                message: String::new(),
                kind: None,
                code: None,
            },
        };
        // An error object without a message says nothing a person can read; the body might.
        if error.message.is_empty() {
            error.message = excerpt(&String::from_utf8_lossy(body));
        }
        error.scrubbed(api_key)
    }

    /// Reads the `error` member of a stream chunk. Anything that is not an error object is
    /// kept as its JSON text rather than dropped: the stream failed either way.
    pub(crate) fn from_value(error: &serde_json::Value, api_key: Option<&str>) -> Self {
        let error =
            WireError::deserialize(error).unwrap_or_else(|_| WireError::Text(error.to_string()));
        Self::from_wire(error).scrubbed(api_key)
    }

    fn from_wire(error: WireError) -> Self {
        match error {
            WireError::Object {
                message,
                kind,
                code,
            } => Self {
                message: message.unwrap_or_default(),
                kind,
                code: code.and_then(code_text),
            },
            // Some servers (older vLLM, FastAPI defaults) send `{"error": "text"}`.
            WireError::Text(message) => Self {
                message,
                kind: None,
                code: None,
            },
        }
    }

    fn scrubbed(self, api_key: Option<&str>) -> Self {
        let Some(key) = api_key.filter(|key| !key.is_empty()) else {
            return self;
        };
        let scrub = |text: String| text.replace(key, "[redacted]");
        Self {
            message: scrub(self.message),
            kind: self.kind.map(scrub),
            code: self.code.map(scrub),
        }
    }
}

/// Joins an error and its causes into one line. reqwest's own message only names the URL;
/// the useful part ("Connection refused") is further down the chain.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // hyper and reqwest often repeat their cause in their own message.
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn excerpt(body: &str) -> String {
    let body = body.trim();
    if body.is_empty() {
        return "(empty body)".to_owned();
    }
    match body.char_indices().nth(BODY_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &body[..cut]),
        None => body.to_owned(),
    }
}

fn code_text(code: serde_json::Value) -> Option<String> {
    match code {
        serde_json::Value::Null => None,
        serde_json::Value::String(text) => Some(text),
        other => Some(other.to_string()),
    }
}

#[derive(Deserialize)]
struct ErrorBody {
    error: Option<WireError>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum WireError {
    Object {
        message: Option<String>,
        #[serde(rename = "type")]
        kind: Option<String>,
        code: Option<serde_json::Value>,
    },
    Text(String),
}
