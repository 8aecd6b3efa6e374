//! Agent runs over HTTP (`POST /v1/agents/{id}/runs`) against a model behind the OpenAI wire
//! format: `memlayer_llm::FakeUpstream`, a real HTTP server on 127.0.0.1, stands in for the
//! operator's model and records what it was sent.

use std::time::Duration;

use memlayer_llm::{ChatClient, FakeUpstream, LlmConfig, Reply, ToolCall};
use memlayer_server::ServerConfig;
use memlayer_store::KeyRole;
use memlayer_tests::{
    TestServer, assert_error, json, pair, roles_and_contents, send_with_headers, sent,
};
use reqwest::Method;
use serde_json::Value;

fn run(server: &TestServer, agent: &str, body: &Value) -> (u16, Value) {
    server.post(&format!("/v1/agents/{agent}/runs"), body)
}

fn runs_of(server: &TestServer, session: &str) -> Vec<Value> {
    let (status, runs) = server.get(&format!("/v1/sessions/{session}/runs"));
    assert_eq!(status, 200, "{runs}");
    runs.as_array().unwrap().clone()
}

#[test]
fn a_run_stores_both_messages_and_a_completed_run_and_sends_the_context_upstream() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_model(upstream.config());
    let memory = json!({ "text": "Dana is allergic to peanuts", "type": "fact" });
    assert_eq!(server.post("/v1/users/dana/memories", &memory).0, 201);

    upstream.push(Reply::text(
        "Sorry about order 4711, Dana. I have chased it.",
    ));
    let (status, first) = run(
        &server,
        "support",
        &json!({ "user_id": "dana", "message": "Hi, I am Dana. My order 4711 is late." }),
    );
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["status"], "COMPLETED");
    assert_eq!(first["created_session"], true);
    assert_eq!(
        first["content"],
        "Sorry about order 4711, Dana. I have chased it."
    );
    let session = first["session_id"].as_str().unwrap().to_owned();
    memlayer_tests::assert_uuid_v4(&first["session_id"]);
    assert!(
        first["usage"]["total_tokens"].as_u64().unwrap() > 0,
        "{first}"
    );
    assert_eq!(
        roles_and_contents(&server, &session),
        [
            pair("user", "Hi, I am Dana. My order 4711 is late."),
            pair(
                "assistant",
                "Sorry about order 4711, Dana. I have chased it."
            ),
        ]
    );
    let (_, stored) = server.get(&format!("/v1/sessions/{session}"));
    assert_eq!(stored["user_id"], "dana");
    assert_eq!(stored["agent_id"], "support");
    assert_eq!(stored["state"], "active");

    // The request upstream: the instruction for session_search, the memory, the question,
    // and the five memory tools.
    let request = &upstream.requests()[0].body;
    assert_eq!(request["model"], "fake-model");
    let tools: Vec<&str> = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "memory_remember",
            "memory_recall",
            "memory_forget",
            "session_search",
            "clear_session"
        ]
    );
    let messages = sent(&upstream, 0);
    assert!(messages[0].1.contains("session_search"), "{messages:?}");
    assert!(
        messages
            .iter()
            .any(|(role, text)| role == "system" && text.contains("peanuts")),
        "the memory is not in the context: {messages:?}"
    );
    assert_eq!(
        messages.last().unwrap(),
        &pair("user", "Hi, I am Dana. My order 4711 is late.")
    );

    // The second run continues the session: the earlier turn goes upstream with it.
    upstream.push(Reply::text("Avoid anything with peanuts."));
    let (status, second) = run(
        &server,
        "support",
        &json!({ "user_id": "dana", "session_id": session, "message": "Which snack should I avoid?" }),
    );
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["created_session"], false);
    assert_eq!(second["session_id"], session.as_str());
    let messages = sent(&upstream, 1);
    let earlier = messages
        .iter()
        .position(|m| m == &pair("user", "Hi, I am Dana. My order 4711 is late."))
        .expect("the earlier question is sent");
    assert_eq!(
        messages[earlier + 1],
        pair(
            "assistant",
            "Sorry about order 4711, Dana. I have chased it."
        )
    );
    assert_eq!(
        messages.last().unwrap(),
        &pair("user", "Which snack should I avoid?")
    );

    // Both runs are recorded, with what they cost.
    let runs = runs_of(&server, &session);
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["run_id"], first["run_id"]);
    assert_eq!(runs[0]["status"], "COMPLETED");
    // The run points at the question and the answer instead of copying them, so erasing a
    // message leaves no copy behind.
    assert_eq!(runs[0]["content"], Value::Null);
    assert_eq!(
        (
            &runs[0]["metadata"]["question_index"],
            &runs[0]["metadata"]["answer_index"]
        ),
        (&json!(0), &json!(1))
    );
    assert_eq!(runs[1]["metadata"]["answer_index"], 3);
    let metadata = &runs[1]["metadata"];
    assert_eq!(metadata["model"], "fake-model");
    assert_eq!(metadata["model_calls"], 1);
    assert_eq!(metadata["usage"], second["usage"]);
    assert!(metadata["latency_ms"].is_u64(), "{metadata}");
}

