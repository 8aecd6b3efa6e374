//! API keys of a tenant, for its `tenant_admin` keys: create one (its secret is in the answer
//! and nowhere else, ever), list them without secrets, revoke one.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use memlayer_store::{ApiKey, KeyRole, NewKey, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::read;
use crate::extract::{Admin, ApiJson, ApiPath};
use crate::openapi::responses::errors;
use crate::wire::Rfc3339;
use crate::{ApiError, AppState};

/// Longest expiry accepted: a hundred years.
const MAX_EXPIRY_DAYS: u32 = 36_500;
const MICROS_PER_DAY: u64 = 86_400 * 1_000_000;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = KeyRole)]
pub(crate) enum RoleBody {
    /// Everything in the tenant: settings, stats, purge, retention, erasure receipts,
    /// erasing users, keys.
    TenantAdmin,
    /// An agent backend: sessions, messages, runs, context, recall, search, clear, reading
    /// settings, erasing messages and sessions.
    Service,
    /// One end user (`user_id`): that user's sessions and recall only.
    User,
    /// The operator of the whole store, of no tenant: the backup and nothing of any tenant.
    /// Created only with `memlayer keys create --role operator` on the data directory; this
    /// API refuses to create one (`403`).
    Operator,
}

impl From<KeyRole> for RoleBody {
    fn from(role: KeyRole) -> Self {
        match role {
            KeyRole::TenantAdmin => Self::TenantAdmin,
            KeyRole::Service => Self::Service,
            KeyRole::User => Self::User,
            KeyRole::Operator => Self::Operator,
        }
    }
}

impl From<RoleBody> for KeyRole {
    fn from(role: RoleBody) -> Self {
        match role {
            RoleBody::TenantAdmin => Self::TenantAdmin,
            RoleBody::Service => Self::Service,
            RoleBody::User => Self::User,
            RoleBody::Operator => Self::Operator,
        }
    }
}

/// Whether a key works now.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = KeyState)]
pub(crate) enum KeyStateBody {
    Active,
    Revoked,
    Expired,
}

/// A key as listed: never its secret.
#[derive(Serialize, ToSchema)]
#[schema(as = ApiKey)]
pub(crate) struct KeyBody {
    /// Names the key (`mlk_<prefix>_…`); `config` is the configured admin key.
    prefix: String,
    tenant: String,
    role: RoleBody,
    /// The user a `user` key acts for.
    #[serde(skip_serializing_if = "Option::is_none")]
    user_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    state: KeyStateBody,
    created_at: Rfc3339,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<Rfc3339>,
    #[serde(skip_serializing_if = "Option::is_none")]
    revoked_at: Option<Rfc3339>,
}

impl KeyBody {
    fn new(key: ApiKey, now: Timestamp) -> Self {
        let state = if key.revoked_at.is_some() {
            KeyStateBody::Revoked
        } else if key.is_active(now) {
            KeyStateBody::Active
        } else {
            KeyStateBody::Expired
        };
        Self {
            state,
            prefix: key.prefix,
            tenant: key.tenant,
            role: key.role.into(),
            user_id: key.user_id,
            name: key.name,
            created_at: Rfc3339(key.created_at),
            expires_at: key.expires_at.map(Rfc3339),
            revoked_at: key.revoked_at.map(Rfc3339),
        }
    }
}

/// A key to create in the caller's tenant.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateKeyRequest {
    role: RoleBody,
    /// Required for a `user` key (the one user it acts for), refused for the others.
    user_id: Option<String>,
    /// A label for people, 1–128 characters.
    name: Option<String>,
    /// Days until it stops working; never when absent.
    #[schema(minimum = 1, maximum = 36_500)]
    expires_in_days: Option<u32>,
}

impl CreateKeyRequest {
    /// When a key created at `now` expires; `expires_in_days` out of range is refused.
    pub(crate) fn expires_at(&self, now: Timestamp) -> Result<Option<Timestamp>, ApiError> {
        match self.expires_in_days {
            Some(days @ 1..=MAX_EXPIRY_DAYS) => Ok(Some(Timestamp::from_micros(
                now.as_micros() + u64::from(days) * MICROS_PER_DAY,
            ))),
            Some(_) => Err(ApiError::invalid(
                "invalid_value",
                format!("expires_in_days must be between 1 and {MAX_EXPIRY_DAYS}"),
            )),
            None => Ok(None),
        }
    }
}

