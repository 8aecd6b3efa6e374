//! Every read has a bound: a long session, a busy run log, a user with many memories and a
//! memory corrected again and again answer in pages or keep their newest part, and a search
//! refuses more words than it scans for. The numbers are the documented defaults (README,
//! "Limits").

use memlayer_tests::{TestServer, assert_error, json};
use serde_json::Value;

/// Appends `count` one-word user messages ("m0", "m1", …) to `session` of user `u`.
fn long_session(server: &TestServer, session: &str, count: usize) {
    for first in (0..count).step_by(1_000) {
        let messages: Vec<Value> = (first..count.min(first + 1_000))
            .map(|n| json!({ "role": "user", "content": format!("m{n}") }))
            .collect();
        let body = json!({ "user_id": "u", "agent_id": "a", "messages": messages });
        let (status, answer) = server.post(&format!("/v1/sessions/{session}/messages"), &body);
        assert_eq!(status, 201, "{answer}");
    }
}

fn indices_of(numbers: &Value) -> Vec<u64> {
    let numbers = numbers.as_array().unwrap().iter();
    numbers.map(|n| n.as_u64().unwrap()).collect()
}

fn indices(messages: &Value) -> Vec<u64> {
    let messages = messages.as_array().unwrap().iter();
    messages.map(|m| m["index"].as_u64().unwrap()).collect()
}

#[test]
fn a_long_session_comes_in_pages_and_its_context_reads_the_newest_messages() {
    let server = TestServer::start();
    long_session(&server, "long", 11_000);

    let (status, session) = server.get("/v1/sessions/long");
    assert_eq!(status, 200);
    assert_eq!(session["message_count"], 11_000);
    assert_eq!(
        indices(&session["messages"]),
        (0..1_000).collect::<Vec<_>>()
    );
    assert_eq!(session["next_from"], 1_000);
    let (_, page) = server.get("/v1/sessions/long/messages?from=10500&limit=1000");
    assert_eq!(
        indices(&page["messages"]),
        (10_500..11_000).collect::<Vec<_>>()
    );
    assert_eq!(page.get("next_from"), None, "{page:?}");

    // Everything would fit the budget; the context still reads back 10,000 messages only.
    let (status, context) = server.post(
        "/v1/sessions/long/context",
        &json!({ "settings": { "strategy": "full_history", "context_window": 10_000_000 } }),
    );
    assert_eq!(status, 200, "{context}");
    let window = indices_of(&context["report"]["window"]);
    assert_eq!(window.len(), 10_000);
    assert_eq!((window[0], window[9_999]), (1_000, 10_999));
    assert_eq!(context["report"]["dropped"], json!([]));

    let (_, short) = server.get("/v1/sessions/long/messages?limit=1");
    assert_eq!(short["next_from"], 1);
    for limit in ["0", "1001"] {
        let (status, answer) = server.get(&format!("/v1/sessions/long/messages?limit={limit}"));
        assert_error(&(status, answer), 422, "invalid_value");
    }
}

#[test]
fn runs_come_in_pages_in_the_order_they_were_recorded() {
    let server = TestServer::start();
    long_session(&server, "s", 1);
    for n in 0..5 {
        let run = json!({ "run_id": format!("r{n}"), "status": "COMPLETED", "content": "ok" });
        assert_eq!(server.post("/v1/sessions/s/runs", &run).0, 201);
    }
    let page = |query: &str| -> Vec<String> {
        let (status, runs) = server.get(&format!("/v1/sessions/s/runs{query}"));
        assert_eq!(status, 200, "{runs}");
        let runs = runs.as_array().unwrap().iter();
        runs.map(|run| run["run_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(page(""), ["r0", "r1", "r2", "r3", "r4"]);
    assert_eq!(page("?limit=2"), ["r0", "r1"]);
    assert_eq!(page("?from=2&limit=2"), ["r2", "r3"]);
    assert_eq!(page("?from=4&limit=2"), ["r4"]);
    assert!(page("?from=9").is_empty());
    let (status, answer) = server.get("/v1/sessions/s/runs?limit=1001");
    assert_error(&(status, answer), 422, "invalid_value");
}

#[test]
fn a_users_memories_come_in_pages_and_a_memory_keeps_its_newest_texts() {
    let server = TestServer::start();
    let topics = ["sailing", "chess", "pottery", "cycling", "baking"];
    for topic in topics {
        let body = json!({ "text": format!("Enjoys {topic} on weekends"), "type": "preference" });
        let (status, answer) = server.post("/v1/users/u/memories", &body);
        assert_eq!(status, 201, "{answer}");
    }
    let texts = |page: &Value| -> Vec<String> {
        let memories = page["memories"].as_array().unwrap().iter();
        memories
            .map(|m| m["text"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut listed = Vec::new();
    let mut query = "limit=2".to_owned();
    loop {
        let (status, page) = server.get(&format!("/v1/users/u/memories?{query}"));
        assert_eq!(status, 200, "{page}");
        assert!(page["memories"].as_array().unwrap().len() <= 2);
        listed.extend(texts(&page));
        match page.get("next_after") {
            Some(after) => {
                // The cursor is the last memory's id: the store-wide sequence that orders
                // the list would show how many memories other tenants create.
                let last = page["memories"].as_array().unwrap().last().unwrap();
                assert_eq!(after, &last["memory_id"]);
                query = format!("limit=2&after={after}");
            }
            None => break,
        }
    }
    let expected: Vec<String> = topics
        .iter()
        .map(|topic| format!("Enjoys {topic} on weekends"))
        .collect();
    assert_eq!(listed, expected);
    // A cursor that is not one of the user's memories is not found.
    let (status, answer) = server.get("/v1/users/u/memories?after=12345");
    assert_error(&(status, answer), 404, "memory_not_found");

    // Corrected 25 times, a memory keeps its newest 20 replaced texts and at most 8 tags.
    for n in 0..=25 {
        let body = json!({
            "text": format!("Lives at house number {n} on the main street"),
            "type": "fact",
            "tags": [format!("t{n}")],
        });
        let (status, answer) = server.post("/v1/users/v/memories", &body);
        assert!(status == 200 || status == 201, "{answer}");
    }
    let (_, listed) = server.get("/v1/users/v/memories");
    let memory = &listed["memories"][0];
    assert_eq!(listed["memories"].as_array().unwrap().len(), 1, "{listed}");
    let history = memory["history"].as_array().unwrap();
    assert_eq!(history.len(), 20);
    assert_eq!(
        history[0]["text"],
        "Lives at house number 5 on the main street"
    );
    assert_eq!(memory["tags"].as_array().unwrap().len(), 8);
}

#[test]
fn a_search_looks_for_a_bounded_number_of_words() {
    let server = TestServer::start();
    long_session(&server, "s", 3);
    let words = |count: usize| -> String {
        let words: Vec<String> = (0..count).map(|n| format!("m{n}")).collect();
        words.join("+")
    };
    let (status, hits) = server.get(&format!("/v1/sessions/s/search?q={}", words(16)));
    assert_eq!(status, 200, "{hits}");
    let (status, answer) = server.get(&format!("/v1/sessions/s/search?q={}", words(17)));
    assert_error(&(status, answer), 422, "invalid_value");
    let long = "m".repeat(1_001);
    let (status, answer) = server.get(&format!("/v1/sessions/s/search?q={long}"));
    assert_error(&(status, answer), 422, "invalid_value");
}
