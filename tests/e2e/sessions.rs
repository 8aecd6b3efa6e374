//! Sessions, their messages and runs over `/v1/sessions`: explicit creation and creation on
//! first use, ownership conflicts, the full read of a session, listings with filters and
//! pages, message paging, deletion, runs, the `incomplete_turn` state, and tenant isolation.

use memlayer_tests::{
    TestServer, assert_error, assert_rfc3339, assert_uuid_v4, json, redact_times,
};
use reqwest::Method;
use serde_json::Value;

fn messages_path(session_id: &str) -> String {
    format!("/v1/sessions/{session_id}/messages")
}

fn runs_path(session_id: &str) -> String {
    format!("/v1/sessions/{session_id}/runs")
}

/// The session ids of a listing page, in order.
fn listed_ids(page: &Value) -> Vec<String> {
    page["content"]
        .as_array()
        .expect("`content` is an array")
        .iter()
        .map(|session| session["session_id"].as_str().unwrap().to_owned())
        .collect()
}

fn create(server: &TestServer, session_id: &str, user_id: &str, agent_id: &str) -> Value {
    let (status, body) = server.post(
        "/v1/sessions",
        &json!({ "session_id": session_id, "user_id": user_id, "agent_id": agent_id }),
    );
    assert_eq!(status, 201, "create {session_id}: {body}");
    body
}

#[test]
fn create_with_a_caller_id_answers_the_stored_session() {
    let server = TestServer::start();
    let (status, created) = server.post(
        "/v1/sessions",
        &json!({
            "session_id": "chat-1",
            "user_id": "alice@example.com",
            "agent_id": "helper",
            "flow_id": "support",
            "metadata": { "channel": "web", "tags": ["a", "b"] },
        }),
    );
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        redact_times(created.clone()),
        json!({
            "session_id": "chat-1",
            "user_id": "alice@example.com",
            "agent_id": "helper",
            "flow_id": "support",
            "state": "active",
            "message_count": 0,
            "run_count": 0,
            "load_from": 0,
            "metadata": { "channel": "web", "tags": ["a", "b"] },
            "created_at": "<time>",
            "updated_at": "<time>",
        })
    );
    assert_eq!(created["created_at"], created["updated_at"]);

    let (status, fetched) = server.get("/v1/sessions/chat-1");
    assert_eq!(status, 200, "{fetched}");
    let mut expected = created;
    expected["messages"] = json!([]);
    assert_eq!(fetched, expected);
}

#[test]
fn create_without_an_id_generates_a_uuid_v4() {
    let server = TestServer::start();
    let body = json!({ "user_id": "alice", "agent_id": "helper" });
    let (status, first) = server.post("/v1/sessions", &body);
    assert_eq!(status, 201, "{first}");
    let (status, second) = server.post("/v1/sessions", &body);
    assert_eq!(status, 201, "{second}");
    assert_uuid_v4(&first["session_id"]);
    assert_uuid_v4(&second["session_id"]);
    assert_ne!(first["session_id"], second["session_id"]);
    // Without a flow the field is left out rather than null.
    assert!(first.get("flow_id").is_none(), "{first}");

    let id = first["session_id"].as_str().unwrap();
    let (status, fetched) = server.get(&format!("/v1/sessions/{id}"));
    assert_eq!(status, 200);
    assert_eq!(fetched["user_id"], "alice");
    let (_, listing) = server.get("/v1/sessions");
    assert_eq!(listing["total_elements"], 2);
}

