//! The OpenAI-compatible chat endpoint (`POST /v1/openai/chat/completions`) through the real
//! server, answered by `memlayer_llm::FakeUpstream`, which records what memlayer sent the
//! model: turns stored, memlayer's context in place of the client's history, OpenAI's
//! answer and chunk shapes, tool calls passed through, keys kept to their own users, and
//! failures that store no answer.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use memlayer_llm::{Reply, ToolCall};
use memlayer_store::KeyRole;
use memlayer_tests::{
    ADMIN_KEY, TestServer, assert_error, json, pair, roles_and_contents, send_with_headers, sent,
};
use reqwest::Method;
use reqwest::blocking::RequestBuilder;
use serde_json::Value;

const PATH: &str = "/v1/openai/chat/completions";

/// A chat request of `user` with agent `support`, in `session` when given.
fn chat(server: &TestServer, user: &str, session: Option<&str>, body: &Value) -> RequestBuilder {
    chat_with(server, ADMIN_KEY, (user, "support"), session, body)
}

/// A chat request sent with `key`, of the (user, agent) `conversation`, in `session` when
/// given.
fn chat_with(
    server: &TestServer,
    key: &str,
    (user, agent): (&str, &str),
    session: Option<&str>,
    body: &Value,
) -> RequestBuilder {
    let request = server
        .request_with_key(key, Method::POST, PATH)
        .header("x-memlayer-user", user)
        .header("x-memlayer-agent", agent)
        .json(body);
    match session {
        Some(session) => request.header("x-memlayer-session", session),
        None => request,
    }
}

/// Sends `request`: (status, `x-memlayer-session`, body).
#[track_caller]
fn send(request: RequestBuilder) -> (u16, Option<String>, Value) {
    let (status, headers, body) = send_with_headers(request);
    let session = headers
        .get("x-memlayer-session")
        .map(|value| value.to_str().unwrap().to_owned());
    (status, session, body)
}

fn ask(content: &str) -> Value {
    json!({ "model": "gpt-4o", "messages": [{ "role": "user", "content": content }] })
}

/// The `data` of each event of an event stream; `[DONE]` as a JSON string.
fn data_events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str(data.trim()).unwrap_or_else(|_| json!(data.trim())))
        .collect()
}

fn sessions_of(server: &TestServer, user: &str) -> u64 {
    let (status, page) = server.get(&format!("/v1/sessions?user_id={user}"));
    assert_eq!(status, 200, "{page}");
    page["total_elements"].as_u64().unwrap()
}

