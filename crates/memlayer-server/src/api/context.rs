//! Context assembly: `POST /v1/sessions/{id}/context` builds the context for the session's
//! next model call from its memory layers inside a token budget, and reports why.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use memlayer_memory::{
    ContextRequest as BuildRequest, ContextSettings, FactSheet, OutputFormat, Rendered, Report,
    SettingsOverrides, SummaryNote, render,
};
use serde::{Deserialize, Serialize};

use crate::extract::{ApiJson, ApiPath, Tenant};
use crate::{ApiError, AppState};

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions/{session_id}/context", post(context))
        .route("/v1/sessions/{session_id}/entities", get(entities))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContextRequest {
    /// The new user message the context is for; recall searches older messages with it.
    query: Option<String>,
    /// This request's changes to the saved settings (any keys of the settings document).
    #[serde(default)]
    settings: SettingsOverrides,
    #[serde(default)]
    format: OutputFormat,
}

#[derive(Serialize)]
struct ContextResponse {
    session_id: String,
    format: OutputFormat,
    #[serde(flatten)]
    context: Rendered,
    report: Report,
    /// The settings in force for this context: defaults, tenant, agent, request.
    settings: ContextSettings,
    /// Set when this request summarised older turns into a new checkpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    summary_written: Option<SummaryNote>,
    /// Why recall may have missed something, when it may have.
    #[serde(skip_serializing_if = "Option::is_none")]
    recall_degraded: Option<String>,
}

async fn context(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(session_id): ApiPath<String>,
    ApiJson(request): ApiJson<ContextRequest>,
) -> Result<Json<ContextResponse>, ApiError> {
    let built = state
        .contexts()
        .build(BuildRequest {
            tenant,
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

#[derive(Serialize)]
struct Entities {
    session_id: String,
    /// By key: the value in force, the message it came from, and the values it replaced.
    facts: FactSheet,
}

/// Entity memory of a session: the facts its user stated, corrections applied. Read from the
/// context's messages (a cleared session's facts start after the clear).
async fn entities(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(session_id): ApiPath<String>,
) -> Result<Json<Entities>, ApiError> {
    let facts = state.contexts().facts(&tenant, &session_id).await?;
    Ok(Json(Entities { session_id, facts }))
}
