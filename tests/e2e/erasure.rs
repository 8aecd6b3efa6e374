//! Forgetting through the API: a canary planted in a message, picked up by every derived
//! layer (entities, a persisted summary, the indexes), then erased by message, session and
//! user; afterwards no API returns it and no byte of the store or index files holds it.
//! Purge, stats, receipts and retention for tenant admins.

use memlayer_tests::{TestServer, assert_error, json};
use serde_json::Value;

/// Occurrences of `text` in the server's store and index snapshot files.
fn append(server: &TestServer, session: &str, user: &str, messages: Value) {
    let body = json!({ "user_id": user, "agent_id": "support", "messages": messages });
    let (status, answer) = server.post(&format!("/v1/sessions/{session}/messages"), &body);
    assert_eq!(status, 201, "{answer}");
}

/// Every way the API could still show `canary` for `session` of `user`.
fn visible(server: &TestServer, session: &str, user: &str, canary: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let answers = [
        ("session", server.get(&format!("/v1/sessions/{session}"))),
        (
            "search",
            server.get(&format!("/v1/sessions/{session}/search?q={canary}")),
        ),
        (
            "entities",
            server.get(&format!("/v1/sessions/{session}/entities")),
        ),
        (
            "context",
            server.post(
                &format!("/v1/sessions/{session}/context"),
                &json!({ "query": canary, "format": "text" }),
            ),
        ),
        (
            "recall",
            server.post(
                "/v1/recall",
                &json!({ "user_id": user, "query": canary, "k": 50 }),
            ),
        ),
    ];
    for (api, (_, body)) in answers {
        if body.to_string().contains(canary) {
            seen.push(api.to_owned());
        }
    }
    seen
}

/// The control of every file scan here: on either backend the scan reads the files the
/// records are in (a user id is stored in plain on both).
#[test]
fn the_file_scan_reads_the_files_the_records_are_in() {
    let server = TestServer::start();
    append(
        &server,
        "scanned",
        "scancontrol7731",
        json!([{ "role": "user", "content": "hello" }]),
    );
    assert!(server.occurrences_in_files("scancontrol7731") > 0);
}

/// The keyword index is saved in the vector snapshot beside a store file, so a start
/// recalls by keywords at once; the stems are words of the messages, so an erased message's
/// stems leave the file with it (the erasure's save leaves the section out), and the next
/// save (here the stop's) writes the section again without them. Beside PostgreSQL, which
/// keeps text only sealed, no stem is ever written: the start indexes the texts again.
#[test]
fn an_erased_messages_stems_leave_the_snapshot() {
    let mut server = TestServer::start();
    let stem_of = |word: &str| {
        let stems = memlayer_index::Analyzer::default().tokens(word);
        let [stem] = stems.as_slice() else {
            panic!("one stem: {stems:?}")
        };
        assert_ne!(
            stem, word,
            "a stem the scans for whole texts would not find"
        );
        stem.clone()
    };
    let (erased, kept) = (stem_of("zorblaxing"), stem_of("quuxingtons"));
    append(
        &server,
        "chat",
        "alice",
        json!([
            { "role": "user", "content": "The spare key hides under the zorblaxing pot." },
            { "role": "assistant", "content": "Noted, beside the quuxingtons." },
        ]),
    );
    let query = json!({ "session_id": "chat", "query": "zorblaxing", "k": 1 });
    let (status, found) = server.post("/v1/recall", &query);
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["hits"][0]["keyword_rank"], 1, "{found}");
    server.restart();
    let snapshot = server.store_path().with_file_name("vectors.idx");
    let in_snapshot = |stem: &str| {
        memlayer_erasure::scan_files(&[&snapshot], stem.as_bytes())
            .unwrap()
            .len()
    };
    // The control: the scan finds the stems the stop saved.
    let saved = !memlayer_tests::on_postgres();
    assert_eq!(in_snapshot(&erased) > 0, saved);
    assert_eq!(in_snapshot(&kept) > 0, saved);
    let (status, found) = server.post("/v1/recall", &query);
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["hits"][0]["keyword_rank"], 1, "{found}");

    let (status, receipt) = server.delete("/v1/sessions/chat/messages/0");
    assert_eq!(status, 200, "{receipt}");
    server.assert_erased_from_files(&erased);
    server.restart();
    server.assert_erased_from_files(&erased);
    assert_eq!(
        in_snapshot(&kept) > 0,
        saved,
        "the next save wrote the rest"
    );
}

