use std::path::PathBuf;
use std::time::Duration;

use memlayer_store::{Access, Append, NewRun, RunStatus, StoreError};

use super::files::{data_directory, files_with, found_in_files};
use super::{creating, owner, say, store_error};
use crate::seal::{DataKey, Field, Place};
use crate::test_cluster::{self, TestDatabase};
use crate::{PgStore, PostgresError, Reclaimed};

pub(super) fn tenant() -> Access {
    Access::tenant_wide("t")
}

/// A new session `session_id` with one message, and its data key's bytes as stored.
async fn session_with_key(db: &TestDatabase, store: &PgStore, session_id: &str) -> Vec<u8> {
    store
        .append(&tenant(), session_id, creating("secret", "alice"))
        .await
        .unwrap();
    key_of(db, session_id).await
}

/// The bytes of session `session_id`'s data key as stored.
pub(super) async fn key_of(db: &TestDatabase, session_id: &str) -> Vec<u8> {
    db.connect()
        .await
        .unwrap()
        .query_one(
            "SELECT k.key FROM sessions s
             JOIN data_keys k ON k.tenant = s.tenant AND k.key_id = s.key_id
             WHERE s.session_id = $1",
            &[&session_id],
        )
        .await
        .unwrap()
        .get(0)
}

/// Gives session `session_id` metadata, a run and a summary, each holding a canary text, and
/// answers the canaries.
pub(super) async fn with_run_and_summary(store: &PgStore, session_id: &str) -> [String; 3] {
    let canary = |what: &str| format!("{what}-canary-{}", uuid::Uuid::new_v4().simple());
    let canaries = [canary("session"), canary("run"), canary("summary")];
    let tenant = tenant();
    let mut new = owner("alice");
    new.metadata
        .insert("note".into(), canaries[0].clone().into());
    store
        .append(
            &tenant,
            session_id,
            Append {
                create: Some(new),
                ..say("secret")
            },
        )
        .await
        .unwrap();
    let run = NewRun {
        run_id: Some("r1".into()),
        status: RunStatus::Completed,
        content: Some(canaries[1].clone()),
        tool_calls: vec![],
        error: None,
        metadata: Default::default(),
    };
    store.record_run(&tenant, session_id, run).await.unwrap();
    let read = store.version(&tenant, session_id).await.unwrap().unwrap();
    store
        .save_summary(&tenant, session_id, read, canaries[2].clone(), 0, 0)
        .await
        .unwrap();
    canaries
}

/// The session's sealed metadata, run content and summary as stored, each opened with the
/// key whose bytes are `key`: what an attacker holding those bytes reads.
async fn opened_with(client: &tokio_postgres::Client, session_id: &str, key: &[u8]) -> Vec<String> {
    let row = client
        .query_one(
            "SELECT s.key_id, s.metadata, r.content, m.text, m.last_index
             FROM sessions s
             JOIN runs r ON r.tenant = s.tenant AND r.session_id = s.session_id
             JOIN summaries m ON m.tenant = s.tenant AND m.session_id = s.session_id
             WHERE s.session_id = $1",
            &[&session_id],
        )
        .await
        .unwrap();
    let key = DataKey::from_stored(row.get("key_id"), key).unwrap();
    let last_index: i64 = row.get("last_index");
    [
        (Field::SessionMetadata, 0, "metadata"),
        (Field::RunContent, 0, "content"),
        (Field::Summary, last_index as u64, "text"),
    ]
    .into_iter()
    .map(|(field, index, column)| {
        let place = Place {
            tenant: "t",
            session_id,
            index,
            field,
        };
        String::from_utf8(key.open(place, row.get(column)).unwrap()).unwrap()
    })
    .collect()
}

#[tokio::test]
async fn after_a_reclaim_a_deleted_sessions_key_is_in_no_file_of_the_cluster() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let canaries = with_run_and_summary(&store, "erased").await;
    let erased: Vec<u8> = db
        .connect()
        .await
        .unwrap()
        .query_one(
            "SELECT k.key FROM sessions s
             JOIN data_keys k ON k.tenant = s.tenant AND k.key_id = s.key_id
             WHERE s.session_id = 'erased'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let kept = session_with_key(&db, &store, "kept").await;
    let client = db.connect().await.unwrap();
    // The session's metadata, run and summary are sealed under the one key the erasure
    // destroys: whoever has its bytes reads every canary.
    let opened = opened_with(&client, "erased", &erased).await;
    assert!(opened[0].contains(&canaries[0]), "{opened:?}");
    assert_eq!(opened[1..], canaries[1..]);
    // What autovacuum does to a busy table: statistics of two keys would hold both as the
    // column's histogram, in `pg_statistic`, which no reclaim rewrites.
    client.batch_execute("ANALYZE data_keys").await.unwrap();
    let dir = data_directory(&client).await;
    assert_eq!(
        found_in_files(&dir, &[&erased, &kept]),
        [true, true],
        "the control: the scan sees stored keys"
    );

    store.delete_session(&tenant(), "erased").await.unwrap();
    for table in ["runs", "summaries"] {
        let left: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE session_id = 'erased'"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "{table} go with their session");
    }
    let reclaimed = store.reclaim_destroyed_keys().await.unwrap();
    assert_eq!(reclaimed.keys, 1);
    assert_eq!(reclaimed.partitions.len(), 1);
    let dir = data_directory(&client).await;
    let [erased_in, kept_in] = &files_with(&dir, &[&erased, &kept])[..] else {
        unreachable!("one list per needle");
    };
    assert_eq!(erased_in, &Vec::<PathBuf>::new(), "the destroyed key");
    assert!(
        !kept_in.is_empty(),
        "the control: the live key is still found"
    );
    assert_eq!(
        store.reclaim_destroyed_keys().await.unwrap(),
        Reclaimed::default(),
        "the work was done once"
    );
    assert_eq!(
        store
            .messages(&tenant(), "kept", 0, 10)
            .await
            .unwrap()
            .items[0]
            .content,
        "secret",
        "the rewrite kept the live keys"
    );
}

