use memlayer_store::{Access, Append, NewMessage, Role, StoreError};

use super::{creating, fresh_store, say, store_error};

fn tenant() -> Access {
    Access::tenant_wide("t")
}

#[tokio::test]
async fn clearing_starts_later_loads_and_search_still_sees_everything() {
    let store = fresh_store().await;
    let append = Append {
        messages: vec![
            NewMessage::new(Role::User, "My Order 4711 is late", 1),
            NewMessage::new(Role::Assistant, "Checking order 4711", 1),
        ],
        ..creating("", "u")
    };
    store.append(&tenant(), "s", append).await.unwrap();
    assert_eq!(store.clear_session(&tenant(), "s").await.unwrap(), 2);
    store
        .append(&tenant(), "s", say("new topic: order pizza"))
        .await
        .unwrap();
    assert_eq!(
        store
            .session(&tenant(), "s")
            .await
            .unwrap()
            .unwrap()
            .load_from,
        2
    );
    let indices =
        |hits: Vec<memlayer_store::Message>| -> Vec<u64> { hits.iter().map(|m| m.index).collect() };
    let hits = store
        .search_messages(&tenant(), "s", "ORDER", 10)
        .await
        .unwrap();
    assert_eq!(indices(hits.clone()), [2, 1, 0]);
    assert_eq!(hits[1].content, "Checking order 4711");
    assert_eq!(hits[1].role, Role::Assistant);
    let both_words = store
        .search_messages(&tenant(), "s", "order 4711", 1)
        .await
        .unwrap();
    assert_eq!(indices(both_words), [1]);
    assert!(
        store
            .search_messages(&tenant(), "s", "order", 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .search_messages(&tenant(), "s", "absent", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store_error(store.search_messages(&tenant(), "s", "  ", 10).await),
        StoreError::InvalidInput { field: "query", .. }
    ));
    // Each word is a scan of every message read: their number is bounded, repeats count once.
    let words = |count: usize| (0..count).map(|n| format!("w{n} ")).collect::<String>();
    let repeated = format!("{} order", "order ".repeat(100));
    for (query, allowed) in [
        (words(memlayer_store::MAX_SEARCH_WORDS), true),
        (words(memlayer_store::MAX_SEARCH_WORDS + 1), false),
        (repeated, true),
        ("o".repeat(memlayer_store::MAX_SEARCH_QUERY + 1), false),
    ] {
        match store.search_messages(&tenant(), "s", &query, 10).await {
            Ok(_) => assert!(allowed, "{query} was searched"),
            Err(crate::PostgresError::Store(StoreError::InvalidInput {
                field: "query", ..
            })) => assert!(!allowed, "{query} was refused"),
            Err(other) => panic!("{other}"),
        }
    }
    assert!(matches!(
        store_error(store.clear_session(&tenant(), "nope").await),
        StoreError::SessionNotFound { .. }
    ));
}

#[tokio::test]
async fn search_and_clear_find_no_other_users_session() {
    let store = fresh_store().await;
    store
        .append(&tenant(), "s", creating("alice's order", "alice"))
        .await
        .unwrap();
    let bob = Access::one_user("t", "bob");
    for session in ["s", "nope"] {
        assert!(matches!(
            store_error(store.search_messages(&bob, session, "order", 10).await),
            StoreError::SessionNotFound { .. }
        ));
        assert!(matches!(
            store_error(store.clear_session(&bob, session).await),
            StoreError::SessionNotFound { .. }
        ));
    }
    // The query is checked first, as on redb.
    assert!(matches!(
        store_error(store.search_messages(&bob, "bad id", "", 10).await),
        StoreError::InvalidInput { field: "query", .. }
    ));
    assert!(matches!(
        store_error(store.clear_session(&tenant(), "bad id").await),
        StoreError::InvalidId { .. }
    ));
    let session = store.session(&tenant(), "s").await.unwrap().unwrap();
    assert_eq!(session.load_from, 0, "a refused clear changes nothing");
    let alice = Access::one_user("t", "alice");
    assert_eq!(
        store
            .search_messages(&alice, "s", "ORDER", 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn a_search_reads_past_its_first_batch_newest_first() {
    let store = fresh_store().await;
    // More messages than one batch; every 100th matches.
    let messages = (0..700)
        .map(|i| {
            let text = if i % 100 == 7 {
                format!("needle {i}")
            } else {
                format!("hay {i}")
            };
            NewMessage::new(Role::User, text, 1)
        })
        .collect();
    let append = Append {
        messages,
        ..creating("", "u")
    };
    store.append(&tenant(), "s", append).await.unwrap();
    let hits = store
        .search_messages(&tenant(), "s", "needle", 100)
        .await
        .unwrap();
    assert_eq!(
        hits.iter().map(|m| m.index).collect::<Vec<_>>(),
        [607, 507, 407, 307, 207, 107, 7]
    );
    assert_eq!(hits[6].content, "needle 7");
    let first_two = store
        .search_messages(&tenant(), "s", "needle", 2)
        .await
        .unwrap();
    assert_eq!(
        first_two.iter().map(|m| m.index).collect::<Vec<_>>(),
        [607, 507]
    );
}
