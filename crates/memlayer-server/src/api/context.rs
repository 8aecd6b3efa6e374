//! Context assembly: `POST /v1/sessions/{id}/context` builds the context for the session's
//! next model call from its memory layers inside a token budget, and reports why.

use axum::Json;
use axum::extract::State;
use memlayer_memory::{
    ContextRequest as BuildRequest, ContextSettings, FactSheet, OutputFormat, Rendered, Report,
    SettingsOverrides, SummaryNote, render,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::extract::{ApiJson, ApiPath, Caller};
use crate::openapi::foreign;
use crate::openapi::responses::{Failures, errors, fails};
use crate::{ApiError, AppState};

/// What the context is for and how to shape it.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ContextRequest {
    /// The new user message the context is for; recall searches older messages with it.
    query: Option<String>,
    /// This request's changes to the saved settings (any keys of the settings document).
    #[serde(default)]
    #[schema(value_type = foreign::SettingsDocument)]
    pub(crate) settings: SettingsOverrides,
    /// `openai` when absent.
    #[serde(default)]
    #[schema(value_type = foreign::OutputFormat)]
    format: OutputFormat,
}

/// The context for the next model call, rendered in the requested format (`messages` for
/// `openai`; `system` and `messages` for `anthropic`; `text` for `text`), with a report of
/// what went in and why the rest did not.
#[derive(Serialize, ToSchema)]
pub(crate) struct ContextResponse {
    session_id: String,
    #[schema(value_type = foreign::OutputFormat)]
    format: OutputFormat,
    #[serde(flatten)]
    #[schema(value_type = foreign::Rendered)]
    context: Rendered,
    #[schema(value_type = foreign::Report)]
    report: Report,
    /// The settings in force for this context: defaults, tenant, agent, request.
    #[schema(value_type = foreign::ContextSettings)]
    settings: ContextSettings,
    /// Set when this request summarised older turns into a new checkpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<foreign::SummaryNote>)]
    summary_written: Option<SummaryNote>,
    /// Why recall may have missed something, when it may have.
    #[serde(skip_serializing_if = "Option::is_none")]
    recall_degraded: Option<String>,
}

/// What building a session's context answers when its messages keep being erased meanwhile,
/// here and in agent runs.
pub(crate) const CHANGING_SESSION: Failures = &[fails(
    409,
    "conflict",
    "Messages of the session kept being erased while its context was built; retry",
)];

errors!(
    ContextErrors = [
        KEYED,
        PATH,
        JSON_BODY,
        SESSION,
        SETTING,
        CHANGING_SESSION,
        &[fails(
            409,
            "conflict",
            "The request turns off the PII redaction the saved settings ask for"
        )]
    ]
);

/// Build the context for the next model call
///
/// Known facts, a summary of older turns, recalled older messages and the recent window,
/// packed into the model's token budget by the settings in force (defaults, then the tenant's,
/// the agent's and this request's). Exchanges are kept or dropped whole.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/context",
    tag = "context",
    params(("session_id" = String, Path, description = "The session's id")),
    request_body = ContextRequest,
    responses(
        (status = 200, description = "The context and its report", body = ContextResponse),
        ContextErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn context(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(session_id): ApiPath<String>,
    ApiJson(request): ApiJson<ContextRequest>,
) -> Result<Json<ContextResponse>, ApiError> {
    let built = state
        .contexts()
        .build(BuildRequest {
            access: caller.access(),
            session_id: session_id.clone(),
            query: request.query,
            overrides: request.settings,
        })
        .await?;
    Ok(Json(ContextResponse {
        session_id,
        format: request.format,
        context: render(&built.assembled.messages, request.format),
        report: built.assembled.report,
        settings: built.settings,
        summary_written: built.summary,
        recall_degraded: built.recall_degraded,
    }))
}

/// A session's entity memory.
#[derive(Serialize, ToSchema)]
pub(crate) struct Entities {
    session_id: String,
    /// By key: the value in force, the message it came from, and the values it replaced.
    #[schema(value_type = foreign::FactSheet)]
    facts: FactSheet,
}

errors!(EntitiesErrors = [KEYED, PATH, SESSION]);

/// Entity memory of a session
///
/// The facts its user stated, corrections applied. Read from the context's messages (a
/// cleared session's facts start after the clear).
#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}/entities",
    tag = "context",
    params(("session_id" = String, Path, description = "The session's id")),
    responses(
        (status = 200, description = "The facts by key", body = Entities),
        EntitiesErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn entities(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(session_id): ApiPath<String>,
) -> Result<Json<Entities>, ApiError> {
    let facts = state
        .contexts()
        .facts(&caller.access(), &session_id)
        .await?;
    Ok(Json(Entities { session_id, facts }))
}
