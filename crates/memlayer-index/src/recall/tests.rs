//! Recall end to end through a real store and the real embedding model (installed by
//! `cargo xtask setup`; found through `MEMLAYER_ASSETS_DIR` or `<workspace>/memlayer-assets`).

use std::path::{Path, PathBuf};

use memlayer_embed::{Assets, Embedder, EmbedderOptions};
use memlayer_store::{
    Access, Append, EmbeddingModel, Eraser, MessageKey, NewMessage, NewSession, Role, Store,
    StoreError,
};
use tokio::sync::oneshot;

use super::*;

fn embedder() -> Embedder {
    let dir = std::env::var_os("MEMLAYER_ASSETS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../memlayer-assets"),
        PathBuf::from,
    );
    let assets = Assets::in_dir(dir);
    if let Err(err) = assets.check() {
        panic!("recall tests need the real model: {err}");
    }
    Embedder::open(&assets, EmbedderOptions::default()).unwrap()
}

/// Appends `lines` to `session` of tenant `t`, created for `user` on first use.
async fn append(store: &Store, session: &str, user: &str, lines: &[(Role, &str)]) {
    append_in(store, "t", session, user, lines).await;
}

/// Appends `lines` to `session` of `tenant`, created for `user` on first use.
async fn append_in(store: &Store, tenant: &str, session: &str, user: &str, lines: &[(Role, &str)]) {
    let messages = lines
        .iter()
        .map(|(role, content)| NewMessage {
            role: *role,
            content: (*content).to_owned(),
            token_count: 1,
            timestamp: None,
            metadata: Default::default(),
        })
        .collect();
    let append = Append {
        messages,
        create: Some(NewSession {
            user_id: user.into(),
            agent_id: "assistant".into(),
            ..NewSession::default()
        }),
        idempotency_key: None,
    };
    store
        .sessions()
        .append(&Access::tenant_wide(tenant), session, append)
        .await
        .unwrap();
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    /// The store's eraser, which the erasure coordinator holds in the server.
    eraser: Eraser,
    recall: Recall,
    stop: Option<oneshot::Sender<()>>,
    pipeline: Option<tokio::task::JoinHandle<()>>,
}

impl Fixture {
    fn open(dir: tempfile::TempDir, embedder: Embedder) -> Self {
        let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
        let options = RecallOptions::default().with_snapshot(dir.path().join("vectors.idx"));
        let recall = Recall::open(store.clone(), embedder, options).unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let pipeline = tokio::spawn(recall.clone().run_pipeline(async {
            let _ = stopped.await;
        }));
        Self {
            _dir: dir,
            eraser: store.take_eraser().unwrap(),
            store,
            recall,
            stop: Some(stop),
            pipeline: Some(pipeline),
        }
    }

    async fn stop(mut self) -> (tempfile::TempDir, Embedder) {
        let _ = self.stop.take().unwrap().send(());
        self.pipeline.take().unwrap().await.unwrap();
        let embedder = self.recall.inner.embedder.clone();
        drop(self.recall);
        self.store.shutdown();
        drop(self.store);
        (self._dir, embedder)
    }

    async fn say(&self, session: &str, user: &str, lines: &[(Role, &str)]) {
        append(&self.store, session, user, lines).await;
    }

    /// Waits until every append is indexed, however long a loaded machine takes: one wait is
    /// bounded by the read-your-writes time.
    async fn settle(&self) {
        while self.recall.wait_for_index().await.unwrap().is_some() {}
    }

    /// Deletes `session` of tenant `t` from the store, then takes it out of the indexes, as
    /// the erasure coordinator does.
    async fn erase_session(&self, session: &str) {
        let access = Access::tenant_wide("t");
        let sid = self
            .store
            .feed()
            .session_key(&access, session)
            .unwrap()
            .unwrap();
        self.eraser.delete_session(&access, session).await.unwrap();
        self.recall.forget_sessions("t", vec![sid]).await.unwrap();
    }

    async fn ask(&self, scope: Scope, text: &str) -> Recalled {
        self.recall.recall(query(scope, text)).await.unwrap()
    }
}

/// The three best of tenant `t`'s messages in `scope` for `text`, unfiltered.
fn query(scope: Scope, text: &str) -> RecallQuery {
    RecallQuery {
        access: Access::tenant_wide("t"),
        scope,
        query: text.into(),
        k: 3,
        roles: None,
        after: None,
        before: None,
        exclude: None,
    }
}

fn session(id: &str) -> Scope {
    Scope::Session {
        session_id: id.into(),
    }
}

fn user(id: &str) -> Scope {
    Scope::User {
        user_id: id.into(),
        agent_id: None,
    }
}

