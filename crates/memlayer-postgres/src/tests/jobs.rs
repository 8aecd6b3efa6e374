//! The erasure jobs' journal and the session listings erasure jobs start from.

use memlayer_store::{Access, StoreError, Timestamp};
use serde_json::json;

use super::{fresh_store, owner, say, store_error};

#[tokio::test]
async fn a_job_is_pending_until_it_finishes_then_has_one_receipt_under_its_tenant() {
    let store = fresh_store().await;
    let first = store.record_job(json!({"erase": "first"})).await.unwrap();
    let second = store.record_job(json!({"erase": "second"})).await.unwrap();
    assert_ne!(first, second);
    assert!(first < 1 << 53 && second < 1 << 53);
    assert_eq!(store.pending_job_count().await.unwrap(), 2);
    let pending: Vec<_> = store
        .pending_jobs()
        .await
        .unwrap()
        .into_iter()
        .map(|job| (job.id, job.document))
        .collect();
    assert_eq!(
        pending,
        [
            (first, json!({"erase": "first"})),
            (second, json!({"erase": "second"}))
        ]
    );

    store
        .finish_job(first, "t", json!({"receipt": 1}))
        .await
        .unwrap();
    assert_eq!(store.pending_job(first).await.unwrap(), None);
    assert_eq!(
        store.pending_job(second).await.unwrap(),
        Some(json!({"erase": "second"}))
    );
    assert_eq!(
        store.receipt("t", first).await.unwrap(),
        Some(json!({"receipt": 1}))
    );
    assert_eq!(store.receipt("other", first).await.unwrap(), None);
    assert_eq!(store.receipt("t", second).await.unwrap(), None);
    store
        .finish_job(second, "t", json!({"receipt": 2}))
        .await
        .unwrap();
    assert_eq!(
        store.receipts("t", 10).await.unwrap(),
        [json!({"receipt": 2}), json!({"receipt": 1})]
    );
    assert_eq!(
        store.receipts("t", 1).await.unwrap(),
        [json!({"receipt": 2})]
    );
    assert_eq!(store.pending_job_count().await.unwrap(), 0);

    // Nothing is finished that was never recorded, and tenants are ids.
    let never = (first ^ second) | 1;
    assert!(matches!(
        store_error(store.finish_job(never, "t", json!({})).await),
        StoreError::InvalidInput { field: "job", .. }
    ));
    assert!(matches!(
        store_error(store.receipts("not a tenant", 10).await),
        StoreError::InvalidId { .. }
    ));
    // The document is gone with the job: only the receipt stays.
    let client = store.pool().get().await.unwrap();
    let documents: i64 = client
        .query_one(
            "SELECT count(*) FROM erasure_jobs WHERE document IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(documents, 0);
}

#[tokio::test]
async fn sessions_are_listed_by_user_and_by_inactivity_oldest_first() {
    let store = fresh_store().await;
    let operator = Access::tenant_wide("t");
    for (id, user) in [("a", "ada"), ("b", "bob"), ("c", "ada")] {
        store
            .create_session(&operator, Some(id), owner(user))
            .await
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let cutoff = Timestamp::now();
    std::thread::sleep(std::time::Duration::from_millis(2));
    store.append(&operator, "a", say("later")).await.unwrap();
    // Another tenant's session of the same user is not listed.
    store
        .create_session(&Access::tenant_wide("u"), Some("x"), owner("ada"))
        .await
        .unwrap();

    assert_eq!(
        store.user_session_ids("t", "ada").await.unwrap(),
        ["c", "a"]
    );
    assert!(
        store
            .user_session_ids("t", "nobody")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.sessions_inactive_before("t", cutoff).await.unwrap(),
        ["b", "c"]
    );
    assert!(
        store
            .sessions_inactive_before("u", Timestamp::from_micros(0))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .sessions_inactive_before("t", Timestamp::from_micros(u64::MAX))
            .await
            .unwrap()
            .len(),
        3
    );
}