/// A new key with its secret: shown this once, stored only as a hash.
#[derive(Serialize, ToSchema)]
pub(crate) struct CreatedKey {
    /// The whole key, `mlk_<prefix>_<secret>`: send it as `Authorization: Bearer <key>`.
    /// It cannot be shown again.
    key: String,
    #[serde(flatten)]
    info: KeyBody,
}

errors!(
    CreateKeyErrors = [
        KEYED,
        JSON_BODY,
        VALUE,
        WRITES,
        &[
            fails(
                403,
                "forbidden",
                "Role `operator`: created only with `memlayer keys create` on the data directory"
            ),
            fails(409, "conflict", "No free key prefix; retry")
        ]
    ]
);

/// Create an API key
///
/// In the caller's tenant. The answer holds the key's secret, which memlayer does not keep
/// (it stores a SHA-256 hash): store it now. An `operator` key belongs to no tenant and is
/// created only on the data directory (`memlayer keys create --role operator`), so that no
/// tenant's key can make itself one.
#[utoipa::path(
    post,
    path = "/v1/keys",
    tag = "keys",
    request_body = CreateKeyRequest,
    responses(
        (status = 201, description = "Created; `key` is shown only in this answer", body = CreatedKey),
        CreateKeyErrors,
    ),
    security(("bearerAuth" = ["tenant_admin"])),
)]
pub(crate) async fn create_key(
    State(state): State<AppState>,
    Admin(tenant): Admin,
    ApiJson(request): ApiJson<CreateKeyRequest>,
) -> Result<(StatusCode, Json<CreatedKey>), ApiError> {
    if request.role == RoleBody::Operator {
        return Err(ApiError::Forbidden(
            "operator keys are created only with `memlayer keys create --role operator` on the \
             data directory"
                .into(),
        ));
    }
    let now = Timestamp::now();
    let expires_at = request.expires_at(now)?;
    let issued = state
        .store()
        .keys()
        .create_key(NewKey {
            tenant,
            role: request.role.into(),
            user_id: request.user_id,
            name: request.name,
            expires_at,
        })
        .await?;
    tracing::info!(key = %issued.key.prefix, role = %issued.key.role, "API key created");
    Ok((
        StatusCode::CREATED,
        Json(CreatedKey {
            key: issued.secret,
            info: KeyBody::new(issued.key, now),
        }),
    ))
}

/// The tenant's keys.
#[derive(Serialize, ToSchema)]
pub(crate) struct KeyList {
    /// Oldest first, revoked and expired ones included; never a secret.
    keys: Vec<KeyBody>,
}

errors!(ListKeysErrors = [KEYED]);

/// List API keys
#[utoipa::path(
    get,
    path = "/v1/keys",
    tag = "keys",
    responses((status = 200, description = "The tenant's keys, without secrets", body = KeyList), ListKeysErrors),
    security(("bearerAuth" = ["tenant_admin"])),
)]
pub(crate) async fn list_keys(
    State(state): State<AppState>,
    Admin(tenant): Admin,
) -> Result<Json<KeyList>, ApiError> {
    let keys = read(&state, move |store| store.keys().list_keys(Some(&tenant))).await?;
    let now = Timestamp::now();
    Ok(Json(KeyList {
        keys: keys.into_iter().map(|key| KeyBody::new(key, now)).collect(),
    }))
}

errors!(
    RevokeKeyErrors = [
        KEYED,
        PATH,
        WRITES,
        &[fails(404, "key_not_found", "No such key in the tenant")]
    ]
);

/// Revoke an API key
///
/// It stops working at once, for good (revoking it again changes nothing). The caller may
/// revoke its own key.
#[utoipa::path(
    delete,
    path = "/v1/keys/{prefix}",
    tag = "keys",
    params(("prefix" = String, Path, description = "The key's prefix", min_length = 1)),
    responses(
        (status = 200, description = "Revoked", body = KeyBody),
        RevokeKeyErrors,
    ),
    security(("bearerAuth" = ["tenant_admin"])),
)]
pub(crate) async fn revoke_key(
    State(state): State<AppState>,
    Admin(tenant): Admin,
    ApiPath(prefix): ApiPath<String>,
) -> Result<Json<KeyBody>, ApiError> {
    match state
        .store()
        .keys()
        .revoke_key(Some(&tenant), &prefix)
        .await?
    {
        Some(key) => {
            tracing::info!(key = %key.prefix, "API key revoked");
            Ok(Json(KeyBody::new(key, Timestamp::now())))
        }
        None => Err(ApiError::NotFound {
            code: "key_not_found",
            message: format!("no key {prefix:?} in this tenant"),
        }),
    }
}
