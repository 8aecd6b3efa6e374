//! Extractors whose rejections answer in the API's own error shape, and the tenant header.

use axum::extract::{FromRequest, FromRequestParts};
use axum::http::request::Parts;
use memlayer_store::validate_id;

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

/// Header naming the tenant (project) a request acts for.
pub(crate) const TENANT_HEADER: &str = "x-memlayer-tenant";
/// Tenant used when the header is absent.
pub(crate) const DEFAULT_TENANT: &str = "default";

/// The tenant every object access of the request is scoped to.
pub(crate) struct Tenant(pub(crate) String);

impl<S: Send + Sync> FromRequestParts<S> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let Some(value) = parts.headers.get(TENANT_HEADER) else {
            return Ok(Self(DEFAULT_TENANT.to_owned()));
        };
        let tenant = value.to_str().map_err(|_| ApiError::BadRequest {
            code: "invalid_header",
            message: format!("{TENANT_HEADER} must be visible ASCII"),
        })?;
        validate_id("tenant", tenant)?;
        Ok(Self(tenant.to_owned()))
    }
}
