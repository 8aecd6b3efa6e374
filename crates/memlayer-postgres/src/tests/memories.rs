//! Memories, session memories and episodes beyond the conformance cases: writers racing on
//! two stores, the erasures and the keys they destroy, sealing, batched filtered pages.

use std::path::PathBuf;

use memlayer_store::{
    Access, Citation, Episode, Memory, MemoryKind, Outcome, ReplacedText, SessionMemory,
    StoreError, Timestamp,
};

use super::files::{data_directory, files_with, found_in_files};
use super::{creating, fresh_store, say, store_error};
use crate::PgStore;
use crate::test_cluster;

fn all() -> Access {
    Access::tenant_wide("t")
}

fn memory(user: &str, text: &str) -> Memory {
    Memory {
        id: 0,
        revision: 0,
        tenant: "t".into(),
        user_id: user.into(),
        agent_id: None,
        text: text.into(),
        kind: MemoryKind::Fact,
        tags: vec!["tag".into()],
        source: None,
        created_at: Timestamp::from_micros(1),
        updated_at: Timestamp::from_micros(1),
        history: Vec::new(),
        vector: vec![0.1, -2.5e-7, f32::MAX],
        key: None,
    }
}

fn episode(user: &str, lesson: &str, source: Option<&str>) -> Episode {
    Episode {
        id: 0,
        tenant: "t".into(),
        user_id: user.into(),
        agent_id: None,
        task_type: "refund".into(),
        description: "tried".into(),
        outcome: Outcome::Partial,
        reflection: String::new(),
        lesson: lesson.into(),
        standing: false,
        source_session: source.map(str::to_owned),
        created_at: Timestamp::from_micros(2),
    }
}

fn canary(what: &str) -> String {
    format!("{what}-canary-{}", uuid::Uuid::new_v4().simple())
}

async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// The data key bytes a memory's row is sealed under.
async fn memory_key(client: &tokio_postgres::Client, id: u64) -> Vec<u8> {
    client
        .query_one(
            "SELECT k.key FROM memories m
             JOIN data_keys k ON k.tenant = m.tenant AND k.key_id = m.key_id WHERE m.id = $1",
            &[&(id as i64)],
        )
        .await
        .unwrap()
        .get(0)
}