#[test]
fn creating_an_existing_session_conflicts_and_changes_nothing() {
    let server = TestServer::start();
    let original = create(&server, "chat-1", "alice", "helper");
    let (status, _) = server.post(
        &messages_path("chat-1"),
        &json!({"role": "user", "content": "hi"}),
    );
    assert_eq!(status, 201);
    let (_, before) = server.get("/v1/sessions/chat-1");

    let answer = server.post(
        "/v1/sessions",
        &json!({ "session_id": "chat-1", "user_id": "mallory", "agent_id": "other" }),
    );
    assert_error(&answer, 409, "conflict");
    let answer = server.post(
        "/v1/sessions",
        &json!({ "session_id": "chat-1", "user_id": "alice", "agent_id": "helper" }),
    );
    assert_error(&answer, 409, "conflict");

    let (_, after) = server.get("/v1/sessions/chat-1");
    assert_eq!(after, before);
    assert_eq!(after["user_id"], original["user_id"]);
    let (_, listing) = server.get("/v1/sessions");
    assert_eq!(listing["total_elements"], 1);
}

#[test]
fn append_with_an_owner_creates_the_session_on_first_use() {
    let server = TestServer::start();
    let (status, first) = server.post(
        &messages_path("new-1"),
        &json!({
            "role": "user",
            "content": "hello",
            "user_id": "bob",
            "agent_id": "helper",
            "flow_id": "onboarding",
            "session_metadata": { "source": "import" },
        }),
    );
    assert_eq!(status, 201, "{first}");
    assert_eq!(
        first,
        json!({ "session_id": "new-1", "indices": [0], "created_session": true, "replayed": false })
    );

    // The owner may keep coming with every append; it only has to match.
    let (status, second) = server.post(
        &messages_path("new-1"),
        &json!({
            "role": "assistant",
            "content": "hi bob",
            "user_id": "bob",
            "agent_id": "helper",
        }),
    );
    assert_eq!(status, 201, "{second}");
    assert_eq!(
        second,
        json!({
            "session_id": "new-1",
            "indices": [1],
            "created_session": false,
            "replayed": false,
        })
    );

    let (status, session) = server.get("/v1/sessions/new-1");
    assert_eq!(status, 200);
    assert_eq!(session["user_id"], "bob");
    assert_eq!(session["agent_id"], "helper");
    assert_eq!(session["flow_id"], "onboarding");
    assert_eq!(session["metadata"], json!({ "source": "import" }));
    assert_eq!(session["message_count"], 2);
    let contents: Vec<&Value> = session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| &message["content"])
        .collect();
    assert_eq!(contents, [&json!("hello"), &json!("hi bob")]);
}

#[test]
fn append_to_an_unknown_session_without_an_owner_is_not_found() {
    let server = TestServer::start();
    let answer = server.post(
        &messages_path("ghost"),
        &json!({ "role": "user", "content": "hi" }),
    );
    let message = assert_error(&answer, 404, "session_not_found");
    assert!(message.contains("ghost"), "{message}");
    assert_error(&server.get("/v1/sessions/ghost"), 404, "session_not_found");
    assert_error(
        &server.get(&messages_path("ghost")),
        404,
        "session_not_found",
    );
    let (_, listing) = server.get("/v1/sessions");
    assert_eq!(listing["total_elements"], 0);
}

#[test]
fn append_with_another_owner_conflicts_and_stores_nothing() {
    let server = TestServer::start();
    create(&server, "chat-1", "alice", "helper");
    let (status, _) = server.post(
        &messages_path("chat-1"),
        &json!({"role": "user", "content": "mine"}),
    );
    assert_eq!(status, 201);
    let (_, before) = server.get("/v1/sessions/chat-1");

    for (user, agent) in [("mallory", "helper"), ("alice", "other-agent")] {
        let answer = server.post(
            &messages_path("chat-1"),
            &json!({ "role": "user", "content": "not yours", "user_id": user, "agent_id": agent }),
        );
        assert_error(&answer, 409, "conflict");
    }
    let (_, after) = server.get("/v1/sessions/chat-1");
    assert_eq!(after, before);

    let (status, answer) = server.post(
        &messages_path("chat-1"),
        &json!({ "role": "assistant", "content": "ok", "user_id": "alice", "agent_id": "helper" }),
    );
    assert_eq!((status, &answer["indices"]), (201, &json!([1])));
}

