//! Route handlers, one module per resource.

pub(crate) mod context;
pub(crate) mod health;
pub(crate) mod recall;
pub(crate) mod sessions;
pub(crate) mod settings;

use memlayer_store::Store;

use crate::{ApiError, AppState};

/// Answer for paths no route matches.
pub(crate) async fn not_found() -> ApiError {
    ApiError::NotFound {
        code: "route_not_found",
        message: "no such route; the API lives under /v1".into(),
    }
}

/// Answer for a known path with the wrong method.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// Runs a store read on the blocking pool: reads are short but may touch the disk, and the
/// async workers must stay free for accepting and parsing requests.
pub(crate) async fn read<T, F>(state: &AppState, read: F) -> Result<T, ApiError>
where
    F: FnOnce(&Store) -> memlayer_store::Result<T> + Send + 'static,
    T: Send + 'static,
{
    let store = state.store().clone();
    tokio::task::spawn_blocking(move || read(&store))
        .await
        .map_err(|err| ApiError::Internal(format!("read task failed: {err}")))?
        .map_err(ApiError::from)
}