fn contents(recalled: &Recalled) -> Vec<&str> {
    recalled
        .hits
        .iter()
        .map(|h| h.message.content.as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finds_by_meaning_and_by_words_right_after_the_append() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    fixture
        .say(
            "trip",
            "alice",
            &[
                (
                    Role::User,
                    "I booked flight TP1351 to Lisbon for the conference.",
                ),
                (Role::Assistant, "Great, enjoy Portugal!"),
                (Role::User, "Remind me to water the plants on Sunday."),
                (
                    Role::User,
                    "My daughter's recital is at seven in the evening.",
                ),
            ],
        )
        .await;
    // No wait between append and query: recall waits for the pipeline itself.
    let by_meaning = fixture
        .ask(session("trip"), "which airplane am I taking?")
        .await;
    assert_eq!(by_meaning.degraded, None);
    assert_eq!(
        contents(&by_meaning)[0],
        "I booked flight TP1351 to Lisbon for the conference."
    );
    assert!(by_meaning.hits[0].vector_rank == Some(1));

    let by_words = fixture.ask(session("trip"), "TP1351").await;
    assert_eq!(by_words.hits[0].keyword_rank, Some(1));
    assert_eq!(by_words.hits[0].session.session_id, "trip");
    assert_eq!(fixture.recall.indexed_vectors(), 4);
    fixture.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_never_leak_another_users_messages() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    let secret = "My locker code is 4417.";
    fixture.say("a1", "alice", &[(Role::User, secret)]).await;
    fixture.say("b1", "bob", &[(Role::User, secret)]).await;
    fixture
        .say("a2", "alice", &[(Role::User, "I like hiking in the Alps.")])
        .await;

    let alice = fixture.ask(user("alice"), "locker code").await;
    let sessions: Vec<&str> = alice
        .hits
        .iter()
        .map(|h| h.session.session_id.as_str())
        .collect();
    assert!(
        sessions.contains(&"a1") && !sessions.contains(&"b1"),
        "{sessions:?}"
    );
    let bob = fixture.ask(user("bob"), "locker code").await;
    assert!(bob.hits.iter().all(|h| h.session.session_id == "b1"));
    let one_session = fixture.ask(session("a2"), "locker code").await;
    assert!(
        one_session
            .hits
            .iter()
            .all(|h| h.session.session_id == "a2")
    );
    let missing = fixture.recall.recall(query(session("nope"), "x")).await;
    assert!(matches!(
        missing,
        Err(IndexError::Store(StoreError::SessionNotFound { .. }))
    ));
    fixture.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgotten_sessions_leave_the_index_and_restarts_keep_the_rest() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    fixture
        .say(
            "keep",
            "alice",
            &[(Role::User, "The wifi password is sunflower42.")],
        )
        .await;
    fixture
        .say("drop", "alice", &[(Role::User, "The alarm code is 9911.")])
        .await;
    assert_eq!(fixture.ask(user("alice"), "alarm code").await.hits.len(), 2);

    fixture.erase_session("drop").await;
    let after = fixture.ask(user("alice"), "alarm code").await;
    assert_eq!(contents(&after), ["The wifi password is sunflower42."]);

    // The snapshot written on shutdown is loaded again; the result does not change.
    let (dir, embedder) = fixture.stop().await;
    assert!(dir.path().join("vectors.idx").exists());
    let reopened = Fixture::open(dir, embedder);
    assert_eq!(reopened.recall.indexed_vectors(), 1);
    let again = reopened.ask(user("alice"), "alarm code").await;
    assert_eq!(contents(&again), ["The wifi password is sunflower42."]);
    reopened.stop().await;
}

/// The keyword partition of Alice's messages in tenant `t`.
fn alices_keywords() -> TenantUser {
    TenantUser {
        tenant: "t".into(),
        user_id: "alice".into(),
    }
}

/// Sessions erased either way, by their keys or found deleted by what the indexes hold,
/// leave no text in the keyword index. Their owners name the messages' keyword partition,
/// so they may leave only after the messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgotten_sessions_leave_no_keyword_behind() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    let tenant = Access::tenant_wide("t");
    for (session, text) in [
        ("keep", "The wifi code is sunflower42."),
        ("by-key", "The alarm code is 9911."),
        ("found-deleted", "The safe code is 5522."),
    ] {
        fixture.say(session, "alice", &[(Role::User, text)]).await;
    }
    fixture.settle().await;
    // Deletes the session in the store, then forgets it by its key.
    let by_key = fixture.eraser.delete_session(&tenant, "by-key").await;
    fixture
        .recall
        .forget_sessions("t", vec![by_key.unwrap().sid])
        .await
        .unwrap();
    fixture
        .eraser
        .delete_session(&tenant, "found-deleted")
        .await
        .unwrap();
    fixture.recall.forget_deleted_sessions("t").await.unwrap();

    let hits = fixture
        .recall
        .read()
        .hybrid
        .keywords()
        .search(&alices_keywords(), "code", 10, None);
    assert_eq!(hits.len(), 1, "{hits:?}");
    let kept = MessageKey::from_u64(hits[0].0).session();
    assert_eq!(
        fixture.store.feed().session_key(&tenant, "keep").unwrap(),
        Some(kept)
    );
    fixture.stop().await;
}

