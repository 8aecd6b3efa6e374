//! Erasing one message moves its session to a new key (`rekey.rs`): what remains opens under
//! the new key, the old key leaves every file at the next reclaim, and writers that raced the
//! re-key sealed under the new key.

use std::sync::Arc;

use memlayer_store::{
    Append, EmbeddingModel, MessageKey, NewMessage, NewRun, Role, RunStatus, StoreError,
};

use super::erasure::{key_of, tenant, with_run_and_summary};
use super::files::{data_directory, found_in_files};
use super::{creating, say, store_error, until_waiting_on_locks};
use crate::test_cluster;

async fn texts(store: &crate::PgStore, session_id: &str) -> Vec<(u64, String)> {
    store
        .messages(&tenant(), session_id, 0, 100)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|m| (m.index, m.content))
        .collect()
}

#[tokio::test]
async fn erasing_a_message_reseals_the_rest_and_a_reclaim_removes_the_old_key_from_every_file() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let canaries = with_run_and_summary(&store, "s").await;
    for text in ["erased", "kept"] {
        store.append(&tenant(), "s", say(text)).await.unwrap();
    }
    let old_key = key_of(&db, "s").await;

    let erased = store.erase_message(&tenant(), "s", 1).await.unwrap();
    assert!(
        erased.message && !erased.summary,
        "the summary covers message 0 only"
    );
    assert_eq!(erased.runs_redacted, 1);
    let new_key = key_of(&db, "s").await;
    assert_ne!(new_key, old_key);

    // Everything that remains opens under the new key.
    assert_eq!(
        texts(&store, "s").await,
        [(0, "secret".to_owned()), (2, "kept".to_owned())]
    );
    let session = store.session(&tenant(), "s").await.unwrap().unwrap();
    assert_eq!(session.metadata["note"], canaries[0].as_str());
    let summary = store.summary(&tenant(), "s").await.unwrap().unwrap();
    assert_eq!(summary.text, canaries[2]);
    let runs = store.runs(&tenant(), "s", 0, 10).await.unwrap();
    assert!(runs[0].redacted && runs[0].content.is_none());

    let client = db.connect().await.unwrap();
    let dir = data_directory(&client).await;
    assert_eq!(
        found_in_files(&dir, &[&old_key, &new_key]),
        [true, true],
        "the control: until a reclaim the old key's bytes are still in the files"
    );
    assert_eq!(store.reclaim_destroyed_keys().await.unwrap().keys, 1);
    let dir = data_directory(&client).await;
    assert_eq!(found_in_files(&dir, &[&old_key, &new_key]), [false, true]);

    // Erasing it again finds nothing, and keeps the key.
    let again = store.erase_message(&tenant(), "s", 1).await.unwrap();
    assert!(!again.message && again.runs_redacted == 0);
    assert_eq!(key_of(&db, "s").await, new_key);
}

