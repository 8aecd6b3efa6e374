//! Concurrent appends: 32 clients, 16 sharing one session and 16 with a session each, every
//! request carrying an idempotency key and about one in twenty sent twice at once (a retry
//! racing the original). Afterwards no acknowledged message is lost, none is stored twice,
//! indices are gapless from 0, and each client's messages keep its order in the shared session.

use std::collections::BTreeMap;

use memlayer_tests::{TestServer, json, send};
use reqwest::blocking::Client;
use serde_json::Value;

const CLIENTS: usize = 32;
/// Clients `0..SHARED_CLIENTS` append to one session; the others each to their own.
const SHARED_CLIENTS: usize = 16;
const REQUESTS_PER_CLIENT: usize = 25;
const SHARED_SESSION: &str = "shared";

fn session_of(client: usize) -> String {
    if client < SHARED_CLIENTS {
        SHARED_SESSION.to_owned()
    } else {
        format!("own-{client}")
    }
}

/// About one request in twenty is retried, spread over clients and over time.
fn is_retried(client: usize, request: usize) -> bool {
    (client * 7 + request * 13).is_multiple_of(20)
}

/// Every third request carries two messages, the others one.
fn batch_size(request: usize) -> usize {
    if request % 3 == 2 { 2 } else { 1 }
}

/// A message as the client sent it: which client, and its position in that client's stream.
type ClientSeq = (usize, usize);

fn post(client: &Client, url: &str, key: &str, body: &Value) -> (u16, Value) {
    send(client.post(url).header("idempotency-key", key).json(body))
}

/// Runs one client; answers the index the server acknowledged for each of its messages.
fn run_client(client: &Client, base_url: &str, id: usize) -> Vec<(ClientSeq, u64)> {
    let session = session_of(id);
    let url = format!("{base_url}/v1/sessions/{session}/messages");
    let mut acknowledged = Vec::new();
    let mut seq = 0;
    for request in 0..REQUESTS_PER_CLIENT {
        let seqs: Vec<usize> = (seq..seq + batch_size(request)).collect();
        seq += seqs.len();
        let messages: Vec<Value> = seqs
            .iter()
            .map(|s| {
                json!({
                    "role": if s % 2 == 0 { "user" } else { "assistant" },
                    "content": format!("client {id} message {s}"),
                    "metadata": { "client": id, "seq": s },
                })
            })
            .collect();
        let body = json!({
            "messages": messages,
            "user_id": format!("user-{}", if id < SHARED_CLIENTS { 0 } else { id }),
            "agent_id": "agent",
        });
        let key = format!("client-{id}-request-{request}");

        let answers = if is_retried(id, request) {
            // The retry races the original, as when a client times out and resends.
            let (first, second) = std::thread::scope(|scope| {
                let retry = scope.spawn(|| post(client, &url, &key, &body));
                (post(client, &url, &key, &body), retry.join().unwrap())
            });
            let mut answers = vec![first, second];
            answers.sort_by_key(|(status, _)| *status);
            assert_eq!(
                (answers[0].0, answers[1].0),
                (200, 201),
                "{key}: exactly one of the two is written: {answers:?}"
            );
            assert_eq!(answers[0].1["replayed"], true, "{key}");
            assert_eq!(answers[1].1["replayed"], false, "{key}");
            assert_eq!(answers[0].1["indices"], answers[1].1["indices"], "{key}");
            answers
        } else {
            let answer = post(client, &url, &key, &body);
            assert_eq!(answer.0, 201, "{key}: {}", answer.1);
            vec![answer]
        };

        let indices: Vec<u64> = answers[0].1["indices"]
            .as_array()
            .expect("indices")
            .iter()
            .map(|index| index.as_u64().unwrap())
            .collect();
        assert_eq!(indices.len(), seqs.len(), "{key}");
        assert!(
            indices.windows(2).all(|pair| pair[1] == pair[0] + 1),
            "{key}: one append's indices are consecutive: {indices:?}"
        );
        acknowledged.extend(seqs.into_iter().map(|s| (id, s)).zip(indices));
    }
    acknowledged
}

