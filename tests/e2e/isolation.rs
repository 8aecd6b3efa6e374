//! Isolation between the users of one tenant when their requests race: ownership is checked
//! in the same store transaction that reads or writes a session, not before the request's
//! body arrives. A user-scoped key that sends its headers, waits until another user's session
//! with the id it named exists, and only then sends its body finds nothing; and random
//! interleavings of two users' requests on colliding session ids never show one user's text
//! to the other.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use memlayer_store::KeyRole;
use memlayer_tests::{TestServer, assert_error, json, send};
use proptest::prelude::*;
use reqwest::Method;
use serde_json::Value;

/// A message only Alice ever sends.
const ALICE_CANARY: &str = "canary-alice-7f3e9b21 locker code 4471";

fn user_key(server: &TestServer, user: &str) -> String {
    server.create_key("default", KeyRole::User, Some(user))
}

/// Alice's session `session`, created by her own key with the canary in it.
fn alice_says_canary(server: &TestServer, alice: &str, session: &str) {
    let (status, answer) = send(
        server
            .request_with_key(
                alice,
                Method::POST,
                &format!("/v1/sessions/{session}/messages"),
            )
            .json(&json!({
                "user_id": "alice", "agent_id": "support", "role": "user",
                "content": ALICE_CANARY,
            })),
    );
    assert_eq!(status, 201, "{answer}");
}

/// Sends a request's head at once and its body only after `meanwhile` ran, over a raw
/// connection, and returns the status and the whole answer as text. Whatever the server
/// checked before the body arrived may be stale by then.
fn with_late_body(
    server: &TestServer,
    key: &str,
    path: &str,
    body: &Value,
    meanwhile: impl FnOnce(),
) -> (u16, String) {
    let body = body.to_string();
    let mut stream = TcpStream::connect(server.addr()).expect("connect to the server");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("set a read timeout");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        server.addr(),
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("send the head");
    stream.flush().expect("flush the head");
    // Long enough for the server to have run every check it makes on the head alone.
    std::thread::sleep(Duration::from_millis(300));
    meanwhile();
    // The server may have answered already (it need not read a body to refuse).
    let _ = stream.write_all(body.as_bytes());
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    (status, text)
}

#[test]
fn a_session_created_by_another_user_while_the_body_is_on_its_way_stays_theirs() {
    let server = TestServer::start();
    let alice = user_key(&server, "alice");
    let mallory = user_key(&server, "mallory");

    // The context of a session that does not exist yet when Mallory's head arrives.
    let (status, answer) = with_late_body(
        &server,
        &mallory,
        "/v1/sessions/shared-1/context",
        &json!({ "query": "what is the locker code?" }),
        || alice_says_canary(&server, &alice, "shared-1"),
    );
    assert_eq!(status, 404, "{answer}");
    assert!(!answer.contains("canary-alice"), "{answer}");

    // A tool call searching it.
    let (status, answer) = with_late_body(
        &server,
        &mallory,
        "/v1/sessions/shared-2/tools/call",
        &json!({ "name": "session_search", "arguments": { "query": "locker" } }),
        || alice_says_canary(&server, &alice, "shared-2"),
    );
    assert_eq!(status, 404, "{answer}");
    assert!(!answer.contains("canary-alice"), "{answer}");

    // An append into it.
    let (status, answer) = with_late_body(
        &server,
        &mallory,
        "/v1/sessions/shared-3/messages",
        &json!({ "role": "user", "content": "mallory was here" }),
        || alice_says_canary(&server, &alice, "shared-3"),
    );
    assert_eq!(status, 404, "{answer}");
    let (_, stored) = server.get("/v1/sessions/shared-3");
    assert_eq!(
        stored["messages"].as_array().map(Vec::len),
        Some(1),
        "{stored}"
    );

    // Over MCP, Mallory's own session is deleted and Alice's takes its id in between.
    let (status, _) = send(
        server
            .request_with_key(&mallory, Method::POST, "/v1/sessions/shared-4/messages")
            .json(&json!({
                "user_id": "mallory", "agent_id": "support", "role": "user", "content": "hi",
            })),
    );
    assert_eq!(status, 201);
    let search = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": { "name": "session_search", "arguments": { "query": "locker" } },
    });
    let (status, answer) = with_late_body(
        &server,
        &mallory,
        "/v1/sessions/shared-4/mcp",
        &search,
        || {
            let (status, _) = server.delete("/v1/sessions/shared-4");
            assert_eq!(status, 204);
            alice_says_canary(&server, &alice, "shared-4");
        },
    );
    assert!(!answer.contains("canary-alice"), "{status} {answer}");
}

