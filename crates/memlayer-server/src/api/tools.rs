//! Agent tools: the memory tools as OpenAI function-calling schemas (`GET /v1/tools`) and an
//! endpoint that executes a model's tool call against a session, so an agent loop can pass
//! tool calls straight through. A call runs as the session's user and agent: a model can
//! only reach the memories and history of the conversation it is in. The definitions and
//! `execute` are also what the MCP server (`api/mcp.rs`) lists and runs.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::api::memories::{RememberBody, SearchBody, forget_for, remember_for, search_for};
use crate::api::read;
use crate::extract::{ApiJson, ApiPath, Caller};
use crate::{ApiError, AppState};

/// What the model is told about `session_search`, so it uses the tool when the answer lies
/// in the conversation's past rather than guessing.
pub(crate) const SESSION_SEARCH_INSTRUCTION: &str = "Parts of this conversation may not be in your \
context: older turns are summarised or left out. When the user refers to something said \
earlier that you cannot see (a name, a number, a decision, \"as I told you\"), call \
session_search with a few distinctive words before answering, instead of guessing.";

/// One agent tool: its name, what the model is told about it, and the JSON Schema of its
/// arguments. `GET /v1/tools` serves them as OpenAI function definitions and the MCP server
/// lists them as MCP tools; both views are built from these.
pub(crate) struct ToolDefinition {
    pub(crate) name: &'static str,
    pub(crate) description: &'static str,
    pub(crate) parameters: Value,
}

/// The agent tools, in the order they are listed.
pub(crate) fn definitions() -> Vec<ToolDefinition> {
    let tool = |name, description, parameters| ToolDefinition {
        name,
        description,
        parameters,
    };
    vec![
        tool(
            "memory_remember",
            "Remember a durable fact, preference, relationship or instruction about the user \
             for future conversations. Restating or correcting something already remembered \
             updates it.",
            json!({ "type": "object", "additionalProperties": false, "required": ["text", "type"],
            "properties": {
                "text": { "type": "string", "description": "One short self-contained statement" },
                "type": { "type": "string", "enum": ["fact", "preference", "relationship", "instruction"] },
                "tags": { "type": "array", "items": { "type": "string" }, "maxItems": 8 },
                "agent_only": { "type": "boolean", "description": "Only this agent may see it (default: every agent of the user)" },
            }}),
        ),
        tool(
            "memory_recall",
            "Search what is remembered about the user.",
            json!({ "type": "object", "additionalProperties": false, "required": ["query"],
            "properties": {
                "query": { "type": "string" },
                "k": { "type": "integer", "minimum": 1, "maximum": 50, "default": 10 },
                "types": { "type": "array", "items": { "type": "string", "enum": ["fact", "preference", "relationship", "instruction"] } },
                "tags": { "type": "array", "items": { "type": "string" } },
            }}),
        ),
        tool(
            "memory_forget",
            "Forget one remembered item, by the memory_id memory_recall returned.",
            json!({ "type": "object", "additionalProperties": false, "required": ["memory_id"],
                "properties": { "memory_id": { "type": "integer", "minimum": 1 } }}),
        ),
        tool(
            "session_search",
            SESSION_SEARCH_INSTRUCTION,
            json!({ "type": "object", "additionalProperties": false, "required": ["query"],
            "properties": {
                "query": { "type": "string", "description": "Words to find, case-insensitively" },
                "limit": { "type": "integer", "minimum": 1, "maximum": 50, "default": 10 },
            }}),
        ),
        tool(
            "clear_session",
            "Start the conversation afresh: later context leaves out everything said so far \
             (it stays stored). Only when the user asks to start over.",
            json!({ "type": "object", "additionalProperties": false, "properties": {} }),
        ),
    ]
}

#[derive(Serialize, ToSchema)]
pub(crate) struct Tools {
    /// OpenAI function-calling definitions, ready for a chat request's `tools`.
    #[schema(value_type = Vec<Object>)]
    tools: Value,
    /// A system instruction that tells the model when to use `session_search`.
    system_instruction: &'static str,
}