/// A re-key holds the session's row while it re-seals; writers queued behind it must read
/// the new key, not the one their statement's snapshot had.
#[tokio::test]
async fn writers_queued_behind_a_rekey_seal_under_the_new_key() {
    let db = test_cluster::database().await.unwrap();
    let store = Arc::new(db.store().await.unwrap());
    store
        .append(&tenant(), "s", creating("erased", "alice"))
        .await
        .unwrap();
    store.append(&tenant(), "s", say("kept")).await.unwrap();
    let sid = store.session_key(&tenant(), "s").await.unwrap().unwrap();
    let read = store.version(&tenant(), "s").await.unwrap().unwrap();

    let mut holder = db.connect().await.unwrap();
    let hold = holder.transaction().await.unwrap();
    hold.execute(
        "SELECT 1 FROM sessions WHERE session_id = 's' FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let watcher = db.connect().await.unwrap();
    let erase = tokio::spawn({
        let store = store.clone();
        async move { store.erase_message(&tenant(), "s", 0).await }
    });
    until_waiting_on_locks(&watcher, 1, "the erasure").await;
    let run = tokio::spawn({
        let store = store.clone();
        async move {
            let run = NewRun {
                run_id: Some("after".into()),
                status: RunStatus::Completed,
                content: Some("recorded after the erasure".into()),
                tool_calls: vec![],
                error: None,
                metadata: Default::default(),
            };
            store.record_run(&tenant(), "s", run).await
        }
    });
    until_waiting_on_locks(&watcher, 2, "the run").await;
    let summary = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .save_summary(&tenant(), "s", read, "read before".into(), 0, 1)
                .await
        }
    });
    until_waiting_on_locks(&watcher, 3, "the summary").await;
    let model = EmbeddingModel {
        name: "test".into(),
        sha256: "00".into(),
        dimension: 2,
    };
    let vector = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .store_embeddings(
                    model,
                    vec![],
                    vec![(MessageKey::new(sid, 1), vec![0.5, 1.0])],
                )
                .await
        }
    });
    until_waiting_on_locks(&watcher, 4, "the vector").await;
    hold.rollback().await.unwrap();

    assert!(erase.await.unwrap().unwrap().message);
    run.await.unwrap().unwrap();
    assert!(matches!(
        store_error(summary.await.unwrap()),
        StoreError::SessionChanged { .. }
    ));
    vector.await.unwrap().unwrap();

    let runs = store.runs(&tenant(), "s", 0, 10).await.unwrap();
    assert_eq!(
        runs[0].content.as_deref(),
        Some("recorded after the erasure")
    );
    let vectors = store.vectors(None, 10).await.unwrap();
    assert_eq!(vectors.len(), 1);
    assert_eq!(vectors[0].components, [0.5, 1.0]);
    assert_eq!(texts(&store, "s").await, [(1, "kept".to_owned())]);
}

/// Another node's store keeps the old key as its guess; its next append is refused by the
/// statement and sealed again under the new key.
#[tokio::test]
async fn an_append_by_a_store_that_knew_the_old_key_is_sealed_under_the_new_one() {
    let db = test_cluster::database().await.unwrap();
    let (node_a, node_b) = (db.store().await.unwrap(), db.store().await.unwrap());
    node_a
        .append(&tenant(), "s", creating("erased", "alice"))
        .await
        .unwrap();
    node_b.erase_message(&tenant(), "s", 0).await.unwrap();
    let appended = node_a.append(&tenant(), "s", say("after")).await.unwrap();
    assert_eq!(appended.first_index, 1);
    assert_eq!(texts(&node_b, "s").await, [(1, "after".to_owned())]);
}

/// The stored digest is keyed with the session's key (never the request's plain digest), and
/// the re-key erases every digest of the session: a replay answers the first result whatever
/// its body.
#[tokio::test]
async fn idempotency_digests_are_keyed_and_a_rekey_erases_them() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let keyed = |text: &str, key: &str| Append {
        messages: vec![NewMessage::new(Role::User, text, 1)],
        create: Some(super::owner("alice")),
        idempotency_key: Some(key.into()),
    };
    let first = keyed("erased", "k1");
    store.append(&tenant(), "s", first.clone()).await.unwrap();
    store
        .append(&tenant(), "s", keyed("kept", "k2"))
        .await
        .unwrap();
    let client = db.connect().await.unwrap();
    let digests = || async {
        client
            .query(
                "SELECT digest FROM idempotency WHERE session_id = 's' ORDER BY key",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get::<_, Option<Vec<u8>>>(0))
            .collect::<Vec<_>>()
    };
    let stored = digests().await;
    let plain = first.request_digest();
    assert!(stored.iter().all(|d| {
        d.as_ref()
            .is_some_and(|d| d.len() == 32 && !d.windows(plain.len()).any(|w| w == plain))
    }));
    // A different body under a used key is still told apart before any erasure.
    assert!(matches!(
        store_error(store.append(&tenant(), "s", keyed("other", "k2")).await),
        StoreError::Conflict(_)
    ));

    store.erase_message(&tenant(), "s", 0).await.unwrap();
    assert_eq!(digests().await, [None, None]);
    for key in ["k1", "k2"] {
        let replayed = store
            .append(&tenant(), "s", keyed("a guess", key))
            .await
            .unwrap();
        assert!(replayed.replayed);
    }
}
