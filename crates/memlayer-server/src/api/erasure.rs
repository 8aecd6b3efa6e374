//! Forgetting: erasing a message, a session (see `sessions`), a user, or a tenant's
//! conversations by age, each through the erasure coordinator, which answers once nothing of
//! it is left; the receipts; stats and retention for tenant admins.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use memlayer_erasure::{Counts, ErasureRequest, Receipt, RunningErasure, Status, Target};
use memlayer_store::{Access, StoreError, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::read;
use crate::auth::Principal;
use crate::disk::Disk;
use crate::extract::{Admin, ApiJson, ApiPath, ApiQuery, Caller};
use crate::openapi::responses::errors;
use crate::wire::Rfc3339;
use crate::{ApiError, AppState};

/// Most receipts one listing returns.
const MAX_RECEIPTS: usize = 100;
/// Longest retention accepted: a hundred years.
const MAX_RETENTION_DAYS: u32 = 36_500;

/// The tenant a request names: the key's, which `project_id` may repeat.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ProjectQuery {
    /// The tenant (project); must be the key's own when given.
    project_id: Option<String>,
}

/// The key's tenant, after checking that `project_id`, when given, names it. Another tenant
/// answers `404` whether or not it exists, as the tenant header does.
fn project(tenant: String, project_id: Option<String>) -> Result<String, ApiError> {
    match project_id {
        Some(project) => {
            memlayer_store::validate_id("project_id", &project)?;
            if project != tenant {
                return Err(ApiError::NotFound {
                    code: "tenant_not_found",
                    message: format!("no tenant {project:?} for this key"),
                });
            }
            Ok(project)
        }
        None => Ok(tenant),
    }
}

/// A receipt: what an erasure removed, never the content.
#[derive(Serialize, ToSchema)]
pub(crate) struct ReceiptBody {
    erasure_id: u64,
    /// What was asked: `{"kind": "message" | "session" | "memory" | "episode" | "user" |
    /// "inactive_since", …}`.
    #[schema(value_type = Object)]
    target: Target,
    requested_by: String,
    requested_at: Rfc3339,
    completed_at: Rfc3339,
    /// Records removed per kind: `sessions`, `messages`, `vectors`, `summaries`, `memories`,
    /// `session_memories`, `episodes`.
    #[schema(value_type = Object)]
    counts: Counts,
    /// Sessions removed entirely.
    session_ids: Vec<String>,
    /// Whether a crash interrupted it and it completed after the restart, or on another
    /// node after its node died.
    resumed: bool,
}

impl From<Receipt> for ReceiptBody {
    fn from(receipt: Receipt) -> Self {
        Self {
            erasure_id: receipt.id,
            requested_at: Rfc3339(Timestamp::from_micros(receipt.requested_at)),
            completed_at: Rfc3339(receipt.completed()),
            target: receipt.target,
            requested_by: receipt.requested_by,
            counts: receipt.counts,
            session_ids: receipt.session_ids,
            resumed: receipt.resumed,
        }
    }
}

/// An erasure the API started: finished, or still running past the time a request waits.
pub(crate) enum Erased {
    Done(ReceiptBody),
    /// Its id; `202` points at its receipt.
    Running(u64),
}

impl Erased {
    /// The answer for the caller: `done`'s for a finished erasure, `202` for a running one.
    pub(crate) fn answer(
        self,
        done: impl FnOnce(ReceiptBody) -> Result<Response, ApiError>,
    ) -> Result<Response, ApiError> {
        match self {
            Self::Done(receipt) => done(receipt),
            Self::Running(id) => Ok(still_running(id)),
        }
    }
}

/// Erases `target` within `access` for the API caller: for a user-scoped key, a session or
/// message of another user is left alone (checked in the transaction that deletes it).
pub(crate) async fn erase(
    state: &AppState,
    access: Access,
    target: Target,
) -> Result<Erased, ApiError> {
    let running = state
        .erasure()
        .start(ErasureRequest {
            tenant: access.tenant().to_owned(),
            target,
            requested_by: "api".into(),
            user_id: access.user().map(str::to_owned),
        })
        .await?;
    wait_for(state, running).await
}