#[test]
fn an_erased_message_leaves_every_api_and_every_file() {
    let server = TestServer::start();
    let canary = "zx81canary4471";
    let mut messages = vec![
        json!({ "role": "user", "content": "Hi, I am Alice and I need a new locker." }),
        json!({ "role": "assistant", "content": "Happy to help." }),
        json!({ "role": "user", "content": format!("My locker code is {canary}, please note it.") }),
        json!({ "role": "assistant", "content": "Noted." }),
    ];
    for _ in 0..30 {
        messages.push(
            json!({ "role": "user", "content": "that sounds good to me, thank you so much" }),
        );
        messages.push(json!({ "role": "assistant", "content": "glad to hear that, anything else on your mind" }));
    }
    append(&server, "chat", "alice", json!(messages));
    // A summarised context persists a summary carrying the canary.
    let (status, summarised) = server.post(
        "/v1/sessions/chat/context",
        &json!({ "settings": { "strategy": "full_history", "overflow": "summarize", "context_window": 1024, "window_reserve": 0.5 } }),
    );
    assert_eq!(status, 200, "{summarised}");
    assert_eq!(
        summarised["summary_written"]["written"], true,
        "{summarised}"
    );
    let summary = &summarised["messages"][0]["content"];
    assert!(summary.to_string().contains(canary), "{summary}");
    server.assert_stored_sealed(canary);
    assert!(!visible(&server, "chat", "alice", canary).is_empty());

    let (status, receipt) = server.delete("/v1/sessions/chat/messages/2");
    assert_eq!(status, 200, "{receipt}");
    assert_eq!(receipt["counts"]["messages"], 1);
    assert_eq!(receipt["counts"]["summaries"], 1, "{receipt}");
    assert!(!receipt.to_string().contains(canary));
    assert_eq!(
        visible(&server, "chat", "alice", canary),
        Vec::<String>::new()
    );
    server.assert_erased_from_files(canary);

    // The rest of the session is intact, indices unchanged.
    let (_, session) = server.get("/v1/sessions/chat");
    let indices: Vec<u64> = session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indices[..4], [0, 1, 3, 4]);
    assert_eq!(indices.len(), 63);
    // Twice is harmless: the second time there is nothing to erase.
    assert_error(
        &server.delete("/v1/sessions/chat/messages/2"),
        404,
        "message_not_found",
    );
    assert_error(
        &server.delete("/v1/sessions/nope/messages/0"),
        404,
        "session_not_found",
    );
    assert_error(
        &server.delete("/v1/sessions/chat/messages/not-a-number"),
        400,
        "invalid_path",
    );
    // Past the most messages a session holds (2^24).
    assert_error(
        &server.delete("/v1/sessions/chat/messages/16777216"),
        422,
        "invalid_value",
    );
    // The session's own erasure counts the 63 messages it still held, not the erased one.
    assert_eq!(server.delete("/v1/sessions/chat").0, 204);
    let (status, receipts) = server.get("/v1/admin/erasures?limit=1");
    assert_eq!(status, 200, "{receipts}");
    let newest = &receipts["erasures"][0];
    assert_eq!(newest["counts"]["sessions"], 1, "{receipts}");
    assert_eq!(newest["counts"]["messages"], 63, "{receipts}");
}

/// What a client or memlayer copied from a message goes with it: the run records that quote
/// it lose their text, and the idempotency key that stored it can no longer confirm a guess
/// of it (a replay answers the first result whatever its body, where comparing bodies told a
/// right guess, `200`, from a wrong one, `409`).
#[test]
fn copies_of_an_erased_message_in_runs_and_idempotency_records_go_with_it() {
    let server = TestServer::start();
    let canary = "rv5canary88e1";
    let said = format!("My card PIN is {canary}.");
    let body = json!({
        "user_id": "alice", "agent_id": "support", "role": "user", "content": said,
        "idempotency_key": "turn-1",
    });
    let (status, answer) = server.post("/v1/sessions/chat/messages", &body);
    assert_eq!(status, 201, "{answer}");
    append(
        &server,
        "chat",
        "alice",
        json!([{ "role": "assistant", "content": "Noted." }]),
    );
    let run = json!({
        "status": "FAILED", "content": format!("Echo: {said}"), "error": format!("upstream choked on {canary}"),
        "tool_calls": [{ "name": "memory_remember", "arguments": { "text": said } }],
        "metadata": { "quoted": said },
    });
    let (status, answer) = server.post("/v1/sessions/chat/runs", &run);
    assert_eq!(status, 201, "{answer}");
    let wrong_guess = json!({
        "user_id": "alice", "agent_id": "support", "role": "user", "content": "My card PIN is 0000.",
        "idempotency_key": "turn-1",
    });
    assert_error(
        &server.post("/v1/sessions/chat/messages", &wrong_guess),
        409,
        "conflict",
    );
    server.assert_stored_sealed(canary);

    let (status, receipt) = server.delete("/v1/sessions/chat/messages/0");
    assert_eq!(status, 200, "{receipt}");
    assert_eq!(receipt["counts"]["runs_redacted"], 1, "{receipt}");
    let (status, runs) = server.get("/v1/sessions/chat/runs");
    assert_eq!(status, 200);
    assert!(!runs.to_string().contains(canary), "{runs}");
    assert_eq!(runs[0]["redacted"], true, "{runs}");
    assert_eq!(runs[0]["status"], "FAILED", "{runs}");
    for guess in [&body, &wrong_guess] {
        let (status, replay) = server.post("/v1/sessions/chat/messages", guess);
        assert_eq!(
            (status, &replay["replayed"], &replay["indices"]),
            (200, &json!(true), &json!([0])),
            "{replay}"
        );
    }
    server.assert_erased_from_files(canary);
    // The message that stayed, and the session, are untouched.
    let (_, session) = server.get("/v1/sessions/chat");
    assert_eq!(
        session["messages"].as_array().map(Vec::len),
        Some(1),
        "{session}"
    );
}