#[test]
fn a_run_uses_the_agents_saved_settings() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_model(upstream.config());
    let memory = json!({ "text": "Dana is allergic to peanuts", "type": "fact" });
    assert_eq!(server.post("/v1/users/dana/memories", &memory).0, 201);
    // This agent's saved strategy has no memory layer.
    let settings = json!({ "strategy": "full_history" });
    assert_eq!(server.put("/v1/agents/plain/settings", &settings).0, 200);

    upstream.push(Reply::text("Hello."));
    let body = json!({ "user_id": "dana", "message": "Anything about snacks?" });
    assert_eq!(run(&server, "plain", &body).0, 200);
    let messages = sent(&upstream, 0);
    assert!(
        !messages.iter().any(|(_, text)| text.contains("peanuts")),
        "{messages:?}"
    );
    assert_eq!(
        messages.last().unwrap(),
        &pair("user", "Anything about snacks?")
    );
}

#[test]
fn the_model_calls_memory_tools_and_then_answers() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_model(upstream.config());
    upstream.push(Reply::tool_calls(vec![
        ToolCall {
            id: "call_1".into(),
            name: "memory_remember".into(),
            arguments: r#"{"text":"Prefers e-mail over phone calls","type":"preference"}"#.into(),
        },
        ToolCall {
            id: "call_2".into(),
            name: "memory_teleport".into(),
            arguments: "{}".into(),
        },
    ]));
    upstream.push(Reply::text("Noted: e-mail it is."));
    let (status, answer) = run(
        &server,
        "support",
        &json!({ "user_id": "erin", "message": "Please e-mail me, never call." }),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["content"], "Noted: e-mail it is.");
    let calls = answer["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{answer}");
    assert_eq!(
        (&calls[0]["name"], &calls[0]["ok"], &calls[0]["round"]),
        (&json!("memory_remember"), &json!(true), &json!(1))
    );
    assert_eq!(
        (&calls[1]["name"], &calls[1]["ok"], &calls[1]["error"]),
        (
            &json!("memory_teleport"),
            &json!(false),
            &json!("unknown_tool")
        )
    );

    // The memory exists, as erin's.
    let (_, memories) = server.get("/v1/users/erin/memories");
    let texts: Vec<&str> = memories["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Prefers e-mail over phone calls"]);

    // The second request carried the calls and their results back, each to its call.
    let second = &upstream.requests()[1].body;
    let messages = second["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 3]["role"], "assistant");
    assert_eq!(messages[n - 3]["tool_calls"][0]["id"], "call_1");
    assert_eq!(messages[n - 2]["tool_call_id"], "call_1");
    let remembered: Value =
        serde_json::from_str(messages[n - 2]["content"].as_str().unwrap()).unwrap();
    assert_eq!(remembered["action"], "created");
    assert_eq!(
        remembered["memory"]["text"],
        "Prefers e-mail over phone calls"
    );
    assert_eq!(messages[n - 1]["tool_call_id"], "call_2");
    let refused: Value =
        serde_json::from_str(messages[n - 1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(refused["error"]["code"], "unknown_tool");

    // The run records the calls; the session holds only the question and the answer.
    let session = answer["session_id"].as_str().unwrap();
    let runs = runs_of(&server, session);
    assert_eq!(runs[0]["tool_calls"], answer["tool_calls"]);
    // Forgetting the memory must not leave its text in the run record.
    assert!(
        !runs[0].to_string().contains("Prefers e-mail"),
        "{}",
        runs[0]
    );
    assert_eq!(runs[0]["metadata"]["model_calls"], 2);
    assert_eq!(roles_and_contents(&server, session).len(), 2);
}

#[test]
fn a_model_that_keeps_calling_tools_is_made_to_answer() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_model(upstream.config());
    let search = || {
        Reply::tool_calls(vec![ToolCall {
            id: "call".into(),
            name: "session_search".into(),
            arguments: r#"{"query":"order"}"#.into(),
        }])
    };
    for _ in 0..4 {
        upstream.push(search());
    }
    upstream.push(Reply::text("I could not find it."));
    let body = json!({ "user_id": "finn", "message": "Where is my order?" });
    let (status, answer) = run(&server, "support", &body);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["tool_calls"].as_array().unwrap().len(), 4);
    let requests = upstream.requests();
    assert_eq!(requests.len(), 5);
    assert!(
        requests[..4]
            .iter()
            .all(|r| r.body["tool_choice"].is_null())
    );
    assert_eq!(requests[4].body["tool_choice"], "none");
}