/// Waits until `n` sessions of the database wait on a lock.
async fn until_waiting(client: &tokio_postgres::Client, n: i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let waiting = count(
            client,
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .await;
        if waiting == n {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{waiting} wait");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_updating_one_revision_never_both_win() {
    let db = test_cluster::database().await.unwrap();
    let (a, b) = (db.store().await.unwrap(), db.store().await.unwrap());
    let id = a.put_memory(memory("ann", "v1"), &all()).await.unwrap();
    let read = a.memory("t", id).await.unwrap().unwrap();
    // Both updates reach the row lock while a third transaction holds it: both have read
    // nothing yet, and both then go.
    let mut holder = db.connect().await.unwrap();
    let hold = holder.transaction().await.unwrap();
    hold.execute(
        "SELECT 1 FROM memories WHERE id = $1 FOR UPDATE",
        &[&(id as i64)],
    )
    .await
    .unwrap();
    let update = |store: PgStore, text: &'static str| {
        let memory = Memory {
            text: text.into(),
            ..read.clone()
        };
        tokio::spawn(async move { store.put_memory(memory, &all()).await })
    };
    let (first, second) = (update(a, "from a"), update(b, "from b"));
    until_waiting(&db.connect().await.unwrap(), 2).await;
    hold.rollback().await.unwrap();
    let results = [first.await.unwrap(), second.await.unwrap()];
    let won: Vec<_> = results.iter().filter(|r| r.is_ok()).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    let lost = results.into_iter().find(Result::is_err).unwrap();
    assert!(matches!(
        store_error(lost),
        StoreError::MemoryChanged { memory_id } if memory_id == id
    ));
    let store = db.store().await.unwrap();
    let now = store.memory("t", id).await.unwrap().unwrap();
    assert_eq!(now.revision, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_taking_one_key_never_both_win() {
    let db = test_cluster::database().await.unwrap();
    let (a, b) = (
        std::sync::Arc::new(db.store().await.unwrap()),
        std::sync::Arc::new(db.store().await.unwrap()),
    );
    for round in 0..20 {
        // The NULL agent's scope and an agent's, alike.
        let agent = (round % 2 == 1).then(|| "helper".to_owned());
        let keyed = |text: &str| Memory {
            key: Some(format!("k{round}")),
            agent_id: agent.clone(),
            ..memory("ann", text)
        };
        let put = |store: std::sync::Arc<PgStore>, memory: Memory| {
            tokio::spawn(async move { store.put_memory(memory, &all()).await })
        };
        let (x, y) = (put(a.clone(), keyed("a")), put(b.clone(), keyed("b")));
        let results = [x.await.unwrap(), y.await.unwrap()];
        let winners: Vec<u64> = results
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .copied()
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        let loser = results.into_iter().find(Result::is_err).unwrap();
        assert!(
            matches!(store_error(loser), StoreError::MemoryChanged { memory_id } if memory_id == winners[0]),
            "round {round}: the refusal names the memory holding the key"
        );
        let found = a
            .memory_by_key("t", "ann", agent.as_deref(), &format!("k{round}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.id, winners[0]);
    }
    // Past the check that the key is free, racing on the insert itself: a transaction that
    // holds the key uncommitted until the puts wait on it, then commits.
    let mut holder = db.connect().await.unwrap();
    let hold = holder.transaction().await.unwrap();
    hold.execute(
        "INSERT INTO memories (tenant, id, user_id, key, revision, key_id, body)
         VALUES ('t', 1, 'ann', 'raced', 1, gen_random_uuid(), '')",
        &[],
    )
    .await
    .unwrap();
    let raced = |store: std::sync::Arc<PgStore>, text: &str| {
        let memory = Memory {
            key: Some("raced".into()),
            ..memory("ann", text)
        };
        tokio::spawn(async move { store.put_memory(memory, &all()).await })
    };
    let (x, y) = (raced(a.clone(), "a"), raced(b.clone(), "b"));
    // One on the key's index entry, one on the user's insert lock.
    until_waiting(&db.connect().await.unwrap(), 2).await;
    hold.commit().await.unwrap();
    for result in [x.await.unwrap(), y.await.unwrap()] {
        assert!(matches!(
            store_error(result),
            StoreError::MemoryChanged { memory_id: 1 }
        ));
    }
    db.connect()
        .await
        .unwrap()
        .execute("DELETE FROM memories WHERE id = 1", &[])
        .await
        .unwrap();
    assert_eq!(a.user_memories("t", "ann").await.unwrap().len(), 20);
}

#[tokio::test]
async fn a_deleted_memorys_key_is_in_no_file_after_a_reclaim() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let client = db.connect().await.unwrap();
    let secret = canary("memory");
    let erased = store
        .put_memory(memory("ann", &secret), &all())
        .await
        .unwrap();
    let kept = store
        .put_memory(memory("ann", "kept"), &all())
        .await
        .unwrap();
    let (erased_key, kept_key) = (
        memory_key(&client, erased).await,
        memory_key(&client, kept).await,
    );
    assert_ne!(erased_key, kept_key, "a key per memory");
    let dir = data_directory(&client).await;
    assert_eq!(
        found_in_files(&dir, &[&erased_key, &kept_key, secret.as_bytes()]),
        [true, true, false],
        "the control: the scan sees stored keys; the text is sealed"
    );

    assert!(store.delete_memory("t", erased).await.unwrap());
    assert!(!store.delete_memory("t", erased).await.unwrap());
    assert_eq!(
        count(&client, "SELECT count(*) FROM destroyed_keys").await,
        1
    );
    let reclaimed = store.reclaim_destroyed_keys().await.unwrap();
    assert_eq!(reclaimed.keys, 1);
    let dir = data_directory(&client).await;
    let [erased_in, kept_in] = &files_with(&dir, &[&erased_key, &kept_key])[..] else {
        unreachable!("one list per needle");
    };
    assert_eq!(erased_in, &Vec::<PathBuf>::new(), "the destroyed key");
    assert!(
        !kept_in.is_empty(),
        "the control: the live key is still found"
    );
    assert_eq!(store.memory("t", erased).await.unwrap(), None);
    assert_eq!(store.memory("t", kept).await.unwrap().unwrap().text, "kept");
}

#[tokio::test]
async fn sealed_memory_texts_reach_no_file_while_plain_identifiers_do() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    store
        .append(&all(), "s", creating("hello", "ann"))
        .await
        .unwrap();
    let (text, old, tag) = (canary("text"), canary("history"), canary("tag"));
    let (summary, lesson, reflection) = (canary("summary"), canary("lesson"), canary("reflect"));
    // A key is a plain identifier (it must be unique in SQL): the scan's control.
    let control = canary("control");
    let new = Memory {
        tags: vec![tag.clone()],
        history: vec![ReplacedText {
            text: old.clone(),
            replaced_at: Timestamp::from_micros(1),
            source: Some(("s".into(), 0)),
        }],
        key: Some(control.clone()),
        ..memory("ann", &text)
    };
    store.put_memory(new, &all()).await.unwrap();
    let version = store.version(&all(), "s").await.unwrap().unwrap();
    let merged = SessionMemory {
        text: summary.clone(),
        sessions: vec!["s".into()],
        updated_at: Timestamp::from_micros(3),
    };
    store
        .put_session_memory("t", "ann", "agent", merged, ("s", version))
        .await
        .unwrap();
    let learnt = Episode {
        reflection: reflection.clone(),
        ..episode("ann", &lesson, Some("s"))
    };
    store.put_episode(learnt).await.unwrap();
    let client = db.connect().await.unwrap();
    let dir = data_directory(&client).await;
    let needles: Vec<&[u8]> = [&control, &text, &old, &tag, &summary, &lesson, &reflection]
        .iter()
        .map(|s| s.as_bytes())
        .collect();
    assert_eq!(
        found_in_files(&dir, &needles),
        [true, false, false, false, false, false, false]
    );
}

#[tokio::test]
async fn forgetting_a_citation_reseals_the_kept_history_under_a_new_key() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let client = db.connect().await.unwrap();
    for session in ["s", "u"] {
        store
            .append(&all(), session, creating("one", "ann"))
            .await
            .unwrap();
        store.append(&all(), session, say("two")).await.unwrap();
    }
    let replaced = |text: &str, session: &str, index: u64| ReplacedText {
        text: text.into(),
        replaced_at: Timestamp::from_micros(5),
        source: Some((session.into(), index)),
    };
    let new = Memory {
        source: Some(("u".into(), 1)),
        history: vec![
            replaced("from s0", "s", 0),
            replaced("from s1", "s", 1),
            replaced("from u0", "u", 0),
        ],
        ..memory("ann", "now")
    };
    let id = store.put_memory(new, &all()).await.unwrap();
    let key_before = memory_key(&client, id).await;
    assert_eq!(
        store
            .forget_citation("t", id, "missing", None)
            .await
            .unwrap(),
        Citation::Untouched
    );
    assert_eq!(
        store.forget_citation("t", id, "s", Some(0)).await.unwrap(),
        Citation::Rewritten
    );
    let after = store.memory("t", id).await.unwrap().unwrap();
    assert_eq!(after.revision, 2);
    let texts: Vec<_> = after.history.iter().map(|h| h.text.as_str()).collect();
    assert_eq!(texts, ["from s1", "from u0"]);
    assert_ne!(memory_key(&client, id).await, key_before, "a new key");
    assert_eq!(
        count(&client, "SELECT count(*) FROM destroyed_keys").await,
        1
    );
    assert_eq!(
        count(&client, "SELECT count(*) FROM data_keys").await,
        // Two sessions' keys and the memory's new one.
        3
    );
    assert_eq!(store.memories_citing("t", "s").await.unwrap(), [id]);
    assert_eq!(
        store.forget_citation("t", id, "s", None).await.unwrap(),
        Citation::Rewritten
    );
    assert!(store.memories_citing("t", "s").await.unwrap().is_empty());
    // Another tenant's memory is out of reach; the source takes the whole memory.
    assert_eq!(
        store.forget_citation("other", id, "u", None).await.unwrap(),
        Citation::Untouched
    );
    assert_eq!(
        store.forget_citation("t", id, "u", Some(1)).await.unwrap(),
        Citation::Deleted {
            user_id: "ann".into()
        }
    );
    assert_eq!(store.memory("t", id).await.unwrap(), None);
    assert!(store.memories_citing("t", "u").await.unwrap().is_empty());
    assert_eq!(
        count(&client, "SELECT count(*) FROM destroyed_keys").await,
        3
    );
    assert_eq!(count(&client, "SELECT count(*) FROM data_keys").await, 2);
}

#[tokio::test]
async fn an_update_that_stops_citing_a_message_moves_to_a_new_key() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let client = db.connect().await.unwrap();
    store
        .append(&all(), "s", creating("one", "ann"))
        .await
        .unwrap();
    let cited = Memory {
        source: Some(("s".into(), 0)),
        ..memory("ann", "from s")
    };
    let id = store.put_memory(cited, &all()).await.unwrap();
    let first = memory_key(&client, id).await;
    // A correction that keeps the old text (and its source) in the history keeps the key.
    let stored = store.memory("t", id).await.unwrap().unwrap();
    let corrected = Memory {
        text: "corrected".into(),
        source: None,
        history: vec![ReplacedText {
            text: stored.text.clone(),
            replaced_at: Timestamp::from_micros(9),
            source: stored.source.clone(),
        }],
        ..stored
    };
    store.put_memory(corrected, &all()).await.unwrap();
    assert_eq!(memory_key(&client, id).await, first);
    // One that drops a cited text does not: the text from s must die with s.
    let stored = store.memory("t", id).await.unwrap().unwrap();
    let many = Memory {
        history: stored
            .history
            .iter()
            .cloned()
            .chain(
                (0..memlayer_store::MAX_MEMORY_HISTORY).map(|n| ReplacedText {
                    text: format!("old {n}"),
                    replaced_at: Timestamp::from_micros(9),
                    source: None,
                }),
            )
            .collect(),
        ..stored
    };
    store.put_memory(many, &all()).await.unwrap();
    assert_ne!(memory_key(&client, id).await, first);
    assert_eq!(
        count(&client, "SELECT count(*) FROM destroyed_keys").await,
        1
    );
    assert!(store.memories_citing("t", "s").await.unwrap().is_empty());
}

#[tokio::test]
async fn erasing_episodes_and_session_memories_destroys_their_keys() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let client = db.connect().await.unwrap();
    for session in ["s", "u"] {
        store
            .append(&all(), session, creating("one", "ann"))
            .await
            .unwrap();
    }
    let one = store
        .put_episode(episode("ann", "one", None))
        .await
        .unwrap();
    store
        .put_episode(episode("ann", "two", Some("s")))
        .await
        .unwrap();
    store
        .put_episode(episode("ann", "three", Some("s")))
        .await
        .unwrap();
    store
        .put_episode(episode("ann", "four", Some("u")))
        .await
        .unwrap();
    assert_eq!(count(&client, "SELECT count(*) FROM data_keys").await, 6);
    assert!(!store.delete_episode("other", one).await.unwrap());
    assert!(store.delete_episode("t", one).await.unwrap());
    assert_eq!(
        store
            .delete_user_episodes("t", "ann", Some("s"))
            .await
            .unwrap(),
        2
    );
    let left: Vec<_> = store
        .user_episodes("t", "ann")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.lesson)
        .collect();
    assert_eq!(left, ["four"]);
    assert_eq!(count(&client, "SELECT count(*) FROM data_keys").await, 3);
    assert_eq!(
        store.delete_user_episodes("t", "ann", None).await.unwrap(),
        1
    );
    assert_eq!(count(&client, "SELECT count(*) FROM data_keys").await, 2);

    let (vs, vu) = (
        store.version(&all(), "s").await.unwrap().unwrap(),
        store.version(&all(), "u").await.unwrap().unwrap(),
    );
    let summary = |sessions: &[&str]| SessionMemory {
        text: "summary".into(),
        sessions: sessions.iter().map(|s| (*s).to_owned()).collect(),
        updated_at: Timestamp::from_micros(4),
    };
    store
        .put_session_memory("t", "ann", "a", summary(&["s"]), ("s", vs))
        .await
        .unwrap();
    store
        .put_session_memory("t", "ann", "a", summary(&["s", "u"]), ("u", vu))
        .await
        .unwrap();
    store
        .put_session_memory("t", "ann", "b", summary(&["u"]), ("u", vu))
        .await
        .unwrap();
    assert_eq!(count(&client, "SELECT count(*) FROM data_keys").await, 4);
    // A save that no longer lists s moves to a new key: what s gave it dies with the old.
    store
        .put_session_memory("t", "ann", "b", summary(&["s"]), ("s", vs))
        .await
        .unwrap();
    assert_eq!(count(&client, "SELECT count(*) FROM data_keys").await, 4);
    assert_eq!(
        count(&client, "SELECT count(*) FROM destroyed_keys").await,
        5
    );
    assert_eq!(
        store
            .drop_session_memories("t", "ann", Some("u"))
            .await
            .unwrap(),
        1
    );
    assert_eq!(store.session_memory("t", "ann", "a").await.unwrap(), None);
    assert!(
        store
            .session_memory("t", "ann", "b")
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        store.drop_session_memories("t", "ann", None).await.unwrap(),
        1
    );
    assert_eq!(count(&client, "SELECT count(*) FROM data_keys").await, 2);
    assert_eq!(
        count(&client, "SELECT count(*) FROM destroyed_keys").await,
        7
    );
    assert!(matches!(
        store_error(store.drop_session_memories("t", "a/b", None).await),
        StoreError::InvalidId { .. }
    ));
}

