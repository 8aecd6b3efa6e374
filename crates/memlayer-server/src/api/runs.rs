//! Agent runs: `POST /v1/agents/{agent_id}/runs` takes a user message to an answer through
//! the session's context, the configured model and the memory tools (`memlayer-agent`),
//! answered whole or streamed as server-sent events.

use std::convert::Infallible;

use axum::Json;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use memlayer_agent::{RunEvent, RunOutcome, RunRequest};
use memlayer_llm::{StreamDelta, Usage};
use memlayer_store::RunStatus;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use utoipa::ToSchema;

use crate::auth::Principal;
use crate::extract::{ApiJson, ApiPath, Caller};
use crate::openapi::foreign;
use crate::openapi::responses::errors;
use crate::{ApiError, AppState};

/// A user message for the agent.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunBody {
    /// The user's message; not empty.
    message: String,
    /// The conversation to continue, one of this user with this agent. A new session is
    /// created when absent.
    session_id: Option<String>,
    /// The user speaking.
    user_id: String,
    /// Stream the answer as server-sent events (`delta`, `tool_call`, then `done` or
    /// `error`) instead of answering once it is complete.
    #[serde(default)]
    stream: bool,
}

impl RunBody {
    /// The run to start for `tenant` with `agent_id`, and whether to stream it.
    pub(crate) fn into_request(self, tenant: String, agent_id: String) -> (RunRequest, bool) {
        let request = RunRequest {
            tenant,
            agent_id,
            user_id: self.user_id,
            session_id: self.session_id,
            message: self.message,
        };
        (request, self.stream)
    }
}

/// Tokens the model counted, over every model call of the run.
#[derive(Serialize, ToSchema)]
pub(crate) struct TokenUsage {
    prompt_tokens: u32,
    completion_tokens: u32,
    total_tokens: u32,
}

/// A completed run. The answer is stored as the session's assistant message and the run in
/// the session's runs.
#[derive(Serialize, ToSchema)]
pub(crate) struct RunAnswer {
    run_id: String,
    session_id: String,
    /// Whether this run created the session.
    created_session: bool,
    /// The answer.
    content: String,
    #[schema(value_type = foreign::RunStatus)]
    status: RunStatus,
    /// The memory tools the model called: id, name, arguments, round, ok, result.
    #[schema(value_type = Vec<Object>)]
    tool_calls: Vec<Value>,
    usage: TokenUsage,
}

impl From<Usage> for TokenUsage {
    fn from(usage: Usage) -> Self {
        let Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens,
        } = usage;
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens,
        }
    }
}

impl From<RunOutcome> for RunAnswer {
    fn from(outcome: RunOutcome) -> Self {
        Self {
            run_id: outcome.run_id,
            session_id: outcome.session_id,
            created_session: outcome.created_session,
            content: outcome.content,
            status: outcome.status,
            tool_calls: outcome.tool_calls,
            usage: outcome.usage.into(),
        }
    }
}

errors!(
    RunAgentErrors = [
        KEYED,
        PATH,
        JSON_BODY,
        VALUE,
        SESSION,
        WRITES,
        RUN,
        crate::api::context::CHANGING_SESSION
    ]
);

/// Run the agent on a user message
///
/// Stores the message (creating the session when none is named) before the model is
/// called, builds the context with the agent's saved settings, calls the configured
/// OpenAI-compatible model with the memory tools (executing their calls as the session's
/// user, at most 4 rounds), and stores the answer and the run (status, tool calls, token
/// usage, latency). If the model fails, the message stays stored, the session is left in
/// `incomplete_turn`, and the run is recorded as `FAILED` with the reason; the error names
/// the run. With `stream: true` the answer is a `text/event-stream`: `delta` events
/// (`{"content"}`), `tool_call` events (`{"name", "ok"}`), and last either `done` (the same
/// body as the JSON answer) or `error` (an error body; the run is `FAILED`).
#[utoipa::path(
    post,
    path = "/v1/agents/{agent_id}/runs",
    operation_id = "run_agent",
    tag = "runs",
    params(("agent_id" = String, Path, description = "The agent answering")),
    request_body = RunBody,
    responses(
        (status = 200, description = "The answer, or its event stream with `stream: true`",
            content((RunAnswer = "application/json"), (String = "text/event-stream"))),
        RunAgentErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn run(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(agent_id): ApiPath<String>,
    ApiJson(body): ApiJson<RunBody>,
) -> Result<Response, ApiError> {
    authorize(&state, &caller, &body.user_id, body.session_id.as_deref()).await?;
    let (request, stream) = body.into_request(caller.tenant().to_owned(), agent_id);
    let turn = state.agent().start(request).await?;
    if !stream {
        let outcome = state.agent().run(turn).await?;
        return Ok(Json(RunAnswer::from(outcome)).into_response());
    }
    let events = run_events(state.agent().stream(turn))
        .filter_map(|event| std::future::ready(sse_event(event).map(Ok::<_, Infallible>)));
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// A streamed run's events, as a stream that ends after `RunEvent::Finished`.
pub(crate) fn run_events(events: mpsc::Receiver<RunEvent>) -> impl Stream<Item = RunEvent> {
    futures_util::stream::unfold(events, |mut events| async {
        let event = events.recv().await?;
        Some((event, events))
    })
}

/// Whether `caller` may start a run for `user_id` in `session_id`. A run acts for its user
/// only: another user's session is not found (404) by `Agent::start`, and before the key's
/// own user is checked, so the answer does not tell whether it exists.
pub(crate) async fn authorize(
    state: &AppState,
    caller: &Principal,
    user_id: &str,
    session_id: Option<&str>,
) -> Result<(), ApiError> {
    if let Err(forbidden) = caller.may_act_for(user_id) {
        if let Some(session_id) = session_id {
            crate::api::erasure::require_session(state, caller, session_id).await?;
        }
        return Err(forbidden);
    }
    Ok(())
}

/// The event for the client; `None` for the pieces of the model's tool calls, which the run
/// executes and reports in `tool_call` events instead.
fn sse_event(event: RunEvent) -> Option<Event> {
    let (name, data) = match event {
        RunEvent::Delta(StreamDelta::Content(content)) => ("delta", json!({ "content": content })),
        RunEvent::Delta(StreamDelta::ToolCall { .. }) => return None,
        RunEvent::ToolCall { name, ok } => ("tool_call", json!({ "name": name, "ok": ok })),
        RunEvent::Finished(finished) => match *finished {
            Ok(outcome) => ("done", to_json(RunAnswer::from(outcome))),
            Err(err) => ("error", to_json(ApiError::from(err).body())),
        },
    };
    Some(Event::default().event(name).data(data.to_string()))
}

fn to_json(value: impl Serialize) -> Value {
    // Plain structs with string keys: serialising them cannot fail.
    serde_json::to_value(value).unwrap_or(Value::Null)
}
