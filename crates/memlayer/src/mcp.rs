//! `memlayer mcp`: the agent tools as an MCP server on stdin and stdout, for MCP hosts that
//! start their servers as processes. It is a bridge to a running `memlayer serve`: every
//! message goes to the server's `/v1/sessions/{session_id}/mcp` (streamable HTTP) with the
//! given key, and the answer comes back unchanged.
//!
//! It bridges rather than opening the data directory itself, as `memlayer keys` does: the
//! server holds the store file exclusively, and the conversations whose history the tools
//! search are appended through that server while the host talks to the model. A bridge
//! needs neither the embedding model nor the data directory, and runs the very code the
//! HTTP transport runs.

use anyhow::Context;
use clap::Args;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceError, ServiceExt};

/// Flags of `memlayer mcp`.
#[derive(Args)]
pub(crate) struct McpArgs {
    /// The running server's base URL (plain HTTP).
    #[arg(long, env = "MEMLAYER_URL", default_value = "http://127.0.0.1:7700")]
    url: String,
    /// The API key the server is called with. A user-scoped key reaches only its user's
    /// sessions.
    #[arg(long, env = "MEMLAYER_KEY", hide_env_values = true)]
    key: String,
    /// The session (conversation) the tools act in, as its user and agent.
    #[arg(long, env = "MEMLAYER_SESSION")]
    session: String,
}

/// The stdio server: each request is sent on to the running server.
struct Bridge {
    upstream: RunningService<RoleClient, ()>,
    info: ServerConfig,
}

impl ServerHandler for Bridge {
    fn get_info(&self) -> ServerConfig {
        self.info.clone()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.upstream
            .list_tools(request)
            .await
            .map_err(upstream_error)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.upstream
            .call_tool_once(request)
            .await
            .map_err(upstream_error)
    }
}

/// The server's own protocol errors pass through; a failure to reach it becomes an internal
/// error naming what happened.
fn upstream_error(err: ServiceError) -> ErrorData {
    match err {
        ServiceError::McpError(err) => err,
        other => ErrorData::internal_error(format!("memlayer server: {other}"), None),
    }
}

pub(crate) fn run(args: McpArgs) -> anyhow::Result<()> {
    // The id goes into the URL's path: only the id alphabet, so it cannot name another route.
    memlayer_store::validate_id("session", &args.session)?;
    let endpoint = format!(
        "{}/v1/sessions/{}/mcp",
        args.url.trim_end_matches('/'),
        args.session
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(endpoint.as_str()).auth_header(args.key),
        );
        // Connecting first (the MCP handshake with the server) makes a wrong URL, key or
        // session fail here, with a message, rather than at the host's first tool call.
        let upstream = ()
            .serve(transport)
            .await
            .with_context(|| format!("cannot connect to {endpoint}"))?;
        let instructions = upstream
            .peer_info()
            .and_then(|info| info.instructions.clone());
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("memlayer", env!("CARGO_PKG_VERSION")));
        if let Some(instructions) = instructions {
            info = info.with_instructions(instructions);
        }
        // The server only: the session in the endpoint is an id the host chose.
        tracing::info!(server = %args.url, "serving the agent tools on stdio");
        let bridge = Bridge { upstream, info };
        let served = bridge
            .serve(rmcp::transport::stdio())
            .await
            .context("the MCP handshake on stdio failed")?;
        // Until the host closes stdin.
        served.waiting().await.context("the stdio server failed")?;
        Ok(())
    })
}
