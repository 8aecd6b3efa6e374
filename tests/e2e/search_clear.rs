//! `session_search` and `clear_session` over HTTP: search sees the whole history (cleared
//! parts included), never another session's; a clear starts later context after it.

use memlayer_tests::{TestServer, assert_error, json};

fn append(server: &TestServer, session: &str, messages: serde_json::Value) {
    let body = json!({ "user_id": "u", "agent_id": "a", "messages": messages });
    assert_eq!(
        server
            .post(&format!("/v1/sessions/{session}/messages"), &body)
            .0,
        201
    );
}

#[test]
fn search_is_case_insensitive_newest_first_and_scoped_to_the_session() {
    let server = TestServer::start();
    let long = "x".repeat(400);
    append(
        &server,
        "s",
        json!([
            { "role": "user", "content": "Where is Order 4711?" },
            { "role": "assistant", "content": format!("order 4711 shipped {long}") },
            { "role": "user", "content": "thanks" },
        ]),
    );
    append(
        &server,
        "other",
        json!([{ "role": "user", "content": "order 4711 is mine too" }]),
    );
    let (status, answer) = server.get("/v1/sessions/s/search?q=ORDER%204711");
    assert_eq!(status, 200, "{answer}");
    let hits = answer["hits"].as_array().unwrap();
    assert_eq!(
        hits.iter()
            .map(|h| h["index"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [1, 0]
    );
    assert_eq!(hits[0]["role"], "assistant");
    assert_eq!(hits[0]["preview"].as_str().unwrap().chars().count(), 300);
    memlayer_tests::assert_rfc3339(&hits[0]["timestamp"]);
    let (_, limited) = server.get("/v1/sessions/s/search?q=order&limit=1");
    assert_eq!(limited["hits"].as_array().unwrap().len(), 1);

    assert_error(
        &server.get("/v1/sessions/s/search?q=order&limit=51"),
        422,
        "invalid_value",
    );
    assert_error(
        &server.get("/v1/sessions/s/search?q=%20"),
        422,
        "invalid_value",
    );
    assert_error(&server.get("/v1/sessions/s/search"), 400, "invalid_query");
    assert_error(
        &server.get("/v1/sessions/nope/search?q=x"),
        404,
        "session_not_found",
    );
}

#[test]
fn a_clear_starts_later_context_after_it_and_keeps_the_history() {
    let server = TestServer::start();
    append(
        &server,
        "s",
        json!([
            { "role": "user", "content": "My name is Dana." },
            { "role": "assistant", "content": "Hi Dana." },
        ]),
    );
    let (status, cleared) = server.post("/v1/sessions/s/clear", &json!({}));
    assert_eq!(
        (status, cleared),
        (200, json!({ "session_id": "s", "load_from": 2 }))
    );
    append(
        &server,
        "s",
        json!([{ "role": "user", "content": "Let's start over." }]),
    );

    let (_, session) = server.get("/v1/sessions/s");
    assert_eq!(session["load_from"], 2);
    assert_eq!(
        session["messages"].as_array().unwrap().len(),
        3,
        "history is kept for audit"
    );
    let (_, context) = server.post(
        "/v1/sessions/s/context",
        &json!({ "format": "text", "settings": { "strategy": "combined" } }),
    );
    assert_eq!(context["text"], "User (turn 1): Let's start over.");
    let (_, found) = server.get("/v1/sessions/s/search?q=dana");
    assert_eq!(
        found["hits"].as_array().unwrap().len(),
        2,
        "search still sees cleared turns"
    );
    assert_error(
        &server.post("/v1/sessions/nope/clear", &json!({})),
        404,
        "session_not_found",
    );
}