/// Every message of a session, read page by page.
fn all_messages(server: &TestServer, session: &str) -> Vec<Value> {
    let mut messages = Vec::new();
    let mut from = 0;
    loop {
        let (status, page) = server.get(&format!(
            "/v1/sessions/{session}/messages?from={from}&limit=100"
        ));
        assert_eq!(status, 200, "{page}");
        messages.extend(page["messages"].as_array().unwrap().iter().cloned());
        match page.get("next_from") {
            Some(next) => from = next.as_u64().unwrap(),
            None => return messages,
        }
    }
}

#[test]
fn concurrent_clients_lose_nothing_duplicate_nothing_and_keep_order() {
    let server = TestServer::start();
    let base_url = server.base_url();

    let acknowledged: Vec<Vec<(ClientSeq, u64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|id| {
                let (client, base_url) = (server.client(), &base_url);
                scope.spawn(move || run_client(client, base_url, id))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("a client thread panicked"))
            .collect()
    });

    // What each session should hold: every acknowledged message at its acknowledged index.
    let mut expected: BTreeMap<String, BTreeMap<ClientSeq, u64>> = BTreeMap::new();
    for (id, acks) in acknowledged.iter().enumerate() {
        let session = expected.entry(session_of(id)).or_default();
        for &(message, index) in acks {
            assert!(
                session.insert(message, index).is_none(),
                "{message:?} acknowledged twice"
            );
        }
    }
    assert_eq!(expected.len(), 1 + CLIENTS - SHARED_CLIENTS);

    for (session, acks) in &expected {
        let messages = all_messages(&server, session);
        let mut stored: BTreeMap<ClientSeq, u64> = BTreeMap::new();
        for (position, message) in messages.iter().enumerate() {
            assert_eq!(
                message["index"], position,
                "{session}: indices are gapless from 0"
            );
            let key = (
                message["metadata"]["client"].as_u64().unwrap() as usize,
                message["metadata"]["seq"].as_u64().unwrap() as usize,
            );
            assert_eq!(
                message["content"],
                format!("client {} message {}", key.0, key.1),
                "{session}"
            );
            assert!(
                stored.insert(key, position as u64).is_none(),
                "{session}: {key:?} stored twice"
            );
        }
        // Every stored message was acknowledged at the index it is stored at, and vice versa.
        assert_eq!(
            &stored, acks,
            "{session}: stored and acknowledged messages differ"
        );

        // Each client's messages appear in the order it sent them.
        let mut last_seq: BTreeMap<usize, usize> = BTreeMap::new();
        for message in &messages {
            let client = message["metadata"]["client"].as_u64().unwrap() as usize;
            let seq = message["metadata"]["seq"].as_u64().unwrap() as usize;
            let expected_seq = last_seq.get(&client).map_or(0, |last| last + 1);
            assert_eq!(seq, expected_seq, "{session}: client {client} out of order");
            last_seq.insert(client, seq);
        }

        let (_, full) = server.get(&format!("/v1/sessions/{session}"));
        assert_eq!(full["message_count"], messages.len(), "{session}");
        assert_eq!(full["messages"].as_array().unwrap(), &messages, "{session}");
    }

    let per_client: usize = (0..REQUESTS_PER_CLIENT).map(batch_size).sum();
    assert_eq!(expected[SHARED_SESSION].len(), SHARED_CLIENTS * per_client);
    let (_, listing) = server.get("/v1/sessions?page_size=100");
    assert_eq!(listing["total_elements"], 1 + CLIENTS - SHARED_CLIENTS);
    let (_, shared_owner) = server.get("/v1/sessions?user_id=user-0");
    assert_eq!(shared_owner["total_elements"], 1);
}