#[tokio::test]
async fn without_a_reclaim_a_deleted_sessions_key_stays_in_the_files_until_a_later_one() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let erased = session_with_key(&db, &store, "erased").await;
    store.delete_session(&tenant(), "erased").await.unwrap();
    let client = db.connect().await.unwrap();
    let dir = data_directory(&client).await;
    assert_eq!(found_in_files(&dir, &[&erased]), [true]);
    let pending: i64 = client
        .query_one("SELECT count(*) FROM destroyed_keys", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        pending, 1,
        "the reclaim's work is recorded with the deletion"
    );

    // A process started later (after a crash, say) finds the work and does it.
    drop(store);
    let restarted = db.store().await.unwrap();
    assert_eq!(restarted.reclaim_destroyed_keys().await.unwrap().keys, 1);
    let dir = data_directory(&client).await;
    assert_eq!(found_in_files(&dir, &[&erased]), [false]);
}

#[tokio::test]
async fn a_deleted_session_is_gone_and_its_id_gets_a_new_key() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let old_key = session_with_key(&db, &store, "s").await;
    store.append(&tenant(), "s", say("more")).await.unwrap();
    store
        .append(&tenant(), "other", creating("hello", "alice"))
        .await
        .unwrap();

    let sid = store.session_key(&tenant(), "s").await.unwrap();
    let deleted = store.delete_session(&tenant(), "s").await.unwrap();
    assert_eq!(Some(deleted.sid), sid);
    assert_eq!(store.session(&tenant(), "s").await.unwrap(), None);
    for result in [
        store.messages(&tenant(), "s", 0, 10).await.map(drop),
        store.append(&tenant(), "s", say("again")).await.map(drop),
        store.delete_session(&tenant(), "s").await.map(drop),
    ] {
        assert!(matches!(
            store_error(result),
            StoreError::SessionNotFound { .. }
        ));
    }
    let client = db.connect().await.unwrap();
    for table in ["messages", "idempotency", "feed"] {
        let left: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE session_id = 's'"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "{table}");
    }
    // Read from the table: the feed delivers only once every transaction of the cluster
    // older than the change ended, and parallel tests run some.
    let other: i64 = client
        .query_one("SELECT count(*) FROM feed WHERE session_id = 'other'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(other, 1, "other sessions' changes stay");

    // The same store, which remembered the old key: the new session must not get it.
    let new_key = session_with_key(&db, &store, "s").await;
    assert_ne!(new_key, old_key);
    let page = store.messages(&tenant(), "s", 0, 10).await.unwrap();
    assert_eq!((page.total, page.items[0].content.as_str()), (1, "secret"));
}

#[tokio::test]
async fn another_users_session_is_not_found_and_untouched() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    store
        .append(&tenant(), "s", creating("mine", "alice"))
        .await
        .unwrap();
    let bob = Access::one_user("t", "bob");
    assert!(matches!(
        store_error(store.delete_session(&bob, "s").await),
        StoreError::SessionNotFound { .. }
    ));
    assert!(matches!(
        store_error(store.delete_session(&tenant(), "bad id!").await),
        StoreError::InvalidId { .. }
    ));
    let page = store.messages(&tenant(), "s", 0, 10).await.unwrap();
    assert_eq!(page.items[0].content, "mine");

    let alice = Access::one_user("t", "alice");
    store.delete_session(&alice, "s").await.unwrap();
    assert_eq!(store.session(&tenant(), "s").await.unwrap(), None);
    // The owner record is what `owner` makes: the id is free for anyone again.
    store
        .create_session(&tenant(), Some("s"), owner("bob"))
        .await
        .unwrap();
}

