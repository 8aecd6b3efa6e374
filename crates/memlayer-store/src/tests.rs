//! Behaviour of the store through its public API, on real redb files in temporary directories.

use std::collections::BTreeMap;

use proptest::prelude::*;
use tempfile::TempDir;

use crate::{
    Access, Append, NewMessage, NewRun, NewSession, OpenCheck, Role, RunStatus, SessionFilter,
    SessionState, Store, StoreError, StoreOptions,
};

const TENANT: &str = "default";

/// The session's version now, as a read before saving a summary sees it.
pub(crate) fn version(store: &Store, tenant: &str, session_id: &str) -> crate::SessionVersion {
    store
        .sessions()
        .snapshot(&Access::tenant_wide(tenant), session_id)
        .unwrap()
        .unwrap()
        .version()
}

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
    NewMessage::new(role, content, 1)
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
        .sessions()
        .messages(&Access::tenant_wide(TENANT), session, 0, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect()
}

#[tokio::test]
async fn appends_get_gapless_indices_and_track_the_open_turn() {
    let (_dir, store) = open();
    let first = store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
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
        store
            .sessions()
            .session(&Access::tenant_wide(TENANT), "s1")
            .unwrap()
            .unwrap()
            .state,
        SessionState::IncompleteTurn
    );

    let second = store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
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
    let messages = store
        .sessions()
        .messages(&Access::tenant_wide(TENANT), "s1", 1, 10)
        .unwrap();
    assert_eq!(
        messages
            .iter()
            .map(|m| (m.index, m.content.as_str()))
            .collect::<Vec<_>>(),
        [(1, "hello"), (2, "bye")]
    );
    let session = store
        .sessions()
        .session(&Access::tenant_wide(TENANT), "s1")
        .unwrap()
        .unwrap();
    assert_eq!(session.message_count, 3);
    assert_eq!(session.state, SessionState::IncompleteTurn);
}

#[tokio::test]
async fn rejected_appends_change_nothing() {
    let (_dir, store) = open();
    let unknown = store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "nobody",
            append_of(vec![message(Role::User, "x")], None),
        )
        .await;
    assert!(matches!(unknown, Err(StoreError::SessionNotFound { .. })));
    assert!(
        store
            .sessions()
            .session(&Access::tenant_wide(TENANT), "nobody")
            .unwrap()
            .is_none()
    );

    store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "s",
            append_of(vec![message(Role::User, "mine")], Some(owner("u", "a"))),
        )
        .await
        .unwrap();
    let foreign = store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "s",
            append_of(vec![message(Role::User, "x")], Some(owner("v", "a"))),
        )
        .await;
    assert!(matches!(foreign, Err(StoreError::Conflict(_))));
    let nul = store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
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
    let empty = store
        .sessions()
        .append(&Access::tenant_wide(TENANT), "s", append_of(vec![], None))
        .await;
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
    let first = store
        .sessions()
        .append(&Access::tenant_wide(TENANT), "s", request.clone())
        .await
        .unwrap();
    let retry = store
        .sessions()
        .append(&Access::tenant_wide(TENANT), "s", request.clone())
        .await
        .unwrap();
    assert!(!first.replayed && retry.replayed);
    assert_eq!(
        (retry.first_index, retry.count, retry.created_session),
        (0, 1, true)
    );
    assert_eq!(contents(&store, "s"), ["once"]);

    let mut different = request;
    different.messages[0].content = "something else".into();
    let reused = store
        .sessions()
        .append(&Access::tenant_wide(TENANT), "s", different)
        .await;
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
            .sessions()
            .create_session(
                &Access::tenant_wide(TENANT),
                Some(session),
                owner(user, agent),
            )
            .await
            .unwrap();
    }
    // Activity moves s1 to the front.
    store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "s1",
            append_of(vec![message(Role::User, "x")], None),
        )
        .await
        .unwrap();
    let ids = |filter: SessionFilter, page: u64, size: usize| {
        let page = store
            .sessions()
            .list_sessions(&Access::tenant_wide(TENANT), &filter, page, size)
            .unwrap();
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
            .sessions()
            .list_sessions(
                &Access::tenant_wide("other"),
                &SessionFilter::default(),
                0,
                10
            )
            .unwrap()
            .total,
        0
    );
    assert!(matches!(
        store.sessions().list_sessions(
            &Access::tenant_wide(TENANT),
            &SessionFilter::default(),
            0,
            0
        ),
        Err(StoreError::InvalidInput {
            field: "page_size",
            ..
        })
    ));
    // A page past the end is empty, however far past.
    let far = store
        .sessions()
        .list_sessions(
            &Access::tenant_wide(TENANT),
            &SessionFilter::default(),
            u64::MAX,
            100,
        )
        .unwrap();
    assert!(far.items.is_empty());
}

#[tokio::test]
async fn deleting_a_session_removes_everything_it_owned() {
    let (_dir, store) = open();
    store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
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
    store
        .sessions()
        .record_run(&Access::tenant_wide(TENANT), "s", run.clone())
        .await
        .unwrap();
    assert!(matches!(
        store
            .sessions()
            .record_run(&Access::tenant_wide(TENANT), "s", run.clone())
            .await,
        Err(StoreError::Conflict(_))
    ));
    store
        .eraser()
        .delete_session(&Access::tenant_wide(TENANT), "s")
        .await
        .unwrap();
    assert!(
        store
            .sessions()
            .session(&Access::tenant_wide(TENANT), "s")
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store
            .sessions()
            .list_sessions(
                &Access::tenant_wide(TENANT),
                &SessionFilter::default(),
                0,
                10
            )
            .unwrap()
            .total,
        0
    );
    assert!(matches!(
        store
            .eraser()
            .delete_session(&Access::tenant_wide(TENANT), "s")
            .await,
        Err(StoreError::SessionNotFound { .. })
    ));
    // The same id starts empty: no message, run or run id survives.
    store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "s",
            append_of(vec![message(Role::User, "new")], Some(owner("u", "a"))),
        )
        .await
        .unwrap();
    assert_eq!(contents(&store, "s"), ["new"]);
    assert!(
        store
            .sessions()
            .runs(&Access::tenant_wide(TENANT), "s", 0, 10)
            .unwrap()
            .is_empty()
    );
    store
        .sessions()
        .record_run(&Access::tenant_wide(TENANT), "s", run)
        .await
        .unwrap();
}

#[tokio::test]
async fn data_survives_reopening_and_newer_formats_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memlayer.redb");
    {
        let store = Store::open(&path).unwrap();
        store
            .sessions()
            .append(
                &Access::tenant_wide(TENANT),
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
        Err(StoreError::NewerFormat { found, supported })
            if u64::from(found) == crate::tables::FORMAT_VERSION + 1
                && u64::from(supported) == crate::tables::FORMAT_VERSION
    ));
}

/// A store file with `content` in one session's messages, closed cleanly.
async fn closed_store_with(dir: &TempDir, content: &str) -> std::path::PathBuf {
    let path = dir.path().join("memlayer.redb");
    let store = Store::open(&path).unwrap();
    for turn in 0..20 {
        store
            .sessions()
            .append(
                &Access::tenant_wide(TENANT),
                "s",
                // The content is sealed; its owner's id is stored plain.
                append_of(
                    vec![message(Role::User, &format!("{content} {turn}"))],
                    Some(owner(content, "a")),
                ),
            )
            .await
            .unwrap();
    }
    store.shutdown();
    drop(store);
    path
}

#[track_caller]
fn assert_damaged(path: &std::path::Path) {
    match Store::open(path) {
        Err(err @ StoreError::DamagedFile { .. }) => {
            let message = err.to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains("backup"), "{message}");
        }
        Err(other) => panic!("expected DamagedFile, got {other:?}"),
        Ok(_) => panic!("a damaged file was opened"),
    }
}

/// A truncated file is refused with an error naming it, never opened or panicked on.
#[tokio::test]
async fn truncated_files_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = closed_store_with(&dir, "truncated").await;
    let length = std::fs::metadata(&path).unwrap().len();
    for keep in [length - 1, length / 2, 4096, 100] {
        let copy = dir.path().join(format!("truncated-{keep}.redb"));
        std::fs::copy(&path, &copy).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&copy)
            .unwrap()
            .set_len(keep)
            .unwrap();
        assert_damaged(&copy);
    }
}

/// Bytes altered inside stored records fail the page checksums when the file is opened,
/// so altered data is never served.
#[tokio::test]
async fn altered_record_bytes_are_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let marker = "canary-7f3a";
    let path = closed_store_with(&dir, marker).await;
    let mut bytes = std::fs::read(&path).unwrap();
    let mut altered = 0;
    let mut at = 0;
    while let Some(found) = bytes[at..]
        .windows(marker.len())
        .position(|window| window == marker.as_bytes())
    {
        bytes[at + found] ^= 0x20;
        altered += 1;
        at += found + marker.len();
    }
    assert!(altered > 0, "the marker is stored in the file");
    std::fs::write(&path, &bytes).unwrap();
    assert_damaged(&path);
}

/// Garbage in place of a store file is refused too.
#[test]
fn garbage_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memlayer.redb");
    std::fs::write(&path, vec![0xa5; 64 * 1024]).unwrap();
    assert_damaged(&path);
}

fn stamp_of(path: &std::path::Path) -> std::path::PathBuf {
    crate::store::sibling(path, ".closed")
}

/// A file memlayer closed cleanly and nobody touched opens without redb's walk of every
/// page, with everything in it; the stamp that allowed it is gone while the store is open,
/// so a crash from here on means the walk at the next open.
#[tokio::test]
async fn a_file_unchanged_since_its_clean_close_opens_without_the_walk() {
    let dir = tempfile::tempdir().unwrap();
    let path = closed_store_with(&dir, "kept").await;
    assert!(stamp_of(&path).exists(), "the clean close left its stamp");
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.open_check(),
        Some(OpenCheck::UnchangedSinceCleanClose)
    );
    assert!(!stamp_of(&path).exists(), "no stamp while the file is open");
    assert_eq!(contents(&store, "s").len(), 20);
    drop(store);
    let store = Store::open_with(&path, StoreOptions::default().with_check_every_page()).unwrap();
    assert_eq!(store.open_check(), Some(OpenCheck::EveryPage), "asked for");
    assert!(!stamp_of(&path).exists());
}

/// Any write to the file after its clean close, even of the bytes already there, brings the
/// walk back; a file memlayer did not close (no stamp) is walked too.
#[tokio::test]
async fn a_file_written_after_its_clean_close_is_walked_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = closed_store_with(&dir, "rewritten").await;
    // File times tick coarsely (a few milliseconds): the rewrite must land in a later tick
    // for its change time to differ, as the same bytes leave the CRCs as they were.
    std::thread::sleep(std::time::Duration::from_millis(50));
    std::fs::write(&path, std::fs::read(&path).unwrap()).unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.open_check(), Some(OpenCheck::EveryPage));
    assert_eq!(contents(&store, "s").len(), 20);
    drop(store);
    std::fs::remove_file(stamp_of(&path)).unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.open_check(), Some(OpenCheck::EveryPage));
    drop(store);
    let created = Store::open(dir.path().join("new.redb")).unwrap();
    assert_eq!(created.open_check(), Some(OpenCheck::Created));
}

