//! Context assembly over HTTP (`POST /v1/sessions/{id}/context`): each strategy's window,
//! the combined strategy's facts and recalled messages, output formats, the report, refused
//! settings, and overflow summarised into a persisted checkpoint.

use memlayer_llm::{ChatClient, Reply};
use memlayer_server::ServerConfig;
use memlayer_tests::{TestServer, assert_error, json};
use serde_json::Value;

/// A support conversation: the name and account number early, then small talk.
fn chat(server: &TestServer) {
    let mut messages = vec![
        json!({ "role": "system", "content": "You are the support agent of Acme Telecom." }),
        json!({ "role": "user", "content": "Hi, my name is Dana and my account number is 55-0192." }),
        json!({ "role": "assistant", "content": "Welcome Dana! How can I help?" }),
        json!({ "role": "user", "content": "My router model is the Fritzbox 7590 and it overheats." }),
        json!({ "role": "assistant", "content": "Thanks, noted the model." }),
    ];
    for turn in 0..8 {
        messages.push(json!({ "role": "user", "content": format!("Small talk number {turn} about the weather.") }));
        messages.push(json!({ "role": "assistant", "content": "Indeed, lovely weather." }));
    }
    let body = json!({ "user_id": "dana", "agent_id": "support", "messages": messages });
    assert_eq!(server.post("/v1/sessions/chat/messages", &body).0, 201);
}

fn context(server: &TestServer, body: Value) -> Value {
    let (status, answer) = server.post("/v1/sessions/chat/context", &body);
    assert_eq!(status, 200, "{answer}");
    answer
}

fn text(answer: &Value) -> &str {
    answer["text"].as_str().unwrap()
}