/// The embedder's cache is kept per tenant: a text one tenant's messages or queries had
/// embedded is embedded again for another, so no tenant can tell by a faster answer what
/// another wrote or asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_embedded_for_one_tenant_is_a_cache_miss_for_another() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    let secret = "My locker code is 4417.";
    fixture.say("a1", "alice", &[(Role::User, secret)]).await;
    fixture.recall.wait_for_index().await.unwrap();
    let asked_by = |tenant: &str| RecallQuery {
        access: Access::tenant_wide(tenant),
        ..query(user("alice"), secret)
    };
    let cache = || fixture.recall.embedder().cache_stats();

    // Tenant t's pipeline embedded the message: t asking for the same text is a hit.
    let before = cache();
    fixture.recall.recall(asked_by("t")).await.unwrap();
    assert_eq!(
        (cache().hits, cache().misses),
        (before.hits + 1, before.misses)
    );
    // Tenant u asking for it is a miss, and then a hit for u alone.
    let before = cache();
    fixture.recall.recall(asked_by("u")).await.unwrap();
    assert_eq!(
        (cache().hits, cache().misses),
        (before.hits, before.misses + 1)
    );
    let before = cache();
    fixture.recall.recall(asked_by("u")).await.unwrap();
    assert_eq!(
        (cache().hits, cache().misses),
        (before.hits + 1, before.misses)
    );
    fixture.stop().await;
}

/// A damaged snapshot is never loaded: the vector index is rebuilt from the stored vectors
/// and recall by meaning answers as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_snapshots_are_rebuilt_from_the_store() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    fixture
        .say(
            "s",
            "alice",
            &[
                (Role::User, "My dog is a golden retriever called Biscuit."),
                (Role::User, "I pay the electricity bill every month."),
            ],
        )
        .await;
    // Recall waits until both are embedded, so the snapshot written on shutdown holds them.
    assert_eq!(fixture.ask(session("s"), "dog").await.hits.len(), 2);
    let (mut dir, mut embedder) = fixture.stop().await;
    let path = dir.path().join("vectors.idx");
    let intact = std::fs::read(&path).unwrap();
    let mut flipped = intact.clone();
    *flipped.last_mut().unwrap() ^= 1;
    let damages: [(&str, Vec<u8>); 4] = [
        ("truncated", intact[..intact.len() / 2].to_vec()),
        ("one bit flipped", flipped),
        ("garbage", vec![0x5a; intact.len()]),
        ("empty", Vec::new()),
    ];
    for (damage, bytes) in damages {
        std::fs::write(&path, bytes).unwrap();
        let reopened = Fixture::open(dir, embedder);
        assert!(
            matches!(
                reopened.recall.snapshot_at_open(),
                SnapshotLoad::Unusable(_)
            ),
            "{damage}: {:?}",
            reopened.recall.snapshot_at_open()
        );
        assert_eq!(reopened.recall.indexed_vectors(), 2, "{damage}");
        // No word in common with the message: only the vector index can find it.
        let hits = reopened.ask(session("s"), "puppy pet").await.hits;
        assert_eq!(
            hits[0].message.content, "My dog is a golden retriever called Biscuit.",
            "{damage}"
        );
        assert!(hits[0].vector_rank.is_some(), "{damage}");
        (dir, embedder) = reopened.stop().await;
        assert_ne!(
            std::fs::read(&path).unwrap(),
            Vec::<u8>::new(),
            "{damage}: the shutdown writes a good snapshot again"
        );
    }
}

#[tokio::test]
async fn a_start_removes_what_a_stopped_snapshot_save_left() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    let line = "My dog is a golden retriever called Biscuit.";
    fixture.say("s", "alice", &[(Role::User, line)]).await;
    fixture.settle().await;
    let (dir, embedder) = fixture.stop().await;
    // A save killed part-way: the start of a snapshot under the temporary name.
    let intact = std::fs::read(dir.path().join("vectors.idx")).unwrap();
    let unfinished = dir.path().join("vectors.idx.tmp");
    std::fs::write(&unfinished, &intact[..intact.len() / 2]).unwrap();
    let reopened = Fixture::open(dir, embedder);
    assert!(
        !unfinished.exists(),
        "the unfinished save outlived the start"
    );
    assert_eq!(reopened.recall.snapshot_at_open(), &SnapshotLoad::Current);
    assert_eq!(reopened.recall.indexed_vectors(), 1);
    assert_eq!(
        reopened.ask(session("s"), "puppy pet").await.hits[0]
            .message
            .content,
        line
    );
    reopened.stop().await;
}

