//! Sessions, their messages and runs: `/v1/sessions/...`.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use memlayer_store::{
    Access, Append, MAX_PAGE_SIZE, Metadata, NewMessage, NewRun, NewSession, Role, RunStatus,
    SessionFilter, blocking,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::api::read;
use crate::extract::{ApiJson, ApiPath, ApiQuery, Caller, Tenant, header_text};
use crate::openapi::responses::errors;
use crate::wire::{MessageBody, MessageInput, RunBody, SessionBody, parse_timestamp};
use crate::{ApiError, AppState};
use memlayer_erasure::Target;
use memlayer_memory::TokenEncoding;

/// Largest page of messages or runs one request returns.
const MAX_PER_PAGE: usize = 1_000;
/// Header carrying an append's idempotency key (the body field `idempotency_key` also works).
const IDEMPOTENCY_HEADER: &str = "idempotency-key";

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateSessionRequest {
    /// A UUIDv4 is generated when absent.
    session_id: Option<String>,
    /// The end user the conversation is with.
    user_id: String,
    /// The agent holding the conversation.
    agent_id: String,
    /// The workflow the conversation runs in, if any.
    flow_id: Option<String>,
    #[serde(default)]
    #[schema(value_type = crate::openapi::foreign::Metadata)]
    metadata: Metadata,
}

impl CreateSessionRequest {
    /// The requested session id and who owns the session.
    pub(crate) fn into_parts(self) -> (Option<String>, NewSession) {
        let owner = NewSession {
            user_id: self.user_id,
            agent_id: self.agent_id,
            flow_id: self.flow_id,
            metadata: self.metadata,
        };
        (self.session_id, owner)
    }
}

errors!(
    CreateSessionErrors = [
        KEYED,
        JSON_BODY,
        VALUE,
        WRITES,
        &[fails(409, "conflict", "A session with this id exists")]
    ]
);