#[test]
fn a_completion_stores_the_turn_and_sends_memlayers_context() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_model(upstream.config());
    let memory = json!({ "text": "Dana is allergic to peanuts", "type": "fact" });
    assert_eq!(server.post("/v1/users/dana/memories", &memory).0, 201);

    upstream.push(Reply::text("Sorry, Dana. I chased order 4711."));
    let body = json!({
        "model": "gpt-4o",
        "messages": [
            { "role": "system", "content": "Be brief." },
            { "role": "user", "content": "A turn the client remembers on its own" },
            { "role": "assistant", "content": "An answer memlayer never stored" },
            { "role": "user", "content": "Hi, I am Dana. My order 4711 is late." },
        ],
    });
    let (status, session, answer) = send(chat(&server, "dana", None, &body));
    assert_eq!(status, 200, "{answer}");
    let session = session.expect("the new session is named");
    memlayer_tests::assert_uuid_v4(&json!(session));
    assert_eq!(answer["object"], "chat.completion");
    assert!(answer["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(answer["created"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(answer["model"], "fake-model");
    let choice = &answer["choices"][0];
    assert_eq!(
        (&choice["index"], &choice["finish_reason"]),
        (&json!(0), &json!("stop"))
    );
    assert_eq!(
        choice["message"],
        json!({ "role": "assistant", "content": "Sorry, Dana. I chased order 4711." })
    );
    assert!(answer["usage"]["total_tokens"].as_u64().unwrap() > 0);

    assert_eq!(
        roles_and_contents(&server, &session),
        [
            pair("user", "Hi, I am Dana. My order 4711 is late."),
            pair("assistant", "Sorry, Dana. I chased order 4711."),
        ]
    );
    let (_, record) = server.get(&format!("/v1/sessions/{session}"));
    assert_eq!(
        (&record["user_id"], &record["agent_id"], &record["state"]),
        (&json!("dana"), &json!("support"), &json!("active"))
    );
    let runs = server.get(&format!("/v1/sessions/{session}/runs")).1;
    assert_eq!(runs[0]["status"], "COMPLETED");
    assert_eq!(runs[0]["metadata"]["kind"], "chat_completion");

    // Upstream: the client's system message first, then memlayer's context (the memory,
    // not the turns the client sent), the question last; no memory tools.
    let request = &upstream.requests()[0].body;
    assert_eq!(request["model"], "fake-model");
    assert_eq!(request.get("tools"), None);
    let messages = sent(&upstream, 0);
    assert_eq!(messages[0], pair("system", "Be brief."));
    assert!(
        messages
            .iter()
            .any(|(role, text)| role == "system" && text.contains("peanuts")),
        "the memory is not in the context: {messages:?}"
    );
    assert!(
        !messages
            .iter()
            .any(|(_, text)| text.contains("memlayer never stored")
                || text.contains("remembers on its own")),
        "{messages:?}"
    );
    assert_eq!(
        messages.last().unwrap(),
        &pair("user", "Hi, I am Dana. My order 4711 is late.")
    );

    // The next turn names the session: the earlier turn comes from memlayer's store.
    upstream.push(Reply::text("It was order 4711."));
    let (status, named, _) = send(chat(
        &server,
        "dana",
        Some(&session),
        &ask("Which order was late?"),
    ));
    assert_eq!((status, named.as_deref()), (200, Some(session.as_str())));
    let messages = sent(&upstream, 1);
    let earlier = messages
        .iter()
        .position(|m| m == &pair("user", "Hi, I am Dana. My order 4711 is late."))
        .expect("the earlier turn is sent");
    assert_eq!(
        messages[earlier + 1],
        pair("assistant", "Sorry, Dana. I chased order 4711.")
    );
    assert_eq!(roles_and_contents(&server, &session).len(), 4);

    // A new conversation of the same user with the agent recalls the earlier one.
    upstream.push(Reply::text("Order 4711."));
    let (status, other, _) = send(chat(
        &server,
        "dana",
        None,
        &ask("Remind me, which order of mine was late?"),
    ));
    assert_eq!(status, 200);
    assert_ne!(other.as_deref(), Some(session.as_str()));
    let messages = sent(&upstream, 2);
    assert!(
        messages[..messages.len() - 1]
            .iter()
            .any(|(_, text)| text.contains("4711")),
        "nothing of the earlier session was recalled: {messages:?}"
    );
}

#[test]
fn a_streamed_completion_sends_chunks_and_stores_the_answer() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_model(upstream.config());
    upstream
        .push(Reply::text("Lyon is lovely in spring.").with_chunk_delay(Duration::from_millis(5)));
    let mut body = ask("I live in Lyon.");
    body["stream"] = json!(true);
    body["stream_options"] = json!({ "include_usage": true });
    let response = chat(&server, "gil", None, &body).send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers()["content-type"].to_str().unwrap();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let session = response.headers()["x-memlayer-session"]
        .to_str()
        .unwrap()
        .to_owned();
    let events = data_events(&response.text().unwrap());

    assert_eq!(events.last(), Some(&json!("[DONE]")), "{events:?}");
    let chunks = &events[..events.len() - 1];
    assert!(
        chunks
            .iter()
            .all(|chunk| chunk["object"] == "chat.completion.chunk"
                && chunk["id"] == chunks[0]["id"])
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Lyon is lovely in spring.");
    assert!(chunks.len() > 5, "the answer came in one piece: {chunks:?}");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert_eq!(upstream.requests()[0].body["stream"], true);

    assert_eq!(
        roles_and_contents(&server, &session),
        [
            pair("user", "I live in Lyon."),
            pair("assistant", "Lyon is lovely in spring.")
        ]
    );

    // A stream whose model fails ends with an error event; no answer is stored.
    upstream.push(Reply::error(500, "boom", "server_error", None));
    let body = json!({ "model": "m", "stream": true, "messages": [{ "role": "user", "content": "Still there?" }] });
    let response = chat(&server, "gil", Some(&session), &body).send().unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let events = data_events(&response.text().unwrap());
    let error = &events.last().unwrap()["error"];
    assert_eq!(error["code"], "upstream_failed", "{events:?}");
    assert!(!events.contains(&json!("[DONE]")));
    assert_eq!(
        roles_and_contents(&server, &session).last().unwrap(),
        &pair("user", "Still there?")
    );
}

/// Choice: a client that disconnects mid-stream does not cut the answer short; memlayer
/// reads the model's answer to its end and stores all of it, as for agent runs.
#[test]
fn a_client_that_leaves_mid_stream_still_gets_the_whole_answer_stored() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_model(upstream.config());
    let answer = "One two three four five six seven eight nine ten.";
    upstream.push(Reply::text(answer).with_chunk_delay(Duration::from_millis(100)));
    let mut body = ask("Count to ten.");
    body["stream"] = json!(true);
    let response = chat(&server, "hal", None, &body).send().unwrap();
    let session = response.headers()["x-memlayer-session"]
        .to_str()
        .unwrap()
        .to_owned();
    let mut reader = BufReader::new(response);
    let mut line = String::new();
    while !line.starts_with("data:") {
        line.clear();
        reader.read_line(&mut line).unwrap();
    }
    drop(reader);

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let messages = roles_and_contents(&server, &session);
        if messages.len() == 2 {
            assert_eq!(messages[1], pair("assistant", answer));
            break;
        }
        assert!(Instant::now() < deadline, "no answer stored: {messages:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn weather_call() -> ToolCall {
    ToolCall {
        id: "call_1".into(),
        name: "get_weather".into(),
        arguments: r#"{"city":"Lyon"}"#.into(),
    }
}

#[test]
fn tool_calls_pass_through_and_the_turn_goes_on_with_their_results() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_model(upstream.config());
    let tools = json!([{ "type": "function", "function": {
        "name": "get_weather", "strict": true,
        "parameters": { "type": "object", "properties": { "city": { "type": "string" } } } } }]);
    upstream.push(Reply::tool_calls(vec![weather_call()]));
    let question = json!({ "role": "user", "content": "Weather in Lyon?" });
    let body = json!({ "model": "m", "messages": [question], "tools": tools, "tool_choice": "auto", "top_p": 0.5 });
    let (status, session, answer) = send(chat(&server, "ida", None, &body));
    assert_eq!(status, 200, "{answer}");
    let session = session.unwrap();
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = json!({ "id": "call_1", "type": "function",
        "function": { "name": "get_weather", "arguments": "{\"city\":\"Lyon\"}" } });
    assert_eq!(choice["message"]["tool_calls"], json!([call]));
    let request = &upstream.requests()[0].body;
    assert_eq!(
        (
            &request["tools"],
            &request["tool_choice"],
            &request["top_p"]
        ),
        (&tools, &json!("auto"), &json!(0.5))
    );
    // The question is stored; the tool calls are the client's to run, not an answer.
    assert_eq!(
        roles_and_contents(&server, &session),
        [pair("user", "Weather in Lyon?")]
    );

    // The client runs the tool and sends the result: the question is not stored again.
    upstream.push(Reply::text("12°C and sunny in Lyon."));
    let body = json!({ "model": "m", "tools": tools, "messages": [
        question,
        { "role": "assistant", "content": null, "tool_calls": [call] },
        { "role": "tool", "tool_call_id": "call_1", "content": "12°C, sunny" },
    ] });
    let (status, _, answer) = send(chat(&server, "ida", Some(&session), &body));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "12°C and sunny in Lyon."
    );
    let messages = &upstream.requests()[1].body["messages"];
    let n = messages.as_array().unwrap().len();
    assert_eq!(messages[n - 3]["content"], "Weather in Lyon?");
    assert_eq!(messages[n - 2]["tool_calls"], json!([call]));
    assert_eq!(
        (&messages[n - 1]["role"], &messages[n - 1]["tool_call_id"]),
        (&json!("tool"), &json!("call_1"))
    );
    assert_eq!(
        roles_and_contents(&server, &session),
        [
            pair("user", "Weather in Lyon?"),
            pair("assistant", "12°C and sunny in Lyon.")
        ]
    );
    let runs = server.get(&format!("/v1/sessions/{session}/runs")).1;
    assert_eq!(runs[0]["tool_calls"][0]["name"], "get_weather");
    assert_eq!(runs[0]["tool_calls"][0].get("arguments"), None);

    // Streamed, the call comes in pieces whose arguments add up.
    upstream.push(Reply::tool_calls(vec![weather_call()]));
    let body = json!({ "model": "m", "stream": true, "tools": tools,
        "messages": [{ "role": "user", "content": "And in Paris?" }] });
    let (status, _, text) = send(chat(&server, "ida", Some(&session), &body));
    assert_eq!(status, 200);
    let events = data_events(text.as_str().unwrap());
    let deltas: Vec<&Value> = events
        .iter()
        .filter_map(|event| event["choices"][0]["delta"]["tool_calls"].get(0))
        .collect();
    assert_eq!(deltas[0]["id"], "call_1");
    assert_eq!(deltas[0]["function"]["name"], "get_weather");
    let arguments: String = deltas
        .iter()
        .map(|delta| delta["function"]["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(arguments, r#"{"city":"Lyon"}"#);
    let finish = &events[events.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
}

#[test]
fn an_upstream_failure_is_a_typed_error_and_stores_no_answer() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_model(upstream.config());
    upstream.push(Reply::error(
        429,
        "quota exceeded",
        "insufficient_quota",
        None,
    ));
    let (status, session, body) = send(chat(&server, "jo", None, &ask("Hello?")));
    let message = assert_failed(status, &body, 502, "upstream_failed");
    assert!(!message.contains("quota"), "{message}");
    let session = session.expect("the session is named");
    assert_eq!(body["error"]["session_id"], session.as_str());
    assert_eq!(
        roles_and_contents(&server, &session),
        [pair("user", "Hello?")]
    );
    let runs = server.get(&format!("/v1/sessions/{session}/runs")).1;
    assert_eq!(
        (&runs[0]["status"], &runs[0]["run_id"]),
        (&json!("FAILED"), &body["error"]["run_id"])
    );

    // The retry continues the unanswered turn instead of storing the question twice.
    upstream.push(Reply::text("Hello!"));
    let (status, _, _) = send(chat(&server, "jo", Some(&session), &ask("Hello?")));
    assert_eq!(status, 200);
    assert_eq!(
        roles_and_contents(&server, &session),
        [pair("user", "Hello?"), pair("assistant", "Hello!")]
    );
}

/// An upstream error: its status says what failed, the body is the API's error with the
/// failed run and its session.
fn assert_failed(status: u16, body: &Value, expected: u16, code: &str) -> String {
    assert_eq!(
        (status, &body["error"]["code"]),
        (expected, &json!(code)),
        "{body}"
    );
    assert!(body["error"]["run_id"].is_string(), "{body}");
    body["error"]["message"].as_str().unwrap().to_owned()
}

#[test]
fn keys_reach_only_their_own_users_sessions() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_model(upstream.config());
    let dana = server.create_key("default", KeyRole::User, Some("dana"));
    let erin = server.create_key("default", KeyRole::User, Some("erin"));
    let other_tenant = server.tenant_key("acme");

    // Dana's own key names her.
    upstream.push(Reply::text("Hi Dana."));
    let request = chat_with(
        &server,
        &dana,
        ("dana", "support"),
        None,
        &ask("My PIN is 8841."),
    );
    let (status, session, _) = send(request);
    assert_eq!(status, 200);
    let session = session.unwrap();

    let question = ask("What is the PIN?");
    let as_erin = |user: &str, session: Option<&str>| {
        send(chat_with(
            &server,
            &erin,
            (user, "support"),
            session,
            &question,
        ))
    };
    // Dana's session is not found by Erin's key, whoever the header names.
    for user in ["erin", "dana"] {
        let (status, header, body) = as_erin(user, Some(&session));
        assert_error(&(status, body), 404, "session_not_found");
        assert_eq!(header, None);
    }
    // Erin may not speak for Dana.
    let (status, _, body) = as_erin("dana", None);
    assert_error(&(status, body), 403, "forbidden");
    // Nor may another tenant's key reach the session.
    let conversation = ("dana", "support");
    let request = chat_with(
        &server,
        &other_tenant,
        conversation,
        Some(&session),
        &question,
    );
    let (status, _, body) = send(request);
    assert_error(&(status, body), 404, "session_not_found");
    // The same user with another agent does not continue the conversation either.
    let conversation = ("dana", "sales");
    let request = chat_with(&server, &dana, conversation, Some(&session), &ask("Hello?"));
    assert_eq!(send(request).0, 404);

    assert_eq!(roles_and_contents(&server, &session).len(), 2);
    assert_eq!(upstream.requests().len(), 1);
    assert_eq!(sessions_of(&server, "erin"), 0);
}