#[tokio::test]
async fn searches_go_on_while_the_snapshot_is_saved() {
    // No pipeline: nothing else may ask for the lock's write side. std's lock lets a waiting
    // writer go first, so a pipeline step queued behind the search below would hold the
    // save's read back too (the test once timed out so, on a loaded machine).
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
    let snapshot = dir.path().join("vectors.idx");
    let options = RecallOptions::default().with_snapshot(&snapshot);
    let recall = Recall::open(store.clone(), embedder(), options).unwrap();
    let dimension = recall.read().hybrid.vectors().config().dimension;
    let mut vector = vec![0.0; dimension];
    vector[0] = 1.0;
    recall
        .write()
        .hybrid
        .vectors_mut()
        .insert(7, &vector)
        .unwrap();
    assert!(!snapshot.exists(), "nothing saved the snapshot before");
    // A search in progress holds the read side of the indexes' lock. The save runs on a
    // thread of its own, and this one waits without yielding to the runtime.
    let searching = recall.read();
    let (saved, save_ended) = std::sync::mpsc::channel();
    let (saving, runtime) = (recall.clone(), tokio::runtime::Handle::current());
    std::thread::spawn(move || {
        runtime.block_on(saving.save_snapshot());
        let _ = saved.send(());
    });
    let ended = save_ended.recv_timeout(Duration::from_secs(10));
    drop(searching);
    assert!(ended.is_ok(), "the save waited for the search to end");
    let config = recall.read().hybrid.vectors().config().clone();
    assert_eq!(
        crate::VectorIndex::load(&snapshot, config).unwrap().0.len(),
        1
    );
    store.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saves_at_once_leave_one_whole_snapshot() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    let lines = boat_lines(40);
    fixture.say("s", "alice", &as_user_lines(&lines)).await;
    fixture.settle().await;
    let path = fixture._dir.path().join("vectors.idx");
    let config = fixture.recall.read().hybrid.vectors().config().clone();
    for round in 0..5 {
        // The pipeline's periodic save, an erasure's and a shutdown's may overlap.
        let saves: Vec<_> = (0..8)
            .map(|_| {
                let recall = fixture.recall.clone();
                tokio::spawn(async move { recall.try_save_snapshot().await })
            })
            .collect();
        for save in saves {
            save.await.unwrap().unwrap();
        }
        let (loaded, _) = crate::VectorIndex::load(&path, config.clone())
            .unwrap_or_else(|err| panic!("round {round}: {err}"));
        assert_eq!(loaded.len(), lines.len(), "round {round}");
        assert!(!fixture._dir.path().join("vectors.idx.tmp").exists());
    }
    fixture.stop().await;
}

/// Stores a seeded unit vector of `model.dimension` components for every message waiting to
/// be embedded, as the pipeline stores real ones.
async fn embed_pending_with_seeded_vectors(store: &Store, model: &EmbeddingModel, seed: u64) {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    loop {
        let pending = store.feed().pending_embeddings(64).unwrap();
        if pending.is_empty() {
            return;
        }
        let done = pending.iter().map(|entry| entry.seq).collect();
        let vectors = pending
            .iter()
            .flat_map(|entry| &entry.messages)
            .map(|(key, _)| {
                let raw: Vec<f32> = (0..model.dimension)
                    .map(|_| rng.random_range(-1.0..1.0))
                    .collect();
                let norm = raw.iter().map(|x| x * x).sum::<f32>().sqrt();
                (*key, raw.iter().map(|x| x / norm).collect())
            })
            .collect();
        store
            .feed()
            .store_embeddings(model.clone(), done, vectors)
            .await
            .unwrap();
    }
}

/// A batch the pipeline read before an erasure, and indexes after the erasure took its
/// messages out, puts none of them back: only what the store still has is added. Erasures
/// rely on this instead of waiting for the pipeline to catch up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_read_before_an_erasure_puts_nothing_erased_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
    let eraser = store.take_eraser().unwrap();
    // No pipeline runs: the test takes its steps itself.
    let recall = Recall::open(store.clone(), embedder(), RecallOptions::default()).unwrap();
    append(
        &store,
        "s",
        "alice",
        &[
            (Role::User, "my locker code is 4711"),
            (Role::User, "I like green tea"),
        ],
    )
    .await;
    let access = Access::tenant_wide("t");
    let sid = store.feed().session_key(&access, "s").unwrap().unwrap();
    let (erased, kept) = (MessageKey::new(sid, 0), MessageKey::new(sid, 1));

    // The pipeline reads its batch...
    let read_at = recall.erasures_begun();
    let batch = store.feed().pending_embeddings(64).unwrap();
    // ... a message is erased meanwhile, from the store and then from the indexes ...
    eraser.erase_message(&access, "s", 0).await.unwrap();
    recall.forget_message("t", erased).await.unwrap();
    // ... and then the pipeline indexes what it read.
    recall.index_texts(batch.iter(), read_at).unwrap();

    let indexes = recall.read();
    assert!(
        !indexes.holds(erased.as_u64()),
        "the erased message is back in the indexes"
    );
    assert!(indexes.holds(kept.as_u64()), "a stored message is missing");
    drop(indexes);
    drop(recall);
    store.shutdown();
}

