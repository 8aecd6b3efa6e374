//! The client against the fake upstream over real HTTP on 127.0.0.1: what it sends, what it
//! accepts from each kind of server, and how every failure reaches the caller.

use std::time::Duration;

use expect_test::{Expect, expect};
use serde_json::json;

use crate::{
    ChatClient, ChatRequest, Completion, FakeUpstream, FinishReason, LlmConfig, LlmError, Message,
    Reply, StreamDelta, Tool, ToolCall, ToolChoice, Usage,
};

const KEY: &str = "sk-test-0123456789abcdef";

fn hello() -> ChatRequest {
    ChatRequest::new(vec![Message::user("Hello there")])
}

async fn complete_with(reply: Reply) -> (FakeUpstream, Result<Completion, LlmError>) {
    let upstream = FakeUpstream::start().await;
    upstream.push(reply);
    let client = ChatClient::new(upstream.config()).expect("valid config");
    let result = client.complete(&hello()).await;
    (upstream, result)
}

fn check_json(actual: &serde_json::Value, expected: Expect) {
    expected.assert_eq(&serde_json::to_string_pretty(actual).expect("JSON renders"));
}

fn weather_call() -> ToolCall {
    ToolCall {
        id: "call_abc".to_owned(),
        name: "get_weather".to_owned(),
        arguments: r#"{"city":"Zürich"}"#.to_owned(),
    }
}

/// A client's own fields pass through (a `tools` entry with a field `Tool` lacks, `top_p`),
/// and none of them replaces what the request, the config or the stream set.
#[tokio::test]
async fn extra_fields_are_sent_as_they_are_and_never_override_the_request() {
    let upstream = FakeUpstream::start().await;
    upstream.push(Reply::text("ok"));
    let client = ChatClient::new(upstream.config()).expect("valid config");
    let extra = json!({
        "top_p": 0.9,
        "tools": [{ "type": "function", "function": { "name": "f", "strict": true, "parameters": {} } }],
        "model": "gpt-elsewhere",
        "temperature": 2.0,
        "stream": false,
        "messages": [],
    });
    let request = ChatRequest {
        temperature: Some(0.5),
        extra: serde_json::from_value(extra).expect("an object"),
        ..hello()
    };
    let mut stream = client.stream(&request).await.expect("stream");
    while stream.next_delta().await.expect("delta").is_some() {}

    let body = &upstream.requests()[0].body;
    assert_eq!(body["top_p"], 0.9);
    assert_eq!(body["tools"][0]["function"]["strict"], true);
    assert_eq!(
        (&body["model"], &body["temperature"], &body["stream"]),
        (&json!("fake-model"), &json!(0.5), &json!(true))
    );
    assert_eq!(body["messages"][0]["content"], "Hello there");
}

