//! The API's one error type and its JSON shape: `{"error": {"code": "...", "message": "..."}}`.

use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use memlayer_index::IndexError;
use memlayer_memory::MemoryError;
use memlayer_store::{DiskFault, StoreError};
use serde::Serialize;
use utoipa::ToSchema;

/// Seconds an overloaded server asks a client to wait before retrying (`Retry-After`).
pub(crate) const RETRY_AFTER_SECS: u64 = 1;
/// Seconds a client is asked to wait while the disk refuses writes. The store probes the disk
/// every second and resumes as soon as it takes writes again, so a few seconds is enough to
/// see that, without every client retrying at once in a loop.
pub(crate) const STORAGE_RETRY_AFTER_SECS: u64 = 5;

/// Every error `code` the server answers with. The variants with a fixed code take it from
/// `ApiError::status_and_code`; `BadRequest`, `NotFound` and `Invalid` (and
/// `memlayer_agent::AgentError::Invalid`) are given theirs where they are built. The
/// OpenAPI document may name only these (`tests::every_error_answer_is_exact`), and
/// `tests::every_code_the_server_builds_is_listed` finds the codes of those construction
/// sites in the source.
pub(crate) const CODES: &[&str] = &[
    // Fixed by the variant.
    "unauthorized",
    "forbidden",
    "method_not_allowed",
    "not_acceptable",
    "conflict",
    "payload_too_large",
    "unsupported_media_type",
    "rate_limited",
    "unavailable",
    "overloaded",
    "storage_full",
    "storage_unavailable",
    "not_implemented",
    "timeout",
    "model_not_configured",
    "upstream_timeout",
    "upstream_failed",
    "internal",
    // `400`.
    "malformed_json",
    "invalid_body",
    "invalid_query",
    "invalid_path",
    "invalid_header",
    "missing_header",
    "invalid_mcp_message",
    // `404`.
    "route_not_found",
    "tenant_not_found",
    "user_not_found",
    "session_not_found",
    "message_not_found",
    "memory_not_found",
    "session_memory_not_found",
    "episode_not_found",
    "key_not_found",
    "erasure_not_found",
    // `422`.
    "invalid_id",
    "invalid_value",
    "invalid_setting",
    "invalid_memory_config",
    "unknown_memory_type",
    "invalid_messages",
    "unknown_tool",
    "invalid_arguments",
];

/// The body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

/// What went wrong.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// Stable and machine-readable, e.g. `session_not_found`, `invalid_value`, `overloaded`.
    code: &'static str,
    /// For people; `5xx` messages are generic and the details go to the server log.
    message: String,
    /// For an agent run that failed upstream (`upstream_failed`, `upstream_timeout`): the
    /// run recorded as `FAILED`, with the reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<String>,
    /// For an agent run that failed upstream: its session, where the user's message is
    /// stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    /// For an erasure the disk interrupted (`storage_full`, `storage_unavailable`) after it
    /// was recorded, or that other nodes sharing the database have not applied yet: it
    /// finishes by itself once writes resume (or the nodes caught up), and
    /// `GET /v1/admin/erasures/{erasure_id}` gives its receipt then.
    #[serde(skip_serializing_if = "Option::is_none")]
    erasure_id: Option<u64>,
}