#[tokio::test]
async fn filtered_pages_read_past_one_batch() {
    let store = fresh_store().await;
    let mut saved = Vec::new();
    for n in 0..300 {
        saved.push(
            store
                .put_memory(memory("ann", &format!("fact {n}")), &all())
                .await
                .unwrap(),
        );
    }
    let rare = |m: &Memory| m.text.ends_with("99");
    let page = store
        .user_memories_page("t", "ann", None, 5, &rare)
        .await
        .unwrap();
    let ids: Vec<u64> = page.iter().map(|m| m.id).collect();
    assert_eq!(ids, [saved[99], saved[199], saved[299]]);
    let after = store
        .user_memories_page("t", "ann", Some(saved[199]), 5, &rare)
        .await
        .unwrap();
    assert_eq!(after.len(), 1);
    assert_eq!(store.user_memories("t", "ann").await.unwrap().len(), 300);
    for n in 0..300 {
        store
            .put_episode(episode("ann", &format!("lesson {n}"), None))
            .await
            .unwrap();
    }
    let rare = |e: &Episode| e.lesson.ends_with("00");
    let found: Vec<_> = store
        .recent_episodes("t", "ann", "refund", 10, &rare)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.lesson)
        .collect();
    assert_eq!(found, ["lesson 200", "lesson 100"]);
    assert_eq!(store.user_episodes("t", "ann").await.unwrap().len(), 300);
}

