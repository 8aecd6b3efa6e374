use std::collections::BTreeSet;
use std::sync::Arc;

use memlayer_store::{Access, StoreError, Timestamp};

use super::{creating, fresh_store, owner, say, store_error};
use crate::test_cluster;

const TENANT: &str = "t";

fn tenant() -> Access {
    Access::tenant_wide(TENANT)
}

fn pair(session: &str) -> (String, String) {
    (TENANT.to_owned(), session.to_owned())
}

#[tokio::test]
async fn idle_sessions_are_taken_once_oldest_first_and_ended_ones_stay_ended() {
    let store = fresh_store().await;
    assert_eq!(store.oldest_open_activity().await.unwrap(), None);
    for session in ["first", "second", "third"] {
        store
            .append(&tenant(), session, creating("hi", "u"))
            .await
            .unwrap();
    }
    store.append(&tenant(), "first", say("hi")).await.unwrap(); // Moves it to the back.
    store
        .create_session(&tenant(), Some("empty"), owner("u"))
        .await
        .unwrap();
    store
        .end_session_activity(&tenant(), "second")
        .await
        .unwrap();
    store.delete_session(&tenant(), "empty").await.unwrap();
    let third = store.session(&tenant(), "third").await.unwrap().unwrap();
    assert_eq!(
        store.oldest_open_activity().await.unwrap(),
        Some(third.updated_at)
    );
    let cutoff = Timestamp::now();

    assert_eq!(
        store.take_idle_sessions(cutoff, 1).await.unwrap(),
        [pair("third")]
    );
    assert_eq!(
        store.take_idle_sessions(cutoff, 10).await.unwrap(),
        [pair("first")]
    );
    assert!(
        store
            .take_idle_sessions(cutoff, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.oldest_open_activity().await.unwrap(), None);
    // New activity does not reopen an ended session.
    store.append(&tenant(), "second", say("hi")).await.unwrap();
    store
        .record_run(
            &tenant(),
            "first",
            memlayer_store::NewRun {
                run_id: None,
                status: memlayer_store::RunStatus::Running,
                content: None,
                tool_calls: vec![],
                error: None,
                metadata: Default::default(),
            },
        )
        .await
        .unwrap();
    store.clear_session(&tenant(), "third").await.unwrap();
    assert!(
        store
            .take_idle_sessions(Timestamp::now(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A session created later is open; one active after the cutoff is not idle.
    store
        .append(&tenant(), "later", creating("hi", "u"))
        .await
        .unwrap();
    assert!(
        store
            .take_idle_sessions(cutoff, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.oldest_open_activity().await.unwrap().is_some());
    assert!(
        store
            .take_idle_sessions(Timestamp::now(), 0)
            .await
            .unwrap()
            .is_empty()
    );
    // Any cutoff is accepted, as on redb, however far in the future.
    assert_eq!(
        store
            .take_idle_sessions(Timestamp::from_micros(u64::MAX), 10)
            .await
            .unwrap(),
        [pair("later")]
    );
}

#[tokio::test]
async fn ending_is_checked_like_every_access_and_harmless_for_sessions_out_of_reach() {
    let store = fresh_store().await;
    store
        .append(&tenant(), "s", creating("hi", "alice"))
        .await
        .unwrap();
    let bob = Access::one_user(TENANT, "bob");
    store.end_session_activity(&bob, "s").await.unwrap();
    store.end_session_activity(&tenant(), "nope").await.unwrap();
    assert!(matches!(
        store_error(store.end_session_activity(&tenant(), "a b").await),
        StoreError::InvalidId { .. }
    ));
    assert_eq!(
        store
            .take_idle_sessions(Timestamp::now(), 10)
            .await
            .unwrap(),
        [pair("s")],
        "another user's caller did not end it"
    );
    // Ending it again, by its owner, changes nothing.
    let alice = Access::one_user(TENANT, "alice");
    store.end_session_activity(&alice, "s").await.unwrap();
    assert!(store.session_exists(&alice, "s").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_takers_get_disjoint_sessions() {
    let db = test_cluster::database().await.unwrap();
    let seeder = db.store().await.unwrap();
    let count = 60;
    for n in 0..count {
        seeder
            .create_session(&tenant(), Some(&format!("s{n:03}")), owner("u"))
            .await
            .unwrap();
    }
    let cutoff = Timestamp::now();
    // Two nodes, each taking in small batches until nothing is left.
    let nodes = [
        Arc::new(db.store().await.unwrap()),
        Arc::new(db.store().await.unwrap()),
    ];
    let tasks: Vec<_> = nodes
        .iter()
        .map(|node| {
            let node = Arc::clone(node);
            tokio::spawn(async move {
                let mut taken = Vec::new();
                loop {
                    let batch = node.take_idle_sessions(cutoff, 3).await.unwrap();
                    if batch.is_empty() {
                        // Skipped rows may still be locked by the other taker: ask once more
                        // after it had time to commit.
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        let again = node.take_idle_sessions(cutoff, 3).await.unwrap();
                        if again.is_empty() {
                            return taken;
                        }
                        taken.extend(again);
                    } else {
                        taken.extend(batch);
                    }
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut sizes = Vec::new();
    for task in tasks {
        let taken = task.await.unwrap();
        sizes.push(taken.len());
        all.extend(taken);
    }
    let distinct: BTreeSet<_> = all.iter().cloned().collect();
    assert_eq!(distinct.len(), all.len(), "no session was taken twice");
    assert_eq!(all.len(), count, "every idle session was taken: {sizes:?}");
    assert_eq!(seeder.oldest_open_activity().await.unwrap(), None);
}