#[tokio::test]
async fn writes_after_shutdown_are_refused_and_reads_still_work() {
    let (_dir, store) = open();
    store
        .sessions()
        .create_session(&Access::tenant_wide(TENANT), Some("s"), owner("u", "a"))
        .await
        .unwrap();
    store.shutdown();
    let late = store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "s",
            append_of(vec![message(Role::User, "late")], None),
        )
        .await;
    assert!(matches!(late, Err(StoreError::Closed)));
    assert!(
        store
            .sessions()
            .session(&Access::tenant_wide(TENANT), "s")
            .unwrap()
            .is_some()
    );
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
                            .sessions().append(&Access::tenant_wide(TENANT), &format!("s{session}"), append_of(messages, Some(owner("u", "a"))))
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
            let stored = store.sessions().messages(&Access::tenant_wide(TENANT), &format!("s{session}"), 0, usize::MAX).unwrap_or_default();
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

fn model(sha: &str) -> crate::EmbeddingModel {
    crate::EmbeddingModel {
        name: "test-model".into(),
        sha256: sha.into(),
        dimension: 2,
    }
}

#[tokio::test]
async fn appends_queue_embeddings_that_the_worker_stores_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memlayer.redb");
    {
        let store = Store::open(&path).unwrap();
        store
            .sessions()
            .append(
                &Access::tenant_wide(TENANT),
                "s",
                append_of(
                    vec![message(Role::User, "a"), message(Role::Assistant, "b")],
                    Some(owner("u", "a")),
                ),
            )
            .await
            .unwrap();
    }
    // The outbox entry was committed with the messages and survives a restart.
    let store = Store::open(&path).unwrap();
    let pending = store.feed().pending_embeddings(100).unwrap();
    assert_eq!(pending.len(), 1);
    let session = pending[0].session.clone().unwrap();
    assert_eq!(
        (session.tenant.as_str(), session.session_id.as_str()),
        (TENANT, "s")
    );
    let keys: Vec<_> = pending[0].messages.iter().map(|(key, _)| *key).collect();
    assert_eq!(keys.iter().map(|k| k.index()).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(keys[0].session(), keys[1].session());

    let vectors = vec![(keys[0], vec![1.0, 0.0]), (keys[1], vec![0.0, 1.0])];
    store
        .feed()
        .store_embeddings(model("abc"), vec![pending[0].seq], vectors)
        .await
        .unwrap();
    assert!(store.feed().pending_embeddings(100).unwrap().is_empty());
    assert_eq!(store.feed().pending_embedding_count().unwrap(), 0);
    assert_eq!(store.feed().vector_model().unwrap(), Some(model("abc")));
    let stored = store.feed().vectors(None, 10).unwrap();
    assert_eq!(
        stored
            .iter()
            .map(|v| (v.key, v.role, v.components.clone()))
            .collect::<Vec<_>>(),
        [
            (keys[0], Role::User, vec![1.0, 0.0]),
            (keys[1], Role::Assistant, vec![0.0, 1.0])
        ]
    );
    assert_eq!(store.feed().vectors(Some(keys[0]), 10).unwrap().len(), 1);
    let resolved = store.feed().messages_by_key(&keys).unwrap();
    assert_eq!(resolved[1].as_ref().unwrap().content, "b");

    // Vectors of another model are refused rather than mixed.
    store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "s",
            append_of(vec![message(Role::User, "c")], None),
        )
        .await
        .unwrap();
    let next = store.feed().pending_embeddings(100).unwrap();
    let key = next[0].messages[0].0;
    let mixed = store
        .feed()
        .store_embeddings(
            model("other"),
            vec![next[0].seq],
            vec![(key, vec![1.0, 1.0])],
        )
        .await;
    assert!(matches!(mixed, Err(StoreError::Conflict(_))));
    assert_eq!(store.feed().pending_embedding_count().unwrap(), 1);
    let wrong_width = store
        .feed()
        .store_embeddings(model("abc"), vec![next[0].seq], vec![(key, vec![1.0])])
        .await;
    assert!(matches!(
        wrong_width,
        Err(StoreError::InvalidInput {
            field: "vector",
            ..
        })
    ));

    // Reindexing drops every vector and queues every message again.
    assert_eq!(store.feed().reset_embeddings().await.unwrap(), 3);
    assert!(store.feed().vectors(None, 10).unwrap().is_empty());
    assert_eq!(store.feed().vector_model().unwrap(), None);
    let requeued = store.feed().pending_embeddings(100).unwrap();
    assert_eq!(requeued.iter().map(|p| p.messages.len()).sum::<usize>(), 3);
}

/// Appends to each session in turn one user message whose text is the session's id.
async fn append_session_names(store: &Store, sessions: &[&str]) {
    for session in sessions {
        store
            .sessions()
            .append(
                &Access::tenant_wide(TENANT),
                session,
                append_of(vec![message(Role::User, session)], Some(owner("u", "a"))),
            )
            .await
            .unwrap();
    }
}

/// Format 4 keyed the listing and the open sessions by the exact time of last activity;
/// opening such a file moves every entry to its bucket, and what reads them keeps its order.
#[tokio::test]
async fn a_format_4_files_activity_entries_move_to_their_buckets_at_open() {
    use crate::activity::BUCKET_MICROS;
    use crate::record::{Record as _, SessionRecord};
    use crate::tables::{META, OPEN_SESSIONS, SESSION_ACTIVITY, SESSIONS, scopes};
    use redb::{ReadableDatabase as _, ReadableTable as _};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memlayer.redb");
    let store = Store::open(&path).unwrap();
    append_session_names(&store, &["a", "b", "c"]).await;
    drop(store);
    // Rewritten as format 4 would have it: "b" active last, all three within one tenth of a
    // second and none on a bucket's edge, each entry keyed by its exact time.
    let base = 1_700_000_000_000_000 + BUCKET_MICROS / 2;
    let exact = [("a", base + 1), ("b", base + 7), ("c", base + 3)];
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut sessions = txn.open_table(SESSIONS).unwrap();
            let mut activity = txn.open_table(SESSION_ACTIVITY).unwrap();
            let mut open = txn.open_table(OPEN_SESSIONS).unwrap();
            activity.retain(|_, ()| false).unwrap();
            open.retain(|_, ()| false).unwrap();
            for (id, at) in exact {
                let bytes = sessions
                    .get((TENANT, id))
                    .unwrap()
                    .unwrap()
                    .value()
                    .to_vec();
                let mut record = SessionRecord::decode(&bytes).unwrap();
                record.updated_at = at;
                sessions
                    .insert((TENANT, id), record.encode().as_slice())
                    .unwrap();
                for scope in scopes(&record.user_id, &record.agent_id) {
                    activity
                        .insert((TENANT, scope.as_str(), at, id), ())
                        .unwrap();
                }
                open.insert((at, TENANT, id), ()).unwrap();
            }
            txn.open_table(META)
                .unwrap()
                .insert(crate::tables::FORMAT_VERSION_KEY, 4)
                .unwrap();
        }
        txn.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let listed = |store: &Store| -> Vec<String> {
        store
            .sessions()
            .list_sessions(
                &Access::tenant_wide(TENANT),
                &SessionFilter::default(),
                0,
                10,
            )
            .unwrap()
            .items
            .into_iter()
            .map(|session| session.id)
            .collect()
    };
    assert_eq!(listed(&store), ["b", "c", "a"]);
    assert_eq!(
        store.sessions().oldest_open_activity().unwrap(),
        Some(crate::Timestamp::from_micros(base + 1))
    );
    // Activity now moves the bucketed entries: none is left behind at its exact time.
    append_session_names(&store, &["a"]).await;
    assert_eq!(listed(&store), ["a", "b", "c"]);
    let idle = store
        .sessions()
        .take_idle_sessions(crate::Timestamp::from_micros(base + 4), 10)
        .await
        .unwrap();
    assert_eq!(idle, [(TENANT.to_owned(), "c".to_owned())]);
    drop(store);
    let db = redb::Database::open(&path).unwrap();
    let txn = db.begin_read().unwrap();
    let activity: Vec<u64> = txn
        .open_table(SESSION_ACTIVITY)
        .unwrap()
        .iter()
        .unwrap()
        .map(|entry| entry.unwrap().0.value().2)
        .collect();
    assert_eq!(activity.len(), 3 * 4);
    assert!(activity.iter().all(|at| at % BUCKET_MICROS == 0));
    let open: Vec<u64> = txn
        .open_table(OPEN_SESSIONS)
        .unwrap()
        .iter()
        .unwrap()
        .map(|entry| entry.unwrap().0.value().0)
        .collect();
    assert_eq!(open.len(), 2);
    assert!(open.iter().all(|at| at % BUCKET_MICROS == 0));
}

#[tokio::test]
async fn deleting_a_session_drops_its_vectors_and_its_queued_messages() {
    let (_dir, store) = open();
    append_session_names(&store, &["keep", "drop"]).await;
    let pending = store.feed().pending_embeddings(100).unwrap();
    let first = &pending[0];
    store
        .feed()
        .store_embeddings(
            model("abc"),
            vec![first.seq],
            vec![(first.messages[0].0, vec![1.0, 0.0])],
        )
        .await
        .unwrap();
    let dropped_sid = pending[1].messages[0].0.session();
    store
        .eraser()
        .delete_session(&Access::tenant_wide(TENANT), "keep")
        .await
        .unwrap();
    store
        .eraser()
        .delete_session(&Access::tenant_wide(TENANT), "drop")
        .await
        .unwrap();
    assert!(store.feed().vectors(None, 10).unwrap().is_empty());
    // Its outbox entry stays until the worker drains it, with neither session nor text.
    let queued = store.feed().pending_embeddings(100).unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(
        (queued[0].seq, queued[0].session.as_ref()),
        (pending[1].seq, None)
    );
    assert!(queued[0].messages.is_empty());
    assert_eq!(store.feed().session_ref(dropped_sid).unwrap(), None);
    // A vector arriving for a message deleted meanwhile is dropped, not stored.
    store
        .feed()
        .store_embeddings(
            model("abc"),
            vec![pending[1].seq],
            vec![(pending[1].messages[0].0, vec![0.0, 1.0])],
        )
        .await
        .unwrap();
    assert!(store.feed().vectors(None, 10).unwrap().is_empty());
    assert_eq!(store.feed().pending_embedding_count().unwrap(), 0);
}

#[test]
fn message_keys_split_into_session_and_index() {
    let key = crate::MessageKey::new(0xAB_CDEF_0123, 0x00FF_FFFF);
    assert_eq!(key.session(), 0xAB_CDEF_0123);
    assert_eq!(key.index(), 0x00FF_FFFF);
    assert_eq!(crate::MessageKey::from_u64(key.as_u64()), key);
}