#[test]
fn get_returns_every_message_with_roles_indices_tokens_metadata_and_times() {
    let server = TestServer::start();
    create(&server, "chat-1", "alice", "helper");
    let rich_metadata = json!({
        "citations": [{ "doc": "manual.pdf", "page": 3 }],
        "score": 0.5,
        "nested": { "ok": true, "none": null, "big": 9_007_199_254_740_993_u64 },
        "text": "héllo ✓ \"quoted\" \\ \n",
    });
    let (status, answer) = server.post(
        &messages_path("chat-1"),
        &json!({ "messages": [
            { "role": "system", "content": "You are helpful." },
            { "role": "user", "content": "hello world" },
            {
                "role": "assistant",
                "content": "Hi there",
                "token_count": 99,
                "metadata": rich_metadata,
            },
            { "role": "tool", "content": "", "timestamp": "2026-05-06T10:00:00.123456+02:00" },
        ]}),
    );
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["indices"], json!([0, 1, 2, 3]));

    let (status, session) = server.get("/v1/sessions/chat-1");
    assert_eq!(status, 200, "{session}");
    // The client's timestamp is kept (normalised to UTC), before redaction hides it.
    assert_eq!(
        session["messages"][3]["timestamp"],
        "2026-05-06T08:00:00.123456Z"
    );
    // Messages without a timestamp get the append time, which is also the last activity.
    for index in 0..3 {
        assert_eq!(
            session["messages"][index]["timestamp"],
            session["updated_at"]
        );
    }
    assert_rfc3339(&session["created_at"]);
    assert_eq!(
        redact_times(session),
        json!({
            "session_id": "chat-1",
            "user_id": "alice",
            "agent_id": "helper",
            "state": "active",
            "message_count": 4,
            "run_count": 0,
            "load_from": 0,
            "metadata": {},
            "created_at": "<time>",
            "updated_at": "<time>",
            "messages": [
                // cl100k_base: "You| are| helpful|." and "hello| world".
                { "index": 0, "role": "system", "content": "You are helpful.", "token_count": 4,
                  "timestamp": "<time>", "metadata": {} },
                { "index": 1, "role": "user", "content": "hello world", "token_count": 2,
                  "timestamp": "<time>", "metadata": {} },
                { "index": 2, "role": "assistant", "content": "Hi there", "token_count": 99,
                  "timestamp": "<time>", "metadata": rich_metadata },
                { "index": 3, "role": "tool", "content": "", "token_count": 0,
                  "timestamp": "<time>", "metadata": {} },
            ],
        })
    );
}

#[test]
fn state_is_incomplete_turn_while_the_last_user_message_is_unanswered() {
    let server = TestServer::start();
    create(&server, "chat-1", "alice", "helper");
    let state = |server: &TestServer| {
        let (_, session) = server.get("/v1/sessions/chat-1");
        let (_, listing) = server.get("/v1/sessions");
        assert_eq!(
            listing["content"][0]["state"], session["state"],
            "listing agrees"
        );
        session["state"].as_str().unwrap().to_owned()
    };
    assert_eq!(state(&server), "active");
    for (role, expected) in [
        ("user", "incomplete_turn"),
        ("assistant", "active"),
        ("user", "incomplete_turn"),
        ("user", "incomplete_turn"),
        ("tool", "active"),
    ] {
        let (status, _) = server.post(
            &messages_path("chat-1"),
            &json!({ "role": role, "content": "..." }),
        );
        assert_eq!(status, 201);
        assert_eq!(state(&server), expected, "after a {role} message");
    }
}

