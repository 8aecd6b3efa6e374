//! memlayer's HTTP API (JSON over HTTP/1.1, version 1): the axum router, the request and
//! response types, and the one mapping from library errors to HTTP statuses.
//!
//! The server is deliberately thin: a handler parses and validates the request, calls one
//! library function (today `memlayer-store`, later strategies and erasure), and maps the result.
//! Wire types live here and nowhere else; the on-disk format belongs to `memlayer-store`.
//! It may depend on every library crate below it and must not depend on the binary
//! (`memlayer`), its configuration files or its command line.

#![deny(missing_docs)]

mod api;
mod error;
mod extract;
mod state;
mod wire;

use std::future::Future;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tower_http::trace::TraceLayer;

pub use error::ApiError;
pub use state::{AppState, ServerConfig};

/// The whole API as one router, ready to serve.
pub fn router(state: AppState) -> Router {
    Router::new()
        .merge(api::health::routes())
        .merge(api::sessions::routes())
        .merge(api::recall::routes())
        .merge(api::context::routes())
        .merge(api::settings::routes())
        .fallback(api::not_found)
        .method_not_allowed_fallback(api::method_not_allowed)
        .layer(DefaultBodyLimit::max(state.config().max_body_bytes))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Serves the API on `listener`, with the indexing pipeline running beside it, until
/// `shutdown` resolves; then stops accepting connections, lets in-flight requests finish,
/// stops the pipeline (which saves its snapshot) and commits every queued write.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let store = state.store().clone();
    let (stop_pipeline, pipeline_stopped) = tokio::sync::oneshot::channel::<()>();
    let pipeline = tokio::spawn(state.recall().clone().run_pipeline(async {
        let _ = pipeline_stopped.await;
    }));
    let served = axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await;
    let _ = stop_pipeline.send(());
    let stopped = pipeline.await;
    // Joining the writer thread blocks; keep it off the async workers.
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .map_err(std::io::Error::other)?;
    served?;
    stopped.map_err(std::io::Error::other)
}