/// The erasure's receipt if it ends within [`crate::ServerConfig::erasure_wait`]; past it
/// the erasure goes on by itself.
pub(crate) async fn wait_for(
    state: &AppState,
    mut running: RunningErasure,
) -> Result<Erased, ApiError> {
    match running.outcome_within(state.config().erasure_wait()).await {
        Some(receipt) => Ok(Erased::Done(receipt?.into())),
        None => Ok(Erased::Running(running.id())),
    }
}

/// `404` unless `caller` reaches the session: erasing something that does not exist is
/// harmless, but the caller should learn that it named nothing. (The erasure checks again
/// when it deletes.)
pub(crate) async fn require_session(
    state: &AppState,
    caller: &Principal,
    session_id: &str,
) -> Result<(), ApiError> {
    let (access, id) = (caller.access(), session_id.to_owned());
    read(state, move |store| {
        if store.sessions().session_exists(&access, &id)? {
            Ok(())
        } else {
            Err(StoreError::SessionNotFound { session_id: id })
        }
    })
    .await
}

errors!(
    EraseMessageErrors = [
        KEYED,
        PATH,
        SESSION,
        WRITES,
        // An index past the most messages a session holds.
        VALUE,
        &[fails(
            404,
            "message_not_found",
            "No such message in the session"
        )]
    ]
);

/// Erase one message
///
/// Removes the message, its vector, its index entries and a summary that covers it, then
/// compacts the store file; answers once no byte of it is left, or with `202` when that takes
/// longer than half the request timeout (see `GET /v1/admin/erasures/{erasure_id}`). The
/// other messages keep their indices.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{session_id}/messages/{index}",
    tag = "erasure",
    params(
        ("session_id" = String, Path, description = "The session's id"),
        ("index" = u64, Path, description = "The message's index"),
    ),
    responses(
        (status = 200, description = "Erased", body = ReceiptBody),
        (status = 202, description = "Still running; see Location", body = Running),
        EraseMessageErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn erase_message(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((session_id, index)): ApiPath<(String, u64)>,
) -> Result<Response, ApiError> {
    require_session(&state, &caller, &session_id).await?;
    let erased = erase(
        &state,
        caller.access(),
        Target::Message { session_id, index },
    )
    .await?;
    erased.answer(|receipt| {
        if receipt.counts.messages == 0 {
            return Err(memlayer_store::StoreError::MessageNotFound { index }.into());
        }
        Ok(Json(receipt).into_response())
    })
}

errors!(EraseUserErrors = [KEYED, PATH, USER, WRITES]);

/// Erase a user
///
/// Every session of the user in the tenant, with everything derived from them; `202` when
/// that takes longer than half the request timeout.
#[utoipa::path(
    delete,
    path = "/v1/users/{user_id}",
    tag = "erasure",
    params(("user_id" = String, Path, description = "The user's id")),
    responses(
        (status = 200, description = "Erased (counts are zero if the user had nothing)", body = ReceiptBody),
        (status = 202, description = "Still running; see Location", body = Running),
        EraseUserErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "user"])),
)]
pub(crate) async fn erase_user(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(user_id): ApiPath<String>,
) -> Result<Response, ApiError> {
    caller.may_erase_users()?;
    memlayer_store::validate_id("user_id", &user_id)?;
    erase(&state, caller.access(), Target::User { user_id })
        .await?
        .answer(|receipt| Ok(Json(receipt).into_response()))
}

#[derive(Serialize, ToSchema)]
pub(crate) struct Stats {
    project_id: String,
    total_conversations: u64,
    /// The conversation active least recently.
    #[serde(skip_serializing_if = "Option::is_none")]
    oldest_conversation: Option<Oldest>,
    /// The whole store's disk figures (every tenant's data is in the one store file); left
    /// out when they cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    disk: Option<Disk>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct Oldest {
    session_id: String,
    last_activity: Rfc3339,
}

errors!(StatsErrors = [KEYED, QUERY]);

