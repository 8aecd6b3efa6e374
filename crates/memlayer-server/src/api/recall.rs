//! Hybrid recall: `POST /v1/recall` searches a session, or every session of a user, by
//! keywords and by meaning.

use axum::Json;
use axum::extract::State;
use memlayer_index::{Excluded, MAX_RECALL_HITS, RecallQuery, Scope};
use memlayer_store::{Access, Role};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::extract::{ApiJson, Caller};
use crate::openapi::responses::errors;
use crate::wire::{MessageBody, parse_bound};
use crate::{ApiError, AppState};

/// Exactly one scope: `session_id`, or `user_id` (with an optional `agent_id`).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecallRequest {
    /// What to find, by meaning and by words.
    query: String,
    /// How many hits.
    #[serde(default = "default_k")]
    #[schema(default = 10, minimum = 1, maximum = 50)]
    k: usize,
    /// Search this session only.
    session_id: Option<String>,
    /// Search every session of this user.
    user_id: Option<String>,
    /// With `user_id`: only the sessions with this agent.
    agent_id: Option<String>,
    /// Only messages of these roles.
    #[schema(value_type = Option<Vec<crate::openapi::foreign::Role>>)]
    roles: Option<Vec<Role>>,
    /// RFC 3339; only messages at or after it.
    after: Option<String>,
    /// RFC 3339; only messages before it.
    before: Option<String>,
    /// Message indices to leave out (the turns already in the prompt), of the session
    /// `session_id` or, in a user scope, `exclude_session_id` names.
    #[serde(default, deserialize_with = "crate::wire::int64s")]
    exclude_indices: Vec<u64>,
    exclude_session_id: Option<String>,
}

fn default_k() -> usize {
    10
}

impl RecallRequest {
    /// The query this request asks for in `tenant`, after every check that needs no state:
    /// `k`'s range, a non-empty query, exactly one valid scope, timestamps.
    pub(crate) fn into_query(self, access: Access) -> Result<RecallQuery, ApiError> {
        if !(1..=MAX_RECALL_HITS).contains(&self.k) {
            return Err(ApiError::invalid(
                "invalid_value",
                format!("k must be between 1 and {MAX_RECALL_HITS}"),
            ));
        }
        if self.query.trim().is_empty() {
            return Err(ApiError::invalid(
                "invalid_value",
                "query must not be empty",
            ));
        }
        let exclude = match (
            self.exclude_indices.is_empty(),
            self.exclude_session_id.or_else(|| self.session_id.clone()),
        ) {
            (true, _) => None,
            (false, Some(session_id)) => Some(Excluded {
                session_id,
                indices: self.exclude_indices,
            }),
            (false, None) => {
                return Err(ApiError::invalid(
                    "invalid_value",
                    "exclude_indices needs a session: give session_id or exclude_session_id",
                ));
            }
        };
        let scope = match (self.session_id, self.user_id, self.agent_id) {
            (Some(session_id), None, None) => {
                memlayer_store::validate_id("session_id", &session_id)?;
                Scope::Session { session_id }
            }
            (None, Some(user_id), agent_id) => {
                memlayer_store::validate_id("user_id", &user_id)?;
                if let Some(agent) = &agent_id {
                    memlayer_store::validate_id("agent_id", agent)?;
                }
                Scope::User { user_id, agent_id }
            }
            _ => {
                return Err(ApiError::invalid(
                    "invalid_value",
                    "give exactly one scope: session_id, or user_id with an optional agent_id",
                ));
            }
        };
        Ok(RecallQuery {
            access,
            scope,
            query: self.query,
            k: self.k,
            roles: self.roles,
            after: self
                .after
                .map(|text| parse_bound("after", &text))
                .transpose()?,
            before: self
                .before
                .map(|text| parse_bound("before", &text))
                .transpose()?,
            exclude,
        })
    }
}

/// A message found, with its scores.
#[derive(Serialize, ToSchema)]
#[schema(as = RecallHit)]
pub(crate) struct Hit {
    session_id: String,
    #[serde(flatten)]
    message: MessageBody,
    score: f32,
    /// Which retrievers found it, with its 1-based rank in each.
    #[serde(skip_serializing_if = "Option::is_none")]
    keyword_rank: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vector_rank: Option<u32>,
}

/// The best hits first.
#[derive(Serialize, ToSchema)]
pub(crate) struct RecallResponse {
    hits: Vec<Hit>,
    /// Why the answer may be incomplete, when it may be.
    #[serde(skip_serializing_if = "Option::is_none")]
    degraded: Option<String>,
}

errors!(RecallErrors = [KEYED, JSON_BODY, VALUE, USER, SESSION]);

/// Hybrid recall
///
/// Finds earlier messages by meaning and by words in one session or across a user's
/// sessions, fusing keyword (BM25) and vector rankings. Waits briefly until earlier appends
/// are indexed; if embedding is behind, `degraded` says so.
#[utoipa::path(
    post,
    path = "/v1/recall",
    tag = "recall",
    request_body = RecallRequest,
    responses((status = 200, description = "The hits, best first", body = RecallResponse), RecallErrors),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn recall(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiJson(request): ApiJson<RecallRequest>,
) -> Result<Json<RecallResponse>, ApiError> {
    let query = request.into_query(caller.access())?;
    // A user-scoped key recalls from its own user's sessions only: naming another user is
    // `404` here; another user's session is not found by the recall itself.
    if let Scope::User { user_id, .. } = &query.scope {
        caller.check_user(user_id)?;
    }
    let recalled = state.recall().recall(query).await?;
    Ok(Json(RecallResponse {
        hits: recalled
            .hits
            .into_iter()
            .map(|hit| Hit {
                session_id: hit.session.session_id,
                message: hit.message.into(),
                score: hit.score,
                keyword_rank: hit.keyword_rank,
                vector_rank: hit.vector_rank,
            })
            .collect(),
        degraded: recalled.degraded,
    }))
}