/// The agent tools
#[utoipa::path(
    get,
    path = "/v1/tools",
    tag = "tools",
    responses((status = 200, description = "Tool definitions", body = Tools)),
)]
pub(crate) async fn tools(
    // Any valid key: the definitions are the same for everyone, but no `/v1` route answers
    // without a key.
    Caller(_): Caller,
) -> Json<Tools> {
    let tools = definitions()
        .into_iter()
        .map(|tool| {
            json!({ "type": "function", "function": {
                "name": tool.name, "description": tool.description, "parameters": tool.parameters,
            }})
        })
        .collect();
    Json(Tools {
        tools: Value::Array(tools),
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
    /// The result.
    #[schema(value_type = Object)]
    result: Value,
    /// The result as JSON text, ready to send back as the `tool` message's content.
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RememberArgs {
    text: String,
    #[serde(rename = "type")]
    kind: Value,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    agent_only: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecallArgs {
    query: String,
    k: Option<usize>,
    types: Option<Value>,
    tags: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForgetArgs {
    memory_id: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchArgs {
    query: String,
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    10
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// Run a tool call
///
/// Executes one tool call of a model against the session, as the session's user and agent.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/tools/call",
    tag = "tools",
    params(("session_id" = String, Path, description = "The session the model is in")),
    request_body = ToolCall,
    responses(
        (status = 200, description = "The tool's result", body = ToolResult),
        (status = 404, description = "No such session or memory", body = crate::error::ErrorBody),
    ),
)]
pub(crate) async fn call(
    State(state): State<AppState>,
    // For a user-scoped key, the extractor has checked that the session is its user's.
    Caller(caller): Caller,
    ApiPath(session_id): ApiPath<String>,
    ApiJson(call): ApiJson<ToolCall>,
) -> Result<Json<ToolResult>, ApiError> {
    let tenant = caller.tenant().to_owned();
    let result = execute(&state, tenant, session_id, &call.name, call.arguments).await?;
    Ok(Json(ToolResult {
        name: call.name,
        content: result.to_string(),
        result,
    }))
}

/// Runs one tool call of a model in a session, as the session's user and agent: a model
/// reaches only the memories and history of the conversation it is in. The one
/// implementation behind `POST /v1/sessions/{session_id}/tools/call` and the MCP server's
/// `tools/call`. The caller has checked that its key may act in the session.
pub(crate) async fn execute(
    state: &AppState,
    tenant: String,
    session_id: String,
    name: &str,
    arguments: Value,
) -> Result<Value, ApiError> {
    let parsed = parse_call(name, arguments)?;
    let (owner_tenant, id) = (tenant.clone(), session_id.clone());
    let session = read(state, move |store| {
        store
            .session(&owner_tenant, &id)?
            .ok_or(memlayer_store::StoreError::SessionNotFound { session_id: id })
    })
    .await?;
    Ok(match parsed {
        Parsed::Remember(args) => {
            let body = RememberBody::from_tool(
                args.text,
                args.kind,
                args.tags,
                args.agent_only.then(|| session.agent_id.clone()),
            )?;
            to_value(remember_for(state, tenant, session.user_id, body).await?)
        }
        Parsed::Recall(args) => {
            let body = SearchBody::from_tool(
                args.query,
                args.k,
                Some(session.agent_id),
                args.types,
                args.tags,
            )?;
            to_value(search_for(state, tenant, session.user_id, body).await?)
        }
        // A model may only forget the memories of the user it talks to.
        Parsed::Forget(args) => {
            to_value(forget_for(state, tenant, Some(&session.user_id), args.memory_id).await?)
        }
        Parsed::Search(args) => to_value(
            crate::api::sessions::search(state, tenant, session_id, args.query, args.limit).await?,
        ),
        Parsed::Clear => {
            let load_from = state.store().clear_session(&tenant, &session_id).await?;
            json!({ "session_id": session_id, "load_from": load_from })
        }
    })
}

/// A tool call's arguments, parsed for the tool it names.
pub(crate) enum Parsed {
    Remember(RememberArgs),
    Recall(RecallArgs),
    Forget(ForgetArgs),
    Search(SearchArgs),
    Clear,
}

/// Parses `arguments` (an object, or the JSON text a model returns) for the tool `name`;
/// an unknown tool or arguments it does not take are refused before anything runs.
pub(crate) fn parse_call(name: &str, arguments: Value) -> Result<Parsed, ApiError> {
    let arguments = match arguments {
        Value::String(text) => serde_json::from_str(&text).map_err(|err| {
            ApiError::invalid(
                "invalid_arguments",
                format!("arguments are not JSON: {err}"),
            )
        })?,
        other => other,
    };
    Ok(match name {
        "memory_remember" => Parsed::Remember(parse(arguments)?),
        "memory_recall" => Parsed::Recall(parse(arguments)?),
        "memory_forget" => Parsed::Forget(parse(arguments)?),
        "session_search" => Parsed::Search(parse(arguments)?),
        "clear_session" => {
            let NoArgs {} = parse(arguments)?;
            Parsed::Clear
        }
        other => {
            return Err(ApiError::invalid(
                "unknown_tool",
                format!("no tool named {other:?}; GET /v1/tools lists them"),
            ));
        }
    })
}

fn parse<T: serde::de::DeserializeOwned>(arguments: Value) -> Result<T, ApiError> {
    serde_json::from_value(arguments)
        .map_err(|err| ApiError::invalid("invalid_arguments", err.to_string()))
}

fn to_value(result: impl Serialize) -> Value {
    serde_json::to_value(result).unwrap_or(Value::Null)
}