#[test]
fn listings_filter_by_user_and_agent_and_page_from_zero() {
    let server = TestServer::start();
    // Created one after the other, so each is more recently active than the one before.
    let owners = [
        ("s1", "alice", "a1"),
        ("s2", "alice", "a2"),
        ("s3", "bob", "a1"),
        ("s4", "alice", "a1"),
        ("s5", "alice", "a2"),
        ("s6", "bob", "a1"),
        ("s7", "alice", "a1"),
    ];
    for (id, user, agent) in owners {
        create(&server, id, user, agent);
    }

    let (status, all) = server.get("/v1/sessions");
    assert_eq!(status, 200, "{all}");
    assert_eq!(listed_ids(&all), ["s7", "s6", "s5", "s4", "s3", "s2", "s1"]);
    assert_eq!(
        (
            &all["total_elements"],
            &all["total_pages"],
            &all["page"],
            &all["page_size"]
        ),
        (&json!(7), &json!(1), &json!(0), &json!(20))
    );
    // Listed sessions have the session shape, without messages.
    let (_, s7) = server.get("/v1/sessions/s7");
    let mut s7_without_messages = s7;
    s7_without_messages
        .as_object_mut()
        .unwrap()
        .remove("messages");
    assert_eq!(all["content"][0], s7_without_messages);

    for (query, ids) in [
        ("user_id=alice", vec!["s7", "s5", "s4", "s2", "s1"]),
        ("agent_id=a1", vec!["s7", "s6", "s4", "s3", "s1"]),
        ("user_id=alice&agent_id=a2", vec!["s5", "s2"]),
        ("user_id=bob&agent_id=a2", vec![]),
        ("user_id=nobody", vec![]),
    ] {
        let (status, page) = server.get(&format!("/v1/sessions?{query}"));
        assert_eq!(status, 200, "{query}: {page}");
        assert_eq!(listed_ids(&page), ids, "{query}");
        assert_eq!(page["total_elements"], ids.len(), "{query}");
        assert_eq!(page["total_pages"], ids.len().div_ceil(20), "{query}");
    }

    let pages: Vec<Value> = (0..4)
        .map(|page| {
            let (status, body) = server.get(&format!(
                "/v1/sessions?user_id=alice&page_size=2&page={page}"
            ));
            assert_eq!(status, 200, "{body}");
            assert_eq!(
                (
                    &body["total_elements"],
                    &body["total_pages"],
                    &body["page"],
                    &body["page_size"]
                ),
                (&json!(5), &json!(3), &json!(page), &json!(2))
            );
            body
        })
        .collect();
    let paged: Vec<Vec<String>> = pages.iter().map(listed_ids).collect();
    assert_eq!(
        paged,
        [vec!["s7", "s5"], vec!["s4", "s2"], vec!["s1"], vec![]]
    );

    // New activity moves a session to the front.
    let (status, _) = server.post(
        &messages_path("s1"),
        &json!({ "role": "user", "content": "back" }),
    );
    assert_eq!(status, 201);
    let (_, all) = server.get("/v1/sessions?page_size=3");
    assert_eq!(listed_ids(&all), ["s1", "s7", "s6"]);
    assert_eq!(
        (&all["total_elements"], &all["total_pages"]),
        (&json!(7), &json!(3))
    );
    let (_, bobs) = server.get("/v1/sessions?user_id=bob");
    assert_eq!(listed_ids(&bobs), ["s6", "s3"]);
}