/// The privileges `PgStore::reclaim_destroyed_keys` documents suffice, and it sees the
/// snapshots of other roles' transactions: a reclaim that missed one would copy the key it
/// can see into the rewritten partition.
#[tokio::test]
async fn a_reclaim_with_the_documented_privileges_waits_for_other_roles_snapshots() {
    let db = test_cluster::database().await.unwrap();
    let admin = db.connect().await.unwrap();
    let role = format!("eraser_{}", uuid::Uuid::new_v4().simple());
    let database = db.config().get_dbname().unwrap();
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN IN ROLE pg_checkpoint, pg_monitor;
             GRANT EXECUTE ON FUNCTION pg_switch_wal() TO {role};
             ALTER DATABASE {database} OWNER TO {role};
             ALTER SCHEMA public OWNER TO {role};"
        ))
        .await
        .unwrap();
    let mut config = db.config().clone();
    config.user(&role);
    // Migrates as the role, which so owns the partitions.
    let store = PgStore::connect_config(config, 2).await.unwrap();
    store
        .append(&tenant(), "s", creating("hello", "alice"))
        .await
        .unwrap();
    let mut reader = db.connect().await.unwrap();
    let snapshot = reader
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    // Takes the snapshot, which can see the key.
    snapshot
        .query("SELECT 1 FROM data_keys", &[])
        .await
        .unwrap();
    store.delete_session(&tenant(), "s").await.unwrap();
    match store.reclaim_destroyed_keys().await {
        // Other tests' transactions may be counted too: ids are cluster-wide.
        Err(PostgresError::ErasureBlocked {
            transactions,
            blockers,
        }) => {
            assert!(transactions >= 1);
            assert!(blockers.contains("idle in transaction"), "{blockers}");
        }
        other => panic!("{other:?}"),
    }
    snapshot.commit().await.unwrap();
    assert_eq!(store.reclaim_destroyed_keys().await.unwrap().keys, 1);
}

/// A reclaim does not queue for a partition of the key table behind a transaction holding
/// it: everything after would queue behind the reclaim, and a write waiting there holds a
/// transaction id that holds back every other reclaim on the cluster. It tries for the lock
/// a little at a time, refuses naming the holder, and succeeds once the holder ended.
#[tokio::test]
async fn a_reclaim_gives_way_to_a_transaction_holding_the_key_table() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    store
        .append(&tenant(), "s", creating("hello", "alice"))
        .await
        .unwrap();
    store.delete_session(&tenant(), "s").await.unwrap();
    // After the deletion, so no older transaction holds the reclaim back: only the lock.
    let mut reader = db.connect().await.unwrap();
    let holder = reader.transaction().await.unwrap();
    holder
        .query("SELECT 1 FROM data_keys LIMIT 1", &[])
        .await
        .unwrap();

    let (reclaimed, appended) = tokio::join!(
        tokio::time::timeout(Duration::from_secs(30), store.reclaim_destroyed_keys()),
        async {
            // Behind a reclaim waiting for the lock, this append would wait as long.
            tokio::time::sleep(Duration::from_millis(100)).await;
            tokio::time::timeout(
                Duration::from_secs(4),
                store.append(&tenant(), "t", creating("meanwhile", "bob")),
            )
            .await
        }
    );
    match reclaimed.expect("the reclaim gave way rather than wait for the holder") {
        Err(PostgresError::KeysInUse { holders, .. }) => {
            assert!(holders.contains("idle in transaction"), "{holders}");
        }
        // Other tests' transactions may hold it back before it gets to the lock: ids are
        // cluster-wide.
        Err(PostgresError::ErasureBlocked { .. }) => {}
        other => panic!("{other:?}"),
    }
    appended
        .expect("the append did not queue behind the reclaim")
        .unwrap();
    holder.commit().await.unwrap();
    assert_eq!(store.reclaim_destroyed_keys().await.unwrap().keys, 1);
}

/// `VACUUM` of a table the role may not rewrite only warns; a reclaim that trusted it would
/// give a receipt for keys still in the partition's file.
#[tokio::test]
async fn a_reclaim_by_a_role_that_may_not_rewrite_the_keys_is_refused() {
    let db = test_cluster::database().await.unwrap();
    let owner_store = db.store().await.unwrap();
    let admin = db.connect().await.unwrap();
    let role = format!("writer_{}", uuid::Uuid::new_v4().simple());
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN IN ROLE pg_checkpoint, pg_monitor;
             GRANT EXECUTE ON FUNCTION pg_switch_wal() TO {role};
             GRANT CREATE ON SCHEMA public TO {role};
             GRANT ALL ON ALL TABLES IN SCHEMA public TO {role};
             GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role};"
        ))
        .await
        .unwrap();
    let mut config = db.config().clone();
    config.user(&role);
    let store = PgStore::connect_config(config, 2).await.unwrap();
    store
        .append(&tenant(), "s", creating("hello", "alice"))
        .await
        .unwrap();
    store.delete_session(&tenant(), "s").await.unwrap();
    match store.reclaim_destroyed_keys().await {
        Err(PostgresError::ErasureNotPermitted { partition }) => {
            assert!(partition.starts_with("data_keys_"), "{partition}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        owner_store.reclaim_destroyed_keys().await.unwrap().keys,
        1,
        "the work stays for a role that may"
    );
}