/// The events of a server-sent event stream, as (event name, JSON data).
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .filter_map(|block| {
            let mut name = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event:") {
                    name = Some(value.trim().to_owned());
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push_str(value.trim_start());
                }
            }
            // Keep-alive comments carry neither.
            Some((name?, serde_json::from_str(&data).unwrap()))
        })
        .collect()
}

fn stream(server: &TestServer, body: &Value) -> (String, Vec<(String, Value)>) {
    let response = server
        .request(Method::POST, "/v1/agents/support/runs")
        .json(body)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let text = response.text().unwrap();
    (content_type, events(&text))
}

#[test]
fn a_streamed_run_sends_deltas_and_ends_with_the_recorded_run() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_model(upstream.config());
    upstream.push(
        Reply::tool_calls(vec![ToolCall {
            id: "call_1".into(),
            name: "memory_remember".into(),
            arguments: r#"{"text":"Lives in Lyon","type":"fact"}"#.into(),
        }])
        .with_chunk_delay(Duration::from_millis(5)),
    );
    upstream
        .push(Reply::text("Lyon is lovely in spring.").with_chunk_delay(Duration::from_millis(5)));
    let body = json!({ "user_id": "gil", "message": "I live in Lyon.", "stream": true });
    let (content_type, events) = stream(&server, &body);
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );

    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names.first(), Some(&"tool_call"), "{names:?}");
    assert_eq!(names.last(), Some(&"done"), "{names:?}");
    let deltas: Vec<&str> = events
        .iter()
        .filter(|(name, _)| name == "delta")
        .map(|(_, data)| data["content"].as_str().unwrap())
        .collect();
    assert!(deltas.len() > 1, "the answer came in one piece: {deltas:?}");
    assert_eq!(deltas.concat(), "Lyon is lovely in spring.");
    let done = &events.last().unwrap().1;
    assert_eq!(done["status"], "COMPLETED");
    assert_eq!(done["content"], "Lyon is lovely in spring.");
    assert!(
        done["usage"]["total_tokens"].as_u64().unwrap() > 0,
        "{done}"
    );
    assert!(upstream.requests().iter().all(|r| r.body["stream"] == true));

    // Stored as a whole run is.
    let session = done["session_id"].as_str().unwrap();
    assert_eq!(
        roles_and_contents(&server, session),
        [
            pair("user", "I live in Lyon."),
            pair("assistant", "Lyon is lovely in spring.")
        ]
    );
    let runs = runs_of(&server, session);
    assert_eq!(runs[0]["run_id"], done["run_id"]);
    assert_eq!(runs[0]["status"], "COMPLETED");
    let (_, memories) = server.get("/v1/users/gil/memories");
    assert_eq!(memories["memories"][0]["text"], "Lives in Lyon");

    // A stream whose model fails ends with an error event naming the failed run.
    upstream.push(Reply::error(500, "boom", "server_error", None));
    let (_, events) = stream(&server, &body);
    let (name, error) = events.last().unwrap();
    assert_eq!(name, "error");
    assert_eq!(error["error"]["code"], "upstream_failed");
    let session = error["error"]["session_id"].as_str().unwrap();
    let runs = runs_of(&server, session);
    assert_eq!(runs[0]["run_id"], error["error"]["run_id"]);
    assert_eq!(runs[0]["status"], "FAILED");
}

