//! The embedding feed beyond the conformance cases: positions when transactions commit out of
//! order, erasures, races with deletion, the surrogate key's bound, and sealing on disk.

use std::sync::Arc;
use std::time::{Duration, Instant};

use memlayer_store::{
    Access, EmbeddingModel, FollowedFeed, Memory, MemoryChange, MemoryKind, MessageKey,
    PendingEmbedding, Removal, Timestamp,
};

use super::files::{data_directory, found_in_files};
use super::{creating, say};
use crate::embeddings::place_of;
use crate::{PgStore, PostgresError, test_cluster};

/// How long a test waits for entries it expects: transactions of tests running in parallel
/// on the same cluster hold the horizon back while they run.
const PATIENCE: Duration = Duration::from_secs(60);

fn tenant() -> Access {
    Access::tenant_wide("t")
}

fn model() -> EmbeddingModel {
    EmbeddingModel {
        name: "test-model".into(),
        sha256: "aa".into(),
        dimension: 3,
    }
}

/// The entries this store claims, once it has claimed `expected` of them (or the patience
/// ran out).
async fn pending(store: &PgStore, expected: usize) -> Vec<PendingEmbedding> {
    let deadline = Instant::now() + PATIENCE;
    let mut claimed = Vec::new();
    loop {
        claimed.extend(store.pending_embeddings(1_000).await.unwrap());
        if claimed.len() >= expected || Instant::now() >= deadline {
            claimed.sort_by_key(|entry: &PendingEmbedding| entry.seq);
            return claimed;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What a node following from `after` finds, once it finds `expected` entries, appends and
/// removals (or the patience ran out).
async fn followed(store: &PgStore, after: u64, expected: usize) -> FollowedFeed {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let followed = store.embedded_after(after, 1_000).await.unwrap();
        let found = followed.appends.len() + followed.removals.len();
        if found >= expected || Instant::now() >= deadline {
            return followed;
        }
    }
}

/// Stores a vector for every message of `entries`, and removes them from the outbox.
async fn embed(store: &PgStore, entries: &[PendingEmbedding]) {
    let done = entries.iter().map(|entry| entry.seq).collect();
    let vectors = entries
        .iter()
        .flat_map(|entry| &entry.messages)
        .map(|(key, _)| (*key, vec![1.0, 2.0, 3.0]))
        .collect();
    store
        .store_embeddings(model(), done, vectors)
        .await
        .unwrap();
}

/// The sessions of `followed`'s appends, in order.
fn sessions_of(followed: &FollowedFeed) -> Vec<&str> {
    followed
        .appends
        .iter()
        .map(|embedded| {
            embedded
                .append
                .session
                .as_ref()
                .unwrap()
                .session_id
                .as_str()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_committing_after_a_newer_one_is_followed_before_it_never_skipped() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    store
        .append(&tenant(), "s1", creating("one", "ada"))
        .await
        .unwrap();
    let first = pending(&store, 1).await;
    embed(&store, &first).await;
    let start = followed(&store, 0, 1).await;
    assert_eq!(sessions_of(&start), ["s1"]);
    let cursor = first[0].seq;

    // An older transaction that has not yet appended: it holds a transaction id below the
    // next append's.
    let mut client = db.connect().await.unwrap();
    let older = client.transaction().await.unwrap();
    older
        .query_one("SELECT pg_current_xact_id()", &[])
        .await
        .unwrap();
    store
        .append(&tenant(), "s2", creating("two", "ada"))
        .await
        .unwrap();
    let head = store.outbox_head().await.unwrap();
    assert!(head > cursor);
    // The newer append committed, so the head covers it, and it can be embedded at once; it
    // is not followed while the older transaction may still add an entry below it.
    let newer = pending(&store, 1).await;
    assert_eq!(newer[0].seq, head);
    embed(&store, &newer).await;
    assert!(
        store
            .embedded_after(cursor, 100)
            .await
            .unwrap()
            .appends
            .is_empty()
    );
    assert!(store.embedded_through().await.unwrap() < head);

    // The older transaction appends (as memlayer_append does: a feed row) and commits last.
    older
        .execute(
            "INSERT INTO feed (tenant, session_id, first_index, count) VALUES ('t', 's1', 0, 1)",
            &[],
        )
        .await
        .unwrap();
    older.commit().await.unwrap();
    let late = pending(&store, 1).await;
    assert!(late[0].seq < head);
    // Not embedded yet: a follower stops before it, however much is embedded after it.
    assert!(
        store
            .embedded_after(cursor, 100)
            .await
            .unwrap()
            .appends
            .is_empty()
    );
    embed(&store, &late).await;
    let delivered = followed(&store, cursor, 2).await;
    assert_eq!(sessions_of(&delivered), ["s1", "s2"], "in position order");
    assert!(!delivered.missed);
    let seqs: Vec<u64> = delivered.appends.iter().map(|e| e.append.seq).collect();
    assert_eq!(
        seqs,
        [late[0].seq, head],
        "the head was the newer append's position"
    );
    // Each comes with the vectors stored for it.
    for embedded in &delivered.appends {
        let keys: Vec<MessageKey> = embedded
            .append
            .messages
            .iter()
            .map(|(key, _)| *key)
            .collect();
        let vectors: Vec<MessageKey> = embedded.vectors.iter().map(|(key, _)| *key).collect();
        assert_eq!(vectors, keys);
        assert!(embedded.vectors.iter().all(|(_, v)| v == &[1.0, 2.0, 3.0]));
    }
    // Entries stay for the other nodes: the head stays, nothing waits.
    assert_eq!(store.outbox_head().await.unwrap(), head);
    assert_eq!(store.pending_embedding_count().await.unwrap(), 0);
    assert!(store.pending_embeddings(100).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_split_the_embedding_work_and_each_follows_all_of_it() {
    let db = test_cluster::database().await.unwrap();
    let a = db.store().await.unwrap();
    let b = db.store().await.unwrap();
    let through = a.embedded_through().await.unwrap();
    for n in 0..6 {
        a.append(&tenant(), &format!("s{n}"), creating("hello", "ada"))
            .await
            .unwrap();
    }
    // Each claim takes whole entries until it holds the messages asked for, and never an
    // entry another node holds.
    let on_a = a.pending_embeddings(2).await.unwrap();
    let on_b = b.pending_embeddings(3).await.unwrap();
    assert_eq!((on_a.len(), on_b.len()), (2, 3));
    assert!(on_a.iter().all(|x| on_b.iter().all(|y| x.seq != y.seq)));
    // B's entries are embedded first: a follower stops before A's, which are not.
    embed(&b, &on_b).await;
    assert!(
        b.embedded_after(through, 100)
            .await
            .unwrap()
            .appends
            .is_empty()
    );
    embed(&a, &on_a).await;
    // The last entry was claimed by nobody yet.
    let last = pending(&b, 1).await;
    embed(&b, &last).await;
    for node in [&a, &b] {
        let all = followed(node, through, 6).await;
        assert_eq!(sessions_of(&all), ["s0", "s1", "s2", "s3", "s4", "s5"]);
        assert!(all.appends.iter().all(|e| e.vectors.len() == 1));
    }
    // Once the transactions of other tests on the cluster have ended, a start follows from
    // above the last entry.
    let head = a.outbox_head().await.unwrap();
    let deadline = Instant::now() + PATIENCE;
    while a.embedded_through().await.unwrap() < head {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasures_are_followed_as_removals_and_drop_what_still_waits() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    store
        .append(&tenant(), "a", creating("one", "ada"))
        .await
        .unwrap();
    store.append(&tenant(), "a", say("two")).await.unwrap();
    store
        .append(&tenant(), "b", creating("three", "ada"))
        .await
        .unwrap();
    let entries = pending(&store, 3).await;
    embed(&store, &entries).await;
    let a = store.session_key(&tenant(), "a").await.unwrap().unwrap();
    let b = store.session_key(&tenant(), "b").await.unwrap().unwrap();
    // One more append of b waits, claimed by nobody: the deletion takes it along.
    store.append(&tenant(), "b", say("four")).await.unwrap();
    assert_eq!(store.pending_embedding_count().await.unwrap(), 1);

    store.erase_message(&tenant(), "a", 1).await.unwrap();
    store.delete_session(&tenant(), "b").await.unwrap();
    assert_eq!(store.pending_embedding_count().await.unwrap(), 0);
    // A follower from the start: the appends as they are now (the erased message and the
    // deleted session's are gone), then the two removals, in the order they committed.
    let all = followed(&store, 0, 5).await;
    assert_eq!(all.appends.len(), 3, "{all:?}");
    let indexed: Vec<Vec<MessageKey>> = all
        .appends
        .iter()
        .map(|e| e.append.messages.iter().map(|(key, _)| *key).collect())
        .collect();
    assert_eq!(indexed, [vec![MessageKey::new(a, 0)], vec![], vec![]]);
    assert_eq!(
        all.removals,
        [Removal::Message(MessageKey::new(a, 1)), Removal::Session(b)]
    );
    let head = store.outbox_head().await.unwrap();
    assert_eq!(
        all.through,
        Some(head),
        "the last removal is the last entry"
    );
    assert!(
        store
            .embedded_after(head, 10)
            .await
            .unwrap()
            .through
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_writes_and_deletions_are_followed_with_their_revisions() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let start = store.embedded_through().await.unwrap();
    let memory = |text: &str| Memory {
        id: 0,
        revision: 0,
        tenant: "t".into(),
        user_id: "ada".into(),
        agent_id: None,
        text: text.into(),
        kind: MemoryKind::Fact,
        tags: Vec::new(),
        source: None,
        created_at: Timestamp::from_micros(1),
        updated_at: Timestamp::from_micros(1),
        history: Vec::new(),
        vector: vec![0.5, 0.5, 0.5],
        key: None,
    };
    let id = store
        .put_memory(memory("Keeps the key under the pot."), &tenant())
        .await
        .unwrap();
    let stored = store.memory("t", id).await.unwrap().unwrap();
    let updated = Memory {
        text: "Keeps the key in the shed.".into(),
        ..stored
    };
    store.put_memory(updated, &tenant()).await.unwrap();
    assert!(store.delete_memory("t", id).await.unwrap());

    let changes: Vec<Removal> = followed(&store, start, 3).await.removals;
    let change = |revision| {
        Removal::Memory(MemoryChange {
            tenant: "t".into(),
            user_id: "ada".into(),
            id,
            revision,
        })
    };
    // No text: the entry names the memory and the revision written (none once deleted).
    assert_eq!(changes, [change(Some(1)), change(Some(2)), change(None)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_lease_ran_out_is_taken_by_another_node() {
    let db = test_cluster::database().await.unwrap();
    let a = db.store().await.unwrap();
    let b = db.store().await.unwrap();
    a.append(&tenant(), "s", creating("hello", "ada"))
        .await
        .unwrap();
    let claimed = pending(&a, 1).await;
    assert!(
        b.pending_embeddings(10).await.unwrap().is_empty(),
        "A holds it"
    );
    // A died: its lease runs out (by the database's clock).
    let client = db.connect().await.unwrap();
    client
        .execute(
            "UPDATE embedding_outbox SET claimed_until = clock_timestamp() - interval '1 second'",
            &[],
        )
        .await
        .unwrap();
    let taken = b.pending_embeddings(10).await.unwrap();
    assert_eq!(
        taken.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [claimed[0].seq]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_under_its_name_takes_its_claims_back_before_the_lease_runs_out() {
    let db = test_cluster::database().await.unwrap();
    let a = db.store().await.unwrap().for_node("a");
    let b = db.store().await.unwrap().for_node("b");
    a.append(&tenant(), "s", creating("hello", "ada"))
        .await
        .unwrap();
    let claimed = pending(&a, 1).await;
    // A dies holding the claim, and comes back under its name well within the lease.
    drop(a);
    assert!(
        b.pending_embeddings(10).await.unwrap().is_empty(),
        "another node waits for the lease"
    );
    let restarted = db.store().await.unwrap().for_node("a");
    let taken = restarted.pending_embeddings(10).await.unwrap();
    assert_eq!(
        taken.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [claimed[0].seq]
    );
    // Stored, the entry is done for every node.
    embed(&restarted, &taken).await;
    assert!(b.pending_embeddings(10).await.unwrap().is_empty());
    assert!(restarted.pending_embeddings(10).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_entries_are_missed_by_a_follower_behind_them_but_never_by_a_start() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    for n in 0..3 {
        store
            .append(&tenant(), &format!("s{n}"), creating("hello", "ada"))
            .await
            .unwrap();
    }
    let entries = pending(&store, 3).await;
    embed(&store, &entries).await;
    let client = db.connect().await.unwrap();
    // The first two were embedded longer ago than the retention; the third just now.
    client
        .execute(
            "UPDATE embedding_outbox SET embedded_at = embedded_at - interval '1 hour'
             WHERE (xid, ord) <= ($1::text::xid8, $2)",
            &[
                &place_of(entries[1].seq).unwrap().0.to_string(),
                &place_of(entries[1].seq).unwrap().1,
            ],
        )
        .await
        .unwrap();
    // Stores prune at most once a minute (this one did when it stored the vectors), and
    // only below the horizon, which other tests' transactions on the cluster hold back.
    let deadline = Instant::now() + PATIENCE;
    let behind = loop {
        *store.feed_pruned_at.lock().unwrap() = None;
        store.prune_feed().await.unwrap();
        let behind = store.embedded_after(0, 100).await.unwrap();
        if behind.missed || Instant::now() >= deadline {
            break behind;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(behind.missed, "a follower at 0 missed two entries");
    assert_eq!(sessions_of(&behind), ["s2"]);
    let after_them = store.embedded_after(entries[1].seq, 100).await.unwrap();
    assert!(!after_them.missed);
    // A node starting now follows from above every pruned entry.
    let start = store.embedded_through().await.unwrap();
    assert!(start >= entries[1].seq);
    assert!(!store.embedded_after(start, 100).await.unwrap().missed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasures_take_vectors_and_queued_entries_and_change_the_version() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    store
        .append(&tenant(), "gone", creating("one", "ada"))
        .await
        .unwrap();
    store.append(&tenant(), "gone", say("two")).await.unwrap();
    store
        .append(&tenant(), "kept", creating("three", "ada"))
        .await
        .unwrap();
    store.append(&tenant(), "kept", say("four")).await.unwrap();
    let entries = pending(&store, 4).await;
    assert_eq!(entries.len(), 4);
    let gone = store.session_key(&tenant(), "gone").await.unwrap().unwrap();
    let kept = store.session_key(&tenant(), "kept").await.unwrap().unwrap();
    // Vectors for the first entry of each session; the second ones stay queued.
    let first_of_each: Vec<_> = entries
        .iter()
        .filter(|entry| entry.messages[0].0.index() == 0)
        .cloned()
        .collect();
    embed(&store, &first_of_each).await;
    assert_eq!(store.vectors(None, 10).await.unwrap().len(), 2);

    let version = store.vectors_version().await.unwrap();
    store.delete_session(&tenant(), "gone").await.unwrap();
    let left: Vec<_> = store
        .vectors(None, 10)
        .await
        .unwrap()
        .iter()
        .map(|v| v.key)
        .collect();
    assert_eq!(left, [MessageKey::new(kept, 0)]);
    assert_ne!(store.vectors_version().await.unwrap(), version);
    assert_eq!(
        store.pending_embedding_count().await.unwrap(),
        1,
        "the deleted session's entry left the outbox with it"
    );
    assert_eq!(
        store.deleted_sessions(&[gone].into()).await.unwrap(),
        [gone].into()
    );
    assert_eq!(
        store
            .messages_by_key(&[MessageKey::new(gone, 0), MessageKey::new(kept, 1)])
            .await
            .unwrap()
            .iter()
            .map(|m| m.as_ref().map(|m| m.content.clone()))
            .collect::<Vec<_>>(),
        [None, Some("four".to_owned())]
    );

    // One message erased, whoever erases it: its vector goes, and the version moves.
    let version = store.vectors_version().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .execute(
            "DELETE FROM messages WHERE tenant = 't' AND session_id = 'kept' AND idx = 0",
            &[],
        )
        .await
        .unwrap();
    assert!(store.vectors(None, 10).await.unwrap().is_empty());
    assert_ne!(store.vectors_version().await.unwrap(), version);
    // A deletion that takes no vector leaves the version alone.
    let version = store.vectors_version().await.unwrap();
    client
        .execute(
            "DELETE FROM messages WHERE tenant = 't' AND session_id = 'kept' AND idx = 1",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(store.vectors_version().await.unwrap(), version);
    // The entry of the erased message has nothing left to embed.
    let rest: Vec<_> = entries
        .iter()
        .filter(|entry| entry.messages[0].0.index() == 1)
        .cloned()
        .collect();
    embed(&store, &rest).await;
    assert!(store.vectors(None, 10).await.unwrap().is_empty());
    assert_eq!(store.pending_embedding_count().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn storing_vectors_races_session_deletion_without_failing() {
    const ROUNDS: usize = 12;
    let db = test_cluster::database().await.unwrap();
    let store = Arc::new(db.store().await.unwrap());
    let other = Arc::new(db.store().await.unwrap());
    for round in 0..ROUNDS {
        let id = format!("s{round}");
        store
            .append(&tenant(), &id, creating("one", "ada"))
            .await
            .unwrap();
        store.append(&tenant(), &id, say("two")).await.unwrap();
        let entries = pending(&store, 2).await;
        assert_eq!(entries.len(), 2);
        let storing = {
            let store = Arc::clone(&store);
            tokio::spawn(async move { embed(&store, &entries).await })
        };
        let deleting = {
            let other = Arc::clone(&other);
            tokio::spawn(async move { other.delete_session(&tenant(), &id).await.unwrap() })
        };
        storing.await.unwrap();
        deleting.await.unwrap();
        assert!(store.vectors(None, 10).await.unwrap().is_empty(), "{round}");
        assert_eq!(store.pending_embedding_count().await.unwrap(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_surrogate_key_a_message_key_cannot_hold_is_refused() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    let client = db.connect().await.unwrap();
    client
        .batch_execute("ALTER TABLE sessions ALTER COLUMN sid RESTART WITH 1099511627776")
        .await
        .unwrap();
    store
        .append(&tenant(), "big", creating("one", "ada"))
        .await
        .unwrap();
    assert!(matches!(
        store.session_key(&tenant(), "big").await,
        Err(PostgresError::Corrupted { .. })
    ));
    assert!(matches!(
        store.all_messages(None, 10).await,
        Err(PostgresError::Corrupted { .. })
    ));
}

/// A vector of `n` random components, each a normal float (no NaN, no infinity).
fn random_vector(n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let bits = u32::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..4].try_into().unwrap());
            // Sign and mantissa random, exponent in [0.5, 2).
            f32::from_bits((bits & 0x807f_ffff) | 0x3f00_0000)
        })
        .collect()
}

fn bytes_of(components: &[f32]) -> Vec<u8> {
    components.iter().flat_map(|c| c.to_le_bytes()).collect()
}

#[tokio::test]
async fn stored_vectors_reach_no_file_of_the_cluster_while_plain_bytes_do() {
    let db = test_cluster::database().await.unwrap();
    let store = db.store().await.unwrap();
    store
        .append(&tenant(), "s", creating("one", "ada"))
        .await
        .unwrap();
    let entries = pending(&store, 1).await;
    let sealed = random_vector(8);
    let eight = EmbeddingModel {
        dimension: 8,
        ..model()
    };
    store
        .store_embeddings(
            eight,
            vec![entries[0].seq],
            vec![(entries[0].messages[0].0, sealed.clone())],
        )
        .await
        .unwrap();
    assert_eq!(store.vectors(None, 1).await.unwrap()[0].components, sealed);

    let client = db.connect().await.unwrap();
    // The control: the same scan finds bytes stored as they are.
    let control = bytes_of(&random_vector(8));
    client
        .execute("CREATE TABLE scratch (bytes bytea)", &[])
        .await
        .unwrap();
    client
        .execute("INSERT INTO scratch VALUES ($1)", &[&control])
        .await
        .unwrap();
    let data_directory = data_directory(&client).await;
    let whole = bytes_of(&sealed);
    // The whole vector, and every two adjacent components (eight bytes, unlikely by chance).
    let mut needles: Vec<&[u8]> = vec![&whole];
    needles.extend(whole.windows(8).step_by(4));
    needles.push(&control);
    let found = found_in_files(&data_directory, &needles);
    let mut expected = vec![false; needles.len() - 1];
    expected.push(true);
    assert_eq!(found, expected, "found in {}", data_directory.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_models_racing_to_store_first_one_wins_the_other_is_refused() {
    let db = test_cluster::database().await.unwrap();
    let store = Arc::new(db.store().await.unwrap());
    store
        .append(&tenant(), "s", creating("one", "ada"))
        .await
        .unwrap();
    let entries = pending(&store, 1).await;
    let key = entries[0].messages[0].0;
    let racers: Vec<_> = ["aa", "bb"]
        .into_iter()
        .map(|sha256| {
            let store = Arc::clone(&store);
            let model = EmbeddingModel {
                sha256: sha256.into(),
                ..model()
            };
            let seq = entries[0].seq;
            tokio::spawn(async move {
                let stored = store
                    .store_embeddings(model.clone(), vec![seq], vec![(key, vec![0.0, 1.0, 0.0])])
                    .await;
                (model, stored)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for racer in racers {
        let (model, stored) = racer.await.unwrap();
        match stored {
            Ok(()) => winners.push(model),
            Err(PostgresError::Store(memlayer_store::StoreError::Conflict(_))) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(
        store.vector_model().await.unwrap().as_ref(),
        winners.first()
    );
    assert_eq!(store.vectors(None, 10).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reset_racing_stores_and_deletions_neither_fails_nor_deadlocks() {
    const ROUNDS: usize = 8;
    let db = test_cluster::database().await.unwrap();
    let store = Arc::new(db.store().await.unwrap());
    for round in 0..ROUNDS {
        for n in 0..3 {
            let id = format!("s{round}-{n}");
            store
                .append(&tenant(), &id, creating("one", "ada"))
                .await
                .unwrap();
        }
        let entries = pending(&store, 3).await;
        // Vectors exist already for some of them, so the reset and the store meet on rows.
        embed(&store, &entries[..1]).await;
        let storing = {
            let store = Arc::clone(&store);
            let entries = entries[1..].to_vec();
            tokio::spawn(async move { embed(&store, &entries).await })
        };
        let resetting = {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.reset_embeddings().await.unwrap() })
        };
        let deleting = {
            let store = Arc::clone(&store);
            let id = format!("s{round}-0");
            tokio::spawn(async move { store.delete_session(&tenant(), &id).await.unwrap() })
        };
        storing.await.unwrap();
        resetting.await.unwrap();
        deleting.await.unwrap();
        // Whatever the order, every message of a live session is embedded or queued again
        // (entries become deliverable once other tests' older transactions end).
        let live = 2 * (round as u64 + 1);
        let deadline = Instant::now() + PATIENCE;
        let mut claimed = Vec::new();
        loop {
            claimed.extend(store.pending_embeddings(10_000).await.unwrap());
            let queued: u64 = claimed
                .iter()
                .map(|entry: &PendingEmbedding| entry.messages.len() as u64)
                .sum();
            let stored = store.vectors(None, 10_000).await.unwrap().len() as u64;
            if queued + stored >= live {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{round}: {queued} + {stored} < {live}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        embed(&store, &claimed).await;
    }
}
