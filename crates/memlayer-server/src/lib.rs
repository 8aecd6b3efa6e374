//! memlayer's HTTP API (JSON over HTTP/1.1, version 1): the axum router, the request and
//! response types, and the one mapping from library errors to HTTP statuses.
//!
//! The server is deliberately thin: a handler parses and validates the request, calls one
//! library function (today `memlayer-store`, later strategies and erasure), and maps the result.
//! Wire types live here and nowhere else; the on-disk format belongs to `memlayer-store`.
//! Operating it: the OpenAPI document generated from the handlers (`/openapi.json`, rendered
//! at `/docs`), the admin page (`/admin`, a client of the `/v1` API), Prometheus metrics
//! (`/metrics`), and the tower layers for request ids, compression, timeouts, load shedding
//! and per-key rate limits.
//! It may depend on every library crate below it and must not depend on the binary
//! (`memlayer`), its configuration files or its command line.

#![deny(missing_docs)]

mod api;
mod auth;
mod error;
mod extract;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod layers;
mod metrics;
mod openapi;
mod rate_limit;
mod state;
#[cfg(test)]
mod tests;
mod wire;

use std::future::Future;

use axum::Router;
use axum::extract::DefaultBodyLimit;

pub use error::ApiError;
pub use openapi::openapi;
pub use rate_limit::RateLimit;
pub use state::{AppState, DEFAULT_RATE_LIMIT, ServerConfig};

/// The whole API as one router, ready to serve: the routes of the route table (`api::ROUTES`,
/// which also makes the OpenAPI document), the API's own answers for unknown paths and
/// methods, and the tower layers (`layers.rs`).
pub fn router(state: AppState) -> Router {
    let doc = utoipa::openapi::OpenApi::default();
    let (limited, _) = api::table_router(doc.clone(), |route| route.shed).split_for_parts();
    let (operations, _) = api::table_router(doc, |route| !route.shed).split_for_parts();
    let router = layers::shed(limited, state.config())
        .merge(operations)
        .fallback(api::not_found)
        .method_not_allowed_fallback(api::method_not_allowed)
        .layer(DefaultBodyLimit::max(state.config().max_body_bytes));
    layers::around(router, &state).with_state(state)
}

/// Serves the API on `listener`, with the indexing pipeline, the erasure maintenance task
/// (pending erasures, retention), the builder of long-term memory graphs and the task ending
/// idle sessions running beside it, until
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
    // Erasures a crash interrupted finish before the first request is served, so nothing
    // acknowledged as erased is ever served again; a failure is retried by the maintenance
    // task.
    if let Err(err) = state.erasure().resume().await {
        tracing::error!(error = %err.for_log(), "could not finish the pending erasures; retrying in the background");
    }
    let (stop_maintenance, maintenance_stopped) = tokio::sync::oneshot::channel::<()>();
    let maintenance = tokio::spawn(state.erasure().clone().run_maintenance(async {
        let _ = maintenance_stopped.await;
    }));
    let (stop_graphs, graphs_stopped) = tokio::sync::oneshot::channel::<()>();
    let memory_graphs = tokio::spawn(state.memories().clone().keep_graphs_built(async {
        let _ = graphs_stopped.await;
    }));
    let (stop_idle, idle_stopped) = tokio::sync::oneshot::channel::<()>();
    let timeout = state.config().session_idle_timeout;
    let idle = (!timeout.is_zero()).then(|| {
        tokio::spawn(memlayer_memory::run_idle_sessions(
            state.contexts().clone(),
            store.clone(),
            timeout,
            async {
                let _ = idle_stopped.await;
            },
        ))
    });
    let served = axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await;
    let _ = stop_maintenance.send(());
    let _ = maintenance.await;
    let _ = stop_graphs.send(());
    let _ = memory_graphs.await;
    let _ = stop_idle.send(());
    if let Some(idle) = idle {
        let _ = idle.await;
    }
    let _ = stop_pipeline.send(());
    let stopped = pipeline.await;
    // Joining the writer thread blocks; keep it off the async workers.
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .map_err(std::io::Error::other)?;
    served?;
    stopped.map_err(std::io::Error::other)
}
