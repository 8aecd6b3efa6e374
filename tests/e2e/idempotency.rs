//! Idempotent appends: a retry with the same key (the `Idempotency-Key` header or the body
//! field `idempotency_key`) answers `200` with `replayed: true` and the first append's
//! indices, and stores nothing; the same key with another body is a `409`.

use memlayer_tests::{TestServer, assert_error, json, send};
use reqwest::Method;
use serde_json::Value;

const MESSAGES: &str = "/v1/sessions/chat-1/messages";

fn append_with_key(server: &TestServer, path: &str, key: &str, body: &Value) -> (u16, Value) {
    send(
        server
            .request(Method::POST, path)
            .header("Idempotency-Key", key)
            .json(body),
    )
}

fn server_with_session() -> TestServer {
    let server = TestServer::start();
    let (status, _) = server.post(
        MESSAGES,
        &json!({
            "role": "system",
            "content": "be brief",
            "user_id": "alice",
            "agent_id": "helper",
        }),
    );
    assert_eq!(status, 201);
    server
}

fn two_messages() -> Value {
    json!({ "messages": [
        { "role": "user", "content": "what is 6 x 7?" },
        { "role": "assistant", "content": "42", "metadata": { "confidence": 0.9 } },
    ]})
}

#[test]
fn a_retry_with_the_same_header_key_is_replayed_and_not_stored_twice() {
    let server = server_with_session();
    let body = two_messages();
    let first = append_with_key(&server, MESSAGES, "req-1", &body);
    assert_eq!(
        first,
        (
            201,
            json!({
                "session_id": "chat-1",
                "indices": [1, 2],
                "created_session": false,
                "replayed": false,
            })
        )
    );
    let (_, stored) = server.get("/v1/sessions/chat-1");

    for _ in 0..3 {
        let retry = append_with_key(&server, MESSAGES, "req-1", &body);
        assert_eq!(
            retry,
            (
                200,
                json!({
                    "session_id": "chat-1",
                    "indices": [1, 2],
                    "created_session": false,
                    "replayed": true,
                })
            )
        );
    }
    let (_, after) = server.get("/v1/sessions/chat-1");
    assert_eq!(
        after, stored,
        "a replay writes nothing, not even the activity time"
    );
    assert_eq!(after["message_count"], 3);

    // Later appends continue after the first; a late retry still answers the first indices.
    let (status, answer) = server.post(MESSAGES, &json!({ "role": "user", "content": "thanks" }));
    assert_eq!((status, &answer["indices"]), (201, &json!([3])));
    let (status, late) = append_with_key(&server, MESSAGES, "req-1", &body);
    assert_eq!(
        (status, &late["indices"], &late["replayed"]),
        (200, &json!([1, 2]), &json!(true))
    );
    let (_, session) = server.get("/v1/sessions/chat-1");
    assert_eq!(session["message_count"], 4);
}

#[test]
fn the_body_field_key_works_like_the_header() {
    let server = server_with_session();
    let mut body = two_messages();
    body["idempotency_key"] = json!("req-body");
    let (status, first) = server.post(MESSAGES, &body);
    assert_eq!(
        (status, &first["indices"], &first["replayed"]),
        (201, &json!([1, 2]), &json!(false))
    );
    let (status, retry) = server.post(MESSAGES, &body);
    assert_eq!(
        (status, &retry["indices"], &retry["replayed"]),
        (200, &json!([1, 2]), &json!(true))
    );

    // The same key in the header is the same key, and header and field may both be given.
    let (status, retry) = append_with_key(&server, MESSAGES, "req-body", &two_messages());
    assert_eq!(
        (status, &retry["indices"], &retry["replayed"]),
        (200, &json!([1, 2]), &json!(true))
    );
    let (status, retry) = append_with_key(&server, MESSAGES, "req-body", &body);
    assert_eq!((status, &retry["replayed"]), (200, &json!(true)));

    let (_, session) = server.get("/v1/sessions/chat-1");
    assert_eq!(session["message_count"], 3);
}