/// Long-term memories keep where each of their texts came from: erasing a conversation
/// takes the texts remembered from it out of every memory, the replaced texts in a
/// memory's history and the memories about another user that quoted it included.
#[test]
fn memory_texts_go_with_the_conversation_they_came_from_whoever_they_are_about() {
    let server = TestServer::start();
    append(
        &server,
        "first",
        "carol",
        json!([{ "role": "user", "content": "I prefer to be contacted by phone, ask for ext 4471" }]),
    );
    append(
        &server,
        "second",
        "carol",
        json!([{ "role": "user", "content": "Actually email is better for me now" }]),
    );
    let remember = |user: &str, body: Value| {
        let (status, answer) = server.post(&format!("/v1/users/{user}/memories"), &body);
        assert!(status == 201 || status == 200, "{answer}");
        answer
    };
    // The canary is a phrase of the first conversation: after the erasure no copy of it (the
    // message, the memory's replaced text) may be left in any file.
    let old = "Prefers to be contacted by phone";
    remember(
        "carol",
        json!({ "text": old, "type": "preference", "source": { "session_id": "first", "index": 0 } }),
    );
    let corrected = remember(
        "carol",
        json!({ "text": "Prefers to be contacted by email", "type": "preference",
                "source": { "session_id": "second", "index": 0 } }),
    );
    assert_eq!(corrected["action"], "updated", "{corrected}");
    assert_eq!(corrected["memory"]["history"][0]["text"], old);
    assert_eq!(
        corrected["memory"]["history"][0]["source"]["session_id"],
        "first"
    );
    // A memory about dave, remembered by the agent backend from carol's conversation.
    let quoted = "Dave is carol's manager, reachable at xdave77canary";
    let about_dave = remember(
        "dave",
        json!({ "text": quoted, "type": "relationship", "source": { "session_id": "first", "index": 0 } }),
    );
    let dave_memory = about_dave["memory"]["memory_id"].clone();
    server.assert_stored("contacted by phone");
    server.assert_stored("xdave77canary");

    let (status, receipt) = server.delete("/v1/sessions/first");
    assert_eq!(status, 204, "{receipt}");
    // Carol's memory stays (its text came from the second conversation), without the text
    // the first one gave it.
    let (_, carol) = server.get("/v1/users/carol/memories");
    assert_eq!(
        carol["memories"].as_array().map(Vec::len),
        Some(1),
        "{carol}"
    );
    assert_eq!(carol["memories"][0]["history"], json!([]), "{carol}");
    let (status, _) = server.get(&format!("/v1/memories/{dave_memory}"));
    assert_eq!(status, 404);
    let (_, dave) = server.get("/v1/users/dave/memories");
    assert_eq!(dave["memories"], json!([]), "{dave}");
    server.assert_erased_from_files("contacted by phone");
    server.assert_erased_from_files("xdave77canary");
    // A source that no longer exists is refused: nothing can cite the erased conversation.
    let (status, answer) = server.post(
        "/v1/users/carol/memories",
        &json!({ "text": "Ext 4471", "type": "fact", "source": { "session_id": "first", "index": 0 } }),
    );
    assert_eq!(status, 404, "{answer}");
}

