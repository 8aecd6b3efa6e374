//! Context assembly: `POST /v1/sessions/{id}/context` builds the context for the session's
//! next model call from its memory layers inside a token budget, and reports why.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use memlayer_index::{RecallQuery, Scope};
use memlayer_memory::{
    ContextSettings, FactSheet, LayerInputs, OutputFormat, Rendered, Report, Strategy, assemble,
    render,
};
use memlayer_store::StoreError;
use serde::{Deserialize, Serialize};

use crate::api::read;
use crate::extract::{ApiJson, ApiPath, Tenant};
use crate::{ApiError, AppState};

/// Most earlier messages recall may add to one context.
const MAX_RECALLED: usize = 50;

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
    /// Overrides of the default settings for this request.
    #[serde(default)]
    settings: ContextSettings,
    #[serde(default)]
    format: OutputFormat,
    /// How many older messages recall may add (combined strategy with a query).
    #[serde(default = "default_recall_k")]
    recall_k: usize,
}

fn default_recall_k() -> usize {
    5
}

#[derive(Serialize)]
struct ContextResponse {
    session_id: String,
    format: OutputFormat,
    #[serde(flatten)]
    context: Rendered,
    report: Report,
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
    request
        .settings
        .validate()
        .map_err(|err| ApiError::invalid("invalid_value", err.to_string()))?;
    if request.recall_k > MAX_RECALLED {
        return Err(ApiError::invalid(
            "invalid_value",
            format!("recall_k must be at most {MAX_RECALLED}"),
        ));
    }
    let (owned_tenant, owned_id) = (tenant.clone(), session_id.clone());
    let messages = read(&state, move |store| {
        let Some(session) = store.session(&owned_tenant, &owned_id)? else {
            return Err(StoreError::SessionNotFound {
                session_id: owned_id,
            });
        };
        // A cleared session's context starts after the clear.
        store.messages(&owned_tenant, &owned_id, session.load_from, usize::MAX)
    })
    .await?;

    let wants_recall = request.settings.strategy == Strategy::Combined && request.recall_k > 0;
    let (recalled, recall_degraded) = match request.query.filter(|q| !q.trim().is_empty()) {
        Some(query) if wants_recall => {
            let recalled = state
                .recall()
                .recall(RecallQuery {
                    tenant,
                    scope: Scope::Session {
                        session_id: session_id.clone(),
                    },
                    query,
                    k: request.recall_k,
                    roles: None,
                    after: None,
                    before: None,
                    exclude_indices: Vec::new(),
                })
                .await?;
            let hits = recalled
                .hits
                .into_iter()
                .map(|hit| (hit.message, hit.score))
                .collect();
            (hits, recalled.degraded)
        }
        _ => (Vec::new(), None),
    };

    let encoding = state.config().token_encoding;
    let settings = request.settings;
    let format = request.format;
    // Fact extraction and packing scale with the session's length: off the async workers.
    let assembled = tokio::task::spawn_blocking(move || {
        let layers = LayerInputs {
            summary: None,
            recalled,
        };
        assemble(&messages, &layers, &settings, encoding)
    })
    .await
    .map_err(|err| ApiError::Internal(format!("context assembly failed: {err}")))?
    .map_err(|err| ApiError::invalid("invalid_value", err.to_string()))?;
    Ok(Json(ContextResponse {
        session_id,
        format,
        context: render(&assembled.messages, format),
        report: assembled.report,
        recall_degraded,
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
    let id = session_id.clone();
    let facts = read(&state, move |store| {
        let Some(session) = store.session(&tenant, &id)? else {
            return Err(StoreError::SessionNotFound { session_id: id });
        };
        let messages = store.messages(&tenant, &id, session.load_from, usize::MAX)?;
        Ok(FactSheet::from_messages(&messages))
    })
    .await?;
    Ok(Json(Entities { session_id, facts }))
}