#[test]
fn a_taken_session_id_answers_the_same_whoever_holds_it() {
    let server = TestServer::start();
    let alice = user_key(&server, "alice");
    let mallory = user_key(&server, "mallory");
    alice_says_canary(&server, &alice, "held-by-alice");
    let create = |id: &str| {
        send(
            server
                .request_with_key(&mallory, Method::POST, "/v1/sessions")
                .json(&json!({ "session_id": id, "user_id": "mallory", "agent_id": "support" })),
        )
    };
    assert_eq!(create("held-by-mallory").0, 201);
    let own = assert_error(&create("held-by-mallory"), 409, "conflict");
    let theirs = assert_error(&create("held-by-alice"), 409, "conflict");
    assert_eq!(
        own.replace("held-by-mallory", "ID"),
        theirs.replace("held-by-alice", "ID")
    );
    // Appending to create it on first use answers alike.
    let append =
        |id: &str| {
            send(
            server
                .request_with_key(&mallory, Method::POST, &format!("/v1/sessions/{id}/messages"))
                .json(&json!({
                    "user_id": "mallory", "agent_id": "billing", "role": "user", "content": "hi",
                })),
        )
        };
    let own = assert_error(&append("held-by-mallory"), 409, "conflict");
    let theirs = assert_error(&append("held-by-alice"), 409, "conflict");
    assert_eq!(
        own.replace("held-by-mallory", "ID"),
        theirs.replace("held-by-alice", "ID")
    );
}

/// What one user does in a race with another over the same few session ids.
#[derive(Debug, Clone)]
enum Step {
    Create(usize),
    Append(usize),
    Context(usize),
    Search(usize),
    Mcp(usize),
    Recall,
    Erase(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let session = 0..3usize;
    prop_oneof![
        1 => session.clone().prop_map(Step::Create),
        3 => session.clone().prop_map(Step::Append),
        2 => session.clone().prop_map(Step::Context),
        1 => session.clone().prop_map(Step::Search),
        1 => session.clone().prop_map(Step::Mcp),
        1 => Just(Step::Recall),
        1 => session.prop_map(Step::Erase),
    ]
}

/// Runs `steps` as `user`, saying only `canary` texts, and returns every answer's text.
fn act(server: &TestServer, key: &str, user: &str, canary: &str, steps: &[Step]) -> Vec<String> {
    let path = |session: usize, rest: &str| format!("/v1/sessions/race-{session}{rest}");
    steps
        .iter()
        .map(|step| {
            let (method, path, body) = match step {
                Step::Create(s) => (
                    Method::POST,
                    "/v1/sessions".to_owned(),
                    Some(json!({ "session_id": format!("race-{s}"), "user_id": user, "agent_id": "a" })),
                ),
                Step::Append(s) => (
                    Method::POST,
                    path(*s, "/messages"),
                    Some(json!({
                        "user_id": user, "agent_id": "a", "role": "user",
                        "content": format!("{canary} my locker code"),
                    })),
                ),
                Step::Context(s) => (
                    Method::POST,
                    path(*s, "/context"),
                    Some(json!({ "query": "locker code" })),
                ),
                Step::Search(s) => (Method::GET, path(*s, "/search?q=locker"), None),
                Step::Mcp(s) => (
                    Method::POST,
                    path(*s, "/mcp"),
                    Some(json!({
                        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                        "params": { "name": "session_search", "arguments": { "query": "locker" } },
                    })),
                ),
                Step::Recall => (
                    Method::POST,
                    "/v1/recall".to_owned(),
                    Some(json!({ "user_id": user, "query": "locker code", "k": 50 })),
                ),
                Step::Erase(s) => (Method::DELETE, path(*s, ""), None),
            };
            let mut request = server
                .request_with_key(key, method, &path)
                .header("accept", "application/json, text/event-stream");
            if let Some(body) = body {
                request = request.json(&body);
            }
            let (status, answer) = send(request);
            format!("{step:?} -> {status} {answer}")
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    #[test]
    fn racing_users_never_see_each_others_text(
        alice_steps in prop::collection::vec(step(), 1..16),
        mallory_steps in prop::collection::vec(step(), 1..16),
    ) {
        let server = TestServer::start();
        let alice = user_key(&server, "alice");
        let mallory = user_key(&server, "mallory");
        let (alice_answers, mallory_answers) = std::thread::scope(|scope| {
            let alice_run = scope.spawn(|| {
                act(&server, &alice, "alice", "canary-of-alice", &alice_steps)
            });
            let mallory_answers =
                act(&server, &mallory, "mallory", "canary-of-mallory", &mallory_steps);
            (alice_run.join().expect("alice's thread"), mallory_answers)
        });
        for answer in &mallory_answers {
            prop_assert!(!answer.contains("canary-of-alice"), "Mallory saw: {}", answer);
        }
        for answer in &alice_answers {
            prop_assert!(!answer.contains("canary-of-mallory"), "Alice saw: {}", answer);
        }
    }
}