#[tokio::test]
async fn index_bookkeeping_tracks_the_outbox_and_vector_changes() {
    let (_dir, store) = open();
    assert_eq!(store.feed().outbox_head().unwrap(), 0);
    assert_eq!(store.feed().vectors_version().unwrap(), 0);
    store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "s",
            append_of(
                vec![message(Role::User, "one"), message(Role::Assistant, "two")],
                Some(owner("u", "a")),
            ),
        )
        .await
        .unwrap();
    store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "t",
            append_of(vec![message(Role::User, "three")], Some(owner("v", "a"))),
        )
        .await
        .unwrap();
    assert_eq!(store.feed().outbox_head().unwrap(), 2);
    let sid = store
        .feed()
        .session_key(&Access::tenant_wide(TENANT), "s")
        .unwrap()
        .unwrap();
    let (at, session) = store.feed().session_by_key(sid).unwrap().unwrap();
    assert_eq!(
        (at.session_id.as_str(), session.user_id.as_str()),
        ("s", "u")
    );
    assert_eq!(
        store
            .feed()
            .session_key(&Access::tenant_wide(TENANT), "nope")
            .unwrap(),
        None
    );

    let all = store.feed().all_messages(None, 10).unwrap();
    assert_eq!(
        all.iter()
            .map(|(_, m)| m.content.as_str())
            .collect::<Vec<_>>(),
        ["one", "two", "three"]
    );
    let rest = store.feed().all_messages(Some(all[0].0), 10).unwrap();
    assert_eq!(rest.len(), 2);

    let pending = store.feed().pending_embeddings(100).unwrap();
    store
        .feed()
        .store_embeddings(
            model("abc"),
            vec![pending[0].seq],
            vec![(pending[0].messages[0].0, vec![1.0, 0.0])],
        )
        .await
        .unwrap();
    assert_eq!(store.feed().vectors_version().unwrap(), 1);
    store
        .eraser()
        .delete_session(&Access::tenant_wide(TENANT), "s")
        .await
        .unwrap();
    assert_eq!(store.feed().vectors_version().unwrap(), 2);
    assert_eq!(store.feed().session_by_key(sid).unwrap(), None);
}

#[tokio::test]
async fn clearing_starts_later_loads_and_search_still_sees_everything() {
    let (_dir, store) = open();
    store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "s",
            append_of(
                vec![
                    message(Role::User, "My Order 4711 is late"),
                    message(Role::Assistant, "Checking order 4711"),
                ],
                Some(owner("u", "a")),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .sessions()
            .clear_session(&Access::tenant_wide(TENANT), "s")
            .await
            .unwrap(),
        2
    );
    store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "s",
            append_of(vec![message(Role::User, "new topic: order pizza")], None),
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .sessions()
            .session(&Access::tenant_wide(TENANT), "s")
            .unwrap()
            .unwrap()
            .load_from,
        2
    );
    let hits = store
        .sessions()
        .search_messages(&Access::tenant_wide(TENANT), "s", "ORDER", 10)
        .unwrap();
    assert_eq!(hits.iter().map(|m| m.index).collect::<Vec<_>>(), [2, 1, 0]);
    let both_words = store
        .sessions()
        .search_messages(&Access::tenant_wide(TENANT), "s", "order 4711", 1)
        .unwrap();
    assert_eq!(both_words.iter().map(|m| m.index).collect::<Vec<_>>(), [1]);
    assert!(matches!(
        store
            .sessions()
            .search_messages(&Access::tenant_wide(TENANT), "s", "  ", 10),
        Err(StoreError::InvalidInput { field: "query", .. })
    ));
    // Each word is a scan of every message read: their number is bounded, repeats count once.
    let words = |count: usize| (0..count).map(|n| format!("w{n} ")).collect::<String>();
    let repeated = format!("{} order", "order ".repeat(100));
    for (query, allowed) in [
        (words(crate::MAX_SEARCH_WORDS), true),
        (words(crate::MAX_SEARCH_WORDS + 1), false),
        (repeated, true),
        ("o".repeat(crate::MAX_SEARCH_QUERY + 1), false),
    ] {
        let searched =
            store
                .sessions()
                .search_messages(&Access::tenant_wide(TENANT), "s", &query, 10);
        match searched {
            Ok(_) => assert!(allowed, "{query} was searched"),
            Err(StoreError::InvalidInput { field: "query", .. }) => {
                assert!(!allowed, "{query} was refused")
            }
            Err(other) => panic!("{other}"),
        }
    }
    assert!(matches!(
        store
            .sessions()
            .clear_session(&Access::tenant_wide(TENANT), "nope")
            .await,
        Err(StoreError::SessionNotFound { .. })
    ));
}

#[tokio::test]
async fn a_saved_summary_replaces_the_previous_one_and_goes_with_its_session() {
    let (_dir, store) = open();
    let lines: Vec<_> = (0..4)
        .map(|i| message(Role::User, &format!("m{i}")))
        .collect();
    store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "s",
            append_of(lines, Some(owner("u", "a"))),
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .sessions()
            .summary(&Access::tenant_wide(TENANT), "s")
            .unwrap(),
        None
    );
    store
        .sessions()
        .save_summary(
            &Access::tenant_wide(TENANT),
            "s",
            version(&store, TENANT, "s"),
            "first".into(),
            0,
            1,
        )
        .await
        .unwrap();
    store
        .sessions()
        .save_summary(
            &Access::tenant_wide(TENANT),
            "s",
            version(&store, TENANT, "s"),
            "second".into(),
            0,
            2,
        )
        .await
        .unwrap();
    let summary = store
        .sessions()
        .summary(&Access::tenant_wide(TENANT), "s")
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            summary.text.as_str(),
            summary.first_index,
            summary.last_index
        ),
        ("second", 0, 2)
    );
    // A slower request that summarised fewer turns does not move the checkpoint back.
    store
        .sessions()
        .save_summary(
            &Access::tenant_wide(TENANT),
            "s",
            version(&store, TENANT, "s"),
            "stale".into(),
            0,
            1,
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .sessions()
            .summary(&Access::tenant_wide(TENANT), "s")
            .unwrap()
            .unwrap()
            .text,
        "second"
    );
    for (first, last) in [(2, 1), (0, 4)] {
        assert!(matches!(
            store
                .sessions()
                .save_summary(
                    &Access::tenant_wide(TENANT),
                    "s",
                    version(&store, TENANT, "s"),
                    "bad".into(),
                    first,
                    last
                )
                .await,
            Err(StoreError::InvalidInput {
                field: "summary range",
                ..
            })
        ));
    }
    store
        .eraser()
        .delete_session(&Access::tenant_wide(TENANT), "s")
        .await
        .unwrap();
    store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "s",
            append_of(vec![message(Role::User, "again")], Some(owner("u", "a"))),
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .sessions()
            .summary(&Access::tenant_wide(TENANT), "s")
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn settings_documents_per_tenant_and_agent_are_saved_replaced_and_removed() {
    let (_dir, store) = open();
    let document = |json: serde_json::Value| json.as_object().cloned().unwrap();
    assert_eq!(store.tenants().settings(TENANT, None).unwrap(), None);
    store
        .tenants()
        .put_settings(
            TENANT,
            None,
            Some(document(serde_json::json!({"max_turns": 4}))),
        )
        .await
        .unwrap();
    store
        .tenants()
        .put_settings(
            TENANT,
            Some("bot"),
            Some(document(serde_json::json!({"recall_k": 2}))),
        )
        .await
        .unwrap();
    assert_eq!(
        store.tenants().settings(TENANT, None).unwrap(),
        Some(document(serde_json::json!({"max_turns": 4})))
    );
    assert_eq!(
        store.tenants().settings(TENANT, Some("bot")).unwrap(),
        Some(document(serde_json::json!({"recall_k": 2})))
    );
    assert_eq!(store.tenants().settings("other", None).unwrap(), None);
    assert_eq!(
        store.tenants().settings(TENANT, Some("other-bot")).unwrap(),
        None
    );
    store
        .tenants()
        .put_settings(TENANT, Some("bot"), None)
        .await
        .unwrap();
    assert_eq!(store.tenants().settings(TENANT, Some("bot")).unwrap(), None);
    assert!(matches!(
        store.tenants().settings(TENANT, Some("a/b")),
        Err(StoreError::InvalidId { .. })
    ));
}

fn episode(user: &str, task_type: &str, lesson: &str) -> crate::Episode {
    crate::Episode {
        id: 0,
        tenant: TENANT.into(),
        user_id: user.into(),
        agent_id: None,
        task_type: task_type.into(),
        description: "tried something".into(),
        outcome: crate::Outcome::Failure,
        reflection: String::new(),
        lesson: lesson.into(),
        standing: false,
        source_session: None,
        created_at: crate::Timestamp::now(),
    }
}

#[tokio::test]
async fn episodes_are_listed_by_owner_and_task_type_and_deleted_by_source() {
    let (_dir, store) = open();
    store
        .sessions()
        .append(
            &Access::tenant_wide(TENANT),
            "s1",
            append_of(vec![message(Role::User, "hi")], Some(owner("ann", "a"))),
        )
        .await
        .unwrap();
    let mut ids = Vec::new();
    for (task, lesson) in [("refund", "one"), ("refund", "two"), ("upgrade", "three")] {
        ids.push(
            store
                .memories()
                .put_episode(episode("ann", task, lesson))
                .await
                .unwrap(),
        );
    }
    let from_session = crate::Episode {
        source_session: Some("s1".into()),
        ..episode("ann", "refund", "four")
    };
    ids.push(store.memories().put_episode(from_session).await.unwrap());
    store
        .memories()
        .put_episode(episode("bob", "refund", "bob's"))
        .await
        .unwrap();

    let lessons = |found: Vec<crate::Episode>| -> Vec<String> {
        found.into_iter().map(|e| e.lesson).collect()
    };
    assert_eq!(
        lessons(
            store
                .memories()
                .recent_episodes(TENANT, "ann", "refund", 2, |_| true)
                .unwrap()
        ),
        ["four", "two"]
    );
    assert_eq!(
        lessons(
            store
                .memories()
                .recent_episodes(TENANT, "ann", "refund", 9, |e| e.lesson != "two")
                .unwrap()
        ),
        ["four", "one"]
    );
    assert_eq!(
        lessons(store.memories().user_episodes(TENANT, "ann").unwrap()),
        ["one", "two", "three", "four"]
    );
    assert!(store.memories().episode("other", ids[0]).unwrap().is_none());
    assert_eq!(
        store
            .memories()
            .episode(TENANT, ids[0])
            .unwrap()
            .unwrap()
            .lesson,
        "one"
    );

    // A source session must be one of the user's own.
    let foreign = crate::Episode {
        source_session: Some("s1".into()),
        ..episode("bob", "refund", "stolen")
    };
    assert!(matches!(
        store.memories().put_episode(foreign).await,
        Err(StoreError::SessionNotFound { .. })
    ));
    for bad in [
        episode("ann", "refund", " "),
        episode("ann", "no spaces", "x"),
        episode("ann", "refund", &"x".repeat(crate::MAX_LESSON_TEXT + 1)),
    ] {
        assert!(store.memories().put_episode(bad).await.is_err());
    }

    assert_eq!(
        store
            .eraser()
            .delete_user_episodes(TENANT, "ann", Some("s1"))
            .await
            .unwrap(),
        1
    );
    assert!(
        !store
            .eraser()
            .delete_episode("other", ids[0])
            .await
            .unwrap()
    );
    assert!(store.eraser().delete_episode(TENANT, ids[0]).await.unwrap());
    assert_eq!(
        store
            .eraser()
            .delete_user_episodes(TENANT, "ann", None)
            .await
            .unwrap(),
        2
    );
    assert!(
        store
            .memories()
            .user_episodes(TENANT, "ann")
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .memories()
            .recent_episodes(TENANT, "ann", "refund", 9, |_| true)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.memories().user_episodes(TENANT, "bob").unwrap().len(),
        1
    );
}

