//! Behaviour of the store through its public API, on real redb files in temporary directories.

use std::collections::BTreeMap;

use proptest::prelude::*;
use tempfile::TempDir;

use crate::{
    Append, NewMessage, NewRun, NewSession, Role, RunStatus, SessionFilter, SessionState, Store,
    StoreError,
};

const TENANT: &str = "default";

fn open() -> (TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
    (dir, store)
}

fn owner(user: &str, agent: &str) -> NewSession {
    NewSession {
        user_id: user.into(),
        agent_id: agent.into(),
        ..NewSession::default()
    }
}

fn message(role: Role, content: &str) -> NewMessage {
    NewMessage {
        role,
        content: content.into(),
        token_count: 1,
        timestamp: None,
        metadata: Default::default(),
    }
}

fn append_of(messages: Vec<NewMessage>, create: Option<NewSession>) -> Append {
    Append {
        messages,
        create,
        idempotency_key: None,
    }
}

fn contents(store: &Store, session: &str) -> Vec<String> {
    store
        .messages(TENANT, session, 0, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect()
}

#[tokio::test]
async fn appends_get_gapless_indices_and_track_the_open_turn() {
    let (_dir, store) = open();
    let first = store
        .append(
            TENANT,
            "s1",
            append_of(vec![message(Role::User, "hi")], Some(owner("u", "a"))),
        )
        .await
        .unwrap();
    assert_eq!(
        (first.first_index, first.count, first.created_session),
        (0, 1, true)
    );
    assert_eq!(
        store.session(TENANT, "s1").unwrap().unwrap().state,
        SessionState::IncompleteTurn
    );

    let second = store
        .append(
            TENANT,
            "s1",
            append_of(
                vec![
                    message(Role::Assistant, "hello"),
                    message(Role::User, "bye"),
                ],
                None,
            ),
        )
        .await
        .unwrap();
    assert_eq!(second.indices(), 1..3);
    let messages = store.messages(TENANT, "s1", 1, 10).unwrap();
    assert_eq!(
        messages
            .iter()
            .map(|m| (m.index, m.content.as_str()))
            .collect::<Vec<_>>(),
        [(1, "hello"), (2, "bye")]
    );
    let session = store.session(TENANT, "s1").unwrap().unwrap();
    assert_eq!(session.message_count, 3);
    assert_eq!(session.state, SessionState::IncompleteTurn);
}

#[tokio::test]
async fn rejected_appends_change_nothing() {
    let (_dir, store) = open();
    let unknown = store
        .append(
            TENANT,
            "nobody",
            append_of(vec![message(Role::User, "x")], None),
        )
        .await;
    assert!(matches!(unknown, Err(StoreError::SessionNotFound { .. })));
    assert!(store.session(TENANT, "nobody").unwrap().is_none());

    store
        .append(
            TENANT,
            "s",
            append_of(vec![message(Role::User, "mine")], Some(owner("u", "a"))),
        )
        .await
        .unwrap();
    let foreign = store
        .append(
            TENANT,
            "s",
            append_of(vec![message(Role::User, "x")], Some(owner("v", "a"))),
        )
        .await;
    assert!(matches!(foreign, Err(StoreError::Conflict(_))));
    let nul = store
        .append(
            TENANT,
            "s",
            append_of(vec![message(Role::User, "a\0b")], None),
        )
        .await;
    assert!(matches!(
        nul,
        Err(StoreError::InvalidInput {
            field: "content",
            ..
        })
    ));
    let empty = store.append(TENANT, "s", append_of(vec![], None)).await;
    assert!(matches!(
        empty,
        Err(StoreError::InvalidInput {
            field: "messages",
            ..
        })
    ));
    assert_eq!(contents(&store, "s"), ["mine"]);
}

#[tokio::test]
async fn a_retried_append_is_answered_from_its_idempotency_record() {
    let (_dir, store) = open();
    let request = Append {
        messages: vec![message(Role::User, "once")],
        create: Some(owner("u", "a")),
        idempotency_key: Some("k1".into()),
    };
    let first = store.append(TENANT, "s", request.clone()).await.unwrap();
    let retry = store.append(TENANT, "s", request.clone()).await.unwrap();
    assert!(!first.replayed && retry.replayed);
    assert_eq!(
        (retry.first_index, retry.count, retry.created_session),
        (0, 1, true)
    );
    assert_eq!(contents(&store, "s"), ["once"]);

    let mut different = request;
    different.messages[0].content = "something else".into();
    let reused = store.append(TENANT, "s", different).await;
    assert!(matches!(reused, Err(StoreError::Conflict(_))));
    assert_eq!(contents(&store, "s"), ["once"]);
}

#[tokio::test]
async fn listings_filter_by_owner_and_order_by_last_activity() {
    let (_dir, store) = open();
    for (session, user, agent) in [
        ("s1", "alice", "bot"),
        ("s2", "bob", "bot"),
        ("s3", "alice", "helper"),
    ] {
        store
            .create_session(TENANT, Some(session), owner(user, agent))
            .await
            .unwrap();
    }
    // Activity moves s1 to the front.
    store
        .append(
            TENANT,
            "s1",
            append_of(vec![message(Role::User, "x")], None),
        )
        .await
        .unwrap();
    let ids = |filter: SessionFilter, page: u64, size: usize| {
        let page = store.list_sessions(TENANT, &filter, page, size).unwrap();
        (
            page.total,
            page.items.into_iter().map(|s| s.id).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        ids(SessionFilter::default(), 0, 10),
        (3, vec!["s1".into(), "s3".into(), "s2".into()])
    );
    assert_eq!(ids(SessionFilter::default(), 1, 2), (3, vec!["s2".into()]));
    let alice = SessionFilter {
        user_id: Some("alice".into()),
        agent_id: None,
    };
    assert_eq!(ids(alice, 0, 10), (2, vec!["s1".into(), "s3".into()]));
    let bot = SessionFilter {
        user_id: None,
        agent_id: Some("bot".into()),
    };
    assert_eq!(ids(bot, 0, 10), (2, vec!["s1".into(), "s2".into()]));
    let both = SessionFilter {
        user_id: Some("alice".into()),
        agent_id: Some("helper".into()),
    };
    assert_eq!(ids(both, 0, 10), (1, vec!["s3".into()]));
    // Tenants are separate.
    assert_eq!(
        store
            .list_sessions("other", &SessionFilter::default(), 0, 10)
            .unwrap()
            .total,
        0
    );
    assert!(matches!(
        store.list_sessions(TENANT, &SessionFilter::default(), 0, 0),
        Err(StoreError::InvalidInput {
            field: "page_size",
            ..
        })
    ));
    assert!(matches!(
        store.list_sessions(TENANT, &SessionFilter::default(), u64::MAX, 100),
        Err(StoreError::InvalidInput { field: "page", .. })
    ));
}

#[tokio::test]
async fn deleting_a_session_removes_everything_it_owned() {
    let (_dir, store) = open();
    store
        .append(
            TENANT,
            "s",
            append_of(vec![message(Role::User, "old")], Some(owner("u", "a"))),
        )
        .await
        .unwrap();
    let run = NewRun {
        run_id: Some("r1".into()),
        status: RunStatus::Completed,
        content: Some("answer".into()),
        tool_calls: vec![],
        error: None,
        metadata: Default::default(),
    };
    store.record_run(TENANT, "s", run.clone()).await.unwrap();
    assert!(matches!(
        store.record_run(TENANT, "s", run.clone()).await,
        Err(StoreError::Conflict(_))
    ));
    store.delete_session(TENANT, "s").await.unwrap();
    assert!(store.session(TENANT, "s").unwrap().is_none());
    assert_eq!(
        store
            .list_sessions(TENANT, &SessionFilter::default(), 0, 10)
            .unwrap()
            .total,
        0
    );
    assert!(matches!(
        store.delete_session(TENANT, "s").await,
        Err(StoreError::SessionNotFound { .. })
    ));
    // The same id starts empty: no message, run or run id survives.
    store
        .append(
            TENANT,
            "s",
            append_of(vec![message(Role::User, "new")], Some(owner("u", "a"))),
        )
        .await
        .unwrap();
    assert_eq!(contents(&store, "s"), ["new"]);
    assert!(store.runs(TENANT, "s").unwrap().is_empty());
    store.record_run(TENANT, "s", run).await.unwrap();
}

#[tokio::test]
async fn data_survives_reopening_and_newer_formats_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memlayer.redb");
    {
        let store = Store::open(&path).unwrap();
        store
            .append(
                TENANT,
                "s",
                append_of(vec![message(Role::User, "kept")], Some(owner("u", "a"))),
            )
            .await
            .unwrap();
    }
    {
        let store = Store::open(&path).unwrap();
        assert_eq!(contents(&store, "s"), ["kept"]);
    }
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(crate::tables::META)
            .unwrap()
            .insert(
                crate::tables::FORMAT_VERSION_KEY,
                crate::tables::FORMAT_VERSION + 1,
            )
            .unwrap();
        txn.commit().unwrap();
    }
    assert!(matches!(
        Store::open(&path),
        Err(StoreError::NewerFormat {
            found: 2,
            supported: 1
        })
    ));
}

