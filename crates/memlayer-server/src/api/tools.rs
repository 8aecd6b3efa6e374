//! Agent tools: the memory tools as OpenAI function-calling schemas (`GET /v1/tools`) and an
//! endpoint that executes a model's tool call against a session, so an agent loop can pass
//! tool calls straight through. A call runs as the session's user and agent: a model can
//! only reach the memories and history of the conversation it is in. The MCP server
//! (`mcp.rs`) lists the same definitions and runs calls through the same [`execute`].

use axum::Json;
use axum::extract::State;
use memlayer_agent::{SESSION_SEARCH_INSTRUCTION, ToolOutcome, definitions, parse_call};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::api::erasure::{ReceiptBody, Running};
use crate::api::memories::{MemoryHits, Remembered};
use crate::api::read;
use crate::api::sessions::{Cleared, SearchResults};
use crate::extract::{ApiJson, ApiPath, Caller};
use crate::openapi::responses::errors;
use crate::{ApiError, AppState};
use memlayer_store::Access;

#[derive(Serialize, ToSchema)]
pub(crate) struct Tools {
    /// OpenAI function-calling definitions, ready for a chat request's `tools`.
    #[schema(value_type = Vec<Object>)]
    tools: Value,
    /// A system instruction that tells the model when to use `session_search`.
    system_instruction: &'static str,
}

errors!(ListToolsErrors = [KEYED]);

/// The agent tools
#[utoipa::path(
    get,
    path = "/v1/tools",
    operation_id = "list_tools",
    tag = "tools",
    responses((status = 200, description = "Tool definitions", body = Tools), ListToolsErrors),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn tools(
    // Any valid key: the definitions are the same for everyone, but no `/v1` route answers
    // without a key.
    Caller(_): Caller,
) -> Json<Tools> {
    Json(Tools {
        tools: definitions(),
        system_instruction: SESSION_SEARCH_INSTRUCTION,
    })
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolCall {
    /// The tool's name.
    pub(crate) name: String,
    /// Its arguments: a JSON object, or the JSON text a model returns in
    /// `tool_calls[].function.arguments`.
    #[schema(value_type = Object)]
    pub(crate) arguments: Value,
}

#[derive(Serialize, ToSchema)]
pub(crate) struct ToolResult {
    name: String,
    /// The result: the shape of the matching memory or session endpoint's answer
    /// (`memory_forget`: the erasure's receipt, or `{erasure_id, status: "running"}` when it
    /// outlasts half the request timeout).
    #[schema(value_type = Object)]
    result: Value,
    /// The result as JSON text, ready to send back as the `tool` message's content.
    content: String,
}

errors!(
    CallToolErrors = [
        KEYED,
        PATH,
        JSON_BODY,
        VALUE,
        SESSION,
        WRITES,
        crate::api::memories::MEMORY_TEXT,
        &[
            fails(
                404,
                "memory_not_found",
                "The call names no memory of the session's user"
            ),
            fails(409, "conflict", "The memory changed meanwhile"),
            fails(422, "unknown_tool", "No tool has this name"),
            fails(422, "invalid_arguments", "The arguments are not the tool's")
        ]
    ]
);

/// Run a tool call
///
/// Executes one tool call of a model against the session, as the session's user and agent.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/tools/call",
    operation_id = "call_tool",
    tag = "tools",
    params(("session_id" = String, Path, description = "The session the model is in")),
    request_body = ToolCall,
    responses(
        (status = 200, description = "The tool's result", body = ToolResult),
        CallToolErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn call(
    State(state): State<AppState>,
    // For a user-scoped key, the extractor has checked that the session is its user's.
    Caller(caller): Caller,
    ApiPath(session_id): ApiPath<String>,
    ApiJson(call): ApiJson<ToolCall>,
) -> Result<Json<ToolResult>, ApiError> {
    let result = execute(
        &state,
        caller.access(),
        session_id,
        &call.name,
        call.arguments,
    )
    .await?;
    Ok(Json(ToolResult {
        name: call.name,
        content: result.to_string(),
        result,
    }))
}

/// Runs the tool `name` with `arguments` in the session `session_id` of `tenant`, as the
/// session's user and agent, and answers its result as JSON.
/// Runs a tool call in session `session_id` as its user, if `access` reaches the session.
pub(crate) async fn execute(
    state: &AppState,
    access: Access,
    session_id: String,
    name: &str,
    arguments: Value,
) -> Result<Value, ApiError> {
    let parsed = parse_call(name, arguments)?;
    let tenant = access.tenant().to_owned();
    let session = read(state, move |store| {
        store
            .sessions()
            .session(&access, &session_id)?
            .ok_or(memlayer_store::StoreError::SessionNotFound { session_id })
    })
    .await?;
    let outcome = state
        .agent()
        .tools()
        .call(&tenant, &session, parsed)
        .await?;
    Ok(render(outcome))
}

/// A tool's outcome as JSON: the same shapes the memory and session endpoints answer. Runs
/// send it back to the model too (see `AppState::new`).
pub(crate) fn render(outcome: ToolOutcome) -> Value {
    let value = match outcome {
        ToolOutcome::Remembered { memory, action } => {
            serde_json::to_value(Remembered::new(memory, action))
        }
        ToolOutcome::Recalled(hits) => serde_json::to_value(MemoryHits::new(hits)),
        ToolOutcome::Forgotten(receipt) => serde_json::to_value(ReceiptBody::from(receipt)),
        ToolOutcome::Forgetting { erasure_id } => serde_json::to_value(Running::of(erasure_id)),
        ToolOutcome::Found {
            session_id,
            messages,
        } => serde_json::to_value(SearchResults::new(session_id, messages)),
        ToolOutcome::Cleared {
            session_id,
            load_from,
        } => serde_json::to_value(Cleared {
            session_id,
            load_from,
        }),
    };
    // These types serialise to JSON without fail (string keys, no custom serialisers).
    value.unwrap_or(Value::Null)
}
