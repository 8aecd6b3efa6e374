//! Saved context settings: a tenant's defaults, an agent's over them, a request's over both;
//! invalid documents refused before they are saved; tenants kept apart.

use memlayer_tests::{TestServer, assert_error, json};

fn converse(server: &TestServer, session: &str, agent: &str) {
    let mut messages = Vec::new();
    for turn in 0..6 {
        messages.push(json!({ "role": "user", "content": format!("Question {turn}?") }));
        messages.push(json!({ "role": "assistant", "content": format!("Answer {turn}.") }));
    }
    let body = json!({ "user_id": "u", "agent_id": agent, "messages": messages });
    let path = format!("/v1/sessions/{session}/messages");
    assert_eq!(server.post(&path, &body).0, 201);
}

/// The window's size and the strategy a context was built with.
fn window_of(server: &TestServer, session: &str, overrides: serde_json::Value) -> (usize, String) {
    let path = format!("/v1/sessions/{session}/context");
    let (status, answer) = server.post(&path, &json!({ "settings": overrides }));
    assert_eq!(status, 200, "{answer}");
    (
        answer["report"]["window"].as_array().unwrap().len(),
        answer["settings"]["strategy"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn tenant_then_agent_then_request_settings_apply_in_that_order() {
    let server = TestServer::start();
    converse(&server, "with-bot", "bot");
    converse(&server, "with-other", "other");
    assert_eq!(
        window_of(&server, "with-bot", json!({})),
        (12, "combined".into())
    );

    let (status, saved) = server.put(
        "/v1/settings",
        &json!({ "strategy": "sliding_window", "max_turns": 3 }),
    );
    assert_eq!(status, 200, "{saved}");
    assert_eq!(
        saved["saved"],
        json!({ "strategy": "sliding_window", "max_turns": 3 })
    );
    assert_eq!(saved["effective"]["max_turns"], 3);
    assert_eq!(
        saved["effective"]["session_history_depth"], 20,
        "defaults fill the rest"
    );

    let (status, agent) = server.put("/v1/agents/bot/settings", &json!({ "max_turns": 2 }));
    assert_eq!(status, 200, "{agent}");
    assert_eq!(
        agent["effective"]["strategy"], "sliding_window",
        "from the tenant"
    );
    assert_eq!(agent["effective"]["max_turns"], 2);

    assert_eq!(
        window_of(&server, "with-bot", json!({})),
        (4, "sliding_window".into())
    );
    assert_eq!(
        window_of(&server, "with-other", json!({})),
        (6, "sliding_window".into())
    );
    assert_eq!(
        window_of(&server, "with-bot", json!({ "max_turns": 1 })),
        (2, "sliding_window".into())
    );

    // Another tenant sees none of it.
    let (_, elsewhere) = send_get_as(&server, "other-tenant", "/v1/settings");
    assert_eq!(elsewhere["saved"], json!({}));
    assert_eq!(elsewhere["effective"]["strategy"], "combined");

    let (status, reset) = server.delete("/v1/agents/bot/settings");
    assert_eq!(status, 200, "{reset}");
    assert_eq!(reset["effective"]["max_turns"], 3);
    assert_eq!(
        window_of(&server, "with-bot", json!({})),
        (6, "sliding_window".into())
    );
    assert_eq!(server.delete("/v1/settings").0, 200);
    assert_eq!(
        window_of(&server, "with-bot", json!({})),
        (12, "combined".into())
    );
}

#[test]
fn invalid_documents_are_refused_and_nothing_is_saved() {
    let server = TestServer::start();
    assert_eq!(
        server.put("/v1/settings", &json!({ "max_turns": 5 })).0,
        200
    );
    for bad in [
        json!({ "max_turns": 0 }),
        json!({ "session_history_depth": 101 }),
        json!({ "strategy": "magic" }),
        json!({ "max_turn": 3 }),
        json!({ "recall_k": 51 }),
        json!({ "overflow": "forget" }),
    ] {
        assert_error(&server.put("/v1/settings", &bad), 422, "invalid_setting");
        assert_error(
            &server.put("/v1/agents/bot/settings", &bad),
            422,
            "invalid_setting",
        );
    }
    assert_error(
        &server.put("/v1/settings", &json!([1, 2])),
        400,
        "invalid_body",
    );
    assert_error(
        &server.put("/v1/agents/a%2Fb/settings", &json!({})),
        422,
        "invalid_id",
    );
    let (_, kept) = server.get("/v1/settings");
    assert_eq!(kept["saved"], json!({ "max_turns": 5 }));
    let (_, agent) = server.get("/v1/agents/bot/settings");
    assert_eq!(agent["saved"], json!({}));
}

fn send_get_as(server: &TestServer, tenant: &str, path: &str) -> (u16, serde_json::Value) {
    memlayer_tests::send(server.request_as(tenant, reqwest::Method::GET, path))
}
