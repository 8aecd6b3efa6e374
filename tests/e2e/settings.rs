//! Saved context settings: a tenant's defaults, an agent's over them, a request's over both;
//! invalid documents refused before they are saved; tenants kept apart; an agent's memory
//! configuration shaping its next context.

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

/// An agent's memory configuration document maps onto its settings and applies from the next
/// context on; mistakes are refused with the field named, and nothing is saved.
#[test]
fn an_agents_memory_configuration_shapes_its_next_context() {
    let server = TestServer::start();
    converse(&server, "cfg-1", "bot");
    let body = json!({ "user_id": "u", "agent_id": "bot", "role": "user", "content": "Remember that I like tea." });
    assert_eq!(server.post("/v1/sessions/cfg-1/messages", &body).0, 201);
    let (status, _) = server.post(
        "/v1/users/u/memories",
        &json!({ "text": "Likes green tea", "type": "preference" }),
    );
    assert_eq!(status, 201);
    let context = || {
        let (status, answer) = server.post(
            "/v1/sessions/cfg-1/context",
            &json!({ "query": "What tea do I like?" }),
        );
        assert_eq!(status, 200, "{answer}");
        answer
    };
    let before = context();
    assert_eq!(
        before["report"]["budget"], 7372,
        "8192 less the 10% reserve"
    );
    assert_eq!(before["report"]["memories"].as_array().unwrap().len(), 1);

    let document = json!({
        "session_memory": false,
        "types": [
            { "id": "working_memory", "enabled": true,
              "config": { "max_tokens": 4000, "compaction_strategy": "summarize" } },
            { "id": "long_term", "enabled": false, "config": { "max_memories": 20 } },
            { "id": "episodic", "enabled": true, "config": { "max_lessons": 3 } },
        ],
    });
    let (status, saved) = server.put("/v1/agents/bot/memory-config", &document);
    assert_eq!(status, 200, "{saved}");
    assert_eq!(saved["session_memory"], false);
    assert_eq!(
        saved["types"][0],
        json!({ "id": "working_memory", "enabled": true,
                "config": { "max_tokens": 4000, "compaction_strategy": "summarize" } })
    );
    assert_eq!(saved["types"][1]["enabled"], false);
    assert_eq!(saved["types"][2]["config"]["max_lessons"], 3);
    assert_eq!(server.get("/v1/agents/bot/memory-config").1, saved);
    let (_, settings) = server.get("/v1/agents/bot/settings");
    assert_eq!(settings["effective"]["context_window"], 4000);
    assert_eq!(settings["effective"]["overflow"], "summarize");
    assert_eq!(settings["effective"]["long_term_memory"], false);

    // The next context: the smaller budget, summarised overflow, no long-term memories.
    let after = context();
    assert_eq!(
        after["report"]["budget"], 3600,
        "4000 less the 10% reserve, floored"
    );
    assert_eq!(after["settings"]["overflow"], "summarize");
    assert_eq!(after["report"]["memories"], json!([]));
    // Another agent keeps the defaults.
    assert_eq!(
        server.get("/v1/agents/other/memory-config").1["types"][0]["config"]["max_tokens"],
        8192
    );

    for (document, code, field) in [
        (
            json!({ "types": [{ "id": "semantic" }] }),
            "unknown_memory_type",
            "types[0].id",
        ),
        (
            json!({ "types": [{ "id": "long_term", "config": { "max_memories": "many" } }] }),
            "invalid_memory_config",
            "types[0].config.max_memories",
        ),
        (
            json!({ "types": [{ "id": "long_term", "config": { "max_memories": 5000 } }] }),
            "invalid_memory_config",
            "types[0].config.max_memories",
        ),
        (
            json!({ "types": [{ "id": "working_memory", "enabled": "yes" }] }),
            "invalid_memory_config",
            "types[0].enabled",
        ),
        (
            json!({ "session_memory": 1 }),
            "invalid_memory_config",
            "session_memory",
        ),
    ] {
        let message = assert_error(
            &server.put("/v1/agents/bot/memory-config", &document),
            422,
            code,
        );
        assert!(message.contains(field), "{field}: {message}");
    }
    assert_eq!(
        server.get("/v1/agents/bot/memory-config").1,
        saved,
        "nothing was saved"
    );
}

/// JSON Schema counts `475.0` as an integer, and so does the OpenAPI document: a whole number
/// written as a float (as Python writes a computed float) is taken wherever an integer is,
/// and saved as the integer; a fraction is still refused.
#[test]
fn whole_numbers_written_as_floats_are_integers() {
    let server = TestServer::start();
    let (status, saved) = server.put(
        "/v1/settings",
        &json!({ "memory_tokens": 475.0, "max_turns": 3.0 }),
    );
    assert_eq!(status, 200, "{saved}");
    assert!(saved["saved"]["memory_tokens"].is_u64(), "{saved}");
    assert_eq!(saved["effective"]["max_turns"], 3);
    let body = json!({ "user_id": "u", "agent_id": "a", "role": "user", "content": "Hi", "token_count": 4e3 });
    let (status, answer) = server.post("/v1/sessions/floats/messages", &body);
    assert_eq!(status, 201, "{answer}");
    let (_, page) = server.get("/v1/sessions/floats/messages");
    assert_eq!(page["messages"][0]["token_count"], 4000, "{page}");
    let (status, answer) = server.post(
        "/v1/recall",
        &json!({ "query": "hi", "session_id": "floats", "k": 2.5 }),
    );
    assert_error(&(status, answer), 400, "invalid_body");
}