#[test]
fn a_retried_create_on_first_use_is_replayed() {
    let server = TestServer::start();
    let body =
        json!({ "role": "user", "content": "hello", "user_id": "bob", "agent_id": "helper" });
    let first = append_with_key(&server, "/v1/sessions/new-1/messages", "create-1", &body);
    assert_eq!(
        first,
        (
            201,
            json!({
                "session_id": "new-1",
                "indices": [0],
                "created_session": true,
                "replayed": false,
            })
        )
    );
    let retry = append_with_key(&server, "/v1/sessions/new-1/messages", "create-1", &body);
    // The replay is the first answer again, `created_session` included.
    assert_eq!(
        retry,
        (
            200,
            json!({
                "session_id": "new-1",
                "indices": [0],
                "created_session": true,
                "replayed": true,
            })
        )
    );
    let (_, listing) = server.get("/v1/sessions");
    assert_eq!(listing["total_elements"], 1);
    let (_, session) = server.get("/v1/sessions/new-1");
    assert_eq!(session["message_count"], 1);
}

#[test]
fn the_same_key_with_another_body_conflicts_and_stores_nothing() {
    let server = server_with_session();
    let (status, _) = append_with_key(
        &server,
        MESSAGES,
        "req-1",
        &json!({ "role": "user", "content": "a" }),
    );
    assert_eq!(status, 201);
    let (_, before) = server.get("/v1/sessions/chat-1");

    for other in [
        json!({ "role": "user", "content": "b" }),
        json!({ "role": "assistant", "content": "a" }),
        json!({ "role": "user", "content": "a", "token_count": 77 }),
        json!({ "role": "user", "content": "a", "metadata": { "x": 1 } }),
        json!({ "role": "user", "content": "a", "timestamp": "2026-01-01T00:00:00Z" }),
        json!({
            "messages": [{ "role": "user", "content": "a" }, { "role": "user", "content": "a" }],
        }),
    ] {
        let answer = append_with_key(&server, MESSAGES, "req-1", &other);
        let message = assert_error(&answer, 409, "conflict");
        assert!(message.contains("req-1"), "{message}");
    }
    let (_, after) = server.get("/v1/sessions/chat-1");
    assert_eq!(after, before);

    // The original body is still a replay.
    let (status, retry) = append_with_key(
        &server,
        MESSAGES,
        "req-1",
        &json!({ "role": "user", "content": "a" }),
    );
    assert_eq!((status, &retry["indices"]), (200, &json!([1])));
}

#[test]
fn header_and_field_keys_that_differ_are_rejected() {
    let server = server_with_session();
    let (_, before) = server.get("/v1/sessions/chat-1");
    let answer = append_with_key(
        &server,
        MESSAGES,
        "key-a",
        &json!({ "role": "user", "content": "x", "idempotency_key": "key-b" }),
    );
    assert_error(&answer, 422, "invalid_value");
    let (_, after) = server.get("/v1/sessions/chat-1");
    assert_eq!(after, before);
}

#[test]
fn keys_are_scoped_to_their_session() {
    let server = server_with_session();
    let body =
        json!({ "role": "user", "content": "same", "user_id": "alice", "agent_id": "helper" });
    let (status, first) = append_with_key(&server, MESSAGES, "shared-key", &body);
    assert_eq!((status, &first["indices"]), (201, &json!([1])));
    let (status, other) =
        append_with_key(&server, "/v1/sessions/chat-2/messages", "shared-key", &body);
    assert_eq!(
        (
            status,
            &other["indices"],
            &other["replayed"],
            &other["created_session"]
        ),
        (201, &json!([0]), &json!(false), &json!(true))
    );

    // Deleting a session forgets its keys: the same id and key start afresh.
    assert_eq!(server.delete("/v1/sessions/chat-2").0, 204);
    let (status, again) =
        append_with_key(&server, "/v1/sessions/chat-2/messages", "shared-key", &body);
    assert_eq!(
        (
            status,
            &again["indices"],
            &again["replayed"],
            &again["created_session"]
        ),
        (201, &json!([0]), &json!(false), &json!(true))
    );
}