#[tokio::test]
async fn a_stale_snapshot_keeps_its_graph_and_takes_the_stores_changes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
    let eraser = store.take_eraser().unwrap();
    let model = EmbeddingModel {
        name: "seeded".into(),
        sha256: "0".repeat(64),
        dimension: 8,
    };
    // A graph from 8 vectors on, so a few dozen messages make one.
    let config = VectorConfig {
        hnsw_threshold: 8,
        ..VectorConfig::new(8)
    };
    let path = dir.path().join("vectors.idx");
    let options = RecallOptions::default().with_snapshot(&path);
    let lines = boat_lines(60);
    append(&store, "s", "alice", &as_user_lines(&lines[..40])).await;
    embed_pending_with_seeded_vectors(&store, &model, 1).await;
    let (mut index, snapshot, _) = load_vectors(&store, &options, config.clone()).unwrap();
    assert_eq!(snapshot, SnapshotLoad::Absent, "no snapshot yet");
    index.build_graph();
    index
        .save(&path, store.feed().vectors_version().unwrap())
        .unwrap();

    // Then, before the next save, more messages are embedded and one is erased.
    append(&store, "s", "alice", &as_user_lines(&lines[40..])).await;
    embed_pending_with_seeded_vectors(&store, &model, 2).await;
    let sid = store
        .feed()
        .session_key(&Access::tenant_wide("t"), "s")
        .unwrap()
        .unwrap();
    let erased = MessageKey::new(sid, 3);
    let erased_vector = store
        .feed()
        .vectors(None, 1_000)
        .unwrap()
        .into_iter()
        .find(|vector| vector.key == erased)
        .unwrap()
        .components;
    eraser
        .erase_message(&Access::tenant_wide("t"), "s", 3)
        .await
        .unwrap();

    let (loaded, snapshot, _) = load_vectors(&store, &options, config).unwrap();
    assert_eq!(snapshot, SnapshotLoad::Stale);
    assert!(loaded.has_graph(), "the snapshot's graph was thrown away");
    assert!(
        loaded.needs_graph_work(),
        "the new vectors wait for the builder"
    );
    let mut ids: Vec<u64> = loaded.ids().collect();
    ids.sort_unstable();
    let mut stored: Vec<u64> = store
        .feed()
        .vectors(None, 1_000)
        .unwrap()
        .iter()
        .map(|vector| vector.key.as_u64())
        .collect();
    stored.sort_unstable();
    assert_eq!(ids, stored, "the index holds exactly the stored vectors");
    assert_eq!(ids.len(), 59);
    assert!(!loaded.contains(erased.as_u64()));
    assert_eq!(
        loaded.tombstones(),
        0,
        "the erased vector was compacted out"
    );
    assert!(
        loaded.search_exact(&erased_vector, 1, None).unwrap()[0].1 < 0.999,
        "the erased vector is still searchable"
    );
    store.shutdown();
}

#[tokio::test]
async fn an_erasure_whose_snapshot_save_fails_removes_the_snapshot() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    fixture
        .say("drop", "alice", &[(Role::User, "The alarm code is 9911.")])
        .await;
    fixture.settle().await;
    fixture.recall.try_save_snapshot().await.unwrap();
    let path = fixture._dir.path().join("vectors.idx");
    assert!(path.exists());
    // The next save cannot create its temporary file.
    let blocker = fixture._dir.path().join("vectors.idx.tmp");
    std::fs::create_dir(&blocker).unwrap();
    fixture.erase_session("drop").await;
    assert!(
        !path.exists(),
        "the snapshot holding the erased vector outlived the erasure"
    );
    std::fs::remove_dir(&blocker).unwrap();
    fixture.stop().await;
}