#[test]
fn the_combined_strategy_brings_back_facts_and_relevant_older_turns() {
    let server = TestServer::start();
    chat(&server);
    let answer = context(
        &server,
        json!({
            "query": "Which router do I have?",
            "format": "text",
            "settings": { "strategy": "combined", "max_turns": 2 },
        }),
    );
    let prompt = text(&answer);
    assert!(
        prompt.starts_with("You are the support agent of Acme Telecom.\nKnown facts:"),
        "{prompt}"
    );
    assert!(prompt.contains("- name: Dana"), "{prompt}");
    assert!(prompt.contains("- account number: 55-0192"), "{prompt}");
    assert!(
        prompt.contains("Fritzbox 7590"),
        "recall brings the router back: {prompt}"
    );
    assert!(
        prompt.ends_with("Assistant: Indeed, lovely weather."),
        "{prompt}"
    );
    let report = &answer["report"];
    assert_eq!(report["strategy"], "combined");
    assert_eq!(report["window"], json!([17, 18, 19, 20]));
    assert_eq!(report["facts"], 3, "name, account number and router model");
    assert!(
        report["recalled"]
            .as_array()
            .unwrap()
            .iter()
            .any(|hit| hit["index"] == 3 && hit["session_id"] == "chat"),
        "{report}"
    );
    let total: u64 = report["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(report["total_tokens"].as_u64().unwrap(), total);
}

#[test]
fn the_default_window_narrows_when_recall_and_facts_carry_the_older_turns() {
    let server = TestServer::start();
    chat(&server);
    // Ten exchanges after the instructions (messages 1 to 20).
    let recalling = context(
        &server,
        json!({ "query": "Which router do I have?", "format": "text" }),
    );
    assert_eq!(recalling["settings"]["max_turns"], 4, "{recalling}");
    assert_eq!(
        recalling["report"]["window"],
        json!((13..=20).collect::<Vec<_>>())
    );
    let prompt = text(&recalling);
    assert!(prompt.contains("Fritzbox 7590"), "recalled: {prompt}");
    assert!(prompt.contains("55-0192"), "a known fact: {prompt}");

    // Without a query nothing is recalled, so the window keeps the sliding default.
    let plain = context(&server, json!({}));
    assert_eq!(plain["settings"]["max_turns"], 10, "{plain}");
    assert_eq!(
        plain["report"]["window"],
        json!((1..=20).collect::<Vec<_>>())
    );

    // A window the caller sets is kept, query or not.
    let set = context(
        &server,
        json!({ "query": "Which router do I have?", "settings": { "max_turns": 6 } }),
    );
    assert_eq!(set["settings"]["max_turns"], 6);
    assert_eq!(set["report"]["window"], json!((9..=20).collect::<Vec<_>>()));
}

#[test]
fn a_sliding_window_forgets_what_lies_outside_it() {
    let server = TestServer::start();
    chat(&server);
    let answer = context(
        &server,
        json!({ "format": "text", "settings": { "strategy": "sliding_window", "max_turns": 2 } }),
    );
    assert!(!text(&answer).contains("Dana"), "{}", text(&answer));
    let dropped = answer["report"]["dropped"].as_array().unwrap();
    assert!(dropped.iter().all(|d| d["reason"] == "outside_window"));
    assert_eq!(dropped.len(), 8);
}

#[test]
fn history_depth_and_output_formats() {
    let server = TestServer::start();
    chat(&server);
    let answer = context(
        &server,
        json!({ "format": "openai", "settings": { "strategy": "history_depth", "session_history_depth": 9 } }),
    );
    let messages = answer["messages"].as_array().unwrap();
    assert_eq!(
        messages[0],
        json!({ "role": "system", "content": "You are the support agent of Acme Telecom." })
    );
    assert_eq!(
        messages[1]["content"],
        "[earlier question] (turn 1): Hi, my name is Dana and my account number is 55-0192."
    );
    assert_eq!(messages[2]["role"], "user");

    let anthropic = context(
        &server,
        json!({ "format": "anthropic", "settings": { "strategy": "full_history" } }),
    );
    assert_eq!(
        anthropic["system"],
        "You are the support agent of Acme Telecom."
    );
    let turns = anthropic["messages"].as_array().unwrap();
    assert_eq!((turns.len(), turns[0]["role"].clone()), (20, json!("user")));
}

#[test]
fn bad_settings_and_unknown_sessions_are_refused() {
    let server = TestServer::start();
    chat(&server);
    for settings in [
        json!({ "session_history_depth": 0 }),
        json!({ "session_history_depth": 101 }),
        json!({ "window_reserve": 0.99 }),
        json!({ "context_window": 12 }),
        json!({ "strategy": "magic" }),
        json!({ "max_turn": 3 }),
        json!({ "recall_k": 1000 }),
    ] {
        let answer = server.post(
            "/v1/sessions/chat/context",
            &json!({ "settings": settings }),
        );
        assert_error(&answer, 422, "invalid_setting");
    }
    assert_error(
        &server.post("/v1/sessions/chat/context", &json!({ "settings": 3 })),
        400,
        "invalid_body",
    );
    assert_error(
        &server.post("/v1/sessions/nope/context", &json!({})),
        404,
        "session_not_found",
    );
}

#[test]
fn entities_show_the_facts_in_force_with_their_history() {
    let server = TestServer::start();
    let body = json!({
        "user_id": "dana",
        "agent_id": "support",
        "messages": [
            { "role": "user", "content": "My name is Dana and my email is dana@example.org." },
            { "role": "assistant", "content": "Hi Dana." },
            { "role": "user", "content": "Actually, my name is Daria, not Dana." },
        ],
    });
    assert_eq!(server.post("/v1/sessions/s/messages", &body).0, 201);
    let (status, answer) = server.get("/v1/sessions/s/entities");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({
            "session_id": "s",
            "facts": {
                "email": { "value": "dana@example.org", "source": 0, "correction": false, "history": [] },
                "name": { "value": "Daria", "source": 2, "correction": true, "history": [["Dana", 0]] },
            },
        })
    );
    assert_error(
        &server.get("/v1/sessions/nope/entities"),
        404,
        "session_not_found",
    );
}

/// A long support conversation: facts early, then enough talk to overflow a small window.
fn long_chat(server: &TestServer) {
    let mut messages = vec![
        json!({ "role": "system", "content": "You are the support agent of Acme Telecom." }),
        json!({ "role": "user", "content": "Hi, my name is Dana and my account number is 55-0192." }),
        json!({ "role": "assistant", "content": "Welcome Dana! How can I help?" }),
    ];
    for turn in 0..30 {
        messages.push(json!({ "role": "user", "content": format!("Line check {turn}: the signal on the living room socket dropped again this evening.") }));
        messages.push(json!({ "role": "assistant", "content": format!("Logged incident {turn} against your line; the engineer will review it.") }));
    }
    let body = json!({ "user_id": "dana", "agent_id": "support", "messages": messages });
    assert_eq!(server.post("/v1/sessions/long/messages", &body).0, 201);
}