/// An episode drawn from a session goes in the commit that deletes the session, and none can
/// be recorded from it afterwards: there is no moment between the two for an episode to be
/// recorded and survive (the erasure used to delete the episodes in a commit of their own
/// first).
#[tokio::test]
async fn deleting_a_session_deletes_its_episodes_in_the_same_commit() {
    let (_dir, store) = open();
    for session in ["doomed", "kept"] {
        store
            .sessions()
            .append(
                &Access::tenant_wide(TENANT),
                session,
                append_of(vec![message(Role::User, "hi")], Some(owner("ann", "a"))),
            )
            .await
            .unwrap();
    }
    let from = |session: &str, lesson: &str| crate::Episode {
        source_session: Some(session.into()),
        ..episode("ann", "refund", lesson)
    };
    store
        .memories()
        .put_episode(from("doomed", "erased"))
        .await
        .unwrap();
    store
        .memories()
        .put_episode(from("kept", "kept"))
        .await
        .unwrap();
    store
        .memories()
        .put_episode(episode("ann", "refund", "standalone"))
        .await
        .unwrap();

    let deleted = store
        .eraser()
        .delete_session(&Access::tenant_wide(TENANT), "doomed")
        .await
        .unwrap();
    assert_eq!(deleted.episodes, 1);
    let lessons: Vec<String> = store
        .memories()
        .user_episodes(TENANT, "ann")
        .unwrap()
        .into_iter()
        .map(|episode| episode.lesson)
        .collect();
    assert_eq!(lessons, ["kept", "standalone"]);
    assert!(matches!(
        store.memories().put_episode(from("doomed", "late")).await,
        Err(StoreError::SessionNotFound { .. })
    ));
}

#[tokio::test]
async fn idle_sessions_are_taken_once_oldest_first_and_ended_ones_stay_ended() {
    let (_dir, store) = open();
    let say = |session: &'static str| {
        let store = store.clone();
        async move {
            store
                .sessions()
                .append(
                    &Access::tenant_wide(TENANT),
                    session,
                    append_of(vec![message(Role::User, "hi")], Some(owner("u", "a"))),
                )
                .await
                .unwrap();
        }
    };
    say("first").await;
    say("second").await;
    say("third").await;
    say("first").await; // Activity moves it to the back.
    store
        .sessions()
        .create_session(&Access::tenant_wide(TENANT), Some("empty"), owner("u", "a"))
        .await
        .unwrap();
    store
        .sessions()
        .end_session_activity(&Access::tenant_wide(TENANT), "second")
        .await
        .unwrap();
    store
        .eraser()
        .delete_session(&Access::tenant_wide(TENANT), "empty")
        .await
        .unwrap();
    let oldest = store.sessions().oldest_open_activity().unwrap().unwrap();
    let cutoff = crate::Timestamp::now();
    assert!(oldest.as_micros() <= cutoff.as_micros());

    let taken = store
        .sessions()
        .take_idle_sessions(cutoff, 1)
        .await
        .unwrap();
    assert_eq!(taken, [(TENANT.to_owned(), "third".to_owned())]);
    let taken = store
        .sessions()
        .take_idle_sessions(cutoff, 10)
        .await
        .unwrap();
    assert_eq!(taken, [(TENANT.to_owned(), "first".to_owned())]);
    assert!(
        store
            .sessions()
            .take_idle_sessions(cutoff, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.sessions().oldest_open_activity().unwrap(), None);
    // New activity does not reopen an ended session.
    say("second").await;
    assert!(
        store
            .sessions()
            .take_idle_sessions(crate::Timestamp::now(), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// The session ids whose appends wait in the outbox, oldest first: `None` for a session
/// deleted since, whose entries carry no messages.
fn pending_sessions(store: &Store) -> Vec<Option<String>> {
    store
        .feed()
        .pending_embeddings(100)
        .unwrap()
        .into_iter()
        .map(|pending| {
            if pending.session.is_none() {
                assert!(pending.messages.is_empty());
            }
            pending.session.map(|session| session.session_id)
        })
        .collect()
}

#[tokio::test]
async fn a_deleted_sessions_queued_appends_are_drained_without_their_messages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memlayer.redb");
    // A file of format 4, which indexed the outbox by session.
    use crate::migrate::OUTBOX_BY_SESSION;
    drop(Store::open(&path).unwrap());
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(OUTBOX_BY_SESSION)
            .unwrap()
            .insert((1, 1), ())
            .unwrap();
        txn.open_table(crate::tables::META)
            .unwrap()
            .insert(crate::tables::FORMAT_VERSION_KEY, 4)
            .unwrap();
        txn.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    append_session_names(&store, &["a", "b", "c", "b"]).await;
    store
        .eraser()
        .delete_session(&Access::tenant_wide(TENANT), "b")
        .await
        .unwrap();
    assert_eq!(
        pending_sessions(&store),
        [Some("a".to_owned()), None, Some("c".to_owned()), None]
    );
    // Entries count towards a read's bound as messages do, so thousands a purge left are
    // drained a bounded batch at a time.
    assert_eq!(store.feed().pending_embeddings(2).unwrap().len(), 2);
    let pending = store.feed().pending_embeddings(100).unwrap();
    let vectors = pending
        .iter()
        .flat_map(|pending| &pending.messages)
        .map(|(key, _)| (*key, vec![1.0, 0.0]))
        .collect();
    store
        .feed()
        .store_embeddings(
            model("abc"),
            pending.iter().map(|pending| pending.seq).collect(),
            vectors,
        )
        .await
        .unwrap();
    assert_eq!(store.feed().pending_embedding_count().unwrap(), 0);
    assert_eq!(store.feed().vectors(None, 10).unwrap().len(), 2);
    drop(store);
    let db = redb::Database::open(&path).unwrap();
    let names: Vec<String> = redb::ReadableDatabase::begin_read(&db)
        .unwrap()
        .list_tables()
        .unwrap()
        .map(|table| redb::TableHandle::name(&table).to_owned())
        .collect();
    let listed = |table: &dyn redb::TableHandle| names.iter().any(|name| name == table.name());
    assert!(listed(&crate::tables::OUTBOX));
    assert!(!listed(&OUTBOX_BY_SESSION));
}

/// Erasures that race appends share the writer thread with them. redb edits a page its
/// transaction already wrote in place, without clearing what a removal shifts out, so an
/// erasure committed in the same group as appends to its page left erased text in a live
/// page, which compaction moves but never clears (the crash test found it; one mix in five did
/// here). Every erased text must be gone from the file's bytes after a compaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn erasures_racing_appends_leave_no_byte_of_erased_text() {
    const SESSIONS: usize = 40;
    for seed in 0..12 {
        let (dir, store) = open();
        let mut mix = crate::faults::SplitMix(seed);
        let mut live: BTreeMap<(String, u64), String> = BTreeMap::new();
        let mut erased = Vec::new();
        for _ in 0..30 {
            let mut racing = tokio::task::JoinSet::new();
            for _ in 0..12 {
                let store = store.clone();
                let session = format!("s{}", mix.below(SESSIONS));
                let roll = mix.below(100);
                if roll < 70 || live.is_empty() {
                    let token = format!("canary{:016x}", mix.next());
                    let text = format!("{} {token}", "words ".repeat(mix.below(60)));
                    racing.spawn(async move {
                        let append =
                            append_of(vec![message(Role::User, &text)], Some(owner("u", "a")));
                        let appended = store
                            .sessions()
                            .append(&Access::tenant_wide(TENANT), &session, append)
                            .await
                            .unwrap();
                        Some(((session, appended.first_index), token))
                    });
                } else if roll < 90 {
                    let keys: Vec<_> = live.keys().cloned().collect();
                    let key = keys[mix.below(keys.len())].clone();
                    erased.extend(live.remove(&key));
                    racing.spawn(async move {
                        // A deletion drawn earlier in this round may have gone first.
                        match store
                            .eraser()
                            .erase_message(&Access::tenant_wide(TENANT), &key.0, key.1)
                            .await
                        {
                            Ok(_) | Err(StoreError::SessionNotFound { .. }) => None,
                            Err(err) => panic!("{err}"),
                        }
                    });
                } else {
                    let doomed: Vec<_> = live
                        .keys()
                        .filter(|(s, _)| *s == session)
                        .cloned()
                        .collect();
                    erased.extend(doomed.iter().filter_map(|key| live.remove(key)));
                    racing.spawn(async move {
                        // The session may not exist yet: its first append may still be queued.
                        let _ = store
                            .eraser()
                            .delete_session(&Access::tenant_wide(TENANT), &session)
                            .await;
                        None
                    });
                }
            }
            while let Some(appended) = racing.join_next().await {
                live.extend(appended.unwrap());
            }
        }
        // An append queued behind a deletion of its session recreated it: the store, not
        // the model, says what is live.
        let stored: std::collections::HashSet<String> = (0..SESSIONS)
            .filter_map(|s| {
                store
                    .sessions()
                    .messages(
                        &Access::tenant_wide(TENANT),
                        &format!("s{s}"),
                        0,
                        usize::MAX,
                    )
                    .ok()
            })
            .flatten()
            .filter_map(|m| m.content.rsplit(' ').next().map(str::to_owned))
            .collect();
        store.eraser().compact().unwrap();
        let bytes = std::fs::read(dir.path().join("memlayer.redb")).unwrap();
        let left: Vec<&String> = erased
            .iter()
            .filter(|token| !stored.contains(*token))
            .filter(|token| bytes.windows(token.len()).any(|w| w == token.as_bytes()))
            .collect();
        assert!(
            left.is_empty(),
            "mix {seed}: erased texts left in the file: {left:?}"
        );
    }
}

#[tokio::test]
async fn deleting_a_session_drops_the_session_memories_it_was_merged_into() {
    let (_dir, store) = open();
    for session in ["first", "second"] {
        let append = append_of(vec![message(Role::User, "hi")], Some(owner("u", "a")));
        store
            .sessions()
            .append(&Access::tenant_wide(TENANT), session, append)
            .await
            .unwrap();
    }
    let memory = |text: &str, sessions: &[&str]| crate::SessionMemory {
        text: text.into(),
        sessions: sessions.iter().map(|s| (*s).to_owned()).collect(),
        updated_at: crate::Timestamp::now(),
    };
    let merged = memory("summary of both", &["first", "second"]);
    let (first, second) = (
        version(&store, TENANT, "first"),
        version(&store, TENANT, "second"),
    );
    store
        .memories()
        .put_session_memory(TENANT, "u", "a", merged, ("second", second))
        .await
        .unwrap();
    let other = memory("summary of the second only", &["second"]);
    store
        .memories()
        .put_session_memory(TENANT, "u", "b", other.clone(), ("second", second))
        .await
        .unwrap();

    let deleted = store
        .eraser()
        .delete_session(&Access::tenant_wide(TENANT), "first")
        .await
        .unwrap();
    assert_eq!(deleted.session_memories, 1);
    assert_eq!(
        store.memories().session_memory(TENANT, "u", "a").unwrap(),
        None
    );
    assert_eq!(
        store.memories().session_memory(TENANT, "u", "b").unwrap(),
        Some(other)
    );
    // A merge that read "first" before its deletion cannot save what it made of it.
    let late = memory("summary made before the deletion", &["first", "second"]);
    assert!(matches!(
        store
            .memories()
            .put_session_memory(TENANT, "u", "a", late, ("first", first))
            .await,
        Err(StoreError::SessionNotFound { .. })
    ));
    assert_eq!(
        store.memories().session_memory(TENANT, "u", "a").unwrap(),
        None
    );
}

/// Erasing a message drops the text of every run of its session, and no byte of it stays in
/// the file: the runs share pages, and redacting them one after another in one transaction
/// would leave the old text in the slack of a page the transaction already changed.
#[tokio::test]
async fn an_erased_message_takes_its_sessions_run_texts_out_of_every_page() {
    let (dir, store) = open();
    let all = Access::tenant_wide(TENANT);
    let append = append_of(vec![message(Role::User, "hello")], Some(owner("u", "a")));
    store.sessions().append(&all, "s", append).await.unwrap();
    let canary = |run: usize| format!("runcanary{run:03}x");
    for run in 0..40 {
        let recorded = NewRun {
            run_id: None,
            status: RunStatus::Completed,
            content: Some(canary(run)),
            tool_calls: vec![serde_json::json!({ "quoted": canary(run) })],
            error: Some(canary(run)),
            metadata: [("quoted".to_owned(), serde_json::json!(canary(run)))]
                .into_iter()
                .collect(),
        };
        store
            .sessions()
            .record_run(&all, "s", recorded)
            .await
            .unwrap();
    }
    let erased = store.eraser().erase_message(&all, "s", 0).await.unwrap();
    assert_eq!(erased.runs_redacted, 40);
    let runs = store.sessions().runs(&all, "s", 0, usize::MAX).unwrap();
    assert_eq!(runs.len(), 40);
    assert!(runs.iter().all(|run| run.redacted && run.content.is_none()));
    // Erasing another message finds nothing left to redact.
    let append = append_of(vec![message(Role::User, "again")], None);
    store.sessions().append(&all, "s", append).await.unwrap();
    assert_eq!(
        store
            .eraser()
            .erase_message(&all, "s", 1)
            .await
            .unwrap()
            .runs_redacted,
        0
    );
    store.eraser().compact().unwrap();
    let bytes = std::fs::read(dir.path().join("memlayer.redb")).unwrap();
    let left: Vec<String> = (0..40)
        .map(canary)
        .filter(|text| bytes.windows(text.len()).any(|w| w == text.as_bytes()))
        .collect();
    assert!(left.is_empty(), "run texts left in the file: {left:?}");
}

fn memory(user: &str, text: &str, at: crate::Timestamp) -> crate::Memory {
    crate::Memory {
        id: 0,
        revision: 0,
        tenant: TENANT.into(),
        user_id: user.into(),
        agent_id: None,
        text: text.into(),
        kind: crate::MemoryKind::Fact,
        tags: Vec::new(),
        source: None,
        created_at: at,
        updated_at: at,
        history: Vec::new(),
        vector: vec![0.5; 4],
        key: None,
    }
}

/// Ids a key sees must tell it nothing: not how many others were created (they are not
/// consecutive), nor which ids exist (they are not guessable), and they stay exact as
/// JavaScript numbers (below 2^53).
fn assert_opaque(what: &str, ids: &[u64]) {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len(), "{what}: ids repeat: {ids:?}");
    assert!(
        sorted.iter().all(|&id| (1..1 << 53).contains(&id)),
        "{what}: ids beyond 1..2^53: {ids:?}"
    );
    assert_ne!(
        sorted, ids,
        "{what}: ids increase in creation order: {ids:?}"
    );
    // 50 draws of 53 bits: the closest two are ~2^41 apart, and all below 2^50 with
    // probability 2^-150; sequential or narrow ids fail both.
    let closest = sorted.windows(2).map(|w| w[1] - w[0]).min().unwrap();
    assert!(closest > 1 << 20, "{what}: ids {closest} apart: {ids:?}");
    assert!(
        sorted[sorted.len() - 1] > 1 << 50,
        "{what}: narrow ids: {ids:?}"
    );
}