#[tokio::test]
async fn request_body_has_the_openai_shape() {
    let upstream = FakeUpstream::start().await;
    upstream.push(Reply::text("ok"));
    let config = LlmConfig {
        max_tokens: Some(256),
        temperature: Some(0.7),
        ..upstream.config()
    };
    let client = ChatClient::new(config).expect("valid config");
    let request = ChatRequest {
        messages: vec![
            Message::system("Be brief."),
            Message::user("Weather in Zürich?"),
            Message::assistant_tool_calls(vec![weather_call()]),
            Message::tool_result("call_abc", "12°C"),
        ],
        tools: vec![Tool {
            name: "get_weather".to_owned(),
            description: Some("Current weather".to_owned()),
            parameters: json!({ "type": "object", "properties": { "city": { "type": "string" } } }),
        }],
        tool_choice: Some(ToolChoice::Function("get_weather".to_owned())),
        // The request's own value wins over the config's.
        temperature: Some(0.0),
        max_tokens: None,
        extra: serde_json::Map::new(),
    };
    client.complete(&request).await.expect("completion");

    let requests = upstream.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].header("content-type"), Some("application/json"));
    check_json(
        &requests[0].body,
        expect![[r#"
            {
              "max_tokens": 256,
              "messages": [
                {
                  "content": "Be brief.",
                  "role": "system"
                },
                {
                  "content": "Weather in Zürich?",
                  "role": "user"
                },
                {
                  "content": null,
                  "role": "assistant",
                  "tool_calls": [
                    {
                      "function": {
                        "arguments": "{\"city\":\"Zürich\"}",
                        "name": "get_weather"
                      },
                      "id": "call_abc",
                      "type": "function"
                    }
                  ]
                },
                {
                  "content": "12°C",
                  "role": "tool",
                  "tool_call_id": "call_abc"
                }
              ],
              "model": "fake-model",
              "temperature": 0.0,
              "tool_choice": {
                "function": {
                  "name": "get_weather"
                },
                "type": "function"
              },
              "tools": [
                {
                  "function": {
                    "description": "Current weather",
                    "name": "get_weather",
                    "parameters": {
                      "properties": {
                        "city": {
                          "type": "string"
                        }
                      },
                      "type": "object"
                    }
                  },
                  "type": "function"
                }
              ]
            }"#]],
    );
}

#[tokio::test]
async fn minimal_request_sends_only_model_and_messages() {
    let (upstream, result) = complete_with(Reply::text("ok")).await;
    result.expect("completion");
    check_json(
        &upstream.requests()[0].body,
        expect![[r#"
            {
              "messages": [
                {
                  "content": "Hello there",
                  "role": "user"
                }
              ],
              "model": "fake-model"
            }"#]],
    );
}

#[tokio::test]
async fn bearer_token_only_with_a_key() {
    let upstream = FakeUpstream::start().await;
    upstream.push(Reply::text("one")).push(Reply::text("two"));

    let without = ChatClient::new(upstream.config()).expect("valid config");
    without.complete(&hello()).await.expect("completion");
    let with = ChatClient::new(LlmConfig {
        api_key: Some(KEY.to_owned()),
        ..upstream.config()
    })
    .expect("valid config");
    with.complete(&hello()).await.expect("completion");

    let requests = upstream.requests();
    assert_eq!(requests[0].header("authorization"), None);
    assert_eq!(
        requests[1].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
}

#[tokio::test]
async fn trailing_slash_in_base_url_is_tolerated() {
    let upstream = FakeUpstream::start().await;
    upstream.push(Reply::text("ok"));
    let config = LlmConfig {
        base_url: format!("{}/", upstream.base_url()),
        ..upstream.config()
    };
    let client = ChatClient::new(config).expect("valid config");
    client.complete(&hello()).await.expect("completion");
    assert_eq!(upstream.requests()[0].path, "/v1/chat/completions");
}

#[tokio::test]
async fn parses_a_realistic_openai_response() {
    // As api.openai.com sends it, with the fields this crate does not read.
    let body = r#"{
      "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
      "object": "chat.completion",
      "created": 1741569952,
      "model": "gpt-4.1-2025-04-14",
      "choices": [{
        "index": 0,
        "message": {
          "role": "assistant",
          "content": "Hello! How can I assist you today?",
          "refusal": null,
          "annotations": []
        },
        "logprobs": null,
        "finish_reason": "stop"
      }],
      "usage": {
        "prompt_tokens": 19,
        "completion_tokens": 10,
        "total_tokens": 29,
        "prompt_tokens_details": { "cached_tokens": 0, "audio_tokens": 0 },
        "completion_tokens_details": { "reasoning_tokens": 0, "audio_tokens": 0 }
      },
      "service_tier": "default",
      "system_fingerprint": "fp_50cad350e4"
    }"#;
    let (_upstream, result) = complete_with(Reply::raw(200, "application/json", body)).await;
    let completion = result.expect("completion");
    assert_eq!(completion.id, "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT");
    assert_eq!(completion.model, "gpt-4.1-2025-04-14");
    assert_eq!(
        completion.content.as_deref(),
        Some("Hello! How can I assist you today?")
    );
    assert!(completion.tool_calls.is_empty());
    assert_eq!(completion.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        completion.usage,
        Some(Usage {
            prompt_tokens: 19,
            completion_tokens: 10,
            total_tokens: 29
        })
    );
    assert!(completion.latency > Duration::ZERO);
}

#[tokio::test]
async fn parses_a_minimal_llama_cpp_style_response() {
    // No id, model, usage or finish reason: the bare minimum still makes an answer.
    let body = r#"{"choices":[{"message":{"content":"Hi."}}]}"#;
    let (_upstream, result) = complete_with(Reply::raw(200, "application/json", body)).await;
    let completion = result.expect("completion");
    assert_eq!(completion.content.as_deref(), Some("Hi."));
    assert_eq!(completion.id, "");
    assert_eq!(completion.finish_reason, None);
    assert_eq!(completion.usage, None);
}

#[tokio::test]
async fn parses_tool_calls() {
    let (_upstream, result) = complete_with(Reply::tool_calls(vec![weather_call()])).await;
    let completion = result.expect("completion");
    assert_eq!(completion.content, None);
    assert_eq!(completion.tool_calls, [weather_call()]);
    assert_eq!(completion.finish_reason, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn tool_call_arguments_sent_as_an_object_become_text() {
    // Some servers put the arguments object where OpenAI puts its JSON text.
    let body = r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
        {"function":{"name":"f","arguments":{"x":1}}}]},"finish_reason":"tool_calls"}]}"#;
    let (_upstream, result) = complete_with(Reply::raw(200, "application/json", body)).await;
    let completion = result.expect("completion");
    assert_eq!(
        completion.tool_calls,
        [ToolCall {
            id: String::new(),
            name: "f".to_owned(),
            arguments: r#"{"x":1}"#.to_owned()
        }]
    );
}