/// Create a session
#[utoipa::path(
    post,
    path = "/v1/sessions",
    tag = "sessions",
    request_body = CreateSessionRequest,
    responses(
        (status = 201, description = "Created", body = SessionBody),
        CreateSessionErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn create_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiJson(request): ApiJson<CreateSessionRequest>,
) -> Result<(StatusCode, Json<SessionBody>), ApiError> {
    caller.may_act_for(&request.user_id)?;
    let (session_id, owner) = request.into_parts();
    let session = state
        .store()
        .sessions()
        .create_session(&caller.access(), session_id.as_deref(), owner)
        .await?;
    Ok((StatusCode::CREATED, Json(session.into())))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListSessionsQuery {
    /// Only this user's sessions.
    user_id: Option<String>,
    /// Only this agent's sessions.
    agent_id: Option<String>,
    /// Zero-based.
    #[serde(default, deserialize_with = "crate::wire::int64")]
    #[param(default = 0)]
    page: u64,
    #[serde(default = "default_page_size")]
    #[param(default = 20, minimum = 1, maximum = 100)]
    page_size: usize,
}

fn default_page_size() -> usize {
    20
}

/// A page of sessions, most recently active first.
#[derive(Serialize, ToSchema)]
pub(crate) struct SessionPage {
    content: Vec<SessionBody>,
    total_elements: u64,
    total_pages: u64,
    page: u64,
    page_size: usize,
}

errors!(ListSessionsErrors = [KEYED, QUERY, VALUE]);

/// List sessions
///
/// Most recently active first, optionally only one user's or one agent's.
#[utoipa::path(
    get,
    path = "/v1/sessions",
    tag = "sessions",
    params(ListSessionsQuery),
    responses((status = 200, description = "A page of sessions", body = SessionPage), ListSessionsErrors),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn list_sessions(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<ListSessionsQuery>,
) -> Result<Json<SessionPage>, ApiError> {
    if !(1..=MAX_PAGE_SIZE).contains(&query.page_size) {
        return Err(ApiError::invalid(
            "invalid_value",
            format!("page_size must be between 1 and {MAX_PAGE_SIZE}"),
        ));
    }
    let filter = SessionFilter {
        user_id: query.user_id,
        agent_id: query.agent_id,
    };
    let (page, page_size) = (query.page, query.page_size);
    // A user-scoped key lists its own user's sessions; naming another user finds nothing.
    let access = caller.access();
    let listing = read(&state, move |store| {
        store
            .sessions()
            .list_sessions(&access, &filter, page, page_size)
    })
    .await?;
    Ok(Json(SessionPage {
        total_pages: listing.total.div_ceil(page_size as u64),
        total_elements: listing.total,
        content: listing.items.into_iter().map(SessionBody::from).collect(),
        page,
        page_size,
    }))
}

/// A session with its first messages.
#[derive(Serialize, ToSchema)]
pub(crate) struct SessionWithMessages {
    #[serde(flatten)]
    session: SessionBody,
    /// The first 1,000 messages (`GET /v1/sessions/{session_id}/messages` pages on).
    messages: Vec<MessageBody>,
    /// Where the next page of messages starts, when the session has more.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_from: Option<u64>,
}

errors!(GetSessionErrors = [KEYED, PATH, SESSION]);

/// Get a session with its messages
#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}",
    tag = "sessions",
    params(("session_id" = String, Path, description = "The session's id")),
    responses(
        (status = 200, description = "The session and its first 1,000 messages", body = SessionWithMessages),
        GetSessionErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn get_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(session_id): ApiPath<String>,
) -> Result<Json<SessionWithMessages>, ApiError> {
    let (access, id) = (caller.access(), session_id.clone());
    let (session, messages) = read(&state, move |store| {
        let snapshot = store
            .sessions()
            .snapshot(&access, &id)?
            .ok_or(memlayer_store::StoreError::SessionNotFound { session_id: id })?;
        let messages = snapshot.messages(0, MAX_PER_PAGE + 1)?;
        Ok((snapshot.session().clone(), messages))
    })
    .await?;
    let page = MessagesPage::new(session_id, messages, MAX_PER_PAGE);
    Ok(Json(SessionWithMessages {
        session: session.into(),
        messages: page.messages,
        next_from: page.next_from,
    }))
}

errors!(DeleteSessionErrors = [KEYED, PATH, SESSION, WRITES]);

/// Delete a session
///
/// Erases the session and everything it owns (messages, runs, vectors, index entries);
/// `202` when that takes longer than half the request timeout (see
/// `GET /v1/admin/erasures/{erasure_id}`).
#[utoipa::path(
    delete,
    path = "/v1/sessions/{session_id}",
    tag = "sessions",
    params(("session_id" = String, Path, description = "The session's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 202, description = "Still running; see Location", body = crate::api::erasure::Running),
        DeleteSessionErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn delete_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(session_id): ApiPath<String>,
) -> Result<Response, ApiError> {
    // Through the erasure coordinator: the answer comes once nothing of the session is left,
    // not even in the file's free pages, or says where to find when that is.
    crate::api::erasure::require_session(&state, &caller, &session_id).await?;
    crate::api::erasure::erase(&state, caller.access(), Target::Session { session_id })
        .await?
        .answer(|_| Ok(StatusCode::NO_CONTENT.into_response()))
}

/// Either one message (`role`, `content`, …) or a batch (`messages`), plus who owns the
/// session so that an unknown session is created on first use.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AppendRequest {
    /// A batch; or give one message's fields below instead.
    messages: Option<Vec<MessageInput>>,
    #[schema(value_type = Option<crate::openapi::foreign::Role>)]
    role: Option<memlayer_store::Role>,
    content: Option<String>,
    /// At least the server's own count (see the batch form's `token_count`).
    token_count: Option<u32>,
    /// RFC 3339; the append time when absent.
    timestamp: Option<String>,
    #[schema(value_type = Option<crate::openapi::foreign::Metadata>)]
    metadata: Option<Metadata>,
    /// With `agent_id`: who owns the session if this append creates it.
    user_id: Option<String>,
    /// With `user_id`: who owns the session if this append creates it.
    agent_id: Option<String>,
    flow_id: Option<String>,
    /// Metadata of the session if this append creates it.
    #[schema(value_type = Option<crate::openapi::foreign::Metadata>)]
    session_metadata: Option<Metadata>,
    /// Like the `Idempotency-Key` header: a retry with the same key returns the first result.
    idempotency_key: Option<String>,
}

/// An [`AppendRequest`] with its two forms reconciled.
pub(crate) struct AppendParts {
    pub(crate) messages: Vec<MessageInput>,
    pub(crate) create: Option<NewSession>,
    pub(crate) idempotency_key: Option<String>,
}

impl AppendRequest {
    /// The messages of the request, whichever form it used, and who owns the session.
    pub(crate) fn into_parts(self) -> Result<AppendParts, ApiError> {
        let single = self.role.is_some()
            || self.content.is_some()
            || self.token_count.is_some()
            || self.timestamp.is_some()
            || self.metadata.is_some();
        let messages = match (self.messages, single) {
            (Some(messages), false) => messages,
            (None, true) => match (self.role, self.content) {
                (Some(role), Some(content)) => vec![MessageInput {
                    role,
                    content,
                    token_count: self.token_count,
                    timestamp: self.timestamp,
                    metadata: self.metadata.unwrap_or_default(),
                }],
                _ => {
                    return Err(ApiError::invalid(
                        "invalid_value",
                        "a single message needs both role and content",
                    ));
                }
            },
            (Some(_), true) => {
                return Err(ApiError::invalid(
                    "invalid_value",
                    "give either messages or one message's role and content, not both",
                ));
            }
            (None, false) => {
                return Err(ApiError::invalid(
                    "invalid_value",
                    "nothing to append: give messages, or role and content",
                ));
            }
        };
        let create = match (self.user_id, self.agent_id) {
            (Some(user_id), Some(agent_id)) => Some(NewSession {
                user_id,
                agent_id,
                flow_id: self.flow_id,
                metadata: self.session_metadata.unwrap_or_default(),
            }),
            (None, None) if self.flow_id.is_none() && self.session_metadata.is_none() => None,
            _ => {
                return Err(ApiError::invalid(
                    "invalid_value",
                    "user_id and agent_id go together (flow_id and session_metadata need both)",
                ));
            }
        };
        Ok(AppendParts {
            messages,
            create,
            idempotency_key: self.idempotency_key,
        })
    }
}

/// Where the appended messages went.
#[derive(Serialize, ToSchema)]
pub(crate) struct AppendResponse {
    session_id: String,
    indices: Vec<u64>,
    created_session: bool,
    replayed: bool,
}

errors!(
    AppendMessagesErrors = [
        KEYED,
        PATH,
        JSON_BODY,
        VALUE,
        SESSION,
        WRITES,
        &[
            fails(
                403,
                "forbidden",
                "A user-scoped key appending a `system` or `tool` message, or creating another user's session"
            ),
            fails(
                404,
                "session_not_found",
                "No owner (`user_id`, `agent_id`) was given to create it"
            ),
            fails(
                409,
                "conflict",
                "The idempotency key was used with another body"
            )
        ]
    ]
);

/// Append messages
///
/// One message or a batch, stored durably before the answer. An unknown session is created
/// when `user_id` and `agent_id` are given. A retry with the same idempotency key answers
/// `200` with the first result (`replayed`) and stores nothing.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/messages",
    tag = "messages",
    params(
        ("session_id" = String, Path, description = "The session's id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retried append return the first result instead of storing it again. A client that cannot set headers may send the key as an `idempotency_key` body field instead (both must be equal when both are sent; the body field is left out of the schema, which cannot say so)"),
    ),
    request_body = AppendRequest,
    responses(
        (status = 201, description = "Stored", body = AppendResponse),
        (status = 200, description = "A replay of an earlier append with the same idempotency key", body = AppendResponse),
        AppendMessagesErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn append_messages(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(session_id): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<AppendRequest>,
) -> Result<(StatusCode, Json<AppendResponse>), ApiError> {
    let AppendParts {
        messages: inputs,
        create,
        idempotency_key: body_key,
    } = request.into_parts()?;
    let idempotency_key = idempotency_key(&headers, body_key)?;
    if let Some(owner) = &create {
        caller.may_act_for(&owner.user_id)?;
    }
    if caller.user().is_some()
        && let Some(input) = inputs
            .iter()
            .find(|input| matches!(input.role, Role::System | Role::Tool))
    {
        // A stored system message rides into every later context with the instructions'
        // weight, and a tool message poses as a tool's output: both are the agent backend's
        // to write, never an end user's.
        return Err(ApiError::Forbidden(format!(
            "a user-scoped key appends user and assistant messages only, not {:?}",
            input.role
        )));
    }
    let encoding = state.config().token_encoding;
    let text_bytes: usize = inputs.iter().map(|input| input.content.len()).sum();
    let messages = if text_bytes <= INLINE_COUNT_MAX_BYTES {
        new_messages(inputs, encoding)?
    } else {
        // Counting tokens of a large body takes milliseconds: keep it off the async workers.
        blocking(move || new_messages(inputs, encoding)).await?
    };
    let append = Append {
        messages,
        create,
        idempotency_key,
    };
    let appended = state
        .store()
        .sessions()
        .append(&caller.access(), &session_id, append)
        .await?;
    let status = if appended.replayed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(AppendResponse {
            session_id,
            indices: appended.indices().collect(),
            created_session: appended.created_session,
            replayed: appended.replayed,
        }),
    ))
}

