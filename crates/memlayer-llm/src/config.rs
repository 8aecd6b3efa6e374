//! The configuration of one upstream, as it sits in a TOML config file, and its validation
//! into the endpoint the client posts to.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::error::LlmError;

/// How long a call may wait when the config does not say. Generous on purpose: a local model
/// on a CPU can take minutes to write a long answer, and a too-short default turns a slow but
/// working setup into errors.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Where and how to reach one OpenAI-compatible upstream.
///
/// In TOML:
///
/// ```toml
/// base_url = "http://127.0.0.1:8080/v1"
/// model = "qwen2.5-7b-instruct"
/// api_key = "sk-..."        # optional; no Authorization header without it
/// timeout_secs = 60         # optional, default 120; fractions allowed
/// max_tokens = 512          # optional
/// temperature = 0.2         # optional
/// ```
///
/// `Debug` never shows the API key.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// The API root, including its version segment, e.g. `http://127.0.0.1:8080/v1` or
    /// `https://api.openai.com/v1`. The client posts to `{base_url}/chat/completions`; a
    /// trailing slash is tolerated. Credentials belong in `api_key`, not in the URL.
    pub base_url: String,
    /// The model name sent with every request.
    pub model: String,
    /// Sent as `Authorization: Bearer <key>` when set. Local servers usually need none.
    #[serde(default)]
    pub api_key: Option<String>,
    /// For a plain completion, the limit on the whole call. For a stream, the limit on
    /// waiting for the response headers and then on each silence between two chunks, so a
    /// long answer that keeps arriving is never cut off.
    #[serde(
        rename = "timeout_secs",
        default = "default_timeout",
        deserialize_with = "deserialize_secs"
    )]
    pub timeout: Duration,
    /// Default `max_tokens` for requests that do not set their own.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Default `temperature` for requests that do not set their own.
    #[serde(default)]
    pub temperature: Option<f32>,
}

impl LlmConfig {
    /// A config for `model` at `base_url` with no key, the default timeout and no defaults
    /// for `max_tokens` or `temperature`.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout: DEFAULT_TIMEOUT,
            max_tokens: None,
            temperature: None,
        }
    }

    /// Checks the config and returns the chat-completions endpoint.
    pub(crate) fn endpoint(&self) -> Result<reqwest::Url, LlmError> {
        let invalid = |reason: String| LlmError::InvalidConfig(reason);
        if self.model.trim().is_empty() {
            return Err(invalid("`model` is empty".to_owned()));
        }
        if self.timeout.is_zero() {
            return Err(invalid(
                "`timeout_secs` must be greater than zero".to_owned(),
            ));
        }
        let base = reqwest::Url::parse(&self.base_url)
            .map_err(|error| invalid(format!("`base_url` is not a URL: {error}")))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(invalid(format!(
                "`base_url` must use http or https, not `{}`",
                base.scheme()
            )));
        }
        // A key in the URL would be sent in clear to any proxy and end up in every error
        // message that names the endpoint; `api_key` is the one place for it.
        if !base.username().is_empty() || base.password().is_some() {
            return Err(invalid(
                "`base_url` must not contain credentials; set `api_key` instead".to_owned(),
            ));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(invalid(
                "`base_url` must not have a query or fragment".to_owned(),
            ));
        }
        let root = base.as_str().trim_end_matches('/');
        reqwest::Url::parse(&format!("{root}/chat/completions"))
            .map_err(|error| invalid(format!("`base_url` cannot be extended: {error}")))
    }
}

impl fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("timeout", &self.timeout)
            .field("max_tokens", &self.max_tokens)
            .field("temperature", &self.temperature)
            .finish()
    }
}

fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

fn deserialize_secs<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let secs = f64::deserialize(deserializer)?;
    Duration::try_from_secs_f64(secs).map_err(|_| {
        serde::de::Error::custom(format!(
            "`timeout_secs` must be a non-negative number of seconds, got {secs}"
        ))
    })
}