#[tokio::test]
async fn vectors_of_another_model_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
    store
        .sessions()
        .append(
            &Access::tenant_wide("t"),
            "s",
            Append {
                messages: vec![NewMessage {
                    role: Role::User,
                    content: "hello".into(),
                    token_count: 1,
                    timestamp: None,
                    metadata: Default::default(),
                }],
                create: Some(NewSession {
                    user_id: "u".into(),
                    agent_id: "a".into(),
                    ..NewSession::default()
                }),
                idempotency_key: None,
            },
        )
        .await
        .unwrap();
    let pending = store.feed().pending_embeddings(10).unwrap();
    let other = EmbeddingModel {
        name: "other".into(),
        sha256: "0".repeat(64),
        dimension: 384,
    };
    let mut vector = vec![0.0; 384];
    vector[0] = 1.0;
    store
        .feed()
        .store_embeddings(
            other,
            vec![pending[0].seq],
            vec![(pending[0].messages[0].0, vector)],
        )
        .await
        .unwrap();
    let opened = Recall::open(store, embedder(), RecallOptions::default());
    assert!(matches!(opened, Err(IndexError::ModelMismatch { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_check_finds_missing_and_orphaned_vectors() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    fixture
        .say(
            "s",
            "alice",
            &[
                (Role::User, "My parcel tracking number is TRK-5521."),
                (Role::Assistant, "Noted: TRK-5521."),
                (Role::User, "Please also book a table for Friday."),
                // The same text twice: each copy ties with the other, which still counts.
                (Role::User, "Please also book a table for Friday."),
            ],
        )
        .await;
    fixture.settle().await;
    let check = fixture.recall.check_index().unwrap();
    assert_eq!((check.stored, check.indexed), (4, 4));
    assert!(check.is_consistent(), "{check:?}");

    let sid = fixture
        .store
        .feed()
        .session_key(&Access::tenant_wide("t"), "s")
        .unwrap()
        .unwrap();
    let (dropped, foreign) = (MessageKey::new(sid, 1), MessageKey::new(sid + 1, 0));
    let vector = fixture
        .store
        .feed()
        .vectors(None, 1)
        .unwrap()
        .remove(0)
        .components;
    {
        let mut indexes = fixture.recall.write();
        indexes.hybrid.vectors_mut().remove(dropped.as_u64());
        let mut other = vector.clone();
        other.reverse();
        indexes
            .hybrid
            .vectors_mut()
            .insert(foreign.as_u64(), &other)
            .unwrap();
    }
    let check = fixture.recall.check_index().unwrap();
    assert_eq!(check.missing, [dropped]);
    assert_eq!(check.orphaned, [foreign]);
    assert!(check.unreachable.is_empty(), "{check:?}");
    assert!(!check.is_consistent());
    fixture.stop().await;
}

/// A shutdown with a large backlog stops after the batch in hand, not after the backlog: the
/// rest stays in the outbox for the next start.
#[tokio::test(flavor = "multi_thread")]
async fn a_shutdown_does_not_wait_for_the_backlog() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
    let recall = Recall::open(store.clone(), embedder(), RecallOptions::default()).unwrap();
    let batch = recall.inner.options.batch_messages;
    // Eight appends of a batch each: eight outbox entries, eight steps of the pipeline.
    for round in 0..8 {
        let texts: Vec<String> = (0..batch)
            .map(|n| format!("backlog line {round}-{n}"))
            .collect();
        let lines: Vec<(Role, &str)> = texts
            .iter()
            .map(|text| (Role::User, text.as_str()))
            .collect();
        append(&store, "s", "u", &lines).await;
    }
    let backlog = store.feed().pending_embedding_count().unwrap();

    // Asked to stop before it starts: it may index the batch in hand, never the backlog.
    recall.clone().run_pipeline(async {}).await;
    let left = store.feed().pending_embedding_count().unwrap();
    assert!(
        backlog == 8 && left >= 7,
        "{left} of {backlog} appends left"
    );
}

/// A recall behind the embedding backlog says so, and says the same however long the backlog
/// is: it is every tenant's, so its length would tell a user how much other tenants write.
#[tokio::test(flavor = "multi_thread")]
async fn a_recall_behind_the_backlog_tells_nothing_of_other_tenants_appends() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
    let options = RecallOptions {
        read_your_writes_wait: Duration::from_millis(50),
        ..RecallOptions::default()
    };
    // The pipeline never runs: every append stays in the backlog.
    let recall = Recall::open(store.clone(), embedder(), options).unwrap();
    append(
        &store,
        "s",
        "alice",
        &[(Role::User, "My parcel never arrived.")],
    )
    .await;
    let mut notes = Vec::new();
    for (round, others) in [1, 20].into_iter().enumerate() {
        for n in 0..others {
            let session = format!("o{round}-{n}");
            append_in(&store, "other", &session, "bob", &[(Role::User, "Busy.")]).await;
        }
        let recalled = recall.recall(query(user("alice"), "parcel")).await.unwrap();
        notes.push(recalled.degraded.expect("the backlog was not embedded"));
    }
    assert_eq!(notes[0], notes[1]);
    assert!(!notes[0].contains(char::is_numeric), "{}", notes[0]);
}

/// Alice's two messages of sessions "kept" and "erased", said to `fixture` and indexed.
async fn say_kept_and_erased(fixture: &Fixture) {
    fixture
        .say(
            "kept",
            "alice",
            &[(Role::User, "My parcel ORD-4711 never arrived.")],
        )
        .await;
    fixture
        .say(
            "erased",
            "alice",
            &[(Role::User, "Parcel ORD-4711 goes to zanzibarish street.")],
        )
        .await;
    fixture.settle().await;
}

/// [`say_kept_and_erased`], then the store stopped cleanly (its snapshot saved): the
/// store's directory and the embedder.
async fn kept_and_erased_said() -> (tempfile::TempDir, Embedder) {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    say_kept_and_erased(&fixture).await;
    fixture.stop().await
}

/// Opened with its keywords in the background and a snapshot without them (none, or one of
/// a release before keywords were saved), recall answers before the backfill (by meaning,
/// saying what is missing), by keywords too once it ran, and a session erased before the
/// backfill does not come back into the keyword index with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keywords_backfilled_after_the_start_never_bring_back_an_erased_text() {
    let (dir, embedder) = kept_and_erased_said().await;
    std::fs::remove_file(dir.path().join("vectors.idx")).unwrap();

    let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
    let mut options = RecallOptions::default()
        .with_snapshot(dir.path().join("vectors.idx"))
        .with_keywords_in_background();
    options.read_your_writes_wait = Duration::from_millis(100);
    let recall = Recall::open(store.clone(), embedder, options).unwrap();
    let before = recall
        .recall(query(user("alice"), "ORD-4711"))
        .await
        .unwrap();
    assert!(
        before
            .degraded
            .as_deref()
            .is_some_and(|why| why.contains("keyword index")),
        "{before:?}"
    );
    assert!(before.hits.iter().all(|hit| hit.keyword_rank.is_none()));
    assert_eq!(before.hits.len(), 2, "found by meaning meanwhile");

    // A backfill page read before an erasure and added after it adds nothing erased.
    let page_read_before = store.feed().all_messages(None, 10).unwrap();
    assert_eq!(page_read_before.len(), 2);
    let eraser = store.take_eraser().unwrap();
    let all = Access::tenant_wide("t");
    let erased = eraser.delete_session(&all, "erased").await.unwrap();
    recall.forget_sessions("t", vec![erased.sid]).await.unwrap();
    recall.backfill_page(&page_read_before);
    let alices = alices_keywords();
    assert!(
        recall
            .read()
            .hybrid
            .keywords()
            .search(&alices, "zanzibarish", 10, None)
            .is_empty()
    );
    let (stop, stopped) = oneshot::channel::<()>();
    let pipeline = tokio::spawn(recall.clone().run_pipeline(async {
        let _ = stopped.await;
    }));
    // Each wait is bounded by the short read-your-writes wait above.
    let mut waits = 0;
    while recall.wait_for_index().await.unwrap().is_some() {
        waits += 1;
        assert!(waits < 100, "the backfill did not finish");
    }
    let after = recall
        .recall(query(user("alice"), "ORD-4711 zanzibarish"))
        .await
        .unwrap();
    assert_eq!(after.degraded, None);
    assert_eq!(contents(&after), ["My parcel ORD-4711 never arrived."]);
    assert_eq!(after.hits[0].keyword_rank, Some(1));
    {
        let indexes = recall.read();
        for (key, message) in &page_read_before {
            let kept = message.content.starts_with("My parcel");
            assert_eq!(
                indexes.hybrid.keywords().contains(&alices, key.as_u64()),
                kept
            );
        }
        assert!(
            indexes
                .hybrid
                .keywords()
                .search(&alices, "zanzibarish", 10, None)
                .is_empty()
        );
    }
    let _ = stop.send(());
    pipeline.await.unwrap();
    drop(recall);
    store.shutdown();
}