/// Conversation stats
#[utoipa::path(
    get,
    path = "/v1/admin/conversations/stats",
    tag = "admin",
    params(ProjectQuery),
    responses((status = 200, description = "Total conversations, the least recently active, and the store's disk figures", body = Stats), StatsErrors),
    security(("bearerAuth" = ["tenant_admin"])),
)]
pub(crate) async fn stats(
    State(state): State<AppState>,
    Admin(tenant): Admin,
    ApiQuery(query): ApiQuery<ProjectQuery>,
) -> Result<Json<Stats>, ApiError> {
    let project_id = project(tenant, query.project_id)?;
    let owner = project_id.clone();
    let (stats, space) = read(&state, move |store| {
        Ok((
            store.tenants().conversation_stats(&owner)?,
            store.disk_space().ok(),
        ))
    })
    .await?;
    let warning_percent = state.config().disk_warning_free_percent;
    Ok(Json(Stats {
        project_id,
        total_conversations: stats.total,
        oldest_conversation: stats.oldest.map(|(session_id, at)| Oldest {
            session_id,
            last_activity: Rfc3339(at),
        }),
        disk: space.map(|space| Disk::new(&space, warning_percent)),
    }))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct PurgeQuery {
    /// The tenant (project); must be the key's own when given.
    project_id: Option<String>,
    /// Conversations inactive for more days are erased; 0 erases every conversation.
    #[param(maximum = 36_500)]
    older_than_days: u32,
}

/// An erasure that has not finished yet.
#[derive(Serialize, ToSchema)]
pub(crate) struct Running {
    erasure_id: u64,
    /// Always `running`.
    status: &'static str,
}

impl Running {
    pub(crate) fn of(erasure_id: u64) -> Self {
        Self {
            erasure_id,
            status: "running",
        }
    }
}

/// `202 Accepted` for an erasure still running, pointing at where its receipt will be.
fn still_running(erasure_id: u64) -> Response {
    let location = format!("/v1/admin/erasures/{erasure_id}");
    (
        StatusCode::ACCEPTED,
        [(header::LOCATION, location)],
        Json(Running::of(erasure_id)),
    )
        .into_response()
}

errors!(PurgeErrors = [KEYED, QUERY, VALUE, WRITES]);

/// Purge conversations by age
///
/// Hard-deletes every conversation inactive for more than `older_than_days` days (all of
/// them with 0: the admin page makes the operator type `DELETE ALL` first). Answers with the
/// receipt when the purge ends within half the request timeout; a longer one answers `202`
/// and goes on: `Location` (`/v1/admin/erasures/{erasure_id}`) gives its receipt once done.
#[utoipa::path(
    delete,
    path = "/v1/admin/conversations/purge",
    tag = "admin",
    params(PurgeQuery),
    responses(
        (status = 200, description = "Erased", body = ReceiptBody),
        (status = 202, description = "Still running; see Location", body = Running),
        PurgeErrors,
    ),
    security(("bearerAuth" = ["tenant_admin"])),
)]
pub(crate) async fn purge(
    State(state): State<AppState>,
    Admin(tenant): Admin,
    ApiQuery(query): ApiQuery<PurgeQuery>,
) -> Result<Response, ApiError> {
    let project_id = project(tenant, query.project_id)?;
    if query.older_than_days > MAX_RETENTION_DAYS {
        return Err(ApiError::invalid(
            "invalid_value",
            format!("older_than_days must be at most {MAX_RETENTION_DAYS}"),
        ));
    }
    let running = state
        .erasure()
        .start_purge(&project_id, query.older_than_days, "api", Timestamp::now())
        .await?;
    wait_for(&state, running)
        .await?
        .answer(|receipt| Ok(Json(receipt).into_response()))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct ErasurePath {
    /// The erasure's id, as its receipt and a `202` give it.
    erasure_id: u64,
}

errors!(
    ErasureErrors = [
        KEYED,
        PATH,
        QUERY,
        &[fails(
            404,
            "erasure_not_found",
            "No such erasure in the tenant"
        )]
    ]
);

/// One erasure
///
/// Its receipt once it finished; `202` with `status: running` while it runs (or waits for
/// the maintenance pass to finish it after a failure or a restart). A tenant's admin and
/// service keys read every erasure of the tenant; a user-scoped key only those it asked for.
#[utoipa::path(
    get,
    path = "/v1/admin/erasures/{erasure_id}",
    tag = "admin",
    params(ErasurePath, ProjectQuery),
    responses(
        (status = 200, description = "Finished", body = ReceiptBody),
        (status = 202, description = "Still running", body = Running),
        ErasureErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn erasure(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(path): ApiPath<ErasurePath>,
    ApiQuery(query): ApiQuery<ProjectQuery>,
) -> Result<Response, ApiError> {
    project(caller.tenant().to_owned(), query.project_id)?;
    // Whose erasure it is is checked in the read that finds it.
    match state
        .erasure()
        .status(&caller.access(), path.erasure_id)
        .await?
    {
        Some(Status::Done(receipt)) => Ok(Json(ReceiptBody::from(*receipt)).into_response()),
        Some(Status::Running) => Ok(still_running(path.erasure_id)),
        None => Err(ApiError::NotFound {
            code: "erasure_not_found",
            message: format!("no erasure {} in this tenant", path.erasure_id),
        }),
    }
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ReceiptsQuery {
    /// The tenant (project); must be the key's own when given.
    project_id: Option<String>,
    /// At most this many, newest first (default 20).
    #[param(minimum = 1, maximum = 100)]
    limit: Option<usize>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct Receipts {
    erasures: Vec<ReceiptBody>,
}

errors!(ReceiptsErrors = [KEYED, QUERY, VALUE]);

/// Erasure receipts
#[utoipa::path(
    get,
    path = "/v1/admin/erasures",
    tag = "admin",
    params(ReceiptsQuery),
    responses((status = 200, description = "The tenant's receipts, newest first", body = Receipts), ReceiptsErrors),
    security(("bearerAuth" = ["tenant_admin"])),
)]
pub(crate) async fn receipts(
    State(state): State<AppState>,
    Admin(tenant): Admin,
    ApiQuery(query): ApiQuery<ReceiptsQuery>,
) -> Result<Json<Receipts>, ApiError> {
    let project_id = project(tenant, query.project_id)?;
    let limit = query.limit.unwrap_or(20);
    if !(1..=MAX_RECEIPTS).contains(&limit) {
        return Err(ApiError::invalid(
            "invalid_value",
            format!("limit must be between 1 and {MAX_RECEIPTS}"),
        ));
    }
    let receipts = state.erasure().receipts(&project_id, limit).await?;
    Ok(Json(Receipts {
        erasures: receipts.into_iter().map(ReceiptBody::from).collect(),
    }))
}

#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Retention {
    /// Conversations inactive for more days are erased by a daily pass; `null`: kept.
    #[schema(minimum = 1, maximum = 36_500)]
    conversation_retention_days: Option<u32>,
}

impl Retention {
    /// Refuses a retention outside 1 to `MAX_RETENTION_DAYS` days.
    pub(crate) fn validate(&self) -> Result<(), ApiError> {
        match self.conversation_retention_days {
            Some(days) if !(1..=MAX_RETENTION_DAYS).contains(&days) => Err(ApiError::invalid(
                "invalid_value",
                format!("conversation_retention_days must be between 1 and {MAX_RETENTION_DAYS}"),
            )),
            _ => Ok(()),
        }
    }
}

errors!(RetentionErrors = [KEYED]);

/// Conversation retention
#[utoipa::path(
    get,
    path = "/v1/admin/retention",
    tag = "admin",
    responses((status = 200, description = "The tenant's retention", body = Retention), RetentionErrors),
    security(("bearerAuth" = ["tenant_admin"])),
)]
pub(crate) async fn retention(
    State(state): State<AppState>,
    Admin(tenant): Admin,
) -> Result<Json<Retention>, ApiError> {
    let rules = state.erasure().retention_rules().await?;
    let days = rules
        .into_iter()
        .find(|rule| rule.tenant == tenant)
        .map(|rule| rule.days);
    Ok(Json(Retention {
        conversation_retention_days: days,
    }))
}

errors!(SetRetentionErrors = [KEYED, JSON_BODY, VALUE, WRITES]);

/// Set conversation retention
///
/// A daily pass erases the tenant's conversations inactive for longer; a pass missed while
/// the server was down runs at the next start.
#[utoipa::path(
    put,
    path = "/v1/admin/retention",
    tag = "admin",
    request_body = Retention,
    responses((status = 200, description = "Saved", body = Retention), SetRetentionErrors),
    security(("bearerAuth" = ["tenant_admin"])),
)]
pub(crate) async fn set_retention(
    State(state): State<AppState>,
    Admin(tenant): Admin,
    ApiJson(body): ApiJson<Retention>,
) -> Result<Json<Retention>, ApiError> {
    body.validate()?;
    state
        .store()
        .tenants()
        .set_retention(&tenant, body.conversation_retention_days)
        .await?;
    Ok(Json(body))
}