/// Appends whose texts total at most this many bytes have their tokens counted on the async
/// worker. At about 0.25 µs a token and 4 bytes a token that is under 100 µs, less than a
/// round trip through the blocking pool, which under 64 appending clients had grown past a
/// hundred threads contending for the tokenizer's regex caches (perf, 2026-11-27).
const INLINE_COUNT_MAX_BYTES: usize = 1_536;

/// The messages to store: timestamps parsed, tokens counted with `encoding` (a larger count
/// the client sent is kept; a smaller one would let a message take less of a context's
/// budget than it fills).
pub(crate) fn new_messages(
    inputs: Vec<MessageInput>,
    encoding: TokenEncoding,
) -> Result<Vec<NewMessage>, ApiError> {
    inputs
        .into_iter()
        .map(|input| {
            let counted = encoding.count(&input.content);
            Ok(NewMessage {
                token_count: input.token_count.map_or(counted, |sent| sent.max(counted)),
                timestamp: input
                    .timestamp
                    .map(|text| parse_timestamp("timestamp", &text))
                    .transpose()?,
                role: input.role,
                content: input.content,
                metadata: input.metadata,
            })
        })
        .collect()
}

fn idempotency_key(
    headers: &HeaderMap,
    body_key: Option<String>,
) -> Result<Option<String>, ApiError> {
    let header_key = header_text(headers, IDEMPOTENCY_HEADER)?.map(str::to_owned);
    match (header_key, body_key) {
        (Some(header), Some(body)) if header != body => Err(ApiError::invalid(
            "invalid_value",
            "the Idempotency-Key header and the idempotency_key field differ",
        )),
        (header, body) => Ok(header.or(body)),
    }
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct PageQuery {
    /// Where the page starts: a message's index, or a run's 0-based position.
    #[serde(default, deserialize_with = "crate::wire::int64")]
    #[param(default = 0)]
    from: u64,
    #[serde(default = "default_page_limit")]
    #[param(default = 100, minimum = 1, maximum = 1000)]
    limit: usize,
}

fn default_page_limit() -> usize {
    100
}

impl PageQuery {
    /// The page size, refused outside 1 to [`MAX_PER_PAGE`].
    fn limit(&self) -> Result<usize, ApiError> {
        if (1..=MAX_PER_PAGE).contains(&self.limit) {
            Ok(self.limit)
        } else {
            Err(ApiError::invalid(
                "invalid_value",
                format!("limit must be between 1 and {MAX_PER_PAGE}"),
            ))
        }
    }
}

/// A page of a session's messages.
#[derive(Serialize, ToSchema)]
pub(crate) struct MessagesPage {
    session_id: String,
    messages: Vec<MessageBody>,
    /// Where the next page starts, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_from: Option<u64>,
}

errors!(ListMessagesErrors = [KEYED, PATH, QUERY, VALUE, SESSION]);

/// List messages
#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}/messages",
    tag = "messages",
    params(("session_id" = String, Path, description = "The session's id"), PageQuery),
    responses(
        (status = 200, description = "A page of messages, oldest first", body = MessagesPage),
        ListMessagesErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn list_messages(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(session_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Json<MessagesPage>, ApiError> {
    let (access, limit, id) = (caller.access(), query.limit()?, session_id.clone());
    let messages = read(&state, move |store| {
        // One more than asked, to learn whether another page follows.
        store
            .sessions()
            .messages(&access, &id, query.from, limit + 1)
    })
    .await?;
    Ok(Json(MessagesPage::new(session_id, messages, limit)))
}

impl MessagesPage {
    /// The page of the first `limit` of `messages`, which were read with one more to tell
    /// whether another page follows.
    fn new(session_id: String, mut messages: Vec<memlayer_store::Message>, limit: usize) -> Self {
        let more = messages.len() > limit;
        messages.truncate(limit);
        // After the last message returned, not `from + limit`: erased messages leave gaps, so
        // a page of `limit` messages may span more indices than that.
        let next_from = more
            .then(|| messages.last().map(|message| message.index + 1))
            .flatten();
        Self {
            session_id,
            messages: messages.into_iter().map(MessageBody::from).collect(),
            next_from,
        }
    }
}

/// An agent run to record.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecordRunRequest {
    /// A UUIDv4 is generated when absent.
    run_id: Option<String>,
    #[schema(value_type = crate::openapi::foreign::RunStatus)]
    status: RunStatus,
    /// The answer, if any.
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<Value>,
    /// Why the run failed.
    error: Option<String>,
    #[serde(default)]
    #[schema(value_type = crate::openapi::foreign::Metadata)]
    metadata: Metadata,
}

impl From<RecordRunRequest> for NewRun {
    fn from(request: RecordRunRequest) -> Self {
        Self {
            run_id: request.run_id,
            status: request.status,
            content: request.content,
            tool_calls: request.tool_calls,
            error: request.error,
            metadata: request.metadata,
        }
    }
}

errors!(
    RecordRunErrors = [
        KEYED,
        PATH,
        JSON_BODY,
        VALUE,
        SESSION,
        WRITES,
        &[
            fails(
                403,
                "forbidden",
                "A user-scoped key: runs are the agent backend's records"
            ),
            fails(409, "conflict", "A run with this id exists")
        ]
    ]
);

/// Record an agent run
#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/runs",
    tag = "runs",
    params(("session_id" = String, Path, description = "The session's id")),
    request_body = RecordRunRequest,
    responses(
        (status = 201, description = "Recorded", body = RunBody),
        RecordRunErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service"])),
)]
pub(crate) async fn record_run(
    State(state): State<AppState>,
    // A run is the agent backend's record of what it did: user-scoped keys may read runs,
    // not write them.
    Tenant(tenant): Tenant,
    ApiPath(session_id): ApiPath<String>,
    ApiJson(request): ApiJson<RecordRunRequest>,
) -> Result<(StatusCode, Json<RunBody>), ApiError> {
    let run = state
        .store()
        .sessions()
        .record_run(&Access::tenant_wide(tenant), &session_id, request.into())
        .await?;
    Ok((StatusCode::CREATED, Json(RunBody::new(session_id, run))))
}

errors!(ListRunsErrors = [KEYED, PATH, QUERY, VALUE, SESSION]);

/// List runs
#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}/runs",
    tag = "runs",
    params(("session_id" = String, Path, description = "The session's id"), PageQuery),
    responses(
        (status = 200, description = "A page of the session's runs in order; the next page starts at `from` plus the runs returned", body = Vec<RunBody>),
        ListRunsErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn list_runs(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(session_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> Result<Json<Vec<RunBody>>, ApiError> {
    let (access, limit, id) = (caller.access(), query.limit()?, session_id.clone());
    let runs = read(&state, move |store| {
        store.sessions().runs(&access, &id, query.from, limit)
    })
    .await?;
    Ok(Json(
        runs.into_iter()
            .map(|run| RunBody::new(session_id.clone(), run))
            .collect(),
    ))
}

/// Where context loads start now.
#[derive(Serialize, ToSchema)]
pub(crate) struct Cleared {
    pub(crate) session_id: String,
    /// Context loads start at this index from now on.
    pub(crate) load_from: u64,
}

errors!(ClearSessionErrors = [KEYED, PATH, SESSION, WRITES]);

/// Clear a session's context
///
/// `clear_session`: later context starts after the current last message; everything stays
/// stored for audit and for search.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/clear",
    tag = "messages",
    params(("session_id" = String, Path, description = "The session's id")),
    responses(
        (status = 200, description = "Cleared", body = Cleared),
        ClearSessionErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn clear_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(session_id): ApiPath<String>,
) -> Result<Json<Cleared>, ApiError> {
    let load_from = state
        .store()
        .sessions()
        .clear_session(&caller.access(), &session_id)
        .await?;
    Ok(Json(Cleared {
        session_id,
        load_from,
    }))
}

/// Characters of a hit's content shown in its preview.
const PREVIEW_CHARS: usize = 300;

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct SearchQuery {
    /// Words to find, case-insensitively.
    q: String,
    #[serde(default = "default_search_limit")]
    #[param(default = 10, minimum = 1, maximum = 50)]
    limit: usize,
}

fn default_search_limit() -> usize {
    10
}

/// A message that matched.
#[derive(Serialize, ToSchema)]
pub(crate) struct SearchHit {
    index: u64,
    #[schema(value_type = crate::openapi::foreign::Role)]
    role: memlayer_store::Role,
    /// The content, cut to 300 characters.
    preview: String,
    timestamp: crate::wire::Rfc3339,
}

/// Matches, newest first.
#[derive(Serialize, ToSchema)]
pub(crate) struct SearchResults {
    session_id: String,
    hits: Vec<SearchHit>,
}

errors!(SearchSessionErrors = [KEYED, PATH, QUERY, VALUE, SESSION]);

/// Search a session's history
///
/// `session_search`: case-insensitive keyword search over the session's whole history,
/// including messages dropped, summarised or cleared from the context; newest first.
#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}/search",
    tag = "messages",
    params(("session_id" = String, Path, description = "The session's id"), SearchQuery),
    responses(
        (status = 200, description = "Matches, newest first", body = SearchResults),
        SearchSessionErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn search_session(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(session_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<SearchQuery>,
) -> Result<Json<SearchResults>, ApiError> {
    let messages = state
        .agent()
        .tools()
        .search_session(caller.access(), session_id.clone(), query.q, query.limit)
        .await?;
    Ok(Json(SearchResults::new(session_id, messages)))
}

impl SearchResults {
    /// The matches as the endpoint and the `session_search` tool answer them.
    pub(crate) fn new(session_id: String, messages: Vec<memlayer_store::Message>) -> Self {
        Self {
            session_id,
            hits: messages
                .into_iter()
                .map(|message| SearchHit {
                    index: message.index,
                    role: message.role,
                    preview: message.content.chars().take(PREVIEW_CHARS).collect(),
                    timestamp: crate::wire::Rfc3339(message.timestamp),
                })
                .collect(),
        }
    }
}
