//! Snapshots hold a pooled connection in a transaction; it must go back to the pool with the
//! transaction ended.

use std::time::Duration;

use memlayer_store::Access;

use super::{creating, owner};
use crate::{PgStore, test_cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_snapshot_gives_its_connection_back_outside_any_transaction() {
    let database = test_cluster::database().await.unwrap();
    // One connection: whatever the snapshot held is what the next call gets.
    let store = PgStore::connect_config(database.config().clone(), 1)
        .await
        .unwrap();
    let ada = Access::one_user("t", "ada");
    store
        .append(&ada, "s", creating("one", "ada"))
        .await
        .unwrap();
    let snapshot = store.snapshot(&ada, "s").await.unwrap().unwrap();
    assert_eq!(snapshot.session().message_count, 1);
    drop(snapshot);
    // Not found either: the transaction ends on that path too.
    assert!(
        store
            .snapshot(&Access::one_user("t", "bob"), "s")
            .await
            .unwrap()
            .is_none()
    );

    // In a transaction, `now()` would stand still from one statement to the next.
    let client = store.pool().get().await.unwrap();
    let first: std::time::SystemTime = client.query_one("SELECT now()", &[]).await.unwrap().get(0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second: std::time::SystemTime = client.query_one("SELECT now()", &[]).await.unwrap().get(0);
    assert!(
        second > first,
        "the connection came back inside a transaction"
    );
    drop(client);

    // And the connection writes.
    store
        .create_session(&ada, Some("t"), owner("ada"))
        .await
        .unwrap();
}
