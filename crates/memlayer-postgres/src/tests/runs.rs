use memlayer_store::{Access, NewRun, RunStatus, StoreError};

use super::{creating, fresh_store, say, store_error};

fn tenant() -> Access {
    Access::tenant_wide("t")
}

fn run(run_id: Option<&str>) -> NewRun {
    let mut metadata = memlayer_store::Metadata::new();
    metadata.insert("model".into(), "m1".into());
    NewRun {
        run_id: run_id.map(str::to_owned),
        status: RunStatus::Completed,
        content: Some("answer ✓".into()),
        tool_calls: vec![serde_json::json!({"name": "search", "args": [1]})],
        error: None,
        metadata,
    }
}

#[tokio::test]
async fn runs_are_recorded_in_order_and_paged_as_on_redb() {
    let store = fresh_store().await;
    store
        .append(&tenant(), "s", creating("hi", "alice"))
        .await
        .unwrap();
    let before = store.session(&tenant(), "s").await.unwrap().unwrap();
    let first = store
        .record_run(&tenant(), "s", run(Some("r1")))
        .await
        .unwrap();
    assert_eq!(first.run_id, "r1");
    assert!(!first.redacted);
    let failed = NewRun {
        status: RunStatus::Failed,
        content: None,
        error: Some("timeout".into()),
        tool_calls: vec![],
        ..run(None)
    };
    let generated = store.record_run(&tenant(), "s", failed).await.unwrap();
    assert!(uuid::Uuid::parse_str(&generated.run_id).is_ok());
    store
        .record_run(&tenant(), "s", run(Some("r3")))
        .await
        .unwrap();

    let all = store.runs(&tenant(), "s", 0, 10).await.unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(all[0], first, "every field reads back");
    assert_eq!(all[1], generated);
    assert_eq!(
        (
            all[1].status,
            all[1].content.as_deref(),
            all[1].error.as_deref()
        ),
        (RunStatus::Failed, None, Some("timeout"))
    );
    let ids = |runs: Vec<memlayer_store::Run>| -> Vec<String> {
        runs.into_iter().map(|r| r.run_id).collect()
    };
    assert_eq!(
        ids(store.runs(&tenant(), "s", 1, 1).await.unwrap()),
        [generated.run_id.as_str()]
    );
    assert_eq!(
        ids(store.runs(&tenant(), "s", 2, 10).await.unwrap()),
        ["r3"]
    );
    assert!(store.runs(&tenant(), "s", 3, 10).await.unwrap().is_empty());
    assert!(
        store
            .runs(&tenant(), "s", u64::MAX, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.runs(&tenant(), "s", 0, 0).await.unwrap().is_empty());

    let after = store.session(&tenant(), "s").await.unwrap().unwrap();
    assert_eq!(after.run_count, 3);
    assert!(after.updated_at >= before.updated_at, "a run is activity");
}

#[tokio::test]
async fn runs_are_refused_as_on_redb() {
    let store = fresh_store().await;
    store
        .append(&tenant(), "s", creating("hi", "alice"))
        .await
        .unwrap();
    store
        .record_run(&tenant(), "s", run(Some("r1")))
        .await
        .unwrap();
    let again = store.record_run(&tenant(), "s", run(Some("r1"))).await;
    let again = store_error(again);
    assert!(matches!(again, StoreError::Conflict(_)), "{again:?}");
    assert_eq!(
        again.to_string(),
        StoreError::run_id_taken("r1", "s").to_string(),
        "a run id is unique in its session"
    );
    let bad_id = store.record_run(&tenant(), "s", run(Some("r 1"))).await;
    assert!(matches!(
        store_error(bad_id),
        StoreError::InvalidId { kind: "run_id", .. }
    ));
    let nul = NewRun {
        content: Some("a\0b".into()),
        ..run(None)
    };
    assert!(matches!(
        store_error(store.record_run(&tenant(), "s", nul).await),
        StoreError::InvalidInput {
            field: "content",
            ..
        }
    ));
    assert!(matches!(
        store_error(store.record_run(&tenant(), "bad id", run(None)).await),
        StoreError::InvalidId {
            kind: "session_id",
            ..
        }
    ));
    for session in ["nope", "s"] {
        let bob = Access::one_user("t", "bob");
        assert!(matches!(
            store_error(store.record_run(&bob, session, run(None)).await),
            StoreError::SessionNotFound { .. }
        ));
        assert!(matches!(
            store_error(store.runs(&bob, session, 0, 10).await),
            StoreError::SessionNotFound { .. }
        ));
    }
    // The same id in another session is another run.
    store
        .append(&tenant(), "s2", creating("hi", "alice"))
        .await
        .unwrap();
    store
        .record_run(&tenant(), "s2", run(Some("r1")))
        .await
        .unwrap();
    let alice = Access::one_user("t", "alice");
    assert_eq!(store.runs(&alice, "s", 0, 10).await.unwrap().len(), 1);
    let session = store.session(&tenant(), "s").await.unwrap().unwrap();
    assert_eq!(session.run_count, 1, "refused runs count nothing");
}

#[tokio::test]
async fn a_deleted_sessions_runs_go_with_it() {
    let store = fresh_store().await;
    store
        .append(&tenant(), "s", creating("old", "alice"))
        .await
        .unwrap();
    store
        .record_run(&tenant(), "s", run(Some("r1")))
        .await
        .unwrap();
    store.delete_session(&tenant(), "s").await.unwrap();
    store
        .append(&tenant(), "s", creating("new", "alice"))
        .await
        .unwrap();
    assert!(store.runs(&tenant(), "s", 0, 10).await.unwrap().is_empty());
    store
        .record_run(&tenant(), "s", run(Some("r1")))
        .await
        .unwrap();
    store.append(&tenant(), "s", say("more")).await.unwrap();
    assert_eq!(store.runs(&tenant(), "s", 0, 10).await.unwrap().len(), 1);
}
