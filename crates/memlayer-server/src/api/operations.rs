//! Operating the server: Prometheus metrics, the OpenAPI document, a page that renders it, and
//! the admin page.

use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse};

use crate::openapi::OPENAPI_JSON;
use crate::openapi::responses::errors;
use crate::{ApiError, AppState};

/// The docs page: one self-contained file (its script and style inline, nothing fetched but
/// `/openapi.json`), because memlayer runs air-gapped.
const DOCS_PAGE: &str = include_str!("docs.html");
/// The admin page, self-contained for the same reason. It is public like the docs page: it
/// holds no data and no secret, and every request it makes carries the key the operator
/// types in, checked by the `/v1` routes as any other client's.
const ADMIN_PAGE: &str = include_str!("admin.html");
/// Only inline script and style, and requests back to this server: neither page can load
/// anything from elsewhere, even if edited to. And no page may frame them: a site that framed
/// the admin page could trick an operator into clicking its purge buttons.
const PAGE_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
    style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

errors!(MetricsErrors = [TIMED]);

/// Prometheus metrics
///
/// Requests by route template, method and status class; latency histograms; requests in
/// flight; store commits, indexed vectors and messages waiting to be embedded. OpenMetrics
/// text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses((
        status = 200,
        description = "The metrics in the OpenMetrics 1.0 text format",
        content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8",
        body = String,
    ), MetricsErrors),
)]
pub(crate) async fn metrics(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    // Reading the pending-embedding count opens a read transaction: keep it off the async
    // workers.
    let text = tokio::task::spawn_blocking(move || crate::metrics::render(&state))
        .await
        .map_err(|err| ApiError::Internal(format!("metrics task failed: {err}")))?
        .map_err(ApiError::Internal)?;
    Ok(([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text))
}

errors!(OpenapiJsonErrors = [TIMED]);

/// This OpenAPI document
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses((
        status = 200,
        description = "The OpenAPI 3.1 document of every route",
        body = Object,
    ), OpenapiJsonErrors),
)]
pub(crate) async fn openapi_json() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        OPENAPI_JSON.as_str(),
    )
}

errors!(DocsErrors = [TIMED]);

/// API documentation page
///
/// A page that renders `/openapi.json`: operations, parameters, bodies and schemas. It loads
/// nothing from elsewhere.
#[utoipa::path(
    get,
    path = "/docs",
    tag = "operations",
    responses((
        status = 200,
        description = "An HTML page",
        content_type = "text/html",
        body = String,
    ), DocsErrors),
)]
pub(crate) async fn docs() -> impl IntoResponse {
    self_contained(DOCS_PAGE)
}

errors!(AdminErrors = [TIMED]);

/// Admin page
///
/// A page for tenant admins: settings and retention, conversation stats, purge, a session
/// browser, a memory browser per user (search, conversation history, forget, erase), a
/// context preview with its token budget, and the erasure receipts. It asks for an API key
/// and calls the `/v1` API with it; it loads nothing from elsewhere.
#[utoipa::path(
    get,
    path = "/admin",
    tag = "operations",
    responses((
        status = 200,
        description = "An HTML page",
        content_type = "text/html",
        body = String,
    ), AdminErrors),
)]
pub(crate) async fn admin() -> impl IntoResponse {
    self_contained(ADMIN_PAGE)
}

/// One of the compiled-in pages, under the policy that keeps it from loading anything or
/// being framed (`X-Frame-Options` says the latter to browsers that predate
/// `frame-ancestors`), and sending no referrer: the page's URL is nobody else's business.
fn self_contained(page: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_SECURITY_POLICY, PAGE_POLICY),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        Html(page),
    )
}