#[test]
fn bad_requests_are_typed_4xx_and_store_nothing() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_model(upstream.config());
    let post = |headers: &[(&str, &str)], body: Value| {
        let mut request = server.request(Method::POST, PATH).json(&body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let (status, _, body) = send(request);
        (status, body)
    };
    let both = [("x-memlayer-user", "kim"), ("x-memlayer-agent", "support")];
    let cases = [
        (post(&both[1..], ask("Hi")), 400, "missing_header"),
        (post(&both[..1], ask("Hi")), 400, "missing_header"),
        (
            post(
                &[both[0], both[1], ("x-memlayer-session", "a/b")],
                ask("Hi"),
            ),
            422,
            "invalid_id",
        ),
        (
            post(&[both[0], ("x-memlayer-agent", "")], ask("Hi")),
            422,
            "invalid_id",
        ),
        (
            post(&both, json!({ "model": "m", "messages": [] })),
            422,
            "invalid_messages",
        ),
        (
            post(
                &both,
                json!({ "model": "m", "messages": [{ "role": "system", "content": "Be brief." }] }),
            ),
            422,
            "invalid_messages",
        ),
        (
            post(
                &both,
                json!({ "model": "m", "messages": [{ "role": "user", "content": [{ "type": "image_url", "image_url": { "url": "https://x" } }] }] }),
            ),
            422,
            "invalid_messages",
        ),
        (post(&both, ask("   ")), 422, "invalid_messages"),
        (
            post(&both, json!({ "model": "m", "messages": "Hi" })),
            400,
            "invalid_body",
        ),
        (
            post(
                &both,
                json!({ "model": "m", "messages": [{ "role": "wizard", "content": "Hi" }] }),
            ),
            400,
            "invalid_body",
        ),
        (
            post(
                &both,
                json!({ "model": "m", "messages": [{ "role": "user", "content": "Hi" }], "stream": "yes" }),
            ),
            400,
            "invalid_body",
        ),
        (
            post(
                &both,
                json!({ "model": "m", "messages": [{ "role": "user", "content": "Hi" }], "n": 3 }),
            ),
            422,
            "invalid_value",
        ),
        (
            post(&both, ask(&"x".repeat(2 << 20))),
            413,
            "payload_too_large",
        ),
        (
            post(
                &[both[0], both[1], ("x-memlayer-session", "nope")],
                ask("Hi"),
            ),
            404,
            "session_not_found",
        ),
    ];
    for (answer, status, code) in cases {
        assert_error(&answer, status, code);
    }
    let too_many = json!({ "model": "m", "messages": vec![json!({ "role": "user", "content": "Hi" }); 1_001] });
    assert_error(&post(&both, too_many), 422, "invalid_messages");

    assert_eq!(sessions_of(&server, "kim"), 0);
    assert!(upstream.requests().is_empty());
}

#[test]
fn without_a_model_the_endpoint_answers_503_and_stores_nothing() {
    let server = TestServer::start();
    let (status, session, body) = send(chat(&server, "lea", None, &ask("Hello?")));
    assert_error(&(status, body), 503, "model_not_configured");
    assert_eq!(session, None);
    assert_eq!(sessions_of(&server, "lea"), 0);
}