#[tokio::test]
async fn openai_error_body_on_4xx() {
    // OpenAI echoes a masked key; a server that echoed all of it must not leak it either.
    let reply = Reply::error(
        401,
        &format!("Incorrect API key provided: {KEY}."),
        "invalid_request_error",
        Some("invalid_api_key"),
    );
    let upstream = FakeUpstream::start().await;
    upstream.push(reply);
    let client = ChatClient::new(LlmConfig {
        api_key: Some(KEY.to_owned()),
        ..upstream.config()
    })
    .expect("valid config");
    let error = client.complete(&hello()).await.expect_err("HTTP 401");
    let LlmError::Status {
        status,
        error: upstream_error,
    } = &error
    else {
        panic!("expected a status error, got {error:?}");
    };
    assert_eq!(*status, 401);
    assert_eq!(
        upstream_error.message,
        "Incorrect API key provided: [redacted]."
    );
    assert_eq!(
        upstream_error.kind.as_deref(),
        Some("invalid_request_error")
    );
    assert_eq!(upstream_error.code.as_deref(), Some("invalid_api_key"));
    expect![[r#"the LLM upstream answered HTTP 401: Incorrect API key provided: [redacted]. (invalid_request_error, invalid_api_key)"#]]
        .assert_eq(&error.to_string());
    assert!(!format!("{error:?}").contains(KEY));
}

#[tokio::test]
async fn llama_cpp_error_body_with_a_numeric_code_on_5xx() {
    let body = r#"{"error":{"code":500,"message":"the model crashed","type":"server_error"}}"#;
    let (_upstream, result) = complete_with(Reply::raw(500, "application/json", body)).await;
    let error = result.expect_err("HTTP 500");
    expect![[r#"the LLM upstream answered HTTP 500: the model crashed (server_error, 500)"#]]
        .assert_eq(&error.to_string());
}

/// The log keeps the status, type and code but not the upstream's words, which may quote the
/// conversation; users get the status alone.
#[tokio::test]
async fn the_log_and_the_users_get_less_than_the_whole_error() {
    let body = r#"{"error":{"code":500,"message":"cannot continue 'my card is 4111'","type":"server_error"}}"#;
    let (_upstream, result) = complete_with(Reply::raw(500, "application/json", body)).await;
    let error = result.expect_err("HTTP 500");
    expect![[r#"the LLM upstream answered HTTP 500 (server_error, 500)"#]]
        .assert_eq(&error.for_log());
    expect![[r#"the model upstream answered 500"#]].assert_eq(&error.public_reason());

    let (upstream, result) = complete_with(Reply::raw(
        200,
        "application/json",
        r#"{"choices": "my card is 4111"}"#,
    ))
    .await;
    let error = result.expect_err("malformed");
    assert!(!error.for_log().contains("4111"), "{}", error.for_log());
    let refused = LlmError::Connect {
        endpoint: upstream.base_url(),
        reason: "Connection refused".into(),
    };
    assert!(
        refused.for_log().contains(&upstream.base_url()),
        "the operator's own address"
    );
    assert_eq!(
        refused.public_reason(),
        "the model upstream could not be reached"
    );
}

#[tokio::test]
async fn error_status_without_an_error_object_keeps_the_body_start() {
    let page = format!("<html>{}</html>", "Bad Gateway ".repeat(100));
    let (_upstream, result) = complete_with(Reply::raw(502, "text/html", &page)).await;
    let error = result.expect_err("HTTP 502");
    let LlmError::Status { status: 502, error } = error else {
        panic!("expected a 502 status error, got {error:?}");
    };
    assert!(error.message.starts_with("<html>Bad Gateway"));
    assert!(error.message.chars().count() <= 301, "{}", error.message);
    assert_eq!((error.kind, error.code), (None, None));
}

#[tokio::test]
async fn error_object_without_a_message_falls_back_to_the_body() {
    let body = r#"{"error":{"type":"invalid_request_error"}}"#;
    let (_upstream, result) = complete_with(Reply::raw(400, "application/json", body)).await;
    let error = result.expect_err("HTTP 400");
    expect![[r#"the LLM upstream answered HTTP 400: {"error":{"type":"invalid_request_error"}} (invalid_request_error)"#]]
        .assert_eq(&error.to_string());
}

#[tokio::test]
async fn slow_upstream_times_out() {
    let upstream = FakeUpstream::start().await;
    upstream.push(Reply::text("late").after(Duration::from_secs(5)));
    let client = ChatClient::new(LlmConfig {
        timeout: Duration::from_millis(200),
        ..upstream.config()
    })
    .expect("valid config");
    let error = client.complete(&hello()).await.expect_err("timeout");
    assert!(
        matches!(error, LlmError::Timeout { after } if after == Duration::from_millis(200)),
        "{error:?}"
    );
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error() {
    // Bind and release a port, so that nothing listens there during the call.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    drop(listener);
    let client =
        ChatClient::new(LlmConfig::new(format!("http://{address}/v1"), "m")).expect("valid config");
    let error = client.complete(&hello()).await.expect_err("refused");
    let LlmError::Connect { endpoint, reason } = &error else {
        panic!("expected a connect error, got {error:?}");
    };
    assert_eq!(endpoint, &format!("http://{address}/v1/chat/completions"));
    assert!(reason.contains("onnection refused"), "{reason}");
}

#[tokio::test]
async fn malformed_bodies_are_typed_errors() {
    for body in [
        "not json",
        "",
        r#"{"choices": "many"}"#,
        r#"{"id": "no choices"}"#,
    ] {
        let (_upstream, result) = complete_with(Reply::raw(200, "application/json", body)).await;
        let error = result.expect_err(body);
        assert!(matches!(error, LlmError::Malformed(_)), "{body}: {error:?}");
    }
    let (_upstream, result) =
        complete_with(Reply::raw(200, "application/json", r#"{"choices": []}"#)).await;
    assert!(matches!(result, Err(LlmError::EmptyChoices)), "{result:?}");
}

#[test]
fn invalid_configs_are_refused_before_sending() {
    let cases = [
        LlmConfig::new("127.0.0.1:8080/v1", "m"),
        LlmConfig::new("not a url", "m"),
        LlmConfig::new("ftp://127.0.0.1/v1", "m"),
        LlmConfig::new(format!("http://user:{KEY}@127.0.0.1/v1"), "m"),
        LlmConfig::new("http://127.0.0.1/v1?x=1", "m"),
        LlmConfig::new("http://127.0.0.1/v1", " "),
        LlmConfig {
            timeout: Duration::ZERO,
            ..LlmConfig::new("http://127.0.0.1/v1", "m")
        },
    ];
    for config in cases {
        let error = ChatClient::new(config.clone()).expect_err(&config.base_url);
        assert!(matches!(error, LlmError::InvalidConfig(_)), "{error:?}");
        assert!(!error.to_string().contains(KEY), "{error}");
    }
}

#[test]
fn config_reads_from_toml_and_hides_the_key_in_debug() {
    let config: LlmConfig = toml::from_str(&format!(
        r#"
        base_url = "http://127.0.0.1:8080/v1"
        model = "qwen"
        api_key = "{KEY}"
        timeout_secs = 2.5
        max_tokens = 64
        temperature = 0.2
        "#
    ))
    .expect("valid TOML config");
    assert_eq!(config.timeout, Duration::from_millis(2500));
    assert_eq!(config.max_tokens, Some(64));
    assert_eq!(config.api_key.as_deref(), Some(KEY));
    let debug = format!("{config:?}");
    assert!(!debug.contains(KEY), "{debug}");
    assert!(debug.contains("[redacted]"), "{debug}");
    let client = ChatClient::new(config).expect("valid config");
    assert!(!format!("{client:?}").contains(KEY));

    let defaults: LlmConfig =
        toml::from_str("base_url = \"http://h/v1\"\nmodel = \"m\"\ntimeout_secs = 30")
            .expect("valid TOML config");
    assert_eq!(defaults.timeout, Duration::from_secs(30));
    assert_eq!(defaults.api_key, None);

    for bad in [
        "base_url = \"http://h/v1\"\nmodel = \"m\"\ntimeout_secs = -1",
        "base_url = \"http://h/v1\"\nmodel = \"m\"\ntimeout = 30",
    ] {
        assert!(toml::from_str::<LlmConfig>(bad).is_err(), "{bad}");
    }
}

async fn stream_all(
    client: &ChatClient,
    request: &ChatRequest,
) -> Result<(Vec<StreamDelta>, Completion), LlmError> {
    let mut stream = client.stream(request).await?;
    let mut deltas = Vec::new();
    while let Some(delta) = stream.next_delta().await? {
        deltas.push(delta);
    }
    Ok((deltas, stream.finish().await?))
}

#[tokio::test]
async fn streams_text_deltas_until_done() {
    let upstream = FakeUpstream::start().await;
    upstream.push(Reply::text_chunks(["Hel", "lo", " world"]));
    let client = ChatClient::new(upstream.config()).expect("valid config");
    let (deltas, completion) = stream_all(&client, &hello()).await.expect("stream");

    assert_eq!(
        deltas,
        ["Hel", "lo", " world"].map(|text| StreamDelta::Content(text.to_owned()))
    );
    assert_eq!(completion.content.as_deref(), Some("Hello world"));
    assert_eq!(completion.model, "fake-model");
    assert_eq!(completion.finish_reason, Some(FinishReason::Stop));
    // From the last chunk, sent because the client asked for it.
    assert_eq!(
        completion.usage,
        Some(Usage {
            prompt_tokens: 2,
            completion_tokens: 2,
            total_tokens: 4
        })
    );
    let body = &upstream.requests()[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({ "include_usage": true }));
}

#[tokio::test]
async fn streamed_tool_calls_add_up() {
    let second = ToolCall {
        id: "call_def".to_owned(),
        name: "get_time".to_owned(),
        arguments: r#"{"tz":"Europe/Zurich"}"#.to_owned(),
    };
    let upstream = FakeUpstream::start().await;
    upstream.push(Reply::tool_calls(vec![weather_call(), second.clone()]));
    let client = ChatClient::new(upstream.config()).expect("valid config");
    let (deltas, completion) = stream_all(&client, &hello()).await.expect("stream");

    assert_eq!(
        deltas[0],
        StreamDelta::ToolCall {
            index: 0,
            id: Some("call_abc".to_owned()),
            name: Some("get_weather".to_owned()),
            arguments: String::new(),
        }
    );
    assert_eq!(deltas.len(), 6, "{deltas:?}");
    assert_eq!(completion.content, None);
    assert_eq!(completion.tool_calls, [weather_call(), second]);
    assert_eq!(completion.finish_reason, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn finish_without_reading_deltas() {
    let upstream = FakeUpstream::start().await;
    upstream.push(Reply::text("one two three"));
    let client = ChatClient::new(upstream.config()).expect("valid config");
    let stream = client.stream(&hello()).await.expect("stream");
    let completion = stream.finish().await.expect("completion");
    assert_eq!(completion.content.as_deref(), Some("one two three"));
}

#[tokio::test]
async fn llama_cpp_style_stream_without_usage() {
    // Minimal chunks, no blank line after [DONE], no usage chunk.
    let body = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n\
                data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n\
                data: [DONE]\n";
    let upstream = FakeUpstream::start().await;
    upstream.push(Reply::raw(200, "text/event-stream", body));
    let client = ChatClient::new(upstream.config()).expect("valid config");
    let (deltas, completion) = stream_all(&client, &hello()).await.expect("stream");
    assert_eq!(deltas, [StreamDelta::Content("Hi".to_owned())]);
    assert_eq!(completion.finish_reason, Some(FinishReason::Length));
    assert_eq!(completion.usage, None);
}

async fn stream_error(body: &str) -> LlmError {
    let upstream = FakeUpstream::start().await;
    upstream.push(Reply::raw(200, "text/event-stream", body));
    let client = ChatClient::new(upstream.config()).expect("valid config");
    stream_all(&client, &hello())
        .await
        .expect_err("the stream fails")
}

#[tokio::test]
async fn stream_without_done_is_truncated() {
    let error = stream_error("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n").await;
    assert!(matches!(error, LlmError::StreamTruncated), "{error:?}");
}

#[tokio::test]
async fn malformed_stream_chunk_is_a_typed_error() {
    let error = stream_error("data: {\"choices\":[{\"delta\":\n\ndata: [DONE]\n\n").await;
    assert!(matches!(error, LlmError::Malformed(_)), "{error:?}");
}

#[tokio::test]
async fn error_event_in_a_stream() {
    let body = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n\
                data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\",\"code\":null}}\n\n";
    let error = stream_error(body).await;
    expect![[r#"the LLM upstream failed during the stream: overloaded (server_error)"#]]
        .assert_eq(&error.to_string());
}

#[tokio::test]
async fn stream_after_an_error_stays_failed() {
    let upstream = FakeUpstream::start().await;
    upstream.push(Reply::raw(200, "text/event-stream", "data: nonsense\n\n"));
    let client = ChatClient::new(upstream.config()).expect("valid config");
    let mut stream = client.stream(&hello()).await.expect("stream");
    assert!(matches!(
        stream.next_delta().await,
        Err(LlmError::Malformed(_))
    ));
    assert!(matches!(
        stream.next_delta().await,
        Err(LlmError::StreamTruncated)
    ));
    assert!(matches!(
        stream.finish().await,
        Err(LlmError::StreamTruncated)
    ));
}

#[tokio::test]
async fn stream_status_error_is_reported_before_streaming() {
    let upstream = FakeUpstream::start().await;
    upstream.push(Reply::error(
        429,
        "Rate limit reached",
        "requests",
        Some("rate_limit_exceeded"),
    ));
    let client = ChatClient::new(upstream.config()).expect("valid config");
    let error = client.stream(&hello()).await.expect_err("HTTP 429");
    assert!(
        matches!(&error, LlmError::Status { status: 429, error } if error.code.as_deref() == Some("rate_limit_exceeded")),
        "{error:?}"
    );
}

#[tokio::test]
async fn stream_timeout_is_per_silence_not_per_stream() {
    let upstream = FakeUpstream::start().await;
    // Six events 100 ms apart take longer than the 250 ms timeout in total, but no single
    // silence does, so the stream completes.
    upstream.push(Reply::text("a b c").with_chunk_delay(Duration::from_millis(100)));
    upstream.push(Reply::text("a b c").with_chunk_delay(Duration::from_millis(500)));
    let client = ChatClient::new(LlmConfig {
        timeout: Duration::from_millis(250),
        ..upstream.config()
    })
    .expect("valid config");

    let (_, completion) = stream_all(&client, &hello()).await.expect("stream");
    assert_eq!(completion.content.as_deref(), Some("a b c"));
    assert!(completion.latency > Duration::from_millis(250));

    let error = stream_all(&client, &hello()).await.expect_err("silence");
    assert!(matches!(error, LlmError::Timeout { .. }), "{error:?}");
}

/// A finish reason is passed on as it was read; the pre-tools name becomes today's.
#[test]
fn finish_reasons_are_written_as_they_were_read() {
    for reason in [
        "stop",
        "length",
        "tool_calls",
        "content_filter",
        "something_new",
    ] {
        assert_eq!(FinishReason::from(reason.to_owned()).as_str(), reason);
    }
    assert_eq!(
        FinishReason::from("function_call".to_owned()).as_str(),
        "tool_calls"
    );
}