#[test]
fn messages_are_paged_with_from_limit_and_next_from() {
    let server = TestServer::start();
    let messages: Vec<Value> = (0..7)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({ "role": role, "content": format!("m{i}") })
        })
        .collect();
    let (status, _) = server.post(
        &messages_path("chat-1"),
        &json!({ "messages": messages, "user_id": "alice", "agent_id": "helper" }),
    );
    assert_eq!(status, 201);

    let page = |query: &str| {
        let (status, body) = server.get(&format!("{}?{query}", messages_path("chat-1")));
        assert_eq!(status, 200, "{query}: {body}");
        assert_eq!(body["session_id"], "chat-1");
        let contents: Vec<String> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|message| {
                let index = message["index"].as_u64().unwrap();
                let content = message["content"].as_str().unwrap();
                assert_eq!(content, format!("m{index}"));
                content.to_owned()
            })
            .collect();
        (contents, body.get("next_from").cloned())
    };

    assert_eq!(
        page("limit=3"),
        (vec!["m0".into(), "m1".into(), "m2".into()], Some(json!(3)))
    );
    assert_eq!(
        page("from=3&limit=3"),
        (vec!["m3".into(), "m4".into(), "m5".into()], Some(json!(6)))
    );
    assert_eq!(page("from=6&limit=3"), (vec!["m6".into()], None));
    assert_eq!(page("from=4&limit=3").1, None);
    assert_eq!(page("from=0&limit=7").1, None);
    assert_eq!(page("from=0&limit=6").1, Some(json!(6)));
    // The default page holds all seven.
    assert_eq!(page("").0.len(), 7);
    // Past the end: an empty page, not an error.
    assert_eq!(page("from=7"), (vec![], None));
    assert_eq!(page("from=1000&limit=5"), (vec![], None));

    // Each page's messages equal the same messages in the full read.
    let (_, session) = server.get("/v1/sessions/chat-1");
    let (_, middle) = server.get(&format!("{}?from=2&limit=2", messages_path("chat-1")));
    assert_eq!(middle["messages"][0], session["messages"][2]);
    assert_eq!(middle["messages"][1], session["messages"][3]);

    // An erased message leaves a gap: the next page starts after the last message served,
    // so no message comes twice (the crash test found m3 served on two pages).
    let (status, body) = server.delete(&format!("{}/1", messages_path("chat-1")));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        page("limit=3"),
        (vec!["m0".into(), "m2".into(), "m3".into()], Some(json!(4)))
    );
    assert_eq!(
        page("from=4&limit=3"),
        (vec!["m4".into(), "m5".into(), "m6".into()], None)
    );
}

#[test]
fn delete_answers_204_then_the_session_is_gone() {
    let server = TestServer::start();
    create(&server, "chat-1", "alice", "helper");
    create(&server, "chat-2", "alice", "helper");
    let (status, _) = server.post(
        &messages_path("chat-1"),
        &json!({ "role": "user", "content": "hi" }),
    );
    assert_eq!(status, 201);
    let (status, _) = server.post(
        &runs_path("chat-1"),
        &json!({ "run_id": "r1", "status": "COMPLETED" }),
    );
    assert_eq!(status, 201);

    assert_eq!(server.delete("/v1/sessions/chat-1"), (204, Value::Null));
    assert_error(&server.get("/v1/sessions/chat-1"), 404, "session_not_found");
    assert_error(
        &server.get(&messages_path("chat-1")),
        404,
        "session_not_found",
    );
    assert_error(&server.get(&runs_path("chat-1")), 404, "session_not_found");
    assert_error(
        &server.delete("/v1/sessions/chat-1"),
        404,
        "session_not_found",
    );
    assert_error(
        &server.post(
            &messages_path("chat-1"),
            &json!({ "role": "user", "content": "again" }),
        ),
        404,
        "session_not_found",
    );
    for query in [
        "",
        "?user_id=alice",
        "?agent_id=helper",
        "?user_id=alice&agent_id=helper",
    ] {
        let (_, listing) = server.get(&format!("/v1/sessions{query}"));
        assert_eq!(listed_ids(&listing), ["chat-2"], "{query}");
        assert_eq!(listing["total_elements"], 1, "{query}");
    }

    // The id can be used again, and nothing of the old session comes back.
    let recreated = create(&server, "chat-1", "bob", "other");
    assert_eq!(
        (&recreated["message_count"], &recreated["run_count"]),
        (&json!(0), &json!(0))
    );
    let (status, answer) = server.post(
        &messages_path("chat-1"),
        &json!({ "role": "user", "content": "new" }),
    );
    assert_eq!((status, &answer["indices"]), (201, &json!([0])));
    let (_, session) = server.get("/v1/sessions/chat-1");
    assert_eq!(session["messages"].as_array().unwrap().len(), 1);
    assert_eq!(server.get(&runs_path("chat-1")), (200, json!([])));
    let (status, _) = server.post(
        &runs_path("chat-1"),
        &json!({ "run_id": "r1", "status": "RUNNING" }),
    );
    assert_eq!(status, 201, "run ids of the deleted session are free again");
}

