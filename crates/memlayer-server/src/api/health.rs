//! Liveness and readiness probes.

use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::api::read;
use crate::{ApiError, AppState};

pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(live))
        .route("/readyz", get(ready))
}

/// The process is up and answering.
async fn live() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// The store can be read and still accepts writes.
async fn ready(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> Result<Json<Value>, ApiError> {
    read(&state, |store| store.check_ready()).await?;
    Ok(Json(json!({ "status": "ready" })))
}