const SUMMARIZE: &str =
    r#"{ "strategy": "full_history", "overflow": "summarize", "context_window": 1024 }"#;

fn summarized(server: &TestServer) -> Value {
    let settings: Value = serde_json::from_str(SUMMARIZE).unwrap();
    let (status, answer) = server.post(
        "/v1/sessions/long/context",
        &json!({ "format": "text", "settings": settings }),
    );
    assert_eq!(status, 200, "{answer}");
    answer
}

#[test]
fn overflow_is_summarised_once_and_later_loads_start_after_the_checkpoint() {
    let server = TestServer::start();
    long_chat(&server);
    let first = summarized(&server);
    let prompt = text(&first);
    assert_eq!(first["summary_written"]["written"], true, "{first}");
    assert_eq!(first["summary_written"]["summarizer"], "extractive");
    let (from, to) = (
        first["report"]["summary"][0].as_u64().unwrap(),
        first["report"]["summary"][1].as_u64().unwrap(),
    );
    assert_eq!(
        from, 1,
        "the summary starts at the first turn; instructions stay apart"
    );
    assert!(
        prompt.starts_with("You are the support agent of Acme Telecom.\n[Conversation Summary]"),
        "{prompt}"
    );
    assert!(
        prompt.contains("55-0192"),
        "the summary keeps the account number: {prompt}"
    );
    let report = &first["report"];
    assert!(report["total_tokens"].as_u64().unwrap() <= report["budget"].as_u64().unwrap());
    assert_eq!(report["window"][0].as_u64().unwrap(), to + 1);
    assert!(prompt.ends_with("Logged incident 29 against your line; the engineer will review it."));

    // The next context reuses the checkpoint instead of summarising again.
    let second = summarized(&server);
    assert!(second.get("summary_written").is_none(), "{second}");
    assert_eq!(second["report"]["summary"], first["report"]["summary"]);
    assert_eq!(text(&second), prompt);

    // Every turn stays stored, and a drop-overflow context ignores the summary.
    let (_, stored) = server.get("/v1/sessions/long/messages?limit=100");
    assert_eq!(stored["messages"].as_array().unwrap().len(), 63);
    let (_, dropped) = server.post(
        "/v1/sessions/long/context",
        &json!({ "settings": { "strategy": "full_history", "context_window": 1024 } }),
    );
    assert_eq!(dropped["report"]["summary"], Value::Null);
}

#[test]
fn a_configured_model_summarises_and_a_failing_one_falls_back_to_extractive() {
    let (_runtime, upstream) = memlayer_tests::fake_upstream();
    let server = TestServer::with_config(ServerConfig {
        summarizer_model: Some(ChatClient::new(upstream.config()).unwrap()),
        ..memlayer_tests::config()
    });
    long_chat(&server);
    upstream.push(Reply::text(
        "Dana (account 55-0192) reports the living room socket dropping every evening; incidents are logged.",
    ));
    let answer = summarized(&server);
    assert_eq!(answer["summary_written"]["summarizer"], "llm", "{answer}");
    assert!(
        text(&answer).contains("Dana (account 55-0192) reports the living room socket"),
        "{}",
        text(&answer)
    );
    let sent = &upstream.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    let prompt = sent.body["messages"][1]["content"].as_str().unwrap();
    assert!(prompt.contains("- account number: 55-0192"), "{prompt}");
    assert!(prompt.contains("User: Line check 0:"), "{prompt}");

    // More turns overflow again; the model is down, so the extractive summariser steps in.
    let more: Vec<Value> = (30..45)
        .flat_map(|turn| {
            [
                json!({ "role": "user", "content": format!("Line check {turn}: still dropping.") }),
                json!({ "role": "assistant", "content": format!("Logged incident {turn}.") }),
            ]
        })
        .collect();
    let body = json!({ "messages": more });
    assert_eq!(server.post("/v1/sessions/long/messages", &body).0, 201);
    upstream.push(Reply::error(503, "model overloaded", "server_error", None));
    let fallback = summarized(&server);
    let note = &fallback["summary_written"];
    assert_eq!(note["summarizer"], "extractive", "{fallback}");
    // What failed, in general words: the model's own message is the operator's business.
    assert_eq!(
        note["fallback_reason"], "the summariser failed: the model upstream answered 503",
        "{note}"
    );
    assert!(text(&fallback).contains("55-0192"), "{}", text(&fallback));
}
