//! Long-term memories over HTTP: remember (deduplicated: a repeat or a correction updates
//! the memory it restates), list, search, get, and forget (through the erasure coordinator,
//! so a forgotten memory leaves no bytes behind).
//!
//! Every role may use them; a user-scoped key only for its own user (`Caller` checks the
//! path's `{user_id}` and `{session_id}`, the handlers a memory's owner and a source session),
//! and another user's memory answers `404` as one that does not exist.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use memlayer_memory::{MemoryHit, MemoryQuery, RememberAction, RememberRequest};
use memlayer_store::{Access, Memory, MemoryKind, blocking};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::erasure::ReceiptBody;
use crate::extract::{ApiJson, ApiPath, ApiQuery, Caller};
use crate::openapi::foreign;
use crate::openapi::responses::{Failures, errors, fails};
use crate::wire::Rfc3339;
use crate::{ApiError, AppState};

/// A memory on the wire (its embedding is not sent).
#[derive(Serialize, ToSchema)]
pub(crate) struct MemoryBody {
    memory_id: u64,
    user_id: String,
    /// `null`: visible to every agent of the user.
    agent_id: Option<String>,
    text: String,
    #[serde(rename = "type")]
    #[schema(value_type = foreign::MemoryKind)]
    kind: MemoryKind,
    tags: Vec<String>,
    /// The message it came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<SourceBody>,
    created_at: Rfc3339,
    updated_at: Rfc3339,
    /// Texts it replaced, oldest first.
    history: Vec<ReplacedText>,
    /// The key it was put under (`PUT /v1/users/{user_id}/memories/keys/{key}`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
}

#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SourceBody {
    session_id: String,
    index: u64,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct ReplacedText {
    text: String,
    replaced_at: Rfc3339,
    /// The message the text came from, when known; erasing it takes the text out of the
    /// history.
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<SourceBody>,
}

