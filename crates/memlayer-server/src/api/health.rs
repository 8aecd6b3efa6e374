//! Liveness and readiness probes.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::api::read;
use crate::{ApiError, AppState};

/// A probe's answer.
#[derive(Serialize, ToSchema)]
pub(crate) struct Probe {
    /// `ok` (alive) or `ready`.
    status: &'static str,
}

/// Liveness
///
/// The process is up and answering.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "Alive", body = Probe, example = json!({"status": "ok"}))),
)]
pub(crate) async fn live() -> Json<Probe> {
    Json(Probe { status: "ok" })
}

/// Readiness
///
/// The store can be read and still accepts writes; `503` while shutting down, and after a
/// storage failure that makes the store refuse writes until the process restarts (take the
/// instance out of rotation and restart it).
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses((status = 200, description = "Ready", body = Probe, example = json!({"status": "ready"}))),
)]
pub(crate) async fn ready(State(state): State<AppState>) -> Result<Json<Probe>, ApiError> {
    match read(&state, |store| store.check_ready()).await {
        Ok(()) => Ok(Json(Probe { status: "ready" })),
        // Not a failure of this request: the instance is not ready. The cause is logged.
        Err(ApiError::Internal(detail)) => {
            tracing::error!(%detail, "not ready: the store refuses writes");
            Err(ApiError::Unavailable(
                "the store failed and refuses writes; restart the server".into(),
            ))
        }
        Err(err) => Err(err),
    }
}
