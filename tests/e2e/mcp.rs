//! The agent tools over the Model Context Protocol's streamable HTTP transport: the official
//! SDK's client (`rmcp`) against the real server's `/v1/sessions/{session_id}/mcp`. It
//! initialises, lists the tools (the schemas `GET /v1/tools` serves), and runs each one,
//! checking its effect through the REST API; the transport refuses a missing or wrong key
//! with `401` and another user's session with `404`.

use memlayer_store::KeyRole;
use memlayer_tests::{TestServer, assert_error, json, send};
use reqwest::Method;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde_json::Value;
use tokio::runtime::Runtime;

type Client = RunningService<RoleClient, ()>;

/// An MCP client session with the server's MCP endpoint of `session`, sending `key`.
async fn connect(server: &TestServer, key: &str, session: &str) -> Result<Client, String> {
    let url = format!("{}/v1/sessions/{session}/mcp", server.base_url());
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(key),
    );
    ().serve(transport).await.map_err(|err| err.to_string())
}

async fn call(client: &Client, name: &'static str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object");
    };
    client
        .call_tool(CallToolRequestParams::new(name).with_arguments(arguments))
        .await
        .unwrap_or_else(|err| panic!("{name}: {err}"))
}

/// The structured result of a call that succeeded.
fn ok(result: CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(false), "{result:?}");
    result.structured_content.expect("a structured result")
}

