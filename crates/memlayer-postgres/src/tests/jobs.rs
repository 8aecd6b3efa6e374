//! The erasure jobs' journal and the session listings erasure jobs start from.

use std::time::Duration;

use memlayer_store::{Access, StoreError, Timestamp};
use serde_json::json;

use super::{fresh_store, owner, say, store_error};

/// Beyond the eraser's conformance case (`jobs_end_with_one_receipt`): what only this
/// journal's rows show, and its refusals.
#[tokio::test]
async fn a_finished_jobs_document_is_gone_and_unknown_jobs_are_refused() {
    let store = fresh_store().await;
    let first = store.record_job(json!({"erase": "first"})).await.unwrap();
    let second = store.record_job(json!({"erase": "second"})).await.unwrap();
    assert!(first < 1 << 53 && second < 1 << 53);
    for id in [first, second] {
        store
            .finish_job(id, "t", json!({"receipt": id}))
            .await
            .unwrap();
    }

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

/// Nodes sharing the database run a job once: while one holds a live lease nobody else
/// may claim the job; once the lease ran out (its holder died) another node takes it, and
/// then the first may not take it back.
#[tokio::test]
async fn a_jobs_lease_keeps_other_nodes_off_until_it_runs_out() {
    let store = fresh_store().await;
    let job = store.record_job(json!({"erase": "purge"})).await.unwrap();
    let short = Duration::from_millis(300);
    assert!(store.claim_job(job, "node-a", short).await.unwrap());
    assert!(!store.claim_job(job, "node-b", short).await.unwrap());
    assert!(
        store.claim_job(job, "node-a", short).await.unwrap(),
        "renewed"
    );
    tokio::time::sleep(short * 2).await;
    assert!(
        store
            .claim_job(job, "node-b", Duration::from_secs(60))
            .await
            .unwrap()
    );
    assert!(!store.claim_job(job, "node-a", short).await.unwrap());
    // Never recorded: nobody's.
    assert!(!store.claim_job(job ^ 1, "node-a", short).await.unwrap());
    assert!(
        store
            .finish_job(job, "t", json!({"receipt": 1}))
            .await
            .unwrap()
    );
    assert!(!store.claim_job(job, "node-b", short).await.unwrap());
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
