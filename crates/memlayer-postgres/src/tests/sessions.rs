use std::collections::BTreeSet;
use std::sync::Arc;

use memlayer_store::{
    Access, Append, Message, Metadata, NewMessage, Role, SessionState, StoreError, Timestamp,
};

use super::{creating, fresh_store, owner, say, store_error, until_one_waits_on_a_lock};
use crate::test_cluster;
use crate::{PgStore, PostgresError};

const TENANT: &str = "t";

fn tenant() -> Access {
    Access::tenant_wide(TENANT)
}

async fn contents(store: &PgStore, session_id: &str) -> Vec<String> {
    all_messages(store, session_id)
        .await
        .into_iter()
        .map(|m| m.content)
        .collect()
}

async fn all_messages(store: &PgStore, session_id: &str) -> Vec<Message> {
    store
        .messages(&tenant(), session_id, 0, usize::MAX)
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn sessions_are_created_read_and_refused_as_on_redb() {
    let store = fresh_store().await;
    let mut new = owner("alice");
    new.flow_id = Some("flow".into());
    new.metadata.insert("topic".into(), "tea".into());
    let created = store
        .create_session(&tenant(), Some("s1"), new.clone())
        .await
        .unwrap();
    assert_eq!(
        (
            created.id.as_str(),
            created.user_id.as_str(),
            created.flow_id.as_deref()
        ),
        ("s1", "alice", Some("flow"))
    );
    assert_eq!(
        (created.message_count, created.state),
        (0, SessionState::Active)
    );
    assert_eq!(created.metadata, new.metadata);
    assert_eq!(
        store.session(&tenant(), "s1").await.unwrap(),
        Some(created.clone())
    );

    let generated = store
        .create_session(&tenant(), None, owner("bob"))
        .await
        .unwrap();
    assert!(
        uuid::Uuid::parse_str(&generated.id).is_ok(),
        "{}",
        generated.id
    );

    // An id in use is taken whoever's session holds it.
    let taken = store
        .create_session(&tenant(), Some("s1"), owner("bob"))
        .await;
    assert!(matches!(store_error(taken), StoreError::Conflict(_)));
    // Tenants are separate.
    let other_tenant = Access::tenant_wide("t2");
    store
        .create_session(&other_tenant, Some("s1"), owner("bob"))
        .await
        .unwrap();
    assert_eq!(store.session(&tenant(), "s1").await.unwrap(), Some(created));

    let alice = Access::one_user(TENANT, "alice");
    let bob = Access::one_user(TENANT, "bob");
    assert!(store.session(&alice, "s1").await.unwrap().is_some());
    assert_eq!(store.session(&bob, "s1").await.unwrap(), None);
    let for_another = store.create_session(&bob, Some("s9"), owner("alice")).await;
    assert!(matches!(
        store_error(for_another),
        StoreError::InvalidInput {
            field: "user_id",
            ..
        }
    ));
    let bad_id = store
        .create_session(&tenant(), Some("a/b"), owner("alice"))
        .await;
    assert!(matches!(
        store_error(bad_id),
        StoreError::InvalidId {
            kind: "session_id",
            ..
        }
    ));
    let bad_tenant = store.session(&Access::tenant_wide(""), "s1").await;
    assert!(matches!(
        store_error(bad_tenant),
        StoreError::InvalidId { kind: "tenant", .. }
    ));
    assert_eq!(store.session(&tenant(), "missing").await.unwrap(), None);
}

#[tokio::test]
async fn appends_create_on_first_use_and_read_back_every_field() {
    let store = fresh_store().await;
    let missing = store.append(&tenant(), "s", say("hello")).await;
    assert!(matches!(
        store_error(missing),
        StoreError::SessionNotFound { .. }
    ));

    let mut metadata = Metadata::new();
    metadata.insert("cites".into(), serde_json::json!([1, 2]));
    let first = store
        .append(
            &tenant(),
            "s",
            Append {
                messages: vec![
                    NewMessage::new(Role::System, "rules", 3),
                    NewMessage {
                        timestamp: Some(Timestamp::from_micros(42)),
                        metadata: metadata.clone(),
                        ..NewMessage::new(Role::User, "héllo ✓", 7)
                    },
                ],
                ..creating("", "alice")
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (first.indices(), first.created_session, first.replayed),
        (0..2, true, false)
    );
    let session = store.session(&tenant(), "s").await.unwrap().unwrap();
    assert_eq!(
        (session.message_count, session.state),
        (2, SessionState::IncompleteTurn)
    );

    // A creating append to an existing session of the same owner just appends.
    let second = store
        .append(
            &tenant(),
            "s",
            Append {
                messages: vec![NewMessage::new(Role::Assistant, "", 0)],
                ..creating("", "alice")
            },
        )
        .await
        .unwrap();
    assert_eq!((second.indices(), second.created_session), (2..3, false));
    let session = store.session(&tenant(), "s").await.unwrap().unwrap();
    assert_eq!(
        (session.message_count, session.state),
        (3, SessionState::Active)
    );
    assert!(session.updated_at >= session.created_at);

    let messages = all_messages(&store, "s").await;
    assert_eq!(messages.len(), 3);
    assert_eq!(
        (
            messages[0].index,
            messages[0].role,
            messages[0].content.as_str(),
            messages[0].token_count
        ),
        (0, Role::System, "rules", 3)
    );
    assert_eq!(
        (
            messages[1].index,
            messages[1].role,
            messages[1].content.as_str()
        ),
        (1, Role::User, "héllo ✓")
    );
    assert_eq!(messages[1].timestamp, Timestamp::from_micros(42));
    assert_eq!(messages[1].metadata, metadata);
    assert_eq!(
        (messages[2].role, messages[2].content.as_str()),
        (Role::Assistant, "")
    );

    // Pages: from an index, at most a limit, with the session's count as the total.
    let page = store.messages(&tenant(), "s", 1, 1).await.unwrap();
    assert_eq!(page.total, 3);
    assert_eq!(page.items, messages[1..2]);
    let past = store.messages(&tenant(), "s", 10, 5).await.unwrap();
    assert_eq!((past.items.len(), past.total), (0, 3));
    let none = store.messages(&tenant(), "nope", 0, 5).await;
    assert!(matches!(
        store_error(none),
        StoreError::SessionNotFound { .. }
    ));
}

#[tokio::test]
async fn appends_are_refused_as_on_redb_and_leave_nothing() {
    let store = fresh_store().await;
    store
        .append(&tenant(), "s", creating("mine", "alice"))
        .await
        .unwrap();

    // Another owner naming the session when creating: the id is taken.
    let foreign = store.append(&tenant(), "s", creating("x", "bob")).await;
    assert!(matches!(store_error(foreign), StoreError::Conflict(_)));
    let other_agent = Append {
        create: Some(memlayer_store::NewSession {
            agent_id: "other".into(),
            ..owner("alice")
        }),
        ..say("x")
    };
    let other_agent = store.append(&tenant(), "s", other_agent).await;
    assert!(matches!(store_error(other_agent), StoreError::Conflict(_)));
    let nul = store.append(&tenant(), "s", say("a\0b")).await;
    assert!(matches!(
        store_error(nul),
        StoreError::InvalidInput {
            field: "content",
            ..
        }
    ));
    let empty = Append {
        messages: vec![],
        ..say("")
    };
    let empty = store.append(&tenant(), "s", empty).await;
    assert!(matches!(
        store_error(empty),
        StoreError::InvalidInput {
            field: "messages",
            ..
        }
    ));
    let too_many = Append {
        messages: vec![
            NewMessage::new(Role::User, "x", 1);
            memlayer_store::MAX_MESSAGES_PER_APPEND + 1
        ],
        ..say("")
    };
    let too_many = store.append(&tenant(), "s", too_many).await;
    assert!(matches!(
        store_error(too_many),
        StoreError::InvalidInput {
            field: "messages",
            ..
        }
    ));
    let bad_key = Append {
        idempotency_key: Some("a b".into()),
        ..say("x")
    };
    let bad_key = store.append(&tenant(), "s", bad_key).await;
    assert!(matches!(
        store_error(bad_key),
        StoreError::InvalidId {
            kind: "idempotency_key",
            ..
        }
    ));
    assert_eq!(contents(&store, "s").await, ["mine"]);
}

#[tokio::test]
async fn a_user_scoped_caller_finds_no_other_users_session() {
    let store = fresh_store().await;
    store
        .append(&tenant(), "s", creating("alice's", "alice"))
        .await
        .unwrap();
    let alice = Access::one_user(TENANT, "alice");
    let bob = Access::one_user(TENANT, "bob");

    let append = store.append(&bob, "s", say("bob's")).await;
    assert!(matches!(
        store_error(append),
        StoreError::SessionNotFound { .. }
    ));
    let read = store.messages(&bob, "s", 0, 10).await;
    assert!(matches!(
        store_error(read),
        StoreError::SessionNotFound { .. }
    ));
    assert_eq!(store.session(&bob, "s").await.unwrap(), None);
    // Creating under the id is refused as taken, as for any other owner.
    let create = store.append(&bob, "s", creating("bob's", "bob")).await;
    assert!(matches!(store_error(create), StoreError::Conflict(_)));
    // A user-scoped caller creates sessions for its own user only.
    let for_alice = store.append(&bob, "s2", creating("x", "alice")).await;
    assert!(matches!(
        store_error(for_alice),
        StoreError::InvalidInput {
            field: "user_id",
            ..
        }
    ));

    let own = store.append(&alice, "s", say("alice again")).await.unwrap();
    assert_eq!(own.indices(), 1..2);
    assert_eq!(store.messages(&alice, "s", 0, 10).await.unwrap().total, 2);
    assert_eq!(contents(&store, "s").await, ["alice's", "alice again"]);
}

#[tokio::test]
async fn a_retried_append_is_answered_from_its_idempotency_record() {
    let store = fresh_store().await;
    let request = Append {
        idempotency_key: Some("k1".into()),
        ..creating("once", "alice")
    };
    let first = store.append(&tenant(), "s", request.clone()).await.unwrap();
    store.append(&tenant(), "s", say("later")).await.unwrap();
    let retry = store.append(&tenant(), "s", request.clone()).await.unwrap();
    assert!(!first.replayed && retry.replayed);
    assert_eq!(
        (retry.first_index, retry.count, retry.created_session),
        (0, 1, true)
    );
    // A store that never appended to the session (another node) replays it too.
    let other_node = PgStore::open(store.pool().clone()).await.unwrap();
    let retry = other_node
        .append(&tenant(), "s", request.clone())
        .await
        .unwrap();
    assert!(retry.replayed && retry.indices() == (0..1));
    assert_eq!(contents(&store, "s").await, ["once", "later"]);

    let mut different = request;
    different.messages[0].content = "something else".into();
    let reused = store.append(&tenant(), "s", different).await;
    assert!(matches!(store_error(reused), StoreError::Conflict(_)));
    assert_eq!(contents(&store, "s").await, ["once", "later"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_get_dense_unique_indices() {
    const TASKS: usize = 16;
    const APPENDS: usize = 10;
    let db = test_cluster::database().await.unwrap();
    let store = Arc::new(db.store().await.unwrap());
    store
        .create_session(&tenant(), Some("s"), owner("alice"))
        .await
        .unwrap();
    // A second store on its own pool: another node, whose guesses of the next index are
    // always stale.
    let other = Arc::new(db.store().await.unwrap());
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let store = Arc::clone(if task % 2 == 0 { &store } else { &other });
            tokio::spawn(async move {
                let mut assigned = Vec::new();
                for n in 0..APPENDS {
                    // One to three messages, so appends interleave at varying sizes.
                    let messages: Vec<NewMessage> = (0..=n % 3)
                        .map(|part| NewMessage::new(Role::User, format!("{task}/{n}/{part}"), 1))
                        .collect();
                    let append = Append {
                        messages: messages.clone(),
                        create: None,
                        idempotency_key: None,
                    };
                    let appended = store.append(&tenant(), "s", append).await.unwrap();
                    assert_eq!(appended.count as usize, messages.len());
                    for (index, message) in appended.indices().zip(messages) {
                        assigned.push((index, message.content));
                    }
                }
                assigned
            })
        })
        .collect();
    let mut assigned = Vec::new();
    for task in tasks {
        assigned.extend(task.await.unwrap());
    }
    assigned.sort();
    let total: usize = (0..APPENDS).map(|n| n % 3 + 1).sum::<usize>() * TASKS;
    let indices: Vec<u64> = assigned.iter().map(|(index, _)| *index).collect();
    assert_eq!(
        indices,
        (0..total as u64).collect::<Vec<_>>(),
        "dense, no duplicates"
    );
    // Each append's messages are stored at the indices it was told, and read back opened
    // under the key and at the place they were sealed for.
    let stored: Vec<(u64, String)> = all_messages(&store, "s")
        .await
        .into_iter()
        .map(|m| (m.index, m.content))
        .collect();
    assert_eq!(stored, assigned);
    assert_eq!(
        store
            .session(&tenant(), "s")
            .await
            .unwrap()
            .unwrap()
            .message_count,
        total as u64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_retries_under_one_key_store_the_messages_once() {
    let db = test_cluster::database().await.unwrap();
    let store = Arc::new(db.store().await.unwrap());
    let request = Append {
        idempotency_key: Some("k".into()),
        ..creating("exactly once", "alice")
    };
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let store = Arc::clone(&store);
            let request = request.clone();
            tokio::spawn(async move { store.append(&tenant(), "s", request).await.unwrap() })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    assert_eq!(
        outcomes.iter().filter(|a| !a.replayed).count(),
        1,
        "{outcomes:?}"
    );
    let answers: BTreeSet<_> = outcomes
        .iter()
        .map(|a| (a.first_index, a.count, a.created_session))
        .collect();
    assert_eq!(answers, BTreeSet::from([(0, 1, true)]));
    assert_eq!(contents(&store, "s").await, ["exactly once"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creating_appends_create_one_session() {
    let db = test_cluster::database().await.unwrap();
    let store = Arc::new(db.store().await.unwrap());
    let tasks: Vec<_> = (0..8)
        .map(|n| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                store
                    .append(&tenant(), "s", creating(&format!("m{n}"), "alice"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut created = 0;
    for task in tasks {
        created += usize::from(task.await.unwrap().created_session);
    }
    assert_eq!(created, 1);
    let mut stored = contents(&store, "s").await;
    stored.sort();
    assert_eq!(stored, (0..8).map(|n| format!("m{n}")).collect::<Vec<_>>());
    let client = db.connect().await.unwrap();
    let keys: i64 = client
        .query_one("SELECT count(*) FROM data_keys", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(keys, 1, "the losers' keys are not stored");
}

#[tokio::test]
async fn a_ciphertext_moved_to_another_row_is_refused() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    store
        .append(&tenant(), "s", creating("first", "alice"))
        .await
        .unwrap();
    store.append(&tenant(), "s", say("second")).await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .execute(
            "UPDATE messages SET content = (SELECT content FROM messages WHERE idx = 0)
             WHERE idx = 1",
            &[],
        )
        .await
        .unwrap();
    let read = store.messages(&tenant(), "s", 0, 10).await;
    assert!(
        matches!(
            read,
            Err(PostgresError::Corrupted {
                what: "sealed message",
                ..
            })
        ),
        "{read:?}"
    );
}

#[tokio::test]
async fn a_session_deleted_and_created_again_gets_a_new_key() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let other_node = db.store().await.unwrap();
    store
        .append(&tenant(), "s", creating("one", "alice"))
        .await
        .unwrap();
    let client = db.connect().await.unwrap();
    let key_of_s = || async {
        client
            .query_one("SELECT key_id FROM sessions WHERE session_id = 's'", &[])
            .await
            .unwrap()
            .get::<_, uuid::Uuid>(0)
    };
    let first_key = key_of_s().await;
    // Erased through another node: the session and its key go.
    let tenant_wide = tenant();
    let erase = || other_node.delete_session(&tenant_wide, "s");
    erase().await.unwrap();

    // `store` still remembers the destroyed key; its creating append must not reuse it.
    let again = store
        .append(&tenant(), "s", creating("two", "alice"))
        .await
        .unwrap();
    assert_eq!((again.indices(), again.created_session), (0..1, true));
    let second_key = key_of_s().await;
    assert_ne!(second_key, first_key);
    assert_eq!(contents(&store, "s").await, ["two"]);

    // Another node creates it anew while `store` remembers the second key and next index:
    // the append finds both stale, seals again under the new key, and reads back.
    erase().await.unwrap();
    other_node
        .append(&tenant(), "s", creating("three", "alice"))
        .await
        .unwrap();
    let appended = store.append(&tenant(), "s", say("four")).await.unwrap();
    assert_eq!(appended.indices(), 1..2);
    assert_ne!(key_of_s().await, second_key);
    assert_eq!(contents(&store, "s").await, ["three", "four"]);

    // And a session erased for good is not found, whatever the store remembers.
    erase().await.unwrap();
    let gone = store.append(&tenant(), "s", say("five")).await;
    assert!(matches!(
        store_error(gone),
        StoreError::SessionNotFound { .. }
    ));
}

#[tokio::test]
async fn an_append_to_a_session_the_store_knows_is_one_statement() {
    let db = test_cluster::database().await.unwrap();
    let client = db.connect().await.unwrap();
    let name = db.config().get_dbname().unwrap().to_owned();
    // Count calls of memlayer_append on every connection the stores open from here on.
    client
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET track_functions = 'all'"
        ))
        .await
        .unwrap();
    let store = db.store().await.unwrap();
    store
        .append(&tenant(), "s", creating("0", "alice"))
        .await
        .unwrap();
    for n in 1..10 {
        store
            .append(&tenant(), "s", say(&n.to_string()))
            .await
            .unwrap();
    }
    // A store that never appended to the session learns its key and index first.
    let other_node = db.store().await.unwrap();
    other_node.append(&tenant(), "s", say("10")).await.unwrap();
    // Closing the connections ends their server processes, which report their counts.
    drop((store, other_node));

    let expected = 10 + 2;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let calls = loop {
        let calls: i64 = client
            .query_one(
                "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_user_functions
                 WHERE funcname = 'memlayer_append'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if calls >= expected || std::time::Instant::now() > deadline {
            break calls;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(calls, expected);
    assert_eq!(contents(&db.store().await.unwrap(), "s").await.len(), 11);
}

#[tokio::test]
async fn a_session_stops_at_the_most_messages_one_can_hold() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    store
        .append(&tenant(), "s", creating("first", "alice"))
        .await
        .unwrap();
    // Filling 2^24 messages would take minutes; the count is what the check reads.
    let almost_full = memlayer_store::MAX_MESSAGES_PER_SESSION as i64 - 1;
    db.connect()
        .await
        .unwrap()
        .execute("UPDATE sessions SET message_count = $1", &[&almost_full])
        .await
        .unwrap();
    let two = Append {
        messages: vec![NewMessage::new(Role::User, "x", 1); 2],
        ..say("")
    };
    let full = store.append(&tenant(), "s", two).await;
    assert!(matches!(
        store_error(full),
        StoreError::InvalidInput {
            field: "messages",
            ..
        }
    ));
    let last = store.append(&tenant(), "s", say("last")).await.unwrap();
    assert_eq!(last.first_index, almost_full as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_recorded_while_an_append_ran_undoes_the_append() {
    let db = test_cluster::database().await.unwrap();
    let store = Arc::new(db.store().await.unwrap());
    store
        .create_session(&tenant(), Some("s"), owner("alice"))
        .await
        .unwrap();
    // Another append under key "k", still uncommitted when this one checks for the key, then
    // committing while this one waits to record it.
    let mut other = db.connect().await.unwrap();
    let racing = other.transaction().await.unwrap();
    racing
        .execute(
            "INSERT INTO idempotency VALUES ('t', 's', 'k', '\\x00', 0, 1, false)",
            &[],
        )
        .await
        .unwrap();
    let append = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let keyed = Append {
                idempotency_key: Some("k".into()),
                ..say("mine")
            };
            store.append(&tenant(), "s", keyed).await
        })
    };
    let watcher = db.connect().await.unwrap();
    until_one_waits_on_a_lock(&watcher, "the append").await;
    racing.commit().await.unwrap();
    // Undone and retried, the append finds the key used for another request.
    let outcome = append.await.unwrap();
    assert!(matches!(store_error(outcome), StoreError::Conflict(_)));
    let session = store.session(&tenant(), "s").await.unwrap().unwrap();
    assert_eq!(
        session.message_count, 0,
        "nothing of the undone append is left"
    );
    assert_eq!(contents(&store, "s").await, Vec::<String>::new());
}

/// A call that finds every connection of the pool taken waits [`crate::store::POOL_WAIT`] at
/// most, then fails as a storage failure (`503`, retried by clients), instead of holding its
/// request for as long as the pool stays starved.
#[tokio::test]
async fn a_starved_pool_fails_a_call_after_its_wait_instead_of_holding_it() {
    let db = test_cluster::database().await.unwrap();
    let store = PgStore::connect_config(db.config().clone(), 1)
        .await
        .unwrap();
    let taken = store.connection().await.unwrap();
    let started = std::time::Instant::now();
    let starved = tokio::time::timeout(crate::store::POOL_WAIT * 3, store.session(&tenant(), "s"))
        .await
        .expect("the call still waits for a connection");
    let waited = started.elapsed();
    let err = StoreError::from(starved.expect_err("no connection was free"));
    assert!(matches!(err, StoreError::Backend { .. }), "{err:?}");
    assert!(waited >= crate::store::POOL_WAIT, "waited {waited:?}");
    drop(taken);
    assert_eq!(store.session(&tenant(), "s").await.unwrap(), None);
}

/// A store's connections ask the server to end a transaction left idle for a minute (a node
/// frozen inside one would otherwise hold back every node's reclaims), unless the URL's
/// `options` set the timeout themselves: then theirs holds, and the server ends a transaction
/// idle for longer.
#[tokio::test]
async fn connections_end_a_transaction_left_idle_unless_the_url_says_otherwise() {
    let db = test_cluster::database().await.unwrap();
    let store = PgStore::connect_config(db.config().clone(), 1)
        .await
        .unwrap();
    let connection = store.connection().await.unwrap();
    assert_eq!(idle_transaction_timeout(&connection).await, "1min");
    drop(connection);

    let mut config = db.config().clone();
    config.options("-c idle_in_transaction_session_timeout=1s");
    let store = PgStore::connect_config(config, 1).await.unwrap();
    let mut connection = store.connection().await.unwrap();
    assert_eq!(idle_transaction_timeout(&connection).await, "1s");
    let transaction = connection.transaction().await.unwrap();
    transaction.execute("SELECT 1", &[]).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    assert!(
        transaction.execute("SELECT 1", &[]).await.is_err(),
        "the server ended the idle transaction"
    );
}

/// The connection's `idle_in_transaction_session_timeout`, as the server shows it.
async fn idle_transaction_timeout(connection: &tokio_postgres::Client) -> String {
    connection
        .query_one("SHOW idle_in_transaction_session_timeout", &[])
        .await
        .unwrap()
        .get(0)
}
