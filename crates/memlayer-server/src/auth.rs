//! Who is calling, and what they may touch: API keys (`Authorization: Bearer <key>`, checked
//! against the store's hashes), the tenant a key acts for, and the extractors that declare
//! each route's access.
//!
//! A handler states its access by the extractor it takes:
//!
//! - [`Tenant`]: `tenant_admin` and `service` keys, the tenant's agent backends. User-scoped
//!   keys are refused (`403`), so a route is closed to them unless it checks ownership.
//! - [`Admin`]: `tenant_admin` keys only (`403` for the others).
//! - [`Caller`]: every role. For a user-scoped key it checks the path's `{user_id}`: another
//!   user answers `404`, exactly as if they had nothing. Sessions are checked by the store,
//!   in the transaction that reads or writes them, through the [`Access`] the handler passes
//!   ([`Principal::access`]): a check made before the body arrived let a session created by
//!   another user meanwhile slip through. A handler checks what the body and the query name
//!   through [`Principal`]'s methods.
//! - [`Operator`]: `operator` keys only, for the whole-store routes (the backup). An operator
//!   key belongs to no tenant, and the three extractors above refuse it (`403`): whatever a
//!   tenant's key may reach, it may not, so a new tenant route is closed to it by default.
//!
//! Every failure to authenticate (no key, a malformed, unknown, revoked or expired one) is
//! `401 unauthorized` with `WWW-Authenticate: Bearer`. A valid key over its rate limit
//! (`ServerConfig::rate_limit`) is `429 rate_limited` with `Retry-After`. The tenant comes from the key; the
//! `x-memlayer-tenant` header may repeat it, and naming any other tenant answers `404`, so a
//! key learns nothing about other tenants. **Invariant:** every object access is checked for
//! tenant and user ownership; an object of another tenant or user is `404`, never `403`.

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use memlayer_store::{Access, KeyRejection, KeyRole, Timestamp, validate_id};

use crate::extract::{TENANT_HEADER, header_text};
use crate::{ApiError, AppState};

/// The challenge sent with every `401` (RFC 6750).
pub(crate) const WWW_AUTHENTICATE: &str = "Bearer realm=\"memlayer\"";

/// The authenticated caller: the key's tenant, role and (for a user-scoped key) user.
#[derive(Debug, Clone)]
pub(crate) struct Principal {
    tenant: String,
    role: KeyRole,
    user_id: Option<String>,
}

impl Principal {
    /// The tenant every store call of the request is scoped to.
    pub(crate) fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The one user a user-scoped key acts for; `None` for tenant-wide keys.
    pub(crate) fn user(&self) -> Option<&str> {
        self.user_id.as_deref()
    }

    /// What every store call of the request may reach: the key's tenant, and for a
    /// user-scoped key only its user's sessions.
    pub(crate) fn access(&self) -> Access {
        match &self.user_id {
            Some(user) => Access::one_user(&*self.tenant, &**user),
            None => Access::tenant_wide(&*self.tenant),
        }
    }

    /// `403` unless the key may create something owned by `user_id`: tenant-wide keys may,
    /// a user-scoped key only for its own user.
    pub(crate) fn may_act_for(&self, user_id: &str) -> Result<(), ApiError> {
        match self.user() {
            Some(own) if own != user_id => Err(ApiError::Forbidden(
                "a user-scoped key acts for its own user only".into(),
            )),
            _ => Ok(()),
        }
    }

    /// `404` when a user-scoped key names another user, as if that user had nothing.
    pub(crate) fn check_user(&self, user_id: &str) -> Result<(), ApiError> {
        match self.user() {
            Some(own) if own != user_id => Err(ApiError::NotFound {
                code: "user_not_found",
                message: format!("no user {user_id:?} in this tenant"),
            }),
            _ => Ok(()),
        }
    }

    /// `403` for `service` keys: erasing a user is for the tenant's admins, or for the
    /// user's own key (whose path was checked by [`Caller`]).
    pub(crate) fn may_erase_users(&self) -> Result<(), ApiError> {
        if self.role == KeyRole::Service {
            return Err(ApiError::Forbidden(
                "erasing a user needs a tenant_admin key or the user's own key".into(),
            ));
        }
        Ok(())
    }
}

/// The request's principal if its key acts for a tenant; an operator key is refused (`403`):
/// it may use the whole-store routes and nothing of any tenant.
async fn tenant_principal(parts: &mut Parts, state: &AppState) -> Result<Principal, ApiError> {
    let principal = principal(parts, state).await?;
    if principal.role == KeyRole::Operator {
        return Err(ApiError::Forbidden(
            "an operator key may use the whole-store routes (the backup) only, nothing of a \
             tenant"
                .into(),
        ));
    }
    Ok(principal)
}