#[test]
fn erasing_a_user_removes_all_their_sessions_and_nobody_elses() {
    let server = TestServer::start();
    let canary = "qq7canary0e4d";
    append(
        &server,
        "a1",
        "alice",
        json!([{ "role": "user", "content": format!("My passport is {canary}.") }]),
    );
    append(
        &server,
        "a2",
        "alice",
        json!([{ "role": "user", "content": format!("Remember {canary} for the visa.") }]),
    );
    append(
        &server,
        "b1",
        "bob",
        json!([{ "role": "user", "content": "Bob's bike is in locker 12." }]),
    );
    let (status, receipt) = server.delete("/v1/users/alice");
    assert_eq!(status, 200, "{receipt}");
    assert_eq!(receipt["counts"]["sessions"], 2);
    assert_eq!(
        receipt["target"],
        json!({ "kind": "user", "user_id": "alice" })
    );
    assert_error(&server.get("/v1/sessions/a1"), 404, "session_not_found");
    server.assert_erased_from_files(canary);
    let (_, recalled) = server.post(
        "/v1/recall",
        &json!({ "user_id": "alice", "query": canary }),
    );
    assert_eq!(recalled["hits"], json!([]));
    assert_eq!(server.get("/v1/sessions/b1").0, 200);
    let (_, listed) = server.get("/v1/admin/erasures");
    assert_eq!(listed["erasures"].as_array().unwrap().len(), 1);
    assert_eq!(
        listed["erasures"][0]["session_ids"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn purge_stats_and_retention_for_tenant_admins() {
    let server = TestServer::start();
    for session in ["p1", "p2", "p3"] {
        append(
            &server,
            session,
            "u",
            json!([{ "role": "user", "content": format!("purge-canary-{session}") }]),
        );
    }
    let (status, stats) = server.get("/v1/admin/conversations/stats?project_id=default");
    assert_eq!(status, 200, "{stats}");
    assert_eq!(stats["total_conversations"], 3);
    assert_eq!(stats["oldest_conversation"]["session_id"], "p1");

    // Nothing is a day old yet.
    let (status, kept) = server.delete("/v1/admin/conversations/purge?older_than_days=1");
    assert_eq!(status, 200, "{kept}");
    assert_eq!(kept["counts"]["sessions"], 0);
    let (_, all) = server.delete("/v1/admin/conversations/purge?older_than_days=0");
    assert_eq!(all["counts"]["sessions"], 3, "{all}");
    let (_, stats) = server.get("/v1/admin/conversations/stats");
    assert_eq!(stats["total_conversations"], 0);
    assert!(stats.get("oldest_conversation").is_none());
    server.assert_erased_from_files("purge-canary-");
    assert_error(
        &server.delete("/v1/admin/conversations/purge"),
        400,
        "invalid_query",
    );
    assert_error(
        &server.get("/v1/admin/conversations/stats?project_id=elsewhere&x=1"),
        400,
        "invalid_query",
    );

    assert_eq!(
        server.get("/v1/admin/retention").1,
        json!({ "conversation_retention_days": null })
    );
    let (status, set) = server.put(
        "/v1/admin/retention",
        &json!({ "conversation_retention_days": 30 }),
    );
    assert_eq!(status, 200, "{set}");
    assert_eq!(
        server.get("/v1/admin/retention").1,
        json!({ "conversation_retention_days": 30 })
    );
    assert_error(
        &server.put(
            "/v1/admin/retention",
            &json!({ "conversation_retention_days": 0 }),
        ),
        422,
        "invalid_value",
    );
}

#[test]
fn a_purge_that_outlasts_half_the_request_timeout_answers_202_and_finishes() {
    let server = TestServer::with_config(memlayer_server::ServerConfig {
        request_timeout: std::time::Duration::from_millis(1_500),
        ..memlayer_tests::config()
    });
    const SESSIONS: u64 = 400;
    for session in 0..SESSIONS {
        let content = format!("long-purge-canary-{session}");
        append(
            &server,
            &format!("long-{session}"),
            "paula",
            json!([{ "role": "user", "content": content }]),
        );
    }
    let (status, answer) = server.delete("/v1/admin/conversations/purge?older_than_days=0");
    let id = answer["erasure_id"].as_u64().expect("an erasure id");
    // Erasing 400 conversations, one commit each, takes longer than 750 ms here, but a fast
    // machine may finish in time: both answers are checked.
    let receipt = match status {
        200 => answer,
        202 => {
            assert_eq!(answer["status"], "running", "{answer}");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                let (status, polled) = server.get(&format!("/v1/admin/erasures/{id}"));
                match status {
                    200 => break polled,
                    202 if std::time::Instant::now() < deadline => {
                        assert_eq!(polled["status"], "running", "{polled}");
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    _ => panic!("erasure {id}: {status} {polled}"),
                }
            }
        }
        _ => panic!("purge: {status} {answer}"),
    };
    assert_eq!(receipt["erasure_id"], id);
    assert_eq!(receipt["counts"]["sessions"], SESSIONS, "{receipt}");
    assert_eq!(
        server.get(&format!("/v1/admin/erasures/{id}")),
        (200, receipt)
    );
    server.assert_erased_from_files("long-purge-canary-");
    assert_error(
        &server.get(&format!("/v1/admin/erasures/{}", id + 1)),
        404,
        "erasure_not_found",
    );
}
