//! Hybrid recall over HTTP (`POST /v1/recall`) with the real embedding model: found by
//! meaning and by words right after the append, scoped to a session or to one user, gone
//! after the session is deleted, and still there after a restart, even when the vector
//! snapshot was damaged meanwhile.

use memlayer_tests::{TestServer, assert_error, json};
use serde_json::Value;

fn say(server: &TestServer, session: &str, user: &str, messages: Value) {
    let body = json!({ "user_id": user, "agent_id": "assistant", "messages": messages });
    let (status, answer) = server.post(&format!("/v1/sessions/{session}/messages"), &body);
    assert_eq!(status, 201, "{answer}");
}

fn recall(server: &TestServer, body: Value) -> Value {
    let (status, answer) = server.post("/v1/recall", &body);
    assert_eq!(status, 200, "{answer}");
    answer
}

fn contents(answer: &Value) -> Vec<&str> {
    answer["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| hit["content"].as_str().unwrap())
        .collect()
}

#[test]
fn a_session_is_searched_by_meaning_and_by_words() {
    let server = TestServer::start();
    say(
        &server,
        "trip",
        "alice",
        json!([
            { "role": "user", "content": "I booked flight TP1351 to Lisbon for the conference." },
            { "role": "assistant", "content": "Great, enjoy Portugal!" },
            { "role": "user", "content": "Remind me to water the plants on Sunday." },
        ]),
    );
    let answer = recall(
        &server,
        json!({ "session_id": "trip", "query": "which airplane am I taking?", "k": 2 }),
    );
    assert_eq!(answer.get("degraded"), None, "{answer}");
    assert_eq!(
        contents(&answer)[0],
        "I booked flight TP1351 to Lisbon for the conference."
    );
    let hit = &answer["hits"][0];
    assert_eq!(
        (hit["session_id"].clone(), hit["index"].clone()),
        (json!("trip"), json!(0))
    );
    assert_eq!(hit["vector_rank"], 1);
    assert_eq!(hit["role"], "user");

    let by_words = recall(
        &server,
        json!({ "session_id": "trip", "query": "TP1351", "k": 1 }),
    );
    assert_eq!(by_words["hits"][0]["keyword_rank"], 1);
    assert_eq!(by_words["hits"].as_array().unwrap().len(), 1);

    // Filters: only assistant messages, and the window's turns left out.
    let assistant = recall(
        &server,
        json!({ "session_id": "trip", "query": "Lisbon", "roles": ["assistant"] }),
    );
    assert_eq!(contents(&assistant), ["Great, enjoy Portugal!"]);
    let excluded = recall(
        &server,
        json!({ "session_id": "trip", "query": "TP1351 flight", "exclude_indices": [0] }),
    );
    assert!(!contents(&excluded).contains(&"I booked flight TP1351 to Lisbon for the conference."));
}

#[test]
fn a_user_scope_never_reaches_another_users_sessions() {
    let server = TestServer::start();
    let secret = json!([{ "role": "user", "content": "My locker code is 4417." }]);
    say(&server, "a1", "alice", secret.clone());
    say(&server, "b1", "bob", secret);
    for (user, own) in [("alice", "a1"), ("bob", "b1")] {
        let answer = recall(&server, json!({ "user_id": user, "query": "locker code" }));
        let sessions: Vec<&Value> = answer["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| &h["session_id"])
            .collect();
        assert_eq!(sessions, [&json!(own)], "{user}: {answer}");
    }
    // Another tenant sees nothing of this one.
    let other = server
        .request_as("other", reqwest::Method::POST, "/v1/recall")
        .json(&json!({ "user_id": "alice", "query": "locker code" }));
    let (status, answer) = memlayer_tests::send(other);
    assert_eq!((status, answer["hits"].clone()), (200, json!([])));
}

/// `count` sentences of words drawn from one vocabulary by a linear congruential sequence
/// from `seed`: the keyword and vector rankings disagree on most of them.
fn drawn_sentences(seed: u64, count: usize) -> Value {
    let words = [
        "garden", "river", "kayak", "ticket", "doctor", "piano", "Lisbon", "rent", "sister",
        "laptop", "bakery", "train", "holiday", "invoice", "puppy", "concert", "recipe", "bicycle",
        "meeting", "passport", "flowers", "umbrella", "museum", "coffee", "birthday", "mountain",
        "library", "football", "dentist", "wedding",
    ];
    let mut seed = seed;
    let mut next_word = || {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        words[(seed >> 33) as usize % words.len()]
    };
    (0..count)
        .map(|_| {
            let drawn: Vec<&str> = (0..6).map(|_| next_word()).collect();
            let content = format!("I keep thinking about the {}.", drawn.join(" and the "));
            json!({ "role": "user", "content": content })
        })
        .collect()
}

/// Waits until `user`'s recall answers without `degraded`: recall waits only briefly for
/// the embedding of earlier appends, hundreds take longer in a debug build, and a degraded
/// answer ranks by keywords alone.
fn wait_until_embedded(server: &TestServer, user: &str) {
    let started = std::time::Instant::now();
    while recall(server, json!({ "user_id": user, "query": "river" }))
        .get("degraded")
        .is_some()
    {
        assert!(
            started.elapsed().as_secs() < 120,
            "the appends were never embedded"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

const QUERIES: [&str; 4] = [
    "when is my sister's trip to Lisbon?",
    "did we pay the rent for the bakery",
    "kayak on the river in the mountains",
    "a present for the wedding",
];

/// The message indices of `user`'s first `k` hits for `query`.
fn ranking(server: &TestServer, user: &str, query: &str, k: usize) -> Vec<Value> {
    let answer = recall(server, json!({ "user_id": user, "query": query, "k": k }));
    assert_eq!(answer.get("degraded"), None, "{answer}");
    answer["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hit| hit["index"].clone())
        .collect()
}

/// A caller reads the first hits of one ranking: asking for more must add hits at the end,
/// never reorder the top (the fusion's candidate pools are fixed, not grown with `k`).
#[test]
fn asking_for_more_hits_never_reorders_the_first_ones() {
    let server = TestServer::start();
    say(&server, "errands", "ana", drawn_sentences(42, 200));
    wait_until_embedded(&server, "ana");
    for query in QUERIES {
        let (ten, fifty) = (
            ranking(&server, "ana", query, 10),
            ranking(&server, "ana", query, 50),
        );
        assert_eq!(ten.len(), 10);
        assert_eq!(fifty.len(), 50);
        assert_eq!(ten, fifty[..10], "{query}");
    }
}

/// A user's ranking depends on that user's messages only: another user of the tenant and
/// another tenant storing the same words change nothing of it (keyword statistics are kept
/// per user, and the vector side is filtered to the user's sessions).
#[test]
fn other_users_messages_do_not_change_a_users_ranking() {
    let server = TestServer::start();
    say(&server, "errands", "ana", drawn_sentences(42, 200));
    wait_until_embedded(&server, "ana");
    let alone: Vec<Vec<Value>> = QUERIES
        .iter()
        .map(|query| ranking(&server, "ana", query, 25))
        .collect();
    say(&server, "chores", "bob", drawn_sentences(7, 600));
    let other_tenant = server
        .request_as("other", reqwest::Method::POST, "/v1/sessions/chores/messages")
        .json(&json!({ "user_id": "ana", "agent_id": "assistant", "messages": drawn_sentences(9, 600) }));
    assert_eq!(memlayer_tests::send(other_tenant).0, 201);
    wait_until_embedded(&server, "bob");
    for (query, alone) in QUERIES.iter().zip(alone) {
        assert_eq!(ranking(&server, "ana", query, 25), alone, "{query}");
    }
}

#[test]
fn deleted_sessions_are_not_recalled_and_the_rest_survives_a_restart() {
    let mut server = TestServer::start();
    say(
        &server,
        "keep",
        "alice",
        json!([{ "role": "user", "content": "The wifi password is sunflower42." }]),
    );
    say(
        &server,
        "drop",
        "alice",
        json!([{ "role": "user", "content": "The alarm code is 9911." }]),
    );
    let query = json!({ "user_id": "alice", "query": "alarm code" });
    assert_eq!(contents(&recall(&server, query.clone())).len(), 2);
    assert_eq!(server.delete("/v1/sessions/drop").0, 204);
    assert_eq!(
        contents(&recall(&server, query.clone())),
        ["The wifi password is sunflower42."]
    );
    server.restart();
    assert_eq!(
        contents(&recall(&server, query)),
        ["The wifi password is sunflower42."]
    );
}

/// A truncated or damaged vector snapshot is not loaded: the server rebuilds the index from
/// the stored embeddings and recall by meaning answers as it did before.
#[test]
fn a_damaged_vector_snapshot_is_rebuilt_at_start() {
    let mut server = TestServer::start();
    say(
        &server,
        "s",
        "alice",
        json!([
            { "role": "user", "content": "My dog is a golden retriever called Biscuit." },
            { "role": "user", "content": "I pay the electricity bill every month." },
        ]),
    );
    // No word in common with the message: only the vector index finds it.
    let query = json!({ "session_id": "s", "query": "puppy pet", "k": 1 });
    let before = recall(&server, query.clone());
    assert_eq!(
        contents(&before),
        ["My dog is a golden retriever called Biscuit."]
    );
    assert!(before["hits"][0]["vector_rank"].is_u64(), "{before}");
    server.stop();
    let snapshot = server.store_path().with_file_name("vectors.idx");
    let intact = std::fs::read(&snapshot).expect("a snapshot written on shutdown");
    let mut flipped = intact.clone();
    flipped[intact.len() - 3] ^= 0x10;
    for damaged in [intact[..intact.len() - 7].to_vec(), flipped] {
        std::fs::write(&snapshot, damaged).unwrap();
        server.restart();
        assert_eq!(recall(&server, query.clone())["hits"], before["hits"]);
        server.stop();
    }
    server.restart();
}

#[test]
fn malformed_recall_requests_are_refused() {
    let server = TestServer::start();
    say(
        &server,
        "s",
        "alice",
        json!([{ "role": "user", "content": "hello" }]),
    );
    for (body, status, code) in [
        (json!({ "query": "x" }), 422, "invalid_value"),
        (
            json!({ "query": "x", "session_id": "s", "user_id": "alice" }),
            422,
            "invalid_value",
        ),
        (
            json!({ "query": "x", "session_id": "s", "k": 0 }),
            422,
            "invalid_value",
        ),
        (
            json!({ "query": "x", "session_id": "s", "k": 51 }),
            422,
            "invalid_value",
        ),
        (
            json!({ "query": "  ", "session_id": "s" }),
            422,
            "invalid_value",
        ),
        (
            json!({ "query": "x", "session_id": "s", "after": "yesterday" }),
            422,
            "invalid_value",
        ),
        (
            json!({ "query": "x", "session_id": "a/b" }),
            422,
            "invalid_id",
        ),
        (
            json!({ "query": "x", "session_id": "s", "colour": "red" }),
            400,
            "invalid_body",
        ),
        (
            json!({ "query": "x", "session_id": "nope" }),
            404,
            "session_not_found",
        ),
    ] {
        assert_error(&server.post("/v1/recall", &body), status, code);
    }
}
