//! memlayer's HTTP API (JSON over HTTP/1.1, version 1): the axum router, the request and
//! response types, and the one mapping from library errors to HTTP statuses.
//!
//! The server is deliberately thin: a handler parses and validates the request, calls one
//! library function (the store's handles, recall, the context builder, long-term memory,
//! the erasure coordinator, the agent), and maps the result.
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
mod disk;
mod error;
mod extract;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod layers;
mod metrics;
mod openapi;
mod rate_limit;
mod recovery;
mod state;
#[cfg(test)]
mod tests;
mod wire;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use memlayer_store::StoreError;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

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
/// (pending erasures, retention), the builder of long-term memory graphs, the task ending
/// idle sessions, the recovery from disk faults (`recovery.rs`) and the warning about low
/// disk space (`disk.rs`) running beside it, until
/// `shutdown` resolves; then stops accepting connections, lets in-flight requests finish,
/// stops the pipeline (which saves its snapshot) and commits every queued write.
///
/// Fails, after the same graceful stop, when the store could not be reopened after a disk
/// fault: the process should then exit non-zero, so that a supervisor restarts it.
///
/// Connections are HTTP/1.1, at most `max_connections` open at once, each cut off when its
/// client takes longer than `header_read_timeout` to send a request's head — also while a
/// kept-alive connection waits for its next request (see `accept`).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let store = state.store().clone();
    // First, so that a disk fault met by the erasures resumed below is recovered from too.
    let (stop_recovery, recovery_stopped) = tokio::sync::oneshot::channel::<()>();
    let (recovery_failed, failure) = tokio::sync::oneshot::channel::<StoreError>();
    let recovery = tokio::spawn({
        let store = store.clone();
        async move {
            let stopped = async {
                let _ = recovery_stopped.await;
            };
            if let Err(err) = recovery::keep_store_writable(store, stopped).await {
                let _ = recovery_failed.send(err);
            }
        }
    });
    let fatal = Arc::new(std::sync::OnceLock::new());
    let shutdown = {
        let fatal = Arc::clone(&fatal);
        async move {
            tokio::select! {
                () = shutdown => {}
                Ok(err) = failure => { let _ = fatal.set(err); }
            }
        }
    };
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
    let (stop_disk, disk_stopped) = tokio::sync::oneshot::channel::<()>();
    let disk = tokio::spawn(disk::watch_disk_space(
        store.clone(),
        state.config().disk_warning_free_percent,
        async {
            let _ = disk_stopped.await;
        },
    ));
    let config = state.config().clone();
    // The first count builds the encoding's tables (90–200 ms); small appends count on the
    // async workers, which must not stall on that.
    let encoding = config.token_encoding;
    let _ = tokio::task::spawn_blocking(move || encoding.count("")).await;
    let served = accept(listener, router(state), &config, shutdown).await;
    let _ = stop_disk.send(());
    let _ = disk.await;
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
    let _ = stop_recovery.send(());
    let _ = recovery.await;
    // Joining the writer thread blocks; keep it off the async workers.
    tokio::task::spawn_blocking(move || store.shutdown())
        .await
        .map_err(std::io::Error::other)?;
    if let Some(err) = fatal.get() {
        return Err(std::io::Error::other(format!(
            "the store could not be reopened after a disk fault: {}",
            err.for_log()
        )));
    }
    served?;
    stopped.map_err(std::io::Error::other)
}

/// Serves `router` on the connections of `listener` until `shutdown` resolves, then stops
/// accepting and waits until every connection has finished its request in flight (idle ones
/// are closed at once).
///
/// Written out rather than `axum::serve`, which has neither a header read timeout nor a limit
/// on connections: a client that opens connections and sends a byte now and then (slowloris)
/// held each one, and a task and its buffers, for ever. hyper's header read timeout runs
/// whenever a connection waits for a request's head — the first one, and the next one on a
/// kept-alive connection — so it is the idle timeout too. At the cap the loop stops accepting
/// (connections wait in the listen backlog) until one closes. Only HTTP/1.1 is spoken, as
/// before: hyper-util's protocol-detecting builder would wait for the first bytes with no
/// timeout at all.
async fn accept(
    listener: TcpListener,
    router: Router,
    config: &ServerConfig,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout);
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let connections = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot.map_err(std::io::Error::other)?,
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    accept_failed(err).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = connections.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            // Clients that leave or are cut off by the header timeout end here too; hyper's
            // errors name no request content.
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "connection closed with an error");
            }
            drop(slot);
        });
    }
    // New connections are refused from here on.
    drop(listener);
    connections.shutdown().await;
    Ok(())
}

/// After a failed `accept`: a connection that failed before it was accepted is only skipped;
/// anything else (out of file descriptors, most likely) is logged and waited out for a
/// second, since retrying at once would spin.
async fn accept_failed(err: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %err, "accepting a connection failed; retrying in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}
