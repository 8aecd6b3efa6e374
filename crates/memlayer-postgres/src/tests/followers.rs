//! The registry of nodes following the shared outbox: who is live, who is behind, and a
//! node learning that its record lapsed.

use std::time::Duration;

use crate::{PostgresError, test_cluster};

/// Short, so that a record lapses within the test.
const LAPSE: Duration = Duration::from_secs(2);

#[tokio::test]
async fn live_nodes_behind_a_position_are_counted_until_they_pass_it_or_lapse() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let behind = |position| {
        let store = &store;
        async move { store.followers_behind(position, LAPSE, "a").await.unwrap() }
    };
    assert_eq!(behind(10).await, 0, "nobody follows yet");
    // First records: not lapsed.
    assert!(!store.follower_seen("a", 0, LAPSE).await.unwrap());
    assert!(!store.follower_seen("b", 5, LAPSE).await.unwrap());
    assert!(!store.follower_seen("c", 10, LAPSE).await.unwrap());
    // `a` asks: `b` is behind 10, `c` is not, `a` itself never counts.
    assert_eq!(behind(10).await, 1);
    assert_eq!(behind(11).await, 2);
    assert_eq!(behind(5).await, 0);
    // `b` follows on.
    assert!(!store.follower_seen("b", 12, LAPSE).await.unwrap());
    assert_eq!(behind(11).await, 1, "c only");
    // Positions may go back (a node that rebuilt its indexes covers less than before).
    assert!(!store.follower_seen("b", 3, LAPSE).await.unwrap());
    assert_eq!(behind(10).await, 1);

    // `c` stops following: once its record lapsed it is not waited for, and its next record
    // says it lapsed; `b`, seen again in time, did not.
    tokio::time::sleep(LAPSE / 2).await;
    assert!(!store.follower_seen("b", 3, LAPSE).await.unwrap());
    tokio::time::sleep(LAPSE / 2 + Duration::from_millis(200)).await;
    assert_eq!(behind(11).await, 1, "b only: c lapsed");
    assert!(store.follower_seen("c", 11, LAPSE).await.unwrap());
    assert_eq!(behind(11).await, 1, "c is live again and caught up");
    assert!(!store.follower_seen("c", 11, LAPSE).await.unwrap());
}

#[tokio::test]
async fn a_node_name_that_is_not_an_identifier_is_refused() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    for name in ["", "a/b", &"x".repeat(1_000)] {
        let refused = store.follower_seen(name, 0, LAPSE).await;
        assert!(
            matches!(refused, Err(PostgresError::Store(_))),
            "{name:?}: {refused:?}"
        );
    }
}
