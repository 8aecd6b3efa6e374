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
    // First records: not lapsed; each counts the live nodes, itself included.
    let seen = |node, followed| {
        let store = &store;
        async move { store.follower_seen(node, followed, LAPSE).await.unwrap() }
    };
    let first = [seen("a", 0).await, seen("b", 5).await, seen("c", 10).await];
    assert_eq!(
        first.map(|record| (record.lapsed, record.live_nodes)),
        [(false, 1), (false, 2), (false, 3)]
    );
    assert_eq!(seen("a", 0).await.live_nodes, 3, "a counts once");
    // `a` asks: `b` is behind 10, `c` is not, `a` itself never counts.
    assert_eq!(behind(10).await, 1);
    assert_eq!(behind(11).await, 2);
    assert_eq!(behind(5).await, 0);
    // `b` follows on.
    assert!(!seen("b", 12).await.lapsed);
    assert_eq!(behind(11).await, 1, "c only");
    // Positions may go back (a node that rebuilt its indexes covers less than before).
    assert!(!seen("b", 3).await.lapsed);
    assert_eq!(behind(10).await, 1);

    // `c` stops following: once its record lapsed it is not waited for, and its next record
    // says it lapsed; `b`, seen again in time, did not.
    tokio::time::sleep(LAPSE / 2).await;
    assert!(!seen("b", 3).await.lapsed);
    tokio::time::sleep(LAPSE / 2 + Duration::from_millis(200)).await;
    assert_eq!(behind(11).await, 1, "b only: c lapsed");
    let back = seen("c", 11).await;
    // `a`'s last record is as old as `c`'s was: only `b` and `c` are live.
    assert_eq!((back.lapsed, back.live_nodes), (true, 2));
    assert_eq!(behind(11).await, 1, "c is live again and caught up");
    assert!(!seen("c", 11).await.lapsed);
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
