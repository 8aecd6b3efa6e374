//! Episodic lessons over HTTP: record an episode (a task attempt, its outcome, reflection
//! and lesson), list, get and delete episodes (deleting goes through the erasure
//! coordinator, so no byte of it is left), and the lessons a context shows for a task type.
//! Scoped like long-term memories: tenant-wide keys, another tenant's episode is `404`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use memlayer_erasure::Target;
use memlayer_memory::{ContextSettings, LessonQuery, build_lessons, list_episodes};
use memlayer_store::{Access, Episode, Outcome, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::api::erasure::{ReceiptBody, erase};
use crate::api::settings::levels;
use crate::extract::{ApiJson, ApiPath, ApiQuery, Tenant};
use crate::openapi::foreign;
use crate::openapi::responses::errors;
use crate::wire::Rfc3339;
use crate::{ApiError, AppState};

/// An episode on the wire.
#[derive(Serialize, ToSchema)]
pub(crate) struct EpisodeBody {
    episode_id: u64,
    user_id: String,
    /// `null`: every agent of the user learns from it.
    agent_id: Option<String>,
    task_type: String,
    description: String,
    #[schema(value_type = foreign::Outcome)]
    outcome: Outcome,
    reflection: String,
    lesson: String,
    /// Shown for every task type, not only its own.
    standing: bool,
    /// The session it was drawn from; erasing that session erases the episode.
    #[serde(skip_serializing_if = "Option::is_none")]
    source_session_id: Option<String>,
    created_at: Rfc3339,
}

impl From<Episode> for EpisodeBody {
    fn from(episode: Episode) -> Self {
        Self {
            episode_id: episode.id,
            user_id: episode.user_id,
            agent_id: episode.agent_id,
            task_type: episode.task_type,
            description: episode.description,
            outcome: episode.outcome,
            reflection: episode.reflection,
            lesson: episode.lesson,
            standing: episode.standing,
            source_session_id: episode.source_session,
            created_at: Rfc3339(episode.created_at),
        }
    }
}

/// An episode to record.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecordEpisode {
    /// The kind of task (an id: 1–128 characters of `A–Z a–z 0–9 . _ - : @ +`).
    task_type: String,
    /// What was attempted (1–4,000 characters).
    description: String,
    #[schema(value_type = foreign::Outcome)]
    outcome: Outcome,
    /// Why it went that way (at most 4,000 characters).
    #[serde(default)]
    reflection: String,
    /// What to do or avoid next time (1–1,000 characters).
    lesson: String,
    /// Show it for every task type.
    #[serde(default)]
    standing: bool,
    /// Only this agent learns from it; absent: every agent of the user.
    agent_id: Option<String>,
    /// The session of this user it was drawn from.
    source_session_id: Option<String>,
}

errors!(
    RecordEpisodeErrors = [
        KEYED,
        PATH,
        JSON_BODY,
        VALUE,
        WRITES,
        &[fails(
            404,
            "session_not_found",
            "`source_session_id` names no session of the tenant"
        )]
    ]
);

