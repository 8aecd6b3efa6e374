//! Liveness and readiness probes.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::api::read;
use crate::openapi::responses::errors;
use crate::{ApiError, AppState};

/// A probe's answer.
#[derive(Serialize, ToSchema)]
pub(crate) struct Probe {
    /// `ok` (alive) or `ready`.
    status: &'static str,
    /// Ready, but free disk space is below the configured warning threshold: free some
    /// before the disk fills up and writes are refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: Option<String>,
}

errors!(LiveErrors = [TIMED]);

/// Liveness
///
/// The process is up and answering.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "Alive", body = Probe, example = json!({"status": "ok"})), LiveErrors),
)]
pub(crate) async fn live() -> Json<Probe> {
    Json(Probe {
        status: "ok",
        warning: None,
    })
}

errors!(
    ReadyErrors = [
        TIMED,
        &[
            fails(
                503,
                "unavailable",
                "The store cannot be read, the server is shutting down, or (on a database \
                 several nodes share) this node is catching up with erasures made while it \
                 was cut off"
            ),
            fails(
                503,
                "storage_unavailable",
                "The disk or the database failed"
            ),
            fails(
                507,
                "storage_full",
                "The disk is full: the store takes no writes"
            )
        ]
    ]
);

/// Readiness
///
/// The store can be read and still accepts writes; with a `warning` while free disk space
/// is below the configured threshold. Not ready: `503 unavailable` while
/// shutting down, when the store cannot be read, or on a database several nodes share while
/// this node catches up after it stopped following the others for longer than they wait
/// for it (its indexes may still hold what was erased meanwhile),
/// `507 storage_full` while the disk is full
/// and `503 storage_unavailable` while it fails writes or the store's database cannot be
/// reached (both with `Retry-After`; reads go on).
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses((status = 200, description = "Ready", body = Probe, example = json!({"status": "ready"})), ReadyErrors),
)]
pub(crate) async fn ready(State(state): State<AppState>) -> Result<Json<Probe>, ApiError> {
    let ready = read(&state, |store| {
        store.check_ready()?;
        // The figures only add a warning: failing to read them does not make it unready.
        Ok(store.disk_space().ok())
    });
    match ready.await {
        Ok(_) if !state.recall().caught_up() => Err(ApiError::Unavailable(
            "this node is catching up with erasures other nodes made while it was cut off \
             from the database"
                .into(),
        )),
        Ok(space) => Ok(Json(Probe {
            status: "ready",
            warning: space.and_then(|space| {
                crate::disk::warning(&space, state.config().disk_warning_free_percent)
            }),
        })),
        // Not a failure of this request: the instance is not ready. The cause is logged.
        Err(ApiError::Internal(detail)) => {
            tracing::error!(%detail, "not ready: the store cannot be read");
            Err(ApiError::Unavailable(
                "the store cannot be read; restart the server".into(),
            ))
        }
        Err(err) => Err(err),
    }
}
