//! Episodic lessons through the real server: episodes recorded and listed, the lessons of a
//! task type (standing ones always, the newest of the type, deterministic), the context's
//! lessons layer, isolation between users and tenants, validation, and deletion.

use memlayer_tests::{TestServer, assert_error, json};
use serde_json::Value;

fn record(server: &TestServer, user: &str, body: Value) -> Value {
    let (status, answer) = server.post(&format!("/v1/users/{user}/episodes"), &body);
    assert_eq!(status, 201, "{answer}");
    answer
}

fn episode(task_type: &str, outcome: &str, lesson: &str) -> Value {
    json!({
        "task_type": task_type,
        "description": format!("handled a {task_type}"),
        "outcome": outcome,
        "reflection": "what went wrong and why",
        "lesson": lesson,
    })
}

#[test]
fn lessons_reach_the_users_own_context_and_nobody_elses() {
    let server = TestServer::start();
    for (user, content) in [
        ("alice", "I want a refund for order 4711."),
        ("bob", "I want a refund for order 99."),
    ] {
        let body =
            json!({ "user_id": user, "agent_id": "support", "role": "user", "content": content });
        let (status, answer) = server.post(&format!("/v1/sessions/{user}-1/messages"), &body);
        assert_eq!(status, 201, "{answer}");
    }
    let standing = record(
        &server,
        "alice",
        json!({
            "task_type": "refund",
            "description": "every refund",
            "outcome": "success",
            "lesson": "Always confirm the order number first.",
            "standing": true,
        }),
    );
    record(
        &server,
        "alice",
        episode(
            "refund",
            "failure",
            "Ask for the receipt before promising anything.",
        ),
    );
    record(
        &server,
        "alice",
        episode("upgrade", "partial", "Check the contract end date."),
    );
    let newest = record(
        &server,
        "alice",
        json!({
            "task_type": "refund",
            "description": "a refund in alice-1",
            "outcome": "partial",
            "lesson": "Offer store credit when the receipt is lost.",
            "source_session_id": "alice-1",
        }),
    );
    assert_eq!(newest["source_session_id"], "alice-1");
    record(
        &server,
        "bob",
        episode("refund", "failure", "Bob's lesson: escalate to billing."),
    );

    // The lessons of a task type: standing first, then the newest of the type.
    let (status, lessons) = server.get("/v1/users/alice/lessons?task_type=refund");
    assert_eq!(status, 200, "{lessons}");
    assert_eq!(
        lessons["text"],
        "Lessons from earlier tasks:\n\
         - (standing) Always confirm the order number first.\n\
         - (refund, partial) Offer store credit when the receipt is lost.\n\
         - (refund, failure) Ask for the receipt before promising anything."
    );
    assert_eq!(lessons["episodes"][0], standing["episode_id"]);
    assert_eq!(
        server.get("/v1/users/alice/lessons?task_type=refund").1,
        lessons
    );
    let (_, upgrade) = server.get("/v1/users/alice/lessons?task_type=upgrade");
    let text = upgrade["text"].as_str().unwrap();
    assert!(
        text.contains("contract end date") && !text.contains("receipt"),
        "{text}"
    );
    let (_, bobs) = server.get("/v1/users/bob/lessons?task_type=refund");
    assert_eq!(
        bobs["text"],
        "Lessons from earlier tasks:\n- (refund, failure) Bob's lesson: escalate to billing."
    );
    let (_, listed) = server.get("/v1/users/alice/episodes?task_type=refund");
    assert_eq!(listed["episodes"].as_array().unwrap().len(), 3, "{listed}");

    // The context's lessons layer, for the task type the request names.
    let context = |user: &str, settings: Value| {
        let (status, answer) = server.post(
            &format!("/v1/sessions/{user}-1/context"),
            &json!({ "query": "Where is my refund?", "format": "text", "settings": settings }),
        );
        assert_eq!(status, 200, "{answer}");
        answer
    };
    let alice = context("alice", json!({ "task_type": "refund" }));
    let text = alice["text"].as_str().unwrap();
    assert!(text.contains("Lessons from earlier tasks:"), "{text}");
    assert!(
        text.contains("Offer store credit") && !text.contains("Bob's lesson"),
        "{text}"
    );
    assert_eq!(alice["report"]["lessons"], lessons["episodes"]);
    assert!(
        alice["report"]["layers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|layer| layer["layer"] == "lessons"),
        "{}",
        alice["report"]
    );
    let bob = context("bob", json!({ "task_type": "refund" }));
    let text = bob["text"].as_str().unwrap();
    assert!(
        text.contains("escalate to billing") && !text.contains("store credit"),
        "{text}"
    );
    // Without a task type only standing lessons come; with the layer off, none.
    let plain = context("alice", json!({}));
    let text = plain["text"].as_str().unwrap();
    assert!(
        text.contains("confirm the order number") && !text.contains("store credit"),
        "{text}"
    );
    let off = context("alice", json!({ "task_type": "refund", "lessons": false }));
    assert_eq!(off["report"]["lessons"], json!([]));

    // Another tenant does not see the episode exist.
    let id = newest["episode_id"].as_u64().unwrap();
    let foreign = memlayer_tests::send(server.request_as(
        "other",
        reqwest::Method::GET,
        &format!("/v1/episodes/{id}"),
    ));
    assert_error(&foreign, 404, "episode_not_found");

    // Erasing the session it was drawn from erases the episode.
    assert_eq!(server.delete("/v1/sessions/alice-1").0, 204);
    assert_error(
        &server.get(&format!("/v1/episodes/{id}")),
        404,
        "episode_not_found",
    );
    // Deleting one is an erasure with a receipt.
    let standing_id = standing["episode_id"].as_u64().unwrap();
    let (status, receipt) = server.delete(&format!("/v1/episodes/{standing_id}"));
    assert_eq!(status, 200, "{receipt}");
    assert_eq!(receipt["counts"]["episodes"], 1);
    assert_error(
        &server.delete(&format!("/v1/episodes/{standing_id}")),
        404,
        "episode_not_found",
    );
    // Erasing the user erases the rest and counts them.
    let (status, receipt) = server.delete("/v1/users/alice");
    assert_eq!(status, 200, "{receipt}");
    assert_eq!(receipt["counts"]["episodes"], 2, "{receipt}");
    let (_, none) = server.get("/v1/users/alice/lessons?task_type=refund");
    assert_eq!(none["text"], Value::Null);
    assert_eq!(
        server.get("/v1/users/bob/episodes").1["episodes"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn bad_episodes_are_refused_with_the_field_named() {
    let server = TestServer::start();
    let body =
        json!({ "user_id": "carol", "agent_id": "support", "role": "user", "content": "hi" });
    assert_eq!(server.post("/v1/sessions/carol-1/messages", &body).0, 201);
    let path = "/v1/users/dave/episodes";
    let with = |change: Value| {
        let mut body = episode("refund", "failure", "a lesson");
        body.as_object_mut()
            .unwrap()
            .extend(change.as_object().unwrap().clone());
        body
    };
    for (body, status, code, field) in [
        (
            with(json!({ "outcome": "meh" })),
            400,
            "invalid_body",
            "outcome",
        ),
        (
            with(json!({ "lesson": "x".repeat(1_001) })),
            422,
            "invalid_value",
            "lesson",
        ),
        (
            with(json!({ "lesson": "  " })),
            422,
            "invalid_value",
            "lesson",
        ),
        (
            with(json!({ "description": "x".repeat(4_001) })),
            422,
            "invalid_value",
            "description",
        ),
        (
            with(json!({ "task_type": "two words" })),
            422,
            "invalid_id",
            "task_type",
        ),
        // Another user's session is not found, as if it did not exist.
        (
            with(json!({ "source_session_id": "carol-1" })),
            404,
            "session_not_found",
            "carol-1",
        ),
        (
            with(json!({ "color": "red" })),
            400,
            "invalid_body",
            "color",
        ),
    ] {
        let message = assert_error(&server.post(path, &body), status, code);
        assert!(message.contains(field), "{field}: {message}");
    }
    assert_error(&server.get("/v1/episodes/12345"), 404, "episode_not_found");
    assert_error(
        &server.get("/v1/users/dave/lessons?task_type=no%20spaces"),
        422,
        "invalid_id",
    );
    assert_eq!(server.get(path).1["episodes"], json!([]));
}