/// Asserts a failed run's answer and returns its (run id, session id).
#[track_caller]
fn assert_failed(answer: &(u16, Value), status: u16, code: &str) -> (String, String) {
    let (actual, body) = answer;
    assert_eq!(
        (*actual, &body["error"]["code"]),
        (status, &json!(code)),
        "{body}"
    );
    let error = &body["error"];
    (
        error["run_id"].as_str().unwrap().to_owned(),
        error["session_id"].as_str().unwrap().to_owned(),
    )
}

/// After a failed run: the user's message is stored, the turn is incomplete, and the run is
/// `FAILED` with a reason that contains `reason`. Returns the reason.
#[track_caller]
fn assert_recorded_failure(
    server: &TestServer,
    (run_id, session): &(String, String),
    message: &str,
    reason: &str,
) -> String {
    let (_, stored) = server.get(&format!("/v1/sessions/{session}"));
    assert_eq!(stored["state"], "incomplete_turn", "{stored}");
    let messages = roles_and_contents(server, session);
    assert_eq!(messages.last().unwrap(), &pair("user", message));
    let runs = runs_of(server, session);
    let run = runs
        .iter()
        .find(|run| run["run_id"] == run_id.as_str())
        .unwrap();
    assert_eq!(run["status"], "FAILED");
    let error = run["error"].as_str().unwrap().to_owned();
    assert!(error.contains(reason), "{error}");
    error
}

#[test]
fn an_upstream_error_keeps_the_message_and_records_a_failed_run_then_the_next_run_works() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let secret = "sk-upstream-secret-9c1d";
    let server = TestServer::with_model(LlmConfig {
        api_key: Some(secret.into()),
        ..upstream.config()
    });
    // Some servers echo what they were sent; the key must not reach the run's reason.
    upstream.push(Reply::error(
        500,
        &format!("backend crashed while serving key {secret}"),
        "server_error",
        None,
    ));
    let body = json!({ "user_id": "hana", "message": "Is my refund through?" });
    let failed = run(&server, "support", &body);
    let ids = assert_failed(&failed, 502, "upstream_failed");
    let reason = assert_recorded_failure(&server, &ids, "Is my refund through?", "500");
    assert!(!reason.contains(secret), "{reason}");
    assert!(!failed.1.to_string().contains(secret), "{}", failed.1);

    // A malformed answer fails the same way.
    upstream.push(Reply::raw(
        200,
        "application/json",
        "{\"not\": \"a completion\"}",
    ));
    let again = json!({ "user_id": "hana", "session_id": ids.1, "message": "Hello?" });
    let ids = assert_failed(&run(&server, "support", &again), 502, "upstream_failed");
    assert_recorded_failure(&server, &ids, "Hello?", "malformed or incomplete");

    // The next run works, and the unanswered questions are still in its context.
    upstream.push(Reply::text("Yes, the refund went out today."));
    let next = json!({ "user_id": "hana", "session_id": ids.1, "message": "Anyone there?" });
    let (status, answer) = run(&server, "support", &next);
    assert_eq!(status, 200, "{answer}");
    let (_, stored) = server.get(&format!("/v1/sessions/{}", ids.1));
    assert_eq!(stored["state"], "active");
    let messages = sent(&upstream, 2);
    assert!(
        messages.contains(&pair("user", "Is my refund through?")),
        "{messages:?}"
    );
    let statuses: Vec<Value> = runs_of(&server, &ids.1)
        .iter()
        .map(|run| run["status"].clone())
        .collect();
    assert_eq!(
        statuses,
        [json!("FAILED"), json!("FAILED"), json!("COMPLETED")]
    );
}