#[tokio::test]
async fn writes_after_shutdown_are_refused_and_reads_still_work() {
    let (_dir, store) = open();
    store
        .create_session(TENANT, Some("s"), owner("u", "a"))
        .await
        .unwrap();
    store.shutdown();
    let late = store
        .append(
            TENANT,
            "s",
            append_of(vec![message(Role::User, "late")], None),
        )
        .await;
    assert!(matches!(late, Err(StoreError::Closed)));
    assert!(store.session(TENANT, "s").unwrap().is_some());
}

/// One concurrent client: the session it appends to and the batch sizes it sends.
#[derive(Debug, Clone)]
struct ClientPlan {
    appends: Vec<(usize, usize)>,
}

fn arb_plan() -> impl Strategy<Value = Vec<ClientPlan>> {
    let client = proptest::collection::vec((0..3usize, 1..4usize), 1..12)
        .prop_map(|appends| ClientPlan { appends });
    proptest::collection::vec(client, 2..6)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Random interleavings of appends from several tasks: every acknowledged message is
    /// present after reopening, exactly once, at the index it was given; indices are gapless;
    /// each client's messages keep their order.
    #[test]
    fn concurrent_appends_are_gapless_and_survive_reopening(plan in arb_plan()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memlayer.redb");
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(4).build().unwrap();
        // (session, index) → content, from acknowledgements only.
        let acknowledged: BTreeMap<(usize, u64), String> = runtime.block_on(async {
            let store = Store::open(&path).unwrap();
            let tasks: Vec<_> = plan.iter().enumerate().map(|(client, plan)| {
                let store = store.clone();
                let plan = plan.clone();
                tokio::spawn(async move {
                    let mut acks = Vec::new();
                    for (op, (session, batch)) in plan.appends.into_iter().enumerate() {
                        let messages = (0..batch)
                            .map(|i| message(Role::User, &format!("c{client}-op{op}-m{i}")))
                            .collect();
                        let appended = store
                            .append(TENANT, &format!("s{session}"), append_of(messages, Some(owner("u", "a"))))
                            .await
                            .unwrap();
                        for (i, index) in appended.indices().enumerate() {
                            acks.push(((session, index), format!("c{client}-op{op}-m{i}")));
                        }
                    }
                    acks
                })
            }).collect();
            let mut acknowledged = BTreeMap::new();
            for task in tasks {
                for (key, content) in task.await.unwrap() {
                    prop_assert!(acknowledged.insert(key, content).is_none(), "index {key:?} given twice");
                }
            }
            Ok(acknowledged)
        })?;

        let store = Store::open(&path).unwrap();
        for session in 0..3 {
            let stored = store.messages(TENANT, &format!("s{session}"), 0, usize::MAX).unwrap_or_default();
            let expected: Vec<_> = acknowledged.range((session, 0)..(session + 1, 0)).collect();
            prop_assert_eq!(stored.len(), expected.len());
            for (message, ((_, index), content)) in stored.iter().zip(expected) {
                prop_assert_eq!(message.index, *index);
                prop_assert_eq!(&message.content, content);
            }
            // Per-client order: a client's messages appear in the order it sent them.
            let mut last_seen: BTreeMap<String, (usize, usize)> = BTreeMap::new();
            for message in &stored {
                let (client, rest) = message.content.split_once('-').unwrap();
                let (op, part) = rest.split_once('-').unwrap();
                let position = (op[2..].parse().unwrap(), part[1..].parse().unwrap());
                if let Some(previous) = last_seen.insert(client.to_owned(), position) {
                    prop_assert!(previous < position, "client {client} reordered");
                }
            }
        }
    }
}
