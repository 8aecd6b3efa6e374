//! Long-term memories and the agent tools through the real server: isolation between users
//! and agents, a repeat or a correction updating the memory it restates (also under
//! concurrent remembers), pre-loading into the next conversation's context, tool calls passed
//! straight through, forgetting that leaves no bytes, and idle conversations ended by the
//! server.

use std::time::{Duration, Instant};

use memlayer_server::ServerConfig;
use memlayer_tests::{TestServer, assert_error, json};
use serde_json::Value;

fn remember(server: &TestServer, user: &str, body: Value) -> (u16, Value) {
    server.post(&format!("/v1/users/{user}/memories"), &body)
}

/// The texts a search finds, best first; every hit must be the user's own.
fn search(server: &TestServer, user: &str, body: Value) -> Vec<String> {
    let (status, answer) = server.post(&format!("/v1/users/{user}/memories/search"), &body);
    assert_eq!(status, 200, "{answer}");
    let hits = answer["hits"].as_array().unwrap();
    assert!(hits.iter().all(|hit| hit["user_id"] == user), "{answer}");
    hits.iter()
        .map(|hit| hit["text"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn users_and_agents_see_only_their_own_memories() {
    let server = TestServer::start();
    let text = "Is allergic to peanuts";
    for user in ["alice", "bob"] {
        let (status, answer) = remember(&server, user, json!({ "text": text, "type": "fact" }));
        assert_eq!(status, 201, "{answer}");
        assert_eq!(answer["memory"]["user_id"], user);
    }
    let (_, private) = remember(
        &server,
        "alice",
        json!({ "text": "Wants the travel agent to book aisle seats", "type": "preference", "agent_id": "travel" }),
    );
    let alice = search(&server, "alice", json!({ "query": "peanut allergy" }));
    assert_eq!(alice.first().map(String::as_str), Some(text));
    assert_eq!(
        alice.iter().filter(|t| *t == text).count(),
        1,
        "Bob's copy is not Alice's"
    );
    let (_, listed) = server.get("/v1/users/bob/memories");
    let bob: Vec<&Value> = listed["memories"].as_array().unwrap().iter().collect();
    assert_eq!(bob.len(), 1);
    assert_eq!(bob[0]["user_id"], "bob");

    let seats = json!({ "query": "aisle seats", "agent_id": "travel" });
    assert_eq!(
        search(&server, "alice", seats)[0],
        "Wants the travel agent to book aisle seats"
    );
    let other_agent = json!({ "query": "aisle seats", "agent_id": "support" });
    assert!(
        !search(&server, "alice", other_agent)
            .iter()
            .any(|t| t.contains("aisle"))
    );
    assert!(
        search(&server, "bob", json!({ "query": "aisle seats" }))
            .iter()
            .all(|t| t == text)
    );
    // Another tenant does not even see the memory exist.
    let id = private["memory"]["memory_id"].as_u64().unwrap();
    let foreign = memlayer_tests::send(server.request_as(
        "other",
        reqwest::Method::GET,
        &format!("/v1/memories/{id}"),
    ));
    assert_error(&foreign, 404, "memory_not_found");
}

#[test]
fn repeats_and_corrections_update_instead_of_piling_up() {
    let server = TestServer::start();
    let (status, first) = remember(
        &server,
        "carol",
        json!({ "text": "Prefers to be contacted by phone", "type": "preference", "tags": ["Contact"] }),
    );
    assert_eq!(status, 201);
    let (status, corrected) = remember(
        &server,
        "carol",
        json!({ "text": "Prefers to be contacted by email", "type": "preference" }),
    );
    assert_eq!(status, 200, "{corrected}");
    assert_eq!(corrected["action"], "updated");
    assert_eq!(
        corrected["memory"]["memory_id"],
        first["memory"]["memory_id"]
    );
    assert_eq!(
        corrected["memory"]["history"][0]["text"],
        "Prefers to be contacted by phone"
    );
    assert_eq!(corrected["memory"]["tags"], json!(["contact"]));
    let (_, again) = remember(
        &server,
        "carol",
        json!({ "text": "prefers to be contacted by email", "type": "preference" }),
    );
    assert_eq!(again["action"], "unchanged");
    // Another kind or another topic is another memory.
    let (status, _) = remember(
        &server,
        "carol",
        json!({ "text": "Has a cat called Miso", "type": "fact" }),
    );
    assert_eq!(status, 201);

    // Concurrent remembers of the same thing leave one memory.
    std::thread::scope(|scope| {
        for _ in 0..6 {
            scope.spawn(|| {
                let (status, answer) = remember(
                    &server,
                    "dave",
                    json!({ "text": "Works night shifts at the hospital", "type": "fact" }),
                );
                assert!(status == 200 || status == 201, "{answer}");
            });
        }
    });
    let (_, listed) = server.get("/v1/users/dave/memories");
    assert_eq!(listed["memories"].as_array().unwrap().len(), 1, "{listed}");

    assert_error(
        &remember(&server, "carol", json!({ "text": "x", "type": "mood" })),
        400,
        "invalid_body",
    );
    assert_error(
        &remember(&server, "carol", json!({ "text": "  ", "type": "fact" })),
        422,
        "invalid_setting",
    );
}

#[test]
fn a_memory_from_one_conversation_is_in_the_next_ones_first_context() {
    let server = TestServer::start();
    let body = json!({ "user_id": "erin", "agent_id": "concierge", "messages": [
        { "role": "user", "content": "For future trips: I only eat vegetarian food." },
        { "role": "assistant", "content": "Noted!" },
    ]});
    assert_eq!(server.post("/v1/sessions/trip-1/messages", &body).0, 201);
    let (status, _) = remember(
        &server,
        "erin",
        json!({ "text": "Eats only vegetarian food", "type": "preference",
                "source": { "session_id": "trip-1", "index": 0 } }),
    );
    assert_eq!(status, 201);
    let question = "Can you recommend a restaurant for dinner tonight?";
    let body = json!({ "user_id": "erin", "agent_id": "concierge", "messages": [
        { "role": "user", "content": question },
    ]});
    assert_eq!(server.post("/v1/sessions/trip-2/messages", &body).0, 201);
    let (status, context) = server.post(
        "/v1/sessions/trip-2/context",
        &json!({ "query": question, "format": "text", "settings": { "recall_scope": "session" } }),
    );
    assert_eq!(status, 200, "{context}");
    let text = context["text"].as_str().unwrap();
    assert!(
        text.contains("Long-term memories:\n- (preference) Eats only vegetarian food"),
        "{text}"
    );
    assert_eq!(context["report"]["memories"].as_array().unwrap().len(), 1);
    // Erasing the message it was remembered from erases the memory.
    let (status, receipt) = server.delete("/v1/sessions/trip-1/messages/0");
    assert_eq!(status, 200, "{receipt}");
    assert_eq!(receipt["counts"]["memories"], 1);
    let (_, listed) = server.get("/v1/users/erin/memories");
    assert_eq!(listed["memories"], json!([]));
}

#[test]
fn tool_calls_pass_straight_through_and_forgetting_leaves_no_bytes() {
    let server = TestServer::start();
    let (status, tools) = server.get("/v1/tools");
    assert_eq!(status, 200);
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "memory_remember",
            "memory_recall",
            "memory_forget",
            "session_search",
            "clear_session"
        ]
    );
    assert!(
        tools["system_instruction"]
            .as_str()
            .unwrap()
            .contains("session_search")
    );

    let body = json!({ "user_id": "frank", "agent_id": "coach", "messages": [
        { "role": "user", "content": "My marathon goal time is 3h15." },
        { "role": "assistant", "content": "Great goal!" },
    ]});
    assert_eq!(server.post("/v1/sessions/run/messages", &body).0, 201);
    let call = |name: &str, arguments: Value| {
        server.post(
            "/v1/sessions/run/tools/call",
            &json!({ "name": name, "arguments": arguments }),
        )
    };
    // Arguments exactly as a model returns them: JSON text.
    let canary = "toolcanary8813 marathon goal is 3h15";
    let (status, remembered) = call(
        "memory_remember",
        Value::String(json!({ "text": canary, "type": "fact" }).to_string()),
    );
    assert_eq!(status, 200, "{remembered}");
    let id = remembered["result"]["memory"]["memory_id"]
        .as_u64()
        .unwrap();
    let recalled: Value = serde_json::from_str(
        call("memory_recall", json!({ "query": "marathon goal" })).1["content"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(recalled["hits"][0]["memory_id"], id);
    let (_, found) = call("session_search", json!({ "query": "goal time" }));
    assert_eq!(found["result"]["hits"][0]["index"], 0);

    server.assert_stored("toolcanary8813");
    let (status, forgotten) = call("memory_forget", json!({ "memory_id": id }));
    assert_eq!(status, 200, "{forgotten}");
    assert_eq!(forgotten["result"]["counts"]["memories"], 1);
    server.assert_erased_from_files("toolcanary8813");
    assert_error(
        &call("memory_forget", json!({ "memory_id": id })),
        404,
        "memory_not_found",
    );
    let (_, cleared) = call("clear_session", json!({}));
    assert_eq!(cleared["result"]["load_from"], 2);
    assert_error(&call("fly", json!({})), 422, "unknown_tool");
    assert_error(
        &call("session_search", json!({ "query": "x", "limit": 500 })),
        422,
        "invalid_value",
    );
    assert_error(
        &call("memory_recall", Value::String("{oops".into())),
        422,
        "invalid_arguments",
    );
}

#[test]
fn an_ended_conversation_is_summarised_into_the_next_ones_context() {
    let server = TestServer::start();
    let body = json!({ "user_id": "gina", "agent_id": "tutor", "messages": [
        { "role": "user", "content": "I am preparing for the Goethe B2 exam on 14 March." },
        { "role": "assistant", "content": "Great, we will focus on B2 writing." },
        { "role": "user", "content": "Please always correct my grammar mistakes." },
        { "role": "assistant", "content": "I will." },
    ]});
    assert_eq!(server.post("/v1/sessions/lesson-1/messages", &body).0, 201);
    let (status, ending) = server.post("/v1/sessions/lesson-1/end", &json!({}));
    assert_eq!(status, 202, "{ending}");
    let path = "/v1/users/gina/session-memory?agent_id=tutor";
    let mut memory = server.get(path);
    for _ in 0..200 {
        if memory.0 == 200 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
        memory = server.get(path);
    }
    assert_eq!(memory.0, 200, "{}", memory.1);
    assert_eq!(memory.1["sessions"], json!(["lesson-1"]));

    let question = "Which exam am I preparing for?";
    let body = json!({ "user_id": "gina", "agent_id": "tutor", "messages": [
        { "role": "user", "content": question },
    ]});
    assert_eq!(server.post("/v1/sessions/lesson-2/messages", &body).0, 201);
    let (_, context) = server.post(
        "/v1/sessions/lesson-2/context",
        &json!({ "query": question, "format": "text", "settings": { "recall_scope": "session" } }),
    );
    let text = context["text"].as_str().unwrap();
    assert!(
        text.contains("[Earlier conversations with this user]") && text.contains("Goethe B2"),
        "{text}"
    );
    // Ending it again merges nothing twice; erasing the first conversation drops what was
    // derived from it.
    assert_eq!(server.post("/v1/sessions/lesson-1/end", &json!({})).0, 202);
    assert_eq!(server.delete("/v1/sessions/lesson-1").0, 204);
    assert_error(&server.get(path), 404, "session_memory_not_found");
}

/// Twenty things a user told an agent in one conversation, and a paraphrased question in the
/// next that needs each. With the default `max_memories` (50) every one is pre-loaded; with
/// only 5 slots the ranking decides, and measured 18 of 20 (top 3: 17): the misses need an
/// inference ("plan my trip" → afraid of flying) or world knowledge (Feyenoord is a football
/// team) that a small embedding model does not make.
const PAIRS: [(&str, &str); 20] = [
    (
        "Prefers answers in bullet points",
        "How should you format your replies to me?",
    ),
    (
        "Is allergic to shellfish",
        "Can I safely order the prawn curry?",
    ),
    (
        "Lives in Rotterdam",
        "What's the weather like where I live?",
    ),
    (
        "Works as a pediatric nurse",
        "Any tips for staying awake on my hospital shifts?",
    ),
    (
        "Has a daughter named Lotte who is seven",
        "What birthday present suits my kid?",
    ),
    (
        "Drives a 2019 Toyota Corolla hybrid",
        "When is my car due for its hybrid battery check?",
    ),
    (
        "Is training for the Berlin marathon in September",
        "How many kilometres should I run this week for my race?",
    ),
    (
        "Prefers to be contacted by email, never by phone",
        "What's the best way to reach me about the invoice?",
    ),
    ("Is vegetarian", "Suggest a dinner recipe for tonight"),
    (
        "Speaks Dutch natively and is learning Spanish",
        "Which language course level should I pick next?",
    ),
    (
        "Has a cat called Miso",
        "My pet keeps scratching the sofa, what can I do?",
    ),
    (
        "Uses a MacBook Pro with an M3 chip",
        "Why is my laptop fan so loud?",
    ),
    (
        "Wants the monthly budget capped at 2,000 euros",
        "Can I afford a 300 euro gadget this month?",
    ),
    (
        "Their manager is called Priya",
        "Help me write an update email to my boss",
    ),
    ("Is afraid of flying", "Plan my trip to Lisbon"),
    (
        "Takes the train to work at 7:40",
        "Remind me when I need to leave the house",
    ),
    (
        "Prefers aisle seats on flights",
        "Book me a seat for the Madrid trip",
    ),
    ("Is lactose intolerant", "Which coffee drinks can I have?"),
    (
        "Plays the cello in an amateur orchestra",
        "How do I practice my instrument before the concert?",
    ),
    (
        "Supports Feyenoord",
        "When does my football team play next?",
    ),
];

#[test]
fn preferences_of_the_last_conversation_are_preloaded_for_paraphrased_questions() {
    let server = TestServer::start();
    for (memory, _) in PAIRS {
        let (status, answer) = remember(
            &server,
            "hana",
            json!({ "text": memory, "type": "preference" }),
        );
        assert_eq!(status, 201, "{memory}: {answer}");
    }
    let mut turn = 0;
    let mut missed_with = |max_memories: usize| {
        let mut missed = Vec::new();
        for (memory, question) in PAIRS {
            turn += 1;
            let session = format!("next-{turn}");
            let body = json!({ "user_id": "hana", "agent_id": "assistant", "messages": [
                { "role": "user", "content": question },
            ]});
            assert_eq!(
                server
                    .post(&format!("/v1/sessions/{session}/messages"), &body)
                    .0,
                201
            );
            let (status, context) = server.post(
                &format!("/v1/sessions/{session}/context"),
                &json!({ "query": question, "format": "text",
                         "settings": { "max_memories": max_memories, "recall_scope": "session" } }),
            );
            assert_eq!(status, 200, "{context}");
            if !context["text"].as_str().unwrap().contains(memory) {
                missed.push(question);
            }
        }
        missed
    };
    let by_default = missed_with(50);
    assert!(
        by_default.is_empty(),
        "missed with the defaults: {by_default:?}"
    );
    let top_five = missed_with(5);
    assert!(
        top_five.len() <= 2,
        "{} of 20 missed in the top 5: {top_five:?}",
        top_five.len()
    );
}

/// A conversation nobody continues is ended by the server after `session_idle_timeout`, as
/// if its client had ended it: merged into session memory, in the background.
#[test]
fn an_idle_conversation_is_ended_and_merged_by_the_server() {
    let server = TestServer::with_config(ServerConfig {
        session_idle_timeout: Duration::from_millis(300),
        ..memlayer_tests::config()
    });
    let body = json!({ "user_id": "hana", "agent_id": "tutor", "messages": [
        { "role": "user", "content": "I am preparing for the Goethe C1 exam in March." },
        { "role": "assistant", "content": "Then we will practise writing every week." },
    ]});
    assert_eq!(server.post("/v1/sessions/idle-1/messages", &body).0, 201);
    let path = "/v1/users/hana/session-memory?agent_id=tutor";
    let deadline = Instant::now() + Duration::from_secs(20);
    let memory = loop {
        let answer = server.get(path);
        if answer.0 == 200 || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        memory.0, 200,
        "the idle session was not ended: {}",
        memory.1
    );
    assert_eq!(memory.1["sessions"], json!(["idle-1"]));
    assert!(
        memory.1["text"].as_str().unwrap().contains("Goethe C1"),
        "{}",
        memory.1
    );
}

/// A clean stop waits for the batch of idle conversations being merged, not for every
/// conversation due: a store's first pass after a long downtime merges thousands, and a stop
/// that waited for them all hung for minutes (seen at a million messages).
#[test]
fn a_stop_waits_for_one_batch_of_idle_conversations_only() {
    const SESSIONS: usize = 500;
    let idle_timeout = Duration::from_millis(200);
    let mut server = TestServer::with_config(ServerConfig {
        session_idle_timeout: Duration::ZERO,
        ..memlayer_tests::config()
    });
    for session in 0..SESSIONS {
        let body = json!({ "user_id": "hana", "agent_id": "tutor", "messages": [
            { "role": "user", "content": format!("Lesson {session}: the dative case.") },
        ]});
        let path = format!("/v1/sessions/lesson-{session}/messages");
        assert_eq!(server.post(&path, &body).0, 201);
    }
    let path = "/v1/users/hana/session-memory?agent_id=tutor";
    let merged = |server: &TestServer| {
        let (status, memory) = server.get(path);
        (status == 200).then(|| memory["sessions"].as_array().unwrap().len())
    };
    // Every conversation is due at the start after the downtime: one pass takes them all.
    server.stop();
    std::thread::sleep(idle_timeout);
    server.restart_with(|config| config.session_idle_timeout = idle_timeout);
    // The pass has begun once a conversation is merged.
    let deadline = Instant::now() + Duration::from_secs(30);
    while merged(&server).is_none() {
        assert!(Instant::now() < deadline, "no idle conversation was merged");
        std::thread::sleep(Duration::from_millis(10));
    }
    server.stop();
    server.restart_with(|config| config.session_idle_timeout = Duration::ZERO);
    let at_stop = merged(&server).expect("the merges before the stop are kept");
    assert!(
        at_stop < SESSIONS,
        "the stop waited for all {SESSIONS} conversations due"
    );
}

#[test]
fn a_user_whose_memories_were_all_forgotten_remembers_again() {
    let server = TestServer::start();
    let (status, first) = remember(
        &server,
        "carol",
        json!({ "text": "Prefers window seats", "type": "preference" }),
    );
    assert_eq!(status, 201, "{first}");
    let (status, _) = remember(
        &server,
        "dave",
        json!({ "text": "Prefers window seats", "type": "preference" }),
    );
    assert_eq!(status, 201);
    let id = first["memory"]["memory_id"].as_u64().unwrap();
    assert_eq!(server.delete(&format!("/v1/memories/{id}")).0, 200);
    // Carol has nothing left to recall; Dave, who remembered the same words, still has his.
    assert!(search(&server, "carol", json!({ "query": "window seats" })).is_empty());
    assert_eq!(
        search(&server, "dave", json!({ "query": "window seats" })),
        ["Prefers window seats"]
    );
    let (status, again) = remember(
        &server,
        "carol",
        json!({ "text": "Prefers aisle seats on long flights", "type": "preference" }),
    );
    assert_eq!(status, 201, "{again}");
    assert_eq!(
        search(&server, "carol", json!({ "query": "aisle seats" })),
        ["Prefers aisle seats on long flights"]
    );
}

/// A put under a key: what the key names is what was last put under it. Puts never merge
/// memories of different keys, remembering without a key never changes a keyed memory, the
/// key is per user and agent scope, and forgetting the memory (or erasing its user) erases
/// the key with it, from the file's bytes too.
#[test]
fn a_key_names_what_was_last_put_under_it_and_goes_with_it() {
    let server = TestServer::start();
    let put = |user: &str, key: &str, body: Value| {
        server.put(&format!("/v1/users/{user}/memories/keys/{key}"), &body)
    };
    let get = |user: &str, key: &str| server.get(&format!("/v1/users/{user}/memories/keys/{key}"));
    let (status, tea) = put(
        "erin",
        "drink",
        json!({ "text": "Prefers green tea in the morning", "type": "preference" }),
    );
    assert_eq!(
        (status, tea["action"].as_str()),
        (201, Some("created")),
        "{tea}"
    );
    assert_eq!(tea["memory"]["key"], "drink");
    // Nearly the same words under another key, or without one, are other memories.
    let (status, other) = put(
        "erin",
        "drink-2",
        json!({ "text": "Prefers green tea in the mornings", "type": "preference" }),
    );
    assert_eq!(status, 201, "{other}");
    let (status, plain) = remember(
        &server,
        "erin",
        json!({ "text": "Prefers green tea in the morning", "type": "preference" }),
    );
    assert_eq!(status, 201, "{plain}");
    assert!(plain["memory"].get("key").is_none(), "{plain}");
    let (status, read) = get("erin", "drink");
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["text"], "Prefers green tea in the morning");

    // A put replaces text, type and tags; the replaced text stays in the history.
    let (status, coffee) = put(
        "erin",
        "drink",
        json!({ "text": "Drinks black coffee", "type": "fact", "tags": ["Drinks"] }),
    );
    assert_eq!((status, coffee["action"].as_str()), (200, Some("updated")));
    assert_eq!(coffee["memory"]["memory_id"], tea["memory"]["memory_id"]);
    let (_, read) = get("erin", "drink");
    assert_eq!(
        (&read["text"], &read["type"], &read["tags"]),
        (
            &json!("Drinks black coffee"),
            &json!("fact"),
            &json!(["drinks"])
        )
    );
    assert_eq!(
        read["history"][0]["text"],
        "Prefers green tea in the morning"
    );
    let (_, same) = put(
        "erin",
        "drink",
        json!({ "text": "Drinks black coffee", "type": "fact", "tags": ["drinks"] }),
    );
    assert_eq!(same["action"], "unchanged");
    let (_, retagged) = put(
        "erin",
        "drink",
        json!({ "text": "Drinks black coffee", "type": "fact" }),
    );
    assert_eq!(retagged["action"], "updated");
    assert_eq!(retagged["memory"]["tags"], json!([]));

    // The key is per user and per agent scope.
    assert_error(&get("frank", "drink"), 404, "memory_not_found");
    let scoped = server.get("/v1/users/erin/memories/keys/drink?agent_id=barista");
    assert_error(&scoped, 404, "memory_not_found");
    let (status, barista) = put(
        "erin",
        "drink",
        json!({ "text": "Orders oat flat whites", "type": "preference", "agent_id": "barista" }),
    );
    assert_eq!(status, 201, "{barista}");
    let (_, scoped) = server.get("/v1/users/erin/memories/keys/drink?agent_id=barista");
    assert_eq!(scoped["text"], "Orders oat flat whites");
    assert_eq!(get("erin", "drink").1["text"], "Drinks black coffee");
    assert_error(
        &put(
            "erin",
            "two%20words",
            json!({ "text": "x", "type": "fact" }),
        ),
        422,
        "invalid_id",
    );
    assert_error(&get("erin", "two%20words"), 422, "invalid_id");

    // Forgetting the memory frees its key, and leaves no byte of it. On PostgreSQL a key is
    // an identifier, kept in plain for the statements that look memories up by it, and stays
    // in table pages until PostgreSQL reuses them (docs/SECURITY.md, "PostgreSQL"): only the
    // sealed text is checked there.
    let keys_leave_the_files = !memlayer_tests::on_postgres();
    let (status, _) = put(
        "erin",
        "keycanary4471",
        json!({ "text": "Seat textcanary9920 on the night train", "type": "fact" }),
    );
    assert_eq!(status, 201);
    let (_, canary) = get("erin", "keycanary4471");
    server.assert_stored("textcanary9920");
    if keys_leave_the_files {
        server.assert_stored("keycanary4471");
    }
    let id = canary["memory_id"].as_u64().unwrap();
    assert_eq!(server.delete(&format!("/v1/memories/{id}")).0, 200);
    assert_error(&get("erin", "keycanary4471"), 404, "memory_not_found");
    server.assert_erased_from_files("textcanary9920");
    if keys_leave_the_files {
        server.assert_erased_from_files("keycanary4471");
    }
    let (status, _) = put(
        "erin",
        "keycanary4471",
        json!({ "text": "A new memory under a freed key", "type": "fact" }),
    );
    assert_eq!(status, 201);

    // Erasing the user erases every key of theirs.
    assert_eq!(server.delete("/v1/users/erin").0, 200);
    assert_error(&get("erin", "drink"), 404, "memory_not_found");
    if keys_leave_the_files {
        server.assert_erased_from_files("keycanary4471");
    }
}

/// A search's tag filter is read as tags are stored (trimmed, lowercased), and one no memory
/// could have is refused as remembering it would be.
#[test]
fn tag_filters_match_as_tags_are_stored() {
    let server = TestServer::start();
    let (status, _) = remember(
        &server,
        "gina",
        json!({ "text": "Lives in Porto by the sea", "type": "fact", "tags": ["Home"] }),
    );
    assert_eq!(status, 201);
    assert_eq!(
        search(
            &server,
            "gina",
            json!({ "query": "where", "tags": [" HOME "] })
        ),
        ["Lives in Porto by the sea"]
    );
    for tags in [
        json!(["two words"]),
        json!([""]),
        json!(["a", "b", "c", "d", "e", "f", "g", "h", "i"]),
    ] {
        let answer = server.post(
            "/v1/users/gina/memories/search",
            &json!({ "query": "where", "tags": tags }),
        );
        assert_error(&answer, 422, "invalid_setting");
    }
}