/// An error answer: an HTTP status, a stable machine-readable code and a message for people.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// `400`: the request could not be parsed (malformed JSON, wrong field type, unknown field,
    /// bad query string).
    #[error("{message}")]
    BadRequest {
        /// Stable code, e.g. `malformed_json`.
        code: &'static str,
        /// What is wrong.
        message: String,
    },
    /// `401` with `WWW-Authenticate: Bearer`: no API key, or one that is malformed, unknown,
    /// revoked or expired.
    #[error("{0}")]
    Unauthorized(String),
    /// `403`: the key is valid but its role may not use this route. Never the answer for an
    /// object of another tenant or user: that is `404`, so that existence does not leak.
    #[error("{0}")]
    Forbidden(String),
    /// `404`: no such resource in this tenant.
    #[error("{message}")]
    NotFound {
        /// Stable code, e.g. `session_not_found`.
        code: &'static str,
        /// What was not found.
        message: String,
    },
    /// `405`: the path exists but not with this method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// `406`: the request's `Accept` header rules out every answer the route gives.
    #[error("{0}")]
    NotAcceptable(String),
    /// `409`: the request contradicts stored state.
    #[error("{0}")]
    Conflict(String),
    /// `413`: the body is larger than the configured limit.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// `415`: the body is not `application/json`.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// `422`: the request parsed but a value is invalid.
    #[error("{message}")]
    Invalid {
        /// Stable code, e.g. `invalid_id`.
        code: &'static str,
        /// What is invalid.
        message: String,
    },
    /// `429` with `Retry-After`: the API key made more requests than its rate limit allows.
    #[error("this API key exceeded its rate limit; retry after {retry_after:?}")]
    RateLimited {
        /// How long until the key's next request is admitted.
        retry_after: Duration,
    },
    /// `503`: the server is shutting down.
    #[error("{0}")]
    Unavailable(String),
    /// `507` with `Retry-After`: the disk under the store is full. The store refuses writes
    /// until space is freed, then resumes by itself; reads go on. A write answered so may
    /// have been stored if the disk filled during its commit, so appends are retried with
    /// their idempotency key. The detail is logged, never sent.
    #[error(
        "the server's disk is full: writes are refused until space is freed, then resume by \
         themselves, and reads go on; retry later (appends with the same idempotency key)"
    )]
    StorageFull {
        /// What the store said, for the log.
        detail: String,
        /// The erasure this interrupted after recording it, which finishes by itself.
        erasure_id: Option<u64>,
    },
    /// `503` with `Retry-After`: the disk under the store failed (an I/O error). The store
    /// resumes by itself once the device takes writes again; reads of what is stored go on
    /// where the device still reads. The detail is logged, never sent.
    #[error(
        "the server's storage (its disk or its database) failed or is busy: writes resume by \
         themselves once it works again; retry later (appends with the same idempotency key)"
    )]
    StorageUnavailable {
        /// What the store said, for the log.
        detail: String,
        /// The erasure this interrupted after recording it, which finishes by itself.
        erasure_id: Option<u64>,
    },
    /// `503 storage_unavailable` with `Retry-After`: an erasure is done on this node and in
    /// the database, but other live nodes sharing the database have not applied it yet (they
    /// lag behind the shared outbox). It stays recorded and finishes by itself once they
    /// have, or once they stop being live.
    #[error(
        "{nodes} other node(s) sharing the database have not applied this erasure yet; \
         retry later"
    )]
    NodesBehind {
        /// How many live nodes were behind.
        nodes: u64,
        /// The erasure, which finishes by itself.
        erasure_id: Option<u64>,
    },
    /// `501`: the store this server runs on cannot do this (a file backup of a store in
    /// PostgreSQL).
    #[error("{0}")]
    NotImplemented(String),
    /// `503` with `Retry-After`: as many requests as the server admits are in flight, or as
    /// many agent runs are going on. The request was refused at once, never queued.
    #[error("the server is handling as many requests as it admits; retry in a moment")]
    Overloaded,
    /// `503`: the request took longer than the server's limit.
    ///
    /// Not `408`, which says the client was too slow to send its request and which clients
    /// retry on their own; here the server was too slow, which is what `503` says. A write
    /// the request started may still commit, so appends are retried with their idempotency
    /// key.
    #[error(
        "the request did not finish within {0:?}; a write it started may still be stored \
         (retry appends with the same idempotency key)"
    )]
    Timeout(Duration),
    /// `503`: agent runs need a chat model and the operator configured none.
    #[error("no chat model is configured for agent runs; set the [agent_model] table")]
    ModelNotConfigured,
    /// `502` (`upstream_failed`), or `504` (`upstream_timeout`) when the model did not answer
    /// in time: an agent run's model call failed. The run is recorded as `FAILED` with the
    /// reason, which the body does not repeat (it is a `5xx`); the user's message is stored.
    #[error("the model failed; the run is recorded as failed with the reason")]
    Upstream {
        /// Whether the model timed out.
        timeout: bool,
        /// The failed run.
        run_id: String,
        /// Its session.
        session_id: String,
    },
    /// `500`: a failure the client cannot fix. The details are logged, never sent, so they
    /// must hold no value a client chose or stored (the library errors' `for_log`).
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub(crate) fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            Self::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Self::NotFound { code, .. } => (StatusCode::NOT_FOUND, code),
            Self::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Self::NotAcceptable(_) => (StatusCode::NOT_ACCEPTABLE, "not_acceptable"),
            Self::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            Self::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Self::UnsupportedMediaType(_) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            Self::Invalid { code, .. } => (StatusCode::UNPROCESSABLE_ENTITY, code),
            Self::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            Self::Overloaded => (StatusCode::SERVICE_UNAVAILABLE, "overloaded"),
            Self::StorageFull { .. } => (StatusCode::INSUFFICIENT_STORAGE, "storage_full"),
            Self::StorageUnavailable { .. } | Self::NodesBehind { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable")
            }
            Self::NotImplemented(_) => (StatusCode::NOT_IMPLEMENTED, "not_implemented"),
            Self::Timeout(_) => (StatusCode::SERVICE_UNAVAILABLE, "timeout"),
            Self::ModelNotConfigured => (StatusCode::SERVICE_UNAVAILABLE, "model_not_configured"),
            Self::Upstream { timeout: true, .. } => {
                (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout")
            }
            Self::Upstream { .. } => (StatusCode::BAD_GATEWAY, "upstream_failed"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl ApiError {
    /// The error's body, as every error answer (and a failed run's last streamed event, and a
    /// failed MCP tool call's result) carries it. Internal details are logged here and never
    /// sent.
    pub(crate) fn body(&self) -> ErrorBody {
        let (_, code) = self.status_and_code();
        let message = match self {
            Self::Internal(detail) => {
                tracing::error!(%detail, "request failed");
                "internal server error; the details are in the server log".to_owned()
            }
            // While the disk is full every write is refused, and a line at the default level
            // for each would flood the log (of which the disk may well be the same).
            Self::StorageFull { detail, .. } => {
                tracing::debug!(%detail, "refused: the disk is full");
                self.to_string()
            }
            Self::StorageUnavailable { detail, .. } => {
                tracing::warn!(%detail, "request failed: the storage failed");
                self.to_string()
            }
            other => other.to_string(),
        };
        let (run_id, session_id) = match self {
            Self::Upstream {
                run_id, session_id, ..
            } => (Some(run_id.clone()), Some(session_id.clone())),
            _ => (None, None),
        };
        let erasure_id = match self {
            Self::StorageFull { erasure_id, .. }
            | Self::StorageUnavailable { erasure_id, .. }
            | Self::NodesBehind { erasure_id, .. } => *erasure_id,
            _ => None,
        };
        let message = match erasure_id {
            Some(id) => format!(
                "{message}. The erasure is recorded and finishes by itself \
                 (GET /v1/admin/erasures/{id})"
            ),
            None => message,
        };
        ErrorBody {
            error: ErrorDetail {
                code,
                message,
                run_id,
                session_id,
                erasure_id,
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, _) = self.status_and_code();
        let body = self.body();
        let mut response = (status, Json(body)).into_response();
        let retry_after = match &self {
            Self::Overloaded => Some(RETRY_AFTER_SECS),
            Self::StorageFull { .. }
            | Self::StorageUnavailable { .. }
            | Self::NodesBehind { .. } => Some(STORAGE_RETRY_AFTER_SECS),
            Self::RateLimited { retry_after } => {
                Some(crate::rate_limit::retry_after_secs(*retry_after))
            }
            _ => None,
        };
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Self::Unauthorized(_) = &self {
            // RFC 6750, section 3: how to authenticate, and (with a key) that it was refused.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(crate::auth::WWW_AUTHENTICATE),
            );
        }
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            // The unread rest of the body is still on the connection; hyper will close it, and
            // saying so lets the client retry on a fresh connection (RFC 9112, 9.6) instead of
            // losing its next request on this one.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::InvalidId { .. } => Self::invalid("invalid_id", err.to_string()),
            StoreError::InvalidInput { .. } => Self::invalid("invalid_value", err.to_string()),
            StoreError::SessionNotFound { .. } => Self::NotFound {
                code: "session_not_found",
                message: err.to_string(),
            },
            StoreError::MessageNotFound { .. } => Self::NotFound {
                code: "message_not_found",
                message: err.to_string(),
            },
            StoreError::MemoryNotFound { .. } => Self::NotFound {
                code: "memory_not_found",
                message: err.to_string(),
            },
            StoreError::Conflict(message) => Self::Conflict(message),
            // Messages kept being erased while a context or a merge was computed from them, or
            // a memory kept changing while a remember updated it.
            StoreError::SessionChanged { .. } | StoreError::MemoryChanged { .. } => {
                Self::Conflict(format!("{err}; retry the request"))
            }
            StoreError::Closed => Self::Unavailable("the server is shutting down".into()),
            StoreError::Unsupported(what) => {
                Self::NotImplemented(format!("not possible on this server's store: {what}"))
            }
            // The database failed or cannot be reached: like a failing disk, it passes. So does
            // a compaction postponed by reads still running (an erasure then finishes by
            // itself).
            StoreError::Backend { .. } | StoreError::Busy(_) => Self::StorageUnavailable {
                detail: err.for_log(),
                erasure_id: None,
            },
            other => match other.disk_fault() {
                Some(DiskFault::Full) => Self::StorageFull {
                    detail: other.for_log(),
                    erasure_id: None,
                },
                Some(_) => Self::StorageUnavailable {
                    detail: other.for_log(),
                    erasure_id: None,
                },
                None => Self::Internal(other.for_log()),
            },
        }
    }
}

impl From<IndexError> for ApiError {
    fn from(err: IndexError) -> Self {
        match err {
            IndexError::Store(store) => store.into(),
            IndexError::FollowersBehind { nodes } => Self::NodesBehind {
                nodes,
                erasure_id: None,
            },
            IndexError::DimensionMismatch { .. } | IndexError::InvalidVector(_) => {
                Self::invalid("invalid_value", err.to_string())
            }
            other => Self::Internal(other.for_log()),
        }
    }
}

/// Maps an extractor rejection: size and media type keep their statuses, the rest is `400`.
fn rejection(status: StatusCode, code: &'static str, message: String) -> ApiError {
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(message),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType(message),
        _ => ApiError::BadRequest { code, message },
    }
}

