//! `fake-upstream`: `memlayer_llm::FakeUpstream` as a process, for the tests of clients in
//! other languages (`cargo xtask clients`), which run the real server as a process and so
//! need the fake as one too. It prints one line, `{"base_url": ..., "control": ...}`, and
//! serves until its standard input closes (its parent went away, whichever way):
//!
//! - at `base_url`, the fake model, exactly as the Rust tests meet it;
//! - at `control`, `POST /replies` queues a reply — `{"text"}`, `{"tool_calls": [...]}` in
//!   OpenAI's shape, or `{"error": {"status", "message", "type", "code"}}`, each with an
//!   optional `chunk_delay_ms` — and `GET /requests` answers every request the fake received
//!   as `[{"method", "path", "body"}]`. With no reply queued the fake answers `500`.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use memlayer_llm::{FakeUpstream, Reply, ToolCall};
use serde::Deserialize;
use serde_json::{Value, json};

/// A reply to queue, as the control endpoint takes it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    text: Option<String>,
    tool_calls: Option<Vec<ToolCall>>,
    error: Option<ScriptedError>,
    #[serde(default)]
    chunk_delay_ms: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedError {
    status: u16,
    message: String,
    #[serde(rename = "type")]
    kind: String,
    code: Option<String>,
}

impl Script {
    fn reply(self) -> Result<Reply, String> {
        let reply = match (self.text, self.tool_calls, self.error) {
            (Some(text), None, None) => Reply::text(&text),
            (None, Some(calls), None) => Reply::tool_calls(calls),
            (None, None, Some(error)) => {
                if !(400..600).contains(&error.status) {
                    return Err(format!("{} is not an error status", error.status));
                }
                Reply::error(
                    error.status,
                    &error.message,
                    &error.kind,
                    error.code.as_deref(),
                )
            }
            _ => return Err("give one of text, tool_calls or error".to_owned()),
        };
        Ok(reply.with_chunk_delay(Duration::from_millis(self.chunk_delay_ms)))
    }
}

async fn push(
    State(upstream): State<Arc<FakeUpstream>>,
    Json(script): Json<Script>,
) -> Result<StatusCode, (StatusCode, Json<Value>)> {
    let reply = script.reply().map_err(|error| {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({ "error": error })),
        )
    })?;
    upstream.push(reply);
    // No body at all: a `204` with one (even `null`) leaves some clients waiting for it.
    Ok(StatusCode::NO_CONTENT)
}

async fn requests(State(upstream): State<Arc<FakeUpstream>>) -> Json<Value> {
    let requests = upstream.requests().into_iter().map(
        |request| json!({ "method": request.method, "path": request.path, "body": request.body }),
    );
    Json(Value::Array(requests.collect()))
}

fn main() -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let upstream = Arc::new(FakeUpstream::start().await);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let control = axum::Router::new()
            .route("/replies", post(push))
            .route("/requests", get(requests))
            .with_state(Arc::clone(&upstream));
        let control_url = format!("http://{}", listener.local_addr()?);
        println!(
            "{}",
            json!({ "base_url": upstream.base_url(), "control": control_url })
        );
        let (closed, stdin_closed) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            // Reads until end of file: the parent closed the pipe or exited.
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            let _ = closed.send(());
        });
        axum::serve(listener, control)
            .with_graceful_shutdown(async {
                let _ = stdin_closed.await;
            })
            .await
    })
}