/// Memory, episode and erasure ids are drawn at random, and every listing keeps its order
/// (creation order, not id order) even when every record carries the same time.
#[tokio::test]
async fn ids_are_opaque_and_listings_keep_recording_order() {
    let (_dir, store) = open();
    // One time for everything: the order must come from the store, not the caller's clock.
    let at = crate::Timestamp::from_micros(1_700_000_000_000_000);

    let mut memories = Vec::new();
    for n in 0..50 {
        let id = store
            .memories()
            .put_memory(
                memory("ann", &format!("fact {n}"), at),
                &Access::tenant_wide(TENANT),
            )
            .await
            .unwrap();
        memories.push(id);
    }
    assert_opaque("memories", &memories);
    let listed: Vec<u64> = store
        .memories()
        .user_memories(TENANT, "ann")
        .unwrap()
        .iter()
        .map(|memory| memory.id)
        .collect();
    assert_eq!(listed, memories, "a user's memories, oldest first");
    // An update keeps the memory's place.
    let mut updated = store
        .memories()
        .memory(TENANT, memories[3])
        .unwrap()
        .unwrap();
    updated.text = "fact 3, corrected".into();
    assert_eq!(
        store
            .memories()
            .put_memory(updated, &Access::tenant_wide(TENANT))
            .await
            .unwrap(),
        memories[3]
    );
    assert!(
        store
            .eraser()
            .delete_memory(TENANT, memories[7])
            .await
            .unwrap()
    );
    let listed: Vec<u64> = store
        .memories()
        .user_memories(TENANT, "ann")
        .unwrap()
        .iter()
        .map(|memory| memory.id)
        .collect();
    let kept: Vec<u64> = memories
        .iter()
        .copied()
        .filter(|&id| id != memories[7])
        .collect();
    assert_eq!(listed, kept);

    let mut episodes = Vec::new();
    for n in 0..50 {
        let task = if n % 2 == 0 { "refund" } else { "upgrade" };
        let episode = crate::Episode {
            created_at: at,
            ..episode("ann", task, &format!("lesson {n}"))
        };
        episodes.push(store.memories().put_episode(episode).await.unwrap());
    }
    assert_opaque("episodes", &episodes);
    let listed: Vec<u64> = store
        .memories()
        .user_episodes(TENANT, "ann")
        .unwrap()
        .iter()
        .map(|episode| episode.id)
        .collect();
    assert_eq!(listed, episodes, "a user's episodes, oldest first");
    let recent: Vec<String> = store
        .memories()
        .recent_episodes(TENANT, "ann", "refund", 3, |_| true)
        .unwrap()
        .into_iter()
        .map(|episode| episode.lesson)
        .collect();
    assert_eq!(
        recent,
        ["lesson 48", "lesson 46", "lesson 44"],
        "newest first"
    );
    assert!(
        store
            .eraser()
            .delete_episode(TENANT, episodes[48])
            .await
            .unwrap()
    );
    let recent: Vec<String> = store
        .memories()
        .recent_episodes(TENANT, "ann", "refund", 2, |_| true)
        .unwrap()
        .into_iter()
        .map(|episode| episode.lesson)
        .collect();
    assert_eq!(recent, ["lesson 46", "lesson 44"]);

    let mut jobs = Vec::new();
    for n in 0..50 {
        jobs.push(
            store
                .eraser()
                .record_job(serde_json::json!({ "n": n }))
                .await
                .unwrap(),
        );
    }
    assert_opaque("erasures", &jobs);
    let pending: Vec<u64> = store
        .eraser()
        .pending_jobs()
        .unwrap()
        .iter()
        .map(|job| job.id)
        .collect();
    assert_eq!(pending, jobs, "pending erasures, oldest first");
    // Finished in another order than recorded: receipts stay newest (recorded) first.
    for n in [3, 0, 4, 2, 1] {
        let receipt = serde_json::json!({ "n": n });
        store
            .eraser()
            .finish_job(jobs[n], TENANT, receipt)
            .await
            .unwrap();
    }
    let receipts: Vec<serde_json::Value> = store.eraser().receipts(TENANT, 3).unwrap();
    assert_eq!(
        receipts,
        [4, 3, 2].map(|n| serde_json::json!({ "n": n })),
        "receipts, newest first"
    );
    let pending: Vec<u64> = store
        .eraser()
        .pending_jobs()
        .unwrap()
        .iter()
        .map(|job| job.id)
        .collect();
    assert_eq!(pending, jobs[5..]);
}