impl From<Memory> for MemoryBody {
    fn from(memory: Memory) -> Self {
        Self {
            memory_id: memory.id,
            user_id: memory.user_id,
            agent_id: memory.agent_id,
            text: memory.text,
            kind: memory.kind,
            tags: memory.tags,
            source: memory
                .source
                .map(|(session_id, index)| SourceBody { session_id, index }),
            created_at: Rfc3339(memory.created_at),
            updated_at: Rfc3339(memory.updated_at),
            history: memory
                .history
                .into_iter()
                .map(|replaced| ReplacedText {
                    text: replaced.text,
                    replaced_at: Rfc3339(replaced.replaced_at),
                    source: replaced
                        .source
                        .map(|(session_id, index)| SourceBody { session_id, index }),
                })
                .collect(),
            key: memory.key,
        }
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RememberBody {
    text: String,
    #[serde(rename = "type")]
    #[schema(value_type = foreign::MemoryKind)]
    kind: MemoryKind,
    #[serde(default)]
    tags: Vec<String>,
    /// Only this agent sees it; absent: every agent of the user.
    agent_id: Option<String>,
    source: Option<SourceBody>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct Remembered {
    /// `created`, `updated` (a repeat or correction of an existing memory, whose old text is
    /// in its history) or `unchanged`.
    #[schema(value_type = String)]
    action: RememberAction,
    memory: MemoryBody,
}

impl Remembered {
    pub(crate) fn new(memory: Memory, action: RememberAction) -> Self {
        Self {
            action,
            memory: memory.into(),
        }
    }

    /// The answer: `201` for a new memory, `200` otherwise.
    fn answer(self) -> (StatusCode, Json<Self>) {
        let status = if self.action == RememberAction::Created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        (status, Json(self))
    }
}

/// What remembering answers about the memory itself (the memory layer calls text and tags
/// settings), over HTTP and as a tool.
pub(crate) const MEMORY_TEXT: Failures = &[fails(
    422,
    "invalid_setting",
    "The text is blank, a tag is not one word of 1 to 32 characters, or there are too many \
     tags",
)];

errors!(
    RememberErrors = [
        KEYED,
        PATH,
        USER,
        JSON_BODY,
        VALUE,
        WRITES,
        MEMORY_TEXT,
        &[
            fails(
                404,
                "session_not_found",
                "The source session is not one the key reaches"
            ),
            fails(404, "message_not_found", "The source message is not stored"),
            fails(
                409,
                "conflict",
                "The memory this one updates was forgotten meanwhile; sent again, it is remembered anew"
            )
        ]
    ]
);

/// Remember something about a user
#[utoipa::path(
    post,
    path = "/v1/users/{user_id}/memories",
    tag = "memories",
    params(("user_id" = String, Path, description = "The user")),
    request_body = RememberBody,
    responses(
        (status = 201, description = "Created", body = Remembered),
        (status = 200, description = "An existing memory was updated or already said this", body = Remembered),
        RememberErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn remember(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(user_id): ApiPath<String>,
    ApiJson(body): ApiJson<RememberBody>,
) -> Result<(StatusCode, Json<Remembered>), ApiError> {
    // A memory is erased with its source session, so a user key may only name its own: the
    // store checks the source within the key's access when it saves.
    let remembered = remember_for(&state, caller.access(), user_id, None, body).await?;
    Ok(remembered.answer())
}

/// Put a memory under a key
///
/// The memory of the user named `key` (in the scope of `agent_id`, or of every agent without
/// it) now says `text`, with this `type` and these `tags`; a new one is made when the key
/// names none (`201`). Unlike remembering without a key, a put never merges with another
/// memory, and remembering without a key never changes a keyed memory: what `key` names is
/// what was last put under it. A text it replaces stays in its history. Forgetting the
/// memory (`DELETE /v1/memories/{memory_id}`) or erasing its source erases the key with it.
#[utoipa::path(
    put,
    path = "/v1/users/{user_id}/memories/keys/{key}",
    operation_id = "put_memory",
    tag = "memories",
    params(
        ("user_id" = String, Path, description = "The user"),
        ("key" = String, Path, description = "The caller's name for the memory"),
    ),
    request_body = RememberBody,
    responses(
        (status = 201, description = "Created under the key", body = Remembered),
        (status = 200, description = "The memory under the key was updated or already said this", body = Remembered),
        // A put fails as a remember does (its 409: the memory under the key was forgotten
        // meanwhile; sent again, it is made anew).
        RememberErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn put(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((user_id, key)): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<RememberBody>,
) -> Result<(StatusCode, Json<Remembered>), ApiError> {
    memlayer_store::validate_id("key", &key)?;
    let remembered = remember_for(&state, caller.access(), user_id, Some(key), body).await?;
    Ok(remembered.answer())
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct KeyQuery {
    /// The key's agent scope, as it was put; absent: the memories of every agent.
    agent_id: Option<String>,
}

errors!(
    GetMemoryByKeyErrors = [
        KEYED,
        PATH,
        USER,
        QUERY,
        &[fails(404, "memory_not_found", "No memory is under the key")]
    ]
);

/// A memory by its key
#[utoipa::path(
    get,
    path = "/v1/users/{user_id}/memories/keys/{key}",
    operation_id = "get_memory_by_key",
    tag = "memories",
    params(
        ("user_id" = String, Path, description = "The user"),
        ("key" = String, Path, description = "The caller's name for the memory"),
        KeyQuery,
    ),
    responses(
        (status = 200, description = "The memory last put under the key", body = MemoryBody),
        GetMemoryByKeyErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn get_by_key(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((user_id, key)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery<KeyQuery>,
) -> Result<Json<MemoryBody>, ApiError> {
    let tenant = caller.tenant().to_owned();
    let memory = crate::api::read(&state, move |store| {
        let agent = query.agent_id.as_deref();
        store
            .memories()
            .memory_by_key(&tenant, &user_id, agent, &key)
    })
    .await?
    .ok_or_else(|| ApiError::NotFound {
        code: "memory_not_found",
        message: "no memory is under this key".into(),
    })?;
    Ok(Json(memory.into()))
}

async fn remember_for(
    state: &AppState,
    access: Access,
    user_id: String,
    key: Option<String>,
    body: RememberBody,
) -> Result<Remembered, ApiError> {
    memlayer_store::validate_id("user_id", &user_id)?;
    let (memory, action) = state
        .memories()
        .remember(RememberRequest {
            access,
            user_id,
            agent_id: body.agent_id,
            text: body.text,
            kind: body.kind,
            tags: body.tags,
            source: body.source.map(|s| (s.session_id, s.index)),
            key,
        })
        .await?;
    Ok(Remembered::new(memory, action))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// The agent asking: the user's memories without an agent and its own. Absent: all.
    agent_id: Option<String>,
    /// The page starts after this memory (the previous page's `next_after`); `404` when it
    /// was forgotten meanwhile.
    after: Option<u64>,
    #[serde(default = "default_list_limit")]
    #[param(default = 100, minimum = 1, maximum = 1000)]
    limit: usize,
}

fn default_list_limit() -> usize {
    100
}

/// Largest page of memories one request returns.
const MAX_LIST_LIMIT: usize = 1_000;

#[derive(Serialize, ToSchema)]
pub(crate) struct MemoryList {
    memories: Vec<MemoryBody>,
    /// Pass as `after` for the next page, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_after: Option<u64>,
}

errors!(
    ListMemoriesErrors = [
        KEYED,
        PATH,
        USER,
        QUERY,
        VALUE,
        &[fails(
            404,
            "memory_not_found",
            "`after` is not one of the user's memories (any more)"
        )]
    ]
);

/// A user's memories
#[utoipa::path(
    get,
    path = "/v1/users/{user_id}/memories",
    operation_id = "list_memories",
    tag = "memories",
    params(("user_id" = String, Path, description = "The user"), ListQuery),
    responses(
        (status = 200, description = "A page of memories, oldest first", body = MemoryList),
        ListMemoriesErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(user_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<MemoryList>, ApiError> {
    let limit = query.limit;
    if !(1..=MAX_LIST_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "invalid_value",
            format!("limit must be between 1 and {MAX_LIST_LIMIT}"),
        ));
    }
    let memories = state.memories().clone();
    let tenant = caller.tenant().to_owned();
    // One more than asked, to learn whether another page follows.
    let mut listed = blocking(move || {
        let agent = query.agent_id.as_deref();
        memories.list(&tenant, &user_id, agent, query.after, limit + 1)
    })
    .await?;
    let more = listed.len() > limit;
    listed.truncate(limit);
    let next_after = more
        .then(|| listed.last().map(|memory| memory.id))
        .flatten();
    Ok(Json(MemoryList {
        memories: listed.into_iter().map(MemoryBody::from).collect(),
        next_after,
    }))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchBody {
    query: String,
    /// At most this many (1–50, default 10).
    #[serde(default = "default_k")]
    k: usize,
    agent_id: Option<String>,
    #[schema(value_type = Option<Vec<foreign::MemoryKind>>)]
    types: Option<Vec<MemoryKind>>,
    tags: Option<Vec<String>>,
}

fn default_k() -> usize {
    10
}

#[derive(Serialize, ToSchema)]
pub(crate) struct MemoryHitBody {
    #[serde(flatten)]
    memory: MemoryBody,
    score: f32,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct MemoryHits {
    hits: Vec<MemoryHitBody>,
}

impl MemoryHits {
    pub(crate) fn new(hits: Vec<MemoryHit>) -> Self {
        Self {
            hits: hits
                .into_iter()
                .map(|hit| MemoryHitBody {
                    memory: hit.memory.into(),
                    score: hit.score,
                })
                .collect(),
        }
    }
}

errors!(
    SearchMemoriesErrors = [
        KEYED,
        PATH,
        USER,
        JSON_BODY,
        VALUE,
        &[fails(
            422,
            "invalid_setting",
            "A tag is not one word of 1 to 32 characters, or there are more than 8"
        )]
    ]
);

/// Search a user's memories
///
/// By keywords and by meaning, fused; only memories the asking agent may see.
#[utoipa::path(
    post,
    path = "/v1/users/{user_id}/memories/search",
    operation_id = "search_memories",
    tag = "memories",
    params(("user_id" = String, Path, description = "The user")),
    request_body = SearchBody,
    responses((status = 200, description = "Best first", body = MemoryHits), SearchMemoriesErrors),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn search(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(user_id): ApiPath<String>,
    ApiJson(body): ApiJson<SearchBody>,
) -> Result<Json<MemoryHits>, ApiError> {
    let tenant = caller.tenant().to_owned();
    Ok(Json(search_for(&state, tenant, user_id, body).await?))
}

async fn search_for(
    state: &AppState,
    tenant: String,
    user_id: String,
    body: SearchBody,
) -> Result<MemoryHits, ApiError> {
    memlayer_store::validate_id("user_id", &user_id)?;
    let hits = state
        .agent()
        .tools()
        .recall(MemoryQuery {
            tenant,
            user_id,
            agent_id: body.agent_id,
            query: body.query,
            k: body.k,
            kinds: body.types,
            tags: body.tags,
        })
        .await?;
    Ok(MemoryHits::new(hits))
}

errors!(
    GetMemoryErrors = [
        KEYED,
        PATH,
        &[fails(
            404,
            "memory_not_found",
            "No such memory (or another user's)"
        )]
    ]
);

/// A memory
#[utoipa::path(
    get,
    path = "/v1/memories/{memory_id}",
    operation_id = "get_memory",
    tag = "memories",
    params(("memory_id" = u64, Path, description = "The memory's id")),
    responses(
        (status = 200, description = "The memory", body = MemoryBody),
        GetMemoryErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(memory_id): ApiPath<u64>,
) -> Result<Json<MemoryBody>, ApiError> {
    let memory = owned_memory(&state, caller.tenant(), caller.user(), memory_id)?;
    Ok(Json(memory.into()))
}

/// The memory of `tenant` with this id, if it belongs to `user` (any user's for `None`);
/// `404` otherwise, the same answer whether it does not exist or is another user's.
fn owned_memory(
    state: &AppState,
    tenant: &str,
    user: Option<&str>,
    memory_id: u64,
) -> Result<Memory, ApiError> {
    state
        .memories()
        .get(tenant, memory_id)?
        .filter(|memory| user.is_none_or(|user| memory.user_id == user))
        .ok_or_else(|| ApiError::NotFound {
            code: "memory_not_found",
            message: format!("no memory {memory_id} of this user"),
        })
}

errors!(
    ForgetMemoryErrors = [
        KEYED,
        PATH,
        WRITES,
        &[fails(
            404,
            "memory_not_found",
            "No such memory (or another user's)"
        )]
    ]
);

/// Forget a memory
///
/// Through the erasure coordinator: answers once no byte of it is left, or with `202` when
/// that takes longer than half the request timeout.
#[utoipa::path(
    delete,
    path = "/v1/memories/{memory_id}",
    operation_id = "forget_memory",
    tag = "memories",
    params(("memory_id" = u64, Path, description = "The memory's id")),
    responses(
        (status = 200, description = "Forgotten", body = ReceiptBody),
        (status = 202, description = "Still running; see Location", body = crate::api::erasure::Running),
        ForgetMemoryErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn forget(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(memory_id): ApiPath<u64>,
) -> Result<Response, ApiError> {
    let tenant = caller.tenant().to_owned();
    let running = state
        .agent()
        .tools()
        .start_forgetting(tenant, memory_id, caller.user())
        .await?;
    crate::api::erasure::wait_for(&state, running)
        .await?
        .answer(|receipt| Ok(Json(receipt).into_response()))
}

#[derive(Serialize, ToSchema)]
pub(crate) struct Ending {
    session_id: String,
    /// The conversation is being merged into the user's session memory in the background.
    merging: bool,
}

errors!(EndSessionErrors = [KEYED, PATH, SESSION]);

/// End a conversation
///
/// Merges the conversation into the rolling summary of its user's conversations with its
/// agent (session memory), in the background: the answer does not wait for the summary.
/// Ending a session twice merges it once. A session with no activity for the server's
/// `session_idle_timeout` is ended the same way without this call.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/end",
    tag = "memories",
    params(("session_id" = String, Path, description = "The session's id")),
    responses(
        (status = 202, description = "Merging", body = Ending),
        EndSessionErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn end_session(
    State(state): State<AppState>,
    // For a user-scoped key, the extractor has checked that the session is its user's.
    Caller(caller): Caller,
    ApiPath(session_id): ApiPath<String>,
) -> Result<(StatusCode, Json<Ending>), ApiError> {
    crate::api::erasure::require_session(&state, &caller, &session_id).await?;
    let contexts = state.contexts().clone();
    let (access, id) = (caller.access(), session_id.clone());
    tokio::spawn(async move {
        if let Err(err) = contexts.end_session(&access, &id).await {
            tracing::warn!(error = %err.for_log(), "could not merge the session into session memory");
        }
    });
    Ok((
        StatusCode::ACCEPTED,
        Json(Ending {
            session_id,
            merging: true,
        }),
    ))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct AgentQuery {
    /// The agent.
    agent_id: String,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct SessionMemoryBody {
    user_id: String,
    agent_id: String,
    text: String,
    /// The sessions merged into it, oldest first.
    sessions: Vec<String>,
    updated_at: Rfc3339,
}

errors!(
    SessionMemoryErrors = [
        KEYED,
        PATH,
        USER,
        QUERY,
        &[fails(
            404,
            "session_memory_not_found",
            "No conversation of this user with this agent was ended yet"
        )]
    ]
);

/// A user's session memory with an agent
#[utoipa::path(
    get,
    path = "/v1/users/{user_id}/session-memory",
    tag = "memories",
    params(("user_id" = String, Path, description = "The user"), AgentQuery),
    responses(
        (status = 200, description = "The rolling summary of their conversations", body = SessionMemoryBody),
        SessionMemoryErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn session_memory(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(user_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<AgentQuery>,
) -> Result<Json<SessionMemoryBody>, ApiError> {
    let (user, agent) = (user_id.clone(), query.agent_id.clone());
    let tenant = caller.tenant().to_owned();
    let memory = crate::api::read(&state, move |store| {
        store.memories().session_memory(&tenant, &user, &agent)
    })
    .await?
    .ok_or_else(|| ApiError::NotFound {
        code: "session_memory_not_found",
        message: "no conversation of this user with this agent was ended yet".into(),
    })?;
    Ok(Json(SessionMemoryBody {
        user_id,
        agent_id: query.agent_id,
        text: memory.text,
        sessions: memory.sessions,
        updated_at: Rfc3339(memory.updated_at),
    }))
}