/// A start serves keyword recall from the snapshot's keyword section at once, without a
/// backfill; a message erased from the store after that snapshot was saved (a crash before
/// the erasure's rewrite of it) is not served from it, and the next save leaves its words
/// out of the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_serves_the_snapshots_keywords_but_none_erased_since() {
    let (dir, embedder) = kept_and_erased_said().await;
    let snapshot = dir.path().join("vectors.idx");
    let holds_stem = |path: &Path| holds_the_stem(path, "zanzibarish");
    assert!(holds_stem(&snapshot), "the control: the stem was saved");

    // The store erases; the process dies before the indexes and the snapshot follow.
    let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
    let all = Access::tenant_wide("t");
    store
        .take_eraser()
        .unwrap()
        .delete_session(&all, "erased")
        .await
        .unwrap();
    store.shutdown();
    drop(store);

    let store = Store::open(dir.path().join("memlayer.redb")).unwrap();
    let options = RecallOptions::default()
        .with_snapshot(&snapshot)
        .with_keywords_in_background();
    let recall = Recall::open(store.clone(), embedder, options).unwrap();
    assert!(
        !recall.keywords_pending(),
        "every text came from the snapshot"
    );
    let alices = alices_keywords();
    {
        let indexes = recall.read();
        let keywords = indexes.hybrid.keywords();
        assert_eq!(keywords.documents(), 1);
        assert!(keywords.search(&alices, "zanzibarish", 10, None).is_empty());
    }
    let recalled = recall
        .recall(query(user("alice"), "ORD-4711 zanzibarish"))
        .await
        .unwrap();
    assert_eq!(recalled.degraded, None);
    assert_eq!(contents(&recalled), ["My parcel ORD-4711 never arrived."]);
    assert_eq!(recalled.hits[0].keyword_rank, Some(1));
    recall.try_save_snapshot().await.unwrap();
    assert!(
        !holds_stem(&snapshot),
        "an erased text's stem left in the file"
    );
    drop(recall);
    store.shutdown();
}

/// Whether the file at `path` holds the stem of `word` (a single word) in its bytes.
fn holds_the_stem(path: &Path, word: &str) -> bool {
    let stems = crate::Analyzer::default().tokens(word);
    let [stem] = stems.as_slice() else {
        panic!("one stem: {stems:?}")
    };
    let bytes = std::fs::read(path).unwrap();
    bytes
        .windows(stem.len())
        .any(|window| window == stem.as_bytes())
}

/// An erasure's save leaves the keyword section out, so that its receipt waits for the
/// vectors only, and leaves the index to be saved again: the next save writes the keywords,
/// the erased words not among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasures_save_leaves_the_keywords_to_the_next_save() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    say_kept_and_erased(&fixture).await;
    fixture.recall.try_save_snapshot().await.unwrap();
    let snapshot = fixture._dir.path().join("vectors.idx");
    let dirty = || {
        fixture
            .recall
            .read()
            .dirty
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert!(holds_the_stem(&snapshot, "parcel") && holds_the_stem(&snapshot, "zanzibarish"));
    assert!(!dirty());

    fixture.erase_session("erased").await;
    assert!(!holds_the_stem(&snapshot, "zanzibarish"));
    assert!(!holds_the_stem(&snapshot, "parcel"), "no keyword section");
    assert!(dirty(), "the keywords wait for the next save");
    fixture.recall.try_save_snapshot().await.unwrap();
    assert!(holds_the_stem(&snapshot, "parcel"));
    assert!(!holds_the_stem(&snapshot, "zanzibarish"));
    assert!(!dirty());
    fixture.stop().await;
}