#[test]
fn an_unreachable_or_slow_upstream_fails_the_run_with_its_own_status() {
    // Nothing listens on a port that was just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = TestServer::with_model(LlmConfig::new(
        format!("http://127.0.0.1:{port}/v1"),
        "absent-model",
    ));
    let body = json!({ "user_id": "ivo", "message": "Hello?" });
    let ids = assert_failed(&run(&down, "support", &body), 502, "upstream_failed");
    assert_recorded_failure(&down, &ids, "Hello?", "could not be reached");

    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let slow = TestServer::with_model(LlmConfig {
        timeout: Duration::from_millis(300),
        ..upstream.config()
    });
    upstream.push(Reply::text("Too late.").after(Duration::from_secs(2)));
    let ids = assert_failed(&run(&slow, "support", &body), 504, "upstream_timeout");
    assert_recorded_failure(&slow, &ids, "Hello?", "did not answer in time");
    upstream.push(Reply::text("On time."));
    let next = json!({ "user_id": "ivo", "session_id": ids.1, "message": "Still there?" });
    let (status, answer) = run(&slow, "support", &next);
    assert_eq!(
        (status, &answer["content"]),
        (200, &json!("On time.")),
        "{answer}"
    );
}

#[test]
fn runs_check_their_input_and_refuse_without_a_model() {
    let server = TestServer::start();
    for (body, code) in [
        (json!({ "user_id": "u", "message": "  " }), "invalid_value"),
        (json!({ "user_id": "u/..", "message": "hi" }), "invalid_id"),
        (
            json!({ "user_id": "u", "message": "hi", "session_id": "" }),
            "invalid_id",
        ),
    ] {
        assert_error(&run(&server, "support", &body), 422, code);
    }
    assert_error(
        &run(&server, "support", &json!({ "message": "hi" })),
        400,
        "invalid_body",
    );
    let body = json!({ "user_id": "u", "message": "hi" });
    assert_error(&run(&server, "support", &body), 503, "model_not_configured");
    // Nothing was stored for a run that could not start.
    let (_, sessions) = server.get("/v1/sessions");
    assert_eq!(sessions["total_elements"], 0);
}

#[test]
fn a_user_key_runs_for_its_own_user_only() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_model(upstream.config());
    let alice = server.create_key("default", KeyRole::User, Some("alice"));
    let mallory = server.create_key("default", KeyRole::User, Some("mallory"));
    let as_key = |key: &str, body: &Value| {
        memlayer_tests::send(
            server
                .request_with_key(key, Method::POST, "/v1/agents/support/runs")
                .json(body),
        )
    };
    upstream.push(Reply::text("Hi Alice."));
    let (status, answer) = as_key(&alice, &json!({ "user_id": "alice", "message": "Hi" }));
    assert_eq!(status, 200, "{answer}");
    let session = answer["session_id"].as_str().unwrap();

    let theirs = json!({ "user_id": "alice", "session_id": session, "message": "Hi" });
    assert_error(&as_key(&mallory, &theirs), 404, "session_not_found");
    let for_alice = json!({ "user_id": "alice", "message": "Hi" });
    assert_error(&as_key(&mallory, &for_alice), 403, "forbidden");
    // A session of another agent is not found either.
    let other_agent = json!({ "user_id": "alice", "session_id": session, "message": "Hi" });
    assert_error(
        &run(&server, "billing", &other_agent),
        404,
        "session_not_found",
    );
    assert_eq!(upstream.requests().len(), 1);
    assert_eq!(roles_and_contents(&server, session).len(), 2);
}