#[tokio::test]
async fn citations_of_deleted_sessions_and_messages_are_orphaned() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    for session in ["s", "u"] {
        store
            .append(&all(), session, creating("one", "ann"))
            .await
            .unwrap();
        store.append(&all(), session, say("two")).await.unwrap();
    }
    let new = Memory {
        source: Some(("s".into(), 0)),
        history: vec![ReplacedText {
            text: "old".into(),
            replaced_at: Timestamp::from_micros(1),
            source: Some(("u".into(), 1)),
        }],
        ..memory("ann", "now")
    };
    let id = store.put_memory(new, &all()).await.unwrap();
    assert!(store.orphaned_citations().await.unwrap().is_empty());
    store.delete_session(&all(), "s").await.unwrap();
    // What a message erasure leaves until the memories citing it are rewritten.
    db.connect()
        .await
        .unwrap()
        .execute(
            "DELETE FROM messages WHERE session_id = 'u' AND idx = 1",
            &[],
        )
        .await
        .unwrap();
    let orphans: Vec<_> = store
        .orphaned_citations()
        .await
        .unwrap()
        .into_iter()
        .map(|o| (o.tenant, o.memory_id, o.session_id, o.index))
        .collect();
    assert_eq!(
        orphans,
        [
            ("t".to_owned(), id, "s".to_owned(), None),
            ("t".to_owned(), id, "u".to_owned(), Some(1)),
        ]
    );
    assert_eq!(
        store.forget_citation("t", id, "u", Some(1)).await.unwrap(),
        Citation::Rewritten
    );
    assert_eq!(
        store.forget_citation("t", id, "s", None).await.unwrap(),
        Citation::Deleted {
            user_id: "ann".into()
        }
    );
    assert!(store.orphaned_citations().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_body_moved_to_another_users_row_does_not_open() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let id = store
        .put_memory(memory("ann", "ann's"), &all())
        .await
        .unwrap();
    db.connect()
        .await
        .unwrap()
        .execute(
            "UPDATE memories SET user_id = 'bob' WHERE id = $1",
            &[&(id as i64)],
        )
        .await
        .unwrap();
    assert!(matches!(
        store.memory("t", id).await,
        Err(crate::PostgresError::Corrupted { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_citing_a_session_deleted_meanwhile_are_refused() {
    let db = test_cluster::database().await.unwrap();
    let store = std::sync::Arc::new(db.store().await.unwrap());
    store
        .append(&all(), "s", creating("one", "ann"))
        .await
        .unwrap();
    let version = store.version(&all(), "s").await.unwrap().unwrap();
    // A deletion of the session, begun before the writes check it and committed after.
    let mut holder = db.connect().await.unwrap();
    let deleting = holder.transaction().await.unwrap();
    deleting
        .execute(
            "DELETE FROM sessions WHERE tenant = 't' AND session_id = 's'",
            &[],
        )
        .await
        .unwrap();
    let cites = Memory {
        source: Some(("s".into(), 0)),
        ..memory("ann", "from s")
    };
    let merged = SessionMemory {
        text: "from s".into(),
        sessions: vec!["s".into()],
        updated_at: Timestamp::from_micros(1),
    };
    let writes = [
        tokio::spawn({
            let store = store.clone();
            async move { store.put_memory(cites, &all()).await.map(drop) }
        }),
        tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .put_episode(episode("ann", "x", Some("s")))
                    .await
                    .map(drop)
            }
        }),
        tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .put_session_memory("t", "ann", "agent", merged, ("s", version))
                    .await
            }
        }),
    ];
    until_waiting(&db.connect().await.unwrap(), 3).await;
    deleting.commit().await.unwrap();
    for write in writes {
        assert!(matches!(
            store_error(write.await.unwrap()),
            StoreError::SessionNotFound { .. }
        ));
    }
    assert!(store.user_memories("t", "ann").await.unwrap().is_empty());
    assert!(store.user_episodes("t", "ann").await.unwrap().is_empty());
    assert_eq!(
        store.session_memory("t", "ann", "agent").await.unwrap(),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_saving_a_first_session_memory_both_succeed_one_after_the_other() {
    let db = test_cluster::database().await.unwrap();
    let (a, b) = (
        std::sync::Arc::new(db.store().await.unwrap()),
        std::sync::Arc::new(db.store().await.unwrap()),
    );
    a.append(&all(), "s", creating("one", "ann")).await.unwrap();
    let version = a.version(&all(), "s").await.unwrap().unwrap();
    for round in 0..10 {
        let agent = format!("agent{round}");
        let save = |store: std::sync::Arc<PgStore>, text: &'static str| {
            let agent = agent.clone();
            let memory = SessionMemory {
                text: text.into(),
                sessions: vec!["s".into()],
                updated_at: Timestamp::from_micros(1),
            };
            tokio::spawn(async move {
                store
                    .put_session_memory("t", "ann", &agent, memory, ("s", version))
                    .await
            })
        };
        let (x, y) = (save(a.clone(), "a"), save(b.clone(), "b"));
        x.await.unwrap().unwrap();
        y.await.unwrap().unwrap();
        let saved = a.session_memory("t", "ann", &agent).await.unwrap().unwrap();
        assert!(["a", "b"].contains(&saved.text.as_str()));
    }
    let client = db.connect().await.unwrap();
    // One key per session memory, and the session's: no key of a lost insert is left.
    assert_eq!(count(&client, "SELECT count(*) FROM data_keys").await, 11);
}
