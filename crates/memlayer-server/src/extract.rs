//! Extractors whose rejections answer in the API's own error shape, and the tenant header
//! (the authenticating extractors live in `auth`).

use axum::extract::{FromRequest, FromRequestParts};

use crate::ApiError;

/// `axum::Json`, rejecting with [`ApiError`].
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub(crate) struct ApiJson<T>(pub(crate) T);

/// `axum::extract::Query`, rejecting with [`ApiError`].
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub(crate) struct ApiQuery<T>(pub(crate) T);

/// `axum::extract::Path`, rejecting with [`ApiError`].
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub(crate) struct ApiPath<T>(pub(crate) T);

/// The value of header `name`, if sent; `400 invalid_header` unless it is visible ASCII.
pub(crate) fn header_text<'a>(
    headers: &'a axum::http::HeaderMap,
    name: &str,
) -> Result<Option<&'a str>, ApiError> {
    headers
        .get(name)
        .map(|value| {
            value.to_str().map_err(|_| ApiError::BadRequest {
                code: "invalid_header",
                message: format!("{name} must be visible ASCII"),
            })
        })
        .transpose()
}

/// Header naming the tenant (project) a request acts for. The key decides the tenant; the
/// header may repeat it (see `auth`).
pub(crate) const TENANT_HEADER: &str = "x-memlayer-tenant";

pub(crate) use crate::auth::{Admin, Caller, Operator, Tenant};