/// The keyword hits of `text` in tenant `t`'s `scope`, as a recall's search makes them (its
/// filter reduced to the scope's sessions), and every message the keyword index offered to
/// that filter: each one it scored.
fn keyword_hits(recall: &Recall, scope: Scope, text: &str) -> (Vec<(u64, f32)>, Vec<u64>) {
    let query = query(scope, text);
    let filter = recall.filter(&query).unwrap();
    let scored = std::cell::RefCell::new(Vec::new());
    let admits = |id: u64| {
        scored.borrow_mut().push(id);
        filter.allowed.contains(&MessageKey::from_u64(id).session())
    };
    let hits = match &filter.keywords {
        Some(partition) => {
            recall
                .read()
                .hybrid
                .keywords()
                .search(partition, &query.query, 100, Some(&admits))
        }
        None => Vec::new(),
    };
    (hits, scored.into_inner())
}

/// Alice's messages in tenant `t`: one about her boat, two about an invoice.
async fn alice_says(fixture: &Fixture) {
    fixture
        .say(
            "a1",
            "alice",
            &[
                (
                    Role::User,
                    "The boat needs a new sail before the boat race; the boat is old.",
                ),
                (
                    Role::User,
                    "The invoice for the harbour berth is due on Monday.",
                ),
            ],
        )
        .await;
    fixture
        .say(
            "a2",
            "alice",
            &[(Role::Assistant, "I noted the berth invoice.")],
        )
        .await;
}

/// `count` messages about boats, as appended by someone else.
fn boat_lines(count: usize) -> Vec<String> {
    (0..count)
        .map(|n| format!("My boat number {n} is moored in the harbour."))
        .collect()
}

fn as_user_lines(texts: &[String]) -> Vec<(Role, &str)> {
    texts
        .iter()
        .map(|text| (Role::User, text.as_str()))
        .collect()
}

/// BM25's statistics are the user's own: messages of another tenant (of a user with the
/// same id there) and of another user of the tenant, full of the query's words, change
/// neither a user's keyword scores nor their order, and the user's query scores none of
/// them. With one index for every tenant they did (the idf was global): a tenant could tell
/// from its own scores how common a word was in other tenants' messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyword_scores_are_the_users_own() {
    let fixture = Fixture::open(tempfile::tempdir().unwrap(), embedder());
    alice_says(&fixture).await;
    fixture.settle().await;
    let sid = |session: &str| {
        fixture
            .store
            .feed()
            .session_key(&Access::tenant_wide("t"), session)
            .unwrap()
            .unwrap()
    };
    let alices = [sid("a1"), sid("a2")];
    let only_alices = |scored: &[u64]| {
        !scored.is_empty()
            && scored
                .iter()
                .all(|&id| alices.contains(&MessageKey::from_u64(id).session()))
    };
    let ask = |scope| keyword_hits(&fixture.recall, scope, "boat invoice");
    let (by_user, _) = ask(user("alice"));
    let (in_session, _) = ask(session("a1"));
    assert_eq!(by_user.len(), 3, "{by_user:?}");
    assert_eq!(in_session.len(), 2, "{in_session:?}");

    let boats = boat_lines(40);
    for (tenant, session_id, whose) in [("u", "u1", "alice"), ("t", "b1", "bob")] {
        append_in(
            &fixture.store,
            tenant,
            session_id,
            whose,
            &as_user_lines(&boats),
        )
        .await;
        fixture.settle().await;
        for (scope, alone) in [(user("alice"), &by_user), (session("a1"), &in_session)] {
            let (hits, scored) = ask(scope.clone());
            assert_eq!(&hits, alone, "{scope:?} beside {whose} of {tenant}");
            assert!(
                only_alices(&scored),
                "{scope:?} beside {whose} of {tenant} scored {scored:?}"
            );
        }
    }
    fixture.stop().await;
}

/// A user's recall ranks their messages the same, by keywords and fused, whether or not the
/// store holds many messages of other users and tenants with the query's words: two stores
/// with the same messages of Alice, one with 80 messages about boats beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_ranking_ignores_other_users_messages() {
    let ranked = |recalled: Recalled| -> Vec<(String, u64, Option<u32>, Option<u32>)> {
        recalled
            .hits
            .into_iter()
            .map(|hit| {
                (
                    hit.session.session_id,
                    hit.message.index,
                    hit.keyword_rank,
                    hit.vector_rank,
                )
            })
            .collect()
    };
    let ask = RecallQuery {
        k: 10,
        ..query(user("alice"), "boat invoice")
    };
    let embedder = embedder();

    let alone = Fixture::open(tempfile::tempdir().unwrap(), embedder.clone());
    alice_says(&alone).await;
    alone.settle().await;
    let by_alice_alone = ranked(alone.recall.recall(ask.clone()).await.unwrap());
    alone.stop().await;
    assert_eq!(by_alice_alone.len(), 3, "{by_alice_alone:?}");

    let shared = Fixture::open(tempfile::tempdir().unwrap(), embedder);
    alice_says(&shared).await;
    // Alice's messages are embedded on their own, as in the first store.
    shared.settle().await;
    let boats = boat_lines(40);
    shared.say("b1", "bob", &as_user_lines(&boats)).await;
    append_in(&shared.store, "u", "c1", "carol", &as_user_lines(&boats)).await;
    shared.settle().await;
    let by_alice_among_others = ranked(shared.recall.recall(ask).await.unwrap());
    shared.stop().await;
    assert_eq!(by_alice_among_others, by_alice_alone);
}