#[test]
fn an_mcp_client_runs_every_agent_tool_over_streamable_http() {
    let server = TestServer::start();
    for (session, user) in [("alice-1", "alice"), ("bob-1", "bob")] {
        let (status, answer) = server.post(
            &format!("/v1/sessions/{session}/messages"),
            &json!({
                "user_id": user, "agent_id": "support", "role": "user",
                "content": "My parcel locker code is 4711, please note it",
            }),
        );
        assert_eq!(status, 201, "{answer}");
    }
    // Alice's own key: the MCP transport is open to user-scoped keys, for their sessions.
    let key = server.create_key("default", KeyRole::User, Some("alice"));
    let (_, rest) = server.get("/v1/tools");
    let runtime = Runtime::new().unwrap();

    let client = runtime
        .block_on(connect(&server, &key, "alice-1"))
        .expect("connect");
    let info = client.peer_info().expect("initialised");
    assert_eq!(info.server_info.as_ref().unwrap().name, "memlayer");
    assert_eq!(
        info.instructions.as_deref(),
        rest["system_instruction"].as_str()
    );
    let tools = runtime.block_on(client.list_all_tools()).unwrap();
    let listed: Vec<Value> = tools
        .iter()
        .map(|tool| {
            json!({
                "name": tool.name,
                "description": tool.description,
                "parameters": *tool.input_schema,
            })
        })
        .collect();
    let served: Vec<Value> = rest["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["function"].clone())
        .collect();
    assert_eq!(
        listed, served,
        "the MCP tools are the tools of GET /v1/tools"
    );
    // The five of them (named in `memories.rs`'s check of GET /v1/tools).
    assert_eq!(tools.len(), 5);

    // memory_remember, then memory_recall finds it, and so does the REST API.
    let remembered = ok(runtime.block_on(call(
        &client,
        "memory_remember",
        json!({ "text": "Prefers green tea over coffee", "type": "preference" }),
    )));
    assert_eq!(remembered["action"], "created", "{remembered}");
    assert_eq!(remembered["memory"]["user_id"], "alice");
    let memory_id = remembered["memory"]["memory_id"].as_u64().unwrap();
    let recalled = ok(runtime.block_on(call(
        &client,
        "memory_recall",
        json!({ "query": "which tea does she like" }),
    )));
    assert_eq!(recalled["hits"][0]["memory_id"], memory_id, "{recalled}");
    let (status, stored) = server.get(&format!("/v1/memories/{memory_id}"));
    assert_eq!(
        (status, &stored["text"]),
        (200, &json!("Prefers green tea over coffee"))
    );

    // session_search finds the message in this session only.
    let found = ok(runtime.block_on(call(
        &client,
        "session_search",
        json!({ "query": "locker 4711" }),
    )));
    assert_eq!(found["session_id"], "alice-1");
    assert_eq!(found["hits"].as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found["hits"][0]["index"], 0);

    // A failing call is the tool's error, in the API's error shape, for the model to read.
    let missing = runtime.block_on(call(&client, "memory_forget", json!({ "memory_id": 999 })));
    assert_eq!(missing.is_error, Some(true));
    assert_eq!(
        missing.structured_content.unwrap()["error"]["code"],
        "memory_not_found"
    );
    // An unknown tool is a protocol error.
    let unknown =
        runtime.block_on(client.call_tool(CallToolRequestParams::new("memory_overwrite")));
    assert!(
        matches!(&unknown, Err(ServiceError::McpError(err)) if err.message.contains("memory_overwrite")),
        "{unknown:?}"
    );

    // memory_forget removes it: gone from recall and from the REST API.
    let forgotten = ok(runtime.block_on(call(
        &client,
        "memory_forget",
        json!({ "memory_id": memory_id }),
    )));
    assert_eq!(forgotten["counts"]["memories"], 1, "{forgotten}");
    assert_error(
        &server.get(&format!("/v1/memories/{memory_id}")),
        404,
        "memory_not_found",
    );
    let recalled = ok(runtime.block_on(call(
        &client,
        "memory_recall",
        json!({ "query": "which tea does she like" }),
    )));
    assert_eq!(recalled["hits"], json!([]), "{recalled}");

    // clear_session moves the session's checkpoint past its messages.
    let cleared = ok(runtime.block_on(call(&client, "clear_session", json!({}))));
    assert_eq!(cleared, json!({ "session_id": "alice-1", "load_from": 1 }));
    let (_, session) = server.get("/v1/sessions/alice-1");
    assert_eq!(session["load_from"], 1, "{session}");
    runtime.block_on(client.cancel()).unwrap();

    // Alice's key does not reach Bob's session: not found, as a session that does not exist.
    for session in ["bob-1", "nobody-1"] {
        let Err(err) = runtime.block_on(connect(&server, &key, session)) else {
            panic!("{session}: connected with another user's key");
        };
        assert!(err.contains("404"), "{session}: {err}");
    }
}

#[test]
fn the_mcp_transport_needs_a_valid_key() {
    let server = TestServer::start();
    let (status, _) = server.post(
        "/v1/sessions/s1/messages",
        &json!({ "user_id": "alice", "agent_id": "support", "role": "user", "content": "hi" }),
    );
    assert_eq!(status, 201);
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": { "name": "e2e", "version": "1" },
        },
    });
    let post = |request: reqwest::blocking::RequestBuilder| {
        send(
            request
                .header("accept", "application/json, text/event-stream")
                .json(&initialize),
        )
    };
    let path = "/v1/sessions/s1/mcp";
    assert_error(
        &post(server.anonymous(Method::POST, path)),
        401,
        "unauthorized",
    );
    let unknown = format!("mlk_0123456789abcdef_{}", "0".repeat(64));
    assert_error(
        &post(server.anonymous(Method::POST, path).bearer_auth(&unknown)),
        401,
        "unauthorized",
    );
    // The same key through the SDK's client: the handshake fails on the 401.
    let runtime = Runtime::new().unwrap();
    let Err(err) = runtime.block_on(connect(&server, &unknown, "s1")) else {
        panic!("connected with an unknown key");
    };
    // The SDK's client reports a 401 as "Auth required".
    assert!(err.contains("Auth required"), "{err}");
    // With the admin key the very same request is answered.
    let (status, answer) = post(server.request(Method::POST, path));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["result"]["serverInfo"]["name"], "memlayer",
        "{answer}"
    );
    // Every answer is JSON, so a client that accepts JSON (or says nothing) is answered too;
    // one that accepts neither JSON nor events gets the API's error shape, as does a body
    // that is no JSON-RPC message.
    for accept in [None, Some("application/json"), Some("*/*")] {
        let mut request = server.request(Method::POST, path).json(&initialize);
        if let Some(accept) = accept {
            request = request.header("accept", accept);
        }
        let (status, answer) = send(request);
        assert_eq!(status, 200, "{accept:?}: {answer}");
    }
    let html_only = server
        .request(Method::POST, path)
        .header("accept", "text/html")
        .json(&initialize);
    assert_error(&send(html_only), 406, "not_acceptable");
    let (status, answer) = send(
        server
            .request(Method::POST, path)
            .header("accept", "application/json")
            .json(&json!({ "hello": "world" })),
    );
    assert!((400..500).contains(&status), "{status}: {answer}");
    assert!(answer["error"]["code"].is_string(), "{answer}");
}