#[test]
fn runs_are_recorded_and_listed_in_order() {
    let server = TestServer::start();
    create(&server, "chat-1", "alice", "helper");

    let (status, first) = server.post(
        &runs_path("chat-1"),
        &json!({
            "run_id": "run-1",
            "status": "COMPLETED",
            "content": "The answer is 42.",
            "tool_calls": [{ "name": "search", "arguments": { "q": "answer" } }],
            "metadata": { "model": "m-1", "tokens": { "in": 10, "out": 5 } },
        }),
    );
    assert_eq!(status, 201, "{first}");
    assert_eq!(
        redact_times(first.clone()),
        json!({
            "run_id": "run-1",
            "session_id": "chat-1",
            "status": "COMPLETED",
            "content": "The answer is 42.",
            "tool_calls": [{ "name": "search", "arguments": { "q": "answer" } }],
            "metadata": { "model": "m-1", "tokens": { "in": 10, "out": 5 } },
            "created_at": "<time>",
        })
    );

    let (status, second) = server.post(
        &runs_path("chat-1"),
        &json!({ "status": "FAILED", "error": "tool timed out" }),
    );
    assert_eq!(status, 201, "{second}");
    assert_uuid_v4(&second["run_id"]);
    let mut shape = redact_times(second.clone());
    shape["run_id"] = json!("<uuid>");
    assert_eq!(
        shape,
        json!({
            "run_id": "<uuid>",
            "session_id": "chat-1",
            "status": "FAILED",
            "tool_calls": [],
            "error": "tool timed out",
            "metadata": {},
            "created_at": "<time>",
        })
    );

    let (status, third) = server.post(
        &runs_path("chat-1"),
        &json!({ "run_id": "run-3", "status": "RUNNING" }),
    );
    assert_eq!(status, 201, "{third}");
    let (status, fourth) = server.post(
        &runs_path("chat-1"),
        &json!({ "run_id": "run-0", "status": "CANCELLED" }),
    );
    assert_eq!(status, 201, "{fourth}");

    let (status, runs) = server.get(&runs_path("chat-1"));
    assert_eq!(status, 200);
    assert_eq!(
        runs,
        json!([first, second, third, fourth]),
        "recording order, not id order"
    );

    let answer = server.post(
        &runs_path("chat-1"),
        &json!({ "run_id": "run-1", "status": "RUNNING" }),
    );
    let message = assert_error(&answer, 409, "conflict");
    assert!(message.contains("run-1"), "{message}");
    assert_eq!(server.get(&runs_path("chat-1")), (200, runs));

    let (_, session) = server.get("/v1/sessions/chat-1");
    assert_eq!(
        (&session["run_count"], &session["message_count"]),
        (&json!(4), &json!(0))
    );

    assert_error(
        &server.post(&runs_path("ghost"), &json!({ "status": "RUNNING" })),
        404,
        "session_not_found",
    );
    assert_error(&server.get(&runs_path("ghost")), 404, "session_not_found");
}

