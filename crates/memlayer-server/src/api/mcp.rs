//! The agent tools over the Model Context Protocol: `/v1/sessions/{session_id}/mcp` is an MCP
//! server (streamable HTTP transport, `rmcp`) whose tools are those of `GET /v1/tools`, with
//! the same schemas, run by the same code as `POST /v1/sessions/{session_id}/tools/call`.
//!
//! The session is in the path, as in the tool-call endpoint, rather than in each call's
//! arguments: the model sees exactly the tools' schemas and cannot name another
//! conversation, and an MCP host connects one conversation with one URL and the
//! `Authorization` header it already sends. The key is checked like any `/v1` request's
//! (`Caller`: a user-scoped key only for its own user's sessions).
//!
//! The transport runs stateless with JSON answers: every POST is one JSON-RPC message
//! answered on its own, with no MCP session kept between requests, so nothing is held for
//! a host that disappears, and load shedding, timeouts and metrics apply to each message as
//! to any request. A `GET` for a server-to-client event stream is `405`, which the
//! specification allows for a server that sends no unprompted messages.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use crate::api::erasure::require_session;
use crate::openapi::responses::errors;
use memlayer_agent::{SESSION_SEARCH_INSTRUCTION, definitions};
use memlayer_store::Access;

use crate::api::tools::execute;
use crate::extract::{ApiPath, Caller};
use crate::{ApiError, AppState};

/// The MCP server of one session, made for each request.
#[derive(Clone)]
struct SessionTools {
    state: AppState,
    /// The caller's reach: every tool call checks the session against it again.
    access: Access,
    session_id: String,
}

impl ServerHandler for SessionTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("memlayer", env!("CARGO_PKG_VERSION")))
            .with_instructions(SESSION_SEARCH_INSTRUCTION)
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let (access, session_id) = (self.access.clone(), self.session_id.clone());
        let result = match execute(&self.state, access, session_id, &request.name, arguments).await
        {
            Ok(result) => CallToolResult::structured(result),
            // The protocol reports an unknown tool as a request error; everything else is
            // the tool's own failure, shown to the model in the API's error shape so it can
            // correct its call.
            Err(ApiError::Invalid {
                code: "unknown_tool",
                message,
            }) => return Err(ErrorData::invalid_params(message, None)),
            Err(err) => CallToolResult::structured_error(
                serde_json::to_value(err.body()).unwrap_or(Value::Null),
            ),
        };
        Ok(result.into())
    }
}

/// The agent tools as MCP tools, from the same definitions `GET /v1/tools` serves.
fn tools() -> Vec<Tool> {
    let Value::Array(functions) = definitions() else {
        unreachable!("the definitions are a list");
    };
    functions
        .into_iter()
        .map(|mut definition| {
            let mut function = definition["function"].take();
            let text = |field: &str| function[field].as_str().unwrap_or_default().to_owned();
            let (name, description) = (text("name"), text("description"));
            let Value::Object(schema) = function["parameters"].take() else {
                unreachable!("every tool's parameters are a JSON object");
            };
            Tool::new(name, description, schema)
        })
        .collect()
}

errors!(
    McpErrors = [
        KEYED,
        PATH,
        SESSION,
        &[
            fails(
                400,
                "invalid_mcp_message",
                "The body is not a JSON-RPC message the server takes"
            ),
            fails(
                406,
                "not_acceptable",
                "The `Accept` header allows no JSON answer"
            ),
            fails(
                413,
                "payload_too_large",
                "The body is larger than the server takes (`max_body_bytes`)"
            ),
            fails(
                415,
                "unsupported_media_type",
                "The body is not sent as `application/json`"
            )
        ]
    ]
);

/// The agent tools over MCP
///
/// The Model Context Protocol's streamable HTTP transport (stateless, JSON answers): POST
/// one JSON-RPC message (`initialize`, `tools/list`, `tools/call`, notifications) with
/// `Accept: application/json, text/event-stream`. The tools are those of `GET /v1/tools`
/// and run as `POST /v1/sessions/{session_id}/tools/call` does, as the session's user and
/// agent.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/mcp",
    tag = "tools",
    params(("session_id" = String, Path, description = "The session the model is in")),
    request_body(content = Object, description = "One JSON-RPC 2.0 message"),
    responses(
        (status = 200, description = "The JSON-RPC response", body = Object),
        (status = 202, description = "A notification or response was accepted"),
        McpErrors,
    ),
    security(("bearerAuth" = ["tenant_admin", "service", "user"])),
)]
pub(crate) async fn mcp(
    State(state): State<AppState>,
    // For a user-scoped key, the extractor has checked that the session is its user's.
    Caller(caller): Caller,
    ApiPath(session_id): ApiPath<String>,
    mut request: Request,
) -> Result<Response, ApiError> {
    require_session(&state, &caller, &session_id).await?;
    accept_json(request.headers_mut());
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(state.config().max_body_bytes)
        // rmcp checks `Host` against loopback names by default, against DNS rebinding: a web
        // page making a browser send requests to a local server. Every request here carries
        // the API key, which a browser never adds on its own, and the operator chooses where
        // the server listens.
        .disable_allowed_hosts();
    let tools = SessionTools {
        state,
        access: caller.access(),
        session_id,
    };
    let service = StreamableHttpService::new(
        move || Ok(tools.clone()),
        NeverSessionManager::default().into(),
        config,
    );
    let response = service.handle(request).await.map(Body::new);
    if response.status().is_client_error() {
        return Err(transport_error(response).await);
    }
    Ok(response)
}

/// Lets a client that accepts JSON (or anything) in, as the transport asks for
/// `Accept: application/json, text/event-stream` even though every answer here is JSON. A
/// client that accepts neither still gets `406`.
fn accept_json(headers: &mut HeaderMap) {
    let accepts_json = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|range| range.split(';').next().unwrap_or_default().trim())
        .any(|range| matches!(range, "application/json" | "application/*" | "*/*"));
    if accepts_json || headers.get(header::ACCEPT).is_none() {
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
    }
}

/// The API's error for a request the MCP transport refused, which it answers in plain text
/// (the error shape every route keeps).
async fn transport_error(response: Response) -> ApiError {
    let status = response.status();
    // The transport's own refusals are one short line.
    let body = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .unwrap_or_default();
    let message = String::from_utf8_lossy(&body).trim().to_owned();
    match status {
        StatusCode::NOT_ACCEPTABLE => ApiError::NotAcceptable(message),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType(message),
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(message),
        StatusCode::METHOD_NOT_ALLOWED => ApiError::MethodNotAllowed,
        _ => ApiError::BadRequest {
            code: "invalid_mcp_message",
            message,
        },
    }
}
