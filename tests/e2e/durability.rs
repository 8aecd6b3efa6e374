//! Durability: what the server acknowledged is still there, unchanged and in order, after it
//! is stopped and started again on the same redb file — including writes acknowledged while
//! the server was being stopped under load.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use memlayer_tests::{TestServer, json, send};
use reqwest::Method;
use serde_json::Value;

/// Everything the API shows of the store: every session with its messages and runs, and the
/// listings by every filter used.
fn everything(server: &TestServer) -> Value {
    let (status, listing) = server.get("/v1/sessions?page_size=100");
    assert_eq!(status, 200);
    let sessions: BTreeMap<String, Value> = listing["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|session| {
            let id = session["session_id"].as_str().unwrap();
            let (_, full) = server.get(&format!("/v1/sessions/{id}"));
            let (_, runs) = server.get(&format!("/v1/sessions/{id}/runs"));
            (id.to_owned(), json!({ "session": full, "runs": runs }))
        })
        .collect();
    json!({
        "listing": listing,
        "by_user": server.get("/v1/sessions?user_id=alice"),
        "by_agent": server.get("/v1/sessions?agent_id=helper"),
        "sessions": sessions,
    })
}

#[test]
fn everything_acknowledged_survives_a_restart_in_order() {
    let mut server = TestServer::start();
    // Sessions created both ways, 60 messages in batches of varied size, runs, a deletion.
    let (status, _) = server.post(
        "/v1/sessions",
        &json!({
            "session_id": "chat-1",
            "user_id": "alice",
            "agent_id": "helper",
            "metadata": { "v": 1 },
        }),
    );
    assert_eq!(status, 201);
    let mut next = 0;
    for batch in [1, 5, 2, 12, 1, 30, 9] {
        let messages: Vec<Value> = (next..next + batch)
            .map(|i| {
                json!({
                    "role": if i % 2 == 0 { "user" } else { "assistant" },
                    "content": format!("message {i}"),
                    "metadata": { "i": i },
                })
            })
            .collect();
        let (status, answer) = send(
            server
                .request(Method::POST, "/v1/sessions/chat-1/messages")
                .header("idempotency-key", format!("batch-{next}"))
                .json(&json!({ "messages": messages })),
        );
        assert_eq!(status, 201, "{answer}");
        assert_eq!(
            answer["indices"],
            json!((next..next + batch).collect::<Vec<_>>())
        );
        next += batch;
    }
    assert_eq!(next, 60);
    for (id, user) in [("chat-2", "alice"), ("chat-3", "bob"), ("doomed", "bob")] {
        let (status, _) = server.post(
            &format!("/v1/sessions/{id}/messages"),
            &json!({ "role": "user", "content": id, "user_id": user, "agent_id": "helper" }),
        );
        assert_eq!(status, 201);
    }
    for run in ["r1", "r2"] {
        let (status, _) = server.post(
            "/v1/sessions/chat-1/runs",
            &json!({ "run_id": run, "status": "COMPLETED", "tool_calls": [{ "n": run }] }),
        );
        assert_eq!(status, 201);
    }
    assert_eq!(server.delete("/v1/sessions/doomed").0, 204);

    let before = everything(&server);
    assert_eq!(before["listing"]["total_elements"], 3);
    let contents: Vec<String> = before["sessions"]["chat-1"]["session"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, message)| {
            assert_eq!(message["index"], i);
            message["content"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        contents,
        (0..60).map(|i| format!("message {i}")).collect::<Vec<_>>()
    );

    server.restart();
    assert_eq!(
        everything(&server),
        before,
        "the store changed across a restart"
    );
    server.restart();
    assert_eq!(
        everything(&server),
        before,
        "the store changed across a second restart"
    );

    // The counters survived too: indices continue, keys are remembered, run ids stay taken,
    // and the deleted session stays deleted.
    let (status, answer) = server.post(
        "/v1/sessions/chat-1/messages",
        &json!({ "role": "user", "content": "after restart" }),
    );
    assert_eq!((status, &answer["indices"]), (201, &json!([60])));
    let (status, replay) = send(
        server
            .request(Method::POST, "/v1/sessions/chat-1/messages")
            .header("idempotency-key", "batch-0")
            .json(&json!({
                "messages": [{ "role": "user", "content": "message 0", "metadata": { "i": 0 } }],
            })),
    );
    assert_eq!(
        (status, &replay["indices"], &replay["replayed"]),
        (200, &json!([0]), &json!(true))
    );
    let (status, _) = server.post(
        "/v1/sessions/chat-1/runs",
        &json!({ "run_id": "r1", "status": "RUNNING" }),
    );
    assert_eq!(status, 409);
    assert_eq!(server.get("/v1/sessions/doomed").0, 404);
    let (status, fresh) = server.post(
        "/v1/sessions",
        &json!({ "user_id": "carol", "agent_id": "helper" }),
    );
    assert_eq!(status, 201);
    assert_ne!(fresh["session_id"], json!("chat-1"));
}

#[test]
fn writes_acknowledged_during_a_graceful_stop_survive_it() {
    const WRITERS: usize = 8;
    /// Acknowledged appends to wait for before stopping, so the stop lands mid-load.
    const BEFORE_STOP: usize = 40;
    let mut server = TestServer::start();
    let base_url = server.base_url();
    let client = server.client().clone();
    let acknowledged = AtomicUsize::new(0);
    // (writer, sequence) → index, for every append the server answered 201.
    let acks = Mutex::new(BTreeMap::<(usize, usize), u64>::new());

    // Why each writer stopped: after the stop, a refused connection or a 503 is expected.
    let endings = Mutex::new(Vec::<String>::new());

    let stalled = std::thread::scope(|scope| {
        for writer in 0..WRITERS {
            let (client, base_url, acknowledged, acks, endings) =
                (&client, &base_url, &acknowledged, &acks, &endings);
            scope.spawn(move || {
                // Bounded even if the stop never came, so a broken stop fails instead of hanging.
                for seq in 0..2_000 {
                    let body = json!({
                        "role": "user",
                        "content": format!("w{writer} s{seq}"),
                        "token_count": 3,
                        "metadata": { "writer": writer, "seq": seq },
                        "user_id": "alice",
                        "agent_id": "helper",
                    });
                    let response = client
                        .post(format!("{base_url}/v1/sessions/busy/messages"))
                        .json(&body)
                        .send();
                    let answer = match response {
                        Ok(response) if response.status().as_u16() == 201 => {
                            response.json::<Value>().map_err(|err| err.to_string())
                        }
                        Ok(response) => Err(format!(
                            "{} {}",
                            response.status(),
                            response.text().unwrap_or_default()
                        )),
                        Err(err) => Err(err.to_string()),
                    };
                    match answer {
                        Ok(answer) => {
                            let index = answer["indices"][0].as_u64().expect("an index");
                            acks.lock().unwrap().insert((writer, seq), index);
                            acknowledged.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(ending) => {
                            endings.lock().unwrap().push(ending);
                            return;
                        }
                    }
                }
                endings.lock().unwrap().push("never stopped".into());
            });
        }
        // Stop once the load is under way, and always stop, so the writers end either way.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut stalled = None;
        while acknowledged.load(Ordering::SeqCst) < BEFORE_STOP {
            if !endings.lock().unwrap().is_empty() || Instant::now() > deadline {
                stalled = Some(endings.lock().unwrap().clone());
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        server.stop();
        stalled
    });
    assert_eq!(stalled, None, "writers ended before the stop");
    let endings = endings.into_inner().unwrap();
    assert!(!endings.iter().any(|e| e == "never stopped"), "{endings:?}");

    let acks = acks.into_inner().unwrap();
    assert!(acks.len() >= BEFORE_STOP);
    server.restart();
    let (status, session) = server.get("/v1/sessions/busy");
    assert_eq!(status, 200, "{session}");
    let messages = session["messages"].as_array().unwrap();
    // More may be stored than acknowledged (an answer lost in the stop), never fewer.
    assert!(
        messages.len() >= acks.len(),
        "{} stored, {} acknowledged",
        messages.len(),
        acks.len()
    );
    assert_eq!(session["message_count"], messages.len());
    let mut stored = BTreeMap::new();
    for (i, message) in messages.iter().enumerate() {
        assert_eq!(message["index"], i, "indices are gapless");
        let key = (
            message["metadata"]["writer"].as_u64().unwrap() as usize,
            message["metadata"]["seq"].as_u64().unwrap() as usize,
        );
        assert!(
            stored.insert(key, i as u64).is_none(),
            "{key:?} stored twice"
        );
    }
    for (key, index) in &acks {
        assert_eq!(
            stored.get(key),
            Some(index),
            "acknowledged {key:?} lost or moved"
        );
    }
}