/// The session's runs once one is recorded (runs finish on their own task, after the
/// client stopped waiting).
fn wait_for_run(server: &TestServer, user: &str) -> (String, Value) {
    for _ in 0..100 {
        let (_, sessions) = server.get(&format!("/v1/sessions?user_id={user}"));
        if let Some(session) = sessions["content"][0]["session_id"].as_str()
            && let Some(run) = runs_of(server, session).first()
        {
            return (session.to_owned(), run.clone());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no run of {user} was recorded");
}

#[test]
fn a_run_the_client_stops_waiting_for_still_finishes_and_is_recorded() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_config(ServerConfig {
        agent_model: Some(ChatClient::new(upstream.config()).unwrap()),
        request_timeout: Duration::from_millis(300),
        ..memlayer_tests::config()
    });
    // Over the request timeout: the client gets 503, the run goes on.
    upstream.push(Reply::text("Worth the wait.").after(Duration::from_secs(1)));
    let body = json!({ "user_id": "jo", "message": "Slow one?" });
    assert_error(&run(&server, "support", &body), 503, "timeout");
    let (session, run) = wait_for_run(&server, "jo");
    assert_eq!(run["status"], "COMPLETED", "{run}");
    assert_eq!(
        roles_and_contents(&server, &session),
        [
            pair("user", "Slow one?"),
            pair("assistant", "Worth the wait.")
        ]
    );

    // A streaming client that hangs up after the first event: the answer is still stored.
    upstream.push(
        Reply::text("one two three four five six seven eight")
            .with_chunk_delay(Duration::from_millis(40)),
    );
    let body = json!({ "user_id": "kim", "message": "Count for me.", "stream": true });
    let mut response = server
        .request(Method::POST, "/v1/agents/support/runs")
        .json(&body)
        .send()
        .unwrap();
    let mut first = [0u8; 16];
    std::io::Read::read(&mut response, &mut first).unwrap();
    drop(response);
    let (session, run) = wait_for_run(&server, "kim");
    assert_eq!(run["status"], "COMPLETED", "{run}");
    assert_eq!(
        roles_and_contents(&server, &session).last().unwrap(),
        &pair("assistant", "one two three four five six seven eight")
    );
}

/// A failed run's reason is read by whoever may read the session, a user's own key
/// included: it says what failed in general words, never the operator's upstream (its
/// address, or what it answered), which goes to the server's log instead.
#[test]
fn a_failed_runs_reason_names_no_upstream_detail() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let absent = format!("http://127.0.0.1:{port}/v1");
    let cases = [
        (
            LlmConfig::new(absent.clone(), "absent-model"),
            None,
            "the model upstream could not be reached",
        ),
        (
            upstream.config(),
            Some(Reply::error(
                500,
                "internal-upstream-detail-e41f",
                "server_error",
                None,
            )),
            "the model upstream answered 500",
        ),
        (
            LlmConfig {
                timeout: Duration::from_millis(200),
                ..upstream.config()
            },
            Some(Reply::text("Too late.").after(Duration::from_secs(2))),
            "the model did not answer in time",
        ),
    ];
    for (config, reply, expected) in cases {
        let server = TestServer::with_model(config);
        let alice = server.create_key("default", KeyRole::User, Some("alice"));
        if let Some(reply) = reply {
            upstream.push(reply);
        }
        let answer = memlayer_tests::send(
            server
                .request_with_key(&alice, Method::POST, "/v1/agents/support/runs")
                .json(&json!({ "user_id": "alice", "message": "Where is my parcel?" })),
        );
        assert!(matches!(answer.0, 502 | 504), "{answer:?}");
        let session = answer.1["error"]["session_id"].as_str().unwrap().to_owned();
        let (status, runs) = memlayer_tests::send(server.request_with_key(
            &alice,
            Method::GET,
            &format!("/v1/sessions/{session}/runs"),
        ));
        assert_eq!(status, 200, "{runs}");
        assert_eq!(runs[0]["status"], "FAILED", "{runs}");
        assert_eq!(runs[0]["error"], expected, "{runs}");
        for shown in [runs.to_string(), answer.1.to_string()] {
            for detail in [
                "127.0.0.1",
                "http",
                "internal-upstream-detail",
                "chat/completions",
            ] {
                assert!(
                    !shown.contains(detail),
                    "{detail:?} shown to the user: {shown}"
                );
            }
        }
    }
}