/// A drawn id that is taken is drawn again, in the transaction that stores the new record:
/// ids are unique per kind, and an erasure's id is never reused, not even once it finished
/// (its receipt keeps the id).
#[tokio::test]
async fn a_taken_id_is_drawn_again() {
    use crate::ids::scripted;
    let (_dir, store) = open();
    let at = crate::Timestamp::now();
    let first = memory("ann", "first", at);
    assert_eq!(
        store
            .put_memory_drawing(first, &Access::tenant_wide(TENANT), scripted([42]))
            .await
            .unwrap(),
        42
    );
    let second = memory("bob", "second", at);
    let all = Access::tenant_wide(TENANT);
    let drawn = store.put_memory_drawing(second, &all, scripted([42, 0, 43]));
    assert_eq!(drawn.await.unwrap(), 43);
    assert_eq!(
        store.memories().memory(TENANT, 42).unwrap().unwrap().text,
        "first"
    );

    let first = episode("ann", "refund", "first");
    assert_eq!(
        store
            .put_episode_drawing(first, scripted([42]))
            .await
            .unwrap(),
        42
    );
    let second = episode("ann", "refund", "second");
    let drawn = store.put_episode_drawing(second, scripted([42, 44]));
    assert_eq!(drawn.await.unwrap(), 44);
    assert_eq!(
        store
            .memories()
            .episode(TENANT, 42)
            .unwrap()
            .unwrap()
            .lesson,
        "first"
    );

    let job = serde_json::json!({ "n": 1 });
    assert_eq!(
        store.record_job_drawing(job, scripted([42])).await.unwrap(),
        42
    );
    let receipt = serde_json::json!({ "receipt": 1 });
    store
        .eraser()
        .finish_job(42, TENANT, receipt.clone())
        .await
        .unwrap();
    let job = serde_json::json!({ "n": 2 });
    let drawn = store.record_job_drawing(job, scripted([42, 45]));
    assert_eq!(drawn.await.unwrap(), 45);
    assert_eq!(store.eraser().receipt(TENANT, 42).unwrap(), Some(receipt));
    let pending: Vec<u64> = store
        .eraser()
        .pending_jobs()
        .unwrap()
        .iter()
        .map(|job| job.id)
        .collect();
    assert_eq!(pending, [45]);
}

/// The secret of the key in `fixtures/format-1.redb`.
const FORMAT_1_KEY: &str =
    "mlk_e3b45a81b0a6fdbf_9b2ab9845dfa38ce0b295ecb7aa37be8e058bbd5a02630159c03ee5f60f0b4af";

/// `fixtures/format-1.redb` was written by the build before ids were random (format 1,
/// commit 9e65768): a session, memories 1, 2 and 4 of ann and 3 of bob, episodes 1–4 of ann
/// (refund "one", "two", "four", standing upgrade "three"), erasures 1 and 2 finished with
/// receipts and 3 pending, and a service key — every memory and episode with the same time,
/// so only their ids ordered them. Opening it migrates it in place, once: every listing keeps
/// its order, and what is created afterwards comes after.
#[tokio::test]
async fn a_format_1_file_opens_with_its_order_and_new_records_come_after() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memlayer.redb");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/format-1.redb");
    std::fs::copy(fixture, &path).unwrap();
    let memories = |store: &Store, user: &str| -> Vec<(u64, String)> {
        let listed = store.memories().user_memories(TENANT, user).unwrap();
        listed.into_iter().map(|m| (m.id, m.text)).collect()
    };
    let lessons = |episodes: Vec<crate::Episode>| -> Vec<(u64, String)> {
        episodes.into_iter().map(|e| (e.id, e.lesson)).collect()
    };
    let pending = |store: &Store| -> Vec<u64> {
        store
            .eraser()
            .pending_jobs()
            .unwrap()
            .iter()
            .map(|job| job.id)
            .collect()
    };
    let owned = |pairs: &[(u64, &str)]| -> Vec<(u64, String)> {
        pairs
            .iter()
            .map(|(id, text)| (*id, (*text).to_owned()))
            .collect()
    };

    let store = Store::open(&path).unwrap();
    assert_eq!(contents(&store, "s1"), ["hello from format 1"]);
    assert_eq!(
        memories(&store, "ann"),
        owned(&[
            (1, "ann likes tea"),
            (2, "ann works at Acme"),
            (4, "ann has a cat")
        ])
    );
    assert_eq!(memories(&store, "bob"), owned(&[(3, "bob likes coffee")]));
    assert_eq!(
        lessons(store.memories().user_episodes(TENANT, "ann").unwrap()),
        owned(&[(1, "one"), (2, "two"), (3, "three"), (4, "four")])
    );
    let recent = store
        .memories()
        .recent_episodes(TENANT, "ann", "refund", 2, |_| true);
    assert_eq!(lessons(recent.unwrap()), owned(&[(4, "four"), (2, "two")]));
    assert_eq!(pending(&store), [3]);
    assert_eq!(
        store.eraser().receipts(TENANT, 10).unwrap(),
        [
            serde_json::json!({ "receipt": 2 }),
            serde_json::json!({ "receipt": 1 })
        ]
    );
    let key = store
        .keys()
        .authenticate_key(FORMAT_1_KEY, crate::Timestamp::now())
        .await;
    assert_eq!(key.unwrap().unwrap().role, crate::KeyRole::Service);

    let at = crate::Timestamp::from_micros(1_700_000_000_000_000);
    let all = Access::tenant_wide(TENANT);
    let memory_id = store
        .memories()
        .put_memory(memory("ann", "ann moved to Lyon", at), &all);
    let memory_id = memory_id.await.unwrap();
    let episode = crate::Episode {
        created_at: at,
        ..episode("ann", "refund", "five")
    };
    let episode_id = store.memories().put_episode(episode).await.unwrap();
    let job = store
        .eraser()
        .record_job(serde_json::json!({ "job": 4 }))
        .await
        .unwrap();
    store
        .eraser()
        .finish_job(job, TENANT, serde_json::json!({ "receipt": 4 }))
        .await
        .unwrap();
    for id in [memory_id, episode_id, job] {
        assert!(id > 4 && id < 1 << 53, "{id}");
    }
    store.shutdown();
    drop(store);

    // Migrated once: the counters are sequences now and the id-ordered tables are gone.
    {
        let db = redb::Database::open(&path).unwrap();
        let txn = redb::ReadableDatabase::begin_read(&db).unwrap();
        let meta = txn.open_table(crate::tables::META).unwrap();
        let value = |key: &str| meta.get(key).unwrap().map(|v| v.value());
        assert_eq!(value("format_version"), Some(crate::tables::FORMAT_VERSION));
        assert_eq!(value("next_memory_id"), None);
        assert_eq!(value("next_memory_seq"), Some(6));
        assert_eq!(value("next_episode_seq"), Some(6));
        assert_eq!(value("next_job_seq"), Some(5));
        let tables: Vec<String> = txn
            .list_tables()
            .unwrap()
            .map(|table| redb::TableHandle::name(&table).to_owned())
            .collect();
        for old in ["memory_owners", "episode_owners", "episode_tasks"] {
            assert!(
                !tables.iter().any(|t| t == old),
                "{old} is left: {tables:?}"
            );
        }
    }
    let store = Store::open(&path).unwrap();
    let mut ann = owned(&[
        (1, "ann likes tea"),
        (2, "ann works at Acme"),
        (4, "ann has a cat"),
    ]);
    ann.push((memory_id, "ann moved to Lyon".to_owned()));
    assert_eq!(memories(&store, "ann"), ann);
    let recent = store
        .memories()
        .recent_episodes(TENANT, "ann", "refund", 2, |_| true);
    assert_eq!(
        lessons(recent.unwrap()),
        owned(&[(episode_id, "five"), (4, "four")])
    );
    assert_eq!(pending(&store), [3]);
    assert_eq!(
        store.eraser().receipts(TENANT, 10).unwrap(),
        [4, 2, 1].map(|n| serde_json::json!({ "receipt": n }))
    );
}

/// A stored memory `ann` learnt from message 0 of session "s", later corrected by message
/// 1 of session "t" (both sessions ann's), then by message 0 of session "u": its history
/// holds the first two texts, each with its source.
async fn corrected_memory(store: &Store) -> crate::Memory {
    let all = Access::tenant_wide(TENANT);
    for session in ["s", "t", "u"] {
        let lines = vec![message(Role::User, "one"), message(Role::User, "two")];
        store
            .sessions()
            .append(&all, session, append_of(lines, Some(owner("ann", "a"))))
            .await
            .unwrap();
    }
    let at = crate::Timestamp::from_micros(1_700_000_000_000_000);
    let mut learnt = memory("ann", "ann lives in Oslo", at);
    learnt.source = Some(("s".into(), 0));
    learnt.id = store
        .memories()
        .put_memory(learnt.clone(), &all)
        .await
        .unwrap();
    for (text, source) in [
        ("ann lives in Rome", ("t", 1)),
        ("ann lives in Lyon", ("u", 0)),
    ] {
        let stored = store.memories().memory(TENANT, learnt.id).unwrap().unwrap();
        let mut corrected = stored.clone();
        corrected.history.push(crate::ReplacedText {
            text: stored.text.clone(),
            replaced_at: at,
            source: stored.source.clone(),
        });
        corrected.text = text.into();
        corrected.source = Some((source.0.into(), source.1));
        store.memories().put_memory(corrected, &all).await.unwrap();
    }
    store.memories().memory(TENANT, learnt.id).unwrap().unwrap()
}

/// Each replaced text keeps its source, every cited session lists the memory, and erasing a
/// source takes exactly what came from it: a replaced text leaves the history, the current
/// source deletes the memory.
#[tokio::test]
async fn a_memorys_replaced_texts_go_with_the_messages_they_came_from() {
    let (_dir, store) = open();
    let memory = corrected_memory(&store).await;
    let texts = |memory: &crate::Memory| -> Vec<(String, Option<(String, u64)>)> {
        let history = memory.history.iter();
        history
            .map(|h| (h.text.clone(), h.source.clone()))
            .collect()
    };
    assert_eq!(
        texts(&memory),
        [
            ("ann lives in Oslo".into(), Some(("s".into(), 0))),
            ("ann lives in Rome".into(), Some(("t".into(), 1))),
        ]
    );
    for session in ["s", "t", "u"] {
        assert_eq!(
            store.memories().memories_citing(TENANT, session).unwrap(),
            [memory.id]
        );
    }
    assert!(
        store
            .memories()
            .memories_citing("other", "s")
            .unwrap()
            .is_empty()
    );

    // Another message of a cited session cites nothing.
    let eraser = store.eraser();
    let other_message = eraser.forget_citation(TENANT, memory.id, "t", Some(0));
    assert_eq!(other_message.await.unwrap(), crate::Citation::Untouched);
    let of_t = store
        .eraser()
        .forget_citation(TENANT, memory.id, "t", Some(1))
        .await;
    assert_eq!(of_t.unwrap(), crate::Citation::Rewritten);
    let rewritten = store.memories().memory(TENANT, memory.id).unwrap().unwrap();
    assert_eq!(
        texts(&rewritten),
        [("ann lives in Oslo".into(), Some(("s".into(), 0)))]
    );
    assert_eq!(rewritten.revision, memory.revision + 1);
    assert!(
        store
            .memories()
            .memories_citing(TENANT, "t")
            .unwrap()
            .is_empty()
    );

    // A copy read before the erasure cannot put the erased text back.
    let all = Access::tenant_wide(TENANT);
    let stale = store.memories().put_memory(memory.clone(), &all);
    assert!(
        matches!(stale.await, Err(StoreError::MemoryChanged { .. })),
        "a stale revision was saved"
    );
    assert_eq!(
        store.memories().memory(TENANT, memory.id).unwrap().unwrap(),
        rewritten
    );

    let of_u = store
        .eraser()
        .forget_citation(TENANT, memory.id, "u", None)
        .await;
    assert_eq!(
        of_u.unwrap(),
        crate::Citation::Deleted {
            user_id: "ann".into()
        }
    );
    assert_eq!(store.memories().memory(TENANT, memory.id).unwrap(), None);
    for session in ["s", "t", "u"] {
        assert!(
            store
                .memories()
                .memories_citing(TENANT, session)
                .unwrap()
                .is_empty()
        );
    }
}

