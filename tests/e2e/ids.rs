//! The ids of memories, episodes and erasures through the real server: drawn at random, so a
//! key learns from its own ids neither how many others were created nor which ids exist;
//! exact as JSON numbers in JavaScript; and the listings keep their documented order.

use memlayer_tests::{TestServer, json};
use serde_json::Value;

/// Distinct, exact in JavaScript (below 2^53), not increasing in creation order and far
/// apart: the closest of 20 random 53-bit ids are ~2^44 apart; counted ids are 1 apart.
fn assert_opaque(what: &str, ids: &[u64]) {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len(), "{what}: repeated ids {ids:?}");
    assert!(
        sorted.iter().all(|&id| (1..1 << 53).contains(&id)),
        "{what}: {ids:?}"
    );
    assert_ne!(
        sorted, ids,
        "{what}: ids increase in creation order: {ids:?}"
    );
    let closest = sorted.windows(2).map(|w| w[1] - w[0]).min().unwrap();
    assert!(closest > 1 << 20, "{what}: ids {closest} apart: {ids:?}");
}

fn ids(list: &Value, field: &str) -> Vec<u64> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|item| item[field].as_u64().unwrap_or_else(|| panic!("{item}")))
        .collect()
}

#[test]
fn ids_tell_nothing_and_listings_keep_their_order() {
    let server = TestServer::start();

    // One memory for each of 20 users (a user's similar memories would be merged), and
    // five different ones for alice, whose list is oldest first.
    let mut memories = Vec::new();
    for n in 0..20 {
        let body =
            json!({ "text": format!("user {n} was born in year {}", 1950 + n), "type": "fact" });
        let (status, answer) = server.post(&format!("/v1/users/user-{n}/memories"), &body);
        assert_eq!(status, 201, "{answer}");
        memories.push(answer["memory"]["memory_id"].as_u64().unwrap());
    }
    assert_opaque("memories", &memories);
    let mut alice = Vec::new();
    for text in [
        "Alice is allergic to peanuts",
        "Alice drives a red bicycle to work",
        "Alice's manager is called Sam",
        "Alice prefers answers in French",
        "Alice plays the cello on Sundays",
    ] {
        let body = json!({ "text": text, "type": "fact" });
        let (status, answer) = server.post("/v1/users/alice/memories", &body);
        assert_eq!(status, 201, "{answer}");
        assert_eq!(answer["action"], "created", "{answer}");
        alice.push(answer["memory"]["memory_id"].as_u64().unwrap());
    }
    let (status, listed) = server.get("/v1/users/alice/memories");
    assert_eq!(status, 200, "{listed}");
    assert_eq!(ids(&listed["memories"], "memory_id"), alice, "oldest first");

    let mut episodes = Vec::new();
    for n in 0..20 {
        let body = json!({
            "task_type": "refund",
            "description": format!("refund number {n}"),
            "outcome": "failure",
            "lesson": format!("lesson {n}"),
        });
        let (status, answer) = server.post("/v1/users/alice/episodes", &body);
        assert_eq!(status, 201, "{answer}");
        episodes.push(answer["episode_id"].as_u64().unwrap());
    }
    assert_opaque("episodes", &episodes);
    let (status, listed) = server.get("/v1/users/alice/episodes");
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        ids(&listed["episodes"], "episode_id"),
        episodes,
        "oldest first"
    );
    let (status, lessons) = server.get("/v1/users/alice/lessons?task_type=refund");
    assert_eq!(status, 200, "{lessons}");
    let newest: Vec<u64> = episodes.iter().rev().take(5).copied().collect();
    let shown: Vec<u64> = serde_json::from_value(lessons["episodes"].clone()).unwrap();
    assert_eq!(shown, newest, "the newest lessons, newest first");

    let mut erasures = Vec::new();
    for id in &memories {
        let (status, receipt) = server.delete(&format!("/v1/memories/{id}"));
        assert_eq!(status, 200, "{receipt}");
        erasures.push(receipt["erasure_id"].as_u64().unwrap());
    }
    assert_opaque("erasures", &erasures);
    let (status, receipts) = server.get("/v1/admin/erasures?limit=100");
    assert_eq!(status, 200, "{receipts}");
    let newest: Vec<u64> = erasures.iter().rev().copied().collect();
    assert_eq!(
        ids(&receipts["erasures"], "erasure_id"),
        newest,
        "newest first"
    );
}
