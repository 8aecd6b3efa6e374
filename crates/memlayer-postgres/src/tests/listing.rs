use memlayer_store::{Access, SessionFilter, StoreError};

use super::{creating, fresh_store, owner, say, store_error};
use crate::PgStore;

const TENANT: &str = "t";

fn tenant() -> Access {
    Access::tenant_wide(TENANT)
}

fn filter(user: Option<&str>, agent: Option<&str>) -> SessionFilter {
    SessionFilter {
        user_id: user.map(str::to_owned),
        agent_id: agent.map(str::to_owned),
    }
}

async fn ids(
    store: &PgStore,
    access: &Access,
    filter: SessionFilter,
    page: u64,
    size: usize,
) -> (u64, Vec<String>) {
    let page = store
        .list_sessions(access, &filter, page, size)
        .await
        .unwrap();
    (page.total, page.items.into_iter().map(|s| s.id).collect())
}

#[tokio::test]
async fn listings_filter_by_owner_and_order_by_last_activity() {
    let store = fresh_store().await;
    for (session, user, agent) in [
        ("s1", "alice", "bot"),
        ("s2", "bob", "bot"),
        ("s3", "alice", "helper"),
    ] {
        let mut new = owner(user);
        new.agent_id = agent.into();
        new.metadata.insert("n".into(), session.into());
        store
            .create_session(&tenant(), Some(session), new)
            .await
            .unwrap();
    }
    // Activity moves s1 to the front.
    store.append(&tenant(), "s1", say("x")).await.unwrap();
    let t = tenant();
    assert_eq!(
        ids(&store, &t, filter(None, None), 0, 10).await,
        (3, vec!["s1".into(), "s3".into(), "s2".into()])
    );
    assert_eq!(
        ids(&store, &t, filter(None, None), 1, 2).await,
        (3, vec!["s2".into()])
    );
    assert_eq!(
        ids(&store, &t, filter(Some("alice"), None), 0, 10).await,
        (2, vec!["s1".into(), "s3".into()])
    );
    assert_eq!(
        ids(&store, &t, filter(None, Some("bot")), 0, 10).await,
        (2, vec!["s1".into(), "s2".into()])
    );
    assert_eq!(
        ids(&store, &t, filter(Some("alice"), Some("helper")), 0, 10).await,
        (1, vec!["s3".into()])
    );
    // A listed session is the session as read, its sealed metadata opened.
    let page = store
        .list_sessions(&t, &filter(None, Some("helper")), 0, 10)
        .await
        .unwrap();
    assert_eq!(
        Some(&page.items[0]),
        store.session(&t, "s3").await.unwrap().as_ref()
    );
    assert_eq!(page.items[0].metadata["n"], "s3");
    // Tenants are separate.
    assert_eq!(
        ids(
            &store,
            &Access::tenant_wide("other"),
            filter(None, None),
            0,
            10
        )
        .await,
        (0, vec![])
    );
    // A page past the end is empty, however far past, and still counts.
    assert_eq!(
        ids(&store, &t, filter(None, None), u64::MAX, 100).await,
        (3, vec![])
    );
    // Clearing is activity too.
    store.clear_session(&t, "s2").await.unwrap();
    assert_eq!(
        ids(&store, &t, filter(None, None), 0, 1).await,
        (3, vec!["s2".into()])
    );
}

#[tokio::test]
async fn listings_are_refused_and_scoped_as_on_redb() {
    let store = fresh_store().await;
    store
        .append(&tenant(), "a1", creating("x", "alice"))
        .await
        .unwrap();
    store
        .append(&tenant(), "b1", creating("x", "bob"))
        .await
        .unwrap();
    let t = tenant();
    for size in [0, memlayer_store::MAX_PAGE_SIZE + 1] {
        assert!(matches!(
            store_error(store.list_sessions(&t, &filter(None, None), 0, size).await),
            StoreError::InvalidInput {
                field: "page_size",
                ..
            }
        ));
    }
    assert!(matches!(
        store_error(
            store
                .list_sessions(&t, &filter(Some("a/b"), None), 0, 10)
                .await
        ),
        StoreError::InvalidId {
            kind: "user_id",
            ..
        }
    ));
    assert!(matches!(
        store_error(
            store
                .list_sessions(&t, &filter(None, Some("")), 0, 10)
                .await
        ),
        StoreError::InvalidId {
            kind: "agent_id",
            ..
        }
    ));
    assert_eq!(
        ids(
            &store,
            &t,
            filter(None, None),
            0,
            memlayer_store::MAX_PAGE_SIZE
        )
        .await,
        (2, vec!["b1".into(), "a1".into()])
    );
    // A user-scoped caller lists its own sessions only, and naming another user finds
    // nothing, whether or not that user has sessions.
    let alice = Access::one_user(TENANT, "alice");
    assert_eq!(
        ids(&store, &alice, filter(None, None), 0, 10).await,
        (1, vec!["a1".into()])
    );
    assert_eq!(
        ids(&store, &alice, filter(Some("alice"), None), 0, 10).await,
        (1, vec!["a1".into()])
    );
    for other in ["bob", "nobody"] {
        assert_eq!(
            ids(&store, &alice, filter(Some(other), None), 0, 10).await,
            (0, vec![])
        );
    }
}

#[tokio::test]
async fn session_exists_answers_for_the_sessions_access_reaches() {
    let store = fresh_store().await;
    store
        .append(&tenant(), "s", creating("x", "alice"))
        .await
        .unwrap();
    assert!(store.session_exists(&tenant(), "s").await.unwrap());
    assert!(
        store
            .session_exists(&Access::one_user(TENANT, "alice"), "s")
            .await
            .unwrap()
    );
    assert!(
        !store
            .session_exists(&Access::one_user(TENANT, "bob"), "s")
            .await
            .unwrap()
    );
    assert!(!store.session_exists(&tenant(), "nope").await.unwrap());
    assert!(
        !store
            .session_exists(&Access::tenant_wide("t2"), "s")
            .await
            .unwrap()
    );
    assert!(matches!(
        store_error(store.session_exists(&tenant(), "a b").await),
        StoreError::InvalidId { .. }
    ));
    store.delete_session(&tenant(), "s").await.unwrap();
    assert!(!store.session_exists(&tenant(), "s").await.unwrap());
}