/// What an erasure that stopped between deleting text and its memories leaves is found
/// again: a cited message or session that is no longer stored.
#[tokio::test]
async fn citations_of_erased_text_are_found_after_an_interrupted_erasure() {
    let (_dir, store) = open();
    let memory = corrected_memory(&store).await;
    let all = Access::tenant_wide(TENANT);
    assert!(store.memories().orphaned_citations().unwrap().is_empty());
    store.eraser().erase_message(&all, "t", 0).await.unwrap();
    assert!(
        store.memories().orphaned_citations().unwrap().is_empty(),
        "uncited"
    );
    store.eraser().erase_message(&all, "t", 1).await.unwrap();
    store.eraser().delete_session(&all, "s").await.unwrap();
    let mut orphans = store.memories().orphaned_citations().unwrap();
    orphans.sort();
    let orphan = |session_id: &str, index| crate::OrphanedCitation {
        tenant: TENANT.into(),
        memory_id: memory.id,
        session_id: session_id.into(),
        index,
    };
    assert_eq!(orphans, [orphan("s", None), orphan("t", Some(1))]);
}

/// A memory record written before sources were kept (record version 1, file format 2): its
/// replaced texts have no known source, so opening the file lists them under the unknown
/// source, and an erasure's sweep of it takes them out; the memory itself stays.
#[tokio::test]
async fn replaced_texts_of_unknown_source_go_with_any_erasure() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memlayer.redb");
    let id = {
        let store = Store::open(&path).unwrap();
        let id = corrected_memory(&store).await.id;
        store.shutdown();
        id
    };
    {
        use crate::record::Record as _;
        use redb::ReadableTable as _;
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut memories = txn.open_table(crate::tables::MEMORIES).unwrap();
            let stored = memories.get(id).unwrap().unwrap().value().to_vec();
            let stored = crate::memories::MemoryRecord::decode(&stored).unwrap();
            let v1 = stored.as_version_1();
            let mut bytes = vec![1u8];
            bincode::serde::encode_into_std_write(&v1, &mut bytes, bincode::config::standard())
                .unwrap();
            memories.insert(id, bytes.as_slice()).unwrap();
            let mut meta = txn.open_table(crate::tables::META).unwrap();
            meta.insert(crate::tables::FORMAT_VERSION_KEY, 2).unwrap();
        }
        txn.delete_table(crate::tables::MEMORY_SOURCES).unwrap();
        txn.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let memory = store.memories().memory(TENANT, id).unwrap().unwrap();
    assert_eq!(memory.history.len(), 2);
    assert!(memory.history.iter().all(|h| h.source.is_none()));
    assert_eq!(store.memories().memories_citing(TENANT, "u").unwrap(), [id]);
    assert_eq!(
        store
            .memories()
            .memories_citing(TENANT, crate::UNKNOWN_SOURCE)
            .unwrap(),
        [id]
    );
    let eraser = store.eraser();
    let swept = eraser.forget_citation(TENANT, id, crate::UNKNOWN_SOURCE, None);
    assert_eq!(swept.await.unwrap(), crate::Citation::Rewritten);
    let memory = store.memories().memory(TENANT, id).unwrap().unwrap();
    assert!(memory.history.is_empty());
    assert_eq!(memory.text, "ann lives in Lyon");
    assert!(
        store
            .memories()
            .memories_citing(TENANT, crate::UNKNOWN_SOURCE)
            .unwrap()
            .is_empty()
    );
}

/// A keyed memory: one per key in a user's agent scope, found by its key, its key kept by
/// every update, and the key erased with the memory, from the file's bytes too.
#[tokio::test]
async fn a_memory_key_names_one_memory_and_goes_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
    let all = Access::tenant_wide(TENANT);
    let at = crate::Timestamp::from_micros(1_700_000_000_000_000);
    let key = "pref-canary-5d1e";
    let keyed = |text: &str| crate::Memory {
        key: Some(key.into()),
        ..memory("ann", text, at)
    };
    let by_key = |agent: Option<&str>| {
        store
            .memories()
            .memory_by_key(TENANT, "ann", agent, key)
            .unwrap()
    };
    assert!(by_key(None).is_none());
    let id = store
        .memories()
        .put_memory(keyed("tea"), &all)
        .await
        .unwrap();
    let stored = by_key(None).unwrap();
    assert_eq!((stored.id, stored.text.as_str()), (id, "tea"));
    assert_eq!(stored.key.as_deref(), Some(key));
    // The key is per agent scope and per user.
    assert!(by_key(Some("helper")).is_none());
    assert!(
        store
            .memories()
            .memory_by_key(TENANT, "bob", None, key)
            .unwrap()
            .is_none()
    );
    // A second memory under a taken key is refused: the caller must update the first.
    let taken = store.memories().put_memory(keyed("coffee"), &all).await;
    assert!(
        matches!(taken, Err(StoreError::MemoryChanged { memory_id }) if memory_id == id),
        "{taken:?}"
    );
    // An update keeps the key; it may not drop it, change it or move the memory's agent.
    let updated = crate::Memory {
        text: "green tea".into(),
        ..stored.clone()
    };
    store.memories().put_memory(updated, &all).await.unwrap();
    assert_eq!(by_key(None).unwrap().text, "green tea");
    let current = by_key(None).unwrap();
    for moved in [
        crate::Memory {
            key: None,
            ..current.clone()
        },
        crate::Memory {
            key: Some("other".into()),
            ..current.clone()
        },
        crate::Memory {
            agent_id: Some("helper".into()),
            ..current.clone()
        },
    ] {
        let refused = store.memories().put_memory(moved, &all).await;
        assert!(
            matches!(refused, Err(StoreError::InvalidInput { field: "key", .. })),
            "{refused:?}"
        );
    }
    // An unkeyed memory cannot take a key either.
    let plain = store
        .memories()
        .put_memory(memory("ann", "plain", at), &all)
        .await
        .unwrap();
    let plain = store.memories().memory(TENANT, plain).unwrap().unwrap();
    let keyed_later = store
        .memories()
        .put_memory(
            crate::Memory {
                key: Some("late".into()),
                ..plain
            },
            &all,
        )
        .await;
    assert!(matches!(keyed_later, Err(StoreError::InvalidInput { .. })));
    let invalid = store.memories().put_memory(
        crate::Memory {
            key: Some("no spaces".into()),
            ..memory("ann", "x", at)
        },
        &all,
    );
    assert!(matches!(
        invalid.await,
        Err(StoreError::InvalidId { kind: "key", .. })
    ));

    assert!(store.eraser().delete_memory(TENANT, id).await.unwrap());
    assert!(by_key(None).is_none());
    store.eraser().compact().unwrap();
    let bytes = std::fs::read(dir.path().join("memlayer.redb")).unwrap();
    assert!(
        !bytes.windows(key.len()).any(|w| w == key.as_bytes()),
        "the erased memory's key is left in the file"
    );
    // The key is free again.
    let again = store
        .memories()
        .put_memory(keyed("tea"), &all)
        .await
        .unwrap();
    assert_eq!(by_key(None).unwrap().id, again);
    store.shutdown();
}

/// A memory record written before keys (record version 2, file format 3) reads as unkeyed
/// and unchanged once the file is opened (and migrated).
#[tokio::test]
async fn memories_written_before_keys_read_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memlayer.redb");
    let stored = {
        let store = Store::open(&path).unwrap();
        let stored = corrected_memory(&store).await;
        store.shutdown();
        stored
    };
    {
        use crate::record::Record as _;
        use redb::ReadableTable as _;
        let db = redb::Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut memories = txn.open_table(crate::tables::MEMORIES).unwrap();
            let record = memories.get(stored.id).unwrap().unwrap().value().to_vec();
            let v2 = crate::memories::MemoryRecord::decode(&record)
                .unwrap()
                .as_version_2();
            let mut bytes = vec![2u8];
            bincode::serde::encode_into_std_write(&v2, &mut bytes, bincode::config::standard())
                .unwrap();
            memories.insert(stored.id, bytes.as_slice()).unwrap();
            let mut meta = txn.open_table(crate::tables::META).unwrap();
            meta.insert(crate::tables::FORMAT_VERSION_KEY, 3).unwrap();
        }
        txn.delete_table(crate::tables::MEMORY_KEYS).unwrap();
        txn.commit().unwrap();
    }
    let store = Store::open(&path).unwrap();
    let read = store.memories().memory(TENANT, stored.id).unwrap().unwrap();
    assert_eq!(read, stored);
    assert!(read.key.is_none());
    store.shutdown();
}