#[test]
fn tenants_are_isolated_by_key() {
    let server = TestServer::start();
    // Each tenant's own admin key, with the tenant header repeating its tenant.
    let as_tenant = |tenant: &str, method: Method, path: &str, body: Option<&Value>| {
        let mut request = server.request_as(tenant, method, path);
        if let Some(body) = body {
            request = request.json(body);
        }
        memlayer_tests::send(request)
    };

    let body =
        |user: &str| json!({ "session_id": "shared-id", "user_id": user, "agent_id": "helper" });
    let (status, _) = as_tenant("acme", Method::POST, "/v1/sessions", Some(&body("alice")));
    assert_eq!(status, 201);
    // The same id in another tenant is another session, not a conflict.
    let (status, _) = as_tenant("globex", Method::POST, "/v1/sessions", Some(&body("bob")));
    assert_eq!(status, 201);

    let (status, answer) = as_tenant(
        "acme",
        Method::POST,
        &messages_path("shared-id"),
        Some(&json!({ "role": "user", "content": "acme secret" })),
    );
    assert_eq!((status, &answer["indices"]), (201, &json!([0])));
    let (status, answer) = as_tenant(
        "globex",
        Method::POST,
        &messages_path("shared-id"),
        Some(&json!({
            "role": "user",
            "content": "globex note",
            "user_id": "bob",
            "agent_id": "helper",
        })),
    );
    assert_eq!(
        (status, &answer["indices"], &answer["created_session"]),
        (201, &json!([0]), &json!(false))
    );

    let (_, acme) = as_tenant("acme", Method::GET, "/v1/sessions/shared-id", None);
    let (_, globex) = as_tenant("globex", Method::GET, "/v1/sessions/shared-id", None);
    assert_eq!(
        (&acme["user_id"], &acme["messages"][0]["content"]),
        (&json!("alice"), &json!("acme secret"))
    );
    assert_eq!(
        (&globex["user_id"], &globex["messages"][0]["content"]),
        (&json!("bob"), &json!("globex note"))
    );

    // Another tenant, and the default tenant (the admin key's), see nothing.
    assert_error(
        &as_tenant("initech", Method::GET, "/v1/sessions/shared-id", None),
        404,
        "session_not_found",
    );
    assert_error(
        &server.get("/v1/sessions/shared-id"),
        404,
        "session_not_found",
    );
    assert_error(
        &as_tenant(
            "initech",
            Method::POST,
            &messages_path("shared-id"),
            Some(&json!({ "role": "user", "content": "x" })),
        ),
        404,
        "session_not_found",
    );
    assert_error(
        &as_tenant("initech", Method::DELETE, "/v1/sessions/shared-id", None),
        404,
        "session_not_found",
    );
    assert_error(
        &as_tenant("initech", Method::GET, &runs_path("shared-id"), None),
        404,
        "session_not_found",
    );
    let (_, listing) = as_tenant("initech", Method::GET, "/v1/sessions", None);
    assert_eq!(listing["total_elements"], 0);
    let (_, listing) = server.get("/v1/sessions");
    assert_eq!(listing["total_elements"], 0);

    // A tenant's listing shows only its own sessions; deleting in one leaves the other.
    let (_, listing) = as_tenant("acme", Method::GET, "/v1/sessions?user_id=alice", None);
    assert_eq!(listed_ids(&listing), ["shared-id"]);
    let (_, listing) = as_tenant("acme", Method::GET, "/v1/sessions?user_id=bob", None);
    assert_eq!(listing["total_elements"], 0);
    let (status, _) = as_tenant("acme", Method::DELETE, "/v1/sessions/shared-id", None);
    assert_eq!(status, 204);
    let (status, after) = as_tenant("globex", Method::GET, "/v1/sessions/shared-id", None);
    assert_eq!((status, after), (200, globex));

    // A key cannot reach another tenant by naming it: the same 404 whether it exists or not.
    for named in ["globex", "no-such-tenant"] {
        let request = server
            .request_with_key(&server.tenant_key("acme"), Method::GET, "/v1/sessions")
            .header("x-memlayer-tenant", named);
        assert_error(&memlayer_tests::send(request), 404, "tenant_not_found");
    }

    // The tenant header is an id like any other.
    for invalid in ["a/b", ".."] {
        let request = server
            .request(Method::GET, "/v1/sessions")
            .header("x-memlayer-tenant", invalid);
        assert_error(&memlayer_tests::send(request), 422, "invalid_id");
    }
}
