use memlayer_store::{Access, Append, NewMessage, Role, SessionVersion, StoreError};

use super::{creating, fresh_store, say, store_error};
use crate::PgStore;
use crate::test_cluster;

fn tenant() -> Access {
    Access::tenant_wide("t")
}

async fn version(store: &PgStore, session_id: &str) -> SessionVersion {
    store
        .version(&tenant(), session_id)
        .await
        .unwrap()
        .expect("the session exists")
}

async fn four_messages(store: &PgStore) {
    let append = Append {
        messages: (0..4)
            .map(|i| NewMessage::new(Role::User, format!("m{i}"), 1))
            .collect(),
        ..creating("", "u")
    };
    store.append(&tenant(), "s", append).await.unwrap();
}

async fn summary_text(store: &PgStore) -> Option<(String, u64, u64)> {
    store
        .summary(&tenant(), "s")
        .await
        .unwrap()
        .map(|s| (s.text, s.first_index, s.last_index))
}

#[tokio::test]
async fn a_saved_summary_replaces_the_previous_one_and_goes_with_its_session() {
    let store = fresh_store().await;
    four_messages(&store).await;
    assert_eq!(store.summary(&tenant(), "s").await.unwrap(), None);
    let save = |text: &'static str, first, last| {
        let store = &store;
        async move {
            let read = version(store, "s").await;
            store
                .save_summary(&tenant(), "s", read, text.into(), first, last)
                .await
        }
    };
    save("first", 0, 1).await.unwrap();
    save("second", 0, 2).await.unwrap();
    assert_eq!(summary_text(&store).await, Some(("second".into(), 0, 2)));
    let stored = store.summary(&tenant(), "s").await.unwrap().unwrap();
    assert!(stored.created_at.as_micros() > 0);
    // A slower request that summarised fewer turns does not move the checkpoint back.
    save("stale", 0, 1).await.unwrap();
    assert_eq!(summary_text(&store).await, Some(("second".into(), 0, 2)));
    for (first, last) in [(2, 1), (0, 4)] {
        assert!(matches!(
            store_error(save("bad", first, last).await),
            StoreError::InvalidInput {
                field: "summary range",
                ..
            }
        ));
    }
    // After a clear, the summary from before it no longer holds the checkpoint: even one
    // reaching less replaces it.
    store.clear_session(&tenant(), "s").await.unwrap();
    store.append(&tenant(), "s", say("m4")).await.unwrap();
    save("after the clear", 0, 1).await.unwrap();
    assert_eq!(
        summary_text(&store).await,
        Some(("after the clear".into(), 0, 1))
    );

    store.delete_session(&tenant(), "s").await.unwrap();
    store
        .append(&tenant(), "s", creating("again", "u"))
        .await
        .unwrap();
    assert_eq!(store.summary(&tenant(), "s").await.unwrap(), None);
}

#[tokio::test]
async fn a_summary_of_a_changed_session_is_refused() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    four_messages(&store).await;
    let read = version(&store, "s").await;
    // Appends leave the version alone: messages read stay as they were.
    store.append(&tenant(), "s", say("more")).await.unwrap();
    assert_eq!(version(&store, "s").await, read);

    // Deleted and created again under the id: another session, another version.
    store.delete_session(&tenant(), "s").await.unwrap();
    four_messages(&store).await;
    let recreated = version(&store, "s").await;
    assert_ne!(recreated, read, "a new surrogate key");
    let stale = store
        .save_summary(&tenant(), "s", read, "old".into(), 0, 1)
        .await;
    assert!(matches!(
        store_error(stale),
        StoreError::SessionChanged { .. }
    ));
    // A message erased since the read (no erasure of single messages yet on PostgreSQL:
    // the count it would raise).
    db.connect()
        .await
        .unwrap()
        .execute("UPDATE sessions SET erased = erased + 1", &[])
        .await
        .unwrap();
    let stale = store
        .save_summary(&tenant(), "s", recreated, "old".into(), 0, 1)
        .await;
    assert!(matches!(
        store_error(stale),
        StoreError::SessionChanged { .. }
    ));
    assert_eq!(store.summary(&tenant(), "s").await.unwrap(), None);
    let current = version(&store, "s").await;
    store
        .save_summary(&tenant(), "s", current, "fresh".into(), 0, 1)
        .await
        .unwrap();
    assert_eq!(summary_text(&store).await, Some(("fresh".into(), 0, 1)));
}

#[tokio::test]
async fn summaries_are_refused_as_on_redb() {
    let store = fresh_store().await;
    four_messages(&store).await;
    let read = version(&store, "s").await;
    let nul = store
        .save_summary(&tenant(), "s", read, "a\0b".into(), 0, 1)
        .await;
    assert!(matches!(
        store_error(nul),
        StoreError::InvalidInput {
            field: "summary",
            ..
        }
    ));
    let bob = Access::one_user("t", "bob");
    for session in ["s", "nope"] {
        assert!(matches!(
            store_error(
                store
                    .save_summary(&bob, session, read, "x".into(), 0, 1)
                    .await
            ),
            StoreError::SessionNotFound { .. }
        ));
        assert!(matches!(
            store_error(store.summary(&bob, session).await),
            StoreError::SessionNotFound { .. }
        ));
    }
    assert_eq!(store.version(&bob, "s").await.unwrap(), None);
    assert!(matches!(
        store_error(store.summary(&tenant(), "bad id").await),
        StoreError::InvalidId { .. }
    ));
    assert_eq!(store.summary(&tenant(), "s").await.unwrap(), None);
    let owner = Access::one_user("t", "u");
    store
        .save_summary(&owner, "s", read, "mine".into(), 0, 3)
        .await
        .unwrap();
    assert_eq!(summary_text(&store).await, Some(("mine".into(), 0, 3)));
}