#[tokio::test]
async fn the_table_check_finds_every_listing_that_disagrees_with_its_record() {
    use crate::tables::{
        EPISODE_OWNERS, EPISODE_TASKS, MEMORY_KEYS, MEMORY_OWNERS, MEMORY_SOURCES,
    };

    let (_dir, store) = open();
    let all = Access::tenant_wide(TENANT);
    store
        .sessions()
        .append(
            &all,
            "s1",
            append_of(vec![message(Role::User, "hi")], Some(owner("ann", "a"))),
        )
        .await
        .unwrap();
    let at = crate::Timestamp::from_micros(1_700_000_000_000_000);
    let cited = crate::Memory {
        source: Some(("s1".into(), 0)),
        ..memory("ann", "ann drinks tea", at)
    };
    let cited = store.memories().put_memory(cited, &all).await.unwrap();
    let keyed = crate::Memory {
        key: Some("pref-key".into()),
        ..memory("ann", "ann drinks coffee", at)
    };
    let keyed = store.memories().put_memory(keyed, &all).await.unwrap();
    let episode = store
        .memories()
        .put_episode(episode("ann", "refund", "ask first"))
        .await
        .unwrap();
    let check = store.memories().check_tables().unwrap();
    assert!(check.is_consistent(), "{:?}", check.problems);
    assert_eq!((check.memories, check.episodes), (2, 1));

    // Each damage in turn, with the problem it must add.
    type Damage = Box<dyn FnOnce(&redb::WriteTransaction) -> crate::Result<()> + Send>;
    let damages: Vec<(Damage, String)> = vec![
        (
            Box::new(move |txn| {
                txn.open_table(MEMORY_OWNERS)?
                    .remove((TENANT, "ann", cited))?;
                Ok(())
            }),
            format!("memory {cited} is not listed in memory_owner_seqs"),
        ),
        (
            Box::new(|txn| {
                txn.open_table(MEMORY_KEYS)?
                    .remove((TENANT, "ann", "", "pref-key"))?;
                Ok(())
            }),
            format!("memory {keyed}: its key does not name it in memory_keys"),
        ),
        (
            Box::new(move |txn| {
                txn.open_table(MEMORY_SOURCES)?
                    .remove((TENANT, "s1", cited))?;
                Ok(())
            }),
            format!("memory {cited}: a session it cites is not listed in memory_sources"),
        ),
        (
            Box::new(|txn| {
                txn.open_table(MEMORY_OWNERS)?
                    .insert((TENANT, "bob", 999), 1)?;
                Ok(())
            }),
            "memory_owner_seqs lists memory 999, which is not stored".into(),
        ),
        (
            Box::new(move |txn| {
                txn.open_table(MEMORY_KEYS)?
                    .insert((TENANT, "ann", "", "other-key"), keyed)?;
                Ok(())
            }),
            format!("memory_keys lists memory {keyed} under a key or scope it does not have"),
        ),
        (
            Box::new(move |txn| {
                txn.open_table(MEMORY_SOURCES)?
                    .insert((TENANT, "s2", keyed), ())?;
                Ok(())
            }),
            format!("memory_sources lists memory {keyed} under a session it does not cite"),
        ),
        (
            Box::new(move |txn| {
                txn.open_table(EPISODE_OWNERS)?
                    .remove((TENANT, "ann", episode))?;
                Ok(())
            }),
            format!("episode {episode} is not listed in episode_owner_seqs"),
        ),
        (
            Box::new(move |txn| {
                txn.open_table(EPISODE_TASKS)?
                    .insert((TENANT, "ann", "upgrade", 77), episode)?;
                Ok(())
            }),
            format!(
                "episode_task_seqs lists episode {episode} under an owner or task it does not have"
            ),
        ),
    ];
    let mut expected = Vec::new();
    for (damage, problem) in damages {
        store.write(damage).await.unwrap();
        expected.push(problem);
        let check = store.memories().check_tables().unwrap();
        for problem in &expected {
            assert!(
                check.problems.contains(problem),
                "{problem:?} in {:?}",
                check.problems
            );
        }
        assert_eq!(check.problems.len(), expected.len(), "{:?}", check.problems);
    }
    // The report names tables and ids, never what users or callers wrote.
    let report = store.memories().check_tables().unwrap().problems.join("\n");
    for private in [
        "ann",
        "bob",
        "tea",
        "coffee",
        "pref-key",
        "other-key",
        "refund",
        "s1",
    ] {
        assert!(!report.contains(private), "{private} in {report}");
    }
}

/// The backend contract (`conformance.rs`) on the redb store.
mod conformance {
    use super::*;

    /// A store in a directory that lives as long as it does.
    struct TempStore {
        store: Store,
        _dir: TempDir,
    }

    impl std::ops::Deref for TempStore {
        type Target = Store;

        fn deref(&self) -> &Store {
            &self.store
        }
    }

    fn temp_store() -> TempStore {
        let (_dir, store) = open();
        TempStore { store, _dir }
    }

    crate::session_conformance!(temp_store());
    crate::feed_conformance!(temp_store());
    crate::eraser_conformance!(subject = temp_store(), subject.eraser());
    crate::model_conformance!(subject = temp_store(), subject.eraser());
    crate::tenant_conformance!(temp_store());
    crate::key_conformance!(temp_store());
    crate::memory_conformance!(temp_store());

    /// The same cases on a store served by a backend ([`Store::served_by`]) that is itself a
    /// file store: every call goes through the handles' dispatch and the traits, and must
    /// answer exactly as the file does.
    mod served {
        use std::sync::Arc;

        use super::{TempStore, open};
        use crate::backend::{
            Backend, BoxFuture, EraserBackend, FeedBackend, KeyBackend, MemoryBackend,
            SessionBackend, TenantBackend,
        };
        use crate::{Eraser, Result, Store};

        struct FileBackend {
            store: Store,
            eraser: Eraser,
        }

        impl Backend for FileBackend {
            fn sessions(&self) -> &dyn SessionBackend {
                &self.store
            }

            fn tenants(&self) -> &dyn TenantBackend {
                &self.store
            }

            fn keys(&self) -> &dyn KeyBackend {
                &self.store
            }

            fn memories(&self) -> &dyn MemoryBackend {
                &self.store
            }

            fn feed(&self) -> &dyn FeedBackend {
                &self.store
            }

            fn eraser(&self) -> &dyn EraserBackend {
                &self.eraser
            }

            fn commits(&self) -> tokio::sync::watch::Receiver<u64> {
                self.store.commits()
            }

            fn check_ready(&self) -> BoxFuture<'_, Result<()>> {
                Box::pin(self.store.read(|store| store.check_ready()))
            }

            fn shutdown(&self) {
                self.store.shutdown();
            }
        }

        fn served_store() -> TempStore {
            let (_dir, file) = open();
            let eraser = file.take_eraser().unwrap();
            let backend = FileBackend {
                store: file,
                eraser,
            };
            TempStore {
                store: Store::served_by(Arc::new(backend)),
                _dir,
            }
        }

        crate::session_conformance!(served_store());
        crate::feed_conformance!(served_store());
        crate::eraser_conformance!(subject = served_store(), subject.take_eraser().unwrap());
        crate::model_conformance!(subject = served_store(), subject.take_eraser().unwrap());
        crate::tenant_conformance!(served_store());
        crate::key_conformance!(served_store());
        crate::memory_conformance!(served_store());
    }
}

/// The bytes of the file's pages the store holds in memory now.
fn cached_bytes(store: &Store) -> usize {
    use redb::ReadableDatabase as _;
    let db = store.hold_as_reopening();
    db.as_ref()
        .expect("the file is open")
        .cache_stats()
        .used_bytes()
}

#[tokio::test]
async fn the_page_cache_stays_within_the_size_the_store_was_opened_with() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memlayer.redb");
    let store = Store::open(&path).unwrap();
    let text = "words of a long answer ".repeat(400);
    for session in 0..40 {
        let messages = (0..20).map(|_| message(Role::User, &text)).collect();
        store
            .sessions()
            .append(
                &Access::tenant_wide(TENANT),
                &format!("s{session}"),
                append_of(messages, Some(owner("u", "a"))),
            )
            .await
            .unwrap();
    }
    store.shutdown();
    drop(store);
    let file_bytes = usize::try_from(std::fs::metadata(&path).unwrap().len()).unwrap();
    assert!(
        file_bytes > 8 << 20,
        "{file_bytes} bytes: too small to tell"
    );

    let small = 1 << 20;
    for (options, bound) in [
        (crate::StoreOptions::default(), crate::DEFAULT_CACHE_BYTES),
        (
            crate::StoreOptions::default().with_cache_bytes(small),
            small,
        ),
    ] {
        // Opening checks every page; the reads then go through the cache again.
        let store = Store::open_with(&path, options).unwrap();
        for session in 0..40 {
            assert_eq!(contents(&store, &format!("s{session}")).len(), 20);
        }
        let cached = cached_bytes(&store);
        assert!(cached <= bound, "{cached} bytes cached, at most {bound}");
        if bound == small {
            assert!(
                cached > small / 2,
                "{cached} bytes: the small cache is used"
            );
        } else {
            assert!(
                cached > 4 * small,
                "{cached} bytes: the default cache holds the reads"
            );
        }
        store.shutdown();
    }
}

/// A message erasure in a sealed session re-seals what is left under a new key and destroys
/// the old one at the compaction that ends it, which then has no file to rewrite: no byte of
/// the old key is left in the key file, and the erased text was never in the store file.
#[tokio::test]
async fn a_message_erasure_destroys_its_sessions_old_key_instead_of_compacting() {
    let (dir, store) = open();
    let all = Access::tenant_wide(TENANT);
    let texts = ["keepcanary0x", "erasedcanary1x", "keepcanary2x"];
    let messages = texts.map(|text| message(Role::User, text)).to_vec();
    let append = append_of(messages, Some(owner("u", "a")));
    store.sessions().append(&all, "s", append).await.unwrap();
    let keys = store.data_keys().unwrap();
    let [(slot, before)] = keys.owners().unwrap()[..] else {
        panic!("one key for one session");
    };
    let old = keys.key(slot, before).unwrap();
    let snapshot = store.sessions().snapshot(&all, "s").unwrap().unwrap();

    store.eraser().erase_message(&all, "s", 1).await.unwrap();
    assert_eq!(
        contents(&store, "s"),
        [texts[0], texts[2]],
        "the rest reads under the new key"
    );
    let read_before = snapshot.messages_at(&[1]).unwrap();
    assert_eq!(
        read_before[0].content, texts[1],
        "a snapshot taken before still reads it"
    );
    let key_file = crate::store::sibling(
        &dir.path().join("memlayer.redb"),
        crate::store::KEY_FILE_SUFFIX,
    );
    let in_key_file = || {
        std::fs::read(&key_file)
            .unwrap()
            .windows(old.bytes().len())
            .any(|w| w == old.bytes())
    };
    assert!(in_key_file(), "the old key stays until the compaction");
    // The compaction waits for reads begun before the erasure.
    let compaction = {
        let store = store.clone();
        std::thread::spawn(move || store.eraser().compact())
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(!compaction.is_finished(), "it waits for the snapshot");
    drop(snapshot);
    assert!(!compaction.join().unwrap().unwrap(), "no file compaction");
    assert!(!in_key_file(), "the old key's bytes are overwritten");
    let owners = keys.owners().unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].1.generation, before.generation + 1);
    let file = std::fs::read(dir.path().join("memlayer.redb")).unwrap();
    for text in texts {
        assert!(
            !file.windows(text.len()).any(|w| w == text.as_bytes()),
            "{text} is sealed"
        );
    }
    assert_eq!(contents(&store, "s"), [texts[0], texts[2]]);
}

/// A backup holds no key: its sessions are plain, and an erasure in one of them compacts the
/// file as before sealing.
#[tokio::test]
async fn a_backup_is_plain_and_its_erasures_compact() {
    let (dir, store) = open();
    let all = Access::tenant_wide(TENANT);
    let texts = ["plaincanary0x", "plaincanary1x"];
    let append = append_of(
        texts.map(|t| message(Role::User, t)).to_vec(),
        Some(owner("u", "a")),
    );
    store.sessions().append(&all, "s", append).await.unwrap();
    let path = dir.path().join("backup.redb");
    store
        .backup(std::fs::File::create_new(&path).unwrap())
        .unwrap();
    let file = std::fs::read(&path).unwrap();
    assert!(
        texts
            .iter()
            .all(|t| file.windows(t.len()).any(|w| w == t.as_bytes()))
    );

    let restored = Store::open(&path).unwrap();
    assert_eq!(contents(&restored, "s"), texts);
    restored.eraser().erase_message(&all, "s", 0).await.unwrap();
    assert!(
        restored.eraser().compact().unwrap(),
        "the file is compacted"
    );
    let file = std::fs::read(&path).unwrap();
    assert!(
        !file
            .windows(texts[0].len())
            .any(|w| w == texts[0].as_bytes())
    );
    assert_eq!(contents(&restored, "s"), [texts[1]]);
}