/// A server whose agent runs are answered by `upstream`, with at most `runs` of them at once
/// and the given request timeout.
fn limited(upstream: &FakeUpstream, runs: usize, request_timeout: Duration) -> TestServer {
    TestServer::with_config(ServerConfig {
        agent_model: Some(ChatClient::new(upstream.config()).unwrap()),
        max_agent_runs: runs,
        request_timeout,
        ..memlayer_tests::config()
    })
}

/// Waits until the upstream has received `count` requests (runs reached the model).
fn wait_for_upstream(upstream: &FakeUpstream, count: usize) {
    for _ in 0..400 {
        if upstream.requests().len() >= count {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!(
        "the upstream got {} requests, not {count}",
        upstream.requests().len()
    );
}

/// The overloaded answer to a run over the limit: `503 overloaded` with `Retry-After`, and
/// nothing of it stored (the user has no session).
#[track_caller]
fn assert_run_refused(server: &TestServer, user: &str, stream: bool) {
    let (status, headers, body) = send_with_headers(
        server
            .request(Method::POST, "/v1/agents/support/runs")
            .json(&json!({ "user_id": user, "message": "One more?", "stream": stream })),
    );
    assert_eq!(
        headers
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned()),
        Some("1".to_owned())
    );
    assert_error(&(status, body), 503, "overloaded");
    let (_, sessions) = server.get(&format!("/v1/sessions?user_id={user}"));
    assert_eq!(sessions["total_elements"], 0, "{sessions}");
}

/// Streamed runs answer their headers at once and go on in the background, and runs go on
/// after the request timeout: neither is bounded by the in-flight limit, so agent runs have
/// a limit of their own, held until each run's record is written.
#[test]
fn agent_runs_beyond_their_limit_are_refused_while_others_run_in_the_background() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    // Runs outlive their requests here: the request timeout is shorter than the model.
    let server = limited(&upstream, 2, Duration::from_millis(500));
    let slow = Duration::from_secs(3);
    upstream.push(Reply::text("First answer.").after(slow));
    upstream.push(Reply::text("Second answer.").after(slow));
    // A streamed run: the client reads the headers and leaves; the run goes on.
    let streamed = server
        .request(Method::POST, "/v1/agents/support/runs")
        .json(&json!({ "user_id": "sam", "message": "Stream it.", "stream": true }))
        .send()
        .unwrap();
    assert_eq!(streamed.status(), 200);
    drop(streamed);
    // A plain run whose request times out: the run goes on.
    let timed_out = run(
        &server,
        "support",
        &json!({ "user_id": "tia", "message": "Take your time." }),
    );
    assert_error(&timed_out, 503, "timeout");
    wait_for_upstream(&upstream, 2);

    assert_run_refused(&server, "uma", false);
    assert_run_refused(&server, "uma", true);
    // Other requests are not held up by the runs.
    assert_eq!(server.get("/v1/sessions").0, 200);

    // Once both runs have written their records, runs are admitted again.
    for user in ["sam", "tia"] {
        let (_, run) = wait_for_run(&server, user);
        assert_eq!(run["status"], "COMPLETED", "{run}");
    }
    // Streamed, so that a slow store (PostgreSQL on a busy CI machine) cannot turn the
    // admitted run into a request timeout: a stream is not bounded by it.
    upstream.push(Reply::text("Now there is room."));
    let (_, events) = stream(
        &server,
        &json!({ "user_id": "uma", "message": "Now?", "stream": true }),
    );
    let (name, done) = events.last().unwrap();
    assert_eq!(
        (name.as_str(), &done["content"]),
        ("done", &json!("Now there is room.")),
        "{events:?}"
    );
}