impl From<JsonRejection> for ApiError {
    fn from(err: JsonRejection) -> Self {
        let code = match &err {
            JsonRejection::JsonSyntaxError(_) => "malformed_json",
            _ => "invalid_body",
        };
        rejection(err.status(), code, err.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(err: QueryRejection) -> Self {
        rejection(err.status(), "invalid_query", err.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(err: PathRejection) -> Self {
        rejection(err.status(), "invalid_path", err.body_text())
    }
}

impl From<MemoryError> for ApiError {
    fn from(err: MemoryError) -> Self {
        match err {
            MemoryError::Store(store) => store.into(),
            MemoryError::Index(index) => index.into(),
            MemoryError::Embedding(_) | MemoryError::NoVector => {
                Self::Unavailable(format!("the embedding model is not available: {err}"))
            }
            MemoryError::LoosensPolicy { .. } => Self::Conflict(err.to_string()),
            MemoryError::InvalidSetting { .. } | MemoryError::UnknownEncoding(_) => {
                Self::invalid("invalid_setting", err.to_string())
            }
            MemoryError::InvalidMemoryConfig { .. } => {
                Self::invalid("invalid_memory_config", err.to_string())
            }
            MemoryError::UnknownMemoryType { .. } => {
                Self::invalid("unknown_memory_type", err.to_string())
            }
            other => Self::Internal(other.for_log()),
        }
    }
}

impl From<memlayer_erasure::ErasureError> for ApiError {
    fn from(err: memlayer_erasure::ErasureError) -> Self {
        use memlayer_erasure::ErasureError;
        match err {
            ErasureError::Store(store) => store.into(),
            ErasureError::Index(index) => index.into(),
            ErasureError::Memory(memory) => memory.into(),
            ErasureError::Invalid { .. } => Self::invalid("invalid_value", err.to_string()),
            // The job stays pending; a client the disk refused learns that it finishes.
            ErasureError::Pending { id, source } => match Self::from(*source) {
                Self::StorageFull { detail, .. } => Self::StorageFull {
                    detail,
                    erasure_id: Some(id),
                },
                Self::StorageUnavailable { detail, .. } => Self::StorageUnavailable {
                    detail,
                    erasure_id: Some(id),
                },
                Self::NodesBehind { nodes, .. } => Self::NodesBehind {
                    nodes,
                    erasure_id: Some(id),
                },
                other => other,
            },
            other => Self::Internal(other.for_log()),
        }
    }
}

impl From<memlayer_agent::AgentError> for ApiError {
    fn from(err: memlayer_agent::AgentError) -> Self {
        use memlayer_agent::AgentError;
        match err {
            AgentError::Invalid { code, message } => Self::Invalid { code, message },
            AgentError::MemoryNotFound { .. } => Self::NotFound {
                code: "memory_not_found",
                message: err.to_string(),
            },
            AgentError::ModelNotConfigured => Self::ModelNotConfigured,
            AgentError::Overloaded { .. } => Self::Overloaded,
            // The run logged the failure when it recorded it.
            AgentError::Upstream {
                run_id,
                session_id,
                source,
            } => Self::Upstream {
                timeout: matches!(*source, memlayer_llm::LlmError::Timeout { .. }),
                run_id,
                session_id,
            },
            AgentError::Store(store) => store.into(),
            AgentError::Memory(memory) => memory.into(),
            AgentError::Erasure(erasure) => erasure.into(),
            other => Self::Internal(other.for_log()),
        }
    }
}
