//! Extractors whose rejections answer in the API's own error shape, and the tenant header
//! (the authenticating extractors live in `auth`).

use axum::body::Bytes;
use axum::extract::rejection::{JsonRejection, MissingJsonContentType};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{HeaderMap, header};
use serde::de::DeserializeOwned;

use crate::ApiError;

/// `axum::Json`, rejecting with [`ApiError`], that also reads a whole number written as a
/// float (`475.0`) into an integer field: JSON Schema, and so the OpenAPI document, counts it
/// an integer. A body that parses as it is pays nothing for that: only a body refused as it is
/// is parsed again with its whole floats rewritten, and keeps its first error if that fails
/// too.
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<T, S> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        if !json_content_type(request.headers()) {
            return Err(JsonRejection::from(MissingJsonContentType::default()).into());
        }
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(JsonRejection::from)?;
        parse_body(&bytes).map(Self)
    }
}

/// A JSON body as [`ApiJson`] reads it, once the body is in. Every body of the API is an
/// object: serde would also read a struct from an array of its fields in order (`[7]`), a
/// spelling the document does not have.
pub(crate) fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let parsed = match axum::Json::<T>::from_bytes(bytes) {
        Ok(axum::Json(value)) => value,
        Err(refused @ JsonRejection::JsonDataError(_)) => {
            let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
                return Err(refused.into());
            };
            if !memlayer_memory::whole_floats_to_integers(&mut value) {
                return Err(refused.into());
            }
            serde_json::from_value(value).map_err(|_| ApiError::from(refused))?
        }
        Err(refused) => return Err(refused.into()),
    };
    let first = bytes.iter().find(|byte| !byte.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(ApiError::BadRequest {
            code: "invalid_body",
            message: "the body must be a JSON object".into(),
        });
    }
    Ok(parsed)
}

/// Whether the request says its body is JSON: `application/json` or `application/*+json`,
/// as `axum::Json` decides (which keeps its check private).
fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    essence.split_once('/').is_some_and(|(kind, subtype)| {
        kind.eq_ignore_ascii_case("application")
            && (subtype.eq_ignore_ascii_case("json")
                || subtype
                    .rsplit_once('+')
                    .is_some_and(|(_, suffix)| suffix.eq_ignore_ascii_case("json")))
    })
}

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