/// The request's principal, authenticated once and kept in the request's extensions.
async fn principal(parts: &mut Parts, state: &AppState) -> Result<Principal, ApiError> {
    if let Some(principal) = parts.extensions.get::<Principal>() {
        return Ok(principal.clone());
    }
    let presented = bearer(&parts.headers)?;
    let checked = state
        .store()
        .keys()
        .authenticate_key(&presented, Timestamp::now())
        .await?;
    let key = checked.map_err(|rejection| {
        ApiError::Unauthorized(
            match rejection {
                KeyRejection::Malformed => "malformed API key",
                KeyRejection::Unknown => "unknown API key",
                KeyRejection::Revoked => "this API key was revoked",
                KeyRejection::Expired => "this API key has expired",
            }
            .into(),
        )
    })?;
    if let Some(named) = header_text(&parts.headers, TENANT_HEADER)? {
        validate_id("tenant", named)?;
        if named != key.tenant {
            // The same answer whether or not that tenant exists.
            return Err(ApiError::NotFound {
                code: "tenant_not_found",
                message: format!("no tenant {named:?} for this key"),
            });
        }
    }
    // Every log line of the request names the key (never the secret).
    tracing::Span::current().record("key", key.prefix.as_str());
    // Counted once per request: the principal is cached in the extensions below.
    if let Some(limiter) = state.rate_limiter() {
        limiter.check(&key.prefix, state.recall().live_nodes())?;
    }
    let principal = Principal {
        tenant: key.tenant,
        role: key.role,
        user_id: key.user_id,
    };
    parts.extensions.insert(principal.clone());
    Ok(principal)
}

/// The key of an `Authorization: Bearer <key>` header.
fn bearer(headers: &HeaderMap) -> Result<String, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(ApiError::Unauthorized(
            "an API key is required: send `Authorization: Bearer <key>`".into(),
        ));
    };
    let malformed =
        || ApiError::Unauthorized("malformed Authorization header: expected `Bearer <key>`".into());
    let text = value.to_str().map_err(|_| malformed())?;
    let (scheme, key) = text.split_once(' ').ok_or_else(malformed)?;
    let key = key.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || key.is_empty() {
        return Err(malformed());
    }
    Ok(key.to_owned())
}

/// The tenant of a `tenant_admin` or `service` key. User-scoped keys are refused with `403`:
/// a route taking this extractor does not check user ownership.
pub(crate) struct Tenant(pub(crate) String);

impl FromRequestParts<AppState> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let principal = tenant_principal(parts, state).await?;
        if principal.user_id.is_some() {
            return Err(ApiError::Forbidden(
                "this route needs a tenant_admin or service key; user-scoped keys may not use it"
                    .into(),
            ));
        }
        Ok(Self(principal.tenant))
    }
}

/// The tenant of a `tenant_admin` key; every other key is refused with `403`.
pub(crate) struct Admin(pub(crate) String);

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let principal = tenant_principal(parts, state).await?;
        if principal.role != KeyRole::TenantAdmin {
            return Err(ApiError::Forbidden(
                "this route needs a tenant_admin key".into(),
            ));
        }
        Ok(Self(principal.tenant))
    }
}

/// Any valid key of a tenant, with the path's `{user_id}` already checked for a user-scoped
/// key (another user answers `404`). Sessions are checked by the store calls made with
/// [`Principal::access`].
pub(crate) struct Caller(pub(crate) Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let principal = tenant_principal(parts, state).await?;
        if principal.user_id.is_some() {
            // Undecodable parameters fail the handler's own path extractor (`400`) before it
            // runs, so they need no check here.
            if let Ok(params) = RawPathParams::from_request_parts(parts, state).await {
                for (name, value) in &params {
                    if name == "user_id" {
                        principal.check_user(value)?;
                    }
                }
            }
        }
        Ok(Self(principal))
    }
}

/// An `operator` key: the whole store, for the operator. Every tenant's key is refused with
/// `403`, its admins' and the configured admin key included: a tenant role reaches its own
/// tenant, and a whole-store route reaches every tenant's data.
pub(crate) struct Operator;

impl FromRequestParts<AppState> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let principal = principal(parts, state).await?;
        if principal.role != KeyRole::Operator {
            return Err(ApiError::Forbidden(
                "this route holds every tenant's data: it needs an operator key (memlayer keys \
                 create --role operator, on the data directory)"
                    .into(),
            ));
        }
        Ok(Self)
    }
}
