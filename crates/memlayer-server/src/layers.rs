//! The tower layers around the routes, and how their refusals answer in the API's error shape.
//!
//! Outermost first, every route gets: `X-Content-Type-Options: nosniff` on its answer (a
//! browser must never guess that a JSON body or an error is HTML), a request id
//! (`x-request-id`, generated when the client sent none, echoed in the response and recorded
//! in the request's trace span), the trace span, gzip compression for clients that accept it,
//! the metrics, and the request timeout.
//! The API's routes also get load shedding: at most `max_in_flight` of them run at once and
//! one more is refused at once with `503` and `Retry-After`, never queued.

use std::time::Duration;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, header};
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::load_shed::LoadShedLayer;
use tower::load_shed::error::Overloaded;
use tower::timeout::error::Elapsed;
use tower_http::compression::CompressionLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;

use crate::{ApiError, AppState, ServerConfig};

/// Header carrying the request id.
pub(crate) const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Load shedding for `router`'s routes: at most `max_in_flight` requests through all of them
/// together (one semaphore, however many routes), and a refusal rather than a queue.
pub(crate) fn shed(router: Router<AppState>, config: &ServerConfig) -> Router<AppState> {
    let timeout = config.request_timeout;
    router.layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(
                move |err: tower::BoxError| async move { refusal(err, timeout) },
            ))
            // Answers `Overloaded` instead of waiting whenever the limit below is not ready.
            .layer(LoadShedLayer::new())
            // `Global`: axum applies a layer to each route separately, and a plain
            // `ConcurrencyLimitLayer` would give every route a limit of its own.
            .layer(GlobalConcurrencyLimitLayer::new(config.max_in_flight)),
    )
}

/// The layers every route gets, around whatever `router` already has.
pub(crate) fn around(router: Router<AppState>, state: &AppState) -> Router<AppState> {
    let timeout = state.config().request_timeout;
    router.layer(
        ServiceBuilder::new()
            .layer(SetResponseHeaderLayer::overriding(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ))
            .layer(SetRequestIdLayer::new(REQUEST_ID_HEADER, MakeRequestUuid))
            .layer(TraceLayer::new_for_http().make_span_with(span))
            .layer(PropagateRequestIdLayer::new(REQUEST_ID_HEADER))
            .layer(CompressionLayer::new())
            .layer(axum::middleware::from_fn_with_state(
                state.metrics().clone(),
                crate::metrics::track,
            ))
            .layer(HandleErrorLayer::new(
                move |err: tower::BoxError| async move { refusal(err, timeout) },
            ))
            .layer(tower::timeout::TimeoutLayer::new(timeout)),
    )
}

/// The trace span of a request, with its id so that every log line of the request carries it
/// (tower-http's own lines about the request and its answer or failure say no more than
/// this span and the status).
///
/// The route template and the method from the metrics' fixed sets, never the URI: its path
/// holds ids clients chose (a user erased by `DELETE /v1/users/{user_id}` would be named in
/// the log that records the erasure) and its query search text. The layers run inside the
/// router, after it matched, so the template is known here.
fn span(request: &Request) -> tracing::Span {
    let id = request
        .headers()
        .get(&REQUEST_ID_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    tracing::info_span!(
        "request",
        method = crate::metrics::method_label(request.method()),
        route = crate::metrics::route_label(request),
        request_id = %id,
        // The API key's prefix, once `auth` has checked it.
        key = tracing::field::Empty,
    )
}

/// The answer for a request a layer refused.
fn refusal(err: tower::BoxError, timeout: Duration) -> ApiError {
    if err.is::<Overloaded>() {
        ApiError::Overloaded
    } else if err.is::<Elapsed>() {
        ApiError::Timeout(timeout)
    } else {
        ApiError::Internal(format!("middleware failed: {err}"))
    }
}