/// Record an episode
#[utoipa::path(
    post,
    path = "/v1/users/{user_id}/episodes",
    operation_id = "record_episode",
    tag = "episodes",
    params(("user_id" = String, Path, description = "The user")),
    request_body = RecordEpisode,
    responses(
        (status = 201, description = "Recorded", body = EpisodeBody),
        RecordEpisodeErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service"])),
)]
pub(crate) async fn record(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(user_id): ApiPath<String>,
    ApiJson(body): ApiJson<RecordEpisode>,
) -> Result<(StatusCode, Json<EpisodeBody>), ApiError> {
    let episode = Episode {
        id: 0,
        tenant,
        user_id,
        agent_id: body.agent_id,
        task_type: body.task_type,
        description: body.description,
        outcome: body.outcome,
        reflection: body.reflection,
        lesson: body.lesson,
        standing: body.standing,
        source_session: body.source_session_id,
        created_at: Timestamp::now(),
    };
    let id = state
        .store()
        .memories()
        .put_episode(episode.clone())
        .await?;
    Ok((StatusCode::CREATED, Json(Episode { id, ..episode }.into())))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// The agent asking: the user's episodes without an agent and its own. Absent: all.
    agent_id: Option<String>,
    /// Only episodes of this task type.
    task_type: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct EpisodeList {
    episodes: Vec<EpisodeBody>,
}

errors!(ListEpisodesErrors = [KEYED, PATH, QUERY]);

/// A user's episodes
#[utoipa::path(
    get,
    path = "/v1/users/{user_id}/episodes",
    operation_id = "list_episodes",
    tag = "episodes",
    params(("user_id" = String, Path, description = "The user"), ListQuery),
    responses((status = 200, description = "Oldest first", body = EpisodeList), ListEpisodesErrors),
    security(("bearerAuth" = ["tenant_admin", "service"])),
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(user_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<EpisodeList>, ApiError> {
    let listed = state
        .store()
        .read(move |store| {
            list_episodes(
                store,
                &tenant,
                &user_id,
                query.agent_id.as_deref(),
                query.task_type.as_deref(),
            )
        })
        .await?;
    Ok(Json(EpisodeList {
        episodes: listed.into_iter().map(EpisodeBody::from).collect(),
    }))
}

errors!(
    GetEpisodeErrors = [
        KEYED,
        PATH,
        &[fails(
            404,
            "episode_not_found",
            "No such episode in the tenant"
        )]
    ]
);

/// An episode
#[utoipa::path(
    get,
    path = "/v1/episodes/{episode_id}",
    operation_id = "get_episode",
    tag = "episodes",
    params(("episode_id" = u64, Path, description = "The episode's id")),
    responses(
        (status = 200, description = "The episode", body = EpisodeBody),
        GetEpisodeErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service"])),
)]
pub(crate) async fn get(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(episode_id): ApiPath<u64>,
) -> Result<Json<EpisodeBody>, ApiError> {
    let episode = crate::api::read(&state, move |store| {
        store.memories().episode(&tenant, episode_id)
    })
    .await?;
    episode
        .map(|episode| Json(episode.into()))
        .ok_or_else(|| episode_not_found(episode_id))
}

fn episode_not_found(episode_id: u64) -> ApiError {
    ApiError::NotFound {
        code: "episode_not_found",
        message: format!("no episode {episode_id} in this tenant"),
    }
}

errors!(
    DeleteEpisodeErrors = [
        KEYED,
        PATH,
        WRITES,
        &[fails(
            404,
            "episode_not_found",
            "No such episode in the tenant"
        )]
    ]
);

/// Delete an episode
///
/// Through the erasure coordinator: answers once no byte of it is left, or with `202` when
/// that takes longer than half the request timeout.
#[utoipa::path(
    delete,
    path = "/v1/episodes/{episode_id}",
    operation_id = "delete_episode",
    tag = "episodes",
    params(("episode_id" = u64, Path, description = "The episode's id")),
    responses(
        (status = 200, description = "Erased", body = ReceiptBody),
        (status = 202, description = "Still running; see Location", body = crate::api::erasure::Running),
        DeleteEpisodeErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service"])),
)]
pub(crate) async fn delete(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(episode_id): ApiPath<u64>,
) -> Result<Response, ApiError> {
    let owner = tenant.clone();
    let exists = crate::api::read(&state, move |store| {
        store.memories().episode(&owner, episode_id)
    })
    .await?;
    if exists.is_none() {
        return Err(episode_not_found(episode_id));
    }
    erase(
        &state,
        Access::tenant_wide(tenant),
        Target::Episode { episode_id },
    )
    .await?
    .answer(|receipt| Ok(Json(receipt).into_response()))
}

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct LessonsQuery {
    /// The kind of task; absent: the agent's saved `task_type`, if any (standing lessons
    /// only otherwise).
    task_type: Option<String>,
    /// The agent asking: its settings apply and it learns from the user's episodes without
    /// an agent and its own. Absent: the tenant's settings, every episode.
    agent_id: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct LessonsBody {
    user_id: String,
    task_type: Option<String>,
    /// The block a combined context shows (`Lessons from earlier tasks:` …); `null` when
    /// there is none.
    text: Option<String>,
    /// The episodes whose lessons are in it, in the order shown.
    episodes: Vec<u64>,
}

errors!(ListLessonsErrors = [KEYED, PATH, QUERY]);

/// The lessons for a task type
///
/// What a combined context's lessons layer shows: every standing lesson (oldest first),
/// then the task type's most recent `max_lessons` lessons (newest first), under
/// `lesson_tokens` (the settings in force for the agent).
#[utoipa::path(
    get,
    path = "/v1/users/{user_id}/lessons",
    operation_id = "list_lessons",
    tag = "episodes",
    params(("user_id" = String, Path, description = "The user"), LessonsQuery),
    responses((status = 200, description = "The rendered lessons", body = LessonsBody), ListLessonsErrors),
    security(("bearerAuth" = ["tenant_admin", "service"])),
)]
pub(crate) async fn lessons(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(user_id): ApiPath<String>,
    ApiQuery(query): ApiQuery<LessonsQuery>,
) -> Result<Json<LessonsBody>, ApiError> {
    let encoding = state.config().token_encoding;
    let user = user_id.clone();
    let (task_type, lessons) = state
        .store()
        .read(move |store| {
            let saved = levels(store, &tenant, query.agent_id.as_deref())?;
            let settings = ContextSettings::layered(saved.iter().flatten())?;
            let task_type = query.task_type.or(settings.task_type);
            let lessons = build_lessons(
                store,
                &LessonQuery {
                    tenant: &tenant,
                    user_id: &user,
                    agent_id: query.agent_id.as_deref(),
                    task_type: task_type.as_deref(),
                    max_lessons: settings.max_lessons,
                    max_tokens: settings.lesson_tokens,
                },
                encoding,
            )?;
            Ok::<_, ApiError>((task_type, lessons))
        })
        .await?;
    let (text, episodes) = lessons.map_or((None, Vec::new()), |l| (Some(l.text), l.episodes));
    Ok(Json(LessonsBody {
        user_id,
        task_type,
        text,
        episodes,
    }))
}
